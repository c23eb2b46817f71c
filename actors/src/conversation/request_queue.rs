//! The command queue as a plain state machine: which requests wait and in what order, which
//! one runs under which turn number, the queue's `version`, the snapshot clients see, and the
//! recently finished ids `cancelCommand` still recognizes. No actix, no I/O: each method takes
//! an event (a submit, a start, a finish, a cancel, a promote) and returns what happened, and
//! the actor (`queue.rs`) turns that into calls, journal records and timers, in that order.
//!
//! Who talks to it: only the `Conversation` actor. Its rules are unit-tested below as data.

use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;

use actix::SpawnHandle;
use serde_json::{json, Value};

use super::timing::RequestTiming;
use crate::ids::{ConnectionId, RequestId};

/// Queue cap (`MAX_QUEUE_DEPTH` in TypeAgent).
pub const MAX_QUEUE_DEPTH: usize = 100;
/// Bytes of command text, attachments and options (as sent) waiting in one conversation's
/// queue: 100 requests of up to a frame each (16 MiB) would otherwise hold 1.6 GB, twice (the
/// queue and the open requests of the journal), and every queue snapshot sent to clients
/// carries the texts and options. A request is always taken into an empty queue.
pub const MAX_QUEUED_BYTES: usize = 16 << 20;
/// Request ids remembered after they finish, for `cancelCommand`'s `already_completed`.
const FINISHED_MEMORY: usize = 1024;
/// `submitCommand`'s `error` when the request could not be recorded durably.
pub const STORAGE_ERROR: &str = "storage_error";

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
    pub(super) fn entry(&self, state: &str) -> Value {
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

/// What the running request still does once its agent loop has ended (booked through
/// `ConversationSink`), even when the turn then failed (the model asked, and was told it
/// would happen); nothing of it when the request is cancelled.
#[derive(Debug, Default)]
pub(super) struct AfterTurn {
    /// `takeAction` calls (action, data) for the requester, in the order the model asked.
    pub(super) client_actions: Vec<(String, Value)>,
    /// The handoff the model asked for: its source, as named.
    pub(super) handoff: Option<String>,
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
    pub(super) after_turn: AfterTurn,
    /// The source of the handoff it is running (reading or summarizing), if any: a delete
    /// meanwhile says the handoff did not happen.
    pub(super) handing_off: Option<String>,
    /// Its model's answer as it is being written (`streaming.rs`).
    pub(super) stream: super::answer_stream::AnswerStream,
    /// The text its agent turn runs on (for a run again after a compaction).
    pub(super) agent_text: Option<String>,
    /// Its model refused it once as longer than the context window, and the history was
    /// compacted for it: a second refusal is its error.
    pub(super) overflowed: bool,
}

impl Running {
    /// `request`, started as `turn`, with nothing booked yet.
    fn new(request: Rc<Request>, turn: u64) -> Running {
        Running {
            request,
            turn,
            handle: None,
            blocked_on: None,
            blocked_announced: false,
            timing: RequestTiming::start(),
            after_turn: Default::default(),
            handing_off: None,
            stream: Default::default(),
            agent_text: None,
            overflowed: false,
        }
    }

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

/// The queue: waiting requests (FIFO, an `interrupt` first), the running one, and the
/// counters every queue event carries.
#[derive(Default)]
pub(super) struct RequestQueue {
    /// Waiting requests, in the order they will start.
    waiting: VecDeque<Request>,
    /// Bytes of the waiting requests (their [`Request::size`]): what [`MAX_QUEUED_BYTES`]
    /// bounds, kept as a sum so a submit does not walk the queue.
    waiting_bytes: usize,
    /// The request being worked on.
    running: Option<Running>,
    /// Bumped on every queue change (`version` of queue events).
    version: u64,
    /// Turn counter: each started request (and each client agent's `handleChoice`) gets the
    /// next number, so events of an earlier turn are recognized as stale.
    turns: u64,
    /// The request started last, with its `startedAt`: a submit's answer says `running` for
    /// a request it started, also when that request (an `@` command) already finished before
    /// the answer was built, as TypeAgent's entry does.
    last_started: Option<(RequestId, u64)>,
    /// Ids of recently finished (or cancelled) requests, oldest first, at most
    /// [`FINISHED_MEMORY`].
    finished: VecDeque<RequestId>,
    /// A `queueStateChanged` is due and its coalescing timer is armed: later changes ride on
    /// the snapshot it takes when it fires.
    snapshot_armed: bool,
}

/// What a submit does after its request is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterEnqueue {
    /// An `interrupt` is at the head and a request runs: cancelling it starts the interrupt.
    InterruptRunning,
    /// Start the head if nothing runs.
    StartNext,
}

/// What [`RequestQueue::enqueue`] did.
#[derive(Debug)]
pub(super) struct Enqueued {
    /// The request's `QueuedRequest` (`state: "queued"`), for `requestQueued` and the answer.
    pub(super) entry: Value,
    /// The queue's version after it.
    pub(super) version: u64,
    /// What comes next.
    pub(super) then: AfterEnqueue,
}

/// What [`RequestQueue::start_next`] found.
#[derive(Debug)]
pub(super) enum Start {
    /// A request runs already.
    Busy,
    /// Nothing waits.
    Empty,
    /// The head started as `turn`; the queue is at `version`.
    Started {
        /// The request, now also the running one's.
        request: Rc<Request>,
        /// Its turn number.
        turn: u64,
        /// The queue's version after it.
        version: u64,
    },
}

/// Where a request id is, for `cancelCommand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Location {
    /// Waiting.
    Queued,
    /// Running.
    Running,
    /// Finished or cancelled recently (one of the last [`FINISHED_MEMORY`]).
    Finished,
    /// Unknown, or finished long ago.
    Unknown,
}

/// What [`RequestQueue::promote`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Promotion {
    /// Not waiting (running, finished or unknown).
    NotQueued,
    /// First already: nothing changed (no new version), as TypeAgent's
    /// `requestQueue.promote`.
    AlreadyFirst,
    /// Moved to the front: the queue changed.
    Moved,
}

impl RequestQueue {
    /// `submitCommand`'s refusal of a request of `size` bytes for room, if any: past
    /// [`MAX_QUEUE_DEPTH`] waiting, or past [`MAX_QUEUED_BYTES`] unless the queue is empty.
    pub(super) fn refusal(&self, size: usize) -> Option<Value> {
        if self.waiting.len() >= MAX_QUEUE_DEPTH {
            return Some(json!({"ok": false, "error": "queue_full", "maxDepth": MAX_QUEUE_DEPTH}));
        }
        if !self.waiting.is_empty() && self.waiting_bytes + size > MAX_QUEUED_BYTES {
            return Some(json!({
                "ok": false,
                "error": "queue_full",
                "maxDepth": MAX_QUEUE_DEPTH,
                "maxBytes": MAX_QUEUED_BYTES,
            }));
        }
        None
    }

    /// A new submit (not an `interrupt`, which cancels anyway) supersedes a running request
    /// stalled on an interaction.
    pub(super) fn supersedes(&self, front: bool) -> bool {
        !front && self.running_is_blocked()
    }

    /// The running request waits on an interaction.
    pub(super) fn running_is_blocked(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.blocked_on.is_some())
    }

    /// Queues `request`, last (or first: an `interrupt`).
    pub(super) fn enqueue(&mut self, request: Request, front: bool) -> Enqueued {
        let entry = request.entry("queued");
        self.waiting_bytes += request.size;
        if front {
            self.waiting.push_front(request);
        } else {
            self.waiting.push_back(request);
        }
        self.version += 1;
        let then = if front && self.running.is_some() {
            AfterEnqueue::InterruptRunning
        } else {
            AfterEnqueue::StartNext
        };
        Enqueued {
            entry,
            version: self.version,
            then,
        }
    }

    /// `submitCommand`'s answer for the request queued as `queued_entry`: `running` with its
    /// `startedAt` when its submit started it (even if it finished since), else `queued`.
    pub(super) fn submit_answer(&self, mut queued_entry: Value) -> Value {
        let started = self
            .last_started
            .as_ref()
            .filter(|(id, _)| queued_entry["requestId"] == json!(id))
            .map(|(_, at)| *at);
        if let Some(at) = started {
            queued_entry["state"] = "running".into();
            queued_entry["startedAt"] = at.into();
        }
        json!({"ok": true, "entry": queued_entry})
    }

    /// Starts the head when nothing runs, at `now` (ms since epoch).
    pub(super) fn start_next(&mut self, now: u64) -> Start {
        if self.running.is_some() {
            return Start::Busy;
        }
        let Some(mut request) = self.waiting.pop_front() else {
            return Start::Empty;
        };
        self.waiting_bytes -= request.size;
        request.started_at = Some(now);
        self.last_started = Some((request.request_id.clone(), now));
        let turn = self.next_turn();
        self.version += 1;
        let request = Rc::new(request);
        self.running = Some(Running::new(request.clone(), turn));
        Start::Started {
            request,
            turn,
            version: self.version,
        }
    }

    /// The running request of `turn` is done: it leaves (remembered as finished). `None` when
    /// `turn` is not the running one's (a stale event).
    pub(super) fn finish(&mut self, turn: u64) -> Option<Running> {
        let running = self.running.take_if(|r| r.turn == turn)?;
        self.closed(&running.request.request_id);
        Some(running)
    }

    /// Stops the running request, whatever its turn: it leaves (remembered as finished), with
    /// the queue's version after it.
    pub(super) fn take_running(&mut self) -> Option<(Running, u64)> {
        let running = self.running.take()?;
        let version = self.closed(&running.request.request_id);
        Some((running, version))
    }

    /// Removes a waiting request (remembered as finished), with the queue's version after it;
    /// `None` when it is not waiting.
    pub(super) fn cancel_queued(&mut self, request_id: &RequestId) -> Option<(Request, u64)> {
        let pos = self
            .waiting
            .iter()
            .position(|r| &r.request_id == request_id)?;
        let request = self.waiting.remove(pos).expect("position is valid");
        self.waiting_bytes -= request.size;
        let version = self.closed(&request.request_id);
        Some((request, version))
    }

    /// The ids of the waiting requests, in order.
    pub(super) fn waiting_ids(&self) -> Vec<RequestId> {
        self.waiting.iter().map(|r| r.request_id.clone()).collect()
    }

    /// Where `request_id` is.
    pub(super) fn locate(&self, request_id: &RequestId) -> Location {
        if self.waiting.iter().any(|r| &r.request_id == request_id) {
            Location::Queued
        } else if self
            .running
            .as_ref()
            .is_some_and(|r| &r.request.request_id == request_id)
        {
            Location::Running
        } else if self.finished.iter().any(|f| f == request_id) {
            Location::Finished
        } else {
            Location::Unknown
        }
    }

    /// The server id of the running or waiting request with this `clientRequestId` (running
    /// first).
    pub(super) fn find_by_client_id(&self, client_id: &Value) -> Option<RequestId> {
        let running = self
            .running
            .as_ref()
            .filter(|r| r.request.client_request_id.as_ref() == Some(client_id))
            .map(|r| r.request.request_id.clone());
        running.or_else(|| {
            self.waiting
                .iter()
                .find(|r| r.client_request_id.as_ref() == Some(client_id))
                .map(|r| r.request_id.clone())
        })
    }

    /// Moves a waiting request to the front.
    pub(super) fn promote(&mut self, request_id: &RequestId) -> Promotion {
        let Some(pos) = self
            .waiting
            .iter()
            .position(|r| &r.request_id == request_id)
        else {
            return Promotion::NotQueued;
        };
        if pos == 0 {
            return Promotion::AlreadyFirst;
        }
        let r = self.waiting.remove(pos).expect("valid position");
        self.waiting.push_front(r);
        self.version += 1;
        Promotion::Moved
    }

    /// The `QueueSnapshot` of `getQueueSnapshot`, `queueStateChanged` and the join answer.
    /// `paused` is always false: TypeAgent's queue never pauses.
    pub(super) fn snapshot(&self) -> Value {
        json!({
            "running": self.running.as_ref().map(Running::entry),
            "queued": self.waiting.iter().map(|r| r.entry("queued")).collect::<Vec<_>>(),
            "paused": false,
            "version": self.version,
        })
    }

    /// The queue changed: true when the coalescing timer must be armed now (it is not
    /// already); the snapshot is taken when it fires ([`RequestQueue::snapshot_fired`]).
    pub(super) fn snapshot_due(&mut self) -> bool {
        !std::mem::replace(&mut self.snapshot_armed, true)
    }

    /// The coalescing timer fired: the snapshot to send (the running request's `blockedOn`
    /// is now announced).
    pub(super) fn snapshot_fired(&mut self) -> Value {
        self.snapshot_armed = false;
        if let Some(r) = self.running.as_mut() {
            r.blocked_announced = r.blocked_on.is_some();
        }
        self.snapshot()
    }

    /// The running request started or stopped waiting on a question since the last snapshot
    /// went out: a new one is due.
    pub(super) fn blocked_change_unannounced(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.blocked_on.is_some() != r.blocked_announced)
    }

    /// The queue part of `getStatus`'s details: `idle`, `running, 2 queued`, `3 queued`.
    pub(super) fn status(&self) -> String {
        match (&self.running, self.waiting.len()) {
            (None, 0) => "idle".to_string(),
            (Some(_), n) => format!("running, {n} queued"),
            (None, n) => format!("{n} queued"),
        }
    }

    /// A request runs or waits.
    pub(super) fn is_busy(&self) -> bool {
        self.running.is_some() || !self.waiting.is_empty()
    }

    /// The running request.
    pub(super) fn running(&self) -> Option<&Running> {
        self.running.as_ref()
    }

    /// The running request, to change what it carries (its stream, its bookings, the
    /// question it waits on).
    pub(super) fn running_mut(&mut self) -> Option<&mut Running> {
        self.running.as_mut()
    }

    /// The running request if it is `turn`'s.
    pub(super) fn current(&self, turn: u64) -> Option<&Running> {
        self.running.as_ref().filter(|r| r.turn == turn)
    }

    /// The running request if it is `turn`'s, to change what it carries.
    pub(super) fn current_mut(&mut self, turn: u64) -> Option<&mut Running> {
        self.running.as_mut().filter(|r| r.turn == turn)
    }

    /// A fresh turn number (a client agent's `handleChoice` runs under one of its own).
    pub(super) fn next_turn(&mut self) -> u64 {
        self.turns += 1;
        self.turns
    }

    /// A request left the queue (finished or cancelled): a new version, and its id remembered
    /// for `already_completed` (the last [`FINISHED_MEMORY`]). Answers the version.
    fn closed(&mut self, id: &RequestId) -> u64 {
        self.version += 1;
        self.finished.push_back(id.clone());
        if self.finished.len() > FINISHED_MEMORY {
            self.finished.pop_front();
        }
        self.version
    }
}

#[cfg(test)]
mod tests;
