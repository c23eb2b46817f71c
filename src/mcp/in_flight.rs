//! A call to an MCP server while it runs ([`InFlight`]) and what it sends its turn
//! ([`CallEvent`]: progress lines, elicitations). Plain data: the calls (`call.rs`) register
//! them, the client handler (`handler.rs`) routes the server's notifications and requests to
//! them through the server's shared state (`shared.rs`).

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use rmcp::model::ProgressToken;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::elicit;

/// Elicitations one call may have waiting for an answer (the one asked and those queued
/// behind it): a server asks one thing at a time in practice; past it an elicitation is
/// answered `cancel` at once, so a server that floods them holds nothing.
pub const MAX_ELICITATIONS_PER_CALL: usize = 4;

/// A question or progress line for the turn whose call caused it.
pub enum CallEvent {
    /// A progress notification, as text.
    Progress(String),
    /// An elicitation: ask, then answer on `reply`.
    Elicit {
        /// The server's message (already cut to what a form shows).
        message: String,
        /// The requested schema.
        schema: Value,
        /// The answer to send back.
        reply: oneshot::Sender<elicit::Answer>,
    },
}

/// A call in flight.
pub struct InFlight {
    /// Its number (for removal).
    pub id: u64,
    /// `NAME__tool`, for progress lines.
    pub tool: String,
    /// The progress token of its request, once sent.
    pub progress_token: Option<ProgressToken>,
    /// To its turn.
    pub events: mpsc::Sender<CallEvent>,
    /// The directory its request works in (offered as a root while it runs).
    pub root: Option<PathBuf>,
    /// Its elicitations waiting for an answer (at most [`MAX_ELICITATIONS_PER_CALL`]).
    pub elicitations: Arc<AtomicUsize>,
    /// Its elicitations cancelled for being past that bound (the first one is logged).
    pub refused: Arc<AtomicUsize>,
}
