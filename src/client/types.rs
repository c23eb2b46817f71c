//! What the server sends back, typed: answers of the agent-server calls
//! ([`ConversationInfo`], [`JoinResult`], [`ConversationMatch`]), what the connection hands
//! on ([`Event`]: a decoded server → client call, see `clientio.rs`, or the close) and how a
//! submitted command ended ([`CommandOutcome`]).

use serde::Deserialize;
use serde_json::Value;

use super::ClientIo;

/// Something the server sent that is not an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A `call` on `clientio:<conversation_id>`, decoded.
    Call {
        /// The conversation.
        conversation_id: String,
        /// The call (`appendDisplay`, `notify`, …) with its arguments typed.
        call: ClientIo,
    },
    /// The socket closed (code and reason when the server sent a close frame).
    Closed {
        /// Close code, if any.
        code: Option<u16>,
        /// Close reason.
        reason: String,
    },
}

/// How a submitted command ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// `commandComplete` with its `CommandResult` (or null).
    Completed(Value),
    /// `requestCancelled` with its reason.
    Cancelled(String),
}

/// `ConversationInfo` as the server sends it.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfo {
    /// UUID.
    pub conversation_id: String,
    /// Name as stored.
    pub name: String,
    /// Joined clients.
    #[serde(default)]
    pub client_count: u64,
    /// ISO-8601.
    #[serde(default)]
    pub created_at: String,
    /// `user-request` entries.
    #[serde(default)]
    pub message_count: u64,
}

/// `JoinConversationResult`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinResult {
    /// This client's connection id in the conversation.
    pub connection_id: String,
    /// The conversation joined.
    pub conversation_id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Questions waiting for an answer.
    #[serde(default)]
    pub pending_interactions: Vec<Value>,
    /// Present while the queue is busy.
    #[serde(default)]
    pub queue_snapshot: Option<Value>,
}

/// `{conversation, score, snippets}` from `searchConversationContent`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct ContentMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1, best first.
    pub score: f64,
    /// Passages that matched (`user: …` / `agent: …`), matched words in `**…**`.
    #[serde(default)]
    pub snippets: Vec<String>,
}

/// `{conversation, score}` from `findConversations`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConversationMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1.
    pub score: f64,
}
