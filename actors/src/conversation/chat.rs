//! The chat history the agent reads: loaded from `sessions/chat/history.jsonl` at the first
//! turn, shared with running turns as an `Arc` (never copied), extended by each finished turn
//! and replaced by `@compact`. Writes go through the shared log writer like every other file;
//! the file's format is [`crate::storage::chat_history`]'s.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Conversation, AGENT_SOURCE};
use crate::agent::{ChatMessage, Role};
use crate::storage::chat_history::{self, encode};

/// The chat agent's history file under a conversation's directory.
pub(super) fn history_path(dir: &Path) -> Arc<Path> {
    chat_history::path(dir, AGENT_SOURCE).into()
}

/// Reads the chat history file (see [`chat_history::load`]).
pub(super) fn load_chat(path: &Path) -> Vec<ChatMessage> {
    chat_history::load(path)
}

impl Conversation {
    /// The committed history, shared (a turn holds a reference, never a copy).
    pub(super) fn chat_history(&mut self) -> Arc<Vec<ChatMessage>> {
        if self.chat.is_none() {
            self.chat = Some(Arc::new(load_chat(&self.chat_path)));
        }
        self.chat.clone().unwrap_or_default()
    }

    /// Appends a finished turn's messages (nothing once the files are closing).
    pub(super) fn commit_chat(&mut self, messages: Vec<ChatMessage>) {
        if messages.is_empty() || self.writes_closed {
            return;
        }
        self.setup
            .runtime
            .log_writer
            .append(&self.chat_path, encode(&messages));
        // The finished turn has dropped its reference by now, so this extends in place.
        Arc::make_mut(self.chat.get_or_insert_with(Default::default)).extend(messages);
    }

    /// The history `@compact` leaves: the summary, then what was added after the first
    /// `replaced` messages (a turn may have finished while the summary was written).
    pub(super) fn compacted_chat(&mut self, summary: &str, replaced: usize) -> Vec<ChatMessage> {
        let history = self.chat_history();
        let mut compacted = vec![ChatMessage::text(
            Role::User,
            format!("[summary] {summary}"),
        )];
        compacted.extend_from_slice(&history[replaced.min(history.len())..]);
        compacted
    }

    /// Replaces the history file with `messages` (after every append queued before);
    /// resolves with the outcome.
    pub(super) fn replace_chat(
        &self,
        messages: &[ChatMessage],
    ) -> oneshot::Receiver<Result<(), String>> {
        self.setup
            .runtime
            .log_writer
            .replace(&self.chat_path, encode(messages))
    }
}
