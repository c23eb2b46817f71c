//! `ConversationInfo` and `findConversations` results as clients see them (reference
//! section 3). Built by the registry's catalog.

use serde::Serialize;

use crate::ids::ConversationId;

/// One conversation as listed to clients (`ConversationInfo` in the reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfo {
    /// Written lower-case hyphenated.
    pub conversation_id: ConversationId,
    /// The name exactly as stored (untrimmed).
    pub name: String,
    /// Clients joined right now (0 when not loaded).
    pub client_count: usize,
    /// ISO-8601 with milliseconds, UTC (`new Date().toISOString()`).
    pub created_at: String,
    /// Number of `user-request` entries in the display log.
    pub message_count: u64,
    /// Present in list/find results, absent in create results. Always 0: TypeAgent counts the
    /// messages of its conversation memory here, which Roundtable does not have (content
    /// search keeps its own index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed_message_count: Option<u64>,
}

/// [`ConversationInfo`] borrowing its strings, for serializing long lists without copies.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfoRef<'a> {
    /// Written lower-case hyphenated.
    pub conversation_id: ConversationId,
    /// Name as stored.
    pub name: &'a str,
    /// Clients joined right now.
    pub client_count: usize,
    /// ISO-8601.
    pub created_at: &'a str,
    /// `user-request` entries.
    pub message_count: u64,
    /// Present in list/find results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed_message_count: Option<u64>,
}

impl ConversationInfoRef<'_> {
    /// Appends the JSON object to `out`, byte for byte what `serde_json::to_writer` writes
    /// (the same keys in the same order, the same escapes), without going through a
    /// serializer: a 10,000-entry `listConversations` answer is built this way at about a
    /// third of serde's cost (the id is hex-encoded in place rather than formatted through
    /// `Display`, and a string with nothing to escape is copied whole).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"conversationId\":\"");
        let mut id = uuid::Uuid::encode_buffer();
        out.extend_from_slice(
            self.conversation_id
                .as_uuid()
                .hyphenated()
                .encode_lower(&mut id)
                .as_bytes(),
        );
        out.extend_from_slice(b"\",\"name\":");
        write_json_string(out, self.name);
        out.extend_from_slice(b",\"clientCount\":");
        write_json_number(out, self.client_count as u64);
        out.extend_from_slice(b",\"createdAt\":");
        write_json_string(out, self.created_at);
        out.extend_from_slice(b",\"messageCount\":");
        write_json_number(out, self.message_count);
        if let Some(indexed) = self.indexed_message_count {
            out.extend_from_slice(b",\"indexedMessageCount\":");
            write_json_number(out, indexed);
        }
        out.push(b'}');
    }
}

/// `text` as a JSON string: copied between quotes when nothing in it needs an escape (a
/// quote, a backslash, a control character: all serde_json escapes), else written by
/// serde_json itself.
fn write_json_string(out: &mut Vec<u8>, text: &str) {
    if text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        serde_json::to_writer(out, text).expect("a string serializes");
    } else {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// `n` in decimal.
fn write_json_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

/// `n` in decimal ASCII, written at the end of `digits`: the digits' slice of it. For
/// writers that put numbers between prepared parts (this module's objects, the socket
/// writer's spliced calls).
pub fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[start..]
}

/// One `findConversations` hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1, best first.
    pub score: f64,
}

/// One `searchConversationContent` hit (`ConversationContentMatch` in the reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1, best first.
    pub score: f64,
    /// The best passages, `"user: …"` / `"agent: …"`, matched words in `**…**`.
    pub snippets: Vec<String>,
    /// Roundtable extension: the seq of the best passage's display-log entry (the
    /// `user-request`, or the `command-result` ending the output), for opening the
    /// conversation there. Absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written object is serde's, byte for byte, whatever the name holds.
    #[test]
    fn write_json_is_what_serde_writes() {
        let names = [
            "",
            "plain",
            "a quote \" alone",
            "a backslash \\ alone",
            "a control \u{1} alone",
            "controls \u{0} \u{1f} \n \t \r \u{8} \u{c}",
            "del \u{7f}, separators \u{2028} \u{2029}, accents é, emoji 🦀",
            "</script>",
        ];
        let mut i = 0u64;
        for name in names {
            for (clients, count, indexed) in [
                (0, 0, None),
                (7, 12_345, Some(0)),
                (usize::MAX, u64::MAX, Some(u64::MAX)),
            ] {
                i += 1;
                let info = ConversationInfoRef {
                    conversation_id: ConversationId::parse(&format!(
                        "0a1b2c3d-4e5f-4a6b-8c7d-{i:012x}"
                    ))
                    .unwrap(),
                    name,
                    client_count: clients,
                    created_at: "2026-12-05T10:00:00.000Z",
                    message_count: count,
                    indexed_message_count: indexed,
                };
                let mut ours = Vec::new();
                info.write_json(&mut ours);
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    serde_json::to_string(&info).unwrap()
                );
            }
        }
    }
}
