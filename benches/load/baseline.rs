//! The baseline: a minimal actor-free WebSocket broadcast server on tokio-tungstenite, the
//! "close to the limit" reference for `fanout`, `rooms` and `churn`. No persistence, no queue,
//! no routing beyond a room per conversation id, no backpressure (unbounded per-socket queues).
//! It runs as a child process (`<bench executable> __baseline`) so its RSS is measured like
//! Roundtable's and its sockets do not share the harness's open-file limit.
//!
//! It speaks just enough protocol: `createConversation` (a fresh UUID), `joinConversation`
//! (remember the socket in that conversation's room; the others get the join notice),
//! `leaveConversation` (the others get the leave notice), and `submitCommand`, answered `{ok:true, entry}` and turned at once
//! into the same seven `clientio` calls Roundtable sends every member for an echo turn
//! (`requestQueued`, `requestStarted`, `setUserRequest`, `setDisplayInfo`, `appendDisplay`
//! with `echo: <text>`, `notify commandComplete` with its metrics and trace id, and the one
//! coalesced `queueStateChanged`), each serialized once and spliced with the member's own
//! callId, so the harness measures both servers identically.
//!
//! With `--durable DIR` it is the durable baseline: a turn's last two calls (`notify
//! commandComplete` and the final `queueStateChanged`) are held back until its four display
//! log entries are on disk, written and fsynced with group commit by one writer thread
//! (`durable.rs`), as Roundtable holds back `commandComplete` until its `command-result` is
//! durable. The submit's answer and the first five calls go out at once. It answers every
//! command with an echo: `--command` changes the text, not the work.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, OnceLock};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::durable::{self, Pending};
use crate::support::protocol;

/// One joined socket in a room.
struct Member {
    socket: u64,
    connection_id: u64,
    /// Next callId on this member's `clientio` channel.
    next_call: u64,
    tx: mpsc::UnboundedSender<Message>,
}

/// One conversation's sockets.
#[derive(Default)]
struct Room {
    members: Vec<Member>,
    next_connection: u64,
    version: u64,
}

/// Calls of a turn: (method, serialized args).
type Calls = Vec<(&'static str, String)>;

#[derive(Default)]
struct State {
    rooms: Mutex<HashMap<String, Room>>,
    next_socket: AtomicU64,
    /// The durable baseline's log writer (unset: the plain baseline). Its turns carry the
    /// calls to send once they are durable.
    durable: OnceLock<std_mpsc::Sender<Pending<Calls>>>,
}

/// `__baseline [--durable DIR]`: the directory for the durable baseline's logs.
fn durable_dir() -> Result<Option<PathBuf>, String> {
    let args: Vec<String> = std::env::args().skip(2).collect();
    match args.as_slice() {
        [] => Ok(None),
        [flag, dir] if flag == "--durable" => Ok(Some(PathBuf::from(dir))),
        other => Err(format!("usage: __baseline [--durable DIR] (got {other:?})")),
    }
}

/// Starts the durable log writer; durable turns get their held-back calls from its thread.
fn start_durable(state: &Arc<State>, dir: &std::path::Path) -> Result<(), String> {
    let rooms = state.clone();
    let writer = durable::spawn(dir, move |batch: Vec<Pending<Calls>>, outcome| {
        if let Err(e) = outcome {
            eprintln!("baseline: durable log write failed: {e}");
        }
        let mut rooms = rooms.rooms.lock().expect("rooms lock");
        for turn in batch {
            // A room everyone left has nobody to tell.
            if let Some(room) = rooms.get_mut(&turn.conversation) {
                broadcast(room, &turn.conversation, &turn.then);
            }
        }
    })
    .map_err(|e| format!("cannot start the log writer in {}: {e}", dir.display()))?;
    let _ = state.durable.set(writer);
    Ok(())
}

/// Runs the baseline until killed; prints `listening on ws://127.0.0.1:<port>/` on stderr.
pub fn main() -> ExitCode {
    let state = Arc::new(State::default());
    let started = durable_dir().and_then(|dir| match dir {
        Some(dir) => start_durable(&state, &dir),
        None => Ok(()),
    });
    if let Err(e) = started {
        eprintln!("baseline: {e}");
        return ExitCode::FAILURE;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("baseline: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("baseline: cannot bind: {e}");
                return ExitCode::FAILURE;
            }
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        eprintln!("baseline listening on ws://127.0.0.1:{port}/");
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, state.clone()));
                }
                Err(e) => {
                    // Out of file descriptors: wait a little rather than spin.
                    eprintln!("baseline: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    })
}

async fn connection(stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    // Lean buffers (4 KB read, 8 KB write batches) instead of tungstenite's 128 KB defaults.
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(8192);
    let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
        return;
    };
    let socket = state.next_socket.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            if sink.feed(first).await.is_err() {
                return;
            }
            while let Ok(more) = rx.try_recv() {
                if sink.feed(more).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    let mut joined: Vec<String> = Vec::new();
    while let Some(Ok(msg)) = source.next().await {
        match msg {
            Message::Text(text) => on_text(&state, socket, &tx, &mut joined, text.as_str()),
            Message::Close(_) => break,
            _ => {}
        }
    }
    for id in joined {
        leave(&state, socket, &id);
    }
    drop(tx);
    let _ = writer.await;
}

fn on_text(
    state: &State,
    socket: u64,
    tx: &mpsc::UnboundedSender<Message>,
    joined: &mut Vec<String>,
    text: &str,
) {
    let Ok(Value::Object(envelope)) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let (Some(Value::String(channel)), Some(message)) =
        (envelope.get("name"), envelope.get("message"))
    else {
        return;
    };
    if message["type"] != "invoke" {
        return;
    }
    let Some(call_id) = message["callId"].as_u64() else {
        return;
    };
    let method = message["name"].as_str().unwrap_or_default();
    let args = &message["args"];
    let answer = |result: Result<Value, String>| {
        let msg = match result {
            Ok(Value::Null) => json!({"type": "invokeResult", "callId": call_id}),
            Ok(v) => json!({"type": "invokeResult", "callId": call_id, "result": v}),
            Err(e) => json!({"type": "invokeError", "callId": call_id, "error": e}),
        };
        let _ = tx.send(Message::text(
            json!({"name": channel, "message": msg}).to_string(),
        ));
    };
    if channel == protocol::AGENT_SERVER {
        match method {
            "createConversation" => {
                let id = uuid::Uuid::new_v4().to_string();
                answer(Ok(
                    json!({"conversationId": id, "name": args[0], "clientCount": 0, "createdAt": "2026-11-01T00:00:00.000Z", "messageCount": 0}),
                ));
            }
            "joinConversation" => {
                let Some(id) = args[0]["conversationId"].as_str() else {
                    return answer(Err("Conversation not found: undefined".into()));
                };
                if joined.iter().any(|j| j == id) {
                    return answer(Err(format!("Already joined conversation '{id}'. Call leaveConversation() before joining again.")));
                }
                let connection_id = join(state, socket, id, tx.clone());
                joined.push(id.to_string());
                answer(Ok(json!({
                    "connectionId": connection_id.to_string(),
                    "conversationId": id,
                    "name": "",
                    "pendingInteractions": []
                })));
            }
            "leaveConversation" => {
                let id = args[0].as_str().unwrap_or_default();
                match joined.iter().position(|j| j == id) {
                    Some(i) => {
                        joined.remove(i);
                        leave(state, socket, id);
                        answer(Ok(Value::Null));
                    }
                    None => answer(Err(format!("Not joined to conversation: {id}"))),
                }
            }
            "listConversations" => answer(Ok(json!([]))),
            other => answer(Err(format!("No invoke handler {other}"))),
        }
        return;
    }
    let Some(id) = channel.strip_prefix(protocol::DISPATCHER_PREFIX) else {
        return;
    };
    if !joined.iter().any(|j| j == id) {
        return;
    }
    match method {
        "submitCommand" => {
            let text = args[0].as_str().unwrap_or_default();
            answer(Ok(submit(state, socket, id, text, &args[3])));
        }
        other => answer(Err(format!("No invoke handler {other}"))),
    }
}

/// Adds the socket to the room (the others get the join notice, as in Roundtable).
fn join(state: &State, socket: u64, id: &str, tx: mpsc::UnboundedSender<Message>) -> u64 {
    let mut rooms = state.rooms.lock().expect("rooms lock");
    let room = rooms.entry(id.to_string()).or_default();
    broadcast(room, id, &[("appendDisplay", notice(JOIN_NOTICE))]);
    let connection_id = room.next_connection;
    room.next_connection += 1;
    room.members.push(Member {
        socket,
        connection_id,
        next_call: 0,
        tx,
    });
    connection_id
}

/// Removes the socket from the room (the others get the leave notice, as in Roundtable).
fn leave(state: &State, socket: u64, id: &str) {
    let mut rooms = state.rooms.lock().expect("rooms lock");
    if let Some(room) = rooms.get_mut(id) {
        room.members.retain(|m| m.socket != socket);
        if room.members.is_empty() {
            rooms.remove(id);
        } else {
            broadcast(room, id, &[("appendDisplay", notice(LEAVE_NOTICE))]);
        }
    }
}

const JOIN_NOTICE: &str = "[A new client has joined this conversation.]";
const LEAVE_NOTICE: &str = "[A client has left this conversation.]";

/// The system notice's arguments, as Roundtable sends them.
fn notice(text: &str) -> String {
    json!([{
        "message": {"type": "text", "content": text, "kind": "status"},
        "requestId": {"requestId": "system"},
        "source": "system"
    }, "block"])
    .to_string()
}

/// Answers a submit and broadcasts the echo turn's seven calls to the room (the durable
/// baseline: the first five, and the last two once the turn's entries are durable).
fn submit(state: &State, socket: u64, id: &str, text: &str, client_request_id: &Value) -> Value {
    let mut rooms = state.rooms.lock().expect("rooms lock");
    let Some(room) = rooms.get_mut(id) else {
        return json!({"ok": false, "error": "not joined"});
    };
    let origin = room
        .members
        .iter()
        .find(|m| m.socket == socket)
        .map_or(0, |m| m.connection_id)
        .to_string();
    let request_id = uuid::Uuid::new_v4().to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut id_obj = json!({"connectionId": origin, "requestId": request_id});
    let mut entry = json!({
        "requestId": request_id, "originatorConnectionId": origin, "text": text,
        "submittedAt": now, "state": "queued", "attachmentCount": 0
    });
    if !client_request_id.is_null() {
        id_obj["clientRequestId"] = client_request_id.clone();
        entry["clientRequestId"] = client_request_id.clone();
    }
    let v = room.version;
    room.version += 3;
    let mut calls = turn_calls(&mut entry, &id_obj, text, v);
    match state.durable.get() {
        None => broadcast(room, id, &calls),
        Some(writer) => {
            let held = calls.split_off(5);
            broadcast(room, id, &calls);
            let _ = writer.send(Pending {
                conversation: id.to_string(),
                entries: log_entries(&id_obj, text),
                then: held,
            });
        }
    }
    json!({"ok": true, "entry": entry})
}

/// The seven calls of an echo turn, as Roundtable sends them; `entry` goes in queued and
/// comes out running.
fn turn_calls(entry: &mut Value, id_obj: &Value, text: &str, v: u64) -> Calls {
    let queued = entry.clone();
    entry["state"] = json!("running");
    entry["startedAt"] = entry["submittedAt"].clone();
    let result = json!({"result": {
        "metrics": {"parse": {"duration": 0.01}, "actions": [{"duration": 0.01}], "duration": 0.05},
        "traceId": uuid::Uuid::new_v4().simple().to_string(),
    }});
    vec![
        ("requestQueued", json!([queued, v + 1]).to_string()),
        ("requestStarted", json!([entry, v + 2]).to_string()),
        ("setUserRequest", json!([id_obj, text]).to_string()),
        (
            "setDisplayInfo",
            json!([id_obj, "dispatcher", null, ["request"]]).to_string(),
        ),
        (
            "appendDisplay",
            json!([{"message": {"content": format!("echo: {text}"), "type": "markdown"}, "requestId": id_obj, "source": "chat"}, "block"]).to_string(),
        ),
        (
            "notify",
            json!([id_obj, "commandComplete", result, "system", null, null]).to_string(),
        ),
        (
            "queueStateChanged",
            json!([{"paused": false, "queued": [], "running": null, "version": v + 3}])
                .to_string(),
        ),
    ]
}

/// The display-log entries Roundtable writes for an echo turn.
pub fn log_entries(id_obj: &Value, text: &str) -> Vec<serde_json::Map<String, Value>> {
    [
        json!({"type": "user-request", "requestId": id_obj, "command": text}),
        json!({"type": "set-display-info", "requestId": id_obj, "source": "dispatcher", "action": ["request"]}),
        json!({
            "type": "append-display",
            "message": {"message": {"content": format!("echo: {text}"), "type": "markdown"}, "requestId": id_obj, "source": "chat"},
            "mode": "block"
        }),
        json!({"type": "command-result", "requestId": id_obj, "metrics": {"parse": {"duration": 0.01}, "actions": [], "duration": 0.05}}),
    ]
    .into_iter()
    .filter_map(|e| match e {
        Value::Object(m) => Some(m),
        _ => None,
    })
    .collect()
}

/// Sends each call to every member, splicing the member's callId into the shared text.
fn broadcast(room: &mut Room, id: &str, calls: &[(&str, String)]) {
    let channel = protocol::clientio(id);
    for m in &mut room.members {
        for (method, args) in calls {
            let frame = format!(
                "{{\"name\":\"{channel}\",\"message\":{{\"type\":\"call\",\"callId\":{},\"name\":\"{method}\",\"args\":{args}}}}}",
                m.next_call
            );
            m.next_call += 1;
            let _ = m.tx.send(Message::text(frame));
        }
    }
}
