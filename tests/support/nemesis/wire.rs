//! The nemesis's own small blocking client: one socket per worker, every wait bounded (a
//! stopped node accepts a TCP connection and then says nothing), every `commandComplete` it
//! reads noted in the order it arrived (the checker compares those orders between clients).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::handshake::HandshakeError;
use tungstenite::{Message, WebSocket};

use crate::support::protocol::{self, CallIds, AGENT_SERVER};

/// How long one read may block before the caller looks at its deadline again.
const READ_SLICE: Duration = Duration::from_millis(100);

/// Why a request did not get its answer.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The server answered with an error (its text).
    Refused(String),
    /// The socket closed, or could not be opened.
    Closed(String),
    /// No answer before the deadline.
    Timeout,
}

/// A completion seen on the socket: (conversation, requestId, whether it reports success).
pub type Completion = (String, String, bool);

/// A connected, blocking protocol client with deadlines.
pub struct Wire {
    ws: WebSocket<TcpStream>,
    call_ids: CallIds,
    /// Every `commandComplete` read, in order (drained by the worker).
    pub completions: Vec<Completion>,
}

impl Wire {
    /// Connects to `127.0.0.1:<port>` within `timeout` (TCP connect and the upgrade both).
    pub fn connect(port: u16, timeout: Duration) -> Result<Wire, Failure> {
        let deadline = Instant::now() + timeout;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| Failure::Closed(format!("connect: {e}")))?;
        stream
            .set_read_timeout(Some(READ_SLICE))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| Failure::Closed(e.to_string()))?;
        let mut attempt = tungstenite::client(format!("ws://127.0.0.1:{port}/"), stream);
        let ws = loop {
            match attempt {
                Ok((ws, _)) => break ws,
                Err(HandshakeError::Interrupted(mid)) => {
                    if Instant::now() > deadline {
                        return Err(Failure::Timeout);
                    }
                    attempt = mid.handshake();
                }
                Err(HandshakeError::Failure(e)) => return Err(Failure::Closed(e.to_string())),
            }
        };
        Ok(Wire {
            ws,
            call_ids: CallIds::default(),
            completions: Vec::new(),
        })
    }

    /// Sends an invoke; its callId.
    pub fn send_invoke(
        &mut self,
        channel: &str,
        method: &str,
        args: Value,
    ) -> Result<u64, Failure> {
        let call_id = self.call_ids.next(channel);
        self.ws
            .send(Message::text(protocol::invoke_frame(
                channel, call_id, method, args,
            )))
            .map_err(|e| Failure::Closed(e.to_string()))?;
        Ok(call_id)
    }

    /// Invokes and waits until `deadline` for the answer.
    pub fn invoke(
        &mut self,
        channel: &str,
        method: &str,
        args: Value,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        let call_id = self.send_invoke(channel, method, args)?;
        loop {
            let frame = self.read(deadline)?;
            if protocol::answer_id(&frame) == Some((channel, call_id)) {
                return protocol::answer_result(frame).map_err(Failure::Refused);
            }
        }
    }

    /// `invoke` on the `agent-server` channel.
    pub fn agent(
        &mut self,
        method: &str,
        args: Value,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        self.invoke(AGENT_SERVER, method, args, deadline)
    }

    /// Reads frames until the `commandComplete` of `request_id` in `conversation`; whether it
    /// reports success (no `lastError`, not cancelled).
    pub fn wait_complete(
        &mut self,
        conversation: &str,
        request_id: &str,
        deadline: Instant,
    ) -> Result<bool, Failure> {
        loop {
            let seen = self.completions.len();
            self.read(deadline)?;
            if let Some((c, r, ok)) = self.completions.get(seen) {
                if c == conversation && r == request_id {
                    return Ok(*ok);
                }
            }
        }
    }

    /// The next frame (noting completions), or why there is none before `deadline`.
    fn read(&mut self, deadline: Instant) -> Result<Value, Failure> {
        loop {
            match self.ws.read() {
                Ok(Message::Text(text)) => {
                    let frame: Value = serde_json::from_str(&text)
                        .map_err(|e| Failure::Closed(format!("non-JSON frame: {e}")))?;
                    self.note(&frame);
                    return Ok(frame);
                }
                Ok(Message::Close(frame)) => {
                    return Err(Failure::Closed(
                        frame.map_or("closed".into(), |f| f.reason.to_string()),
                    ))
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() > deadline {
                        return Err(Failure::Timeout);
                    }
                }
                Err(e) => return Err(Failure::Closed(e.to_string())),
            }
        }
    }

    /// Notes a `notify … commandComplete` call.
    fn note(&mut self, frame: &Value) {
        let message = &frame["message"];
        if message["type"] != "call" || message["name"] != "notify" {
            return;
        }
        let args = &message["args"];
        if args[1] != "commandComplete" {
            return;
        }
        let Some(conversation) = frame["name"]
            .as_str()
            .and_then(|n| n.strip_prefix(protocol::CLIENTIO_PREFIX))
        else {
            return;
        };
        let Some(request) = args[0]["requestId"].as_str() else {
            return;
        };
        let result = &args[2]["result"];
        let ok = result.get("lastError").is_none() && result["cancelled"] != true;
        self.completions
            .push((conversation.to_string(), request.to_string(), ok));
    }
}

/// `joinConversation({conversationId})` args.
pub fn join_args(id: &str) -> Value {
    json!([{ "conversationId": id }])
}

/// Every display entry of `id`, oldest first, read backwards in pages of 1,000.
pub fn whole_history(wire: &mut Wire, id: &str, deadline: Instant) -> Result<Vec<Value>, Failure> {
    let channel = protocol::dispatcher(id);
    let mut pages: Vec<Vec<Value>> = Vec::new();
    let mut before: Option<u64> = None;
    loop {
        let page_arg = match before {
            Some(seq) => json!({"limit": 1000, "beforeSeq": seq}),
            None => json!({"limit": 1000}),
        };
        let page = wire.invoke(
            &channel,
            "getDisplayHistory",
            json!([null, page_arg]),
            deadline,
        )?;
        let entries = page.as_array().cloned().unwrap_or_default();
        let first = entries.first().and_then(|e| e["seq"].as_u64());
        pages.push(entries);
        match first {
            Some(0) | None => break,
            Some(seq) => before = Some(seq),
        }
    }
    Ok(pages.into_iter().rev().flatten().collect())
}
