//! The `Conversation` actor: one per loaded conversation. It owns the conversation's clients
//! (as [`Client`] actors), the connection-id counter that names them, the command queue (one
//! turn at a time, FIFO across clients), the display log (it assigns every `seq`), the chat
//! history the agent loop reads, pending interactions, and the timers (idle eviction, the
//! no-clients grace period, interaction time-outs).
//!
//! Who talks to it: the [`ConversationRegistry`]
//! (`Attach`, `Detach`, `Shutdown`, in the registry's mailbox order), the transport's
//! connections (`DispatcherInvoke` / `DispatcherCall` for the `dispatcher:<id>` channel), its
//! clients (`ClientLost`) and its own running turn (`TurnEvent`).
//!
//! # Implementation notes
//! Membership states:
//! - **Live** (started by the registry with a fresh `generation`): clients come and go.
//! - **Idle**: the last client left; the idle timer and the no-clients grace timer are armed.
//!   `Attach` disarms both (→ Live). The grace timer cancels queued work with reason
//!   `no_clients`. The idle timer sends `IdleExpired { generation, attaches_seen }` to the
//!   registry, which evicts only if nothing moved meanwhile; while work is queued or running
//!   the timer re-arms instead.
//! - **Stopping** after [`Shutdown`]: `Evicted`, `Deleted` (clients are told, their channels
//!   close) or `ServerStopping` (queued and running work is cancelled with `server_stopping`).
//!   No write is queued after the files are closed (or the directory retired, on delete); the
//!   actor answers and stops only once the writer has closed them and every held call has
//!   gone out, so a delete or a reload never races a write.
//!
//! # Acknowledged means durable
//! An outbound call that reports a change (`commandComplete`, `requestCancelled`) and the
//! `{ok:true}` of `submitCommand` go out only after the writes behind them are fsynced: the
//! conversation queues a *write barrier* ([`LogWriter::sync`]) and every call emitted after it
//! is held in `held`, in order, until the barrier is confirmed; the barrier's continuation then
//! emits at the barrier's place. Streamed output during a turn is only held while an earlier
//! barrier is outstanding (one group-committed fsync). Accepted requests are journaled
//! ([`requests`]); on load, those acknowledged and never closed get a failed `command-result`.
//!
//! Queue states of a request: **queued** → **running** (one at a time) → finished
//! (`command-result` + `notify commandComplete`) or cancelled (`requestCancelled`). A running
//! agent turn is a spawned future; its output comes back as [`TurnEvent`]s tagged with a turn
//! number, so events of a cancelled turn that are still in the mailbox are ignored. Each output
//! gets its `seq` when it enters the actor: that is the one total order every client sees.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::agent::turn::{
    describe_plan, plan, run_turn, ToolServer, TurnInput, TurnOutcome, TurnSink,
};
use crate::agent::{ChatMessage, LocalBoxFuture, Provider, ProviderRequest, Role};
use crate::client::{
    Client, ClientLost, ConversationGone, Deliver, GiveUp, OutboundCall, StopClient, CLIENT_MAILBOX,
};
use crate::commands::{self, Command};
use crate::displaylog::{self, DisplayLog, HistoryRead};
use crate::logwriter::LogWriter;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::protocol::{Args, RpcError, RpcResult};
use crate::registry::{ConversationEvent, ConversationRegistry};
use crate::requests::{self, AcceptedRequest, OpenRequest, Record};

/// Text shown to the others when a client joins.
pub const JOIN_NOTICE: &str = "[A new client has joined this conversation.]";
/// Text shown to the others when a client leaves.
pub const LEAVE_NOTICE: &str = "[A client has left this conversation.]";
/// Text shown to every client when the conversation is deleted under it.
pub const DELETED_NOTICE: &str = "[This conversation was deleted.]";
/// Queue cap (`MAX_QUEUE_DEPTH` in TypeAgent).
pub const MAX_QUEUE_DEPTH: usize = 100;
/// Request ids remembered after they finish, for `cancelCommand`'s `already_completed`.
const FINISHED_MEMORY: usize = 1024;
/// Source name of the chat agent in display messages.
const AGENT_SOURCE: &str = "chat";
/// Longest local (provider-less) compact summary, in characters.
const LOCAL_SUMMARY_CHARS: usize = 4000;
/// What the history says of a request that was acknowledged but never finished (crash).
pub const STOPPED_BEFORE_FINISHING: &str =
    "The server stopped before this request finished; it did not complete.";
/// `submitCommand`'s `error` when the request could not be recorded durably.
pub const STORAGE_ERROR: &str = "storage_error";

/// Why a conversation stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownReason {
    /// Idle past the timeout with no clients.
    Evicted,
    /// Deleted by a client.
    Deleted,
    /// The server is stopping.
    ServerStopping,
}

/// Settings shared by every conversation.
pub struct RuntimeConfig {
    /// The model backend of the agent loop.
    pub provider: Arc<dyn Provider>,
    /// External tool servers by prefix (`server__tool`).
    pub tool_servers: HashMap<String, Arc<dyn ToolServer>>,
    /// The shared append writer.
    pub log_writer: LogWriter,
    /// After the last client leaves, queued work waits this long before `no_clients`.
    pub no_clients_grace: Duration,
    /// Provider calls per turn before the loop gives up.
    pub max_iterations: usize,
    /// How long an interaction waits for an answer.
    pub interaction_timeout: Duration,
    /// Instance directory (agent `instanceStorage` lives under `<root>/<agent>/`).
    pub instance_root: PathBuf,
}

/// Everything a conversation needs at start.
pub struct ConversationSetup {
    /// The id.
    pub id: Uuid,
    /// Name at load time, for logs.
    pub name: String,
    /// Incremented by the registry each time it loads this conversation.
    pub generation: u64,
    /// Persist directory (`conversations/<id>/`).
    pub dir: PathBuf,
    /// How long to stay loaded with no clients.
    pub idle_timeout: Duration,
    /// The registry, told about idle timeouts and count changes.
    pub registry: Addr<ConversationRegistry>,
    /// Shared counters.
    pub metrics: Arc<Metrics>,
    /// Agent, storage and timing settings.
    pub runtime: Arc<RuntimeConfig>,
    /// Joined clients, read by the registry for `clientCount` without a message per join.
    pub client_count: Arc<std::sync::atomic::AtomicUsize>,
}

struct ClientSlot {
    /// The client actor.
    addr: Addr<Client>,
    /// Its mailbox overflowed and it was told to give up; it leaves with `ClientLost`.
    lost: bool,
    /// Joined with `filter: true`: gets only messages addressed to its own connection id.
    filter: bool,
}

/// One submitted command.
#[derive(Debug, Clone)]
struct Request {
    /// Server-side id (the client's `requestId` argument, or a fresh UUID).
    request_id: String,
    /// Connection id of the client that submitted it.
    origin: String,
    /// The client's opaque id, echoed back.
    client_request_id: Option<Value>,
    /// The command text.
    text: String,
    /// Attachments (kept for the agent; not echoed).
    attachments: Vec<Value>,
    /// Submit options, echoed in the queue entry.
    options: Option<Value>,
    /// ms since epoch.
    submitted_at: u64,
    /// ms since epoch, once running.
    started_at: Option<u64>,
}

impl Request {
    /// `RequestId` as the protocol spells it.
    fn id_obj(&self) -> Value {
        let mut v = json!({"connectionId": self.origin, "requestId": self.request_id});
        if let Some(c) = &self.client_request_id {
            v["clientRequestId"] = c.clone();
        }
        v
    }

    /// `QueuedRequest` without attachments.
    fn entry(&self, state: &str) -> Value {
        let mut v = json!({
            "requestId": self.request_id,
            "originatorConnectionId": self.origin,
            "text": self.text,
            "submittedAt": self.submitted_at,
            "state": state,
            "attachmentCount": self.attachments.len(),
        });
        if let Some(c) = &self.client_request_id {
            v["clientRequestId"] = c.clone();
        }
        if let Some(o) = &self.options {
            v["options"] = o.clone();
        }
        if let Some(s) = self.started_at {
            v["startedAt"] = s.into();
        }
        v
    }
}

/// The request being worked on.
struct Running {
    /// The request.
    request: Request,
    /// Turn number; events from other turns are stale.
    turn: u64,
    /// The spawned agent loop, if this is an agent turn.
    handle: Option<SpawnHandle>,
    /// Interaction the turn waits on (a new submit supersedes it).
    blocked_on: Option<String>,
}

/// A question waiting for an answer.
struct Interaction {
    /// The `PendingInteractionRequest` sent to clients.
    request: Value,
    /// Originating connection (filtered clients only see their own).
    connection_id: Option<String>,
    /// `defaultId`, used when the interaction is cancelled or times out.
    default_id: Option<usize>,
    /// Resolves the waiting tool call.
    reply: oneshot::Sender<Result<usize, String>>,
    /// The time-out timer.
    timer: SpawnHandle,
}

/// A private `requestChoice` waiting for `respondToChoice`.
struct Choice {
    /// Connection asked.
    connection_id: String,
    /// Resolves the waiting tool call.
    reply: oneshot::Sender<Result<usize, String>>,
    /// The time-out timer.
    timer: SpawnHandle,
}

/// What runs when a write barrier is confirmed (or failed): it may emit, write and queue work;
/// its calls go out at the barrier's place in the order.
type Continuation =
    Box<dyn FnOnce(&mut Conversation, Result<(), String>, &mut Context<Conversation>)>;

/// An entry of the held outbound order (see "Acknowledged means durable" above).
enum Held {
    /// A call waiting for the barriers before it.
    Call {
        /// The call.
        call: Arc<OutboundCall>,
        /// Who gets it.
        audience: Audience,
        /// Clients that joined after it was emitted (connection number at or above) skip it.
        joined_below: u64,
    },
    /// A write barrier: `outcome` is set when the writer answers.
    Barrier {
        /// Matches the answer to its barrier.
        ticket: u64,
        /// The writer's answer, once it came.
        outcome: Option<Result<(), String>>,
        /// Runs at this place once the front of `held` reaches it.
        then: Option<Continuation>,
    },
}

/// Where calls and barriers created by a running continuation go in `held`.
struct ReleaseCursor {
    /// Insertion index (just behind what the continuation added so far).
    at: usize,
    /// The continuation queued a barrier: its later calls must wait too.
    blocked: bool,
}

/// A [`Shutdown`] in progress.
struct PendingStop {
    /// Answered when everything is closed and sent.
    reply: oneshot::Sender<()>,
    /// Clients are told their conversation went away (delete).
    notify_connection: bool,
    /// The writer has closed (or retired) the files.
    files_closed: bool,
}

/// Who gets an outbound call.
#[derive(Clone)]
enum Audience {
    /// Every client, except filtered clients whose connection id differs from `request_conn`.
    Broadcast(Option<String>),
    /// Every client, ignoring `filter` (system notices).
    Everyone,
    /// Only this connection (the callback group).
    Only(String),
}

/// One loaded conversation.
pub struct Conversation {
    /// Fixed at start.
    setup: ConversationSetup,
    /// `setup.id` as a string, used in every frame and log line.
    id_str: String,
    /// Joined clients by connection id number (in join order).
    clients: BTreeMap<u64, ClientSlot>,
    /// Next connection id ("0", "1", …); restarts when the conversation is reloaded.
    next_connection_id: u64,
    /// `Attach` messages handled so far (echoed in `IdleExpired`).
    attaches_seen: u64,
    /// The armed idle timer, if any.
    idle_timer: Option<SpawnHandle>,
    /// The armed no-clients grace timer, if any.
    grace_timer: Option<SpawnHandle>,
    /// The display log; `Err` holds why it could not be opened (commands are refused).
    log: Result<DisplayLog, String>,
    /// Chat history for the agent (loaded at the first turn).
    chat: Option<Arc<Vec<ChatMessage>>>,
    /// Waiting requests, FIFO.
    queue: VecDeque<Request>,
    /// The request being worked on.
    running: Option<Running>,
    /// Bumped on every queue change (`version` of queue events).
    version: u64,
    /// Ids of recently finished requests.
    finished: VecDeque<String>,
    /// Turn counter.
    turns: u64,
    /// Pending interactions by id.
    interactions: BTreeMap<String, Interaction>,
    /// Pending private choices by id.
    choices: HashMap<String, Choice>,
    /// Set by `Shutdown`: new submits answer `server_stopping`.
    stopping: bool,
    /// Calls and write barriers in emit order, while a barrier is unconfirmed (usually empty).
    held: VecDeque<Held>,
    /// Ticket of the next write barrier.
    next_ticket: u64,
    /// Set while a barrier's continuation runs.
    release_cursor: Option<ReleaseCursor>,
    /// The chat history file (`sessions/chat/history.jsonl`).
    chat_path: Arc<Path>,
    /// The request journal (`requests.jsonl`).
    requests_path: Arc<Path>,
    /// Requests accepted and not closed, in acceptance order (what the journal says).
    open_requests: Vec<OpenRequest>,
    /// Bytes appended to the journal since it was last rewritten.
    requests_appended: u64,
    /// Set once the files were handed to the writer to close: nothing is written after.
    writes_closed: bool,
    /// The shutdown being completed.
    pending_stop: Option<PendingStop>,
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl Conversation {
    /// A conversation ready to start; the display log is opened here (lazy load: only
    /// conversations someone joins are opened).
    pub fn new(setup: ConversationSetup) -> Conversation {
        let id_str = setup.id.to_string();
        // The directory is created by the log writer with the first entry, off this thread.
        let log = DisplayLog::open(&setup.dir, setup.runtime.log_writer.clone()).map_err(|e| {
            log::error!("conversation {id_str}: cannot open display log: {e}");
            format!("display log unavailable: {e}")
        });
        let chat_path: Arc<Path> = setup
            .dir
            .join("sessions")
            .join(AGENT_SOURCE)
            .join("history.jsonl")
            .into();
        let requests_path: Arc<Path> = setup.dir.join(requests::FILE_NAME).into();
        Conversation {
            setup,
            id_str,
            clients: BTreeMap::new(),
            next_connection_id: 0,
            attaches_seen: 0,
            idle_timer: None,
            grace_timer: None,
            log,
            chat: None,
            queue: VecDeque::new(),
            running: None,
            version: 0,
            finished: VecDeque::new(),
            turns: 0,
            interactions: BTreeMap::new(),
            choices: HashMap::new(),
            stopping: false,
            held: VecDeque::new(),
            next_ticket: 0,
            release_cursor: None,
            chat_path,
            requests_path,
            open_requests: Vec::new(),
            requests_appended: 0,
            writes_closed: false,
            pending_stop: None,
        }
    }

    fn system_notice(text: &str) -> Arc<OutboundCall> {
        OutboundCall::new(
            "appendDisplay",
            &json!([{
                "message": {"type": "text", "content": text, "kind": "status"},
                "requestId": {"requestId": "system"},
                "source": "system"
            }, "block"]),
        )
    }

    /// The join notice, built once per process (every join sends it).
    fn join_notice() -> Arc<OutboundCall> {
        static NOTICE: std::sync::LazyLock<Arc<OutboundCall>> =
            std::sync::LazyLock::new(|| Conversation::system_notice(JOIN_NOTICE));
        NOTICE.clone()
    }

    /// The leave notice, built once per process (every leave sends it).
    fn leave_notice() -> Arc<OutboundCall> {
        static NOTICE: std::sync::LazyLock<Arc<OutboundCall>> =
            std::sync::LazyLock::new(|| Conversation::system_notice(LEAVE_NOTICE));
        NOTICE.clone()
    }

    /// Hands a call to the clients in `audience`, now or, behind an unconfirmed write barrier,
    /// when the barrier is confirmed (see "Acknowledged means durable").
    fn emit(&mut self, call: Arc<OutboundCall>, audience: &Audience) {
        let joined_below = self.next_connection_id;
        let held = || Held::Call {
            call: call.clone(),
            audience: audience.clone(),
            joined_below,
        };
        match &mut self.release_cursor {
            Some(cursor) if cursor.blocked => {
                self.held.insert(cursor.at, held());
                cursor.at += 1;
            }
            None if !self.held.is_empty() => self.held.push_back(held()),
            _ => self.deliver(&call, audience, joined_below),
        }
    }

    /// Delivers a call to the clients in `audience` that joined below `joined_below`. A client
    /// whose mailbox is full is told to give up (it closes its socket as a slow consumer and
    /// leaves with `ClientLost`).
    fn deliver(&mut self, call: &Arc<OutboundCall>, audience: &Audience, joined_below: u64) {
        for (id, slot) in self
            .clients
            .range_mut(..joined_below)
            .filter(|(_, s)| !s.lost)
        {
            let wanted = match audience {
                Audience::Everyone => true,
                Audience::Broadcast(conn) => {
                    !slot.filter || conn.as_deref() == Some(id.to_string().as_str())
                }
                Audience::Only(conn) => conn.as_str() == id.to_string(),
            };
            if wanted && slot.addr.try_send(Deliver { call: call.clone() }).is_err() {
                log::warn!(
                    "conversation {} connection {id}: client mailbox full, closing it",
                    self.id_str
                );
                slot.lost = true;
                slot.addr.do_send(GiveUp);
            }
        }
    }

    fn broadcast(&mut self, method: &'static str, args: Value, request_conn: Option<String>) {
        self.emit(
            OutboundCall::new(method, &args),
            &Audience::Broadcast(request_conn),
        );
    }

    /// Queues a write barrier: `then` runs once every write queued so far is durable (or with
    /// the first error one of this conversation's files met), and every call emitted after
    /// this one waits for it.
    fn after_durable(
        &mut self,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Self, Result<(), String>, &mut Context<Self>) + 'static,
    ) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut paths = vec![self.chat_path.clone(), self.requests_path.clone()];
        if let Ok(log) = &self.log {
            paths.push(log.path().clone());
        }
        let written = self.setup.runtime.log_writer.sync(paths);
        let barrier = Held::Barrier {
            ticket,
            outcome: None,
            then: Some(Box::new(then)),
        };
        match &mut self.release_cursor {
            Some(cursor) => {
                self.held.insert(cursor.at, barrier);
                cursor.at += 1;
                cursor.blocked = true;
            }
            None => self.held.push_back(barrier),
        }
        ctx.spawn(
            async move {
                written
                    .await
                    .unwrap_or_else(|_| Err("the log writer has stopped".into()))
            }
            .into_actor(self)
            .map(move |outcome, act, ctx| act.release(ticket, outcome, ctx)),
        );
    }

    /// Records a barrier's outcome, then sends what is no longer held: calls up to the first
    /// unconfirmed barrier, running each confirmed barrier's continuation at its place.
    fn release(&mut self, ticket: u64, result: Result<(), String>, ctx: &mut Context<Self>) {
        if let Some(Held::Barrier { outcome, .. }) = self
            .held
            .iter_mut()
            .find(|h| matches!(h, Held::Barrier { ticket: t, .. } if *t == ticket))
        {
            *outcome = Some(result);
        }
        loop {
            match self.held.front_mut() {
                Some(Held::Barrier { outcome: None, .. }) | None => break,
                Some(Held::Barrier { outcome, then, .. }) => {
                    let outcome = outcome.take().expect("confirmed");
                    let then = then.take();
                    self.held.pop_front();
                    if let Some(then) = then {
                        self.release_cursor = Some(ReleaseCursor {
                            at: 0,
                            blocked: false,
                        });
                        then(self, outcome, ctx);
                        self.release_cursor = None;
                    }
                }
                Some(Held::Call { .. }) => {
                    if let Some(Held::Call {
                        call,
                        audience,
                        joined_below,
                    }) = self.held.pop_front()
                    {
                        self.deliver(&call, &audience, joined_below);
                    }
                }
            }
        }
        self.complete_stop(ctx);
    }

    /// Appends to the request journal (rewriting it with only the open requests once it has
    /// grown past [`requests::COMPACT_AFTER_BYTES`]).
    fn journal(&mut self, record: Record) {
        let closes_after_durable = false;
        self.journal_record(record, closes_after_durable);
    }

    /// [`journal`](Self::journal) for the `closed` record of a request whose result is
    /// already durable (see [`LogWriter::append_unreported`]).
    fn journal_closed_after_durable(&mut self, request_id: String) {
        self.journal_record(Record::Closed { request_id }, true);
    }

    fn journal_record(&mut self, record: Record, closes_after_durable: bool) {
        match &record {
            Record::Accepted(accepted) => self.open_requests.push(OpenRequest {
                accepted: accepted.clone(),
                started_seq: None,
            }),
            Record::Started { request_id, seq } => {
                if let Some(open) = self
                    .open_requests
                    .iter_mut()
                    .find(|o| &o.accepted.request_id == request_id)
                {
                    open.started_seq = Some(*seq);
                }
            }
            Record::Closed { request_id } => self
                .open_requests
                .retain(|o| &o.accepted.request_id != request_id),
        }
        if self.writes_closed {
            return;
        }
        let line = record.line();
        self.requests_appended += line.len() as u64;
        let writer = &self.setup.runtime.log_writer;
        if self.requests_appended > requests::COMPACT_AFTER_BYTES {
            let bytes: Vec<u8> = self
                .open_requests
                .iter()
                .flat_map(OpenRequest::records)
                .collect();
            self.requests_appended = bytes.len() as u64;
            // The writer logs a failure; the appended journal it would replace stays valid.
            drop(writer.replace(&self.requests_path, bytes));
        } else if closes_after_durable {
            // Its result is already durable: losing this line only costs start-up recovery
            // a look at the log, so its failure must not fail a later acknowledgement.
            writer.append_unreported(&self.requests_path, line);
        } else {
            writer.append(&self.requests_path, line);
        }
    }

    /// Appends a display-log entry; returns its seq (`None` when the log is unavailable or
    /// the conversation is closing its files).
    fn log_entry(&mut self, entry: Value) -> Option<u64> {
        if self.writes_closed {
            return None;
        }
        let log = self.log.as_mut().ok()?;
        let before = log.message_count();
        let seq = log.append(obj(entry));
        let after = log.message_count();
        if after != before {
            self.setup
                .registry
                .do_send(ConversationEvent::MessageCount {
                    id: self.setup.id,
                    count: after,
                });
        }
        Some(seq)
    }

    /// Pauses this actor (its mailbox and its running turn, not the arbiter thread) while the
    /// log writer's queue is over its bound.
    fn throttle(&mut self, ctx: &mut Context<Self>) {
        let writer = &self.setup.runtime.log_writer;
        if writer.backlogged() {
            Metrics::inc(&self.setup.metrics.writer_backpressure);
            log::warn!(
                "conversation {}: log writer backlog ({} bytes); pausing",
                self.id_str,
                writer.queued_bytes()
            );
            let writer = writer.clone();
            ctx.wait(async move { writer.drained().await }.into_actor(self));
        }
    }

    /// Closes the requests a crash left open: each acknowledged request that never finished
    /// gets its `user-request` (if it never started), an error line and a failed
    /// `command-result`, unless the log already holds its result.
    fn recover_requests(&mut self, ctx: &mut Context<Self>) {
        let open = match requests::read_open(&self.requests_path) {
            Ok(open) => open,
            Err(e) => {
                log::error!(
                    "conversation {}: cannot read {}: {e}",
                    self.id_str,
                    self.requests_path.display()
                );
                return;
            }
        };
        if open.is_empty() {
            return;
        }
        self.open_requests = open.clone();
        let mut closed = 0;
        for request in &open {
            let a = &request.accepted;
            if let Some(seq) = request.started_seq {
                if self.log_has_result(seq, &a.request_id) {
                    continue;
                }
            }
            closed += 1;
            let mut id = json!({"connectionId": a.connection_id, "requestId": a.request_id});
            if let Some(c) = &a.client_request_id {
                id["clientRequestId"] = c.clone();
            }
            if request.started_seq.is_none() {
                self.log_entry(
                    json!({"type": "user-request", "requestId": id, "command": a.command}),
                );
            }
            self.log_entry(json!({
                "type": "append-display",
                "message": {
                    "message": {"type": "text", "content": STOPPED_BEFORE_FINISHING, "kind": "error"},
                    "requestId": id,
                    "source": "system",
                },
                "mode": "block",
            }));
            self.log_entry(json!({
                "type": "command-result",
                "requestId": id,
                "error": STOPPED_BEFORE_FINISHING,
            }));
        }
        if closed > 0 {
            log::warn!(
                "conversation {}: {closed} acknowledged requests never finished before the server stopped; their history now says so",
                self.id_str
            );
        }
        let ids: Vec<String> = open.into_iter().map(|o| o.accepted.request_id).collect();
        self.after_durable(ctx, move |act, written, _| match written {
            Ok(()) => {
                for request_id in ids {
                    act.journal_closed_after_durable(request_id);
                }
            }
            Err(e) => log::error!(
                "conversation {}: could not record the recovery of unfinished requests: {e}",
                act.id_str
            ),
        });
    }

    /// Whether the display log holds a `command-result` for `request_id` at or after `seq`.
    fn log_has_result(&self, seq: u64, request_id: &str) -> bool {
        let Ok(log) = &self.log else { return false };
        displaylog::read_range(log.path(), seq, log.next_seq())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .any(|e| e["type"] == "command-result" && e["requestId"]["requestId"] == request_id)
    }

    /// Ends a [`Shutdown`] once the files are closed and nothing is held any more.
    fn complete_stop(&mut self, ctx: &mut Context<Self>) {
        let done = self
            .pending_stop
            .as_ref()
            .is_some_and(|s| s.files_closed && self.held.is_empty());
        if !done {
            return;
        }
        let stop = self.pending_stop.take().expect("checked");
        for (_, slot) in std::mem::take(&mut self.clients) {
            slot.addr.do_send(StopClient {
                notify_connection: stop.notify_connection,
            });
        }
        let _ = stop.reply.send(());
        ctx.stop();
    }

    /// `appendDisplay` for a request: logged (unless temporary) and broadcast.
    fn display(&mut self, request: &Request, content: Value, extra: Option<Value>, mode: &str) {
        let mut message =
            json!({"message": content, "requestId": request.id_obj(), "source": AGENT_SOURCE});
        if let Some(Value::Object(extra)) = extra {
            message.as_object_mut().expect("object").extend(extra);
        }
        if mode != "temporary" {
            self.log_entry(json!({"type": "append-display", "message": message, "mode": mode}));
        }
        self.broadcast(
            "appendDisplay",
            json!([message, mode]),
            Some(request.origin.clone()),
        );
    }

    fn report_count(&self) {
        self.setup
            .client_count
            .store(self.clients.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn drop_client(&mut self, connection_id: u64, notify_connection: bool) -> bool {
        let Some(slot) = self.clients.remove(&connection_id) else {
            return false;
        };
        slot.addr.do_send(StopClient { notify_connection });
        true
    }

    fn after_leave(&mut self, ctx: &mut Context<Self>) {
        if !self.clients.is_empty() {
            self.emit(Self::leave_notice(), &Audience::Everyone);
        }
        self.report_count();
        if self.clients.is_empty() && !self.stopping {
            self.arm_idle_timer(ctx);
            self.arm_grace_timer(ctx);
        }
    }

    fn busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty() || !self.held.is_empty()
    }

    fn arm_idle_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.idle_timer.take() {
            ctx.cancel_future(h);
        }
        self.idle_timer = Some(ctx.run_later(self.setup.idle_timeout, |act, ctx| {
            act.idle_timer = None;
            if !act.clients.is_empty() {
                return;
            }
            if act.busy() {
                // Never evict with work in flight; look again later.
                act.arm_idle_timer(ctx);
                return;
            }
            act.setup.registry.do_send(ConversationEvent::IdleExpired {
                id: act.setup.id,
                generation: act.setup.generation,
                attaches_seen: act.attaches_seen,
            });
        }));
    }

    fn arm_grace_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.grace_timer.take() {
            ctx.cancel_future(h);
        }
        if !self.busy() {
            return;
        }
        self.grace_timer = Some(
            ctx.run_later(self.setup.runtime.no_clients_grace, |act, ctx| {
                act.grace_timer = None;
                if !act.clients.is_empty() {
                    return;
                }
                let queued: Vec<String> = act.queue.iter().map(|r| r.request_id.clone()).collect();
                if !queued.is_empty() {
                    log::info!(
                        "conversation {}: no clients; cancelling {} queued requests",
                        act.id_str,
                        queued.len()
                    );
                }
                for id in queued {
                    act.cancel_queued(&id, "no_clients", ctx);
                }
                // A running turn stalled on an interaction nobody can answer is superseded.
                if act.running.as_ref().is_some_and(|r| r.blocked_on.is_some()) {
                    act.cancel_running("no_clients", ctx);
                }
            }),
        );
    }

    // ---- queue ----------------------------------------------------------------------------

    fn snapshot(&self) -> Value {
        json!({
            "running": self.running.as_ref().map(|r| r.request.entry("running")),
            "queued": self.queue.iter().map(|r| r.entry("queued")).collect::<Vec<_>>(),
            "paused": false,
            "version": self.version,
        })
    }

    fn queue_changed(&mut self) {
        let snapshot = self.snapshot();
        self.broadcast("queueStateChanged", json!([snapshot]), None);
    }

    /// Queues a request. `Err` is a refusal to answer at once; `Ok` is the `{ok:true}` answer
    /// and what it must wait for: the acceptance being durable (a failed write cancels the
    /// request and turns the answer into a `storage_error` refusal).
    fn submit(
        &mut self,
        request: Request,
        front: bool,
        ctx: &mut Context<Self>,
    ) -> Result<(Value, oneshot::Receiver<Result<(), String>>), Value> {
        if self.stopping {
            return Err(json!({"ok": false, "error": "server_stopping"}));
        }
        if let Err(e) = &self.log {
            return Err(json!({"ok": false, "error": e}));
        }
        if self.queue.len() >= MAX_QUEUE_DEPTH {
            return Err(json!({"ok": false, "error": "queue_full", "maxDepth": MAX_QUEUE_DEPTH}));
        }
        if let Some(cause) = self.setup.metrics.storage_failure() {
            return Err(json!({"ok": false, "error": STORAGE_ERROR, "message": cause}));
        }
        // A new submit supersedes a turn stalled on an interaction.
        if self
            .running
            .as_ref()
            .is_some_and(|r| r.blocked_on.is_some())
        {
            self.cancel_running("superseded", ctx);
        }
        self.journal(Record::Accepted(AcceptedRequest {
            request_id: request.request_id.clone(),
            connection_id: request.origin.clone(),
            client_request_id: request.client_request_id.clone(),
            command: request.text.clone(),
            submitted_at: request.submitted_at,
        }));
        let (accepted_tx, accepted_rx) = oneshot::channel();
        let request_id = request.request_id.clone();
        self.after_durable(ctx, move |act, written, ctx| {
            if let Err(e) = &written {
                log::error!(
                    "conversation {}: request {request_id} could not be recorded: {e}",
                    act.id_str
                );
                act.cancel_by_id(&request_id, STORAGE_ERROR, ctx);
            }
            let _ = accepted_tx.send(written);
        });
        let entry = request.entry("queued");
        if front {
            self.queue.push_front(request.clone());
        } else {
            self.queue.push_back(request.clone());
        }
        self.version += 1;
        self.broadcast("requestQueued", json!([entry, self.version]), None);
        self.start_next(ctx);
        let state = if self
            .running
            .as_ref()
            .is_some_and(|r| r.request.request_id == request.request_id)
        {
            "running"
        } else {
            "queued"
        };
        let mut entry = request.entry(state);
        if state == "running" {
            entry["startedAt"] = self
                .running
                .as_ref()
                .and_then(|r| r.request.started_at)
                .into();
        }
        Ok((json!({"ok": true, "entry": entry}), accepted_rx))
    }

    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.running.is_some() || self.stopping {
            return;
        }
        let Some(mut request) = self.queue.pop_front() else {
            self.queue_changed();
            return;
        };
        request.started_at = Some(crate::now_millis());
        self.turns += 1;
        let turn = self.turns;
        self.version += 1;
        self.running = Some(Running {
            request: request.clone(),
            turn,
            handle: None,
            blocked_on: None,
        });
        self.broadcast(
            "requestStarted",
            json!([request.entry("running"), self.version]),
            None,
        );
        self.queue_changed();
        log::debug!(
            "conversation {}: request {} started",
            self.id_str,
            request.request_id
        );
        if let Some(seq) = self.log_entry(
            json!({"type": "user-request", "requestId": request.id_obj(), "command": request.text}),
        ) {
            self.journal(Record::Started {
                request_id: request.request_id.clone(),
                seq,
            });
        }
        self.broadcast(
            "setUserRequest",
            json!([request.id_obj(), request.text]),
            Some(request.origin.clone()),
        );
        match commands::parse(&request.text) {
            Some(Command::Conversation(payload)) => {
                let call = OutboundCall::new(
                    "takeAction",
                    &json!([request.id_obj(), "manage-conversation", payload]),
                );
                self.emit(call, &Audience::Only(request.origin.clone()));
                self.finish(turn, None, ctx);
            }
            Some(Command::Help) => {
                self.display(
                    &request,
                    json!({"type": "markdown", "content": commands::help_text()}),
                    None,
                    "block",
                );
                self.finish(turn, None, ctx);
            }
            Some(Command::Unknown(name)) => {
                let text = format!("Unknown command @{name}. Type @help for the list.");
                self.display(
                    &request,
                    json!({"type": "text", "content": text, "kind": "error"}),
                    None,
                    "block",
                );
                self.finish(turn, Some(text), ctx);
            }
            Some(Command::Compact) => self.start_compact(turn, ctx),
            Some(Command::Explain(text)) => self.start_plan(turn, text, true, ctx),
            Some(Command::Translate(text)) => self.start_plan(turn, text, false, ctx),
            None => self.start_agent_turn(turn, ctx),
        }
    }

    /// The committed history, shared (a turn holds a reference, never a copy).
    fn chat_history(&mut self) -> Arc<Vec<ChatMessage>> {
        if self.chat.is_none() {
            self.chat = Some(Arc::new(load_chat(&self.chat_path)));
        }
        self.chat.clone().unwrap_or_default()
    }

    fn commit_chat(&mut self, messages: Vec<ChatMessage>) {
        if messages.is_empty() || self.writes_closed {
            return;
        }
        let mut bytes = Vec::new();
        for m in &messages {
            serde_json::to_writer(&mut bytes, m).expect("message serializes");
            bytes.push(b'\n');
        }
        self.setup.runtime.log_writer.append(&self.chat_path, bytes);
        // The finished turn has dropped its reference by now, so this extends in place.
        Arc::make_mut(self.chat.get_or_insert_with(Default::default)).extend(messages);
    }

    fn system_prompt(&self) -> String {
        // instanceStorage of the chat agent: a system prompt shared by every conversation.
        let custom = self
            .setup
            .runtime
            .instance_root
            .join(AGENT_SOURCE)
            .join("system-prompt.md");
        std::fs::read_to_string(custom).unwrap_or_else(|_| {
            "You are the assistant of a Roundtable conversation that several people may share. \
             Answer concisely. Use the tools when they help: calculate for arithmetic, \
             get_current_time for the time, get_weather for (sample) weather, ask_user to ask \
             the people in the conversation."
                .to_string()
        })
    }

    fn start_agent_turn(&mut self, turn: u64, ctx: &mut Context<Self>) {
        let request = self.running.as_ref().expect("running").request.clone();
        let input = TurnInput {
            provider: self.setup.runtime.provider.clone(),
            system: self.system_prompt(),
            history: self.chat_history(),
            command: request.text.clone(),
            max_iterations: self.setup.runtime.max_iterations,
            tool_servers: self.setup.runtime.tool_servers.clone(),
        };
        let sink = ConversationSink {
            addr: ctx.address(),
            turn,
        };
        let addr = ctx.address();
        let handle = ctx.spawn(
            async move {
                let outcome = run_turn(input, &sink).await;
                addr.do_send(TurnEvent::Done { turn, outcome });
            }
            .into_actor(self),
        );
        if let Some(r) = self.running.as_mut() {
            r.handle = Some(handle);
        }
    }

    fn start_plan(&mut self, turn: u64, text: String, explain: bool, ctx: &mut Context<Self>) {
        if text.trim().is_empty() {
            let running = self.running.as_ref().expect("running").request.clone();
            let msg = format!(
                "Give a request: @{} <request>",
                if explain { "explain" } else { "translate" }
            );
            self.display(
                &running,
                json!({"type": "text", "content": msg, "kind": "warning"}),
                None,
                "block",
            );
            self.finish(turn, Some(msg), ctx);
            return;
        }
        let input = TurnInput {
            provider: self.setup.runtime.provider.clone(),
            system: self.system_prompt(),
            history: self.chat_history(),
            command: text.clone(),
            max_iterations: 1,
            tool_servers: self.setup.runtime.tool_servers.clone(),
        };
        let addr = ctx.address();
        let handle = ctx.spawn(
            async move {
                let result = plan(input)
                    .await
                    .map(|blocks| describe_plan(&text, &blocks, explain));
                addr.do_send(TurnEvent::Planned {
                    turn,
                    result: result.map_err(|e| e.to_string()),
                });
            }
            .into_actor(self),
        );
        if let Some(r) = self.running.as_mut() {
            r.handle = Some(handle);
        }
    }

    fn start_compact(&mut self, turn: u64, ctx: &mut Context<Self>) {
        let history = self.chat_history();
        let provider = self.setup.runtime.provider.clone();
        let addr = ctx.address();
        let handle = ctx.spawn(
            async move {
                let replaced = history.len();
                let summary = summarize(provider.as_ref(), history).await;
                addr.do_send(TurnEvent::Compacted {
                    turn,
                    summary,
                    replaced,
                });
            }
            .into_actor(self),
        );
        if let Some(r) = self.running.as_mut() {
            r.handle = Some(handle);
        }
    }

    /// Completes the running request: `command-result`, then `commandComplete`.
    fn finish(&mut self, turn: u64, error: Option<String>, ctx: &mut Context<Self>) {
        let Some(running) = self.running.take_if(|r| r.turn == turn) else {
            return;
        };
        let request = running.request;
        self.log_entry(json!({"type": "command-result", "requestId": request.id_obj()}));
        self.remember_finished(request.request_id.clone());
        // commandComplete only once the result is on disk; the journal closes it after that.
        self.after_durable(ctx, move |act, written, _| {
            let error = match (error, written) {
                (error, Ok(())) => {
                    act.journal_closed_after_durable(request.request_id.clone());
                    error
                }
                (error, Err(w)) => {
                    log::error!(
                        "conversation {}: result of {} not saved: {w}",
                        act.id_str,
                        request.request_id
                    );
                    let saved = format!("the result could not be saved: {w}");
                    Some(error.map_or(saved.clone(), |e| format!("{e} ({saved})")))
                }
            };
            let result = match &error {
                Some(e) => json!({"result": {"lastError": e}}),
                None => json!({"result": null}),
            };
            act.broadcast(
                "notify",
                json!([
                    request.id_obj(),
                    "commandComplete",
                    result,
                    "system",
                    null,
                    null
                ]),
                Some(request.origin.clone()),
            );
        });
        self.version += 1;
        self.start_next(ctx);
    }

    fn remember_finished(&mut self, id: String) {
        self.finished.push_back(id);
        if self.finished.len() > FINISHED_MEMORY {
            self.finished.pop_front();
        }
    }

    fn cancel_queued(&mut self, request_id: &str, reason: &str, ctx: &mut Context<Self>) -> bool {
        let Some(pos) = self.queue.iter().position(|r| r.request_id == request_id) else {
            return false;
        };
        let request = self.queue.remove(pos).expect("position is valid");
        self.version += 1;
        self.journal(Record::Closed {
            request_id: request.request_id.clone(),
        });
        self.announce_cancel(request.request_id.clone(), reason, ctx);
        self.remember_finished(request.request_id);
        self.queue_changed();
        true
    }

    /// `requestCancelled`, once the cancellation is on disk.
    fn announce_cancel(&mut self, request_id: String, reason: &str, ctx: &mut Context<Self>) {
        let version = self.version;
        let reason = reason.to_string();
        self.after_durable(ctx, move |act, written, _| {
            if let Err(e) = written {
                log::error!(
                    "conversation {}: cancellation of {request_id} not saved: {e}",
                    act.id_str
                );
            }
            act.broadcast(
                "requestCancelled",
                json!([request_id, reason, version]),
                None,
            );
        });
    }

    fn cancel_running(&mut self, reason: &str, ctx: &mut Context<Self>) -> bool {
        let Some(running) = self.running.take() else {
            return false;
        };
        if let Some(h) = running.handle {
            ctx.cancel_future(h);
        }
        // Interactions of the cancelled turn are cancelled too (and announced).
        let stale: Vec<String> = self
            .interactions
            .iter()
            .filter(|(_, i)| {
                i.request["requestId"]["requestId"] == running.request.request_id.as_str()
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            self.cancel_interaction(&id, true, ctx);
        }
        let choices: Vec<String> = self.choices.keys().cloned().collect();
        for id in choices {
            if let Some(c) = self.choices.remove(&id) {
                ctx.cancel_future(c.timer);
                let _ = c.reply.send(Err("cancelled".into()));
            }
        }
        // Keep the chat history coherent: the user's message and a note, no dangling tool use.
        self.commit_chat(vec![
            ChatMessage::text(Role::User, running.request.text.clone()),
            ChatMessage::text(Role::Assistant, format!("(request cancelled: {reason})")),
        ]);
        self.version += 1;
        self.journal(Record::Closed {
            request_id: running.request.request_id.clone(),
        });
        self.announce_cancel(running.request.request_id.clone(), reason, ctx);
        self.remember_finished(running.request.request_id);
        log::info!(
            "conversation {}: running request cancelled ({reason})",
            self.id_str
        );
        self.start_next(ctx);
        true
    }

    fn cancel_by_id(
        &mut self,
        request_id: &str,
        reason: &str,
        ctx: &mut Context<Self>,
    ) -> &'static str {
        if self.cancel_queued(request_id, reason, ctx) {
            "cancelled_queued"
        } else if self
            .running
            .as_ref()
            .is_some_and(|r| r.request.request_id == request_id)
        {
            self.cancel_running(reason, ctx);
            "cancelled_running"
        } else if self.finished.iter().any(|f| f == request_id) {
            "already_completed"
        } else {
            "not_found"
        }
    }

    // ---- interactions ---------------------------------------------------------------------

    fn open_interaction(
        &mut self,
        turn: u64,
        question: String,
        choices: Vec<String>,
        reply: oneshot::Sender<Result<usize, String>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(running) = self.running.as_mut().filter(|r| r.turn == turn) else {
            let _ = reply.send(Err("the request is no longer running".into()));
            return;
        };
        let id = Uuid::new_v4().to_string();
        running.blocked_on = Some(id.clone());
        let request = running.request.clone();
        let created = crate::now_millis();
        let default_id =
            (choices.len() == 2 && choices[1].eq_ignore_ascii_case("no")).then_some(1usize);
        let mut pending = json!({
            "interactionId": id,
            "type": "question",
            "requestId": request.id_obj(),
            "source": AGENT_SOURCE,
            "timestamp": created,
            "message": question,
            "choices": choices,
        });
        if let Some(d) = default_id {
            pending["defaultId"] = d.into();
        }
        let mut entry = json!({
            "type": "pending-interaction",
            "timestamp": created,
            "interactionId": id,
            "interactionType": "question",
            "source": AGENT_SOURCE,
            "requestId": request.id_obj(),
            "message": pending["message"],
            "choices": pending["choices"],
        });
        if let Some(d) = default_id {
            entry["defaultId"] = d.into();
        }
        self.log_entry(entry);
        self.broadcast(
            "requestInteraction",
            json!([pending]),
            Some(request.origin.clone()),
        );
        let timer_id = id.clone();
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, ctx| {
            log::info!(
                "conversation {}: interaction {timer_id} timed out",
                act.id_str
            );
            act.cancel_interaction(&timer_id, false, ctx);
        });
        self.interactions.insert(
            id,
            Interaction {
                request: pending,
                connection_id: Some(request.origin),
                default_id,
                reply,
                timer,
            },
        );
    }

    fn resolve_interaction(&mut self, id: &str, value: Value, ctx: &mut Context<Self>) {
        let Some(i) = self.interactions.remove(id) else {
            return; // unknown or expired: silently OK, as TypeAgent does
        };
        ctx.cancel_future(i.timer);
        let index = value.as_u64().map(|n| n as usize);
        let _ = i
            .reply
            .send(index.ok_or_else(|| format!("answer {value} is not a choice index")));
        self.unblock(id);
        self.log_entry(
            json!({"type": "interaction-resolved", "interactionId": id, "response": value}),
        );
        self.broadcast("interactionResolved", json!([id, value]), None);
    }

    /// Cancel (`announce`: a client's `cancelInteraction`) or time out (no broadcast).
    fn cancel_interaction(&mut self, id: &str, announce: bool, ctx: &mut Context<Self>) {
        let Some(i) = self.interactions.remove(id) else {
            return;
        };
        ctx.cancel_future(i.timer);
        let _ = i.reply.send(
            i.default_id
                .ok_or_else(|| "the question was cancelled".to_string()),
        );
        self.unblock(id);
        self.log_entry(json!({"type": "interaction-cancelled", "interactionId": id}));
        if announce {
            self.broadcast("interactionCancelled", json!([id]), None);
        }
    }

    fn unblock(&mut self, id: &str) {
        if let Some(r) = self
            .running
            .as_mut()
            .filter(|r| r.blocked_on.as_deref() == Some(id))
        {
            r.blocked_on = None;
        }
    }

    fn open_choice(
        &mut self,
        turn: u64,
        question: String,
        choices: Vec<String>,
        reply: oneshot::Sender<Result<usize, String>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(running) = self.running.as_ref().filter(|r| r.turn == turn) else {
            let _ = reply.send(Err("the request is no longer running".into()));
            return;
        };
        let request = running.request.clone();
        let id = Uuid::new_v4().to_string();
        let kind = if choices.len() == 2 && choices[0] == "Yes" && choices[1] == "No" {
            "yesNo"
        } else {
            "multiChoice"
        };
        let call = OutboundCall::new(
            "requestChoice",
            &json!([request.id_obj(), id, kind, question, choices, AGENT_SOURCE]),
        );
        self.emit(call, &Audience::Only(request.origin.clone()));
        let timer_id = id.clone();
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, _| {
            if let Some(c) = act.choices.remove(&timer_id) {
                let _ = c.reply.send(Err("no answer in time".into()));
            }
        });
        self.choices.insert(
            id,
            Choice {
                connection_id: request.origin,
                reply,
                timer,
            },
        );
    }

    fn pending_for(&self, connection: u64, filter: bool) -> Vec<Value> {
        let me = connection.to_string();
        self.interactions
            .values()
            .filter(|i| !filter || i.connection_id.as_deref() == Some(me.as_str()))
            .map(|i| i.request.clone())
            .collect()
    }
}

/// Reads the chat history file: every line a `ChatMessage`; bad lines are skipped.
fn load_chat(path: &std::path::Path) -> Vec<ChatMessage> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| match serde_json::from_str(l) {
                Ok(m) => Some(m),
                Err(e) => {
                    log::warn!("{}: skipping an unreadable line: {e}", path.display());
                    None
                }
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The `@compact` summary: the provider's, when it gives a real one, else a bounded local one.
async fn summarize(provider: &dyn Provider, history: Arc<Vec<ChatMessage>>) -> String {
    if history.is_empty() {
        return "(nothing to summarize)".to_string();
    }
    if provider.name() != "builtin" {
        let request = ProviderRequest {
            system: "You write faithful, compact summaries.".into(),
            history: history.clone(),
            messages: vec![ChatMessage::text(
                Role::User,
                "Summarize our conversation so far in a short paragraph, keeping names, numbers and decisions.",
            )],
            tools: Vec::new(),
        };
        if let Ok(r) = provider.complete(request).await {
            let text = ChatMessage {
                role: Role::Assistant,
                content: r.content,
            }
            .joined_text();
            if !text.trim().is_empty() {
                return text;
            }
        }
    }
    let mut out = format!(
        "Summary of {} earlier messages. The user asked:",
        history.len()
    );
    for m in history.iter().filter(|m| m.role == Role::User) {
        let t = m.joined_text();
        if t.is_empty() {
            continue;
        }
        let line: String = t.chars().take(200).collect();
        if out.chars().count() + line.chars().count() + 4 > LOCAL_SUMMARY_CHARS {
            out.push_str("\n- …");
            break;
        }
        out.push_str("\n- ");
        out.push_str(&line);
    }
    out
}

/// The running turn's view of its conversation.
struct ConversationSink {
    addr: Addr<Conversation>,
    turn: u64,
}

impl TurnSink for ConversationSink {
    fn display(&self, content: Value, extra: Option<Value>) {
        self.addr.do_send(TurnEvent::Display {
            turn: self.turn,
            content,
            extra,
        });
    }

    fn ask(
        &self,
        question: String,
        choices: Vec<String>,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<usize, String>> {
        let (tx, rx) = oneshot::channel();
        self.addr.do_send(TurnEvent::Ask {
            turn: self.turn,
            question,
            choices,
            private,
            reply: tx,
        });
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err("the question was dropped".into()))
        })
    }
}

impl Actor for Conversation {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Registry → conversation messages use do_send to keep order; connections use send.
        ctx.set_mailbox_capacity(1 << 16);
        Metrics::add(&self.setup.metrics.loaded_conversations, 1);
        self.recover_requests(ctx);
        log::debug!(
            "conversation {} ({:?}): loaded, generation {}, next seq {}",
            self.id_str,
            self.setup.name,
            self.setup.generation,
            self.log.as_ref().map_or(0, DisplayLog::next_seq)
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.setup.metrics.loaded_conversations, -1);
        log::debug!("conversation {}: unloaded", self.id_str);
    }
}

/// What a successful [`Attach`] returns to the joining connection (through the registry).
pub struct Attached {
    /// The client's connection id (decimal string).
    pub connection_id: String,
    /// The client actor; the connection sends it [`Ready`](crate::client::Ready).
    pub client: Addr<Client>,
    /// The conversation, for dispatcher calls and leave.
    pub conversation: Addr<Conversation>,
    /// Pending interactions visible to this client (always an array).
    pub pending_interactions: Vec<Value>,
    /// Queue snapshot, present only while the queue is busy.
    pub queue_snapshot: Option<Value>,
}

/// A client joins. Sent by the registry with `do_send` so joins keep the registry's order;
/// the answer travels back on `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Attach {
    /// The socket's bounded queue.
    pub outbox: Outbox,
    /// `filter` join option.
    pub filter: bool,
    /// The socket's connection, told if this conversation goes away under it.
    pub connection: Recipient<ConversationGone>,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Attached>,
}

impl Handler<Attach> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Self::Context) {
        self.attaches_seen += 1;
        for timer in [self.idle_timer.take(), self.grace_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(timer);
        }
        let number = self.next_connection_id;
        self.next_connection_id += 1;
        let connection_id = number.to_string();
        let client = Client::new(
            self.id_str.clone(),
            connection_id.clone(),
            msg.outbox,
            ctx.address().recipient(),
            msg.connection,
            self.setup.metrics.clone(),
        );
        // The mailbox bound must hold from the first message: a burst of joins would
        // otherwise overflow the default 16 before `started` runs.
        let client = Client::create(move |ctx| {
            ctx.set_mailbox_capacity(CLIENT_MAILBOX);
            client
        });
        // Others only: the joiner is not in `clients` yet.
        self.emit(Self::join_notice(), &Audience::Everyone);
        self.clients.insert(
            number,
            ClientSlot {
                addr: client.clone(),
                lost: false,
                filter: msg.filter,
            },
        );
        log::debug!(
            "conversation {} connection {connection_id}: joined ({} clients)",
            self.id_str,
            self.clients.len()
        );
        self.report_count();
        let attached = Attached {
            connection_id,
            client,
            conversation: ctx.address(),
            pending_interactions: self.pending_for(number, msg.filter),
            queue_snapshot: self.busy().then(|| self.snapshot()),
        };
        if msg.reply.send(attached).is_err() {
            // The joiner vanished before the answer: undo the join.
            self.drop_client(number, false);
            self.after_leave(ctx);
        }
    }
}

/// A client leaves (leaveConversation, socket close). Sent by the registry with `do_send`
/// (mailbox order); `reply` learns whether it was joined.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach {
    /// The client's connection id.
    pub connection_id: String,
    /// Whether the client was joined (absent when nobody waits).
    pub reply: Option<oneshot::Sender<bool>>,
}

impl Handler<Detach> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Self::Context) {
        let joined = msg
            .connection_id
            .parse::<u64>()
            .is_ok_and(|id| self.drop_client(id, false));
        if joined {
            log::debug!(
                "conversation {} connection {}: left ({} clients)",
                self.id_str,
                msg.connection_id,
                self.clients.len()
            );
            self.after_leave(ctx);
        }
        if let Some(reply) = msg.reply {
            let _ = reply.send(joined);
        }
    }
}

impl Handler<ClientLost> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: ClientLost, ctx: &mut Self::Context) {
        if let Ok(id) = msg.connection_id.parse::<u64>() {
            if self.clients.remove(&id).is_some() {
                self.after_leave(ctx);
            }
        }
    }
}

/// Stop the conversation. Sent by the registry (eviction, delete, server stop).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown {
    /// Why.
    pub reason: ShutdownReason,
    /// Answered once every client has been told and the log is on disk.
    pub reply: oneshot::Sender<()>,
}

impl Handler<Shutdown> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Shutdown, ctx: &mut Self::Context) {
        self.stopping = true;
        // A stopping conversation reports no more idleness (the registry already acted on it).
        for timer in [self.idle_timer.take(), self.grace_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(timer);
        }
        match msg.reason {
            ShutdownReason::Deleted => {
                self.emit(Self::system_notice(DELETED_NOTICE), &Audience::Everyone);
                let notice = OutboundCall::new(
                    "notify",
                    &json!([null, "conversationDeleted", {"conversationId": self.id_str}, "agent-server"]),
                );
                self.emit(notice, &Audience::Everyone);
            }
            ShutdownReason::Evicted if !self.clients.is_empty() => {
                log::error!(
                    "conversation {}: evicted with {} clients (registry bug)",
                    self.id_str,
                    self.clients.len()
                );
            }
            _ => {}
        }
        let reason = if msg.reason == ShutdownReason::ServerStopping {
            "server_stopping"
        } else {
            "conversation_closed"
        };
        let queued: Vec<String> = self.queue.iter().map(|r| r.request_id.clone()).collect();
        for id in queued {
            self.cancel_queued(&id, reason, ctx);
        }
        self.cancel_running(reason, ctx);
        log::debug!("conversation {}: stopping ({:?})", self.id_str, msg.reason);
        // Nothing is written after this point: the writer closes (or, for a delete, retires)
        // the files after every write queued so far, and only then does the actor answer.
        self.writes_closed = true;
        let writer = self.setup.runtime.log_writer.clone();
        let closing = if msg.reason == ShutdownReason::Deleted {
            vec![writer.retire(self.setup.dir.clone())]
        } else {
            let mut files = vec![
                writer.close(&self.chat_path),
                writer.close(&self.requests_path),
            ];
            if let Ok(log) = &self.log {
                files.push(writer.close(log.path()));
            }
            files
        };
        self.pending_stop = Some(PendingStop {
            reply: msg.reply,
            notify_connection: msg.reason == ShutdownReason::Deleted,
            files_closed: false,
        });
        ctx.spawn(
            async move {
                for c in closing {
                    let _ = c.await;
                }
            }
            .into_actor(self)
            .map(|(), act, ctx| {
                if let Some(stop) = act.pending_stop.as_mut() {
                    stop.files_closed = true;
                }
                act.complete_stop(ctx);
            }),
        );
    }
}

/// Output of the running turn, tagged with its turn number.
#[derive(Message)]
#[rtype(result = "()")]
pub enum TurnEvent {
    /// Show something.
    Display {
        /// Turn.
        turn: u64,
        /// `DisplayContent`.
        content: Value,
        /// Extra `IAgentMessage` fields.
        extra: Option<Value>,
    },
    /// Ask the user.
    Ask {
        /// Turn.
        turn: u64,
        /// The question.
        question: String,
        /// Choices.
        choices: Vec<String>,
        /// Only the originator (`requestChoice`) or everyone (`requestInteraction`).
        private: bool,
        /// The answer (choice index).
        reply: oneshot::Sender<Result<usize, String>>,
    },
    /// The agent loop finished.
    Done {
        /// Turn.
        turn: u64,
        /// Messages and error.
        outcome: TurnOutcome,
    },
    /// `@explain` / `@translate` produced their text.
    Planned {
        /// Turn.
        turn: u64,
        /// The rendered plan, or the provider error.
        result: Result<String, String>,
    },
    /// `@compact` produced its summary.
    Compacted {
        /// Turn.
        turn: u64,
        /// The summary text.
        summary: String,
        /// History messages it replaces.
        replaced: usize,
    },
}

impl Handler<TurnEvent> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: TurnEvent, ctx: &mut Self::Context) {
        self.turn_event(msg, ctx);
        self.throttle(ctx);
    }
}

impl Conversation {
    /// Output of the running turn (see [`TurnEvent`]).
    fn turn_event(&mut self, msg: TurnEvent, ctx: &mut Context<Self>) {
        let current = |turn: u64, act: &Self| act.running.as_ref().is_some_and(|r| r.turn == turn);
        match msg {
            TurnEvent::Display {
                turn,
                content,
                extra,
            } => {
                if current(turn, self) {
                    let request = self.running.as_ref().expect("current").request.clone();
                    self.display(&request, content, extra, "block");
                }
            }
            TurnEvent::Ask {
                turn,
                question,
                choices,
                private,
                reply,
            } => {
                if private {
                    self.open_choice(turn, question, choices, reply, ctx);
                } else {
                    self.open_interaction(turn, question, choices, reply, ctx);
                }
            }
            TurnEvent::Done { turn, outcome } => {
                if current(turn, self) {
                    self.commit_chat(outcome.messages);
                    self.finish(turn, outcome.error, ctx);
                }
            }
            TurnEvent::Planned { turn, result } => {
                if !current(turn, self) {
                    return;
                }
                let request = self.running.as_ref().expect("current").request.clone();
                let (content, error) = match result {
                    Ok(text) => (json!({"type": "markdown", "content": text}), None),
                    Err(e) => (
                        json!({"type": "text", "content": e, "kind": "error"}),
                        Some(e),
                    ),
                };
                self.display(&request, content, None, "block");
                self.finish(turn, error, ctx);
            }
            TurnEvent::Compacted {
                turn,
                summary,
                replaced,
            } => {
                if !current(turn, self) {
                    return;
                }
                let history = self.chat_history();
                let kept = history[replaced.min(history.len())..].to_vec();
                let mut compacted = vec![ChatMessage::text(
                    Role::User,
                    format!("[summary] {summary}"),
                )];
                compacted.extend(kept);
                let mut bytes = Vec::new();
                for m in &compacted {
                    serde_json::to_writer(&mut bytes, m).expect("message serializes");
                    bytes.push(b'\n');
                }
                let written = self
                    .setup
                    .runtime
                    .log_writer
                    .replace(&self.chat_path, bytes);
                ctx.spawn(async move { written.await.unwrap_or_else(|_| Err("log writer stopped".into())) }.into_actor(self).map(
                    move |result, act, ctx| {
                        if !current(turn, act) {
                            return;
                        }
                        let error = match result {
                            Ok(()) => {
                                act.chat = Some(Arc::new(compacted));
                                None
                            }
                            Err(e) => Some(format!("could not compact the history: {e}")),
                        };
                        let request = act.running.as_ref().expect("current").request.clone();
                        let text = match &error {
                            None => format!("**Conversation compacted** ({replaced} messages → 1 summary)\n\n{summary}"),
                            Some(e) => e.clone(),
                        };
                        let kind = if error.is_some() { "error" } else { "info" };
                        act.display(
                            &request,
                            json!({"type": "markdown", "content": text, "kind": kind}),
                            Some(json!({"compactSummary": error.is_none()})),
                            "block",
                        );
                        act.finish(turn, error, ctx);
                    },
                ));
            }
        }
    }
}

/// A `dispatcher:<id>` answer: a JSON value (`None` = void) or ready-made JSON text (history).
pub enum DispatcherReply {
    /// A value, or void.
    Value(Option<Value>),
    /// Raw JSON text for the `result` key.
    Raw(String),
}

/// An invoke on `dispatcher:<id>` from one client.
#[derive(Message)]
#[rtype(result = "RpcResult<DispatcherReply>")]
pub struct DispatcherInvoke {
    /// The caller's connection id in this conversation.
    pub connection_id: String,
    /// Method.
    pub method: String,
    /// Arguments.
    pub args: Args,
}

fn parse_request(m: &str, args: &Args, origin: &str, with_id: bool) -> RpcResult<Request> {
    let text = args.req_str(m, 0, "command")?.to_string();
    let attachments = match args.get(1) {
        None => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(crate::protocol::invalid(m, 1, "attachments", "an array")),
    };
    let options = args
        .opt_object(m, 2, "options")?
        .map(|o| Value::Object(o.clone()));
    let client_request_id = args.get(3).cloned();
    let request_id = if with_id {
        args.opt_str(m, 4, "requestId")?.map(str::to_string)
    } else {
        None
    };
    Ok(Request {
        request_id: request_id.unwrap_or_else(|| Uuid::new_v4().to_string()),
        origin: origin.to_string(),
        client_request_id,
        text,
        attachments,
        options,
        submitted_at: crate::now_millis(),
        started_at: None,
    })
}

impl Handler<DispatcherInvoke> for Conversation {
    type Result = ResponseFuture<RpcResult<DispatcherReply>>;

    fn handle(&mut self, msg: DispatcherInvoke, ctx: &mut Self::Context) -> Self::Result {
        let answer = self.dispatch(msg, ctx);
        self.throttle(ctx);
        answer
    }
}

impl Conversation {
    /// One `dispatcher:<id>` invoke (see [`DispatcherInvoke`]).
    fn dispatch(
        &mut self,
        msg: DispatcherInvoke,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<RpcResult<DispatcherReply>> {
        type Answer = ResponseFuture<RpcResult<DispatcherReply>>;
        let m = msg.method.as_str();
        let value =
            |v: Value| -> Answer { Box::pin(async move { Ok(DispatcherReply::Value(Some(v))) }) };
        let fail = |e: RpcError| -> Answer { Box::pin(async move { Err(e) }) };
        let args = &msg.args;
        match m {
            "submitCommand" | "interrupt" => {
                let request = match parse_request(m, args, &msg.connection_id, m == "submitCommand")
                {
                    Ok(r) => r,
                    Err(e) => return fail(e),
                };
                if m == "interrupt" && !self.stopping {
                    self.cancel_running("interrupted", ctx);
                }
                match self.submit(request, m == "interrupt", ctx) {
                    Err(refusal) => value(refusal),
                    Ok((answer, accepted)) => Box::pin(async move {
                        let answer = match accepted.await {
                            Ok(Ok(())) => answer,
                            Ok(Err(cause)) => {
                                json!({"ok": false, "error": STORAGE_ERROR, "message": cause})
                            }
                            Err(_) => json!({"ok": false, "error": "server_stopping"}),
                        };
                        Ok(DispatcherReply::Value(Some(answer)))
                    }),
                }
            }
            "getDisplayHistory" => {
                let after = match args.opt_int(m, 0, "afterSeq") {
                    Ok(a) => a,
                    Err(e) => return fail(e),
                };
                let log = match &self.log {
                    Ok(l) => l,
                    Err(e) => return fail(RpcError::Internal(e.clone())),
                };
                match log.read_after(after) {
                    HistoryRead::Ready(entries) => {
                        let json = displaylog::history_json(entries);
                        Box::pin(async move { Ok(DispatcherReply::Raw(json)) })
                    }
                    HistoryRead::Disk {
                        path,
                        from,
                        below,
                        from_memory,
                    } => Box::pin(async move {
                        let older = tokio::task::spawn_blocking(move || {
                            displaylog::read_range(&path, from, below)
                        })
                        .await
                        .map_err(|e| RpcError::Internal(e.to_string()))?
                        .map_err(|e| RpcError::Internal(format!("reading the display log: {e}")))?;
                        let all = older
                            .iter()
                            .map(String::as_str)
                            .chain(from_memory.iter().map(|e| &e[..]));
                        Ok(DispatcherReply::Raw(displaylog::history_json(all)))
                    }),
                }
            }
            "getQueueSnapshot" => value(self.snapshot()),
            "cancelCommand" => match args.req_str(m, 0, "requestId") {
                Ok(id) => {
                    let id = id.to_string();
                    let kind = self.cancel_by_id(&id, "cancelled", ctx);
                    value(json!({"kind": kind, "requestId": id}))
                }
                Err(e) => fail(e),
            },
            "promoteCommand" => match args.req_str(m, 0, "requestId") {
                Ok(id) => {
                    let moved = match self.queue.iter().position(|r| r.request_id == id) {
                        Some(pos) => {
                            let r = self.queue.remove(pos).expect("valid position");
                            self.queue.push_front(r);
                            self.version += 1;
                            self.queue_changed();
                            true
                        }
                        None => false,
                    };
                    value(json!(moved))
                }
                Err(e) => fail(e),
            },
            "respondToInteraction" => {
                let response = match args.opt_object(m, 0, "response") {
                    Ok(Some(o)) => o.clone(),
                    Ok(None) => {
                        return fail(crate::protocol::invalid(m, 0, "response", "an object"))
                    }
                    Err(e) => return fail(e),
                };
                if let Some(id) = response.get("interactionId").and_then(Value::as_str) {
                    let value = response.get("value").cloned().unwrap_or(Value::Null);
                    self.resolve_interaction(id, value, ctx);
                }
                Box::pin(async { Ok(DispatcherReply::Value(None)) })
            }
            "respondToChoice" => {
                let id = match args.req_str(m, 0, "choiceId") {
                    Ok(id) => id.to_string(),
                    Err(e) => return fail(e),
                };
                let response = args.get(1).cloned().unwrap_or(Value::Null);
                let Some(choice) = self.choices.remove(&id) else {
                    return fail(RpcError::Message("Choice not found or expired".into()));
                };
                if choice.connection_id != msg.connection_id {
                    self.choices.insert(id, choice);
                    return fail(RpcError::Message("Choice not found or expired".into()));
                }
                ctx.cancel_future(choice.timer);
                let index = match &response {
                    Value::Bool(true) => Ok(0),
                    Value::Bool(false) => Ok(1),
                    Value::Array(a) => a
                        .first()
                        .and_then(Value::as_u64)
                        .map(|n| n as usize)
                        .ok_or_else(|| "no choice".into()),
                    Value::Number(n) => n
                        .as_u64()
                        .map(|n| n as usize)
                        .ok_or_else(|| "bad choice".into()),
                    other => other
                        .get("selected")
                        .and_then(|s| s.as_u64().or_else(|| s.as_array()?.first()?.as_u64()))
                        .map(|n| n as usize)
                        .ok_or_else(|| format!("cannot read the response {other}")),
                };
                let _ = choice.reply.send(index);
                Box::pin(async { Ok(DispatcherReply::Value(None)) })
            }
            "getStatus" => {
                let details = format!(
                    "provider: {}; queue: {}",
                    self.setup.runtime.provider.name(),
                    match (&self.running, self.queue.len()) {
                        (None, 0) => "idle".to_string(),
                        (Some(_), n) => format!("running, {n} queued"),
                        (None, n) => format!("{n} queued"),
                    }
                );
                value(json!({"agents": [], "details": details}))
            }
            "getCommandCompletion" => match args.opt_str(m, 0, "prefix") {
                Ok(prefix) => value(commands::completion(prefix.unwrap_or(""))),
                Err(e) => fail(e),
            },
            "getDeveloperMode" => value(json!(false)),
            "close" => {
                if let Ok(id) = msg.connection_id.parse::<u64>() {
                    if self.drop_client(id, true) {
                        self.after_leave(ctx);
                    }
                }
                Box::pin(async { Ok(DispatcherReply::Value(None)) })
            }
            _ => fail(RpcError::NoHandler(msg.method.clone())),
        }
    }
}

/// A `call` on `dispatcher:<id>` (never answered).
#[derive(Message)]
#[rtype(result = "()")]
pub struct DispatcherCall {
    /// The caller's connection id in this conversation.
    pub connection_id: String,
    /// Method.
    pub method: String,
    /// Arguments.
    pub args: Args,
}

impl Handler<DispatcherCall> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: DispatcherCall, ctx: &mut Self::Context) {
        match msg.method.as_str() {
            "cancelCommandByClientId" => {
                let Some(client_id) = msg.args.get(0).cloned() else {
                    return;
                };
                let running = self
                    .running
                    .as_ref()
                    .filter(|r| r.request.client_request_id.as_ref() == Some(&client_id))
                    .map(|r| r.request.request_id.clone());
                let queued = self
                    .queue
                    .iter()
                    .find(|r| r.client_request_id.as_ref() == Some(&client_id))
                    .map(|r| r.request_id.clone());
                if let Some(id) = running.or(queued) {
                    self.cancel_by_id(&id, "cancelled", ctx);
                }
            }
            "cancelInteraction" => {
                if let Some(id) = msg.args.get(0).and_then(Value::as_str).map(str::to_string) {
                    self.cancel_interaction(&id, true, ctx);
                }
            }
            other => log::debug!("conversation {}: call {other} ignored", self.id_str),
        }
    }
}
