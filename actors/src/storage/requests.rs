//! A conversation's request journal, `requests.jsonl`: which submitted requests were
//! acknowledged and have not been closed yet, so a crash never forgets one silently.
//!
//! One JSON record per line, appended through the [`LogWriter`](super::log_writer::LogWriter):
//! - `{"accepted":{…}}` before `submitCommand` answers `{ok:true}` (the answer waits for it to
//!   be durable);
//! - `{"started":{"requestId","seq"}}` when the request starts; `seq` is its `user-request`
//!   entry in the display log;
//! - `{"closed":{"requestId"}}` once its `command-result` is durable, or when it is cancelled.
//!
//! On load, [`read_open`] gives the requests accepted and never closed: the conversation writes
//! a failed `command-result` for each (after its `user-request` when it never started), unless
//! the display log already holds its result. The file is rewritten with only the open records
//! once more than [`COMPACT_AFTER_BYTES`] were appended, so it stays small. Owned by the
//! [`Conversation`](crate::conversation::Conversation) actor.

use std::io::{self, BufRead, BufReader};
use std::path::Path;

use crate::ids::{ConnectionId, RequestId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// File name inside the conversation directory.
pub const FILE_NAME: &str = "requests.jsonl";
/// Bytes appended before the journal is rewritten with only its open records.
pub const COMPACT_AFTER_BYTES: u64 = 64 * 1024;

/// What was acknowledged to the submitter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedRequest {
    /// Server-side request id.
    pub request_id: RequestId,
    /// Originator's connection id.
    pub connection_id: ConnectionId,
    /// The client's opaque id, echoed in `RequestId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<Value>,
    /// The command text.
    pub command: String,
    /// ms since epoch.
    pub submitted_at: u64,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Record {
    /// Acknowledged to the submitter.
    Accepted(AcceptedRequest),
    /// Started; its `user-request` entry has this seq.
    #[serde(rename_all = "camelCase")]
    Started {
        /// The request.
        request_id: RequestId,
        /// Seq of its `user-request` entry.
        seq: u64,
    },
    /// Finished (result durable) or cancelled.
    #[serde(rename_all = "camelCase")]
    Closed {
        /// The request.
        request_id: RequestId,
    },
}

impl Record {
    /// The line to append, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).expect("record serializes");
        out.push(b'\n');
        out
    }
}

/// A request accepted and not closed.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    /// What was accepted.
    pub accepted: AcceptedRequest,
    /// Seq of its `user-request` entry, once started.
    pub started_seq: Option<u64>,
}

impl OpenRequest {
    /// The records that describe this request as open (for a compacted journal).
    pub fn records(&self) -> Vec<u8> {
        let mut out = Record::Accepted(self.accepted.clone()).line();
        if let Some(seq) = self.started_seq {
            out.extend(
                Record::Started {
                    request_id: self.accepted.request_id.clone(),
                    seq,
                }
                .line(),
            );
        }
        out
    }
}

/// Parses journal text: the open requests in acceptance order. Lines that do not parse (a torn
/// last line after a crash) are skipped with a warning naming `origin`.
pub fn parse_open(reader: impl BufRead, origin: &Path) -> Vec<OpenRequest> {
    let mut open: Vec<OpenRequest> = Vec::new();
    for (n, line) in reader.split(b'\n').enumerate() {
        let Ok(line) = line else { break };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(Record::Accepted(accepted)) => {
                if !open
                    .iter()
                    .any(|o| o.accepted.request_id == accepted.request_id)
                {
                    open.push(OpenRequest {
                        accepted,
                        started_seq: None,
                    });
                }
            }
            Ok(Record::Started { request_id, seq }) => {
                if let Some(o) = open
                    .iter_mut()
                    .find(|o| o.accepted.request_id == request_id)
                {
                    o.started_seq = Some(seq);
                }
            }
            Ok(Record::Closed { request_id }) => {
                open.retain(|o| o.accepted.request_id != request_id);
            }
            Err(e) => log::warn!(
                "{}: line {} skipped (torn or unreadable): {e}",
                origin.display(),
                n + 1
            ),
        }
    }
    open
}

/// The open requests of the journal at `path` (none when it does not exist).
pub fn read_open(path: &Path) -> io::Result<Vec<OpenRequest>> {
    match std::fs::File::open(path) {
        Ok(f) => Ok(parse_open(BufReader::new(f), path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: &str) -> Record {
        Record::Accepted(AcceptedRequest {
            request_id: id.into(),
            connection_id: ConnectionId(0),
            client_request_id: Some("c".into()),
            command: format!("cmd {id}"),
            submitted_at: 1,
        })
    }

    #[test]
    fn open_requests_survive_torn_lines_and_closes() {
        let mut text = Vec::new();
        text.extend(accepted("a").line());
        text.extend(accepted("b").line());
        text.extend(
            Record::Started {
                request_id: "a".into(),
                seq: 7,
            }
            .line(),
        );
        text.extend(accepted("c").line());
        text.extend(
            Record::Closed {
                request_id: "b".into(),
            }
            .line(),
        );
        text.extend(b"{\"closed\":{\"requ");
        let open = parse_open(&text[..], Path::new("t"));
        let ids: Vec<_> = open
            .iter()
            .map(|o| o.accepted.request_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(open[0].started_seq, Some(7));
        assert_eq!(open[1].started_seq, None);
        // A compacted journal says the same.
        let compacted: Vec<u8> = open.iter().flat_map(OpenRequest::records).collect();
        assert_eq!(parse_open(&compacted[..], Path::new("t")), open);
    }
}
