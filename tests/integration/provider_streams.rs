//! The OpenAI-compatible provider against a scripted endpoint that streams over TLS (the test
//! CA trusted through `SSL_CERT_FILE`), in-process through `roundtable::providers`: words
//! reach the sink while the endpoint is still writing, dropping the call closes the upstream
//! connection, tool calls and reasoning split across chunks, usage from the last chunk,
//! retries (429 then success, honouring `Retry-After`; never after words were shown), the
//! refused key's exact error, and the fallback for endpoints that do not stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roundtable::providers::openai::{OpenAiConfig, OpenAiProvider};
use roundtable::providers::retry::RetryPolicy;
use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{
    AnswerDelta, ChatMessage, ContentBlock, Provider, ProviderError, ProviderRequest, Role,
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::harness::*;

/// The model the provider is configured with.
const MODEL: &str = "stream-model";

/// A provider for `endpoint` (its `/v1`), trusting the test CA, with `key`; retries wait
/// 10 ms (unless the server says otherwise) so the tests stay quick.
fn provider(endpoint: &ScriptedSse, key: Option<&str>) -> OpenAiProvider {
    OpenAiProvider::new(
        OpenAiConfig {
            name: "openai".into(),
            base_url: endpoint.url("/v1"),
            model: MODEL.into(),
            api_key: key.map(str::to_owned),
            timeout: Duration::from_secs(10),
            context_window: None,
            retry: RetryPolicy {
                base_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
        },
        trusting_test_ca(),
    )
}

/// "Say hello" with one tool.
fn request() -> ProviderRequest {
    ProviderRequest::new(
        "You are terse.",
        vec![ChatMessage::text(Role::User, "Say hello")],
        Vec::new(),
    )
}

/// A sink that forwards every piece to the returned receiver.
fn sink() -> (
    roundtable_actors::agent::DeltaSink,
    mpsc::UnboundedReceiver<AnswerDelta>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Box::new(move |delta| {
            let _ = tx.send(delta);
        }),
        rx,
    )
}

/// Every piece received so far.
fn drained(rx: &mut mpsc::UnboundedReceiver<AnswerDelta>) -> Vec<AnswerDelta> {
    let mut out = Vec::new();
    while let Ok(delta) = rx.try_recv() {
        out.push(delta);
    }
    out
}

/// The first words reach the sink while the endpoint holds the rest of its answer behind a
/// gate; once it goes on, the answer is whole, its usage is the last chunk's, and the request
/// asked for a stream with usage, with the key.
#[test]
fn words_arrive_while_the_endpoint_is_still_writing() {
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"role": "assistant", "content": "Hel"})),
            Step::Wait(held.clone()),
            chunk(json!({"content": "lo"})),
            finish("stop"),
            usage_chunk("stream-model-q4", 1200, 34),
            done(),
        ])
    });
    let provider = provider(&endpoint, Some("sk-stream"));
    let response = run_local(async {
        let (deltas, mut rx) = sink();
        let mut call = provider.complete_streaming(request(), deltas);
        tokio::select! {
            done = &mut call => panic!("the call ended while the endpoint held its answer: {done:?}"),
            first = rx.recv() => assert_eq!(first, Some(AnswerDelta::Text("Hel".into()))),
        }
        gate.open();
        let response = call.await.expect("the whole answer");
        assert_eq!(drained(&mut rx), vec![AnswerDelta::Text("lo".into())]);
        response
    });
    assert_eq!(
        response.content,
        vec![ContentBlock::Text {
            text: "Hello".into()
        }]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 1200,
            output_tokens: 34,
            model: Some("stream-model-q4".into()),
        })
    );
    let seen = endpoint.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-stream"));
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(
        seen[0].body["stream_options"],
        json!({"include_usage": true})
    );
    assert!(provider.streams());
}

/// Dropping the call's future (how a turn is cancelled) closes the upstream connection: the
/// endpoint, holding its answer open after the first words, sees the connection end within a
/// second.
#[test]
fn dropping_the_call_closes_the_upstream_connection() {
    let endpoint = ScriptedSse::tls(|_, _| {
        Reply::events(vec![
            chunk(json!({"content": "I will write for a long"})),
            Step::HoldUntilClosed,
        ])
    });
    let provider = provider(&endpoint, None);
    let endpoint = Arc::new(endpoint);
    let watching = endpoint.clone();
    let (dropped, closed) = run_local(async move {
        let (deltas, mut rx) = sink();
        let mut call = provider.complete_streaming(request(), deltas);
        tokio::select! {
            done = &mut call => panic!("the call ended while the endpoint held it: {done:?}"),
            first = rx.recv() => assert!(first.is_some()),
        }
        drop(call);
        let dropped = Instant::now();
        // The runtime stays alive while the endpoint watches: only the drop may close it.
        let closed = tokio::task::spawn_blocking(move || watching.closed_within(WAIT))
            .await
            .unwrap();
        (dropped, closed)
    });
    let closed = closed.expect("the endpoint saw the connection close");
    let after = closed.saturating_duration_since(dropped);
    assert!(
        after < Duration::from_secs(1),
        "closed {after:?} after the drop"
    );
}

/// Reasoning pieces go to the sink as thinking; a tool call whose id, name and arguments
/// arrive over several chunks (interleaved with a second call) is assembled by index.
#[test]
fn tool_call_and_reasoning_deltas_split_across_chunks() {
    let endpoint = ScriptedSse::tls(|_, _| {
        Reply::events(vec![
            chunk(json!({"reasoning_content": "Two sums; "})),
            chunk(json!({"reasoning": "call the tool twice."})),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                "function": {"name": "calculate", "arguments": "{\"expres"}}]}),
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                "function": {"name": "calculate", "arguments": ""}}]}),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "sion\": \"6*7\"}"}}]}),
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"expression\": \"1+1\"}"}}]}),
            ),
            finish("tool_calls"),
            done(),
        ])
    });
    let provider = provider(&endpoint, None);
    let (response, pieces) = run_local(async {
        let (deltas, mut rx) = sink();
        let response = provider
            .complete_streaming(request(), deltas)
            .await
            .expect("an answer");
        (response, drained(&mut rx))
    });
    assert_eq!(
        pieces,
        vec![
            AnswerDelta::Thinking("Two sums; ".into()),
            AnswerDelta::Thinking("call the tool twice.".into()),
        ]
    );
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Thinking {
                text: "Two sums; call the tool twice.".into(),
                signature: None
            },
            ContentBlock::ToolUse {
                id: "call_a".into(),
                name: "calculate".into(),
                input: json!({"expression": "6*7"})
            },
            ContentBlock::ToolUse {
                id: "call_b".into(),
                name: "calculate".into(),
                input: json!({"expression": "1+1"})
            },
        ]
    );
    assert_eq!(response.usage, None, "no usage chunk: none reported");
}

/// A 429 with `Retry-After: 1` is tried again after at least that second, then a 503 without
/// one after the backoff; the third attempt's answer is the call's, its words shown once.
#[test]
fn rate_limits_and_overload_are_retried() {
    let endpoint = ScriptedSse::tls(|n, _| match n {
        0 => Reply::json(429, r#"{"error":{"message":"Rate limit reached"}}"#)
            .with_header("Retry-After", "1"),
        1 => Reply::json(503, r#"{"error":{"message":"overloaded"}}"#),
        _ => streamed_text(&["at ", "last"], (10, 2)),
    });
    let provider = provider(&endpoint, None);
    let started = Instant::now();
    let (response, pieces) = run_local(async {
        let (deltas, mut rx) = sink();
        let response = provider.complete_streaming(request(), deltas).await;
        (response, drained(&mut rx))
    });
    let elapsed = started.elapsed();
    assert_eq!(
        response.expect("the third attempt answers").content,
        vec![ContentBlock::Text {
            text: "at last".into()
        }]
    );
    assert_eq!(
        pieces,
        vec![
            AnswerDelta::Text("at ".into()),
            AnswerDelta::Text("last".into())
        ]
    );
    assert_eq!(endpoint.requests().len(), 3);
    assert!(
        elapsed >= Duration::from_secs(1),
        "Retry-After honoured: {elapsed:?}"
    );
}

/// A stream that breaks off after its first words is not tried again (the words were shown):
/// the error says so, and the endpoint saw one request.
#[test]
fn no_retry_after_words_were_shown() {
    let endpoint = ScriptedSse::tls(|_, _| {
        Reply::events(vec![chunk(json!({"content": "Half an"})), Step::Cut])
    });
    let provider = provider(&endpoint, None);
    let result = run_local(provider.complete_streaming(request(), Box::new(|_| {})));
    let err = result.expect_err("a broken stream fails");
    assert!(matches!(err, ProviderError::Unreachable(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "provider unreachable: the answer from {}/v1/chat/completions",
            endpoint.origin
        )),
        "{text}"
    );
    assert_eq!(endpoint.requests().len(), 1, "not retried");
}

/// A 401 is the exact error, at once (not retried), without the key.
#[test]
fn a_refused_key_is_the_exact_error() {
    let endpoint = ScriptedSse::tls(|_, _| {
        Reply::json(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-wrong-key-123.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        )
    });
    let provider = provider(&endpoint, Some("sk-wrong-key-123"));
    let err = run_local(provider.complete(request())).expect_err("a refused key");
    assert_eq!(
        err.to_string(),
        "the provider refused the API key (HTTP 401): Incorrect API key provided: ***."
    );
    assert_eq!(endpoint.requests().len(), 1);
}

/// An endpoint that answers a streaming request with a whole JSON answer is read whole (its
/// text still reaches the sink) and is asked for whole answers from then on; one that
/// refuses `stream_options` with a 400 is asked again at once without streaming.
#[test]
fn endpoints_that_do_not_stream_get_whole_answers() {
    let whole =
        json!({"model": "m", "choices": [{"message": {"role": "assistant", "content": "whole"}}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        .to_string();
    let answer = whole.clone();
    let ignores = ScriptedSse::tls(move |_, _| Reply::json(200, answer.clone()));
    let provider_a = provider(&ignores, None);
    let answer = whole.clone();
    let refuses = ScriptedSse::tls(move |_, recorded| {
        if recorded.body["stream"] == true {
            Reply::json(
                400,
                r#"{"error":{"message":"Unrecognized request argument supplied: stream_options"}}"#,
            )
        } else {
            Reply::json(200, answer.clone())
        }
    });
    let provider_b = provider(&refuses, None);
    run_local(async {
        for provider in [&provider_a, &provider_b] {
            for _ in 0..2 {
                let (deltas, mut rx) = sink();
                let response = provider
                    .complete_streaming(request(), deltas)
                    .await
                    .expect("a whole answer");
                assert_eq!(
                    response.content,
                    vec![ContentBlock::Text {
                        text: "whole".into()
                    }]
                );
                assert_eq!(response.usage.map(|u| u.input_tokens), Some(5));
                assert_eq!(drained(&mut rx), vec![AnswerDelta::Text("whole".into())]);
            }
            assert!(!provider.streams());
        }
    });
    let streams = |e: &ScriptedSse| -> Vec<bool> {
        e.requests()
            .iter()
            .map(|r| r.body["stream"] == true)
            .collect()
    };
    assert_eq!(streams(&ignores), vec![true, false]);
    assert_eq!(streams(&refuses), vec![true, false, false]);
}

/// A stream that goes silent after its first words fails once the idle limit (here the
/// configured 300 ms) passes, with the exact error; the words already shown stay shown.
#[test]
fn a_stalled_stream_times_out() {
    let never = Gate::closed();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"content": "Wait"})),
            Step::Wait(never.clone()),
        ])
    });
    let mut config = provider(&endpoint, None).config().clone();
    config.timeout = Duration::from_millis(300);
    let provider = OpenAiProvider::new(config, trusting_test_ca());
    let started = Instant::now();
    let err = run_local(provider.complete(request())).expect_err("a stalled stream");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        format!(
            "provider timed out: the answer from {}/v1/chat/completions stopped for 300ms \
             before its end (raise ROUNDTABLE_OPENAI_TIMEOUT_SECS for slow models)",
            endpoint.origin
        )
    );
}
