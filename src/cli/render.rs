//! How server data reads in a terminal: [`terminal_safe`] (every server-supplied string passes
//! through it before it is printed), display content and agent messages, replayed history
//! entries ([`HistoryReader`], which reads a replayed answer as the label chosen),
//! `manage-conversation` results and the `conversations list` table. Pure functions (and the
//! reader's memory of the questions it has shown); used by every subcommand.

use roundtable_actors::conversation::commands;
use serde_json::Value;

use crate::client::conversation::ActionResult;
use crate::client::{ContentMatch, ConversationInfo};

/// `text` made safe for a terminal: C0 and C1 control characters other than newline and tab
/// (ESC starts sequences that set the window title, write the clipboard, move the cursor…)
/// and DEL are shown escaped (`\u{1b}`), never sent raw. Every string the server supplies
/// (names, messages, errors, questions) passes through here before it is printed.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char =
        |c: char| (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c);
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Text of a `DisplayContent`.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(rows) if rows.iter().all(Value::is_array) => rows
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(content_text)
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Array(items) => items
            .iter()
            .map(content_text)
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => o.get("content").map(content_text).unwrap_or_default(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One line (or block) for an `IAgentMessage`.
pub fn render_message(message: &Value) -> String {
    if message["requestId"]["requestId"] == "system" {
        return content_text(&message["message"]);
    }
    if let Some(call) = message.get("toolCall") {
        return format!(
            "  [tool] {}({})",
            call["name"].as_str().unwrap_or("?"),
            call["input"]
        );
    }
    if let Some(result) = message.get("toolResult") {
        let mark = if result["isError"] == true {
            "error"
        } else {
            "result"
        };
        return format!("  [{mark}] {}", result["content"].as_str().unwrap_or(""));
    }
    let text = content_text(&message["message"]);
    match message["message"]["kind"].as_str() {
        Some("error") => format!("error: {text}"),
        Some("warning") => format!("warning: {text}"),
        _ => text,
    }
}

/// A piece of an answer being written (an `inline` display): its words and whether they are
/// the model's thinking.
pub fn stream_piece(message: &Value) -> (String, bool) {
    (
        content_text(&message["message"]),
        message["thinking"] == true,
    )
}

/// `text` (already made terminal-safe) dim, as the model's thinking is shown.
pub fn dim(text: &str) -> String {
    format!("\x1b[2m{text}\x1b[22m")
}

/// Pieces of answers being written, shown a line at a time where output is printed in whole
/// lines (above the prompt): each piece gives the lines it completes; [`StreamLines::flush`]
/// gives the unfinished one when something else is printed or the answer ends.
#[derive(Debug, Default)]
pub struct StreamLines {
    /// The unfinished line, and whether it is thinking.
    partial: String,
    /// Whether `partial` is thinking.
    thinking: bool,
}

impl StreamLines {
    /// The lines `piece` completes (terminal-safe, thinking dim).
    pub fn piece(&mut self, piece: &str, thinking: bool) -> Vec<String> {
        let mut done = Vec::new();
        if thinking != self.thinking {
            done.extend(self.flush());
            self.thinking = thinking;
        }
        self.partial.push_str(piece);
        while let Some(at) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=at).collect();
            done.push(self.shown(line.trim_end_matches('\n')));
        }
        done
    }

    /// The unfinished line, if any (terminal-safe, thinking dim).
    pub fn flush(&mut self) -> Option<String> {
        if self.partial.is_empty() {
            return None;
        }
        let line = std::mem::take(&mut self.partial);
        Some(self.shown(&line))
    }

    /// `line` as printed.
    fn shown(&self, line: &str) -> String {
        let safe = terminal_safe(line);
        if self.thinking {
            dim(&safe)
        } else {
            safe.into_owned()
        }
    }
}

/// "cancelled", with why when a client did not ask for it: `requestCancelled`'s reason is
/// TypeAgent's `QueueCancelReason`, `user` for every cancel a client asked for
/// (`cancelled: no clients`, `cancelled: server stopping` otherwise).
pub fn cancelled_text(reason: &str) -> String {
    match reason {
        "user" | "" => "cancelled".into(),
        other => format!("cancelled: {}", other.replace('_', " ")),
    }
}

/// Reads replayed display-log entries. It remembers the interactions it has shown, so a
/// resolved one reads as its answer (the chosen label), not as the raw response value an
/// `interaction-resolved` entry carries. One per conversation shown (a switch starts anew).
#[derive(Debug, Default)]
pub struct HistoryReader {
    /// `pending-interaction` entries seen, by interaction id: what their answers mean.
    asked: std::collections::HashMap<String, Value>,
}

impl HistoryReader {
    /// How one entry reads (`None`: not shown). `my_connection` tells our own requests from
    /// other clients'.
    pub fn entry(&mut self, entry: &Value, my_connection: &str) -> Option<String> {
        match entry["type"].as_str()? {
            "pending-interaction" => {
                if let Some(id) = entry["interactionId"].as_str() {
                    self.asked.insert(id.to_string(), entry.clone());
                }
                Some(question_line(entry))
            }
            "interaction-resolved" => {
                let asked = entry["interactionId"]
                    .as_str()
                    .and_then(|id| self.asked.get(id));
                Some(format!(
                    "  -> {}",
                    answer_text(asked, entry.get("response"))
                ))
            }
            _ => render_history_entry(entry, my_connection),
        }
    }
}

/// A replayed question, form or proposed action.
fn question_line(entry: &Value) -> String {
    match entry["interactionType"].as_str() {
        Some("form") => {
            let prompts: Vec<&str> = entry["form"]["fields"]
                .as_array()
                .map(|f| f.iter().filter_map(|f| f["prompt"].as_str()).collect())
                .unwrap_or_default();
            let heading = entry["form"]["message"].as_str().unwrap_or("a form");
            format!("? {heading}: {}", prompts.join(" / "))
        }
        Some("proposeAction") => {
            let action = &entry["actionTemplates"]["templateData"][0]["data"];
            format!(
                "? run {} {}?",
                action["actionName"].as_str().unwrap_or("an action"),
                action.get("parameters").unwrap_or(&Value::Null)
            )
        }
        _ => format!("? {}", entry["message"].as_str().unwrap_or("")),
    }
}

/// What an answer was, in words: a question's chosen label, a form submitted or dismissed, a
/// proposed action run or cancelled. `asked` is its `pending-interaction` entry when it was
/// shown (a page further back may hold it); `response` is absent for a proposal run as is.
fn answer_text(asked: Option<&Value>, response: Option<&Value>) -> String {
    let kind = asked.map_or("question", |a| {
        a["interactionType"].as_str().unwrap_or("question")
    });
    match (kind, response) {
        ("form", Some(r)) if r["cancelled"] == true => "form dismissed".into(),
        ("form", _) => "form submitted".into(),
        ("proposeAction", None) => "run".into(),
        ("proposeAction", Some(Value::Null)) => "cancelled".into(),
        ("proposeAction", Some(_)) => "run (edited)".into(),
        (_, Some(Value::Number(n))) => {
            let label = n.as_u64().and_then(|i| {
                asked?["choices"]
                    .get(usize::try_from(i).ok()?)?
                    .as_str()
                    .map(str::to_string)
            });
            match label {
                Some(label) => format!("answered {label}"),
                None => format!("answered choice {}", n.as_u64().map_or(0, |i| i + 1)),
            }
        }
        (_, Some(other)) => format!("answered {other}"),
        (_, None) => "answered".into(),
    }
}

/// How a replayed display-log entry reads on its own (interactions read best through a
/// [`HistoryReader`], which knows what their answers mean).
pub fn render_history_entry(entry: &Value, my_connection: &str) -> Option<String> {
    match entry["type"].as_str()? {
        "user-request" => {
            let who = entry["requestId"]["connectionId"].as_str().unwrap_or("");
            let tag = if who == my_connection {
                String::new()
            } else {
                format!("[client {who}] ")
            };
            Some(format!(
                "> {tag}{}",
                entry["command"].as_str().unwrap_or("")
            ))
        }
        "append-display" | "set-display" => Some(render_message(&entry["message"])),
        "pending-interaction" => Some(question_line(entry)),
        "interaction-resolved" => {
            Some(format!("  -> {}", answer_text(None, entry.get("response"))))
        }
        "interaction-cancelled" => Some("  -> question cancelled".into()),
        _ => None,
    }
}

/// Renders a `manage-conversation` result.
pub fn render_action(result: &ActionResult) -> String {
    match result {
        ActionResult::Ok { message, .. } => message.clone(),
        ActionResult::Warning(m) => format!("warning: {m}"),
        ActionResult::Error(m) => format!("error: {m}"),
        ActionResult::Cancelled(name) => format!("Kept \"{name}\"."),
        ActionResult::Info {
            conversation_id,
            name,
        } => format!("{name} ({conversation_id})"),
        ActionResult::Help => format!(
            "{}\nAt this prompt: /history (or @conversation history) shows the earlier entries, a screenful at a time.",
            commands::help_text().replace("**", "").replace('`', "").trim_end()
        ),
        ActionResult::List {
            conversations,
            current,
        } => table(conversations, current.as_deref()),
        ActionResult::Matches { query, matches, .. } => {
            if matches.is_empty() {
                return format!("No conversation matches \"{query}\".");
            }
            matches
                .iter()
                .map(|m| {
                    format!(
                        "{:.2}  {}  {}",
                        m.score, m.conversation.conversation_id, m.conversation.name
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
        ActionResult::ContentMatches { query, matches } => {
            if matches.is_empty() {
                format!("No conversation content matches \"{query}\".")
            } else {
                content_matches(matches)
            }
        }
    }
}

/// Content search hits: score, id and name, then each snippet indented below.
pub fn content_matches(matches: &[ContentMatch]) -> String {
    let mut out = Vec::new();
    for m in matches {
        out.push(format!(
            "{:.2}  {}  {}",
            m.score, m.conversation.conversation_id, m.conversation.name
        ));
        for snippet in &m.snippets {
            out.push(format!("      {snippet}"));
        }
    }
    out.join("\n")
}

/// The `conversations list` table.
pub fn table(list: &[ConversationInfo], current: Option<&str>) -> String {
    let headers = [
        "CONVERSATION ID",
        "NAME",
        "CLIENTS",
        "MESSAGES",
        "CREATED AT",
    ];
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|c| {
            let marker = if Some(c.conversation_id.as_str()) == current {
                " *"
            } else {
                ""
            };
            [
                c.conversation_id.clone(),
                format!("{}{marker}", c.name),
                c.client_count.to_string(),
                c.message_count.to_string(),
                c.created_at.clone(),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Pieces become whole lines as their newlines come; the thinking is dim and ends its
    /// line when the answer begins; escapes in pieces are made safe.
    #[test]
    fn stream_pieces_become_lines() {
        let mut lines = StreamLines::default();
        assert!(lines.piece("hm", true).is_empty());
        assert_eq!(lines.piece("m\n\n", true), [dim("hmm"), dim("")]);
        assert!(lines.piece("It ", false).is_empty());
        assert!(lines.piece("is \u{1b}]0;x", false).is_empty());
        assert_eq!(lines.flush(), Some("It is \\u{1b}]0;x".to_string()));
        assert_eq!(lines.flush(), None);
    }

    /// A replayed answer reads as the label chosen (the entry carries only its index), a form
    /// or a proposal as what became of it; an answer whose question is not shown reads as
    /// the choice's number.
    #[test]
    fn replayed_answers_read_as_their_labels() {
        let mut reader = HistoryReader::default();
        let asked = json!({"type": "pending-interaction", "interactionId": "q1",
            "interactionType": "question", "message": "Continue?", "choices": ["Yes", "No"]});
        assert_eq!(reader.entry(&asked, "0").as_deref(), Some("? Continue?"));
        let answered =
            json!({"type": "interaction-resolved", "interactionId": "q1", "response": 1});
        assert_eq!(
            reader.entry(&answered, "0").as_deref(),
            Some("  -> answered No")
        );
        let unseen = json!({"type": "interaction-resolved", "interactionId": "q0", "response": 0});
        assert_eq!(
            reader.entry(&unseen, "0").as_deref(),
            Some("  -> answered choice 1")
        );
        let proposal = json!({"type": "pending-interaction", "interactionId": "p",
            "interactionType": "proposeAction", "actionTemplates": {}});
        reader.entry(&proposal, "0");
        let run = json!({"type": "interaction-resolved", "interactionId": "p"});
        assert_eq!(reader.entry(&run, "0").as_deref(), Some("  -> run"));
        let form = json!({"type": "pending-interaction", "interactionId": "f",
            "interactionType": "form", "form": {"fields": []}});
        reader.entry(&form, "0");
        let dismissed = json!({"type": "interaction-resolved", "interactionId": "f",
            "response": {"answers": {}, "cancelled": true}});
        assert_eq!(
            reader.entry(&dismissed, "0").as_deref(),
            Some("  -> form dismissed")
        );
    }

    #[test]
    fn renders_content_kinds() {
        assert_eq!(content_text(&json!("hi")), "hi");
        assert_eq!(content_text(&json!(["a", "b"])), "a\nb");
        assert_eq!(
            content_text(&json!([["a", "b"], ["c", "d"]])),
            "a | b\nc | d"
        );
        assert_eq!(
            content_text(&json!({"type": "markdown", "content": "**x**"})),
            "**x**"
        );
        let m = json!({"message": {"type": "text", "content": "5"}, "toolResult": {"content": "5", "isError": false}});
        assert_eq!(render_message(&m), "  [result] 5");
    }

    #[test]
    fn table_has_the_columns() {
        let t = table(
            &[ConversationInfo {
                conversation_id: "id-1".into(),
                name: "CLI".into(),
                client_count: 2,
                created_at: "2026-01-01T00:00:00.000Z".into(),
                message_count: 3,
            }],
            None,
        );
        assert!(
            t.starts_with("CONVERSATION ID  NAME  CLIENTS  MESSAGES  CREATED AT"),
            "{t}"
        );
        assert!(t.contains("id-1") && t.contains("2026-01-01"));
    }
}
