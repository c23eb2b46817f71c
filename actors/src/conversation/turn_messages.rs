//! The messages a running turn sends its conversation ([`TurnEvent`], each tagged with its
//! turn number) and the plain data they carry: what a turn books for its end
//! ([`TurnBooking`]), what a request does after a compaction ([`AfterCompact`]). The actor
//! handles them in `turn_events.rs`.

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;

use super::handoff_packet::{HandoffError, Packet};
use crate::agent::turn::{TurnOutcome, TurnStep};
use crate::agent::AnswerDelta;

/// `takeAction` calls one turn may book for its requester (`manage_conversation`): a request
/// of a few steps ("create a research conversation, then list them") fits; a model calling
/// the tool in a loop does not make the client switch back and forth for the rest of its
/// iterations.
pub const MAX_CLIENT_ACTIONS_PER_TURN: usize = 4;

/// Work a turn books for its end.
#[derive(Debug)]
pub enum TurnBooking {
    /// A `takeAction` for the requester.
    ClientAction {
        /// The action (`manage-conversation`).
        action: String,
        /// Its data (the payload).
        data: Value,
    },
    /// A handoff of this conversation (name or id) into this one.
    Handoff(String),
}

/// What a request does once its compaction is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterCompact {
    /// `@compact`: it finishes, showing the summary.
    Finish,
    /// The context was nearly full: the request's agent turn runs now, on the summary.
    RunTurn(String),
    /// The model refused the request's turn as longer than its window: it runs again, on the
    /// summary, once.
    AfterOverflow(String),
}

/// Output of the running turn, tagged with its turn number.
#[derive(Message)]
#[rtype(result = "()")]
pub enum TurnEvent {
    /// Show something.
    Display {
        /// Turn.
        turn: u64,
        /// `DisplayContent`.
        content: Value,
        /// Extra `IAgentMessage` fields.
        extra: Option<Value>,
    },
    /// Ask the user.
    Ask {
        /// Turn.
        turn: u64,
        /// The question.
        question: String,
        /// Choices.
        choices: Vec<String>,
        /// Only the originator (`requestChoice`) or everyone (`requestInteraction`).
        private: bool,
        /// The answer (choice index).
        reply: oneshot::Sender<Result<usize, String>>,
    },
    /// A piece of the model's answer as it is written (`streaming.rs`).
    Stream {
        /// Turn.
        turn: u64,
        /// The piece.
        delta: AnswerDelta,
    },
    /// A passing status while a tool call runs (an MCP server's progress): shown as a
    /// `temporary` display, never logged.
    Status {
        /// Turn.
        turn: u64,
        /// The status text.
        text: String,
    },
    /// A step of the agent loop: a model call's time, a tool call starting or ending.
    Step {
        /// Turn.
        turn: u64,
        /// What happened.
        step: TurnStep,
    },
    /// The agent loop finished.
    Done {
        /// Turn.
        turn: u64,
        /// Messages and error.
        outcome: TurnOutcome,
    },
    /// `@explain` / `@translate` produced their text.
    Planned {
        /// Turn.
        turn: u64,
        /// The rendered plan, or the provider error.
        result: Result<String, String>,
    },
    /// A command that needed an answer from elsewhere (`@system session` asks the registry)
    /// has its content to show.
    Answered {
        /// Turn.
        turn: u64,
        /// The `DisplayContent` to show before the request finishes, or the error it ends
        /// with.
        result: Result<Value, String>,
    },
    /// The running turn booked work for its end.
    Booked {
        /// Turn.
        turn: u64,
        /// What.
        booking: TurnBooking,
    },
    /// A handoff has its packet (or failed).
    HandedOff {
        /// Turn.
        turn: u64,
        /// The packet, or why there is none.
        result: Result<Packet, HandoffError>,
        /// The error of the turn that booked the handoff, if it failed.
        earlier: Option<String>,
    },
    /// `@compact` produced its summary.
    Compacted {
        /// Turn.
        turn: u64,
        /// The summary text.
        summary: String,
        /// History messages it summarizes (those the assistant held).
        replaced: usize,
        /// Messages in the history file when the summary's history was taken.
        total_before: usize,
        /// What the request does next.
        then: AfterCompact,
    },
}
