//! The `Conversation` actor: one per loaded conversation. It owns the conversation's clients
//! (as [`Client`] actors), the connection-id counter that names them, the command queue (one
//! turn at a time, FIFO across clients), the display log (it assigns every `seq`), the chat
//! history the agent loop reads, pending interactions, and the timers (idle eviction, the
//! no-clients grace period, interaction time-outs).
//!
//! Who talks to it: the [`ConversationRegistry`](crate::registry::ConversationRegistry)
//! (`Attach`, `Detach`, `Shutdown`, in the registry's mailbox order), the transport's
//! connections (`DispatcherInvoke` / `DispatcherCall` for the `dispatcher:<id>` channel,
//! `RegisterClientAgent` / `UnregisterClientAgent` for client-hosted agents), its
//! clients (`ClientLost`) and its own running turn (`TurnEvent`).
//!
//! # Layout
//! One actor, several `impl Conversation` blocks, one file per concern, over plain data and
//! state machines that know nothing of actix and import no module of the actor's (checked by
//! `.ci/module_cycles.py`: no cycle among the modules here):
//! - machines: `request_queue.rs` (the command queue), `outbound_order.rs` (held calls and
//!   write barriers), `answer_stream.rs` (a streamed answer's frames and checkpoints),
//!   `grammar.rs` (the built-in `@` commands); data: `audience.rs` (who gets a call),
//!   `turn_messages.rs` (what a running turn sends: [`TurnEvent`]), `handoff_packet.rs`,
//!   `replies.rs` (where a question's answer goes).
//! - this file: the actor's state, its start and stop ([`Shutdown`]) and the idle / grace
//!   timers; `membership.rs`: clients joining and leaving ([`Attach`], [`Detach`],
//!   `ClientReady`, `ClientLost`).
//! - `routing.rs`: who gets an outbound call (resolving audiences), emit / deliver / broadcast, the join,
//!   leave and deleted notices, [`DisplayMode`].
//! - `outbound_order.rs`: `OutboundOrder`, the plain state machine of held calls and write
//!   barriers (what may go now, in emit order; unit-tested without actix).
//! - `persistence.rs`: write barriers (queued with the log writer, released through the
//!   outbound order), the request journal, writer backpressure, crash recovery of unfinished requests, closing the files.
//! - `request_queue.rs`: `RequestQueue`, the plain state machine of the command queue (which
//!   request waits, runs, finished; versions, turn numbers, the snapshot; unit-tested without
//!   actix), with [`CancelOutcome`] and [`CancelReason`].
//! - `queue.rs`: what the queue's events do: submit, start, finish, cancel, promote (calls,
//!   journal records, barriers), the coalesced `queueStateChanged`, `setDisplayInfo`.
//! - `timing.rs`: a request's phases, for `CommandResult.metrics`.
//! - `working_directory.rs`: where a request works ([`WorkingDirectoryPolicy`]).
//! - `interactions.rs`: questions to everyone, their time-outs; `choices.rs`: private choices.
//! - `feedback.rs`: ratings and hidden messages (`recordUserFeedback`, `recordUserHide`, …).
//! - `app_agents.rs`: the conversation's agents as TypeAgent names and describes them
//!   (`getAgentSchemas`, the `Unknown app agent` checks).
//! - `dispatcher.rs`: the `dispatcher:<id>` channel ([`DispatcherInvoke`], [`DispatcherCall`]):
//!   one typed request parsed once from `(method, args)`, one function per method.
//! - `grammar.rs`: the built-in `@` commands declared once (names, help lines, parameters,
//!   argument parsers), read by parsing, help, completion and `setDisplayInfo`.
//! - [`commands`]: the `@` commands (`@conversation`, `@help`, `@dispatcher`, …);
//!   `system.rs`: the `@system` family ([`SystemCommand`]); [`completion`]:
//!   `getCommandCompletion`, as TypeAgent's dispatcher computes it.
//! - `turn_events.rs`: starting agent turns, `@explain` / `@translate`, handling each
//!   [`TurnEvent`], and what a turn books for its end (the `manage_conversation` tool's client
//!   actions); `sink.rs`: the turn's side of those events; `compaction.rs`: `@compact`;
//!   `streaming.rs`: a streamed answer's frames to clients and checkpoints to disk.
//! - `handoff.rs`: handoff between conversations (`@conversation handoff`, the tool's
//!   `handoff`): a summary of another conversation appended here ([`HandoffError`]).
//! - `chat.rs`: the chat history the agent reads (its newest part in memory, all of it in
//!   `history.jsonl`).
//! - `meter.rs`: the context meter (how much of the model's context the history occupies),
//!   its file beside the history and its `contextMeter` announcements.
//! - `client_agents/`: the client-hosted agents registered here, their checks, the tools
//!   they add to turns, their `@<agent>` commands and the calls they make while they run
//!   ([`ClientAgentOutput`]), and the list [`Conversation::client_agents`] (`@system config
//!   agents`).
//! - `agent_context.rs`: what a client agent asks of its host outside an action: the
//!   invokes of TypeAgent's `AgentContextInvokeFunctions` ([`HostInvoke`]), its
//!   `popupQuestion` ([`AgentPopupQuestion`]) and its agent threads.
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
//!   No write is queued after the files are closed; the actor answers and stops only once
//!   the writer has closed them and every held call has gone out, so a delete or a reload
//!   never races a write. On a delete the registry then retires the directory, once the
//!   delete is journaled.
//!
//! # Acknowledged means durable
//! An outbound call that reports a change (`commandComplete`, `requestCancelled`) and the
//! `{ok:true}` of `submitCommand` go out only after the writes behind them are fsynced: the
//! conversation queues a *write barrier* ([`LogWriter::sync`]) and every call emitted after it
//! is held in the `OutboundOrder`, in order, until the barrier is confirmed; the barrier's continuation then
//! emits at the barrier's place. Streamed output during a turn is only held while an earlier
//! barrier is outstanding (one group-committed fsync). Accepted requests are journaled
//! ([`requests`]); on load, those acknowledged and never closed get a failed `command-result`.
//!
//! Queue states of a request: **queued** → **running** (one at a time) → finished
//! (`command-result` + `notify commandComplete`) or cancelled (`requestCancelled`). A running
//! agent turn is a spawned future; its output comes back as [`TurnEvent`]s tagged with a turn
//! number, so events of a cancelled turn that are still in the mailbox are ignored. Each output
//! gets its `seq` when it enters the actor: that is the one total order every client sees.

mod agent_context;
mod answer_stream;
mod app_agents;
mod audience;
mod chat;
mod choices;
mod client_agents;
pub mod commands;
mod compaction;
pub mod completion;
mod dispatcher;
mod feedback;
mod grammar;
mod handoff;
mod handoff_packet;
mod interactions;
mod membership;
mod meter;
mod model;
mod outbound_order;
mod persistence;
mod queue;
mod replies;
mod request_queue;
mod routing;
mod sink;
mod streaming;
mod system;
mod timing;
mod turn_events;
mod turn_messages;
mod upward;
mod working_directory;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::agent::turn::ToolServer;
use crate::agent::usage::ContextMeter;
use crate::client::{Client, ClientOutput, StopClient};
use crate::ids::{ConnectionId, ConversationId};
use crate::metrics::Metrics;
use crate::storage::context_meter;
use crate::storage::display_log::DisplayLog;
use crate::storage::log_writer::LogWriter;
use crate::storage::requests::{self, OpenRequest};

use choices::Choice;
use client_agents::ClientAgents;
use interactions::Interaction;
use outbound_order::OutboundOrder;
use persistence::{Continuation, PendingStop};
use request_queue::RequestQueue;

pub use agent_context::{
    transient_agent_error, AgentPopupQuestion, AgentThreadCall, HostInvoke, PopupQuestion,
    ThreadOp, MAX_AGENT_THREADS, MAX_QUESTIONS_PER_AGENT, MAX_THREAD_ID_CHARS,
};
pub use chat::{ReadChatWindow, MAX_CHAT_BYTES, MAX_CHAT_MESSAGES};
pub use client_agents::{
    parse_agent_command, AbandonClientAgent, ActivateClientAgent, AgentAnswer, AgentCall,
    AgentReply, ClientActionInfo, ClientAgentHost, ClientAgentInfo, ClientAgentOutput,
    ClientAgentRemoved, CloseClientAgentCall, InvokeClientAgent, OpenAction, RegisterClientAgent,
    UnregisterClientAgent,
};
pub use dispatcher::{
    deleted_status, DispatcherCall, DispatcherInvoke, DispatcherReply, InvokeOrigin,
};
pub use grammar::{SystemCommand, MAX_TRACE_FILTER_BYTES};
pub use handoff::read_chat_tail;
pub use handoff_packet::{
    HandoffError, SourceHistory, HANDOFF_INSTRUCTION, HANDOFF_SYSTEM, MAX_PACKET_BYTES,
};
pub use membership::{AnswerJoin, Attach, Attached, Detach};
pub use meter::METER_EVENT;
pub use model::{MODEL_EVENT, MODEL_FILE};
pub use queue::{SNAPSHOT_COALESCE, STOPPED_BEFORE_FINISHING};
pub use request_queue::{
    CancelOutcome, CancelReason, MAX_QUEUED_BYTES, MAX_QUEUE_DEPTH, STORAGE_ERROR,
};
pub use routing::{DisplayMode, DELETED_NOTICE, JOIN_NOTICE, LEAVE_NOTICE, MOVED_NOTICE};
pub use system::LogFilterControl;
pub use turn_messages::AfterCompact;
pub use turn_messages::{TurnBooking, TurnEvent, MAX_CLIENT_ACTIONS_PER_TURN};
pub use upward::{ConversationEvent, GetConversationInfo, ReadHandoffSource, RegistryHandle};
pub use working_directory::{Resolution, WorkingDirectoryPolicy};

/// Source name of the chat agent in display messages, and its storage folder name.
const AGENT_SOURCE: &str = "chat";

/// Why a conversation stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownReason {
    /// Idle past the timeout with no clients.
    Evicted,
    /// Deleted by a client.
    Deleted,
    /// The server is stopping.
    ServerStopping,
    /// `serve --cluster`: this node lost the conversation's ownership lease; another node
    /// serves it from now on. Its clients' channels close here and their connections join it
    /// again wherever it is served now; a client is told ([`MOVED_NOTICE`]) only when that
    /// fails.
    Moved,
}

/// Settings shared by every conversation.
pub struct RuntimeConfig {
    /// The model backends a conversation can use, and the default (a conversation's own
    /// choice is `model.rs`'s).
    pub providers: crate::agent::providers::Providers,
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
    /// The server's log filter, for `@system trace`; `None` when the process's logger cannot
    /// be changed at run time (the command then says so).
    pub log_filter: Option<Arc<dyn LogFilterControl>>,
    /// The content search index, fed each logged turn; `None`: content search is off (actor
    /// tests).
    pub search: Option<crate::search::SearchIndex>,
    /// Where requests may work (`options.workingDirectory`), and where they work when they
    /// name no allowed directory.
    pub working_directory: WorkingDirectoryPolicy,
    /// The share of the model's context window (percent) at which the conversation compacts
    /// its history before the next model call (`--compact-at`); 0: never on its own.
    pub compact_at: u64,
}

/// Everything a conversation needs at start.
pub struct ConversationSetup {
    /// The id.
    pub id: ConversationId,
    /// Name at load time, for logs.
    pub name: String,
    /// Incremented by the registry each time it loads this conversation.
    pub generation: u64,
    /// Persist directory (`conversations/<id>/`).
    pub dir: PathBuf,
    /// How long to stay loaded with no clients.
    pub idle_timeout: Duration,
    /// The way up to the registry that loaded it: idle timeouts and count changes, a
    /// handoff's source, the record `@system session` shows.
    pub registry: RegistryHandle,
    /// Shared counters.
    pub metrics: Arc<Metrics>,
    /// Agent, storage and timing settings.
    pub runtime: Arc<RuntimeConfig>,
    /// Joined clients, read by the registry for `clientCount` without a message per join.
    pub client_count: Arc<AtomicUsize>,
    /// Set by the registry while a socket subscribes to the conversation list: only then is
    /// each client-count change also reported (`ConversationEvent::ClientCount`).
    pub list_watched: Arc<AtomicBool>,
}

/// One joined client, as the conversation sees it.
struct ClientSlot {
    /// The client actor (its lifecycle).
    addr: Addr<Client>,
    /// Its `clientio` output: every call routed to it is framed and queued here.
    output: ClientOutput,
    /// Its output failed (slow consumer, socket gone) and its actor was told; it leaves with
    /// `ClientLost`.
    lost: bool,
    /// Joined with `filter: true`: gets only messages addressed to its own connection id.
    filter: bool,
    /// The directory its last request was resolved to: its next request that names none
    /// works there (TypeAgent's per-connection `selectedWorkingDirectory`).
    working_directory: Option<PathBuf>,
}

/// One loaded conversation.
pub struct Conversation {
    /// Fixed at start.
    setup: ConversationSetup,
    /// Joined clients by connection id number (in join order).
    clients: BTreeMap<ConnectionId, ClientSlot>,
    /// `{"name":"clientio:<id>","message":{"type":"call","callId":` — every client's frame
    /// prefix, built once and shared by their outputs.
    clientio_prefix: Arc<str>,
    /// Next connection id ("0", "1", …); restarts when the conversation is reloaded.
    next_connection_id: u64,
    /// `Attach` messages the registry sent that were handled so far (echoed in
    /// `IdleExpired`); direct attaches are not counted, the registry never saw them.
    attaches_seen: u64,
    /// An `IdleExpired` went to the registry and no registry `Attach` came since: the
    /// registry may be about to stop this actor, so direct attaches are refused (their
    /// joiners ask the registry, which orders them against the eviction).
    idle_reported: bool,
    /// The armed idle timer, if any.
    idle_timer: Option<SpawnHandle>,
    /// The armed no-clients grace timer, if any.
    grace_timer: Option<SpawnHandle>,
    /// The display log; `Err` holds why it could not be opened (commands are refused).
    log: Result<DisplayLog, String>,
    /// The newest part of the chat history, for the agent (read at the first turn; bounded,
    /// see [`chat::ChatWindow`]).
    chat: Option<chat::ChatWindow>,
    /// The command queue: waiting requests, the running one, turn numbers, versions
    /// (`request_queue.rs`).
    queue: RequestQueue,
    /// Pending interactions by id.
    interactions: BTreeMap<String, Interaction>,
    /// Pending private choices by id.
    choices: HashMap<String, Choice>,
    /// The restorable hidden messages (`restoreAllHidden`, `flushHidden`), read from the
    /// log at the first hide method.
    hides: feedback::Hides,
    /// Set by `Shutdown`: new submits answer `server_stopping`.
    stopping: bool,
    /// Set by `Shutdown{Deleted}`: every `dispatcher:<id>` invoke that still reaches this
    /// actor (its clients' connections may not have heard yet) answers `Conversation not
    /// found: <id>`, as it will once they have.
    deleted: bool,
    /// Calls and write barriers in emit order, while a barrier is unconfirmed (usually empty).
    outbound: OutboundOrder<Continuation>,
    /// The chat history file (`sessions/chat/history.jsonl`).
    chat_path: Arc<Path>,
    /// The context meter: read from its file at load, changed by turns that report usage,
    /// cleared by `@compact` and `@system meter reset` (`meter.rs`).
    meter: Option<ContextMeter>,
    /// The meter's file (`sessions/chat/contextMeter.jsonl`).
    meter_path: Arc<Path>,
    /// Where a streamed answer's checkpoints go (`streaming.rs`).
    checkpoint_path: Arc<Path>,
    /// The provider this conversation chose, if not the server's default (`model.rs`).
    model: model::ModelChoice,
    /// Bytes of the meter file (its length at load, and the appends since): it is rewritten
    /// with its last line past [`context_meter::REWRITE_AFTER_BYTES`].
    meter_file_bytes: u64,
    /// The meter changed since its last announcement: the running request's finish sends it.
    meter_changed: bool,
    /// The request journal (`requests.jsonl`).
    requests_path: Arc<Path>,
    /// Requests accepted and not closed, in acceptance order (what the journal says).
    open_requests: Vec<OpenRequest>,
    /// Bytes of the journal file (what it held after its last rewrite, and the appends since).
    requests_appended: u64,
    /// Bytes the journal held after its last rewrite (its open requests): it is rewritten
    /// again only once as much again was appended, so a journal of large open requests is
    /// not rewritten whole at every record.
    requests_live: u64,
    /// Set once the files were handed to the writer to close: nothing is written after.
    writes_closed: bool,
    /// The shutdown being completed.
    pending_stop: Option<PendingStop>,
    /// Client-hosted agents registered here; each goes when its client leaves.
    client_agents: ClientAgents,
    /// Cuts the entries this actor logs into search documents (request text, then the
    /// request's output at its `command-result`) for the search index.
    search_turn: crate::search::TurnCollector,
}

impl Conversation {
    /// A conversation ready to start; the display log is opened here (lazy load: only
    /// conversations someone joins are opened).
    pub fn new(setup: ConversationSetup) -> Conversation {
        let id = setup.id;
        // The directory is created by the log writer with the first entry, off this thread.
        let log = DisplayLog::open(&setup.dir, setup.runtime.log_writer.clone()).map_err(|e| {
            log::error!(
                "conversation {id}: cannot open the display log in {}: {e}",
                setup.dir.display()
            );
            format!("display log unavailable: {e}")
        });
        let chat_path = chat::history_path(&setup.dir);
        let meter_path: Arc<Path> = context_meter::path(&setup.dir, AGENT_SOURCE).into();
        // A few bytes from the file's end, like the display log's last line above.
        let stored = context_meter::load(&meter_path);
        let requests_path: Arc<Path> = setup.dir.join(requests::FILE_NAME).into();
        let setup_checkpoint_path: Arc<Path> =
            setup.dir.join(answer_stream::CHECKPOINT_FILE).into();
        let setup_dir = setup.dir.clone();
        Conversation {
            clientio_prefix: crate::protocol::call_prefix(&crate::protocol::clientio_channel(id))
                .into(),
            setup,
            clients: BTreeMap::new(),
            next_connection_id: 0,
            attaches_seen: 0,
            idle_reported: false,
            idle_timer: None,
            grace_timer: None,
            log,
            chat: None,
            queue: RequestQueue::default(),
            interactions: BTreeMap::new(),
            choices: HashMap::new(),
            hides: Default::default(),
            stopping: false,
            deleted: false,
            outbound: OutboundOrder::default(),
            chat_path,
            meter: stored.meter,
            meter_path,
            checkpoint_path: setup_checkpoint_path,
            model: model::ModelChoice::load(&setup_dir),
            meter_file_bytes: stored.len,
            meter_changed: false,
            requests_path,
            open_requests: Vec::new(),
            requests_appended: 0,
            requests_live: 0,
            writes_closed: false,
            search_turn: Default::default(),
            pending_stop: None,
            client_agents: ClientAgents::default(),
        }
    }

    /// Publishes the number of joined clients for the registry's `clientCount`.
    fn report_count(&self) {
        let count = self.clients.len();
        let before = self.setup.client_count.swap(count, Ordering::Relaxed);
        if before != count && self.setup.list_watched.load(Ordering::Relaxed) {
            self.setup
                .registry
                .events
                .do_send(ConversationEvent::ClientCount { id: self.setup.id });
        }
    }

    /// Removes a client and stops its actor; false when it was not joined.
    fn drop_client(&mut self, connection_id: ConnectionId, notify_connection: bool) -> bool {
        let Some(slot) = self.clients.remove(&connection_id) else {
            return false;
        };
        self.drop_client_agents(connection_id);
        slot.addr.do_send(StopClient {
            notify_connection,
            moved: None,
        });
        true
    }

    /// After a client left: the others get the leave notice; the last one arms the timers.
    fn after_leave(&mut self, ctx: &mut Context<Self>) {
        if !self.clients.is_empty() {
            self.emit(Self::leave_notice(), &audience::Audience::Everyone);
        }
        self.report_count();
        if self.clients.is_empty() && !self.stopping {
            self.arm_idle_timer(ctx);
            self.arm_grace_timer(ctx);
        }
    }

    /// Work is queued, running, or waiting for a write barrier.
    fn busy(&self) -> bool {
        self.queue.is_busy() || !self.outbound.is_empty()
    }

    /// Cancels the idle and grace timers (a client joined, or the conversation stops).
    fn disarm_timers(&mut self, ctx: &mut Context<Self>) {
        for timer in [self.idle_timer.take(), self.grace_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(timer);
        }
    }

    /// Idle → the registry decides on eviction after `idle_timeout`, unless work is in flight.
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
            act.idle_reported = true;
            act.setup
                .registry
                .events
                .do_send(ConversationEvent::IdleExpired {
                    id: act.setup.id,
                    generation: act.setup.generation,
                    attaches_seen: act.attaches_seen,
                });
        }));
    }

    /// With work queued and nobody left to see it, the work is cancelled after the grace
    /// period (`no_clients`).
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
                let cancelled = act.cancel_all_queued(CancelReason::NoClients, ctx);
                if cancelled > 0 {
                    log::info!(
                        "conversation {}: no clients; cancelling {cancelled} queued requests",
                        act.setup.id,
                    );
                }
                // A running turn stalled on an interaction nobody can answer is superseded.
                if act.queue.running_is_blocked() {
                    act.cancel_running(CancelReason::NoClients, ctx);
                }
            }),
        );
    }
}

impl Actor for Conversation {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Registry → conversation messages use do_send to keep order; connections use send.
        ctx.set_mailbox_capacity(1 << 16);
        Metrics::add(&self.setup.metrics.loaded_conversations, 1);
        self.setup.metrics.lifecycle_changed();
        if let Some(log) = self.log.as_ref().ok().filter(|log| log.next_seq() == 0) {
            // A new conversation: its files are created while the writer is idle, before the
            // first turn needs them (see `storage::log_writer::prepare`).
            self.setup.runtime.log_writer.prepare(vec![
                log.path().clone(),
                self.requests_path.clone(),
                self.chat_path.clone(),
            ]);
        }
        self.recover_requests(ctx);
        log::debug!(
            "conversation {} ({:?}): loaded, generation {}, next seq {}",
            self.setup.id,
            self.setup.name,
            self.setup.generation,
            self.log.as_ref().map_or(0, DisplayLog::next_seq)
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.setup.metrics.loaded_conversations, -1);
        self.setup.metrics.lifecycle_changed();
        log::debug!("conversation {}: unloaded", self.setup.id);
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
        self.deleted = msg.reason == ShutdownReason::Deleted;
        // A stopping conversation reports no more idleness (the registry already acted on it).
        self.disarm_timers(ctx);
        match msg.reason {
            ShutdownReason::Deleted => {
                self.handoff_interrupted_by_delete();
                self.announce_deleted();
            }
            // No notice: each client's connection joins the conversation again on the node
            // that took it over, and tells the client only if that fails.
            ShutdownReason::Moved => {}
            ShutdownReason::Evicted if !self.clients.is_empty() => {
                log::error!(
                    "conversation {}: evicted with {} clients (registry bug)",
                    self.setup.id,
                    self.clients.len()
                );
            }
            _ => {}
        }
        let reason = if msg.reason == ShutdownReason::ServerStopping {
            CancelReason::ServerStopping
        } else {
            CancelReason::ConversationClosed
        };
        self.cancel_all_queued(reason, ctx);
        self.cancel_running(reason, ctx);
        log::debug!(
            "conversation {}: stopping ({:?})",
            self.setup.id,
            msg.reason
        );
        self.close_files(msg.reason, msg.reply, ctx);
    }
}
