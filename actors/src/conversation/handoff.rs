//! Handoff between conversations: the person names a source conversation; this conversation
//! (the destination) has the source's chat history summarized by its own model and appends
//! only that summary, the *handoff packet*, to its own history: as one chat message the
//! model reads on its next turn, and as one display entry every client sees and replays
//! (`getDisplayHistory`). The source is only read, never changed.
//!
//! Asked two ways, run the same way:
//! - `@conversation handoff <name or id>` (every client sends it to the server; TypeAgent's
//!   CLI keeps `@conversation` to itself, so there it is `@dispatcher request @conversation
//!   handoff <name>`, or words): a request of its own in this conversation's queue.
//! - The `manage_conversation` tool's `handoff` (words: "hand off my research conversation
//!   here"): booked by the turn (`AfterTurn`) and run once its agent loop has ended, as the
//!   last step of the same request, which then completes with the handoff's outcome.
//!
//! # Implementation notes
//! The steps, each a state of the running request:
//! 1. **Reading**: the registry ([`ReadHandoffSource`]) finds the source by id or by name
//!    (trimmed, case-insensitive, as names are compared everywhere) and reads the newest
//!    part of its history, bounded as the agent loop's is ([`MAX_CHAT_BYTES`],
//!    [`MAX_CHAT_MESSAGES`]): a loaded source answers from memory (what it committed may not
//!    be on disk yet); an unloaded one is read from its `history.jsonl` once the log writer
//!    has written everything queued before, on a blocking thread. No lock is shared: the
//!    registry and the source answer messages.
//! 2. **Summarizing**: the destination's provider gets the source's messages as history and
//!    one instruction ([`HANDOFF_INSTRUCTION`]), no tools. The offline `builtin` provider
//!    cannot summarize; it gets the bounded local summary `@compact` uses (the requests
//!    made). Any other provider's error or empty answer fails the handoff (no fallback: a
//!    packet the model did not write would be a silent success).
//! 3. **Appending**: on this actor, in one step: the packet is committed to the chat history
//!    and shown, then the request completes (its `commandComplete` after both are durable).
//!
//! Each failure leaves the destination's chat history as it was and answers its own text
//! ([`HandoffError`]) as the request's error display and `lastError`.
//!
//! **A destination running a turn.** The packet is never written into a running turn of the
//! destination, and a handoff never waits on one it cannot see end:
//! - `@conversation handoff` is a request of the destination's own queue, which runs one
//!   request at a time. Asked while a turn runs (the model streaming, tools running), it is
//!   queued behind it, visibly (`requestQueued`, the queue snapshot), and runs when that turn
//!   has ended; its packet follows that turn's messages. (A turn stalled on a question is
//!   superseded by any new request, this one too: the queue's rule.) Nothing can run in the
//!   destination while the handoff reads and summarizes: it holds the queue, as `@compact`
//!   does.
//! - Asked by the model from inside a running turn, the handoff is booked, and runs when the
//!   turn's agent loop has ended: the turn's own later model calls do not see the packet,
//!   the next turn does.
//! - The one handoff that would have to be written into a running turn is a second one asked
//!   by the same turn while the first is booked: refused at once
//!   ([`HandoffError::AlreadyBooked`], told to the model as the tool's error).
//!
//! **A destination deleted meanwhile**: the delete stops the conversation, which cancels the
//! running request (`requestCancelled`, `commandComplete` with `cancelled: true`); a request
//! that was handing off is first shown [`HandoffError::DestinationDeleted`]. The summary is
//! dropped. A source deleted while its summary is written does not stop the handoff: its
//! history was already read.

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};

use super::audience::Audience;
use super::chat::{MAX_CHAT_BYTES, MAX_CHAT_MESSAGES};
use super::compaction::local_summary;
use super::routing::DisplayMode;
use super::turn_events::TurnEvent;
use super::ReadHandoffSource;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::{ChatMessage, Provider, ProviderRequest, Role};
use crate::client::OutboundCall;
use crate::ids::ConversationId;
use crate::storage::chat_history;

/// The system prompt of the summary request.
pub const HANDOFF_SYSTEM: &str = "You write handoff packets: faithful, compact summaries of \
    one conversation that another conversation will continue from.";
/// The instruction after the source's history.
pub const HANDOFF_INSTRUCTION: &str = "Write a handoff packet of our conversation so far, for \
    another conversation to continue from it: the goal, the key facts, names, numbers and \
    decisions, what was done, and the open questions and next steps. Be concise; use short \
    sections or bullet points.";
/// Longest packet kept, in bytes: a summary is a page, not a transcript. A longer answer is
/// cut there (at a character boundary) and says so, so one endpoint's runaway answer cannot
/// put megabytes into every later model call.
pub const MAX_PACKET_BYTES: usize = 64 << 10;

/// Why a handoff did not happen: the exact texts shown (and set as `lastError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    /// `@conversation handoff` without a conversation.
    #[error("Give a conversation: @conversation handoff <name or id>")]
    Usage,
    /// No conversation has that id or name (or it is being deleted).
    #[error("handoff: no conversation is named \"{0}\" or has that id")]
    UnknownSource(String),
    /// The source named is the destination.
    #[error("handoff: \"{0}\" is this conversation; name another conversation to hand off from")]
    SameConversation(String),
    /// The source has no chat history (never used, or `@compact`ed to nothing).
    #[error("handoff: \"{0}\" has no chat history to hand off")]
    EmptySource(String),
    /// The source's history could not be read.
    #[error("handoff: cannot read the chat history of \"{name}\": {reason}")]
    Unreadable {
        /// The source's name.
        name: String,
        /// What failed.
        reason: String,
    },
    /// `serve --cluster`: the source is not loaded on this node, whose copy of its files may
    /// be behind the node that serves it.
    #[error(
        "handoff: \"{0}\" is not open on this node of the cluster; join it here first, then hand it off"
    )]
    NotOnThisNode(String),
    /// The model failed to write the summary.
    #[error("handoff: the summary of \"{name}\" failed: {reason}")]
    SummaryFailed {
        /// The source's name.
        name: String,
        /// The provider's error.
        reason: String,
    },
    /// The model answered without text.
    #[error("handoff: the model wrote no summary of \"{0}\"")]
    EmptySummary(String),
    /// The turn already booked a handoff.
    #[error(
        "handoff: this reply already hands off \"{0}\"; ask for another handoff after it has ended"
    )]
    AlreadyBooked(String),
    /// The destination was deleted while the handoff ran.
    #[error("handoff: this conversation was deleted before the packet of \"{0}\" was added")]
    DestinationDeleted(String),
    /// The registry stopped (the server is stopping).
    #[error("handoff: the server is stopping")]
    Stopping,
}

/// The source of a handoff as the registry read it.
#[derive(Debug, Clone)]
pub struct SourceHistory {
    /// Its id.
    pub id: ConversationId,
    /// Its name now.
    pub name: String,
    /// The newest part of its chat history, within the agent loop's bounds.
    pub messages: Arc<Vec<ChatMessage>>,
    /// Messages in its whole history file.
    pub total: usize,
}

/// The newest part of the chat history in the conversation directory `dir`, within the agent
/// loop's bounds, and the file's length in messages (a missing file is an empty history).
/// Blocking: for a thread of the blocking pool.
pub fn read_chat_tail(dir: &Path) -> std::io::Result<(Vec<ChatMessage>, usize)> {
    let path = chat_history::path(dir, AGENT_SOURCE);
    match chat_history::read_tail(&path, MAX_CHAT_BYTES, MAX_CHAT_MESSAGES) {
        Ok(tail) => Ok((tail.messages, tail.total)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), 0)),
        Err(e) => Err(e),
    }
}

/// A packet ready to append.
#[derive(Debug)]
pub struct Packet {
    /// Where it comes from.
    source: SourceHistory,
    /// The summary, within [`MAX_PACKET_BYTES`].
    summary: String,
}

impl Packet {
    /// The chat message the model reads: a user message (as `@compact`'s summary), whose
    /// first line says what it is.
    fn message(&self) -> ChatMessage {
        ChatMessage::text(
            Role::User,
            format!(
                "[Handoff packet from the conversation \"{}\": a summary of it, brought into this \
                 conversation to continue from.]\n{}",
                self.source.name, self.summary
            ),
        )
    }

    /// The display entry every client shows: the summary under a heading, and (`handoff`)
    /// where it came from, for rich clients.
    fn display(&self) -> (Value, Value) {
        let held = self.source.messages.len();
        let count = if held < self.source.total {
            format!("the newest {held} of {} messages", self.source.total)
        } else {
            format!("{held} messages")
        };
        let content = json!({
            "type": "markdown",
            "kind": "info",
            "content": format!(
                "**Handoff from \"{}\"** ({count} summarized)\n\n{}",
                self.source.name, self.summary
            ),
        });
        let extra = json!({"handoff": {
            "conversationId": self.source.id,
            "name": self.source.name,
            "messages": held,
        }});
        (content, extra)
    }
}

/// `text` cut to [`MAX_PACKET_BYTES`] at a character boundary, saying so when it was.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_PACKET_BYTES {
        return text.to_string();
    }
    let mut end = MAX_PACKET_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n\n[… cut at {} KiB]",
        &text[..end],
        MAX_PACKET_BYTES >> 10
    )
}

/// The summary of `source` by `provider` (see step 2 of the module notes).
async fn summarize(
    provider: &dyn Provider,
    source: &SourceHistory,
) -> Result<String, HandoffError> {
    if provider.name() == "builtin" {
        return Ok(bounded(&local_summary(&source.messages)));
    }
    let request = ProviderRequest {
        system: HANDOFF_SYSTEM.into(),
        history: source.messages.clone(),
        messages: vec![ChatMessage::text(Role::User, HANDOFF_INSTRUCTION)],
        tools: Vec::new(),
    };
    let response = provider
        .complete(request)
        .await
        .map_err(|e| HandoffError::SummaryFailed {
            name: source.name.clone(),
            reason: e.to_string(),
        })?;
    let text = ChatMessage {
        role: Role::Assistant,
        content: response.content,
    }
    .joined_text();
    if text.trim().is_empty() {
        return Err(HandoffError::EmptySummary(source.name.clone()));
    }
    Ok(bounded(text.trim()))
}

/// `a` and `b` as one error text, when there is one.
fn joined(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

impl Conversation {
    /// Starts the handoff of `source` (a name or an id) for the running request `turn`
    /// (steps 1 and 2 off the actor; [`TurnEvent::HandedOff`] brings the result back).
    /// `earlier` is the error of the turn that booked it, if that turn failed: the request
    /// ends with both.
    pub(super) fn start_handoff(
        &mut self,
        turn: u64,
        source: String,
        earlier: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        let Some(running) = self.queue.current_mut(turn) else {
            return;
        };
        let source = source.trim().to_string();
        if source.is_empty() {
            let request = running.request.clone();
            let text = HandoffError::Usage.to_string();
            let warning = json!({"type": "text", "content": text, "kind": "warning"});
            self.display(&request, warning, None, DisplayMode::Block);
            return self.finish_turn(turn, joined(earlier, Some(text)), ctx);
        }
        running.handing_off = Some(source.clone());
        log::info!(
            "conversation {}: request {} trace={}: handoff of {source:?} into this conversation",
            self.setup.id,
            running.request.request_id,
            running.request.trace_id
        );
        let read = self.setup.registry.handoff_source.send(ReadHandoffSource {
            named: source,
            destination: self.setup.id,
        });
        let provider = self.provider();
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let result = async {
                    let source = read.await.map_err(|_| HandoffError::Stopping)??;
                    let summary = summarize(provider.as_ref(), &source).await?;
                    Ok(Packet { source, summary })
                }
                .await;
                addr.do_send(TurnEvent::HandedOff {
                    turn,
                    result,
                    earlier,
                });
            },
            ctx,
        );
    }

    /// Step 3: the packet of the running request `turn` is appended and shown, or its error
    /// shown; then the request completes.
    pub(super) fn handed_off(
        &mut self,
        turn: u64,
        result: Result<Packet, HandoffError>,
        earlier: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        let Some(running) = self.queue.current_mut(turn) else {
            return;
        };
        running.handing_off = None;
        let request = running.request.clone();
        let error = match result {
            Ok(packet) => {
                log::info!(
                    "conversation {}: request {}: handoff packet of {} ({} messages, {} bytes) \
                     added",
                    self.setup.id,
                    request.request_id,
                    packet.source.id,
                    packet.source.messages.len(),
                    packet.summary.len()
                );
                self.commit_chat(vec![packet.message()]);
                let (content, extra) = packet.display();
                self.display(&request, content, Some(extra), DisplayMode::Block);
                None
            }
            Err(e) => {
                let text = e.to_string();
                log::info!(
                    "conversation {}: request {}: {text}",
                    self.setup.id,
                    request.request_id
                );
                let error = json!({"type": "text", "content": text, "kind": "error"});
                self.display(&request, error, None, DisplayMode::Block);
                Some(text)
            }
        };
        self.finish_turn(turn, joined(earlier, error), ctx);
    }

    /// The destination is being deleted: a request that was handing off says so first.
    pub(super) fn handoff_interrupted_by_delete(&mut self) {
        let Some((request, source)) = self
            .queue
            .running()
            .and_then(|r| Some((r.request.clone(), r.handing_off.clone()?)))
        else {
            return;
        };
        let text = HandoffError::DestinationDeleted(source).to_string();
        let error = json!({"type": "text", "content": text, "kind": "error"});
        self.display(&request, error, None, DisplayMode::Block);
    }

    /// Sends the client actions the running request's turn booked (`takeAction` to its
    /// sender, in the order asked), then completes the request.
    pub(super) fn finish_turn(
        &mut self,
        turn: u64,
        error: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        if let Some(running) = self.queue.current_mut(turn) {
            let actions = std::mem::take(&mut running.after_turn.client_actions);
            let request = running.request.clone();
            for (action, data) in actions {
                let call =
                    OutboundCall::new("takeAction", &json!([request.id_obj(), action, data]));
                self.emit(call, &Audience::Only(request.origin));
            }
        }
        self.finish(turn, error, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_summary_is_cut_and_says_so() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(MAX_PACKET_BYTES); // two bytes each
        let cut = bounded(&long);
        assert!(
            cut.ends_with("\n\n[… cut at 64 KiB]"),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert!(cut.len() <= MAX_PACKET_BYTES + 40);
    }

    #[test]
    fn errors_are_exact() {
        assert_eq!(
            HandoffError::UnknownSource("research".into()).to_string(),
            "handoff: no conversation is named \"research\" or has that id"
        );
        assert_eq!(
            HandoffError::SameConversation("work".into()).to_string(),
            "handoff: \"work\" is this conversation; name another conversation to hand off from"
        );
        assert_eq!(
            joined(Some("a".into()), Some("b".into())),
            Some("a; b".into())
        );
        assert_eq!(joined(None, Some("b".into())), Some("b".into()));
    }
}
