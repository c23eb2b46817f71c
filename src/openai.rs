//! The OpenAI-compatible model provider: one [`Provider`] for any server that speaks
//! `POST /v1/chat/completions` (llama.cpp `llama-server`, Ollama, vLLM, the OpenAI API itself).
//!
//! This module owns:
//! - [`OpenAiConfig`]: endpoint, model, optional API key and timeout, read from the
//!   `ROUNDTABLE_OPENAI_*` environment variables by [`OpenAiConfig::from_env`];
//! - [`OpenAiProvider`]: the HTTP call (via `awc`) and the translation between the agent's
//!   [`ChatMessage`] / [`ContentBlock`] history and the chat-completions wire format, in both
//!   directions.
//!
//! Who uses it: a conversation's agent loop (`roundtable_actors::agent::run_loop`) chooses this
//! provider when the provider config is `openai`; the loop sees it only as a
//! `dyn Provider`. The offline `builtin` provider of `roundtable-actors` is the alternative.
//!
//! Wire mapping (request):
//! - the system prompt becomes the first message, `{"role":"system"}` (left out when empty);
//! - a user message's `ToolResult` blocks become one `{"role":"tool","tool_call_id",
//!   "content"}` message each (content prefixed with `ERROR: ` when the tool failed), followed
//!   by one `{"role":"user","content"}` message with its text blocks joined by newlines;
//! - an assistant message becomes `{"role":"assistant","content","tool_calls"}` where
//!   `content` is the joined text or `null` when there is no text but there are tool calls,
//!   and every `ToolUse` becomes a `function` tool call whose `arguments` is the input
//!   serialized as a JSON string (`tool_calls` is omitted when there are none);
//! - tools become `"tools":[{"type":"function","function":{"name","description",
//!   "parameters"}}]` (omitted when there are none); `"stream"` is always `false`.
//!
//! Wire mapping (response): `choices[0].message.content` becomes a `Text` block when it is a
//! non-empty string, and every `tool_calls[i]` becomes a `ToolUse` block. The `arguments`
//! string is parsed as JSON; a string that does not parse to a JSON object is kept as
//! `{"_raw": <string>}` so the agent loop can report the bad call back to the model as a tool
//! error instead of failing the turn. A tool call without an id gets `call_<index>`.
//!
//! Only plain `http://` endpoints are supported: `awc` is built without a TLS feature, so an
//! `https://` base URL fails with [`ProviderError::Unreachable`].

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use awc::error::{PayloadError, SendRequestError};
use awc::http::header;
use roundtable_actors::agent::{
    ChatMessage, ContentBlock, LocalBoxFuture, Provider, ProviderError, ProviderRequest,
    ProviderResponse, Role, ToolSpec,
};
use serde_json::{json, Map, Value};

/// Base URL used when `ROUNDTABLE_OPENAI_BASE_URL` is not set (a local llama.cpp server).
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080/v1";

/// Request timeout, in seconds, used when `ROUNDTABLE_OPENAI_TIMEOUT_SECS` is not set.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;

/// Environment variable holding the base URL (up to and including `/v1`).
pub const ENV_BASE_URL: &str = "ROUNDTABLE_OPENAI_BASE_URL";
/// Environment variable holding the model name (required).
pub const ENV_MODEL: &str = "ROUNDTABLE_OPENAI_MODEL";
/// Environment variable holding the API key (optional).
pub const ENV_API_KEY: &str = "ROUNDTABLE_OPENAI_API_KEY";
/// Fallback environment variable for the API key, read when [`ENV_API_KEY`] is not set.
pub const ENV_API_KEY_FALLBACK: &str = "OPENAI_API_KEY";
/// Environment variable holding the request timeout in whole seconds.
pub const ENV_TIMEOUT_SECS: &str = "ROUNDTABLE_OPENAI_TIMEOUT_SECS";

/// Largest response body accepted (a long answer with many tool calls still fits easily).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an error body (or unparsable body) is kept in a [`ProviderError`].
const MAX_ERROR_BODY_CHARS: usize = 500;

/// Where and how to reach an OpenAI-compatible endpoint.
///
/// `Debug` never prints the API key.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// Base URL up to and including the API version, e.g. `http://127.0.0.1:8080/v1`;
    /// requests go to `<base_url without trailing slash>/chat/completions`.
    pub base_url: String,
    /// Model name sent as `"model"` (llama.cpp ignores it, Ollama and vLLM need it).
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Deadline for a whole call: connecting, sending and reading the full response.
    pub timeout: Duration,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl OpenAiConfig {
    /// Reads the configuration from the environment:
    /// `ROUNDTABLE_OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]),
    /// `ROUNDTABLE_OPENAI_MODEL` (required),
    /// `ROUNDTABLE_OPENAI_API_KEY` falling back to `OPENAI_API_KEY` (optional) and
    /// `ROUNDTABLE_OPENAI_TIMEOUT_SECS` (default [`DEFAULT_TIMEOUT_SECS`]).
    /// Empty values count as unset. The error text names the offending variable.
    pub fn from_env() -> Result<OpenAiConfig, String> {
        OpenAiConfig::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (tests use a map).
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<OpenAiConfig, String> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let base_url = get(ENV_BASE_URL).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let model = get(ENV_MODEL).ok_or_else(|| {
            format!("{ENV_MODEL} is not set: name the model the OpenAI-compatible endpoint serves")
        })?;
        let api_key = get(ENV_API_KEY).or_else(|| get(ENV_API_KEY_FALLBACK));
        let timeout = match get(ENV_TIMEOUT_SECS) {
            None => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            Some(raw) => match raw.parse::<u64>() {
                Ok(secs) if secs > 0 => Duration::from_secs(secs),
                _ => {
                    return Err(format!(
                        "{ENV_TIMEOUT_SECS} must be a positive whole number of seconds, got {raw:?}"
                    ))
                }
            },
        };
        Ok(OpenAiConfig {
            base_url,
            model,
            api_key,
            timeout,
        })
    }

    /// The request URL: `<base_url without trailing slash>/chat/completions`.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// A [`Provider`] calling an OpenAI-compatible `/chat/completions` endpoint.
///
/// Cheap to share: the configuration sits behind an `Arc`, and every call builds its own
/// (`!Send`) `awc` client inside the returned future.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: Arc<OpenAiConfig>,
}

impl OpenAiProvider {
    /// A provider for `config`. Nothing is contacted until the first call.
    pub fn new(config: OpenAiConfig) -> Self {
        OpenAiProvider {
            config: Arc::new(config),
        }
    }

    /// The configuration this provider was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let body = request_body(&config.model, &request);
            let url = config.chat_completions_url();
            // awc's own timeout covers connect + response head + body; the outer one is a
            // guarantee that the whole call, whatever stage it is stuck in, ends in time.
            match tokio::time::timeout(config.timeout, send(&config, &url, &body)).await {
                Ok(result) => result,
                Err(_) => Err(timeout_error(&url, config.timeout)),
            }
        })
    }
}

/// One HTTP round trip: POST the body, check the status, parse the answer.
async fn send(
    config: &OpenAiConfig,
    url: &str,
    body: &Value,
) -> Result<ProviderResponse, ProviderError> {
    let client = awc::Client::builder()
        .connector(awc::Connector::new().timeout(config.timeout))
        .timeout(config.timeout)
        .finish();
    let mut req = client
        .post(url)
        .insert_header((header::ACCEPT, "application/json"));
    if let Some(key) = &config.api_key {
        req = req.bearer_auth(key);
    }
    let mut response = req
        .send_json(body)
        .await
        .map_err(|e| send_error(url, config.timeout, e))?;
    let status = response.status();
    let bytes = response.body().limit(MAX_RESPONSE_BYTES).await;
    if !status.is_success() {
        let body = match bytes {
            Ok(bytes) => truncate(&String::from_utf8_lossy(&bytes)),
            Err(e) => format!("(response body unreadable: {e})"),
        };
        return Err(ProviderError::Status {
            status: status.as_u16(),
            body,
        });
    }
    let bytes = bytes.map_err(|e| payload_error(url, config.timeout, e))?;
    parse_response(&bytes)
}

fn timeout_error(url: &str, timeout: Duration) -> ProviderError {
    ProviderError::Unreachable(format!(
        "no complete answer from {url} within {timeout:?} (raise {ENV_TIMEOUT_SECS} for slow models)"
    ))
}

fn send_error(url: &str, timeout: Duration, error: SendRequestError) -> ProviderError {
    match error {
        SendRequestError::Timeout => timeout_error(url, timeout),
        SendRequestError::Connect(e) => {
            ProviderError::Unreachable(format!("cannot connect to {url}: {e}"))
        }
        SendRequestError::Url(e) => {
            ProviderError::Unreachable(format!("invalid endpoint URL {url}: {e}"))
        }
        other => ProviderError::Unreachable(format!("request to {url} failed: {other}")),
    }
}

fn payload_error(url: &str, timeout: Duration, error: PayloadError) -> ProviderError {
    match error {
        PayloadError::Overflow => ProviderError::Invalid(format!(
            "response from {url} is larger than {} MiB",
            MAX_RESPONSE_BYTES / (1024 * 1024)
        )),
        PayloadError::Io(e) if e.kind() == io::ErrorKind::TimedOut => timeout_error(url, timeout),
        other => {
            ProviderError::Unreachable(format!("reading the response from {url} failed: {other}"))
        }
    }
}

/// The first [`MAX_ERROR_BODY_CHARS`] characters of `text`, with `…` when cut.
fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// The JSON body of a chat-completions request.
fn request_body(model: &str, request: &ProviderRequest) -> Value {
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
    body.insert("stream".into(), Value::Bool(false));
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
                let has_text = message
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }));
                if has_text {
                    out.push(json!({"role": "user", "content": message.joined_text()}));
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

/// Parses a chat-completions response body into the assistant's content blocks.
fn parse_response(bytes: &[u8]) -> Result<ProviderResponse, ProviderError> {
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
    Ok(ProviderResponse { content })
}

/// A tool call's `arguments` as a JSON object. Missing or blank arguments are `{}`; an
/// object sent as-is (Ollama) is kept; a string is parsed, and one that is not a JSON
/// object is kept verbatim as `{"_raw": <string>}`.
fn parse_arguments(raw: Option<&Value>) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    fn config(base_url: &str, api_key: Option<&str>, timeout: Duration) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.to_owned(),
            model: "qwen2.5-7b-instruct".to_owned(),
            api_key: api_key.map(str::to_owned),
            timeout,
        }
    }

    fn run<F: Future>(future: F) -> F::Output {
        actix_web::rt::System::new().block_on(future)
    }

    fn complete(
        config: OpenAiConfig,
        request: ProviderRequest,
    ) -> Result<ProviderResponse, ProviderError> {
        let provider = OpenAiProvider::new(config);
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

        let seen = recv(&rx);
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
        assert!(seen
            .header("content-type")
            .is_some_and(|v| v.starts_with("application/json")));
        let body = seen.json();
        assert_eq!(body["model"], "qwen2.5-7b-instruct");
        assert_eq!(body["stream"], false);
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
        let response = complete(config(&base, None, Duration::from_secs(10)), request)
            .expect("follow-up answer");
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
                assert!(body.starts_with("{\"error\":\"model crashed"), "{body}");
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
            ProviderError::Unreachable(message) => {
                assert!(message.contains("within 300ms"), "{message}")
            }
            other => panic!("expected Unreachable, got {other:?}"),
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
    }

    #[test]
    fn provider_name_and_truncation() {
        let provider = OpenAiProvider::new(config("http://x/v1", None, Duration::from_secs(1)));
        assert_eq!(provider.name(), "openai");
        assert_eq!(truncate("short"), "short");
        let cut = truncate(&"é".repeat(MAX_ERROR_BODY_CHARS + 10));
        assert_eq!(cut.chars().count(), MAX_ERROR_BODY_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
