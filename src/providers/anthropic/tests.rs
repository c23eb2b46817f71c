//! The Messages wire format (request shape, cache breakpoints, thinking), the event stream's
//! assembly and the environment configuration, without I/O; the provider against a
//! scripted endpoint over TLS is `tests/integration/provider_anthropic.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{
    AnswerDelta, ChatMessage, ContentBlock, ProviderError, ProviderRequest, Role, ToolSpec,
};
use serde_json::{json, Value};

use super::stream::{MessageStream, Origin};
use super::wire::{parse_message, request_body};
use super::*;
use crate::providers::call::{Assembler, Flow};
use crate::providers::retry::RetryPolicy;
use crate::providers::sse::SseEvent;

fn config() -> AnthropicConfig {
    AnthropicConfig {
        name: "anthropic".into(),
        base_url: DEFAULT_BASE_URL.into(),
        model: "claude-test".into(),
        api_key: "sk-ant-test".into(),
        timeout: Duration::from_secs(10),
        context_window: Some(200_000),
        max_tokens: 4096,
        thinking_budget: None,
        retry: RetryPolicy::default(),
    }
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({"type": "object"}),
    }
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// A first turn: the system block and the last tool carry the cache breakpoints, the
/// history has none to carry, the single message of the turn none either; no thinking
/// asked for; `max_tokens` and `stream` set.
#[test]
fn a_first_call_caches_system_and_tools() {
    let request = ProviderRequest::new(
        "You are terse.",
        vec![ChatMessage::text(Role::User, "hi")],
        vec![tool("calculate"), tool("get_time")],
    );
    let body = request_body(&config(), &request, true);
    assert_eq!(
        body,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "stream": true,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral()}],
            "tools": [
                {"name": "calculate", "description": "the calculate tool", "input_schema": {"type": "object"}},
                {"name": "get_time", "description": "the get_time tool", "input_schema": {"type": "object"},
                 "cache_control": ephemeral()},
            ],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        })
    );
}

/// A tool loop in a later turn: the committed history's last message and the turn's newest
/// message carry breakpoints (four in all); this turn's signed thinking goes back before its
/// tool use, unsigned thinking does not; results lead their message, an error marked; an
/// image becomes a base64 source; empty text is left out; the budget asks for thinking.
#[test]
fn a_tool_loop_caches_history_and_the_turn_so_far() {
    let history = vec![
        ChatMessage::text(Role::User, "earlier question"),
        ChatMessage::text(Role::Assistant, "earlier answer"),
    ];
    let mut request = ProviderRequest::new(
        "sys",
        vec![
            ChatMessage {
                role: Role::User,
                content: vec![
                    ContentBlock::Text {
                        text: "what is this?".into(),
                    },
                    ContentBlock::Image {
                        url: "data:image/png;base64,iVBORw0KGgo".into(),
                    },
                ],
            },
            ChatMessage {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        text: "Look it up.".into(),
                        signature: Some("sig-1".into()),
                    },
                    ContentBlock::Thinking {
                        text: "unsigned".into(),
                        signature: None,
                    },
                    ContentBlock::Text {
                        text: String::new(),
                    },
                    ContentBlock::ToolUse {
                        id: "toolu_1".into(),
                        name: "calculate".into(),
                        input: json!({"expression": "1+1"}),
                    },
                ],
            },
            ChatMessage {
                role: Role::User,
                content: vec![
                    ContentBlock::Text {
                        text: "[image note]".into(),
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "toolu_1".into(),
                        content: "overflow".into(),
                        is_error: true,
                    },
                ],
            },
        ],
        vec![tool("calculate")],
    );
    request.history = Arc::new(history);
    let mut config = config();
    config.thinking_budget = Some(2048);
    let body = request_body(&config, &request, true);
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "earlier question"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "earlier answer", "cache_control": ephemeral()}]},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "calculate", "input": {"expression": "1+1"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "overflow", "is_error": true},
                {"type": "text", "text": "[image note]", "cache_control": ephemeral()},
            ]},
        ])
    );
    let breakpoints = body.to_string().matches("cache_control").count();
    assert_eq!(breakpoints, 4, "the API takes at most four");
}

/// Feeds named events; answers the result and the pieces.
fn read(
    events: &[(&str, Value)],
) -> (
    Result<roundtable_actors::agent::ProviderResponse, ProviderError>,
    Vec<AnswerDelta>,
) {
    let mut stream = MessageStream::new(Origin {
        who: "anthropic (claude-test)".into(),
        shown_url: "https://api.anthropic.com/v1/messages".into(),
        model: "claude-test".into(),
        secret: Some("sk-ant-test".into()),
    });
    let mut deltas = Vec::new();
    for (name, data) in events {
        let event = SseEvent {
            event: Some((*name).to_owned()),
            data: data.to_string(),
        };
        match stream.event(event, &mut |d| deltas.push(d)) {
            Ok(Flow::Done) => break,
            Ok(Flow::More) => {}
            Err(failure) => return (Err(failure.error), deltas),
        }
    }
    (stream.finish(), deltas)
}

/// A whole answer: thinking with its signature, text in pieces, a tool use whose input
/// comes as JSON pieces; usage from `message_start` (uncached, cache read, cache written)
/// with the final output of `message_delta`.
#[test]
fn an_event_stream_is_assembled() {
    let (response, deltas) = read(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-test-2",
            "usage": {"input_tokens": 12, "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 300, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        (
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "thinking_delta", "thinking": "Add them."}}),
        ),
        (
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}}),
        ),
        ("content_block_stop", json!({"index": 0})),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"index": 1, "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"index": 1, "delta": {"type": "text_delta", "text": "check."}}),
        ),
        (
            "content_block_start",
            json!({"index": 2, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "calculate", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"expression\": "}}),
        ),
        (
            "content_block_delta",
            json!({"index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"2+2\"}"}}),
        ),
        (
            "message_delta",
            json!({"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 87}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    assert_eq!(
        deltas,
        vec![
            AnswerDelta::Thinking("Add them.".into()),
            AnswerDelta::Text("Let me ".into()),
            AnswerDelta::Text("check.".into()),
        ]
    );
    let response = response.unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Thinking {
                text: "Add them.".into(),
                signature: Some("EqQB".into())
            },
            ContentBlock::Text {
                text: "Let me check.".into()
            },
            ContentBlock::ToolUse {
                id: "toolu_9".into(),
                name: "calculate".into(),
                input: json!({"expression": "2+2"})
            },
        ]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 9312,
            output_tokens: 87,
            model: Some("claude-test-2".into())
        })
    );
}

/// An `error` event is the error its type names (overloaded: a 529, retried while nothing
/// was shown; a refused key: the exact text); a stream without `message_stop` broke off.
#[test]
fn stream_errors_and_broken_streams() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let (response, _) = read(&[("error", overloaded.clone())]);
    assert_eq!(
        response.unwrap_err(),
        ProviderError::Status {
            status: 529,
            body: "Overloaded".into()
        }
    );
    let mut stream = MessageStream::new(Origin {
        who: "a".into(),
        shown_url: "u".into(),
        model: "m".into(),
        secret: None,
    });
    let failure = stream
        .event(
            SseEvent {
                event: Some("error".into()),
                data: overloaded.to_string(),
            },
            &mut |_| {},
        )
        .unwrap_err();
    assert!(failure.retryable);
    let (response, _) = read(&[(
        "error",
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key sk-ant-test"}}),
    )]);
    assert_eq!(
        response.unwrap_err().to_string(),
        "the provider refused the API key (HTTP 401): invalid x-api-key ***"
    );
    let (response, _) = read(&[
        (
            "message_start",
            json!({"message": {"model": "m", "usage": {"input_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"index": 0, "content_block": {"type": "text", "text": "Hal"}}),
        ),
    ]);
    assert_eq!(
        response.unwrap_err().to_string(),
        "provider unreachable: the answer from https://api.anthropic.com/v1/messages ended \
         before it was complete (no message_stop)"
    );
}

/// An answer read whole (a gateway that does not stream) gives the same blocks and usage.
#[test]
fn a_whole_message_is_read() {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "4"},
            {"type": "tool_use", "id": "toolu_1", "name": "calculate", "input": {"expression": "2+2"}},
        ],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3},
    });
    let response = parse_message(body.to_string().as_bytes()).unwrap();
    assert_eq!(response.content.len(), 3);
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 15,
            output_tokens: 3,
            model: Some("claude-test".into())
        })
    );
}

/// The environment: model and key required (the SDKs' `ANTHROPIC_API_KEY` as fallback),
/// defaults, `/v1` not doubled, the thinking budget's rules with the variable named; `Debug`
/// never shows the key.
#[test]
fn config_from_the_environment() {
    let vars = |pairs: &[(&str, &str)]| {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    };
    let err = AnthropicConfig::from_lookup(vars(&[(ENV_API_KEY, "k")])).unwrap_err();
    assert!(
        err.starts_with("ROUNDTABLE_ANTHROPIC_MODEL is not set"),
        "{err}"
    );
    let err = AnthropicConfig::from_lookup(vars(&[(ENV_MODEL, "claude")])).unwrap_err();
    assert_eq!(
        err,
        "ROUNDTABLE_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY) is not set: the Messages API needs a key"
    );
    let config = AnthropicConfig::from_lookup(vars(&[
        (ENV_MODEL, "claude"),
        (ENV_API_KEY_FALLBACK, "sk-ant-fallback"),
    ]))
    .unwrap();
    assert_eq!(config.api_key, "sk-ant-fallback");
    assert_eq!(
        config.messages_url(),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(config.max_tokens, DEFAULT_MAX_TOKENS);
    assert_eq!(config.thinking_budget, None);
    assert_eq!(config.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    assert!(!format!("{config:?}").contains("sk-ant"));
    let config = AnthropicConfig::from_lookup(vars(&[
        (ENV_MODEL, "claude"),
        (ENV_API_KEY, "k"),
        (ENV_BASE_URL, "https://gateway.example/anthropic/v1/"),
        (ENV_THINKING_BUDGET, "2048"),
        (ENV_CONTEXT_WINDOW, "200000"),
    ]))
    .unwrap();
    assert_eq!(
        config.models_url(),
        "https://gateway.example/anthropic/v1/models"
    );
    assert_eq!(config.thinking_budget, Some(2048));
    assert_eq!(config.context_window, Some(200_000));
    let err = AnthropicConfig::from_lookup(vars(&[
        (ENV_MODEL, "c"),
        (ENV_API_KEY, "k"),
        (ENV_THINKING_BUDGET, "100"),
    ]))
    .unwrap_err();
    assert_eq!(
        err,
        "ROUNDTABLE_ANTHROPIC_THINKING_BUDGET must be at least 1024 tokens (the API's minimum), got 100"
    );
    let err = AnthropicConfig::from_lookup(vars(&[
        (ENV_MODEL, "c"),
        (ENV_API_KEY, "k"),
        (ENV_THINKING_BUDGET, "9000"),
    ]))
    .unwrap_err();
    assert_eq!(
        err,
        "ROUNDTABLE_ANTHROPIC_THINKING_BUDGET (9000) must be below max_tokens (8192): the thinking is part of the answer"
    );
    let err = AnthropicConfig::from_lookup(vars(&[
        (ENV_MODEL, "c"),
        (ENV_API_KEY, "k"),
        (ENV_MAX_TOKENS, "lots"),
    ]))
    .unwrap_err();
    assert_eq!(
        err,
        "ROUNDTABLE_ANTHROPIC_MAX_TOKENS must be a positive whole number of tokens, got \"lots\""
    );
}
