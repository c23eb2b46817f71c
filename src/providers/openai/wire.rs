//! The chat-completions wire format, both directions (the mapping is in the parent module's
//! docs): [`request_body`] from a [`ProviderRequest`], [`parse_response`] into the assistant's
//! content blocks. Pure functions, no I/O; used by [`super::provider`].

use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{
    ChatMessage, ContentBlock, ProviderError, ProviderRequest, ProviderResponse, Role, ToolSpec,
};
use serde_json::{json, Map, Value};

use crate::providers::status::truncate;

/// The JSON body of a chat-completions request; `stream` asks for the answer as events, with
/// the usage chunk at the end.
pub(super) fn request_body(model: &str, request: &ProviderRequest, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert(
        "messages".into(),
        Value::Array(wire_messages(
            &request.system,
            request.all_messages(),
            request.message_count(),
        )),
    );
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(request.tools.iter().map(wire_tool).collect()),
        );
    }
    body.insert("stream".into(), Value::Bool(stream));
    if stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        }
    })
}

/// System prompt + history in chat-completions form (see the module docs for the mapping).
fn wire_messages<'a>(
    system: &str,
    messages: impl Iterator<Item = &'a ChatMessage>,
    count: usize,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(count + 1);
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in messages {
        match message.role {
            Role::User => {
                for block in &message.content {
                    if let ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } = block
                    {
                        let content = if *is_error {
                            format!("ERROR: {content}")
                        } else {
                            content.clone()
                        };
                        out.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_use_id,
                            "content": content,
                        }));
                    }
                }
                if let Some(content) = user_content(message) {
                    out.push(json!({"role": "user", "content": content}));
                }
            }
            Role::Assistant => {
                let tool_calls: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::ToolUse { id, name, input } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        })),
                        _ => None,
                    })
                    .collect();
                let text = message.joined_text();
                let thought = message
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Thinking { .. }));
                if text.is_empty() && tool_calls.is_empty() && thought {
                    // Thinking never goes back; a message of nothing else is left out.
                    continue;
                }
                let mut wire = Map::new();
                wire.insert("role".into(), Value::String("assistant".into()));
                // `null` content is only valid next to tool calls; otherwise send the
                // (possibly empty) text, which every server accepts.
                let content = if text.is_empty() && !tool_calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                wire.insert("content".into(), content);
                if !tool_calls.is_empty() {
                    wire.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                out.push(Value::Object(wire));
            }
        }
    }
    out
}

/// The `content` of a user message's `{"role":"user"}` message: its text, or content parts
/// (the text, then each image) when it has images; `None` when it has neither (only tool
/// results).
fn user_content(message: &ChatMessage) -> Option<Value> {
    let has_text = message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Text { .. }));
    let images: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Image { url } => {
                Some(json!({"type": "image_url", "image_url": {"url": url}}))
            }
            _ => None,
        })
        .collect();
    if !images.is_empty() {
        let mut parts = vec![json!({"type": "text", "text": message.joined_text()})];
        parts.extend(images);
        Some(Value::Array(parts))
    } else {
        has_text.then(|| Value::String(message.joined_text()))
    }
}

/// Parses a chat-completions response body into the assistant's content blocks (its
/// reasoning, when it has any, as a thinking block ahead of the text).
pub(super) fn parse_response(bytes: &[u8]) -> Result<ProviderResponse, ProviderError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ProviderError::Invalid(format!(
            "response is not JSON ({e}): {}",
            truncate(&String::from_utf8_lossy(bytes))
        ))
    })?;
    let message = value
        .pointer("/choices/0/message")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ProviderError::Invalid(format!(
                "response has no choices[0].message: {}",
                truncate(&value.to_string())
            ))
        })?;

    let mut content = Vec::new();
    let text = match message.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        // Some servers answer with content parts: keep the text ones.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Some(other) => {
            return Err(ProviderError::Invalid(format!(
                "choices[0].message.content is neither a string nor null: {}",
                truncate(&other.to_string())
            )))
        }
    };
    let reasoning = ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|key| message.get(*key).and_then(Value::as_str))
        .filter(|r| !r.is_empty());
    if let Some(reasoning) = reasoning {
        content.push(ContentBlock::Thinking {
            text: reasoning.to_owned(),
            signature: None,
        });
    }
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }

    let calls: &[Value] = match message.get("tool_calls") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(calls)) => calls,
        Some(other) => {
            return Err(ProviderError::Invalid(format!(
                "choices[0].message.tool_calls is not an array: {}",
                truncate(&other.to_string())
            )))
        }
    };
    for (index, call) in calls.iter().enumerate() {
        let function = call.get("function").and_then(Value::as_object);
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ProviderError::Invalid(format!(
                    "tool_calls[{index}] has no function name: {}",
                    truncate(&call.to_string())
                ))
            })?;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("call_{index}"));
        let input = parse_arguments(function.and_then(|f| f.get("arguments")));
        content.push(ContentBlock::ToolUse {
            id,
            name: name.to_owned(),
            input,
        });
    }
    Ok(ProviderResponse {
        content,
        usage: parse_usage(&value),
    })
}

/// The answer's `usage` (`{"prompt_tokens","completion_tokens","total_tokens"}`) and its
/// `model`. `None` when the answer has no `usage` object or no count in it (some servers
/// leave it out, or send `null`). A server that gives only `total_tokens` has it counted as
/// input. Counts that are not whole numbers are left out. The same object ends a streamed
/// answer (its last chunk, with `stream_options.include_usage`): `stream.rs` reads it here
/// too.
pub(super) fn parse_usage(answer: &Value) -> Option<Usage> {
    let usage = answer.get("usage")?.as_object()?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let (input, output) = match (count("prompt_tokens"), count("completion_tokens")) {
        (None, None) => (count("total_tokens")?, 0),
        (input, output) => (input.unwrap_or(0), output.unwrap_or(0)),
    };
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        model: answer
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_owned),
    })
}

/// A tool call's `arguments` as a JSON object. Missing or blank arguments are `{}`; an
/// object sent as-is (Ollama) is kept; a string is parsed, and one that is not a JSON
/// object is kept verbatim as `{"_raw": <string>}`.
pub(super) fn parse_arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(value @ Value::Object(_)) => value,
            _ => json!({ "_raw": s }),
        },
        Some(value @ Value::Object(_)) => value.clone(),
        Some(other) => json!({ "_raw": other.to_string() }),
    }
}
