//! The agent side of a conversation: chat messages with content blocks, the [`Provider`]
//! trait every model backend implements, tool specs and the routing of tool calls.
//!
//! A conversation's turn runs the agent loop ([`turn::run_turn`]; what it needs of its world,
//! the sink and the tool servers, is [`turn_sink`]): send history +
//! tools to the provider, run the tool calls it returns, append the results, repeat until the
//! provider answers without tool calls or the iteration limit is hit. Providers and tool
//! servers are plain trait objects so the loop runs the same with the offline `builtin`
//! provider (tests) and an OpenAI-compatible endpoint (the `roundtable` crate's `openai`).

pub mod attachments;
pub mod builtin;
pub mod client_agent;
pub mod explain;
pub mod images;
pub mod providers;
pub mod questions;
pub mod routing;
pub mod tools;
pub mod turn;
pub mod turn_sink;
pub mod usage;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Separator between an external tool server's name and its tool's name.
pub const SERVER_SEPARATOR: &str = "__";

/// A future that may stay on the current thread (HTTP clients on actix are `!Send`).
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person (and tool results, which answer the assistant's tool calls).
    User,
    /// The model.
    Assistant,
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The assistant asks for a tool call.
    ToolUse {
        /// Id the result refers to.
        id: String,
        /// Tool name (`^[a-zA-Z0-9_-]{1,64}$`; `server__tool` for external tool servers).
        name: String,
        /// Arguments (a JSON object).
        input: Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The `ToolUse` id.
        tool_use_id: String,
        /// Result text (or the error message).
        content: String,
        /// True when the tool failed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// The model's thinking before its answer (`reasoning_content` / `reasoning` of
    /// OpenAI-compatible servers, an Anthropic `thinking` block): shown to the people as the
    /// model's thinking, kept in the turn's own messages (Anthropic needs a tool-using turn's
    /// thinking block back, with its `signature`, on the turn's next call), and never in the
    /// committed history nor sent back on a later turn.
    Thinking {
        /// What the model thought, as it wrote it.
        text: String,
        /// The provider's proof that the block is unaltered (Anthropic's `signature`); `None`
        /// where the provider gives none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// An image the user attached to a request (`submitCommand`'s `attachments`), for the
    /// model to look at. Only the turn it came with carries it: the committed history keeps a
    /// text note instead (see [`attachments`]), so one picture is not re-sent with every
    /// later model call nor kept in memory for the conversation's lifetime.
    Image {
        /// A `data:image/<type>;base64,…` URL.
        url: String,
    },
}

/// One message of chat history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Speaker.
    pub role: Role,
    /// Content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl ChatMessage {
    /// A message with a single text block.
    pub fn text(role: Role, text: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks.
    pub fn joined_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A tool as offered to the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name, `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// True when `name` is a valid tool name (`^[a-zA-Z0-9_-]{1,64}$`).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What the loop sends a provider. The conversation's committed history is shared, not
/// copied: a turn adds its own messages after it, so a model call costs what the turn added,
/// not the length of the conversation.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    /// System prompt.
    pub system: String,
    /// Committed chat history before this turn, oldest first (shared with the conversation).
    pub history: std::sync::Arc<Vec<ChatMessage>>,
    /// This turn's messages so far: the user's, then assistant replies and tool results.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
}

impl ProviderRequest {
    /// A request without earlier history.
    pub fn new(
        system: impl Into<String>,
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
    ) -> ProviderRequest {
        ProviderRequest {
            system: system.into(),
            history: Default::default(),
            messages,
            tools,
        }
    }

    /// History then this turn's messages, oldest first.
    pub fn all_messages(&self) -> impl DoubleEndedIterator<Item = &ChatMessage> + Clone {
        self.history.iter().chain(self.messages.iter())
    }

    /// How many messages `all_messages` yields.
    pub fn message_count(&self) -> usize {
        self.history.len() + self.messages.len()
    }
}

/// What a provider answers: the assistant's content (text and/or tool calls), and the tokens
/// the call used when the provider reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderResponse {
    /// Text and `ToolUse` blocks.
    pub content: Vec<ContentBlock>,
    /// What the call used (the conversation's context meter follows it); `None` when the
    /// provider does not report usage (the offline `builtin` provider never does).
    pub usage: Option<usage::Usage>,
}

/// A piece of a model's answer as the provider streams it, in the order written. Tool calls
/// are not pieces: a provider assembles each one (its argument deltas joined by index) and
/// gives it whole in the [`ProviderResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerDelta {
    /// More words of the answer's text.
    Text(String),
    /// More words of the model's thinking (see [`ContentBlock::Thinking`]).
    Thinking(String),
}

/// Where a streaming provider hands each [`AnswerDelta`] as it arrives (on the calling
/// thread, in order, before the call's future resolves).
pub type DeltaSink = Box<dyn FnMut(AnswerDelta)>;

/// Why a provider call failed. The text is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Could not reach the endpoint, or it did not answer in time.
    #[error("provider unreachable: {0}")]
    Unreachable(String),
    /// The endpoint answered with an error status.
    #[error("provider returned HTTP {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Start of the response body.
        body: String,
    },
    /// The endpoint answered something we cannot understand.
    #[error("provider sent an invalid response: {0}")]
    Invalid(String),
    /// The endpoint refused the API key (HTTP 401 or 403): a wrong, expired or missing key,
    /// or one without access to the model.
    #[error("the provider refused the API key (HTTP {status}): {reason}")]
    KeyRefused {
        /// 401 or 403.
        status: u16,
        /// The server's reason (the key itself scrubbed from it).
        reason: String,
    },
    /// The endpoint does not serve the model asked for (a 404 that names a model).
    #[error(
        "the provider does not serve the model `{model}` (HTTP 404): {reason}; \
         `roundtable models` lists the models it serves"
    )]
    UnknownModel {
        /// The configured model name.
        model: String,
        /// The server's reason.
        reason: String,
    },
    /// The request was longer than the model's context window: the conversation recognises
    /// it (`@compact` makes the history fit).
    #[error(
        "the conversation is longer than the model's context window ({reason}): `@compact` \
         summarizes its history so that it fits"
    )]
    ContextOverflow {
        /// The server's reason (often with both token counts).
        reason: String,
    },
    /// No answer, or no next part of a streamed one, within the time limit.
    #[error("provider timed out: {0}")]
    Timeout(String),
}

/// A model backend.
pub trait Provider: Send + Sync {
    /// Short name for logs and `getStatus`.
    fn name(&self) -> &str;
    /// The model it calls, when it has one (`@system config` shows it); the offline
    /// `builtin` provider has none.
    fn model(&self) -> Option<&str> {
        None
    }
    /// The model's context window in tokens, when configured (the conversation's context
    /// meter is capped at it and shows its share); `None` when unknown.
    fn context_window(&self) -> Option<u64> {
        None
    }
    /// Whether every tool call it makes comes only from the words the requester typed
    /// (fixed phrases, never tool output or another participant's text), as the offline
    /// `builtin` provider's do. Such a call is the requester's own, as a typed `@conversation`
    /// is, so a conversation action it takes is not asked about again; a real model can be
    /// steered by what it reads (a tool result, a web page), so its conversation moves and
    /// handoffs ask the requester first (README, "Security": consent).
    fn acts_on_typed_words_only(&self) -> bool {
        false
    }
    /// Whether an answer comes without a network round trip (the offline `builtin`). A call
    /// over the network takes one at least, so the conversation has its request's acceptance
    /// made durable at once, beside the call, rather than lingering for the turn's end to
    /// share the fsync: the first words, which wait for that fsync, are then not late.
    fn answers_in_process(&self) -> bool {
        false
    }
    /// Whether the model is offered the built-in demonstration tools: `get_weather` (labelled
    /// sample data) and a `get_current_time` beside a tool server's own. Only the offline
    /// `builtin` provider, which shows the agent loop without a model, is: a real model is
    /// offered real tools only (`calculate`, and `get_current_time` where no server offers
    /// one), so it never reports sample weather as the weather.
    fn offers_demo_tools(&self) -> bool {
        false
    }
    /// The names of the models the endpoint serves (its `/v1/models`), sorted, for choosing
    /// one (`roundtable models`); empty for a provider without models (the offline
    /// `builtin`).
    fn list_models(&self) -> LocalBoxFuture<'static, Result<Vec<String>, ProviderError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// One model call.
    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>>;
    /// One model call whose answer is streamed: every piece of its text and thinking goes to
    /// `deltas` as it arrives, and the response is the whole answer, as [`Provider::complete`]
    /// gives it (its text blocks equal to the text pieces joined). Dropping the future stops
    /// the call (its HTTP request is closed). The default streams nothing and answers
    /// [`Provider::complete`]'s response.
    fn complete_streaming(
        &self,
        request: ProviderRequest,
        deltas: DeltaSink,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let _ = deltas;
        self.complete(request)
    }
}
