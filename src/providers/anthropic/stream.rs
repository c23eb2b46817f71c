//! A streamed Messages answer, event by event: [`MessageStream`] reads `message_start`
//! (model, input usage with the cache figures), `content_block_start` / `_delta` / `_stop`
//! (text, thinking with its signature, tool use whose input arrives as pieces of JSON),
//! `message_delta` (the final output count), `message_stop` (the end), `ping`, and `error`
//! (an overloaded or rate-limited server, retried while nothing was shown). Text and thinking
//! pieces go to the turn's sink as they arrive. Pure (no I/O); `provider.rs` feeds it through
//! `call.rs`. Bounded like the OpenAI stream: at most [`MAX_BLOCKS`] blocks and
//! [`MAX_ANSWER_BYTES`] of text, thinking and tool input together.

use std::collections::BTreeMap;

use roundtable_actors::agent::{AnswerDelta, ContentBlock, ProviderError, ProviderResponse};
use serde_json::Value;

use super::wire::{tool_input, usage_of};
use crate::providers::call::{Assembler, Flow, StreamFailure};
use crate::providers::sse::SseEvent;
use crate::providers::status::{is_retryable, status_error, truncate};

/// Most content blocks one answer may have: far more than a model writes (thinking, text,
/// a few tool uses); an index past it is an error, not memory.
pub const MAX_BLOCKS: usize = 256;

/// Most bytes of text, thinking and tool input one answer may bring (16 MiB).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A content block being assembled.
#[derive(Debug)]
enum Block {
    /// Text.
    Text(String),
    /// Thinking and its signature.
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// A tool call: its input is the JSON pieces joined (or the start's input when no piece
    /// comes).
    ToolUse {
        id: String,
        name: String,
        json: String,
        start: Value,
    },
    /// Anything else (`redacted_thinking`, blocks of newer API versions): not kept.
    Other,
}

/// Who the stream is from, for errors.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    /// The provider and model, for the log.
    pub who: String,
    /// The endpoint as errors name it.
    pub shown_url: String,
    /// The configured model (for an unknown-model error in the stream).
    pub model: String,
    /// The key, scrubbed from reported errors.
    pub secret: Option<String>,
}

/// The answer being read (see the module docs).
#[derive(Debug)]
pub(crate) struct MessageStream {
    /// For errors.
    origin: Origin,
    /// Blocks by index.
    blocks: BTreeMap<u64, Block>,
    /// The model `message_start` named.
    model: Option<String>,
    /// The latest usage object (`message_start`'s, then each `message_delta`'s counts over
    /// it).
    usage: serde_json::Map<String, Value>,
    /// `message_stop` came.
    stopped: bool,
    /// Bytes of text, thinking and input so far.
    bytes: usize,
}

impl MessageStream {
    /// A reader for one answer.
    pub(crate) fn new(origin: Origin) -> MessageStream {
        MessageStream {
            origin,
            blocks: BTreeMap::new(),
            model: None,
            usage: serde_json::Map::new(),
            stopped: false,
            bytes: 0,
        }
    }

    /// The usage so far, with the cache figures (read, written), when any was reported.
    pub(crate) fn usage(&self) -> Option<(roundtable_actors::agent::usage::Usage, u64, u64)> {
        usage_of(&Value::Object(self.usage.clone()), self.model.as_deref())
    }

    fn invalid(&self, what: String) -> StreamFailure {
        StreamFailure {
            error: ProviderError::Invalid(format!(
                "the answer from {}: {what}",
                self.origin.shown_url
            )),
            retryable: false,
        }
    }

    fn grow(&mut self, added: usize) -> Result<(), StreamFailure> {
        self.bytes += added;
        if self.bytes > MAX_ANSWER_BYTES {
            return Err(self.invalid(format!(
                "larger than {} MiB",
                MAX_ANSWER_BYTES / (1024 * 1024)
            )));
        }
        Ok(())
    }

    /// The error an `error` event reports, as the same error answered as a status would be.
    fn reported_error(&self, data: &Value) -> StreamFailure {
        let kind = data
            .pointer("/error/type")
            .and_then(Value::as_str)
            .unwrap_or("");
        let status = match kind {
            "overloaded_error" => 529,
            "rate_limit_error" => 429,
            "api_error" => 500,
            "timeout_error" => 504,
            "authentication_error" => 401,
            "permission_error" => 403,
            "not_found_error" => 404,
            "request_too_large" => 413,
            _ => 400,
        };
        StreamFailure {
            error: status_error(
                status,
                &data.to_string(),
                &self.origin.model,
                &self.origin.shown_url,
                self.origin.secret.as_deref(),
            ),
            retryable: is_retryable(status),
        }
    }
}

impl Assembler for MessageStream {
    fn event(
        &mut self,
        event: SseEvent,
        sink: &mut dyn FnMut(AnswerDelta),
    ) -> Result<Flow, StreamFailure> {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            self.invalid(format!(
                "an event is not JSON ({e}): {}",
                truncate(&event.data)
            ))
        })?;
        let kind = event
            .event
            .as_deref()
            .or_else(|| data["type"].as_str())
            .unwrap_or("")
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                let message = &data["message"];
                self.model = message["model"].as_str().map(str::to_owned);
                if let Some(usage) = message["usage"].as_object() {
                    self.usage = usage.clone();
                }
            }
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap_or(self.blocks.len() as u64);
                if self.blocks.len() >= MAX_BLOCKS && !self.blocks.contains_key(&index) {
                    return Err(self.invalid(format!("more than {MAX_BLOCKS} content blocks")));
                }
                let block = &data["content_block"];
                let started = match block["type"].as_str() {
                    Some("text") => {
                        let text = block["text"].as_str().unwrap_or_default().to_owned();
                        if !text.is_empty() {
                            self.grow(text.len())?;
                            sink(AnswerDelta::Text(text.clone()));
                        }
                        Block::Text(text)
                    }
                    Some("thinking") => Block::Thinking {
                        text: block["thinking"].as_str().unwrap_or_default().to_owned(),
                        signature: block["signature"]
                            .as_str()
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned),
                    },
                    Some("tool_use") => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        json: String::new(),
                        start: block["input"].clone(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, started);
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap_or(0);
                let delta = &data["delta"];
                let piece = |key: &str| delta[key].as_str().unwrap_or_default().to_owned();
                let added = match delta["type"].as_str() {
                    Some("text_delta") => piece("text").len(),
                    Some("thinking_delta") => piece("thinking").len(),
                    Some("input_json_delta") => piece("partial_json").len(),
                    _ => 0,
                };
                self.grow(added)?;
                let Some(block) = self.blocks.get_mut(&index) else {
                    return Err(self.invalid(format!("a delta for block {index}, never started")));
                };
                match (block, delta["type"].as_str()) {
                    (Block::Text(text), Some("text_delta")) => {
                        let more = piece("text");
                        text.push_str(&more);
                        sink(AnswerDelta::Text(more));
                    }
                    (Block::Thinking { text, .. }, Some("thinking_delta")) => {
                        let more = piece("thinking");
                        text.push_str(&more);
                        sink(AnswerDelta::Thinking(more));
                    }
                    (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                        signature
                            .get_or_insert_with(String::new)
                            .push_str(&piece("signature"));
                    }
                    (Block::ToolUse { json, .. }, Some("input_json_delta")) => {
                        json.push_str(&piece("partial_json"));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(usage) = data["usage"].as_object() {
                    for (key, value) in usage {
                        if !value.is_null() {
                            self.usage.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            "error" => return Err(self.reported_error(&data)),
            // `ping`, `content_block_stop`, and events of newer versions.
            _ => {}
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Result<ProviderResponse, ProviderError> {
        if !self.stopped {
            return Err(ProviderError::Unreachable(format!(
                "the answer from {} ended before it was complete (no message_stop)",
                self.origin.shown_url
            )));
        }
        let usage = self.usage().map(|(usage, read, written)| {
            // The cache figures show whether prompt caching works (`@system trace
            // roundtable::providers=debug`); the meter counts all of the input.
            log::debug!(
                "{}: {} input tokens ({read} read from the prompt cache, {written} written to \
                 it), {} output",
                self.origin.who,
                usage.input_tokens,
                usage.output_tokens
            );
            usage
        });
        let mut content = Vec::new();
        for (index, block) in self.blocks {
            match block {
                Block::Text(text) if !text.is_empty() => content.push(ContentBlock::Text { text }),
                Block::Thinking { text, signature } => {
                    content.push(ContentBlock::Thinking { text, signature })
                }
                Block::ToolUse {
                    id,
                    name,
                    json,
                    start,
                } => {
                    if id.is_empty() || name.is_empty() {
                        return Err(ProviderError::Invalid(format!(
                            "tool_use block {index} of the answer from {} has no id or name",
                            self.origin.shown_url
                        )));
                    }
                    let input = if json.trim().is_empty() {
                        tool_input(start)
                    } else {
                        match serde_json::from_str::<Value>(&json) {
                            Ok(value) => tool_input(value),
                            Err(_) => serde_json::json!({ "_raw": json }),
                        }
                    };
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
                _ => {}
            }
        }
        Ok(ProviderResponse { content, usage })
    }
}
