//! The Anthropic provider against a scripted Messages endpoint that streams over TLS (the
//! test CA trusted through `SSL_CERT_FILE`): in-process, words and thinking reach the sink
//! while the endpoint still writes, a tool call's input assembled from JSON pieces, the
//! headers and the prompt-cache breakpoints of the request, dropping the call closes the
//! connection, an overloaded server retried, a refused key's exact error, the models listed
//! page by page; through the binary (`--provider anthropic` and the `ROUNDTABLE_ANTHROPIC_*`
//! environment), a turn whose usage (cache reads and writes included) becomes the context
//! meter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roundtable::providers::anthropic::{AnthropicConfig, AnthropicProvider};
use roundtable::providers::retry::RetryPolicy;
use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{
    AnswerDelta, ChatMessage, ContentBlock, Provider, ProviderRequest, Role, ToolSpec,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::harness::*;

/// The key every provider here sends.
const KEY: &str = "sk-ant-scripted-key";

fn provider(endpoint: &ScriptedSse) -> AnthropicProvider {
    AnthropicProvider::new(
        AnthropicConfig {
            name: "anthropic".into(),
            base_url: endpoint.origin.clone(),
            model: "claude-scripted".into(),
            api_key: KEY.into(),
            timeout: Duration::from_secs(10),
            context_window: Some(200_000),
            max_tokens: 4096,
            thinking_budget: None,
            retry: RetryPolicy {
                base_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
        },
        trusting_test_ca(),
    )
}

fn request() -> ProviderRequest {
    ProviderRequest::new(
        "You are terse.",
        vec![ChatMessage::text(Role::User, "What is 2+2?")],
        vec![ToolSpec {
            name: "calculate".into(),
            description: "arithmetic".into(),
            input_schema: json!({"type": "object"}),
        }],
    )
}

/// `message_start` with usage: uncached input, cache read, cache written.
fn start(input: u64, read: u64, written: u64) -> Step {
    named(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-scripted-2", "content": [],
            "usage": {"input_tokens": input, "cache_read_input_tokens": read,
                      "cache_creation_input_tokens": written, "output_tokens": 1}}}),
    )
}

fn block_start(index: u64, block: Value) -> Step {
    named(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn delta(index: u64, delta: Value) -> Step {
    named(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn text(index: u64, words: &str) -> Step {
    delta(index, json!({"type": "text_delta", "text": words}))
}

/// `message_delta` with the final output count, then `message_stop`.
fn end(output: u64) -> Vec<Step> {
    vec![
        named(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}}),
        ),
        named("message_stop", &json!({"type": "message_stop"})),
    ]
}

/// A streamed text answer with the usage given.
fn answer(words: &[&str], usage: (u64, u64, u64, u64)) -> Reply {
    let mut steps = vec![
        start(usage.0, usage.1, usage.2),
        block_start(0, json!({"type": "text", "text": ""})),
    ];
    steps.extend(words.iter().map(|w| text(0, w)));
    steps.push(named(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    steps.extend(end(usage.3));
    Reply::events(steps)
}

fn sink() -> (
    roundtable_actors::agent::DeltaSink,
    mpsc::UnboundedReceiver<AnswerDelta>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Box::new(move |d| {
            let _ = tx.send(d);
        }),
        rx,
    )
}

fn drained(rx: &mut mpsc::UnboundedReceiver<AnswerDelta>) -> Vec<AnswerDelta> {
    let mut out = Vec::new();
    while let Ok(d) = rx.try_recv() {
        out.push(d);
    }
    out
}

/// Thinking then text reach the sink while the endpoint holds the rest behind a gate; a
/// tool call's input comes from its JSON pieces; the usage counts cache reads and writes as
/// input; the request went to `/v1/messages` with the key, the version and the cache
/// breakpoints.
#[test]
fn a_streamed_answer_with_thinking_text_and_a_tool_call() {
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        let mut steps = vec![
            start(20, 9000, 400),
            block_start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "Simple sum."}),
            ),
            delta(
                0,
                json!({"type": "signature_delta", "signature": "EqQBsig"}),
            ),
            block_start(1, json!({"type": "text", "text": ""})),
            text(1, "Let me"),
            Step::Wait(held.clone()),
            named("ping", &json!({"type": "ping"})),
            text(1, " check."),
            block_start(
                2,
                json!({"type": "tool_use", "id": "toolu_1", "name": "calculate", "input": {}}),
            ),
            delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"expre"}),
            ),
            delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "ssion\": \"2+2\"}"}),
            ),
        ];
        steps.extend(end(55));
        Reply::events(steps)
    });
    let provider = provider(&endpoint);
    let response = run_local(async {
        let (deltas, mut rx) = sink();
        let mut call = provider.complete_streaming(request(), deltas);
        let mut early = Vec::new();
        while early.len() < 2 {
            tokio::select! {
                done = &mut call => panic!("ended while the endpoint held its answer: {done:?}"),
                piece = rx.recv() => early.push(piece.unwrap()),
            }
        }
        assert_eq!(
            early,
            vec![
                AnswerDelta::Thinking("Simple sum.".into()),
                AnswerDelta::Text("Let me".into())
            ]
        );
        gate.open();
        let response = call.await.expect("the whole answer");
        assert_eq!(drained(&mut rx), vec![AnswerDelta::Text(" check.".into())]);
        response
    });
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Thinking {
                text: "Simple sum.".into(),
                signature: Some("EqQBsig".into())
            },
            ContentBlock::Text {
                text: "Let me check.".into()
            },
            ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "calculate".into(),
                input: json!({"expression": "2+2"})
            },
        ]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 9420,
            output_tokens: 55,
            model: Some("claude-scripted-2".into())
        })
    );
    let seen = endpoint.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some(KEY));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen[0].header("authorization"), None);
    let body = &seen[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "claude-scripted");
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(body.get("thinking").is_none(), "off unless configured");
}

/// Dropping the call closes the connection: the endpoint, holding its answer after the
/// first words, sees it close within a second.
#[test]
fn dropping_the_call_closes_the_connection() {
    let endpoint = Arc::new(ScriptedSse::tls(|_, _| {
        Reply::events(vec![
            start(5, 0, 0),
            block_start(0, json!({"type": "text", "text": ""})),
            text(0, "A long"),
            Step::HoldUntilClosed,
        ])
    }));
    let provider = provider(&endpoint);
    let watching = endpoint.clone();
    let (dropped, closed) = run_local(async move {
        let (deltas, mut rx) = sink();
        let mut call = provider.complete_streaming(request(), deltas);
        tokio::select! {
            done = &mut call => panic!("ended while held: {done:?}"),
            first = rx.recv() => assert_eq!(first, Some(AnswerDelta::Text("A long".into()))),
        }
        drop(call);
        let dropped = Instant::now();
        let closed = tokio::task::spawn_blocking(move || watching.closed_within(WAIT))
            .await
            .unwrap();
        (dropped, closed)
    });
    let after = closed
        .expect("the endpoint saw the close")
        .saturating_duration_since(dropped);
    assert!(
        after < Duration::from_secs(1),
        "closed {after:?} after the drop"
    );
}

/// An `error` event (overloaded) before any word, then a 529 answer, are retried; the third
/// attempt's answer is the call's. A refused key is the exact error, once.
#[test]
fn overloaded_is_retried_and_a_refused_key_is_exact() {
    let endpoint = ScriptedSse::tls(|n, _| match n {
        0 => Reply::events(vec![
            start(5, 0, 0),
            named(
                "error",
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ]),
        1 => Reply::json(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        _ => answer(&["4"], (5, 0, 0, 1)),
    });
    let response = run_local(provider(&endpoint).complete(request())).expect("retried");
    assert_eq!(
        response.content,
        vec![ContentBlock::Text { text: "4".into() }]
    );
    assert_eq!(endpoint.requests().len(), 3);

    let refusing = ScriptedSse::tls(|_, _| {
        Reply::json(
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        )
    });
    let err = run_local(provider(&refusing).complete(request())).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the provider refused the API key (HTTP 401): invalid x-api-key"
    );
    assert_eq!(refusing.requests().len(), 1);
}

/// Through the binary: `--provider anthropic` with the environment reaches the endpoint over
/// TLS, the turn shows the answer, and the context meter is the whole input (uncached, read
/// from the cache, written to it) plus the output, in the window configured.
#[test]
fn the_server_runs_a_turn_on_anthropic_and_meters_it() {
    let endpoint = ScriptedSse::tls(|_, _| answer(&["Four", "."], (30, 12000, 500, 7)));
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    let server = Server::start_env(
        &["--provider", "anthropic"],
        &[
            ("ROUNDTABLE_ANTHROPIC_BASE_URL", &endpoint.origin),
            ("ROUNDTABLE_ANTHROPIC_MODEL", "claude-scripted"),
            ("ROUNDTABLE_ANTHROPIC_API_KEY", KEY),
            ("ROUNDTABLE_ANTHROPIC_CONTEXT_WINDOW", "200000"),
            ("SSL_CERT_FILE", &ca),
        ],
    );
    let (mut a, id) = server.joined("claude");
    let calls = a.run_turn(&id, "What is 2+2?");
    assert!(
        Client::texts(&calls).contains(&"Four.".to_string()),
        "{calls:?}"
    );
    let status = a.invoke(&dispatcher(&id), "getStatus", json!([])).unwrap();
    assert_eq!(
        status["contextMeter"],
        json!({"contextTokens": 12537, "contextWindow": 200000, "model": "claude-scripted-2"})
    );
    assert!(!server.log().contains(KEY), "the key is never logged");
}

/// `/v1/models` is read page by page (`after_id` = the last page's `last_id`) with the key and
/// the version; the ids come back sorted.
#[test]
fn models_are_listed_page_by_page() {
    let endpoint = ScriptedSse::tls(|n, _| {
        let page = match n {
            0 => json!({"data": [{"id": "claude-sonnet-x", "type": "model"}], "has_more": true,
                        "first_id": "claude-sonnet-x", "last_id": "claude-sonnet-x"}),
            _ => json!({"data": [{"id": "claude-haiku-x", "type": "model"}], "has_more": false,
                        "first_id": "claude-haiku-x", "last_id": "claude-haiku-x"}),
        };
        Reply::json(200, page.to_string())
    });
    let models = run_local(provider(&endpoint).list_models()).expect("a listing");
    assert_eq!(models, vec!["claude-haiku-x", "claude-sonnet-x"]);
    let seen = endpoint.requests();
    assert_eq!(
        seen.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        vec![
            "/v1/models?limit=1000",
            "/v1/models?limit=1000&after_id=claude-sonnet-x"
        ]
    );
    assert_eq!(seen[1].header("x-api-key"), Some(KEY));
    assert_eq!(seen[1].header("anthropic-version"), Some("2023-06-01"));
}
