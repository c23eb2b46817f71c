//! The Anthropic Messages API as a provider of its own (`--provider anthropic`, or a
//! `kind = "anthropic"` profile): `POST <base>/v1/messages` with `x-api-key` and
//! `anthropic-version`, streamed.
//!
//! This module owns:
//! - [`AnthropicConfig`] (`config.rs`): endpoint (`https://api.anthropic.com` by default),
//!   model, key, time limit, context window, `max_tokens` and the extended-thinking budget,
//!   read from the `ROUNDTABLE_ANTHROPIC_*` environment by [`AnthropicConfig::from_env`];
//! - [`AnthropicProvider`] (`provider.rs`): the call (through `call.rs`: the HTTP stack, time
//!   limits, retries, error texts) and the listing of `/v1/models`;
//! - `stream.rs`: the events of a streamed answer assembled;
//! - `wire.rs`: the agent's history in the API's form, the cache breakpoints, usage.
//!
//! Wire mapping (request): the system prompt is one text block of `system`; tools are
//! `{name, description, input_schema}`; each message keeps its role, with its tool results
//! first (`tool_result`, `is_error` when the tool failed), then its text (empty text left
//! out), images (a `data:` URL as a `base64` source with its media type, another URL as a
//! `url` source) and tool calls (`tool_use`); a message left with nothing is left out.
//! Thinking goes back only within the turn that made it, with its signature (the API needs a
//! tool-using turn's thinking on the turn's next call); the committed history has none.
//! `thinking: {type: enabled, budget_tokens}` is asked for only when a budget is configured.
//!
//! Prompt caching: `cache_control: {type: ephemeral}` on the system block, the last tool,
//! the last message of the committed history and, in a turn that has called tools, its
//! newest message (four breakpoints, the API's most): a long conversation pays for its
//! history once per five minutes, not every turn, and a tool loop reads its turn so far from
//! the cache.
//!
//! Wire mapping (response): text blocks become `Text` (each text delta goes to the turn as
//! it arrives), thinking blocks `Thinking` with their signature (each thinking delta goes to
//! the turn as thinking), tool uses `ToolUse` (input assembled from its JSON pieces; one that
//! is not a JSON object is kept as `{"_raw": …}` for the loop to report). `redacted_thinking`
//! blocks are not kept. Usage: the input is `input_tokens` (uncached) plus
//! `cache_read_input_tokens` plus `cache_creation_input_tokens`, the output the last
//! `output_tokens`: the context the conversation occupies, which the meter follows.

mod config;
mod provider;
mod stream;
mod wire;

pub(crate) use config::positive;
pub use config::{
    AnthropicConfig, API_VERSION, DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT_SECS,
    ENV_API_KEY, ENV_API_KEY_FALLBACK, ENV_BASE_URL, ENV_CONTEXT_WINDOW, ENV_MAX_TOKENS, ENV_MODEL,
    ENV_THINKING_BUDGET, ENV_TIMEOUT_SECS, MIN_THINKING_BUDGET,
};
pub use provider::AnthropicProvider;

#[cfg(test)]
mod tests;
