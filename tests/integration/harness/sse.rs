//! [`ScriptedSse`]: a scripted model endpoint that streams, over TLS (the test CA's
//! certificate, [`super::tls`]) or plain HTTP. Its script answers each request (method, path,
//! headers and JSON body recorded) with a [`Reply`]: a whole JSON body, or server-sent events
//! written one [`Step`] at a time as chunks of a chunked body, each flushed at once, where a
//! step may also wait on a [`Gate`] (the endpoint holds its next chunk until the test lets it
//! go), hold the connection until the client closes it (reported with the time, for the
//! cancellation tests), or cut the connection mid-answer. Keep-alive, one thread per
//! connection; it lives as long as the test process. [`ConnectProxy`] is an HTTP `CONNECT`
//! proxy that records the targets it tunnels to.
//!
//! Used by the provider tests (`provider_streams.rs`, `provider_anthropic.rs`,
//! `provider_tls.rs`), in-process against `roundtable::providers` and through the binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::tls::{server_config, test_ca};
use super::Gate;

/// One step of a streamed answer.
pub enum Step {
    /// Write this text (whole events, as on the wire) as one chunk, and flush it.
    Send(String),
    /// Wait until the gate opens.
    Wait(Gate),
    /// Write nothing more; wait for the client to close the connection and report when
    /// ([`ScriptedSse::closed_within`]).
    HoldUntilClosed,
    /// Close the connection now, without the end of the body (a server that died).
    Cut,
}

/// A streamed answer's `data:` event with `value`.
pub fn data(value: &Value) -> Step {
    Step::Send(format!("data: {value}\n\n"))
}

/// A named event (`event: NAME`, Anthropic's form) with `value`.
pub fn named(event: &str, value: &Value) -> Step {
    Step::Send(format!("event: {event}\ndata: {value}\n\n"))
}

/// `data: [DONE]`.
pub fn done() -> Step {
    Step::Send("data: [DONE]\n\n".to_owned())
}

/// A chat-completions chunk carrying `delta` (`{"content": "Hel"}`, `{"tool_calls": […]}`,
/// `{"reasoning_content": …}`).
pub fn chunk(delta: Value) -> Step {
    data(&serde_json::json!({
        "object": "chat.completion.chunk",
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}],
    }))
}

/// The chunk that ends a chat-completions answer (`"stop"`, `"tool_calls"`).
pub fn finish(reason: &str) -> Step {
    data(&serde_json::json!({
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
    }))
}

/// The usage chunk `stream_options.include_usage` adds last, reported by `model`.
pub fn usage_chunk(model: &str, prompt: u64, completion: u64) -> Step {
    data(&serde_json::json!({
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    }))
}

/// A whole streamed text answer: `words` one chunk each, the end, usage, `[DONE]`.
pub fn streamed_text(words: &[&str], usage: (u64, u64)) -> Reply {
    let mut steps: Vec<Step> = words
        .iter()
        .map(|w| chunk(serde_json::json!({"content": w})))
        .collect();
    steps.push(finish("stop"));
    steps.push(usage_chunk("scripted", usage.0, usage.1));
    steps.push(done());
    Reply::events(steps)
}

/// What the endpoint answers.
pub enum Body {
    /// `Content-Type: application/json` and this body.
    Json(String),
    /// `Content-Type: text/event-stream`, chunked, step by step.
    Events(Vec<Step>),
}

/// An answer: status, extra headers, body.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// Headers besides the content type and framing.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

impl Reply {
    /// A whole JSON answer.
    pub fn json(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Json(body.into()),
        }
    }

    /// A 200 with these events.
    pub fn events(steps: Vec<Step>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: Body::Events(steps),
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// One request as the endpoint read it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`.
    pub method: String,
    /// The request target (`/v1/chat/completions`).
    pub path: String,
    /// Every header, as sent.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

impl Recorded {
    /// A header's value (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the script is.
type ScriptFn = dyn Fn(usize, &Recorded) -> Reply + Send + Sync;

/// The running endpoint.
pub struct ScriptedSse {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `https://127.0.0.1:<port>` (or `http://` without TLS).
    pub origin: String,
    /// Every request so far, in arrival order.
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// TCP connections accepted so far.
    pub connections: Arc<AtomicUsize>,
    /// When a held connection was closed by the client.
    closed: Mutex<mpsc::Receiver<Instant>>,
}

impl ScriptedSse {
    /// An endpoint over TLS with the test CA's certificate for 127.0.0.1 and localhost.
    pub fn tls(script: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static) -> ScriptedSse {
        let (cert, key) = &test_ca().local;
        ScriptedSse::start(Some(server_config(cert, key)), script)
    }

    /// An endpoint over TLS presenting a certificate for another host name.
    pub fn tls_for_another_host(
        script: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static,
    ) -> ScriptedSse {
        let (cert, key) = &test_ca().other_host;
        ScriptedSse::start(Some(server_config(cert, key)), script)
    }

    /// An endpoint over plain HTTP.
    pub fn plain(
        script: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static,
    ) -> ScriptedSse {
        ScriptedSse::start(None, script)
    }

    fn start(
        tls: Option<Arc<rustls::ServerConfig>>,
        script: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static,
    ) -> ScriptedSse {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the scripted endpoint");
        let port = listener.local_addr().unwrap().port();
        let origin = format!(
            "{}://127.0.0.1:{port}",
            if tls.is_some() { "https" } else { "http" }
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (closed_tx, closed_rx) = mpsc::channel();
        let script: Arc<ScriptFn> = Arc::new(script);
        let (recorded, accepted) = (requests.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                accepted.fetch_add(1, Ordering::SeqCst);
                let (recorded, script, closed) =
                    (recorded.clone(), script.clone(), closed_tx.clone());
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    match tls {
                        Some(config) => {
                            let Ok(conn) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            serve(
                                rustls::StreamOwned::new(conn, stream),
                                &recorded,
                                &*script,
                                &closed,
                            )
                        }
                        None => serve(stream, &recorded, &*script, &closed),
                    }
                });
            }
        });
        ScriptedSse {
            port,
            origin,
            requests,
            connections,
            closed: Mutex::new(closed_rx),
        }
    }

    /// `origin` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// When the client closed a held connection, if it did within `wait`.
    pub fn closed_within(&self, wait: Duration) -> Option<Instant> {
        self.closed.lock().unwrap().recv_timeout(wait).ok()
    }
}

/// Serves the requests of one connection until it closes or a step ends it.
fn serve<S: Read + Write>(
    stream: S,
    recorded: &Mutex<Vec<Recorded>>,
    script: &ScriptFn,
    closed: &mpsc::Sender<Instant>,
) {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let n = {
            let mut all = recorded.lock().unwrap();
            all.push(request.clone());
            all.len() - 1
        };
        let reply = script(n, &request);
        if !answer(&mut reader, reply, closed) {
            return;
        }
    }
}

/// Writes `reply`; false when the connection is over.
fn answer<S: Read + Write>(
    reader: &mut BufReader<S>,
    reply: Reply,
    closed: &mpsc::Sender<Instant>,
) -> bool {
    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let steps = match reply.body {
        Body::Json(body) => {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
            let out = reader.get_mut();
            return out.write_all(head.as_bytes()).is_ok() && out.flush().is_ok();
        }
        Body::Events(steps) => steps,
    };
    head.push_str("Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
    if reader.get_mut().write_all(head.as_bytes()).is_err() || reader.get_mut().flush().is_err() {
        return false;
    }
    for step in steps {
        match step {
            Step::Send(text) => {
                let out = reader.get_mut();
                let chunk = format!("{:x}\r\n{text}\r\n", text.len());
                if out.write_all(chunk.as_bytes()).is_err() || out.flush().is_err() {
                    return false;
                }
            }
            Step::Wait(gate) => gate.pass(),
            Step::HoldUntilClosed => {
                let mut sink = [0u8; 1024];
                loop {
                    match reader.read(&mut sink) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                let _ = closed.send(Instant::now());
                return false;
            }
            Step::Cut => return false,
        }
    }
    let out = reader.get_mut();
    out.write_all(b"0\r\n\r\n").is_ok() && out.flush().is_ok()
}

/// Reads one request: head, then `Content-Length` bytes of body. `None` when the peer
/// closed (or the TLS handshake failed).
fn read_request<S: Read>(reader: &mut BufReader<S>) -> Option<Recorded> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// An HTTP proxy that tunnels `CONNECT host:port` (what a client does for an `https://`
/// endpoint behind `HTTPS_PROXY`) and records each target; anything else gets a 405.
pub struct ConnectProxy {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Every `CONNECT` target so far.
    pub targets: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    /// Starts the proxy on a free loopback port.
    pub fn start() -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = targets.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let seen = seen.clone();
                std::thread::spawn(move || tunnel(client, &seen));
            }
        });
        ConnectProxy { url, targets }
    }
}

/// One proxied connection.
fn tunnel(client: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
    }
    let mut client = client;
    let mut parts = line.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (parts.next(), parts.next()) else {
        let _ = client.write_all(b"HTTP/1.1 405 Only CONNECT\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    seen.lock().unwrap().push(target.to_owned());
    let Ok(upstream) = TcpStream::connect(target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Unreachable\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let (mut up_read, mut up_write) = (upstream.try_clone().expect("clone"), upstream);
    let mut client_write = client.try_clone().expect("clone");
    // What the reader buffered beyond the head belongs to the tunnel.
    let buffered = reader.buffer().to_vec();
    if up_write.write_all(&buffered).is_err() {
        return;
    }
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut client_write);
        let _ = client_write.shutdown(std::net::Shutdown::Both);
    });
    let _ = std::io::copy(reader.get_mut(), &mut up_write);
    let _ = up_write.shutdown(std::net::Shutdown::Both);
}

/// The providers' HTTP stack of an environment whose only variables are `vars` (as the
/// server reads its own environment): `SSL_CERT_FILE`, `HTTPS_PROXY`, `NO_PROXY`…
pub fn http_stack(vars: &[(&str, &str)]) -> Arc<roundtable::providers::http::HttpStack> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let settings = roundtable::providers::http::HttpSettings::from_lookup(|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    });
    Arc::new(roundtable::providers::http::HttpStack::new(&settings).expect("the HTTP stack"))
}

/// The stack of an environment with `SSL_CERT_FILE` naming the test CA.
pub fn trusting_test_ca() -> Arc<roundtable::providers::http::HttpStack> {
    http_stack(&[("SSL_CERT_FILE", test_ca().ca.to_str().unwrap())])
}

/// Runs `work` to its end in a fresh actix system, as a conversation's arbiter runs a turn.
pub fn run_local<F: std::future::Future>(work: F) -> F::Output {
    actix_web::rt::System::new().block_on(work)
}
