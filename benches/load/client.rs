//! A lean protocol client for load: one task owns one socket (no reader/writer task pair, no
//! channel per frame), so 10,000 of them fit in the harness. Server → client `call` frames are
//! handed over as raw text and classified with a substring check instead of a JSON parse; only
//! answers to our own invokes and the server's invokes are parsed. A server → client invoke
//! is answered inside [`Client::recv`] with the default of `invokes.rs`, so any
//! TypeAgent-protocol server can be driven, not only Roundtable. Sockets use TCP_NODELAY (as TypeAgent's Node clients
//! do); the slow-reader client can shrink its receive buffer.
//!
//! `src/client` is the full client library; the harness bypasses it because its two tasks and
//! full JSON parse per frame would make the harness, not the server, the bottleneck on 2 cores.
//! Frame text, callIds and answer recognition come from `tests/support/protocol.rs`, shared
//! with the integration tests' blocking client.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long one RPC may take before the harness calls it failed.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);

use crate::invokes::{self, Reply};
pub use crate::support::protocol::AGENT_SERVER;
use crate::support::protocol::{self, CallIds};

/// What arrived on the socket.
#[derive(Debug)]
pub enum Incoming {
    /// The answer to an invoke of ours.
    Answer {
        /// Channel it came on.
        channel: String,
        /// The invoke's callId.
        call_id: u64,
        /// `result` (Null for void), or the `invokeError` text.
        result: Result<Value, String>,
    },
    /// A server → client `call` (or anything else that is not an answer), unparsed.
    Call(Utf8Bytes),
    /// A server → client invoke, already answered by [`Client::recv`] (counted by the fleet).
    Invoked(Reply),
    /// The socket closed, with the close code if the server sent one.
    Closed(Option<u16>),
}

/// One WebSocket to the server under test.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Next callId per channel.
    call_ids: CallIds,
    /// The reply to a server invoke not yet handed to the socket: [`Client::recv`] may be
    /// dropped mid-send (the fleet's members race it against their commands), so the reply
    /// stays here until tungstenite has queued it, and the next `recv` sends it first.
    unsent_reply: Option<String>,
    /// When the last text frame of [`LARGE_FRAME`] bytes or more was received, before it was
    /// parsed: `startup` tells the server's time to a long list's arrival from the harness's
    /// own parse of it (10,000 entries: ~10 ms into a `serde_json::Value`). Only large frames
    /// are timed, so the millions of small ones cost no clock read.
    large_frame_at: Option<Instant>,
}

/// A text frame at least this long is timed on arrival ([`Client::large_frame_received_at`]).
pub const LARGE_FRAME: usize = 64 * 1024;

impl Client {
    /// Connects to `url` (already checked to be loopback).
    pub async fn connect(url: &str) -> Result<Client, String> {
        Client::connect_with(url, None).await
    }

    /// Connects with an optional `SO_RCVBUF` (the slow reader asks for a small one), all of
    /// it (name lookup, TCP, WebSocket handshake) within [`RPC_TIMEOUT`].
    pub async fn connect_with(url: &str, recv_buffer: Option<u32>) -> Result<Client, String> {
        tokio::time::timeout(RPC_TIMEOUT, Client::connect_unbounded(url, recv_buffer))
            .await
            .map_err(|_| {
                format!(
                    "no WebSocket connection to {url} within {} s",
                    RPC_TIMEOUT.as_secs()
                )
            })?
    }

    async fn connect_unbounded(url: &str, recv_buffer: Option<u32>) -> Result<Client, String> {
        let authority = url
            .strip_prefix("ws://")
            .and_then(|r| r.split('/').next())
            .ok_or_else(|| format!("bad url {url}"))?;
        let addr = tokio::net::lookup_host(authority)
            .await
            .map_err(|e| format!("cannot resolve {authority}: {e}"))?
            .next()
            .ok_or_else(|| format!("{authority} resolves to nothing"))?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{authority} resolves to {addr}, not a loopback address: refused"
            ));
        }
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| format!("socket: {e}"))?;
        if let Some(size) = recv_buffer {
            socket
                .set_recv_buffer_size(size)
                .map_err(|e| format!("SO_RCVBUF: {e}"))?;
        }
        let stream = socket
            .connect(addr)
            .await
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        let (ws, _) = tokio_tungstenite::client_async_with_config(
            url,
            MaybeTlsStream::Plain(stream),
            Some(lean_config()),
        )
        .await
        .map_err(|e| format!("WebSocket handshake with {url}: {e}"))?;
        Ok(Client {
            ws,
            call_ids: CallIds::default(),
            unsent_reply: None,
            large_frame_at: None,
        })
    }

    /// Sends an invoke without waiting for its answer; returns its callId.
    pub async fn send_invoke(
        &mut self,
        channel: &str,
        method: &str,
        args: Value,
    ) -> Result<u64, String> {
        let call_id = self.call_ids.next(channel);
        self.ws
            .send(Message::text(protocol::invoke_frame(
                channel, call_id, method, args,
            )))
            .await
            .map_err(|e| format!("send {method}: {e}"))?;
        Ok(call_id)
    }

    /// The next frame (pings are answered by tungstenite while reading; server → client
    /// invokes are answered here before they are returned).
    pub async fn recv(&mut self) -> Incoming {
        loop {
            if self.send_reply().await.is_err() {
                return Incoming::Closed(None);
            }
            match self.ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    if text.len() >= LARGE_FRAME {
                        self.large_frame_at = Some(Instant::now());
                    }
                    match classify(text) {
                        Incoming::Invoked(reply) => {
                            self.unsent_reply = Some(reply.frame.clone());
                            return match self.send_reply().await {
                                Ok(()) => Incoming::Invoked(reply),
                                Err(()) => Incoming::Closed(None),
                            };
                        }
                        other => return other,
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    return Incoming::Closed(frame.map(|f| u16::from(f.code)))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Incoming::Closed(None),
            }
        }
    }

    /// When the last text frame of [`LARGE_FRAME`] bytes or more arrived, before the harness
    /// parsed it.
    pub fn large_frame_received_at(&self) -> Option<Instant> {
        self.large_frame_at
    }

    /// Sends the pending reply to a server invoke, if any. Cancel-safe: the reply leaves
    /// `unsent_reply` only once queued in the socket (no await in between), and a flush cut
    /// short is finished by the socket's next write.
    async fn send_reply(&mut self) -> Result<(), ()> {
        let Some(frame) = &self.unsent_reply else {
            return Ok(());
        };
        let frame = Message::text(frame.clone());
        self.ws.feed(frame).await.map_err(|_| ())?;
        self.unsent_reply = None;
        self.ws.flush().await.map_err(|_| ())
    }

    /// Deletes the harness's own conversations on a server it did not start (`--url`),
    /// best effort: a failed delete only leaves a `load-…` conversation behind.
    pub async fn delete_conversations<'a>(&mut self, ids: impl IntoIterator<Item = &'a String>) {
        for id in ids {
            let _ = self
                .invoke(
                    AGENT_SERVER,
                    "deleteConversation",
                    serde_json::json!([id]),
                    |_| {},
                )
                .await;
        }
    }

    /// Invokes and waits for the answer; `other` sees every other frame meanwhile.
    pub async fn invoke(
        &mut self,
        channel: &str,
        method: &str,
        args: Value,
        mut other: impl FnMut(&str),
    ) -> Result<Value, String> {
        let fut = async {
            let id = self.send_invoke(channel, method, args).await?;
            loop {
                match self.recv().await {
                    Incoming::Answer {
                        channel: c,
                        call_id,
                        result,
                    } if call_id == id && c == channel => {
                        return result.map_err(|e| format!("{method}: {e}"))
                    }
                    Incoming::Answer { .. } | Incoming::Invoked(_) => {}
                    Incoming::Call(text) => other(&text),
                    Incoming::Closed(code) => {
                        return Err(format!("socket closed ({code:?}) during {method}"))
                    }
                }
            }
        };
        tokio::time::timeout(RPC_TIMEOUT, fut).await.map_err(|_| {
            format!(
                "no answer to {method} on {channel} within {} s",
                RPC_TIMEOUT.as_secs()
            )
        })?
    }

    /// `createConversation(name)`: the new id.
    pub async fn create_conversation(&mut self, name: &str) -> Result<String, String> {
        let v = self
            .invoke(
                AGENT_SERVER,
                "createConversation",
                json!([name, null]),
                |_| {},
            )
            .await?;
        v["conversationId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("createConversation answered {v}"))
    }

    /// `joinConversation({conversationId})`; `other` sees frames that arrive meanwhile.
    pub async fn join(&mut self, id: &str, other: impl FnMut(&str)) -> Result<Value, String> {
        self.invoke(
            AGENT_SERVER,
            "joinConversation",
            json!([{ "conversationId": id }]),
            other,
        )
        .await
    }

    /// `leaveConversation(id)`.
    pub async fn leave(&mut self, id: &str, other: impl FnMut(&str)) -> Result<Value, String> {
        self.invoke(AGENT_SERVER, "leaveConversation", json!([id]), other)
            .await
    }

    /// Closes the socket politely (best effort, bounded).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.ws.close(None)).await;
    }
}

/// Small buffers: tungstenite's defaults (128 KB to read, 128 KB to write) would cost the
/// harness a gigabyte at 10,000 clients. Large messages: `listConversations` of 100,000
/// conversations is one frame of about 17 MB, over tungstenite's 16 MB default.
pub fn lean_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
        .max_frame_size(Some(MAX_MESSAGE))
        .max_message_size(Some(MAX_MESSAGE))
}

/// Largest frame / message the harness accepts.
const MAX_MESSAGE: usize = 256 << 20;

/// Answers and invokes are parsed; everything else stays text. Both servers write envelopes
/// as `{"name":…,"message":{"type":"<kind>"…`, so the kind is found without parsing; any
/// other layout falls back to a full parse.
pub fn classify(text: Utf8Bytes) -> Incoming {
    const MARK: &str = "\"message\":{\"type\":\"";
    let kind_at = text.as_str().find(MARK).map(|i| i + MARK.len());
    let is_answer = match kind_at {
        Some(i) => text.as_str()[i..].starts_with("invoke"),
        None => true,
    };
    if !is_answer {
        return Incoming::Call(text);
    }
    let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else {
        return Incoming::Call(text);
    };
    if let Some(reply) = invokes::reply_to(&v) {
        return Incoming::Invoked(reply);
    }
    match protocol::answer_id(&v).map(|(channel, call_id)| (channel.to_string(), call_id)) {
        Some((channel, call_id)) => Incoming::Answer {
            channel,
            call_id,
            result: protocol::answer_result(v),
        },
        None => Incoming::Call(text),
    }
}

/// The turn number in a `notify … commandComplete` frame for one of our submits (we send
/// clientRequestId `lt<turn>`), or `None` for any other frame.
pub fn completed_turn(frame: &str) -> Option<usize> {
    if !frame.contains("\"commandComplete\"") {
        return None;
    }
    const KEY: &str = "\"clientRequestId\":\"lt";
    let at = frame.find(KEY)? + KEY.len();
    let digits: &str = &frame[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}
