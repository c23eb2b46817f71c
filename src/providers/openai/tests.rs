//! The provider against a scripted HTTP server on a loopback port (request shape, answers,
//! errors, time-outs), the wire parsing on its own, and the environment configuration.

use super::wire::{parse_response, parse_usage, request_body};
use super::*;
use crate::providers::http::{HttpSettings, HttpStack};
use crate::providers::retry::RetryPolicy;
use crate::providers::status::{truncate, MAX_ERROR_BODY_CHARS};
use roundtable_actors::agent::usage::Usage;
use roundtable_actors::agent::{ProviderRequest, ProviderResponse, Role, ToolSpec};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

/// One request as the scripted server saw it.
#[derive(Debug)]
struct Recorded {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// What the scripted server does with one connection.
enum Reply {
    /// Answer with this status and body.
    Respond { status: u16, body: String },
    /// Read the request, then never answer (until the client hangs up).
    Hang,
}

/// Reads one HTTP/1.1 request: head up to the blank line, then `Content-Length` bytes.
fn read_request(stream: &mut TcpStream) -> Recorded {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = stream.read(&mut chunk).expect("read request head");
        assert!(n > 0, "client closed before sending a full request head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).expect("UTF-8 request head");
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().expect("numeric Content-Length"))
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).expect("read request body");
        assert!(n > 0, "client closed before sending the full body");
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Recorded {
        request_line,
        headers,
        body,
    }
}

/// Starts a real HTTP server on a free loopback port that answers one connection per
/// scripted reply, in order, and reports every request it read. Returns the base URL
/// (with a trailing slash, which the provider must trim) and the request channel.
fn scripted_server(script: Vec<Reply>) -> (String, mpsc::Receiver<Recorded>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind scripted server");
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for reply in script {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let recorded = read_request(&mut stream);
            let _ = tx.send(recorded);
            match reply {
                Reply::Respond { status, body } => {
                    let response = format!(
                        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes());
                    let _ = stream.flush();
                }
                Reply::Hang => {
                    // Hold the connection open until the client gives up.
                    let mut sink = [0u8; 256];
                    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                }
            }
        }
    });
    (format!("http://127.0.0.1:{port}/v1/"), rx)
}

fn ok(body: Value) -> Reply {
    Reply::Respond {
        status: 200,
        body: body.to_string(),
    }
}

/// A configuration for the scripted server: one attempt per call (each scripted reply is
/// one connection; retries are tested in `tests/integration/provider_streams.rs`).
fn config(base_url: &str, api_key: Option<&str>, timeout: Duration) -> OpenAiConfig {
    OpenAiConfig {
        name: "openai".to_owned(),
        base_url: base_url.to_owned(),
        model: "qwen2.5-7b-instruct".to_owned(),
        api_key: api_key.map(str::to_owned),
        timeout,
        context_window: None,
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
    }
}

/// The HTTP stack of the environment's defaults (the system's roots, no proxy).
fn stack() -> Arc<HttpStack> {
    Arc::new(HttpStack::new(&HttpSettings::default()).expect("the default stack"))
}

fn run<F: Future>(future: F) -> F::Output {
    actix_web::rt::System::new().block_on(future)
}

fn complete(
    config: OpenAiConfig,
    request: ProviderRequest,
) -> Result<ProviderResponse, ProviderError> {
    let provider = OpenAiProvider::new(config, stack());
    run(provider.complete(request))
}

fn simple_request() -> ProviderRequest {
    ProviderRequest {
        system: "You are terse.".to_owned(),
        history: Default::default(),
        messages: vec![ChatMessage::text(Role::User, "What is 2+2?")],
        tools: vec![ToolSpec {
            name: "calc".to_owned(),
            description: "Evaluates arithmetic".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {"expr": {"type": "string"}},
                "required": ["expr"],
            }),
        }],
    }
}

fn recv(rx: &mpsc::Receiver<Recorded>) -> Recorded {
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the scripted server saw a request")
}

#[test]
fn plain_text_answer_and_request_shape() {
    let (base, rx) = scripted_server(vec![ok(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "4"},
            "finish_reason": "stop",
        }],
    }))]);
    let response = complete(
        config(&base, Some("sk-test"), Duration::from_secs(10)),
        simple_request(),
    )
    .expect("plain answer");
    assert_eq!(
        response.content,
        vec![ContentBlock::Text { text: "4".into() }]
    );
    assert_eq!(
        response.usage, None,
        "no usage in the answer: none reported"
    );

    let seen = recv(&rx);
    assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(seen.header("accept"), Some("text/event-stream"));
    assert!(seen
        .header("content-type")
        .is_some_and(|v| v.starts_with("application/json")));
    let body = seen.json();
    assert_eq!(body["model"], "qwen2.5-7b-instruct");
    // Streaming is asked for; this server answers whole, which is read as the answer.
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Evaluates arithmetic",
                "parameters": {
                    "type": "object",
                    "properties": {"expr": {"type": "string"}},
                    "required": ["expr"],
                },
            },
        }])
    );
}

#[test]
fn no_key_no_tools_means_no_header_and_no_tools_field() {
    let (base, rx) = scripted_server(vec![ok(json!({
        "choices": [{"message": {"role": "assistant", "content": null}}],
    }))]);
    let mut request = simple_request();
    request.tools.clear();
    let response =
        complete(config(&base, None, Duration::from_secs(10)), request).expect("empty answer");
    assert!(response.content.is_empty());
    let seen = recv(&rx);
    assert_eq!(seen.header("authorization"), None);
    assert!(seen.json().get("tools").is_none());
}

#[test]
fn two_tool_calls_are_parsed() {
    let (base, _rx) = scripted_server(vec![ok(json!({
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me compute both.",
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "calc", "arguments": "{\"expr\":\"2+2\"}"},
                    },
                    {
                        "type": "function",
                        "function": {"name": "files__read", "arguments": "{\"path\": \"/tmp/x\", \"lines\": [1, 2]}"},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }],
    }))]);
    let response = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect("tool-call answer");
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Text {
                text: "Let me compute both.".into()
            },
            ContentBlock::ToolUse {
                id: "call_abc".into(),
                name: "calc".into(),
                input: json!({"expr": "2+2"}),
            },
            ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "files__read".into(),
                input: json!({"path": "/tmp/x", "lines": [1, 2]}),
            },
        ]
    );
}

#[test]
fn follow_up_history_wire_shape() {
    let (base, rx) = scripted_server(vec![ok(json!({
        "choices": [{"message": {"role": "assistant", "content": "Done: 4 and 9."}}],
    }))]);
    let request = ProviderRequest {
        system: "sys".to_owned(),
        history: Default::default(),
        messages: vec![
            ChatMessage::text(Role::User, "Compute 2+2 and 3*3"),
            ChatMessage {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "Computing.".into(),
                    },
                    ContentBlock::ToolUse {
                        id: "call_a".into(),
                        name: "calc".into(),
                        input: json!({"expr": "2+2"}),
                    },
                    ContentBlock::ToolUse {
                        id: "call_b".into(),
                        name: "calc".into(),
                        input: json!({"expr": "3*3"}),
                    },
                ],
            },
            ChatMessage {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "call_a".into(),
                        content: "4".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "call_b".into(),
                        content: "overflow".into(),
                        is_error: true,
                    },
                ],
            },
            ChatMessage {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "call_c".into(),
                    name: "calc".into(),
                    input: json!({"expr": "3*3"}),
                }],
            },
            ChatMessage {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "call_c".into(),
                    content: "9".into(),
                    is_error: false,
                }],
            },
        ],
        tools: simple_request().tools,
    };
    let response =
        complete(config(&base, None, Duration::from_secs(10)), request).expect("follow-up answer");
    assert_eq!(
        response.content,
        vec![ContentBlock::Text {
            text: "Done: 4 and 9.".into()
        }]
    );

    let messages = recv(&rx).json()["messages"].clone();
    assert_eq!(
        messages,
        json!([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Compute 2+2 and 3*3"},
            {
                "role": "assistant",
                "content": "Computing.",
                "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "calc", "arguments": "{\"expr\":\"2+2\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "calc", "arguments": "{\"expr\":\"3*3\"}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "4"},
            {"role": "tool", "tool_call_id": "call_b", "content": "ERROR: overflow"},
            {
                "role": "assistant",
                "content": null,
                "tool_calls": [
                    {"id": "call_c", "type": "function",
                     "function": {"name": "calc", "arguments": "{\"expr\":\"3*3\"}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_c", "content": "9"},
        ])
    );
}

#[test]
fn server_error_status_is_reported_with_truncated_body() {
    let long = "x".repeat(2000);
    let (base, _rx) = scripted_server(vec![Reply::Respond {
        status: 500,
        body: format!("{{\"error\":\"model crashed {long}\"}}"),
    }]);
    let err = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect_err("500 must fail");
    match err {
        ProviderError::Status { status, body } => {
            assert_eq!(status, 500);
            assert!(body.starts_with("model crashed xxx"), "{body}");
            assert!(body.chars().count() <= MAX_ERROR_BODY_CHARS + 1, "{body}");
        }
        other => panic!("expected Status, got {other:?}"),
    }
}

#[test]
fn silent_server_times_out_as_unreachable() {
    let (base, rx) = scripted_server(vec![Reply::Hang]);
    let started = Instant::now();
    let err = complete(
        config(&base, None, Duration::from_millis(300)),
        simple_request(),
    )
    .expect_err("a silent server must time out");
    let elapsed = started.elapsed();
    match &err {
        ProviderError::Timeout(message) => {
            assert!(message.contains("within 300ms"), "{message}")
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // The request did reach the server: the timeout is about the answer.
    recv(&rx);
}

#[test]
fn refused_connection_is_unreachable() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let err = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect_err("nobody listens");
    match err {
        ProviderError::Unreachable(message) => {
            assert!(message.contains("cannot connect"), "{message}");
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[test]
fn invalid_json_is_invalid() {
    let (base, _rx) = scripted_server(vec![Reply::Respond {
        status: 200,
        body: "<html>this is not json</html>".to_owned(),
    }]);
    let err = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect_err("not JSON");
    assert!(
        matches!(&err, ProviderError::Invalid(m) if m.contains("not JSON")),
        "{err:?}"
    );
}

#[test]
fn missing_message_is_invalid() {
    let (base, _rx) = scripted_server(vec![ok(json!({"choices": []}))]);
    let err = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect_err("no choices");
    assert!(
        matches!(&err, ProviderError::Invalid(m) if m.contains("choices[0].message")),
        "{err:?}"
    );
}

#[test]
fn bad_arguments_are_kept_raw() {
    let body = json!({
        "choices": [{"message": {"tool_calls": [
            {"id": "", "function": {"name": "calc", "arguments": "{expr: 2+2"}},
            {"function": {"name": "calc", "arguments": ""}},
            {"function": {"name": "calc", "arguments": {"expr": "1"}}},
            {"function": {"name": "calc", "arguments": "[1,2]"}},
        ]}}],
    });
    let response = parse_response(body.to_string().as_bytes()).unwrap();
    let inputs: Vec<(String, Value)> = response
        .content
        .into_iter()
        .map(|b| match b {
            ContentBlock::ToolUse { id, input, .. } => (id, input),
            other => panic!("unexpected block {other:?}"),
        })
        .collect();
    assert_eq!(
        inputs,
        vec![
            ("call_0".into(), json!({"_raw": "{expr: 2+2"})),
            ("call_1".into(), json!({})),
            ("call_2".into(), json!({"expr": "1"})),
            ("call_3".into(), json!({"_raw": "[1,2]"})),
        ]
    );
}

#[test]
fn tool_call_without_name_is_invalid() {
    let body = json!({"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]});
    assert!(matches!(
        parse_response(body.to_string().as_bytes()),
        Err(ProviderError::Invalid(_))
    ));
}

#[test]
fn config_from_lookup() {
    let vars = |pairs: &[(&str, &str)]| {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    };

    let err = OpenAiConfig::from_lookup(vars(&[])).unwrap_err();
    assert!(err.contains(ENV_MODEL), "{err}");

    let config = OpenAiConfig::from_lookup(vars(&[
        (ENV_MODEL, "llama"),
        (ENV_API_KEY_FALLBACK, "fallback"),
    ]))
    .unwrap();
    assert_eq!(config.base_url, DEFAULT_BASE_URL);
    assert_eq!(config.model, "llama");
    assert_eq!(config.api_key.as_deref(), Some("fallback"));
    assert_eq!(config.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    assert_eq!(
        config.chat_completions_url(),
        "http://127.0.0.1:8080/v1/chat/completions"
    );
    assert!(!format!("{config:?}").contains("fallback"));

    let config = OpenAiConfig::from_lookup(vars(&[
        (ENV_MODEL, "llama"),
        (ENV_BASE_URL, "http://10.0.0.2:11434/v1/"),
        (ENV_API_KEY, "primary"),
        (ENV_API_KEY_FALLBACK, "fallback"),
        (ENV_TIMEOUT_SECS, "7"),
    ]))
    .unwrap();
    assert_eq!(config.api_key.as_deref(), Some("primary"));
    assert_eq!(config.timeout, Duration::from_secs(7));
    assert_eq!(
        config.chat_completions_url(),
        "http://10.0.0.2:11434/v1/chat/completions"
    );

    let err = OpenAiConfig::from_lookup(vars(&[(ENV_MODEL, "m"), (ENV_TIMEOUT_SECS, "soon")]))
        .unwrap_err();
    assert!(err.contains(ENV_TIMEOUT_SECS), "{err}");

    assert_eq!(config.context_window, None);
    let config =
        OpenAiConfig::from_lookup(vars(&[(ENV_MODEL, "m"), (ENV_CONTEXT_WINDOW, "32768")]))
            .unwrap();
    assert_eq!(config.context_window, Some(32768));
    assert_eq!(
        OpenAiProvider::new(config, stack()).context_window(),
        Some(32768)
    );
    for bad in ["0", "-1", "32k"] {
        let err = OpenAiConfig::from_lookup(vars(&[(ENV_MODEL, "m"), (ENV_CONTEXT_WINDOW, bad)]))
            .unwrap_err();
        assert_eq!(
            err,
            format!(
                "ROUNDTABLE_OPENAI_CONTEXT_WINDOW must be a positive whole number of tokens, got {bad:?}"
            )
        );
    }
}

/// `usage` of a chat-completions answer (llama.cpp, Ollama, vLLM and OpenAI all send
/// `prompt_tokens` and `completion_tokens`) becomes the response's usage with the model the
/// answer names; a missing or `null` usage, or one without counts, is none.
#[test]
fn usage_is_read_from_the_answer() {
    let (base, _rx) = scripted_server(vec![ok(json!({
        "model": "qwen2.5-7b-instruct-q4",
        "choices": [{"message": {"role": "assistant", "content": "4"}}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234},
    }))]);
    let response = complete(
        config(&base, None, Duration::from_secs(10)),
        simple_request(),
    )
    .expect("an answer with usage");
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 1200,
            output_tokens: 34,
            model: Some("qwen2.5-7b-instruct-q4".into()),
        })
    );
    let usage = |answer: Value| parse_usage(&answer);
    assert_eq!(
        usage(json!({"usage": {"total_tokens": 90}})),
        Some(Usage {
            input_tokens: 90,
            output_tokens: 0,
            model: None
        })
    );
    assert_eq!(
        usage(json!({"usage": {"prompt_tokens": 7}, "model": ""})),
        Some(Usage {
            input_tokens: 7,
            output_tokens: 0,
            model: None
        })
    );
    assert_eq!(usage(json!({"usage": null})), None);
    assert_eq!(usage(json!({"usage": {"prompt_tokens": "many"}})), None);
    assert_eq!(usage(json!({})), None);
}

#[test]
fn provider_name_and_truncation() {
    let provider =
        OpenAiProvider::new(config("http://x/v1", None, Duration::from_secs(1)), stack());
    assert_eq!(provider.name(), "openai");
    assert_eq!(provider.model(), Some("qwen2.5-7b-instruct"));
    assert_eq!(truncate("short"), "short");
    let cut = truncate(&"é".repeat(MAX_ERROR_BODY_CHARS + 10));
    assert_eq!(cut.chars().count(), MAX_ERROR_BODY_CHARS + 1);
    assert!(cut.ends_with('…'));
}

/// A user message with an attached image goes out as content parts: the text, then the image.
#[test]
fn images_become_content_parts() {
    let mut message = ChatMessage::text(Role::User, "what is this?");
    message.content.push(ContentBlock::Image {
        url: "data:image/png;base64,iVBORw0KGgo".into(),
    });
    let body = request_body(
        "m",
        &ProviderRequest::new("", vec![message], Vec::new()),
        false,
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo"}},
        ]}])
    );
}

/// Thinking never goes back on the wire: an assistant message's thinking block is dropped,
/// and a message that held only thinking is left out (not sent as an empty message).
#[test]
fn thinking_is_never_sent_back() {
    let thinking = |text: &str| ContentBlock::Thinking {
        text: text.into(),
        signature: None,
    };
    let request = ProviderRequest::new(
        "",
        vec![
            ChatMessage::text(Role::User, "hi"),
            ChatMessage {
                role: Role::Assistant,
                content: vec![
                    thinking("hmm"),
                    ContentBlock::Text {
                        text: "hello".into(),
                    },
                ],
            },
            ChatMessage::text(Role::User, "and?"),
            ChatMessage {
                role: Role::Assistant,
                content: vec![thinking("only this")],
            },
            ChatMessage::text(Role::User, "well?"),
        ],
        Vec::new(),
    );
    let body = request_body("m", &request, true);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "and?"},
            {"role": "user", "content": "well?"},
        ])
    );
    assert!(!body.to_string().contains("hmm"));
}

/// A whole answer's `reasoning_content` (or `reasoning`) becomes a thinking block ahead of
/// its text.
#[test]
fn whole_answer_reasoning_is_thinking() {
    for key in ["reasoning_content", "reasoning"] {
        let body = json!({"choices": [{"message": {"content": "4", key: "2+2 is 4"}}]});
        assert_eq!(
            parse_response(body.to_string().as_bytes()).unwrap().content,
            vec![
                ContentBlock::Thinking {
                    text: "2+2 is 4".into(),
                    signature: None
                },
                ContentBlock::Text { text: "4".into() },
            ]
        );
    }
}

/// `GET <base>/models` with the key; the ids come back sorted, each once.
#[test]
fn models_are_listed_from_the_endpoint() {
    let (base, rx) = scripted_server(vec![ok(json!({
        "object": "list",
        "data": [{"id": "qwen3-8b"}, {"id": "llama-3.1-8b"}, {"id": "qwen3-8b"}],
    }))]);
    let provider = OpenAiProvider::new(
        config(&base, Some("sk-list"), Duration::from_secs(10)),
        stack(),
    );
    let models = run(provider.list_models()).expect("a listing");
    assert_eq!(models, vec!["llama-3.1-8b", "qwen3-8b"]);
    let seen = recv(&rx);
    assert_eq!(seen.request_line, "GET /v1/models HTTP/1.1");
    assert_eq!(seen.header("authorization"), Some("Bearer sk-list"));
}
