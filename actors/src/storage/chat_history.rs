//! The chat history file: one `ChatMessage` JSON object per line in
//! `<conversation>/sessions/<agent>/history.jsonl`. The conversation reads it at its first
//! turn and appends or replaces it through the log writer (`conversation/chat.rs`); a line
//! that does not parse (a torn write, a hand edit) is skipped with a warning, never fatal.

use std::path::{Path, PathBuf};

use crate::agent::ChatMessage;

/// The history file's name.
pub const FILE_NAME: &str = "history.jsonl";

/// An agent's history file under a conversation's directory
/// (`sessions/<agent>/history.jsonl`, the agent's `sessionStorage`).
pub fn path(conversation_dir: &Path, agent: &str) -> PathBuf {
    conversation_dir
        .join("sessions")
        .join(agent)
        .join(FILE_NAME)
}

/// Messages as history lines (one JSON object each).
pub fn encode(messages: &[ChatMessage]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for m in messages {
        serde_json::to_writer(&mut bytes, m).expect("message serializes");
        bytes.push(b'\n');
    }
    bytes
}

/// Reads the chat history file: every line a `ChatMessage`; bad lines are skipped.
pub fn load(path: &Path) -> Vec<ChatMessage> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| match serde_json::from_str(l) {
                Ok(m) => Some(m),
                Err(e) => {
                    log::warn!("{}: skipping an unreadable line: {e}", path.display());
                    None
                }
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Role;

    /// What `encode` writes, `load` reads back; a torn or foreign line in between is skipped
    /// and the lines around it survive; a missing file is an empty history.
    #[test]
    fn round_trip_skips_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "chat");
        assert!(load(&file).is_empty());
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let first = ChatMessage::text(Role::User, "hello");
        let second = ChatMessage::text(Role::Assistant, "hi");
        let mut bytes = encode(std::slice::from_ref(&first));
        bytes.extend_from_slice(b"{\"role\":\"user\",\"cont\n\n");
        bytes.extend_from_slice(&encode(std::slice::from_ref(&second)));
        std::fs::write(&file, bytes).unwrap();
        let loaded = load(&file);
        assert_eq!(loaded.len(), 2);
        assert_eq!(
            serde_json::to_value(&loaded).unwrap(),
            serde_json::to_value([first, second]).unwrap()
        );
    }
}
