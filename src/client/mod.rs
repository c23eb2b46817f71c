//! A Rust client for the agent-server protocol: one WebSocket, many channels. Used by the
//! `roundtable` CLI, the tests and the load harness; it knows nothing of the server's
//! internals and speaks only the wire protocol (`shared/reference/typeagent-protocol.md`).
//!
//! [`Connection`] multiplexes the `agent-server`, `dispatcher:<id>` and `clientio:<id>`
//! channels, keeps one callId counter per channel, correlates answers, and turns
//! `invokeError` texts into [`ClientError`]s (`Conversation not found` is recognised by its
//! prefix, as TypeAgent's clients do). Server → client calls arrive as [`Event`]s;
//! `commandComplete` / `requestCancelled` are also recorded so [`Connection::submit_and_wait`]
//! sees a completion that overtook the submit's answer.
//!
//! The conversation helpers of reference section 7 live in [`conversation`].

pub mod conversation;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_tungstenite::tungstenite::Message;

/// Completions remembered for `submit_and_wait` (oldest dropped first).
const COMPLETIONS_KEPT: usize = 1024;

/// Errors of the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the URL.
    #[error(
        "cannot reach the Roundtable server at {url} ({reason}); start it with `roundtable serve`"
    )]
    Unreachable {
        /// The URL tried.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server's `Conversation not found: <id>` (the full text).
    #[error("{0}")]
    ConversationNotFound(String),
    /// Any other `invokeError` text, as the server sent it.
    #[error("{0}")]
    Rpc(String),
    /// The socket closed before the answer came.
    #[error("the connection to the Roundtable server was lost")]
    Disconnected,
    /// The server sent something this client cannot read.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// Builds the error for an `invokeError` text.
    pub fn from_rpc(text: &str) -> ClientError {
        if text.trim_start().starts_with("Conversation not found") {
            ClientError::ConversationNotFound(text.to_string())
        } else {
            ClientError::Rpc(text.to_string())
        }
    }

    /// True for the error clients fall back on.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::ConversationNotFound(_))
    }
}

/// Result type of the client.
pub type ClientResult<T> = Result<T, ClientError>;

/// Something the server sent that is not an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A `call` on `clientio:<conversation_id>`.
    Call {
        /// The conversation.
        conversation_id: String,
        /// Method (`appendDisplay`, `notify`, …).
        method: String,
        /// Arguments.
        args: Vec<Value>,
    },
    /// The socket closed (code and reason when the server sent a close frame).
    Closed {
        /// Close code, if any.
        code: Option<u16>,
        /// Close reason.
        reason: String,
    },
}

/// How a submitted command ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// `commandComplete` with its `CommandResult` (or null).
    Completed(Value),
    /// `requestCancelled` with its reason.
    Cancelled(String),
}

/// `ConversationInfo` as the server sends it.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfo {
    /// UUID.
    pub conversation_id: String,
    /// Name as stored.
    pub name: String,
    /// Joined clients.
    #[serde(default)]
    pub client_count: u64,
    /// ISO-8601.
    #[serde(default)]
    pub created_at: String,
    /// `user-request` entries.
    #[serde(default)]
    pub message_count: u64,
}

/// `JoinConversationResult`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinResult {
    /// This client's connection id in the conversation.
    pub connection_id: String,
    /// The conversation joined.
    pub conversation_id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Questions waiting for an answer.
    #[serde(default)]
    pub pending_interactions: Vec<Value>,
    /// Present while the queue is busy.
    #[serde(default)]
    pub queue_snapshot: Option<Value>,
}

/// `{conversation, score}` from `findConversations`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConversationMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1.
    pub score: f64,
}

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
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Message>,
    events: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    url: String,
}

/// `ws://127.0.0.1:<port>/` (TypeAgent clients say `localhost`; we avoid its IPv6-first lookup).
pub fn url_for_port(port: u16) -> String {
    format!("ws://127.0.0.1:{port}/")
}

impl Connection {
    /// Connects (5 s timeout) and starts the reader and writer tasks on the current runtime.
    pub async fn connect(url: &str) -> ClientResult<Connection> {
        let unreachable = |reason: String| ClientError::Unreachable {
            url: url.to_string(),
            reason,
        };
        let (ws, _) = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(url),
        )
        .await
        .map_err(|_| unreachable("no answer within 5 s".into()))?
        .map_err(|e| unreachable(short_error(&e.to_string())))?;
        let (mut sink, mut stream) = ws.split();
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
        let reader_shared = shared.clone();
        let reply_tx = out_tx.clone();
        tokio::spawn(async move {
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
                handle_frame(&reader_shared, &text, &ev_tx, &reply_tx);
            }
            reader_shared.closed.store(true, Ordering::SeqCst);
            let pending: Vec<_> = reader_shared.pending.lock().unwrap().drain().collect();
            for (_, tx) in pending {
                let _ = tx.send(Err(ClientError::Disconnected));
            }
            reader_shared.completed.notify_waiters();
            let _ = ev_tx.send(Event::Closed {
                code: close.0,
                reason: close.1,
            });
        });
        Ok(Connection {
            shared,
            out: out_tx,
            events: Mutex::new(Some(ev_rx)),
            url: url.to_string(),
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

    // ---- agent-server ------------------------------------------------------------------

    /// `listConversations(filter)`.
    pub async fn list_conversations(
        &self,
        filter: Option<&str>,
    ) -> ClientResult<Vec<ConversationInfo>> {
        let v = self
            .invoke("agent-server", "listConversations", vec![json!(filter)])
            .await?;
        parse(v)
    }

    /// `createConversation(name)` with the default (`error`) collision behaviour.
    pub async fn create_conversation(&self, name: &str) -> ClientResult<ConversationInfo> {
        let v = self
            .invoke(
                "agent-server",
                "createConversation",
                vec![json!(name), Value::Null],
            )
            .await?;
        parse(v)
    }

    /// `renameConversation(id, newName)`.
    pub async fn rename_conversation(&self, id: &str, new_name: &str) -> ClientResult<()> {
        self.invoke(
            "agent-server",
            "renameConversation",
            vec![json!(id), json!(new_name), Value::Null],
        )
        .await
        .map(|_| ())
    }

    /// `deleteConversation(id)`.
    pub async fn delete_conversation(&self, id: &str) -> ClientResult<()> {
        self.invoke("agent-server", "deleteConversation", vec![json!(id)])
            .await
            .map(|_| ())
    }

    /// `findConversations(query, maxMatches)`.
    pub async fn find_conversations(
        &self,
        query: &str,
        max: Option<u64>,
    ) -> ClientResult<Vec<ConversationMatch>> {
        parse(
            self.invoke(
                "agent-server",
                "findConversations",
                vec![json!(query), json!(max)],
            )
            .await?,
        )
    }

    /// `searchConversationContent(query, maxMatches)`.
    pub async fn search_conversation_content(
        &self,
        query: &str,
        max: Option<u64>,
    ) -> ClientResult<Vec<Value>> {
        parse(
            self.invoke(
                "agent-server",
                "searchConversationContent",
                vec![json!(query), json!(max)],
            )
            .await?,
        )
    }

    /// `joinConversation({conversationId?, filter?})`.
    pub async fn join_conversation(
        &self,
        id: Option<&str>,
        filter: bool,
    ) -> ClientResult<JoinResult> {
        let mut options = json!({});
        if let Some(id) = id {
            options["conversationId"] = json!(id);
        }
        if filter {
            options["filter"] = json!(true);
        }
        parse(
            self.invoke("agent-server", "joinConversation", vec![options])
                .await?,
        )
    }

    /// `leaveConversation(id)`.
    pub async fn leave_conversation(&self, id: &str) -> ClientResult<()> {
        self.invoke("agent-server", "leaveConversation", vec![json!(id)])
            .await
            .map(|_| ())
    }

    /// `shutdown()`: answered, or the socket closes first (both count as done).
    pub async fn shutdown_server(&self) -> ClientResult<()> {
        match self.invoke("agent-server", "shutdown", vec![]).await {
            Ok(_) | Err(ClientError::Disconnected) => Ok(()),
            Err(e) => Err(e),
        }
    }

    // ---- dispatcher --------------------------------------------------------------------

    /// `submitCommand(command, null, null, clientRequestId, null)`: the ack's `requestId`.
    pub async fn submit_command(
        &self,
        conversation_id: &str,
        command: &str,
        client_request_id: &str,
    ) -> ClientResult<String> {
        let ack = self
            .invoke(
                &format!("dispatcher:{conversation_id}"),
                "submitCommand",
                vec![
                    json!(command),
                    Value::Null,
                    Value::Null,
                    json!(client_request_id),
                    Value::Null,
                ],
            )
            .await?;
        if ack["ok"] != true {
            return Err(ClientError::Rpc(format!(
                "the server did not take the command: {}",
                ack["error"].as_str().unwrap_or("unknown reason")
            )));
        }
        ack["entry"]["requestId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Protocol(format!("submit answer without requestId: {ack}")))
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

    /// submitCommand, then wait for its completion.
    pub async fn submit_and_wait(
        &self,
        conversation_id: &str,
        command: &str,
    ) -> ClientResult<CommandOutcome> {
        let request_id = self
            .submit_command(conversation_id, command, &uuid::Uuid::new_v4().to_string())
            .await?;
        self.wait_command(&request_id).await
    }

    /// `getDisplayHistory(afterSeq?)`.
    pub async fn display_history(
        &self,
        conversation_id: &str,
        after_seq: Option<i64>,
    ) -> ClientResult<Vec<Value>> {
        let args = after_seq.map(|s| vec![json!(s)]).unwrap_or_default();
        parse(
            self.invoke(
                &format!("dispatcher:{conversation_id}"),
                "getDisplayHistory",
                args,
            )
            .await?,
        )
    }

    /// `cancelCommand(requestId)`: the `kind`.
    pub async fn cancel_command(
        &self,
        conversation_id: &str,
        request_id: &str,
    ) -> ClientResult<String> {
        let v = self
            .invoke(
                &format!("dispatcher:{conversation_id}"),
                "cancelCommand",
                vec![json!(request_id)],
            )
            .await?;
        Ok(v["kind"].as_str().unwrap_or("").to_string())
    }

    /// `respondToInteraction({interactionId, type:"question", value})`.
    pub async fn respond_to_interaction(
        &self,
        conversation_id: &str,
        interaction_id: &str,
        value: usize,
    ) -> ClientResult<()> {
        self.invoke(
            &format!("dispatcher:{conversation_id}"),
            "respondToInteraction",
            vec![json!({"interactionId": interaction_id, "type": "question", "value": value})],
        )
        .await
        .map(|_| ())
    }

    /// `respondToChoice(choiceId, response)`.
    pub async fn respond_to_choice(
        &self,
        conversation_id: &str,
        choice_id: &str,
        response: Value,
    ) -> ClientResult<()> {
        self.invoke(
            &format!("dispatcher:{conversation_id}"),
            "respondToChoice",
            vec![json!(choice_id), response],
        )
        .await
        .map(|_| ())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.out.send(Message::Close(None));
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> ClientResult<T> {
    serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn short_error(e: &str) -> String {
    if e.contains("Connection refused") {
        "connection refused".into()
    } else {
        e.to_string()
    }
}

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
            let method = message["name"].as_str().unwrap_or_default().to_string();
            let args = message["args"].as_array().cloned().unwrap_or_default();
            // Queue the event before recording the completion: whoever the completion wakes
            // (the CLI's wait) drains the queued output first, so a command's last output is
            // never printed after the prompt that follows it.
            let completion = completion_of(&method, &args);
            let _ = events.send(Event::Call {
                conversation_id: conversation_id.to_string(),
                method,
                args,
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
fn completion_of(method: &str, args: &[Value]) -> Option<(String, CommandOutcome)> {
    match method {
        "notify" if args.get(1).and_then(Value::as_str) == Some("commandComplete") => {
            let id = match args.first() {
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => v["requestId"].as_str().map(str::to_string),
                None => None,
            };
            id.map(|id| {
                (
                    id,
                    CommandOutcome::Completed(
                        args.get(2).map_or(Value::Null, |d| d["result"].clone()),
                    ),
                )
            })
        }
        "requestCancelled" => args.first().and_then(Value::as_str).map(|id| {
            (
                id.to_string(),
                CommandOutcome::Cancelled(
                    args.get(1)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                ),
            )
        }),
        _ => None,
    }
}

/// Books a completion and wakes the waiters.
fn record_completion(shared: &Shared, id: String, outcome: CommandOutcome) {
    let mut book = shared.completions.lock().unwrap();
    if book.outcomes.insert(id.clone(), outcome).is_none() {
        book.order.push_back(id);
    }
    while book.order.len() > COMPLETIONS_KEPT {
        if let Some(old) = book.order.pop_front() {
            book.outcomes.remove(&old);
        }
    }
    drop(book);
    shared.completed.notify_waiters();
}
