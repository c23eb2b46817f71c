//! Test harness: starts the real server process and speaks the protocol with a blocking
//! WebSocket client.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// A running server process.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    _temp: Option<tempfile::TempDir>,
}

/// Path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_roundtable")
}

fn spawn(
    dir: &Path,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (Child, mpsc::Receiver<String>, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new(binary())
        .envs(envs.iter().copied())
        .args([
            "serve",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--instance-dir",
        ])
        .arg(dir)
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("ROUNDTABLE_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .env_remove("ROUNDTABLE_TOKEN")
        .env_remove("ROUNDTABLE_PORT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roundtable");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let log2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if std::env::var_os("ROUNDTABLE_TEST_LOG").is_some() {
                eprintln!("server: {line}");
            }
            log2.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    (child, rx, log)
}

impl Server {
    /// Starts a server on a fresh temporary instance directory.
    pub fn start(extra: &[&str]) -> Server {
        let temp = tempfile::tempdir().unwrap();
        let mut s = Server::start_in(temp.path(), extra);
        s._temp = Some(temp);
        s
    }

    /// Starts a server on `dir` and waits for its startup line.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Server {
        match Server::try_start_in(dir, extra) {
            Ok(s) => s,
            Err(log) => panic!("server did not start:\n{log}"),
        }
    }

    /// Like `start_in`, but returns the server's output when it exits instead of listening.
    pub fn try_start_in(dir: &Path, extra: &[&str]) -> Result<Server, String> {
        Server::try_start_env(dir, extra, &[])
    }

    /// Starts a server on a fresh temporary directory with extra environment variables.
    pub fn start_env(extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let temp = tempfile::tempdir().unwrap();
        let mut s = Server::try_start_env(temp.path(), extra, envs)
            .unwrap_or_else(|log| panic!("server did not start:\n{log}"));
        s._temp = Some(temp);
        s
    }

    /// Like `try_start_in`, with extra environment variables for the server process.
    pub fn try_start_env(
        dir: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Server, String> {
        let (mut child, rx, log) = spawn(dir, extra, envs);
        let deadline = Instant::now() + WAIT;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening on ws://127.0.0.1:").nth(1) {
                        let port = rest.split('/').next().unwrap().parse().unwrap();
                        return Ok(Server {
                            child: Some(child),
                            port,
                            dir: dir.to_path_buf(),
                            log,
                            _temp: None,
                        });
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.wait();
                    return Err(log.lock().unwrap().join("\n"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        return Err(format!("timeout; log:\n{}", log.lock().unwrap().join("\n")));
                    }
                }
            }
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.port)
    }

    /// A connected protocol client.
    pub fn connect(&self) -> Client {
        Client::connect(&self.url())
    }

    /// Sends `shutdown` and waits for the process to exit.
    pub fn shutdown(mut self) -> ExitStatus {
        let mut c = self.connect();
        let _ = c.agent("shutdown", json!([]));
        self.wait_exit()
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("server did not exit; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process without any shutdown (a crash).
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The server's resident set size in KiB (from `/proc/<pid>/status`).
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// A plain HTTP GET; returns (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_request(
            self.port,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        )
    }

    /// Reads one Prometheus figure from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.http_get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("metric {name} missing in\n{body}"))
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends a raw HTTP request and returns (status, body).
pub fn http_request(port: u16, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// What a WebSocket upgrade attempt got.
pub fn try_upgrade(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<Client, u16> {
    let mut req = format!("ws://127.0.0.1:{port}{path}")
        .into_client_request()
        .unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(
            tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    match tungstenite::connect(req) {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("upgrade failed oddly: {e}"),
    }
}

/// A blocking protocol client.
pub struct Client {
    pub ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_call: HashMap<String, u64>,
    /// Frames received while waiting for something else.
    pub inbox: VecDeque<Value>,
    /// Set when the server closed the socket: (code, reason).
    pub closed: Option<(u16, String)>,
}

/// An RPC outcome: the `result` (Null when absent) or the `error` text.
pub type Rpc = Result<Value, String>;

impl Client {
    pub fn connect(url: &str) -> Client {
        let (ws, _) = tungstenite::connect(url).expect("connect");
        Client::from_ws(ws)
    }

    fn from_ws(ws: WebSocket<MaybeTlsStream<TcpStream>>) -> Client {
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            s.set_nodelay(true).unwrap();
        }
        Client {
            ws,
            next_call: HashMap::new(),
            inbox: VecDeque::new(),
            closed: None,
        }
    }

    pub fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).expect("send");
    }

    /// Sends an invoke and returns its callId.
    pub fn send_invoke(&mut self, channel: &str, method: &str, args: Value) -> u64 {
        let id = self.next_call.entry(channel.to_string()).or_insert(0);
        let call_id = *id;
        *id += 1;
        let frame = json!({"name": channel, "message": {"type": "invoke", "callId": call_id, "name": method, "args": args}});
        self.send_text(&frame.to_string());
        call_id
    }

    /// Sends a call (never answered).
    pub fn send_call(&mut self, channel: &str, method: &str, args: Value) {
        let id = self.next_call.entry(channel.to_string()).or_insert(0);
        let call_id = *id;
        *id += 1;
        let frame = json!({"name": channel, "message": {"type": "call", "callId": call_id, "name": method, "args": args}});
        self.send_text(&frame.to_string());
    }

    /// Reads one frame, or None after `timeout` (or when closed).
    pub fn read_frame(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.inbox.pop_front() {
            return Some(v);
        }
        self.read_socket(timeout)
    }

    fn read_socket(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.closed.is_some() {
                return None;
            }
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    return Some(serde_json::from_str(&t).expect("server sent non-JSON"))
                }
                Ok(Message::Binary(b)) => {
                    return Some(serde_json::from_slice(&b).expect("server sent non-JSON"))
                }
                Ok(Message::Close(frame)) => {
                    self.closed = Some(frame.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    }));
                    return None;
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() > deadline {
                        return None;
                    }
                }
                Err(tungstenite::Error::ConnectionClosed)
                | Err(tungstenite::Error::AlreadyClosed) => {
                    self.closed.get_or_insert((1006, String::new()));
                    return None;
                }
                Err(e) => {
                    self.closed.get_or_insert((1006, e.to_string()));
                    return None;
                }
            }
        }
    }

    /// Waits for the answer to `call_id` on `channel`, buffering everything else.
    pub fn wait_answer(&mut self, channel: &str, call_id: u64) -> Rpc {
        let deadline = Instant::now() + WAIT;
        let mut skipped = VecDeque::new();
        let found = loop {
            if let Some(pos) = self
                .inbox
                .iter()
                .position(|f| is_answer(f, channel, call_id))
            {
                break self.inbox.remove(pos);
            }
            match self.read_socket(Duration::from_millis(200)) {
                Some(f) if is_answer(&f, channel, call_id) => break Some(f),
                Some(f) => skipped.push_back(f),
                None if self.closed.is_some() => break None,
                None if Instant::now() > deadline => break None,
                None => {}
            }
        };
        self.inbox.extend(skipped);
        let f = found.unwrap_or_else(|| {
            panic!(
                "no answer to {channel} #{call_id} (closed: {:?})",
                self.closed
            )
        });
        let m = &f["message"];
        if m["type"] == "invokeError" {
            Err(m["error"].as_str().unwrap().to_string())
        } else {
            Ok(m.get("result").cloned().unwrap_or(Value::Null))
        }
    }

    /// invoke + wait.
    pub fn invoke(&mut self, channel: &str, method: &str, args: Value) -> Rpc {
        let id = self.send_invoke(channel, method, args);
        self.wait_answer(channel, id)
    }

    /// invoke on `agent-server`.
    pub fn agent(&mut self, method: &str, args: Value) -> Rpc {
        self.invoke("agent-server", method, args)
    }

    /// createConversation(name) → id.
    pub fn create(&mut self, name: &str) -> String {
        let info = self
            .agent("createConversation", json!([name, null]))
            .expect("create");
        info["conversationId"].as_str().unwrap().to_string()
    }

    /// joinConversation({conversationId}) → result.
    pub fn join(&mut self, id: &str) -> Value {
        self.agent("joinConversation", json!([{"conversationId": id}]))
            .expect("join")
    }

    /// listConversations() names.
    pub fn names(&mut self) -> Vec<String> {
        let list = self
            .agent("listConversations", json!([null]))
            .expect("list");
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Waits for a `call` named `method` on `channel`; returns its args.
    pub fn expect_call(&mut self, channel: &str, method: &str) -> Value {
        self.try_expect_call(channel, method, WAIT)
            .unwrap_or_else(|| panic!("no {method} call on {channel}; inbox: {:?}", self.inbox))
    }

    pub fn try_expect_call(
        &mut self,
        channel: &str,
        method: &str,
        timeout: Duration,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let is_it = |f: &Value| {
            f["name"] == channel && f["message"]["type"] == "call" && f["message"]["name"] == method
        };
        if let Some(pos) = self.inbox.iter().position(is_it) {
            return self.inbox.remove(pos).map(|f| f["message"]["args"].clone());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.read_socket(left.min(Duration::from_millis(200))) {
                Some(f) if is_it(&f) => return Some(f["message"]["args"].clone()),
                Some(f) => self.inbox.push_back(f),
                None if self.closed.is_some() => return None,
                None => {}
            }
        }
    }

    /// Reads until the server closes; returns the close code.
    pub fn wait_close(&mut self) -> u16 {
        let deadline = Instant::now() + WAIT;
        while self.closed.is_none() && Instant::now() < deadline {
            if let Some(f) = self.read_socket(Duration::from_millis(200)) {
                self.inbox.push_back(f);
            }
        }
        self.closed
            .as_ref()
            .map(|c| c.0)
            .unwrap_or_else(|| panic!("socket not closed"))
    }

    /// Sends a close frame.
    pub fn close(&mut self) {
        let _ = self.ws.close(Some(tungstenite::protocol::CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        }));
        let _ = self.ws.flush();
    }
}

fn is_answer(f: &Value, channel: &str, call_id: u64) -> bool {
    f["name"] == channel
        && (f["message"]["type"] == "invokeResult" || f["message"]["type"] == "invokeError")
        && f["message"]["callId"] == call_id
}

/// Runs a setup command a test needs from the machine (mount, useradd…). `false` after
/// printing `skipped: cannot <what> (<why>)` when the machine refuses: the test then returns.
pub fn machine_allows(command: &mut Command, what: &str) -> bool {
    match command.output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "skipped: cannot {what} ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("skipped: cannot {what} ({e})");
            false
        }
    }
}

/// Polls `f` until it returns true or the wait runs out.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out waiting for: {what}");
}

/// A clientio call: (method, args).
pub type Call = (String, Value);

impl Client {
    /// submitCommand(text, null, null, clientRequestId, null) on `dispatcher:<id>`; the ack.
    pub fn submit(&mut self, conversation: &str, text: &str) -> Value {
        self.invoke(
            &format!("dispatcher:{conversation}"),
            "submitCommand",
            json!([text, null, null, format!("cr-{}", text.len()), null]),
        )
        .expect("submitCommand")
    }

    /// Collects clientio calls of `conversation` until `commandComplete` (or
    /// `requestCancelled`) for `request_id`; returns them in order.
    pub fn until_complete(&mut self, conversation: &str, request_id: &str) -> Vec<Call> {
        let channel = format!("clientio:{conversation}");
        let deadline = Instant::now() + WAIT;
        let mut calls = Vec::new();
        let mut keep = VecDeque::new();
        loop {
            let frame = match self.inbox.pop_front() {
                Some(f) => Some(f),
                None => self.read_socket(Duration::from_millis(200)),
            };
            let Some(f) = frame else {
                assert!(self.closed.is_none(), "socket closed: {:?}", self.closed);
                assert!(
                    Instant::now() < deadline,
                    "no completion for {request_id}; got {calls:?}"
                );
                continue;
            };
            if f["name"] != channel.as_str() || f["message"]["type"] != "call" {
                keep.push_back(f);
                continue;
            }
            let method = f["message"]["name"].as_str().unwrap().to_string();
            let args = f["message"]["args"].clone();
            let done = (method == "notify"
                && args[1] == "commandComplete"
                && args[0]["requestId"] == request_id)
                || (method == "requestCancelled" && args[0] == request_id);
            calls.push((method, args));
            if done {
                // Put back what we skipped, ahead of anything newer.
                while let Some(k) = keep.pop_back() {
                    self.inbox.push_front(k);
                }
                return calls;
            }
        }
    }

    /// Texts of the appendDisplay calls among `calls`.
    pub fn texts(calls: &[Call]) -> Vec<String> {
        calls
            .iter()
            .filter(|(m, a)| m == "appendDisplay" && a[0]["requestId"]["requestId"] != "system")
            .filter_map(|(_, a)| a[0]["message"]["content"].as_str().map(str::to_string))
            .collect()
    }
}
