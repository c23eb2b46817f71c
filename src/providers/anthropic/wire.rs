//! The Messages API's wire format, both directions (the mapping is in the parent module's
//! docs): [`request_body`] from a [`ProviderRequest`], with the prompt-cache breakpoints;
//! [`parse_message`] for an answer read whole; [`usage_of`] for the usage objects of both.
//! Pure functions, no I/O; used by `provider.rs` and `stream.rs`.

use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{
    ChatMessage, ContentBlock, ProviderError, ProviderRequest, ProviderResponse, Role,
};
use serde_json::{json, Map, Value};

use super::config::AnthropicConfig;
use crate::providers::status::truncate;

/// The prompt-cache breakpoint: the prefix up to the block that carries it is cached for
/// five minutes (refreshed by every hit), and read at a tenth of the price by the calls that
/// repeat it.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The JSON body of a Messages request: model, `max_tokens`, `stream`, the system prompt as
/// one text block, the tools, the messages, and `thinking` when a budget is configured. The
/// cache breakpoints (at most four; the API refuses more) sit on the system block, the last
/// tool, the last message of the committed history, and, once a turn has called tools, the
/// turn's newest message: each call then reads everything up to its newest part from the
/// cache instead of paying for the whole conversation again.
pub(super) fn request_body(
    config: &AnthropicConfig,
    request: &ProviderRequest,
    stream: bool,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(config.model.clone()));
    body.insert("max_tokens".into(), json!(config.max_tokens));
    body.insert("stream".into(), Value::Bool(stream));
    if !request.system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": request.system, "cache_control": ephemeral()}]),
        );
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if let Some(Value::Object(last)) = tools.last_mut() {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(budget) = config.thinking_budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    let mut messages = Vec::with_capacity(request.message_count());
    for message in request.history.iter() {
        // The committed history holds no thinking; none would go back if it did.
        if let Some(wire) = wire_message(message, false) {
            messages.push(wire);
        }
    }
    if let Some(last) = messages.last_mut() {
        mark_for_cache(last);
    }
    for message in &request.messages {
        if let Some(wire) = wire_message(message, true) {
            messages.push(wire);
        }
    }
    if request.messages.len() > 1 {
        if let Some(last) = messages.last_mut() {
            mark_for_cache(last);
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// Puts the cache breakpoint on a message's last block that may carry one (not a thinking
/// block).
fn mark_for_cache(message: &mut Value) {
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    if let Some(Value::Object(block)) = blocks
        .iter_mut()
        .rev()
        .find(|b| b["type"] != "thinking" && b["type"] != "redacted_thinking")
    {
        block.insert("cache_control".into(), ephemeral());
    }
}

/// One message in the wire's form; `None` when nothing of it goes on the wire. Thinking
/// blocks go back only when `with_thinking` (this turn's) and signed.
fn wire_message(message: &ChatMessage, with_thinking: bool) -> Option<Value> {
    let mut blocks = Vec::new();
    // Tool results lead a user message (the API wants them first).
    for block in &message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } = block
        {
            let mut result =
                json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content});
            if *is_error {
                result["is_error"] = Value::Bool(true);
            }
            blocks.push(result);
        }
    }
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                blocks.push(json!({"type": "text", "text": text}))
            }
            ContentBlock::Image { url } => blocks.push(image(url)),
            ContentBlock::ToolUse { id, name, input } if message.role == Role::Assistant => {
                blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            }
            ContentBlock::Thinking {
                text,
                signature: Some(signature),
            } if with_thinking && message.role == Role::Assistant => {
                blocks.push(json!({"type": "thinking", "thinking": text, "signature": signature}))
            }
            _ => {}
        }
    }
    if blocks.is_empty() {
        return None;
    }
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Some(json!({"role": role, "content": blocks}))
}

/// An image block: a `data:` URL as base64 data with its media type, anything else by URL.
fn image(url: &str) -> Value {
    if let Some((media_type, data)) = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        return json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}});
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

/// A usage object (`message.usage` of `message_start`, `usage` of `message_delta` or of a
/// whole message) as the meter counts it: the input is all of it, uncached
/// (`input_tokens`), read from the cache and written to it; `None` without counts. Also
/// answers the cache figures (read, written) for the log.
pub(super) fn usage_of(usage: &Value, model: Option<&str>) -> Option<(Usage, u64, u64)> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let (input, read, written, output) = (
        count("input_tokens"),
        count("cache_read_input_tokens"),
        count("cache_creation_input_tokens"),
        count("output_tokens"),
    );
    if input.is_none() && read.is_none() && written.is_none() && output.is_none() {
        return None;
    }
    let (read, written) = (read.unwrap_or(0), written.unwrap_or(0));
    Some((
        Usage {
            input_tokens: input
                .unwrap_or(0)
                .saturating_add(read)
                .saturating_add(written),
            output_tokens: output.unwrap_or(0),
            model: model.filter(|m| !m.is_empty()).map(str::to_owned),
        },
        read,
        written,
    ))
}

/// A tool call's input: the object as sent; anything else kept as `{"_raw": …}` so the loop
/// reports it to the model as a bad call.
pub(super) fn tool_input(input: Value) -> Value {
    match input {
        Value::Object(_) => input,
        Value::Null => Value::Object(Map::new()),
        other => json!({"_raw": other.to_string()}),
    }
}

/// An answer read whole (`{"content": […], "usage": …, "model": …}`): a gateway that ignores
/// `"stream": true`.
pub(super) fn parse_message(bytes: &[u8]) -> Result<ProviderResponse, ProviderError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ProviderError::Invalid(format!(
            "response is not JSON ({e}): {}",
            truncate(&String::from_utf8_lossy(bytes))
        ))
    })?;
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ProviderError::Invalid(format!(
                "response has no content array: {}",
                truncate(&value.to_string())
            ))
        })?;
    let mut content = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => {
                let text = block["text"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    content.push(ContentBlock::Text {
                        text: text.to_owned(),
                    });
                }
            }
            Some("thinking") => content.push(ContentBlock::Thinking {
                text: block["thinking"].as_str().unwrap_or_default().to_owned(),
                signature: block["signature"].as_str().map(str::to_owned),
            }),
            Some("tool_use") => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
                    return Err(ProviderError::Invalid(format!(
                        "a tool_use block without id or name: {}",
                        truncate(&block.to_string())
                    )));
                };
                content.push(ContentBlock::ToolUse {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input: tool_input(block["input"].clone()),
                });
            }
            _ => {}
        }
    }
    let usage = value
        .get("usage")
        .and_then(|u| usage_of(u, value["model"].as_str()))
        .map(|(usage, _, _)| usage);
    Ok(ProviderResponse { content, usage })
}
