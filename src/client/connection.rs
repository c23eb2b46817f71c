//! [`Connection`]: one WebSocket to the server, multiplexing every channel. A writer task
//! sends frames in order; a reader task correlates `invokeResult` / `invokeError` with the
//! waiting call by (channel, callId), forwards server → client calls as [`Event`]s, records
//! completions for [`Connection::wait_command`] and fails every waiting call when the socket
//! closes.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_tungstenite::tungstenite::Message;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::{ClientError, ClientIo, ClientResult, CommandOutcome, Endpoint, Event};

/// Completions remembered for [`Connection::wait_command`] (oldest dropped first).
const COMPLETIONS_KEPT: usize = 1024;

/// Completions by request id, oldest first in `order`.
#[derive(Default)]
struct Completions {
    /// requestId → outcome.
    outcomes: HashMap<String, CommandOutcome>,
    /// Insertion order, for the bound.
    order: VecDeque<String>,
}

/// Where the answer to one outstanding invoke goes.
type Waiter = oneshot::Sender<ClientResult<Value>>;

/// State shared by the connection handle and its reader task.
struct Shared {
    /// Outstanding invokes by (channel, callId): callIds are per channel and direction.
    pending: Mutex<HashMap<(String, u64), Waiter>>,
    /// Next callId per channel.
    next_call: Mutex<HashMap<String, u64>>,
    /// Completions seen, kept until `wait_command` takes them (bounded).
    completions: Mutex<Completions>,
    /// Wakes `wait_command` callers when a completion arrives or the socket closes.
    completed: Notify,
    /// Set when the reader saw the socket close.
    closed: AtomicBool,
}

/// One WebSocket to a Roundtable (or TypeAgent) server.
pub struct Connection {
    /// Waiters, callId counters and completions, shared with the reader task.
    shared: Arc<Shared>,
    /// Frames for the writer task (unbounded: a client sends little).
    out: mpsc::UnboundedSender<Message>,
    /// Server → client calls, until [`Connection::take_events`] takes them.
    events: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    /// The URL connected to.
    url: String,
}

impl Connection {
    /// Connects (5 s timeout) and starts the reader and writer tasks on the current runtime.
    pub async fn connect(url: &str) -> ClientResult<Connection> {
        Connection::connect_to(&Endpoint::new(url)).await
    }

    /// Connects to `endpoint`, sending its token as `Authorization: Bearer` (never in the
    /// URL, where other users see it in `ps`).
    pub async fn connect_to(endpoint: &Endpoint) -> ClientResult<Connection> {
        let ws = handshake(endpoint).await?;
        let (mut sink, stream) = ws.split();
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Message>();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            next_call: Mutex::new(HashMap::new()),
            completions: Mutex::new(Completions::default()),
            completed: Notify::new(),
            closed: AtomicBool::new(false),
        });
        tokio::spawn(async move {
            while let Some(msg) = out_rx.recv().await {
                let close = matches!(msg, Message::Close(_));
                if sink.send(msg).await.is_err() || close {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        tokio::spawn(read_frames(stream, shared.clone(), ev_tx, out_tx.clone()));
        Ok(Connection {
            shared,
            out: out_tx,
            events: Mutex::new(Some(ev_rx)),
            url: endpoint.url.clone(),
        })
    }

    /// The URL connected to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The stream of server → client calls; can be taken once.
    pub fn take_events(&self) -> Option<mpsc::UnboundedReceiver<Event>> {
        self.events.lock().unwrap().take()
    }

    /// True once the socket is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// The next callId on `channel` (callIds are counted per channel).
    fn next_call_id(&self, channel: &str) -> u64 {
        let mut ids = self.shared.next_call.lock().unwrap();
        let id = ids.entry(channel.to_string()).or_insert(0);
        let call_id = *id;
        *id += 1;
        call_id
    }

    /// Invokes `method` on `channel` and waits for its answer (`Null` for void).
    pub async fn invoke(
        &self,
        channel: &str,
        method: &str,
        args: Vec<Value>,
    ) -> ClientResult<Value> {
        if self.is_closed() {
            return Err(ClientError::Disconnected);
        }
        let call_id = self.next_call_id(channel);
        let (tx, rx) = oneshot::channel();
        self.shared
            .pending
            .lock()
            .unwrap()
            .insert((channel.to_string(), call_id), tx);
        let frame = json!({"name": channel, "message": {"type": "invoke", "callId": call_id, "name": method, "args": args}});
        if self.out.send(Message::text(frame.to_string())).is_err() {
            self.shared
                .pending
                .lock()
                .unwrap()
                .remove(&(channel.to_string(), call_id));
            return Err(ClientError::Disconnected);
        }
        rx.await.unwrap_or(Err(ClientError::Disconnected))
    }

    /// Waits for `commandComplete` / `requestCancelled` of `request_id` (even if it came first).
    pub async fn wait_command(&self, request_id: &str) -> ClientResult<CommandOutcome> {
        loop {
            let notified = self.shared.completed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(outcome) = self
                .shared
                .completions
                .lock()
                .unwrap()
                .outcomes
                .remove(request_id)
            {
                return Ok(outcome);
            }
            if self.is_closed() {
                return Err(ClientError::Disconnected);
            }
            notified.await;
        }
    }

    /// Sends a `call` (never answered).
    pub fn call(&self, channel: &str, method: &str, args: Vec<Value>) {
        let call_id = self.next_call_id(channel);
        let frame = json!({"name": channel, "message": {"type": "call", "callId": call_id, "name": method, "args": args}});
        let _ = self.out.send(Message::text(frame.to_string()));
    }

    /// Closes the socket politely.
    pub fn close(&self) {
        let _ = self.out.send(Message::Close(None));
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.out.send(Message::Close(None));
    }
}

/// `connection refused` instead of the OS's long text.
fn short_error(e: &str) -> String {
    if e.contains("Connection refused") {
        "connection refused".into()
    } else {
        e.to_string()
    }
}

/// The socket this client talks on.
type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the WebSocket to `endpoint` (5 s timeout), with its token if any; a 401 is
/// [`ClientError::Unauthorized`], any other failure [`ClientError::Unreachable`].
async fn handshake(endpoint: &Endpoint) -> ClientResult<Socket> {
    let unreachable = |reason: String| ClientError::Unreachable {
        url: endpoint.shown(),
        reason,
    };
    let mut request = endpoint
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| unreachable(e.to_string()))?;
    if let Some(token) = &endpoint.token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| unreachable("the token is not a valid header value".into()))?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let (ws, _) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .map_err(|_| unreachable("no answer within 5 s".into()))?
    .map_err(|e| match e {
        tokio_tungstenite::tungstenite::Error::Http(response)
            if response.status().as_u16() == 401 =>
        {
            ClientError::Unauthorized {
                url: endpoint.shown(),
            }
        }
        e => unreachable(short_error(&e.to_string())),
    })?;
    Ok(ws)
}

/// The reader task: every frame to [`handle_frame`] until the socket closes; then every
/// waiting call fails, completion waiters wake, and [`Event::Closed`] is the last event.
async fn read_frames(
    mut stream: futures_util::stream::SplitStream<Socket>,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Event>,
    replies: mpsc::UnboundedSender<Message>,
) {
    let mut close = (None, String::new());
    while let Some(item) = stream.next().await {
        let text = match item {
            Ok(Message::Text(t)) => t.to_string(),
            Ok(Message::Binary(b)) => String::from_utf8_lossy(&b).to_string(),
            Ok(Message::Close(frame)) => {
                if let Some(f) = frame {
                    close = (Some(u16::from(f.code)), f.reason.to_string());
                }
                break;
            }
            Ok(_) => continue,
            Err(e) => {
                close.1 = e.to_string();
                break;
            }
        };
        handle_frame(&shared, &text, &events, &replies);
    }
    shared.closed.store(true, Ordering::SeqCst);
    let pending: Vec<_> = shared.pending.lock().unwrap().drain().collect();
    for (_, tx) in pending {
        let _ = tx.send(Err(ClientError::Disconnected));
    }
    shared.completed.notify_waiters();
    let _ = events.send(Event::Closed {
        code: close.0,
        reason: close.1,
    });
}

/// One frame from the server: an answer, a server → client call, or an invoke this client
/// does not host.
fn handle_frame(
    shared: &Shared,
    text: &str,
    events: &mpsc::UnboundedSender<Event>,
    replies: &mpsc::UnboundedSender<Message>,
) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        log::debug!("client: dropped a non-JSON frame");
        return;
    };
    let (Some(channel), Some(message)) = (frame["name"].as_str(), frame.get("message")) else {
        return;
    };
    let call_id = message["callId"].as_u64();
    match message["type"].as_str() {
        // An `invokeError` may also carry `cancelled`, `errorMarkdown` and `stack`
        // (agent-rpc): the error text is what a caller acts on; the rest is ignored.
        Some(kind @ ("invokeResult" | "invokeError")) => {
            let Some(call_id) = call_id else { return };
            let Some(tx) = shared
                .pending
                .lock()
                .unwrap()
                .remove(&(channel.to_string(), call_id))
            else {
                log::debug!("client: answer to unknown callId {call_id} on {channel}");
                return;
            };
            let result = if kind == "invokeResult" {
                Ok(message.get("result").cloned().unwrap_or(Value::Null))
            } else {
                Err(ClientError::from_rpc(
                    message["error"].as_str().unwrap_or("unknown error"),
                ))
            };
            let _ = tx.send(result);
        }
        Some("call") => {
            let Some(conversation_id) = channel.strip_prefix("clientio:") else {
                return;
            };
            let method = message["name"].as_str().unwrap_or_default();
            let args = message["args"].as_array().map_or(&[][..], Vec::as_slice);
            let call = ClientIo::decode(method, args).unwrap_or_else(|e| {
                log::debug!("client: {method} call that does not decode: {e}");
                ClientIo::Other {
                    method: method.to_string(),
                    args: args.to_vec(),
                }
            });
            // Queue the event before recording the completion: whoever the completion wakes
            // (the CLI's wait) drains the queued output first, so a command's last output is
            // never printed after the prompt that follows it.
            let completion = completion_of(&call);
            let _ = events.send(Event::Call {
                conversation_id: conversation_id.to_string(),
                call,
            });
            if let Some((id, outcome)) = completion {
                record_completion(shared, id, outcome);
            }
        }
        Some("invoke") => {
            // We host no client-side methods: answer like TypeAgent's Android client does.
            if let (Some(call_id), Some(name)) = (call_id, message["name"].as_str()) {
                let answer = json!({"name": channel, "message": {"type": "invokeError", "callId": call_id,
                    "error": format!("Unsupported client RPC method: {name}")}});
                let _ = replies.send(Message::text(answer.to_string()));
            }
        }
        _ => {}
    }
}

/// The request id and outcome a clientio call reports (`commandComplete`, `requestCancelled`).
fn completion_of(call: &ClientIo) -> Option<(String, CommandOutcome)> {
    match call {
        ClientIo::Notify(n) if n.event == "commandComplete" => {
            let id = n.request_id.clone()?;
            Some((id, CommandOutcome::Completed(n.data["result"].clone())))
        }
        ClientIo::RequestCancelled { request_id, reason } => Some((
            request_id.clone(),
            CommandOutcome::Cancelled(reason.clone()),
        )),
        _ => None,
    }
}

/// Books a completion and wakes the waiters. The first outcome of a request wins: a running
/// request that is cancelled gets `requestCancelled`, then `commandComplete` with
/// `{cancelled: true}`, and its waiter is told it was cancelled (as TypeAgent's client
/// library settles on `requestCancelled` and parks the later completion).
fn record_completion(shared: &Shared, id: String, outcome: CommandOutcome) {
    let mut book = shared.completions.lock().unwrap();
    if book.outcomes.contains_key(&id) {
        return;
    }
    book.outcomes.insert(id.clone(), outcome);
    book.order.push_back(id);
    while book.order.len() > COMPLETIONS_KEPT {
        if let Some(old) = book.order.pop_front() {
            book.outcomes.remove(&old);
        }
    }
    drop(book);
    shared.completed.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            pending: Mutex::new(HashMap::new()),
            next_call: Mutex::new(HashMap::new()),
            completions: Mutex::new(Completions::default()),
            completed: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// An `invokeError` with agent-rpc's optional `cancelled`, `errorMarkdown` and `stack`
    /// answers its call with the error text.
    #[test]
    fn invoke_errors_with_extra_fields_answer_their_call() {
        let shared = shared();
        let (tx, mut rx) = oneshot::channel();
        shared
            .pending
            .lock()
            .unwrap()
            .insert(("dispatcher:c".into(), 3), tx);
        let (events, _events_rx) = mpsc::unbounded_channel();
        let (replies, _replies_rx) = mpsc::unbounded_channel();
        let frame = json!({"name": "dispatcher:c", "message": {"type": "invokeError", "callId": 3,
            "error": "Request cancelled", "cancelled": true, "errorMarkdown": "**cancelled**",
            "stack": "Error: Request cancelled\n    at x"}});
        handle_frame(&shared, &frame.to_string(), &events, &replies);
        assert_eq!(
            rx.try_recv().unwrap(),
            Err(ClientError::Rpc("Request cancelled".into()))
        );
    }

    /// A cancelled running request: `requestCancelled` decides the outcome, the
    /// `commandComplete` with `{cancelled: true}` after it does not replace it; a completed
    /// one's outcome is the `result` of its `commandComplete`.
    #[test]
    fn the_first_outcome_of_a_request_wins() {
        let shared = shared();
        let (events, _events_rx) = mpsc::unbounded_channel();
        let (replies, _replies_rx) = mpsc::unbounded_channel();
        let call = |args: Value| {
            json!({"name": "clientio:c", "message": {"type": "call", "callId": 0, "name": args[0], "args": args[1]}})
                .to_string()
        };
        let id = json!({"connectionId": "0", "requestId": "r1"});
        handle_frame(
            &shared,
            &call(json!(["requestCancelled", ["r1", "user", 4]])),
            &events,
            &replies,
        );
        let complete =
            json!([id, "commandComplete", {"result": {"cancelled": true}}, "system", null, null]);
        handle_frame(
            &shared,
            &call(json!(["notify", complete])),
            &events,
            &replies,
        );
        let done = json!([{"requestId": "r2"}, "commandComplete", {"result": {"metrics": {"actions": []}}}, "system", null, null]);
        handle_frame(&shared, &call(json!(["notify", done])), &events, &replies);
        let book = shared.completions.lock().unwrap();
        assert_eq!(
            book.outcomes["r1"],
            CommandOutcome::Cancelled("user".into())
        );
        assert_eq!(
            book.outcomes["r2"],
            CommandOutcome::Completed(json!({"metrics": {"actions": []}}))
        );
    }
}
