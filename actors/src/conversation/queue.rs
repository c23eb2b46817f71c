//! The command queue: one request runs at a time, the others wait FIFO (an `interrupt` goes
//! first). Submit, start, finish, cancel, promote and the snapshot every queue event carries.
//!
//! Who talks to it: the dispatcher (client requests), the turn (finish), the timers and
//! `Shutdown` (cancel everything). What a started request does is decided in `commands.rs`.
//!
//! # What clients see of one request
//! In TypeAgent's order (`dispatcher` `commandHandlerContext.ts`, `requestQueue.ts`):
//! `requestQueued`, `requestStarted`, `setUserRequest`, `setDisplayInfo` (what runs: the
//! command's words, or `dispatcher request` for an agent turn, then one per tool call), its
//! displays, `notify contextMeter` to everyone when the request changed the context meter
//! (Roundtable's extension, `meter.rs`), `notify commandComplete` with `{result: {metrics,
//! traceId, lastError?}}`, and the
//! queue's snapshot in `queueStateChanged`, sent at most once per [`SNAPSHOT_COALESCE`]
//! (the newest state wins), so a quick request gets one, after its completion.
//!
//! A queued request that is cancelled gets `requestCancelled` only; a running one gets
//! `requestCancelled`, then `commandComplete` with `{result: {cancelled: true, metrics,
//! traceId}}` (and its `command-result` log entry). The `reason` on the wire is TypeAgent's
//! `QueueCancelReason` ([`CancelReason::wire`]); the conversation's own, finer reason goes
//! into the chat note and the logs.

use std::cell::RefCell;
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::dispatcher::InvokeOrigin;
use super::routing::{self, Audience, DisplayMode};
use super::timing::RequestTiming;
use super::Conversation;
use crate::agent::{ChatMessage, Role};
use crate::ids::{ConnectionId, RequestId};
use crate::storage::requests::{AcceptedRequest, Record};

/// Queue cap (`MAX_QUEUE_DEPTH` in TypeAgent).
pub const MAX_QUEUE_DEPTH: usize = 100;
/// Bytes of command text, attachments and options (as sent) waiting in one conversation's
/// queue: 100 requests of up to a frame each (16 MiB) would otherwise hold 1.6 GB, twice (the
/// queue and the open requests of the journal), and every queue snapshot sent to clients
/// carries the texts and options. A request is always taken into an empty queue.
pub const MAX_QUEUED_BYTES: usize = 16 << 20;
/// Request ids remembered after they finish, for `cancelCommand`'s `already_completed`.
const FINISHED_MEMORY: usize = 1024;
/// What the history says of a request that was acknowledged but never finished (crash).
pub const STOPPED_BEFORE_FINISHING: &str =
    "The server stopped before this request finished; it did not complete.";
/// `submitCommand`'s `error` when the request could not be recorded durably.
pub const STORAGE_ERROR: &str = "storage_error";
/// At most one `queueStateChanged` per this long, carrying the newest snapshot (TypeAgent's
/// snapshot coalescer, `queue/snapshotCoalescer.ts`): a request that starts and finishes
/// within it costs its clients one snapshot, not three.
pub const SNAPSHOT_COALESCE: Duration = Duration::from_millis(100);

/// What `cancelCommand` found (its `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was waiting in the queue and is gone.
    CancelledQueued,
    /// It was running; its turn was stopped.
    CancelledRunning,
    /// It finished (or was cancelled) recently.
    AlreadyCompleted,
    /// No such request (or it finished long ago).
    NotFound,
}

impl CancelOutcome {
    /// The protocol's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::CancelledQueued => "cancelled_queued",
            CancelOutcome::CancelledRunning => "cancelled_running",
            CancelOutcome::AlreadyCompleted => "already_completed",
            CancelOutcome::NotFound => "not_found",
        }
    }
}

/// Why a request was cancelled: the chat note and the logs say it as [`as_str`]
/// (`interrupted`, `conversation_closed`, …); `requestCancelled` carries [`wire`], TypeAgent's
/// `QueueCancelReason`.
///
/// [`as_str`]: CancelReason::as_str
/// [`wire`]: CancelReason::wire
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// A client's `cancelCommand` / `cancelCommandByClientId`.
    Cancelled,
    /// An `interrupt` replaced the running request.
    Interrupted,
    /// A new submit replaced a turn stalled on an interaction.
    Superseded,
    /// Nobody stayed joined past the grace period.
    NoClients,
    /// The server is stopping.
    ServerStopping,
    /// The conversation was evicted or deleted.
    ConversationClosed,
    /// Its acceptance could not be recorded durably ([`STORAGE_ERROR`]).
    StorageError,
}

impl CancelReason {
    /// The `reason` of `requestCancelled`: a member of TypeAgent's `QueueCancelReason`
    /// (`"user" | "timeout" | "disconnect" | "server_stopping" | "queue_full" | "no_clients"`),
    /// as TypeAgent's server emits them: `user` for every cancel a client asked for
    /// (`cancelCommand`, `cancelCommandByClientId`, `interrupt`, a submit superseding a turn
    /// stalled on a question), `no_clients` after the grace period, `server_stopping` at
    /// shutdown.
    ///
    /// Two reasons TypeAgent has no case for map to `server_stopping`, the reason that says
    /// "the server side abandoned this request and nobody asked it to" (TypeAgent's client
    /// library rejects `awaitCommand` with `ServerStoppingError` for it, and resolves
    /// `{cancelled: true}` for every other reason, which would tell the submitter it was
    /// cancelled on purpose):
    /// - a conversation deleted (or moved to another cluster node) under its queue: its
    ///   request will never run here;
    /// - an acceptance that could not be made durable: the submitter's own answer is already
    ///   `{ok: false, error: "storage_error"}`; the others learn the entry is gone because the
    ///   server could not keep it, not because someone cancelled it.
    pub fn wire(self) -> &'static str {
        match self {
            CancelReason::Cancelled | CancelReason::Interrupted | CancelReason::Superseded => {
                "user"
            }
            CancelReason::NoClients => "no_clients",
            CancelReason::ServerStopping
            | CancelReason::ConversationClosed
            | CancelReason::StorageError => "server_stopping",
        }
    }

    /// The conversation's own name for it (the chat note, the logs).
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Cancelled => "cancelled",
            CancelReason::Interrupted => "interrupted",
            CancelReason::Superseded => "superseded",
            CancelReason::NoClients => "no_clients",
            CancelReason::ServerStopping => "server_stopping",
            CancelReason::ConversationClosed => "conversation_closed",
            CancelReason::StorageError => STORAGE_ERROR,
        }
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `RequestId` as the protocol spells it.
pub(super) fn request_id_obj(
    connection_id: ConnectionId,
    request_id: &RequestId,
    client_request_id: &Option<Value>,
) -> Value {
    let mut v = json!({"connectionId": connection_id, "requestId": request_id});
    if let Some(c) = client_request_id {
        v["clientRequestId"] = c.clone();
    }
    v
}

/// One submitted command.
#[derive(Debug, Clone)]
pub(super) struct Request {
    /// Server-side id (the client's `requestId` argument, or a fresh UUID).
    pub(super) request_id: RequestId,
    /// Connection id of the client that submitted it.
    pub(super) origin: ConnectionId,
    /// The client's opaque id, echoed back.
    pub(super) client_request_id: Option<Value>,
    /// The command text.
    pub(super) text: String,
    /// Attachments (kept for the agent; not echoed).
    pub(super) attachments: Vec<Value>,
    /// Bytes of `text`, `attachments` and `options` as sent: what [`MAX_QUEUED_BYTES`]
    /// counts.
    pub(super) size: usize,
    /// Submit options, echoed in the queue entry.
    pub(super) options: Option<Value>,
    /// ms since epoch.
    pub(super) submitted_at: u64,
    /// ms since epoch, once running.
    pub(super) started_at: Option<u64>,
    /// The W3C trace id of the request: the client's (`metadata.traceparent` of its
    /// `dispatcher` invoke) or a fresh one. In its log lines and `CommandResult.traceId`.
    pub(super) trace_id: String,
    /// The directory it works in, once the working-directory policy resolved it at submit
    /// (also in `options.workingDirectory`).
    pub(super) working_directory: Option<PathBuf>,
}

impl Request {
    /// `RequestId` as the protocol spells it.
    pub(super) fn id_obj(&self) -> Value {
        request_id_obj(self.origin, &self.request_id, &self.client_request_id)
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
pub(super) struct Running {
    /// The request, shared: every display of the turn names it, and a clone of the handle
    /// is a count, not a copy of its text and attachments.
    pub(super) request: Rc<Request>,
    /// Turn number; events from other turns are stale.
    pub(super) turn: u64,
    /// The spawned agent loop, if this is an agent turn.
    pub(super) handle: Option<SpawnHandle>,
    /// Interaction the turn waits on (a new submit supersedes it).
    pub(super) blocked_on: Option<String>,
    /// Whether the last snapshot sent said `blockedOn: "interaction"`: when `blocked_on`
    /// changes (a question opens or is answered) a new one is due.
    pub(super) blocked_announced: bool,
    /// Its phases so far, for `CommandResult.metrics`.
    pub(super) timing: RequestTiming,
    /// What its agent turn booked for the turn's end (client actions, a handoff).
    pub(super) after_turn: super::turn_events::AfterTurn,
    /// The source of the handoff it is running (reading or summarizing), if any: a delete
    /// meanwhile says the handoff did not happen.
    pub(super) handing_off: Option<String>,
    /// Its model's answer as it is being written (`streaming.rs`).
    pub(super) stream: super::streaming::AnswerStream,
    /// The text its agent turn runs on (for a run again after a compaction).
    pub(super) agent_text: Option<String>,
    /// Its model refused it once as longer than the context window, and the history was
    /// compacted for it: a second refusal is its error.
    pub(super) overflowed: bool,
}

impl Running {
    /// Its `QueuedRequest` (`state: "running"`, `blockedOn: "interaction"` while it waits on
    /// a question).
    fn entry(&self) -> Value {
        let mut entry = self.request.entry("running");
        if self.blocked_on.is_some() {
            entry["blockedOn"] = "interaction".into();
        }
        entry
    }
}

impl Conversation {
    /// The `QueueSnapshot` of `getQueueSnapshot`, `queueStateChanged` and the join answer.
    /// `paused` is always false: TypeAgent's queue never pauses.
    pub(super) fn snapshot(&self) -> Value {
        json!({
            "running": self.running.as_ref().map(Running::entry),
            "queued": self.queue.iter().map(|r| r.entry("queued")).collect::<Vec<_>>(),
            "paused": false,
            "version": self.version,
        })
    }

    /// The queue changed: every client gets the snapshot in a `queueStateChanged`, at most
    /// once per [`SNAPSHOT_COALESCE`] (the first change arms the timer; the snapshot is
    /// taken when it fires, so the newest state wins).
    pub(super) fn queue_changed(&mut self, ctx: &mut Context<Self>) {
        if self.snapshot_timer.is_some() {
            return;
        }
        self.snapshot_timer = Some(ctx.run_later(SNAPSHOT_COALESCE, |act, _| {
            act.snapshot_timer = None;
            if let Some(r) = act.running.as_mut() {
                r.blocked_announced = r.blocked_on.is_some();
            }
            let snapshot = act.snapshot();
            act.broadcast("queueStateChanged", json!([snapshot]), None);
        }));
    }

    /// A new snapshot is due when the running request started or stopped waiting on a
    /// question since the last one went out (its `blockedOn` changed).
    pub(super) fn announce_blocked_change(&mut self, ctx: &mut Context<Self>) {
        if self
            .running
            .as_ref()
            .is_some_and(|r| r.blocked_on.is_some() != r.blocked_announced)
        {
            self.queue_changed(ctx);
        }
    }

    /// Where `request` works: its `options.workingDirectory` (else the directory its client
    /// used last) through the working-directory policy. The options then carry the resolved
    /// directory (or none), as TypeAgent's server rewrites them before queueing.
    fn resolve_working_directory(&mut self, request: &mut Request) {
        let requested = request
            .options
            .as_ref()
            .and_then(|o| o.get("workingDirectory"))
            .filter(|w| !w.is_null());
        let slot = self.clients.get_mut(&request.origin);
        let proposed = match requested {
            Some(Value::String(dir)) => Some(dir.clone()),
            // Not a path at all: rejected, like a path that is no directory.
            Some(_) => Some(String::new()),
            None => slot
                .as_ref()
                .and_then(|s| s.working_directory.as_ref())
                .map(|d| d.to_string_lossy().into_owned()),
        };
        let resolution = self
            .setup
            .runtime
            .working_directory
            .resolve(proposed.as_deref());
        if resolution.rejected {
            log::info!(
                "conversation {}: request {} trace={}: working directory {:?} is not an allowed \
                 directory; using {:?}",
                self.setup.id,
                request.request_id,
                request.trace_id,
                proposed.unwrap_or_default(),
                resolution.working_directory
            );
        }
        if let (Some(slot), Some(dir)) = (slot, &resolution.working_directory) {
            slot.working_directory = Some(dir.clone());
        }
        let mut options = match request.options.take() {
            Some(Value::Object(o)) => o,
            _ => serde_json::Map::new(),
        };
        options.remove("workingDirectory");
        if let Some(dir) = &resolution.working_directory {
            options.insert(
                "workingDirectory".into(),
                dir.to_string_lossy().into_owned().into(),
            );
        }
        request.options = (!options.is_empty()).then_some(Value::Object(options));
        request.working_directory = resolution.working_directory;
    }

    /// Queues a request (`front`: an `interrupt`, which goes first and then cancels the
    /// running request, as TypeAgent's `interrupt` does). `Err` is a refusal to answer at
    /// once; `Ok` resolves once the acceptance is durable (a failed write cancels the request
    /// and turns the answer into a `storage_error` refusal) with the answer, or with `None`
    /// when it was queued on the requester's socket at the barrier's place (`in_line`: ahead
    /// of every call of the request).
    pub(super) fn submit(
        &mut self,
        mut request: Request,
        front: bool,
        in_line: Option<InvokeOrigin>,
        ctx: &mut Context<Self>,
    ) -> Result<oneshot::Receiver<Option<Value>>, Value> {
        if self.stopping {
            return Err(json!({"ok": false, "error": "server_stopping"}));
        }
        if let Err(e) = &self.log {
            return Err(json!({"ok": false, "error": e}));
        }
        if self.queue.len() >= MAX_QUEUE_DEPTH {
            return Err(json!({"ok": false, "error": "queue_full", "maxDepth": MAX_QUEUE_DEPTH}));
        }
        let queued_bytes: usize = self.queue.iter().map(|r| r.size).sum();
        if !self.queue.is_empty() && queued_bytes + request.size > MAX_QUEUED_BYTES {
            return Err(json!({
                "ok": false,
                "error": "queue_full",
                "maxDepth": MAX_QUEUE_DEPTH,
                "maxBytes": MAX_QUEUED_BYTES,
            }));
        }
        if let Some(cause) = self.setup.metrics.storage_failure() {
            return Err(json!({"ok": false, "error": STORAGE_ERROR, "message": cause.client}));
        }
        // A new submit supersedes a turn stalled on an interaction.
        if !front
            && self
                .running
                .as_ref()
                .is_some_and(|r| r.blocked_on.is_some())
        {
            self.cancel_running(CancelReason::Superseded, ctx);
        }
        self.resolve_working_directory(&mut request);
        self.journal(Record::Accepted(AcceptedRequest {
            request_id: request.request_id.clone(),
            connection_id: request.origin,
            client_request_id: request.client_request_id.clone(),
            command: request.text.clone(),
            submitted_at: request.submitted_at,
        }));
        let (accepted_tx, accepted_rx) = oneshot::channel();
        // The answer depends on whether this submit started the request (below); the barrier
        // resolves later, when it is known.
        let answer_slot: Rc<RefCell<Option<Value>>> = Rc::default();
        let answer_later = answer_slot.clone();
        let origin = request.origin;
        let request_id = request.request_id.clone();
        let entry = request.entry("queued");
        if front {
            self.queue.push_front(request.clone());
        } else {
            self.queue.push_back(request.clone());
        }
        // The acceptance's barrier, registered once the request is queued: a barrier follows
        // soon (its completion's), so with the node log the fsync may wait for it, and an
        // idle conversation's fast turn (a command, an echo) makes one fsync, not two in a
        // row. A slow turn's answer waits at most `SYNC_LINGER` more.
        self.after_durable(ctx, move |act, written, ctx| {
            let answer = match &written {
                Ok(()) => answer_later.borrow_mut().take().expect("set by submit"),
                Err(cause) => json!({"ok": false, "error": STORAGE_ERROR, "message": cause}),
            };
            let answer = match in_line {
                Some(invoke) => {
                    act.answer_in_line(origin, &invoke, &answer);
                    None
                }
                None => Some(answer),
            };
            if let Err(e) = &written {
                log::error!(
                    "conversation {}: request {request_id} could not be recorded: {e}",
                    act.setup.id
                );
                act.cancel_by_id(&request_id, CancelReason::StorageError, ctx);
            }
            let _ = accepted_tx.send(answer);
        });
        self.version += 1;
        log::debug!(
            "conversation {}: request {} trace={} queued{}",
            self.setup.id,
            request.request_id,
            request.trace_id,
            if front { " first (interrupt)" } else { "" }
        );
        self.broadcast("requestQueued", json!([entry, self.version]), None);
        self.queue_changed(ctx);
        if front && self.running.is_some() {
            // The interrupt is at the head: cancelling the running request starts it.
            self.cancel_running(CancelReason::Interrupted, ctx);
        } else {
            self.start_next(ctx);
        }
        // Started by this submit (and perhaps already finished, as an `@` command does):
        // `running` with its `startedAt`, as TypeAgent answers on an idle queue.
        let started = self
            .last_started
            .as_ref()
            .filter(|(id, _)| *id == request.request_id)
            .map(|(_, at)| *at);
        let mut entry = request.entry(if started.is_some() {
            "running"
        } else {
            "queued"
        });
        if let Some(at) = started {
            entry["startedAt"] = at.into();
        }
        *answer_slot.borrow_mut() = Some(json!({"ok": true, "entry": entry}));
        Ok(accepted_rx)
    }

    /// Queues the answer to `invoke` on the socket of `origin` (when it is still here), in
    /// line with the calls this conversation sends it.
    fn answer_in_line(&mut self, origin: ConnectionId, invoke: &InvokeOrigin, answer: &Value) {
        let id = self.setup.id;
        if let Some(slot) = self.clients.get_mut(&origin).filter(|s| !s.lost) {
            let frame =
                crate::protocol::invoke_result(&invoke.channel, invoke.call_id, Some(answer));
            let sent = slot.output.send_frame(frame);
            routing::settle(id, origin, slot, sent);
        }
    }

    /// Starts the first queued request when nothing runs (`requestStarted`, `user-request`,
    /// `setUserRequest`, `setDisplayInfo`, then the command or agent turn it asks for).
    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.running.is_some() || self.stopping {
            return;
        }
        let Some(mut request) = self.queue.pop_front() else {
            self.queue_changed(ctx);
            return;
        };
        let timing = RequestTiming::start();
        let started_at = crate::clock::now_millis();
        request.started_at = Some(started_at);
        self.last_started = Some((request.request_id.clone(), started_at));
        self.turns += 1;
        let turn = self.turns;
        self.version += 1;
        self.running = Some(Running {
            request: Rc::new(request.clone()),
            turn,
            handle: None,
            blocked_on: None,
            blocked_announced: false,
            timing,
            after_turn: Default::default(),
            handing_off: None,
            stream: Default::default(),
            agent_text: None,
            overflowed: false,
        });
        self.broadcast(
            "requestStarted",
            json!([request.entry("running"), self.version]),
            None,
        );
        self.queue_changed(ctx);
        log::debug!(
            "conversation {}: request {} started (trace={})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        // The journal's `started` goes before the `user-request` it names: whatever prefix of
        // the writes survives a crash (or reaches another node through the log stream), a
        // `user-request` on disk always has its `started`, so recovery never writes a second
        // one (the nemesis found that duplicate after a kill -9 between the two).
        if let Ok(log) = &self.log {
            self.journal(Record::Started {
                request_id: request.request_id.clone(),
                seq: log.next_seq(),
            });
        }
        self.log_entry(
            json!({"type": "user-request", "requestId": request.id_obj(), "command": request.text}),
        );
        self.broadcast(
            "setUserRequest",
            json!([request.id_obj(), request.text]),
            Some(request.origin),
        );
        if let Some((source, words)) = super::turn_events::request_display_info(&request.text) {
            self.set_display_info(&request, source, None, json!(words));
        }
        if let Some(r) = self.running.as_mut() {
            r.timing.parsed();
        }
        self.run_request(turn, &request, ctx);
    }

    /// `setDisplayInfo(requestId, source, actionIndex, action)` to every client (what the
    /// request runs now: its command's words, or one tool call), logged as a
    /// `set-display-info` entry (`actionIndex` / `action` only when given).
    pub(super) fn set_display_info(
        &mut self,
        request: &Request,
        source: &str,
        action_index: Option<usize>,
        action: Value,
    ) {
        let mut entry =
            json!({"type": "set-display-info", "requestId": request.id_obj(), "source": source});
        if let Some(i) = action_index {
            entry["actionIndex"] = i.into();
        }
        if !action.is_null() {
            entry["action"] = action.clone();
        }
        self.log_entry(entry);
        self.broadcast(
            "setDisplayInfo",
            json!([request.id_obj(), source, action_index, action]),
            Some(request.origin),
        );
    }

    /// Completes the running request: `command-result`, then `commandComplete` with its
    /// `CommandResult` (`metrics`, `traceId`, `lastError` when it failed).
    pub(super) fn finish(&mut self, turn: u64, error: Option<String>, ctx: &mut Context<Self>) {
        if self.is_current(turn) {
            self.stream_cut_short(super::streaming::CutShort::Incomplete, ctx);
        }
        let Some(running) = self.running.take_if(|r| r.turn == turn) else {
            return;
        };
        self.forget_checkpoints(&running);
        let metrics = running.timing.metrics();
        let request = running.request;
        log::debug!(
            "conversation {}: request {} trace={} finished{} in {:.1} ms",
            self.setup.id,
            request.request_id,
            request.trace_id,
            if error.is_some() {
                " with an error"
            } else {
                ""
            },
            metrics["duration"].as_f64().unwrap_or_default()
        );
        self.log_entry(json!({
            "type": "command-result",
            "requestId": request.id_obj(),
            "metrics": metrics,
            "traceId": request.trace_id,
        }));
        self.remember_finished(request.request_id.clone());
        // A meter change the request made (its line is queued before the barrier below) is
        // announced with it, before commandComplete.
        let meter_notice = self.take_meter_notice();
        // commandComplete only once the result is on disk; the journal closes it after that.
        self.after_durable(ctx, move |act, written, _| {
            let error = match (error, written) {
                (error, Ok(())) => {
                    act.journal_closed_after_durable(request.request_id.clone());
                    if let Some(notice) = meter_notice {
                        act.emit(notice, &Audience::Everyone);
                    }
                    error
                }
                (error, Err(w)) => {
                    log::error!(
                        "conversation {}: result of {} not saved: {w}",
                        act.setup.id,
                        request.request_id
                    );
                    let saved = format!("the result could not be saved: {w}");
                    Some(error.map_or(saved.clone(), |e| format!("{e} ({saved})")))
                }
            };
            let mut result = json!({"metrics": metrics, "traceId": request.trace_id});
            if let Some(e) = &error {
                result["lastError"] = e.clone().into();
                result["disposition"] = failure_disposition(&request.text, &metrics);
            }
            act.broadcast(
                "notify",
                json!([
                    request.id_obj(),
                    "commandComplete",
                    {"result": result},
                    "system",
                    null,
                    null
                ]),
                Some(request.origin),
            );
        });
        self.version += 1;
        self.start_next(ctx);
    }

    /// Shows `content` for the running request (one block), then completes it.
    pub(super) fn finish_showing(
        &mut self,
        turn: u64,
        request: &Request,
        content: Value,
        error: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        self.display(request, content, None, DisplayMode::Block);
        self.finish(turn, error, ctx);
    }

    /// Remembers a finished id for `already_completed` (the last [`FINISHED_MEMORY`]).
    fn remember_finished(&mut self, id: RequestId) {
        self.finished.push_back(id);
        if self.finished.len() > FINISHED_MEMORY {
            self.finished.pop_front();
        }
    }

    /// Cancels a queued request; false when it is not queued.
    fn cancel_queued(
        &mut self,
        request_id: &RequestId,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Some(pos) = self.queue.iter().position(|r| &r.request_id == request_id) else {
            return false;
        };
        let request = self.queue.remove(pos).expect("position is valid");
        self.version += 1;
        self.journal(Record::Closed {
            request_id: request.request_id.clone(),
        });
        log::debug!(
            "conversation {}: queued request {} trace={} cancelled ({reason})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        self.announce_cancel(request.request_id.clone(), reason, None, ctx);
        self.remember_finished(request.request_id);
        self.queue_changed(ctx);
        true
    }

    /// Cancels every queued request (not the running one); returns how many.
    pub(super) fn cancel_all_queued(
        &mut self,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> usize {
        let queued: Vec<RequestId> = self.queue.iter().map(|r| r.request_id.clone()).collect();
        for id in &queued {
            self.cancel_queued(id, reason, ctx);
        }
        queued.len()
    }

    /// `requestCancelled`, once the cancellation is on disk; for a request that was running,
    /// `completed` is its `commandComplete` (`{result: {cancelled: true, …}}`, to its
    /// originator's audience), which follows at once.
    fn announce_cancel(
        &mut self,
        request_id: RequestId,
        reason: CancelReason,
        completed: Option<(Value, ConnectionId)>,
        ctx: &mut Context<Self>,
    ) {
        let version = self.version;
        self.after_durable(ctx, move |act, written, _| {
            if let Err(e) = written {
                log::error!(
                    "conversation {}: cancellation of {request_id} not saved: {e}",
                    act.setup.id
                );
            }
            log::info!(
                "conversation {}: {request_id} cancelled ({reason}), saved and announced \
                 (requestCancelled reason {})",
                act.setup.id,
                reason.wire()
            );
            act.broadcast(
                "requestCancelled",
                json!([request_id, reason.wire(), version]),
                None,
            );
            if let Some((complete, origin)) = completed {
                act.broadcast("notify", complete, Some(origin));
            }
        });
    }

    /// Stops the running request (its turn, its questions), notes it in the chat history,
    /// logs its `command-result`, announces it (`requestCancelled`, then `commandComplete`
    /// with `cancelled: true`) and starts the next one. Nothing happens when nothing runs.
    pub(super) fn cancel_running(&mut self, reason: CancelReason, ctx: &mut Context<Self>) {
        // The answer so far stays, marked cancelled.
        self.stream_cut_short(super::streaming::CutShort::Cancelled, ctx);
        let Some(running) = self.running.take() else {
            return;
        };
        self.forget_checkpoints(&running);
        let metrics = running.timing.metrics();
        if let Some(h) = running.handle {
            ctx.cancel_future(h);
        }
        self.cancel_questions_of(&running.request.request_id, ctx);
        // Keep the chat history coherent: the user's message and a note, no dangling tool use.
        self.commit_chat(vec![
            ChatMessage::text(Role::User, running.request.text.clone()),
            ChatMessage::text(Role::Assistant, format!("(request cancelled: {reason})")),
        ]);
        let request = running.request;
        self.log_entry(json!({
            "type": "command-result",
            "requestId": request.id_obj(),
            "metrics": metrics,
            "traceId": request.trace_id,
        }));
        let complete = json!([
            request.id_obj(),
            "commandComplete",
            {"result": {"cancelled": true, "metrics": metrics, "traceId": request.trace_id}},
            "system",
            null,
            null
        ]);
        self.version += 1;
        self.journal(Record::Closed {
            request_id: request.request_id.clone(),
        });
        self.announce_cancel(
            request.request_id.clone(),
            reason,
            Some((complete, request.origin)),
            ctx,
        );
        log::info!(
            "conversation {}: running request {} trace={} cancelled ({reason})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        self.remember_finished(request.request_id.clone());
        self.start_next(ctx);
    }

    /// Cancels a request wherever it is.
    pub(super) fn cancel_by_id(
        &mut self,
        request_id: &RequestId,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> CancelOutcome {
        if self.cancel_queued(request_id, reason, ctx) {
            CancelOutcome::CancelledQueued
        } else if self
            .running
            .as_ref()
            .is_some_and(|r| &r.request.request_id == request_id)
        {
            self.cancel_running(reason, ctx);
            CancelOutcome::CancelledRunning
        } else if self.finished.iter().any(|f| f == request_id) {
            CancelOutcome::AlreadyCompleted
        } else {
            CancelOutcome::NotFound
        }
    }

    /// The server id of the running or queued request with this `clientRequestId` (running
    /// first).
    pub(super) fn find_by_client_id(&self, client_id: &Value) -> Option<RequestId> {
        let running = self
            .running
            .as_ref()
            .filter(|r| r.request.client_request_id.as_ref() == Some(client_id))
            .map(|r| r.request.request_id.clone());
        let queued = self
            .queue
            .iter()
            .find(|r| r.client_request_id.as_ref() == Some(client_id))
            .map(|r| r.request_id.clone());
        running.or(queued)
    }

    /// Moves a queued request to the front; false when it is not queued (running, finished
    /// or unknown). Already first: true and nothing changes (no new version, no
    /// `queueStateChanged`), as TypeAgent's `requestQueue.promote`.
    pub(super) fn promote(&mut self, request_id: &RequestId, ctx: &mut Context<Self>) -> bool {
        let Some(pos) = self.queue.iter().position(|r| &r.request_id == request_id) else {
            return false;
        };
        if pos == 0 {
            return true;
        }
        let r = self.queue.remove(pos).expect("valid position");
        self.queue.push_front(r);
        self.version += 1;
        self.queue_changed(ctx);
        true
    }

    /// The queue part of `getStatus`'s details: `idle`, `running, 2 queued`, `3 queued`.
    pub(super) fn queue_status(&self) -> String {
        match (&self.running, self.queue.len()) {
            (None, 0) => "idle".to_string(),
            (Some(_), n) => format!("running, {n} queued"),
            (None, n) => format!("{n} queued"),
        }
    }
}

/// Where a failed request failed, as TypeAgent's `CommandResult.disposition`: an `@` command
/// (`command`; `@dispatcher request <text>` is the agent turn it runs), or an agent turn
/// (`action`), with side effects possible once a tool ran (`metrics.actions`).
fn failure_disposition(text: &str, metrics: &Value) -> Value {
    let path = match super::commands::parse(text) {
        Some(super::commands::Command::Request(inner))
            if super::commands::parse(&inner).is_none() =>
        {
            "action"
        }
        Some(_) => "command",
        None => "action",
    };
    json!({
        "status": "failed",
        "path": path,
        "mayHaveSideEffects": metrics["actions"].as_array().is_some_and(|a| !a.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_path_and_whether_tools_ran() {
        let none = json!({"actions": []});
        let ran = json!({"actions": [{"tool": "calculate"}]});
        let path = |text: &str| failure_disposition(text, &none)["path"].clone();
        assert_eq!(path("@system bogus"), "command");
        assert_eq!(path("@dispatcher request @system bogus"), "command");
        assert_eq!(path("@dispatcher request what is 2+3"), "action");
        assert_eq!(path("what is 2+3"), "action");
        assert_eq!(
            failure_disposition("what is 2+3", &ran),
            json!({"status": "failed", "path": "action", "mayHaveSideEffects": true})
        );
    }
}
