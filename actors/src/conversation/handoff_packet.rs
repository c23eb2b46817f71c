//! What a handoff brings (plain data): the summary request's texts, the source as the
//! registry read it ([`SourceHistory`]), the [`Packet`] appended to the destination, and why a
//! handoff did not happen ([`HandoffError`]). `handoff.rs` runs the handoff.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::agent::{ChatMessage, Role};
use crate::ids::ConversationId;

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

/// A packet ready to append.
#[derive(Debug)]
pub struct Packet {
    /// Where it comes from.
    pub(super) source: SourceHistory,
    /// The summary, within [`MAX_PACKET_BYTES`].
    pub(super) summary: String,
}

impl Packet {
    /// The chat message the model reads: a user message (as `@compact`'s summary), whose
    /// first line says what it is.
    pub(super) fn message(&self) -> ChatMessage {
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
    pub(super) fn display(&self) -> (Value, Value) {
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
pub(super) fn bounded(text: &str) -> String {
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
}
