//! What of a display log is searchable: each user request's text, and each request's agent
//! output (every `append-display` / `set-display` of that request, joined) once its
//! `command-result` closes it. The same [`TurnCollector`] reads entries as the conversation
//! writes them (the live path) and as a scan reads them back from a file (catch-up and
//! rebuild), so both paths index exactly the same documents.

use serde_json::Value;

/// A document is cut at this many bytes: one huge output cannot grow the index or the
/// collector without bound.
pub const MAX_DOC_BYTES: usize = 64 * 1024;

/// Which side of a turn a document holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// The user's request (`user-request`'s `command`).
    Request,
    /// The agent's output for one request.
    Output,
}

impl DocKind {
    /// Stored form.
    pub fn code(self) -> i64 {
        match self {
            DocKind::Request => 0,
            DocKind::Output => 1,
        }
    }
}

/// One searchable document of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    /// Seq of the entry that completed it (the `user-request`, or the `command-result`).
    pub seq: u64,
    /// Request or output.
    pub kind: DocKind,
    /// The text (never empty).
    pub text: String,
}

/// What one entry settled, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Observed {
    /// Nothing closed: the entry is mid-turn, or not searchable.
    Nothing,
    /// A point everything up to which is indexed once `doc` (if any) is: a `user-request`
    /// or a `command-result`.
    Settled {
        /// The seq of that entry.
        seq: u64,
        /// The document it completed (`None`: a request without text, an output without any).
        doc: Option<Doc>,
    },
}

/// Follows one conversation's entries in seq order and cuts them into [`Doc`]s. Holds at
/// most one request's output ([`MAX_DOC_BYTES`]).
#[derive(Debug, Default)]
pub struct TurnCollector {
    /// The `requestId` object of the request whose output is being gathered, and the text so
    /// far.
    current: Option<(Value, String)>,
}

impl TurnCollector {
    /// Feeds the entry with `seq`.
    pub fn observe(&mut self, seq: u64, entry: &Value) -> Observed {
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        let request_id = entry.get("requestId").cloned().unwrap_or(Value::Null);
        match kind {
            "user-request" => {
                self.current = Some((request_id, String::new()));
                let mut text = String::new();
                collect_text(entry.get("command").unwrap_or(&Value::Null), &mut text);
                Observed::Settled {
                    seq,
                    doc: doc(seq, DocKind::Request, text),
                }
            }
            "append-display" | "set-display" => {
                let message = entry.get("message");
                let content = message
                    .and_then(|m| m.get("message"))
                    .unwrap_or(&Value::Null);
                // The display entries carry the request inside their agent message
                // (`{message: {message, requestId, source}, mode}`).
                let request_id = message
                    .and_then(|m| m.get("requestId"))
                    .cloned()
                    .unwrap_or(request_id);
                // An agent thread's output (`requestId: ""`) belongs to no turn: it must not
                // cut the running turn's output in two.
                if request_id.get("requestId").and_then(Value::as_str) == Some("") {
                    return Observed::Nothing;
                }
                let current = match &mut self.current {
                    Some((id, text)) if *id == request_id => text,
                    _ => {
                        self.current = Some((request_id, String::new()));
                        &mut self.current.as_mut().expect("just set").1
                    }
                };
                if kind == "set-display" {
                    current.clear();
                } else if !current.is_empty() && !current.ends_with('\n') {
                    current.push('\n');
                }
                collect_text(content, current);
                Observed::Nothing
            }
            "command-result" => {
                let text = match self.current.take() {
                    Some((id, text)) if id == request_id => text,
                    _ => String::new(),
                };
                Observed::Settled {
                    seq,
                    doc: doc(seq, DocKind::Output, text),
                }
            }
            _ => Observed::Nothing,
        }
    }
}

/// A document of `text`, if it holds anything to find.
fn doc(seq: u64, kind: DocKind, text: String) -> Option<Doc> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    let text = if trimmed.len() == text.len() {
        text
    } else {
        trimmed.to_string()
    };
    Some(Doc { seq, kind, text })
}

/// Appends the text a display message shows: a string, an array of strings (or of rows), or
/// `{type, content}` (HTML loses its tags). Stops at [`MAX_DOC_BYTES`].
pub fn collect_text(value: &Value, out: &mut String) {
    if out.len() >= MAX_DOC_BYTES {
        return;
    }
    match value {
        Value::String(s) => push_capped(out, s),
        Value::Array(items) => {
            for item in items {
                if !out.is_empty() && !out.ends_with(['\n', ' ']) {
                    out.push(' ');
                }
                collect_text(item, out);
            }
        }
        Value::Object(map) => {
            let html = map.get("type").and_then(Value::as_str) == Some("html");
            if let Some(content) = map.get("content") {
                if html {
                    let mut raw = String::new();
                    collect_text(content, &mut raw);
                    push_capped(out, &strip_tags(&raw));
                } else {
                    collect_text(content, out);
                }
            }
        }
        _ => {}
    }
}

/// Appends `s`, cut at a character boundary so `out` stays within [`MAX_DOC_BYTES`].
fn push_capped(out: &mut String, s: &str) {
    let room = MAX_DOC_BYTES.saturating_sub(out.len());
    if s.len() <= room {
        out.push_str(s);
    } else {
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push_str(&s[..cut]);
    }
}

/// The text of an HTML fragment: tags become spaces (entities are left as they are).
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_turn_gives_its_request_then_its_output() {
        let mut c = TurnCollector::default();
        let rid = json!({"requestId": "r1"});
        let got = c.observe(
            0,
            &json!({"type": "user-request", "requestId": rid, "command": "what time is it"}),
        );
        assert_eq!(
            got,
            Observed::Settled {
                seq: 0,
                doc: Some(Doc {
                    seq: 0,
                    kind: DocKind::Request,
                    text: "what time is it".into()
                })
            }
        );
        assert_eq!(
            c.observe(
                1,
                &json!({"type": "append-display", "requestId": rid,
                        "message": {"message": "It is", "requestId": rid}})
            ),
            Observed::Nothing
        );
        c.observe(
            2,
            &json!({"type": "append-display", "requestId": rid,
                    "message": {"message": {"type": "markdown", "content": ["noon", "in **Zürich**"]}}}),
        );
        c.observe(3, &json!({"type": "notify", "requestId": rid}));
        let Observed::Settled { seq, doc } =
            c.observe(4, &json!({"type": "command-result", "requestId": rid}))
        else {
            panic!("command-result settles")
        };
        assert_eq!(seq, 4);
        let doc = doc.expect("output");
        assert_eq!(doc.kind, DocKind::Output);
        assert_eq!(doc.text, "It is\nnoon in **Zürich**");
    }

    #[test]
    fn set_display_replaces_html_loses_tags_and_docs_are_capped() {
        let mut c = TurnCollector::default();
        let rid = json!({"requestId": "r"});
        c.observe(
            0,
            &json!({"type": "append-display", "requestId": rid, "message": {"message": "draft"}}),
        );
        c.observe(
            1,
            &json!({"type": "set-display", "requestId": rid,
                    "message": {"message": {"type": "html", "content": "<b>final</b> answer"}}}),
        );
        let Observed::Settled { doc: Some(doc), .. } =
            c.observe(2, &json!({"type": "command-result", "requestId": rid}))
        else {
            panic!("an output")
        };
        assert_eq!(doc.text, "final  answer");

        let mut out = String::new();
        let big = "é".repeat(MAX_DOC_BYTES);
        collect_text(&json!(big), &mut out);
        assert!(out.len() <= MAX_DOC_BYTES && out.len() > MAX_DOC_BYTES - 2);
    }

    #[test]
    fn an_agent_thread_does_not_cut_a_turn() {
        let mut c = TurnCollector::default();
        let rid = json!({"requestId": "r"});
        let thread = json!({"requestId": "", "clientRequestId": "agent-phone-1"});
        let show = |rid: &Value, text: &str| json!({"type": "append-display", "message": {"message": text, "requestId": rid}, "mode": "block"});
        c.observe(
            1,
            &json!({"type": "user-request", "requestId": rid, "command": "q"}),
        );
        assert_eq!(c.observe(2, &show(&rid, "first")), Observed::Nothing);
        assert_eq!(c.observe(3, &show(&thread, "ring")), Observed::Nothing);
        assert_eq!(c.observe(4, &show(&rid, "second")), Observed::Nothing);
        let Observed::Settled { doc: Some(doc), .. } =
            c.observe(5, &json!({"type": "command-result", "requestId": rid}))
        else {
            panic!("an output")
        };
        assert_eq!(doc.text, "first\nsecond");
    }

    #[test]
    fn empty_sides_settle_without_a_document() {
        let mut c = TurnCollector::default();
        let rid = json!({"requestId": "r"});
        assert_eq!(
            c.observe(
                5,
                &json!({"type": "user-request", "requestId": rid, "command": "  "})
            ),
            Observed::Settled { seq: 5, doc: None }
        );
        assert_eq!(
            c.observe(6, &json!({"type": "command-result", "requestId": rid})),
            Observed::Settled { seq: 6, doc: None }
        );
    }
}
