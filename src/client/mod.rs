//! A Rust client for the agent-server protocol: one WebSocket, many channels. Used by the
//! `roundtable` CLI, the tests and the load harness; it knows nothing of the server's
//! internals and speaks only the wire protocol (`shared/reference/typeagent-protocol.md`).
//!
//! [`Connection`] multiplexes the `agent-server`, `dispatcher:<id>` and `clientio:<id>`
//! channels, keeps one callId counter per channel, correlates answers, and turns
//! `invokeError` texts into [`ClientError`]s (`Conversation not found` is recognised by its
//! prefix, as TypeAgent's clients do). Server → client calls are decoded once, by the
//! connection's reader, into [`ClientIo`] values and arrive as [`Event`]s; `commandComplete`
//! / `requestCancelled` are also recorded so [`Connection::wait_command`] sees a completion
//! that overtook the submit's answer.
//!
//! Files: `connection.rs` (the socket, its reader and writer tasks, callId correlation,
//! completions), `rpc.rs` (one typed method per agent-server and dispatcher call),
//! `clientio.rs` (the server → client calls and the `manage-conversation` payload, typed),
//! `error.rs`, `types.rs` (what the server sends back). The conversation helpers of reference
//! section 7 live in [`conversation`].

pub mod clientio;
mod connection;
pub mod conversation;
mod error;
mod rpc;
mod types;

pub use clientio::ClientIo;
pub use connection::Connection;
pub use error::{ClientError, ClientResult};
pub use types::{
    CommandOutcome, ContentMatch, ConversationInfo, ConversationMatch, Event, JoinResult,
};

/// `ws://127.0.0.1:<port>/` (TypeAgent clients say `localhost`; we avoid its IPv6-first lookup).
pub fn url_for_port(port: u16) -> String {
    format!("ws://127.0.0.1:{port}/")
}

/// A server to connect to: its WebSocket URL and the token it wants, if any. The token goes
/// out as `Authorization: Bearer` ([`Connection::connect_to`], and `roundtable backup`'s
/// `GET /backup`); `Debug` and [`Endpoint::shown`] never print it.
#[derive(Clone)]
pub struct Endpoint {
    /// `ws://host:port/` (a `?token=` in it still works, but is visible in `ps`).
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

impl Endpoint {
    /// `url` without a token.
    pub fn new(url: impl Into<String>) -> Endpoint {
        Endpoint {
            url: url.into(),
            token: None,
        }
    }

    /// The URL as messages show it: credentials and `?token=` hidden.
    pub fn shown(&self) -> String {
        roundtable_actors::redact::redact_url_credentials(&self.url)
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.shown())
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}
