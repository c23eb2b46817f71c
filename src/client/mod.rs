//! A Rust client for the agent-server protocol: one WebSocket, many channels. Used by the
//! `roundtable` CLI, the tests and the load harness; it knows nothing of the server's
//! internals and speaks only the wire protocol (`shared/reference/typeagent-protocol.md`).
//!
//! [`Connection`] multiplexes the `agent-server`, `dispatcher:<id>` and `clientio:<id>`
//! channels, keeps one callId counter per channel, correlates answers, and turns
//! `invokeError` texts into [`ClientError`]s (`Conversation not found` is recognised by its
//! prefix, as TypeAgent's clients do). Server → client calls arrive as [`Event`]s;
//! `commandComplete` / `requestCancelled` are also recorded so [`Connection::submit_and_wait`]
//! sees a completion that overtook the submit's answer.
//!
//! Files: `connection.rs` (the socket, its reader and writer tasks, callId correlation,
//! completions), `rpc.rs` (one typed method per agent-server and dispatcher call),
//! `error.rs`, `types.rs` (what the server sends back). The conversation helpers of reference
//! section 7 live in [`conversation`].

mod connection;
pub mod conversation;
mod error;
mod rpc;
mod types;

pub use connection::Connection;
pub use error::{ClientError, ClientResult};
pub use types::{
    CommandOutcome, ContentMatch, ConversationInfo, ConversationMatch, Event, JoinResult,
};

/// `ws://127.0.0.1:<port>/` (TypeAgent clients say `localhost`; we avoid its IPv6-first lookup).
pub fn url_for_port(port: u16) -> String {
    format!("ws://127.0.0.1:{port}/")
}
