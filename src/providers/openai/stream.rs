//! A streamed chat-completions answer, chunk by chunk: [`ChunkStream`] reads each `data:`
//! event (`chat.completion.chunk`), hands its text and reasoning to the turn's sink as they
//! arrive, assembles the tool calls from their pieces by `index`, keeps the last `usage`
//! (the chunk `stream_options.include_usage` adds at the end, or the one llama.cpp puts in
//! its last chunk), and ends at `[DONE]`. Pure (no I/O); `provider.rs` feeds it through
//! `call.rs`.
//!
//! Reasoning comes as `reasoning_content` (DeepSeek, llama.cpp, vLLM) or `reasoning`
//! (OpenRouter, newer vLLM, Ollama) and becomes one [`ContentBlock::Thinking`] ahead of the
//! text. A tool call's first piece carries its `id` and `function.name`, later ones more of
//! `function.arguments`; a piece without `index` continues the last call unless it brings a
//! new `id`. A chunk `{"error": …}` (OpenRouter reports mid-stream failures so) fails the
//! call. Bounded: at most [`MAX_TOOL_CALLS`] calls and [`MAX_ANSWER_BYTES`] of text,
//! reasoning and arguments together.

use std::collections::BTreeMap;

use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{AnswerDelta, ContentBlock, ProviderError, ProviderResponse};
use serde_json::Value;

use super::wire::{parse_arguments, parse_usage};
use crate::providers::call::{Assembler, Flow, StreamFailure};
use crate::providers::sse::SseEvent;
use crate::providers::status::{is_retryable, scrub, truncate};

/// Most tool calls one answer may make: far more than any model asks for at once; an
/// `index` past it (a broken server counting up forever) is an error, not memory.
pub const MAX_TOOL_CALLS: usize = 128;

/// Most bytes of text, reasoning and tool-call arguments one answer may bring: 16 MiB, as
/// a whole answer read at once (`call::MAX_RESPONSE_BYTES`).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A tool call being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    /// From its first piece (`call_<n>` when none ever comes).
    id: String,
    /// From its first piece that has one.
    name: String,
    /// Every piece's `function.arguments`, joined.
    arguments: String,
}

/// The answer being read (see the module docs).
#[derive(Debug)]
pub(crate) struct ChunkStream {
    /// The endpoint as errors name it.
    shown_url: String,
    /// The API key, scrubbed from a reported error.
    secret: Option<String>,
    /// The text so far.
    text: String,
    /// The reasoning so far.
    thinking: String,
    /// Tool calls by `index`.
    calls: BTreeMap<u64, PartialCall>,
    /// The index the last piece without one went to.
    last_index: Option<u64>,
    /// The last usage reported.
    usage: Option<Usage>,
    /// A chunk said `finish_reason`, or `[DONE]` came: the answer is complete.
    finished: bool,
    /// Bytes of text, reasoning and arguments so far.
    bytes: usize,
}

impl ChunkStream {
    /// A reader for one answer from `shown_url`.
    pub(crate) fn new(shown_url: &str, secret: Option<&str>) -> ChunkStream {
        ChunkStream {
            shown_url: shown_url.to_owned(),
            secret: secret.map(str::to_owned),
            text: String::new(),
            thinking: String::new(),
            calls: BTreeMap::new(),
            last_index: None,
            usage: None,
            finished: false,
            bytes: 0,
        }
    }

    /// Counts `added` bytes against [`MAX_ANSWER_BYTES`].
    fn grow(&mut self, added: usize) -> Result<(), StreamFailure> {
        self.bytes += added;
        if self.bytes > MAX_ANSWER_BYTES {
            return Err(invalid(format!(
                "the answer from {} is larger than {} MiB",
                self.shown_url,
                MAX_ANSWER_BYTES / (1024 * 1024)
            )));
        }
        Ok(())
    }

    /// One piece of `delta.tool_calls`.
    fn tool_call_piece(&mut self, piece: &Value) -> Result<(), StreamFailure> {
        let id = piece
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let index = match piece.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            None => match (self.last_index, id) {
                (Some(last), Some(id)) if self.calls.get(&last).is_some_and(|c| c.id != id) => {
                    last + 1
                }
                (Some(last), _) => last,
                (None, _) => 0,
            },
        };
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS {
            return Err(invalid(format!(
                "the answer from {} makes more than {MAX_TOOL_CALLS} tool calls",
                self.shown_url
            )));
        }
        let function = piece.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            // Some servers send the arguments as an object, whole.
            Some(value @ Value::Object(_)) => value.to_string(),
            _ => String::new(),
        };
        self.grow(name.len() + arguments.len())?;
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id {
            if call.id.is_empty() {
                call.id = id.to_owned();
            }
        }
        if call.name.is_empty() {
            call.name = name.to_owned();
        }
        call.arguments.push_str(&arguments);
        self.last_index = Some(index);
        Ok(())
    }
}

/// An answer that cannot be understood (not retried).
fn invalid(message: String) -> StreamFailure {
    StreamFailure {
        error: ProviderError::Invalid(message),
        retryable: false,
    }
}

impl Assembler for ChunkStream {
    fn event(
        &mut self,
        event: SseEvent,
        sink: &mut dyn FnMut(AnswerDelta),
    ) -> Result<Flow, StreamFailure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.finished = true;
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            invalid(format!(
                "a chunk of the answer from {} is not JSON ({e}): {}",
                self.shown_url,
                truncate(data)
            ))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let code = error.get("code").and_then(Value::as_u64).unwrap_or(0) as u16;
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(StreamFailure {
                error: ProviderError::Unreachable(format!(
                    "the answer from {} failed: {}",
                    self.shown_url,
                    scrub(&truncate(&message), self.secret.as_deref())
                )),
                retryable: is_retryable(code),
            });
        }
        if let Some(usage) = parse_usage(&chunk) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(Flow::More);
        };
        if let Some(delta) = choice.get("delta") {
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .find_map(|key| delta.get(*key).and_then(Value::as_str))
                .filter(|r| !r.is_empty());
            if let Some(reasoning) = reasoning {
                self.grow(reasoning.len())?;
                self.thinking.push_str(reasoning);
                sink(AnswerDelta::Thinking(reasoning.to_owned()));
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                if !text.is_empty() {
                    self.grow(text.len())?;
                    self.text.push_str(text);
                    sink(AnswerDelta::Text(text.to_owned()));
                }
            }
            if let Some(pieces) = delta.get("tool_calls").and_then(Value::as_array) {
                for piece in pieces {
                    self.tool_call_piece(piece)?;
                }
            }
        }
        if choice
            .get("finish_reason")
            .is_some_and(|reason| !reason.is_null())
        {
            self.finished = true;
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Result<ProviderResponse, ProviderError> {
        if !self.finished {
            return Err(ProviderError::Unreachable(format!(
                "the answer from {} ended before it was complete (no finish_reason, no [DONE])",
                self.shown_url
            )));
        }
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(ContentBlock::Thinking {
                text: self.thinking,
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        for (position, (index, call)) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(ProviderError::Invalid(format!(
                    "tool call {index} of the answer from {} has no function name",
                    self.shown_url
                )));
            }
            let id = if call.id.is_empty() {
                format!("call_{position}")
            } else {
                call.id
            };
            content.push(ContentBlock::ToolUse {
                id,
                name: call.name,
                input: parse_arguments(Some(&Value::String(call.arguments))),
            });
        }
        Ok(ProviderResponse {
            content,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `chunks` (each a `data:` value) and ends the stream; answers the response and
    /// the pieces the sink got.
    fn read(chunks: &[Value]) -> (Result<ProviderResponse, ProviderError>, Vec<AnswerDelta>) {
        let mut stream = ChunkStream::new("https://api.example.com/v1/chat/completions", None);
        let mut deltas = Vec::new();
        for chunk in chunks {
            let data = match chunk {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let flow = stream
                .event(SseEvent { event: None, data }, &mut |d| deltas.push(d))
                .map_err(|f| f.error);
            match flow {
                Ok(Flow::Done) => break,
                Ok(Flow::More) => {}
                Err(e) => return (Err(e), deltas),
            }
        }
        (stream.finish(), deltas)
    }

    fn delta(delta: Value) -> Value {
        json!({"object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    /// Reasoning, then text, arrive as pieces in order; the answer holds one thinking block
    /// and one text block; the usage chunk after `finish_reason` is kept with its model.
    #[test]
    fn text_reasoning_and_usage() {
        let (response, deltas) = read(&[
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"reasoning_content": "The user "})),
            delta(json!({"reasoning": "wants 4."})),
            delta(json!({"content": "2+2"})),
            delta(json!({"content": " = 4"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "model": "qwen3-8b", "usage": {"prompt_tokens": 120, "completion_tokens": 9}}),
            json!("[DONE]"),
        ]);
        assert_eq!(
            deltas,
            vec![
                AnswerDelta::Thinking("The user ".into()),
                AnswerDelta::Thinking("wants 4.".into()),
                AnswerDelta::Text("2+2".into()),
                AnswerDelta::Text(" = 4".into()),
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.content,
            vec![
                ContentBlock::Thinking {
                    text: "The user wants 4.".into(),
                    signature: None
                },
                ContentBlock::Text {
                    text: "2+2 = 4".into()
                },
            ]
        );
        assert_eq!(
            response.usage,
            Some(Usage {
                input_tokens: 120,
                output_tokens: 9,
                model: Some("qwen3-8b".into())
            })
        );
    }

    /// Two tool calls whose ids, names and arguments arrive in pieces, interleaved, are
    /// assembled by index; pieces without an index continue the last call.
    #[test]
    fn tool_calls_assembled_by_index() {
        let (response, deltas) = read(&[
            delta(
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "calculate", "arguments": ""}}]}),
            ),
            delta(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "get_time", "arguments": "{\"zone\":"}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"expr"}}]})),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "ession\":\"6*7\"}"}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 1, "function": {"arguments": "\"UTC\""}}]})),
            delta(json!({"tool_calls": [{"function": {"arguments": "}"}}]})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!("[DONE]"),
        ]);
        assert!(deltas.is_empty(), "{deltas:?}");
        assert_eq!(
            response.unwrap().content,
            vec![
                ContentBlock::ToolUse {
                    id: "call_a".into(),
                    name: "calculate".into(),
                    input: json!({"expression": "6*7"})
                },
                ContentBlock::ToolUse {
                    id: "call_b".into(),
                    name: "get_time".into(),
                    input: json!({"zone": "UTC"})
                },
            ]
        );
    }

    /// A stream that ends without `finish_reason` or `[DONE]` broke off; a chunk that is not
    /// JSON, an error chunk, a nameless call and too many calls are exact errors.
    #[test]
    fn broken_streams_are_errors() {
        let (response, _) = read(&[delta(json!({"content": "half an ans"}))]);
        assert_eq!(
            response.unwrap_err().to_string(),
            "provider unreachable: the answer from https://api.example.com/v1/chat/completions \
             ended before it was complete (no finish_reason, no [DONE])"
        );
        let (response, _) = read(&[json!("{not json")]);
        assert!(
            matches!(&response, Err(ProviderError::Invalid(m)) if m.contains("is not JSON")),
            "{response:?}"
        );
        let (response, _) = read(&[json!({"error": {"code": 502, "message": "upstream died"}})]);
        assert_eq!(
            response.unwrap_err().to_string(),
            "provider unreachable: the answer from https://api.example.com/v1/chat/completions \
             failed: upstream died"
        );
        let (response, _) = read(&[
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})),
            json!("[DONE]"),
        ]);
        assert!(
            matches!(&response, Err(ProviderError::Invalid(m)) if m.contains("no function name")),
            "{response:?}"
        );
        let many: Vec<Value> = (0..=MAX_TOOL_CALLS as u64)
            .map(|i| delta(json!({"tool_calls": [{"index": i * 1000, "id": format!("c{i}"), "function": {"name": "f"}}]})))
            .collect();
        let (response, _) = read(&many);
        assert!(
            matches!(&response, Err(ProviderError::Invalid(m)) if m.contains("more than 128 tool calls")),
            "{response:?}"
        );
    }

    /// An error chunk with a transient code may be retried (only while nothing was shown,
    /// which `call.rs` checks); another may not.
    #[test]
    fn error_chunks_say_whether_to_retry() {
        let mut stream = ChunkStream::new("u", Some("sk-abcdef"));
        let failure = stream
            .event(
                SseEvent {
                    event: None,
                    data: json!({"error": {"code": 429, "message": "slow down, sk-abcdef"}})
                        .to_string(),
                },
                &mut |_| {},
            )
            .unwrap_err();
        assert!(failure.retryable);
        assert!(failure.error.to_string().ends_with("slow down, ***"));
        let failure = stream
            .event(
                SseEvent {
                    event: None,
                    data: json!({"error": {"message": "bad"}}).to_string(),
                },
                &mut |_| {},
            )
            .unwrap_err();
        assert!(!failure.retryable);
    }
}
