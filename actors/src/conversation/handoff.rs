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

use actix::prelude::*;
use serde_json::json;

use super::audience::Audience;
use super::chat::{MAX_CHAT_BYTES, MAX_CHAT_MESSAGES};
use super::compaction::local_summary;
use super::handoff_packet::{
    bounded, HandoffError, Packet, SourceHistory, HANDOFF_INSTRUCTION, HANDOFF_SYSTEM,
};
use super::routing::DisplayMode;
use super::turn_messages::TurnEvent;
use super::ReadHandoffSource;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::{ChatMessage, Provider, ProviderRequest, Role};
use crate::client::OutboundCall;
use crate::storage::chat_history;

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
