//! The OpenAI-compatible model provider: one [`Provider`] for any server that speaks
//! `POST /v1/chat/completions` (llama.cpp `llama-server`, Ollama, vLLM, LM Studio, and the hosted
//! APIs: OpenAI, OpenRouter, Groq, Together, Mistral, DeepSeek), over `http://` or
//! `https://`.
//!
//! This module owns:
//! - [`OpenAiConfig`] (`config.rs`): endpoint, model, optional API key, timeout and context
//!   window, read from the `ROUNDTABLE_OPENAI_*` environment variables by
//!   [`OpenAiConfig::from_env`] (or from a `[providers.NAME]` profile of the config file);
//! - [`OpenAiProvider`] (`provider.rs`): the call (through `call.rs`: the HTTP stack, time
//!   limits, retries, error texts), streaming or not, and the listing of `/models`;
//! - `stream.rs`: a streamed answer's chunks assembled (text, reasoning, tool calls by index,
//!   usage);
//! - `wire.rs`: the translation between the agent's [`ChatMessage`] / [`ContentBlock`]
//!   history and the chat-completions wire format, in both directions (pure, no I/O).
//!
//! Who uses it: [`crate::providers::ProviderSet`] builds it for `--provider openai` and for
//! each `kind = "openai"` profile; a conversation's agent turn
//! (`roundtable_actors::agent::turn`) sees it only as a `dyn Provider`.
//!
//! Streaming: a call asks for `"stream": true` with `stream_options.include_usage` and reads
//! the server-sent events as they come, handing each piece of text and of reasoning to the
//! turn ([`Provider::complete_streaming`]). A server that answers such a request with a whole
//! JSON answer, or refuses it with a 400 whose reason mentions `stream` (an unknown
//! `stream_options`), gets its answer read whole, and is asked for whole answers
//! (`"stream": false`) from then on by this provider: it is remembered, not rediscovered per
//! call.
//!
//! Wire mapping (request):
//! - the system prompt becomes the first message, `{"role":"system"}` (left out when empty);
//! - a user message's `ToolResult` blocks become one `{"role":"tool","tool_call_id",
//!   "content"}` message each (content prefixed with `ERROR: ` when the tool failed), followed
//!   by one `{"role":"user","content"}` message with its text blocks joined by newlines (when
//!   it has `Image` blocks, `content` is an array of parts instead: the joined text as
//!   `{"type":"text"}`, then one `{"type":"image_url","image_url":{"url"}}` per image);
//! - an assistant message becomes `{"role":"assistant","content","tool_calls"}` where
//!   `content` is the joined text or `null` when there is no text but there are tool calls,
//!   and every `ToolUse` becomes a `function` tool call whose `arguments` is the input
//!   serialized as a JSON string (`tool_calls` is omitted when there are none); `Thinking`
//!   blocks are never sent back, and a message that held only thinking is left out;
//! - tools become `"tools":[{"type":"function","function":{"name","description",
//!   "parameters"}}]` (omitted when there are none).
//!
//! Wire mapping (response, whole or assembled from the stream): the reasoning
//! (`reasoning_content` or `reasoning`) becomes a `Thinking` block, the content a `Text`
//! block when it is not empty, and every tool call a `ToolUse` block. The `arguments` string
//! is parsed as JSON; a string that does not parse to a JSON object is kept as
//! `{"_raw": <string>}` so the agent loop can report the bad call back to the model as a tool
//! error instead of failing the turn. A tool call without an id gets `call_<index>`.
//! `usage.prompt_tokens` / `completion_tokens` (and the answer's `model`) become the
//! response's [`Usage`](roundtable_actors::agent::usage::Usage), which the conversation's
//! context meter follows; an answer without `usage` leaves the meter as it was.

mod config;
mod provider;
mod stream;
mod wire;

pub use config::{
    OpenAiConfig, DEFAULT_BASE_URL, DEFAULT_TIMEOUT_SECS, ENV_API_KEY, ENV_API_KEY_FALLBACK,
    ENV_BASE_URL, ENV_CONTEXT_WINDOW, ENV_MODEL, ENV_TIMEOUT_SECS,
};
pub use provider::OpenAiProvider;
#[allow(unused_imports)] // for the doc links above
use roundtable_actors::agent::{ChatMessage, ContentBlock, Provider, ProviderError};

#[cfg(test)]
mod tests;
