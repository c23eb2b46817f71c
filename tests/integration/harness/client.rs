//! The blocking protocol client the tests drive the server with: one tungstenite socket, reads
//! with a short timeout so every wait has a deadline, and an inbox that keeps frames that
//! arrived while the test waited for something else. Frame text, callIds and answer
//! recognition come from `tests/support/protocol.rs`, shared with the load harness's client.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use super::WAIT;
use crate::support::protocol::{self, CallIds, AGENT_SERVER};

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
    /// The socket, public for tests that write raw frames or close it their own way.
    pub ws: WebSocket<MaybeTlsStream<TcpStream>>,
    /// The next callId per channel.
    call_ids: CallIds,
    /// Frames received while waiting for something else.
    pub inbox: VecDeque<Value>,
    /// Set when the server closed the socket: (code, reason).
    pub closed: Option<(u16, String)>,
    /// While [`Client::recording`] runs: a copy of every frame read from the socket.
    tap: Option<Vec<Value>>,
}

/// An RPC outcome: the `result` (Null when absent) or the `error` text.
pub type Rpc = Result<Value, String>;

impl Client {
    /// Connects to `url` (panics if the upgrade fails; see [`try_upgrade`] for refusals).
    pub fn connect(url: &str) -> Client {
        let (ws, _) = tungstenite::connect(url).expect("connect");
        Client::from_ws(ws)
    }

    /// Reads time out every 100 ms so every wait can check its deadline; no Nagle delay.
    fn from_ws(ws: WebSocket<MaybeTlsStream<TcpStream>>) -> Client {
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            s.set_nodelay(true).unwrap();
        }
        Client {
            ws,
            call_ids: CallIds::default(),
            inbox: VecDeque::new(),
            closed: None,
            tap: None,
        }
    }

    /// Sends one text frame as is (tests of malformed input write their own).
    pub fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).expect("send");
    }

    /// Sends an invoke and returns its callId.
    pub fn send_invoke(&mut self, channel: &str, method: &str, args: Value) -> u64 {
        let call_id = self.call_ids.next(channel);
        self.send_text(&protocol::invoke_frame(channel, call_id, method, args));
        call_id
    }

    /// Sends a call (never answered).
    pub fn send_call(&mut self, channel: &str, method: &str, args: Value) {
        let call_id = self.call_ids.next(channel);
        self.send_text(&protocol::call_frame(channel, call_id, method, args));
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
                    return Some(
                        self.tapped(serde_json::from_str(&t).expect("server sent non-JSON")),
                    )
                }
                Ok(Message::Binary(b)) => {
                    return Some(
                        self.tapped(serde_json::from_slice(&b).expect("server sent non-JSON")),
                    )
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

    /// `frame`, copied to the tap while [`Client::recording`] runs.
    fn tapped(&mut self, frame: Value) -> Value {
        if let Some(tap) = &mut self.tap {
            tap.push(frame.clone());
        }
        frame
    }

    /// Runs `sync` and returns what it returned and every frame this client had received
    /// before `sync` finished: those already buffered in the inbox, then each one read from
    /// the socket meanwhile (whether `sync` consumed it or left it in the inbox, where it
    /// stays). For "everything up to a point" without waiting for a quiet period: `sync`
    /// waits for a frame the server sends after everything the test wants to see.
    /// Recordings do not nest.
    pub fn recording<T>(&mut self, sync: impl FnOnce(&mut Client) -> T) -> (T, Vec<Value>) {
        assert!(self.tap.is_none(), "recordings do not nest");
        self.tap = Some(self.inbox.iter().cloned().collect());
        let out = sync(self);
        let seen = self.tap.take().expect("the tap");
        (out, seen)
    }

    /// Fails the test if a frame passing `unwanted` (described by `what`) reached this client
    /// before `sync` finished; returns what `sync` returned.
    ///
    /// This is how a test shows that something did *not* arrive. Waiting a while for it
    /// passes when it comes late; instead `sync` waits for a positive signal that the server
    /// queues for this socket after the unwanted frame would have been: frames on one
    /// socket arrive in the order the server queued them, so "the signal came and the
    /// unwanted frame did not come before it" proves it was never sent. Each caller says
    /// why its signal comes after (typically: the conversation or registry actor that would
    /// have sent the frame handles the signal's request later, or sends the signal later
    /// through the same path, e.g. the rest of the same turn).
    pub fn expect_none_before<T>(
        &mut self,
        what: &str,
        unwanted: impl Fn(&Value) -> bool,
        sync: impl FnOnce(&mut Client) -> T,
    ) -> T {
        let (out, seen) = self.recording(sync);
        if let Some(f) = seen.iter().find(|f| unwanted(f)) {
            panic!("{what} arrived (before the sync point): {f}");
        }
        out
    }

    /// Waits for the answer to `call_id` on `channel`, buffering everything else.
    pub fn wait_answer(&mut self, channel: &str, call_id: u64) -> Rpc {
        self.try_wait_answer(channel, call_id).unwrap_or_else(|| {
            panic!(
                "no answer to {channel} #{call_id} (closed: {:?})",
                self.closed
            )
        })
    }

    /// The answer to `call_id` on `channel`, or `None` when the socket closed (or nothing
    /// came in time) first: for clients that reconnect, as TypeAgent's do after 1012.
    pub fn try_wait_answer(&mut self, channel: &str, call_id: u64) -> Option<Rpc> {
        let deadline = Instant::now() + WAIT;
        let mut skipped = VecDeque::new();
        let found = loop {
            if let Some(pos) = self
                .inbox
                .iter()
                .position(|f| is_answer_to(f, channel, call_id))
            {
                break self.inbox.remove(pos);
            }
            match self.read_socket(Duration::from_millis(200)) {
                Some(f) if is_answer_to(&f, channel, call_id) => break Some(f),
                Some(f) => skipped.push_back(f),
                None if self.closed.is_some() => break None,
                None if Instant::now() > deadline => break None,
                None => {}
            }
        };
        self.inbox.extend(skipped);
        found.map(protocol::answer_result)
    }

    /// The server's close code when the socket was closed (`None` while it is open).
    pub fn close_code(&self) -> Option<u16> {
        self.closed.as_ref().map(|(code, _)| *code)
    }

    /// invoke + wait.
    pub fn invoke(&mut self, channel: &str, method: &str, args: Value) -> Rpc {
        let id = self.send_invoke(channel, method, args);
        self.wait_answer(channel, id)
    }

    /// invoke on `agent-server`.
    pub fn agent(&mut self, method: &str, args: Value) -> Rpc {
        self.invoke(AGENT_SERVER, method, args)
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

    /// The conversation's whole display history (`getDisplayHistory` with no argument).
    pub fn history(&mut self, id: &str) -> Vec<Value> {
        self.invoke(&protocol::dispatcher(id), "getDisplayHistory", json!([]))
            .expect("getDisplayHistory")
            .as_array()
            .expect("an array")
            .clone()
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

    /// Waits for a private `requestChoice` of `conversation` and answers it (`yesNo`: `yes`);
    /// returns the choice's args (`[requestId, choiceId, kind, message, choices, …]`).
    pub fn answer_choice(&mut self, conversation: &str, yes: bool) -> Value {
        let choice = self.expect_call(&protocol::clientio(conversation), "requestChoice");
        self.invoke(
            &protocol::dispatcher(conversation),
            "respondToChoice",
            json!([choice[1], yes]),
        )
        .expect("respondToChoice");
        choice
    }

    /// Like [`Client::expect_call`], but `None` when no such call arrives within `timeout`.
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

    /// Waits for the server's `invoke` of `method` on `channel` (a client agent's
    /// `agent:<name>`); returns its callId and args, buffering everything else.
    pub fn expect_invoke(&mut self, channel: &str, method: &str) -> (u64, Value) {
        let deadline = Instant::now() + WAIT;
        let is_it = |f: &Value| {
            f["name"] == channel
                && f["message"]["type"] == "invoke"
                && f["message"]["name"] == method
        };
        let found = match self.inbox.iter().position(is_it) {
            Some(pos) => self.inbox.remove(pos),
            None => loop {
                match self.read_socket(Duration::from_millis(200)) {
                    Some(f) if is_it(&f) => break Some(f),
                    Some(f) => self.inbox.push_back(f),
                    None if self.closed.is_some() || Instant::now() > deadline => break None,
                    None => {}
                }
            },
        };
        let f = found
            .unwrap_or_else(|| panic!("no {method} invoke on {channel}; inbox: {:?}", self.inbox));
        let m = &f["message"];
        (m["callId"].as_u64().expect("callId"), m["args"].clone())
    }

    /// Answers a server invoke with `invokeResult` (`result`: the value, or none for Null).
    pub fn send_result(&mut self, channel: &str, call_id: u64, result: Value) {
        let mut message = json!({"type": "invokeResult", "callId": call_id});
        if !result.is_null() {
            message["result"] = result;
        }
        self.send_text(&json!({"name": channel, "message": message}).to_string());
    }

    /// Answers a server invoke with `invokeError`.
    pub fn send_error(&mut self, channel: &str, call_id: u64, error: &str) {
        let message = json!({"type": "invokeError", "callId": call_id, "error": error});
        self.send_text(&json!({"name": channel, "message": message}).to_string());
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

/// A clientio call: (method, args).
pub type Call = (String, Value);

impl Client {
    /// submitCommand(text, null, null, clientRequestId, null) on `dispatcher:<id>`; the ack.
    pub fn submit(&mut self, conversation: &str, text: &str) -> Value {
        self.invoke(
            &protocol::dispatcher(conversation),
            "submitCommand",
            json!([text, null, null, format!("cr-{}", text.len()), null]),
        )
        .expect("submitCommand")
    }

    /// The `requestId` the server gave the submit that `ack` answers.
    pub fn request_id(ack: &Value) -> String {
        assert_eq!(ack["ok"], true, "submit refused: {ack}");
        ack["entry"]["requestId"].as_str().unwrap().to_string()
    }

    /// One whole turn: [`Client::submit`] `text`, then [`Client::until_complete`] on its
    /// requestId; the clientio calls it produced, in order.
    pub fn run_turn(&mut self, conversation: &str, text: &str) -> Vec<Call> {
        let ack = self.submit(conversation, text);
        self.until_complete(conversation, &Client::request_id(&ack))
    }

    /// Collects clientio calls of `conversation` until `commandComplete` (or
    /// `requestCancelled`) for `request_id`; returns them in order.
    pub fn until_complete(&mut self, conversation: &str, request_id: &str) -> Vec<Call> {
        let channel = protocol::clientio(conversation);
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
    ///
    /// Pieces of an answer being written (`inline` displays in a row, of one kind: text or
    /// thinking) read as the one text a client shows for them.
    pub fn texts(calls: &[Call]) -> Vec<String> {
        let mut texts: Vec<String> = Vec::new();
        // The kind of the inline run the last text is, if it is one.
        let mut run: Option<bool> = None;
        for (_, a) in calls
            .iter()
            .filter(|(m, a)| m == "appendDisplay" && a[0]["requestId"]["requestId"] != "system")
        {
            let Some(text) = a[0]["message"]["content"].as_str() else {
                continue;
            };
            let thinking = a[0]["thinking"] == true;
            if a[1] == "inline" {
                match (run, texts.last_mut()) {
                    (Some(kind), Some(last)) if kind == thinking => last.push_str(text),
                    _ => texts.push(text.to_string()),
                }
                run = Some(thinking);
            } else {
                texts.push(text.to_string());
                run = None;
            }
        }
        texts
    }
}

/// A matcher for [`Client::expect_none_before`]: a `call` named `method` on `channel`.
pub fn is_call<'a>(channel: &'a str, method: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |f| {
        f["name"] == channel && f["message"]["type"] == "call" && f["message"]["name"] == method
    }
}

/// Whether `frame` answers the invoke `call_id` on `channel`.
fn is_answer_to(frame: &Value, channel: &str, call_id: u64) -> bool {
    protocol::answer_id(frame) == Some((channel, call_id))
}
