//! The chat history the agent reads. The whole history is `sessions/chat/history.jsonl`; the
//! conversation holds only its newest part in memory ([`ChatWindow`]: at most
//! [`MAX_CHAT_BYTES`] and [`MAX_CHAT_MESSAGES`], beginning with a turn), read from the end of
//! the file at the first turn, shared with running turns as an `Arc` (never copied), extended
//! by each finished turn (the oldest turns then leave memory, never the file) and replaced by
//! `@compact`. What is older is read from the file when someone asks (`@system history N`).
//! Writes go through the shared log writer like every other file; the file's format is
//! [`crate::storage::chat_history`]'s.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::json;
use tokio::sync::oneshot;

use super::system::{history_text_of, HistoryPage, MAX_HISTORY};
use super::turn_messages::TurnEvent;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::{ChatMessage, ContentBlock, Role};
use crate::storage::chat_history::{self, encode, window_start};

/// Bytes of history lines held in memory per conversation: a model takes far less per call
/// (a context window of 128k tokens is about 512 KiB of text), so this never shortens what a
/// model can use, while turns of megabytes cannot pin more than this per loaded conversation.
pub const MAX_CHAT_BYTES: usize = 8 << 20;
/// Messages held in memory per conversation (about 250 turns with tool calls), whatever their
/// size.
pub const MAX_CHAT_MESSAGES: usize = 1024;
/// Messages read before the first one `@system history` shows, to name the tools its first
/// tool results answer (a turn holds one assistant message per model call).
const TOOL_NAME_LOOKBACK: usize = 64;

/// The chat agent's history file under a conversation's directory.
pub(super) fn history_path(dir: &Path) -> Arc<Path> {
    chat_history::path(dir, AGENT_SOURCE).into()
}

/// The newest part of the chat history, held for the agent.
#[derive(Default)]
pub(super) struct ChatWindow {
    /// The messages, oldest first, beginning with a turn (so every tool result has its call);
    /// shared with running turns, which read it and never change it.
    messages: Arc<Vec<ChatMessage>>,
    /// Each message's history line size in bytes, same order (what the bound counts).
    sizes: Vec<usize>,
    /// Sum of `sizes`: at most [`MAX_CHAT_BYTES`].
    bytes: usize,
    /// Messages in the history file (lines, counting any that do not parse): the window holds
    /// the last `messages.len()` of them.
    total: usize,
}

impl ChatWindow {
    /// A window of exactly `messages`, the whole history (after `@compact`).
    fn whole(messages: Vec<ChatMessage>) -> ChatWindow {
        let mut window = ChatWindow::default();
        let (_, sizes) = lines(&messages);
        window.extend(messages, sizes);
        window
    }

    /// Adds messages at the end (also to `total`), with their history line sizes, then lets
    /// the oldest turns go past the bounds.
    fn extend(&mut self, messages: Vec<ChatMessage>, sizes: Vec<usize>) {
        self.bytes += sizes.iter().sum::<usize>();
        self.sizes.extend(sizes);
        self.total += messages.len();
        // A finished turn has dropped its reference by now, so this extends in place.
        Arc::make_mut(&mut self.messages).extend(messages);
        let cut = window_start(
            &self.messages,
            &self.sizes,
            MAX_CHAT_BYTES,
            MAX_CHAT_MESSAGES,
        );
        if cut > 0 {
            Arc::make_mut(&mut self.messages).drain(..cut);
            self.bytes -= self.sizes.drain(..cut).sum::<usize>();
        }
    }
}

/// `messages` as history lines, and each one's size.
fn lines(messages: &[ChatMessage]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut sizes = Vec::with_capacity(messages.len());
    for m in messages {
        let before = bytes.len();
        bytes.extend_from_slice(&encode(std::slice::from_ref(m)));
        sizes.push(bytes.len() - before);
    }
    (bytes, sizes)
}

/// `@system history N` read from the history file (for messages older than the window):
/// two streamed passes, one line in memory at a time.
fn history_from_disk(path: &Path, n: usize) -> std::io::Result<String> {
    let first = chat_history::count(path)?.saturating_sub(n);
    let mut tool_names: HashMap<String, String> = HashMap::new();
    let mut page = HistoryPage::default();
    let total = chat_history::for_each_from(
        path,
        first.saturating_sub(TOOL_NAME_LOOKBACK),
        |number, message| {
            let Some(message) = message else { return };
            if number > first {
                page.add(number, &message, &|id| {
                    tool_names.get(id).map_or("?", String::as_str).to_string()
                });
            }
            for block in &message.content {
                if let ContentBlock::ToolUse { id, name, .. } = block {
                    tool_names.insert(id.clone(), name.clone());
                }
            }
        },
    )?;
    Ok(page.text(total))
}

/// The newest part of this conversation's chat history (the window the agent reads) and the
/// number of messages in its whole history: what another conversation's handoff summarizes.
/// Sent by the registry, which holds the address; answered from memory (what was committed
/// may not be on disk yet).
#[derive(Message)]
#[rtype(result = "(Arc<Vec<ChatMessage>>, usize)")]
pub struct ReadChatWindow;

impl Handler<ReadChatWindow> for Conversation {
    type Result = MessageResult<ReadChatWindow>;

    fn handle(&mut self, _msg: ReadChatWindow, _ctx: &mut Self::Context) -> Self::Result {
        let window = self.chat_window();
        MessageResult((window.messages.clone(), window.total))
    }
}

impl Conversation {
    /// The window, read from the end of the history file the first time.
    fn chat_window(&mut self) -> &mut ChatWindow {
        self.chat.get_or_insert_with(|| {
            let tail = chat_history::load_tail(&self.chat_path, MAX_CHAT_BYTES, MAX_CHAT_MESSAGES);
            if tail.messages.len() < tail.total {
                log::debug!(
                    "conversation {}: {} of {} chat messages held in memory",
                    self.setup.id,
                    tail.messages.len(),
                    tail.total
                );
            }
            ChatWindow {
                bytes: tail.sizes.iter().sum(),
                messages: Arc::new(tail.messages),
                sizes: tail.sizes,
                total: tail.total,
            }
        })
    }

    /// The history the agent sees (the window), shared: a turn holds a reference, never a
    /// copy.
    pub(super) fn chat_history(&mut self) -> Arc<Vec<ChatMessage>> {
        self.chat_window().messages.clone()
    }

    /// Messages in the whole chat history (file), not only those held.
    pub(super) fn chat_message_count(&mut self) -> usize {
        self.chat_window().total
    }

    /// Appends a finished turn's messages (nothing once the files are closing).
    pub(super) fn commit_chat(&mut self, messages: Vec<ChatMessage>) {
        if messages.is_empty() || self.writes_closed {
            return;
        }
        let (bytes, sizes) = lines(&messages);
        self.setup.runtime.log_writer.append(&self.chat_path, bytes);
        self.chat_window().extend(messages, sizes);
    }

    /// `@system history N` for the running request: from memory when the window holds the
    /// messages asked for, else from the file, off the actor, once the writer has written
    /// every message committed so far (the window may have let go of some still queued).
    pub(super) fn show_history(&mut self, turn: u64, n: usize, ctx: &mut Context<Self>) {
        let n = n.min(MAX_HISTORY);
        let window = self.chat_window();
        if n <= window.messages.len() || window.total == window.messages.len() {
            let text = history_text_of(&window.messages, window.total, n);
            let request = self.queue.running().expect("running").request.clone();
            let content = json!({"type": "text", "content": text});
            return self.finish_showing(turn, &request, content, None, ctx);
        }
        let written = self.setup.runtime.log_writer.written();
        let path = self.chat_path.clone();
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let _ = written.await;
                let read = tokio::task::spawn_blocking(move || history_from_disk(&path, n)).await;
                let result = match read {
                    Ok(Ok(text)) => Ok(json!({"type": "text", "content": text})),
                    Ok(Err(e)) => Err(format!(
                        "@system history: cannot read the chat history: {e}"
                    )),
                    Err(e) => Err(format!("@system history: {e}")),
                };
                addr.do_send(TurnEvent::Answered { turn, result });
            },
            ctx,
        );
    }

    /// The history `@compact` leaves: the summary, then the messages committed after the
    /// summary's history was taken, when the file held `total_before` (a request cancelled
    /// meanwhile adds its note).
    pub(super) fn compacted_chat(
        &mut self,
        summary: &str,
        total_before: usize,
    ) -> Vec<ChatMessage> {
        let window = self.chat_window();
        let added = window.total.saturating_sub(total_before);
        let mut compacted = vec![ChatMessage::text(
            Role::User,
            format!("[summary] {summary}"),
        )];
        compacted
            .extend_from_slice(&window.messages[window.messages.len().saturating_sub(added)..]);
        compacted
    }

    /// The history file now ends with `compacted` (appended when it held `total_before`
    /// messages) and whatever was committed after it was queued: the window becomes the same.
    pub(super) fn chat_compacted(&mut self, compacted: Vec<ChatMessage>, total_before: usize) {
        let window = self.chat_window();
        let added = window.total.saturating_sub(total_before);
        let from = window.messages.len().saturating_sub(added);
        let later = window.messages[from..].to_vec();
        let later_sizes = window.sizes[from..].to_vec();
        let mut compacted = ChatWindow::whole(compacted);
        // Every line before it stays in the file.
        compacted.total += total_before;
        compacted.extend(later, later_sizes);
        self.chat = Some(compacted);
    }

    /// Appends `compacted` (its summary first, marked as a compaction: what the agent reads
    /// begins there, and every line before it stays on disk) after every append queued
    /// before; resolves once it is durable.
    pub(super) fn append_compaction(
        &self,
        compacted: &[ChatMessage],
    ) -> oneshot::Receiver<Result<(), String>> {
        let writer = &self.setup.runtime.log_writer;
        let (summary, after) = compacted.split_first().expect("a summary first");
        let mut bytes = chat_history::encode_compaction(summary);
        bytes.extend(encode(after));
        writer.append(&self.chat_path, bytes);
        writer.sync(vec![self.chat_path.clone()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns of a megabyte each: the window keeps to its bounds, begins with a turn, counts
    /// every message committed, and a whole window (after `@compact`) counts its own.
    #[test]
    fn the_window_keeps_to_its_bounds() {
        let mut window = ChatWindow::default();
        let add = |window: &mut ChatWindow, messages: Vec<ChatMessage>| {
            let (bytes, sizes) = lines(&messages);
            assert_eq!(bytes, encode(&messages));
            window.extend(messages, sizes);
        };
        for t in 0..40 {
            add(
                &mut window,
                vec![
                    ChatMessage::text(Role::User, format!("{t} {}", "u".repeat(1 << 20))),
                    ChatMessage::text(Role::Assistant, format!("{t} {}", "a".repeat(1 << 19))),
                ],
            );
            assert!(window.bytes <= MAX_CHAT_BYTES);
            assert_eq!(window.bytes, window.sizes.iter().sum::<usize>());
            assert_eq!(window.sizes.len(), window.messages.len());
            assert_eq!(window.messages[0].role, Role::User);
        }
        assert_eq!(window.total, 80);
        // 1.5 MiB a turn: five turns fit in 8 MiB.
        assert_eq!(window.messages.len(), 10);
        assert!(window.messages[0].joined_text().starts_with("35 "));
        for _ in 0..MAX_CHAT_MESSAGES {
            add(&mut window, vec![ChatMessage::text(Role::User, "short")]);
        }
        assert_eq!(window.messages.len(), MAX_CHAT_MESSAGES);
        assert_eq!(window.total, 80 + MAX_CHAT_MESSAGES);
        let whole = ChatWindow::whole(vec![ChatMessage::text(Role::User, "[summary] s")]);
        assert_eq!((whole.total, whole.messages.len()), (1, 1));
    }
}
