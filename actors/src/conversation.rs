//! The `Conversation` actor: one per loaded conversation. It owns the conversation's clients
//! (as [`Client`] actors held by address), the connection-id counter that names them, its
//! persist directory, and the idle timer that asks the registry to evict it.
//!
//! Only the [`ConversationRegistry`](crate::registry::ConversationRegistry) starts and stops a
//! conversation, and every join reaches it as an [`Attach`] from the registry, in the
//! registry's mailbox order. Leaves arrive as [`Detach`] (also through the registry) or as
//! [`ClientLost`] from a client that dropped itself.
//!
//! # Implementation notes
//! States and the messages that move between them:
//! - **Live** (started by the registry with a fresh `generation`): clients come and go with
//!   `Attach` / `Detach` / `ClientLost`.
//! - **Idle**: the last client left; the idle timer is armed. `Attach` disarms it (→ Live).
//!   When it fires the conversation sends `IdleExpired { generation, attaches_seen }` to the
//!   registry and stays Idle. The registry evicts only if the generation is current and no
//!   `Attach` is in flight (`attaches_seen` equals what it sent); otherwise the request is
//!   stale and ignored.
//! - **Stopped** after [`Shutdown`]: `Evicted` (no clients), `Deleted` (every client gets a
//!   notice, then its channels close) or `ServerStopping`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::client::{Client, ClientLost, ConversationGone, Deliver, OutboundCall, StopClient};
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::registry::{ConversationEvent, ConversationRegistry};

/// Text shown to the others when a client joins.
pub const JOIN_NOTICE: &str = "[A new client has joined this conversation.]";
/// Text shown to the others when a client leaves.
pub const LEAVE_NOTICE: &str = "[A client has left this conversation.]";
/// Text shown to every client when the conversation is deleted under it.
pub const DELETED_NOTICE: &str = "[This conversation was deleted.]";

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
    /// The registry, told about idle timeouts and client-count changes.
    pub registry: Addr<ConversationRegistry>,
    /// Shared counters.
    pub metrics: Arc<Metrics>,
}

struct ClientSlot {
    /// The client actor.
    addr: Addr<Client>,
    /// Joined with `filter: true`: gets only messages addressed to its own connection id.
    #[allow(dead_code)]
    filter: bool,
}

/// One loaded conversation.
pub struct Conversation {
    /// Fixed at start.
    setup: ConversationSetup,
    /// `setup.id` as a string, used in every frame and log line.
    id_str: String,
    /// Joined clients by connection id (decimal string, in join order).
    clients: BTreeMap<u64, ClientSlot>,
    /// Next connection id ("0", "1", …); restarts when the conversation is reloaded.
    next_connection_id: u64,
    /// `Attach` messages handled so far; echoed in `IdleExpired` so the registry can tell
    /// whether a join is still in flight.
    attaches_seen: u64,
    /// The armed idle timer, if any.
    idle_timer: Option<SpawnHandle>,
}

impl Conversation {
    /// A conversation ready to start.
    pub fn new(setup: ConversationSetup) -> Conversation {
        let id_str = setup.id.to_string();
        Conversation {
            setup,
            id_str,
            clients: BTreeMap::new(),
            next_connection_id: 0,
            attaches_seen: 0,
            idle_timer: None,
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

    /// Sends a call to every client except `except`, bypassing `filter` (system notices).
    fn notify_others(&mut self, except: Option<u64>, call: Arc<OutboundCall>) {
        let mut lost = Vec::new();
        for (id, slot) in &self.clients {
            if Some(*id) == except {
                continue;
            }
            if slot.addr.try_send(Deliver { call: call.clone() }).is_err() {
                lost.push(*id);
            }
        }
        for id in lost {
            log::warn!(
                "conversation {} connection {id}: client mailbox full, dropping it",
                self.id_str
            );
            self.drop_client(id, true);
        }
    }

    fn report_count(&self) {
        self.setup.registry.do_send(ConversationEvent::ClientCount {
            id: self.setup.id,
            generation: self.setup.generation,
            count: self.clients.len(),
        });
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
            self.notify_others(None, Self::system_notice(LEAVE_NOTICE));
        }
        self.report_count();
        if self.clients.is_empty() {
            self.arm_idle_timer(ctx);
        }
    }

    fn arm_idle_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.idle_timer.take() {
            ctx.cancel_future(h);
        }
        log::debug!(
            "conversation {}: idle, evicting in {:?}",
            self.id_str,
            self.setup.idle_timeout
        );
        self.idle_timer = Some(ctx.run_later(self.setup.idle_timeout, |act, _ctx| {
            act.idle_timer = None;
            if act.clients.is_empty() {
                act.setup.registry.do_send(ConversationEvent::IdleExpired {
                    id: act.setup.id,
                    generation: act.setup.generation,
                    attaches_seen: act.attaches_seen,
                });
            }
        }));
    }
}

impl Actor for Conversation {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.setup.metrics.loaded_conversations, 1);
        if let Err(e) = crate::store::create_dir_durable(&self.setup.dir) {
            log::error!(
                "conversation {}: cannot create persist dir: {e}",
                self.id_str
            );
        }
        log::info!(
            "conversation {} ({:?}): loaded, generation {}",
            self.id_str,
            self.setup.name,
            self.setup.generation
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.setup.metrics.loaded_conversations, -1);
        log::info!("conversation {}: unloaded", self.id_str);
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
        if let Some(h) = self.idle_timer.take() {
            ctx.cancel_future(h);
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
        )
        .start();
        // Others first: the joiner is not ready and must not see its own join notice anyway.
        self.notify_others(None, Self::system_notice(JOIN_NOTICE));
        self.clients.insert(
            number,
            ClientSlot {
                addr: client.clone(),
                filter: msg.filter,
            },
        );
        log::info!(
            "conversation {} connection {connection_id}: joined ({} clients)",
            self.id_str,
            self.clients.len()
        );
        self.report_count();
        let attached = Attached {
            connection_id,
            client,
            conversation: ctx.address(),
            pending_interactions: Vec::new(),
            queue_snapshot: None,
        };
        if let Err(attached) = msg.reply.send(attached) {
            // The joiner vanished before the answer: undo the join.
            let id: u64 = attached.connection_id.parse().unwrap_or(u64::MAX);
            self.drop_client(id, false);
            self.after_leave(ctx);
        }
    }
}

/// A client leaves (leaveConversation, socket close). Answers whether it was joined.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Detach {
    /// The client's connection id.
    pub connection_id: String,
}

impl Handler<Detach> for Conversation {
    type Result = bool;

    fn handle(&mut self, msg: Detach, ctx: &mut Self::Context) -> bool {
        let Ok(id) = msg.connection_id.parse::<u64>() else {
            return false;
        };
        if !self.drop_client(id, false) {
            return false;
        }
        log::info!(
            "conversation {} connection {id}: left ({} clients)",
            self.id_str,
            self.clients.len()
        );
        self.after_leave(ctx);
        true
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
    /// Answered once every client has been told and the conversation has flushed.
    pub reply: oneshot::Sender<()>,
}

impl Handler<Shutdown> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Shutdown, ctx: &mut Self::Context) {
        match msg.reason {
            ShutdownReason::Deleted => {
                let notice = OutboundCall::new(
                    "notify",
                    &json!([null, "conversationDeleted", {"conversationId": self.id_str}, "agent-server"]),
                );
                self.notify_others(None, Self::system_notice(DELETED_NOTICE));
                self.notify_others(None, notice);
                for (_, slot) in std::mem::take(&mut self.clients) {
                    slot.addr.do_send(StopClient {
                        notify_connection: true,
                    });
                }
            }
            ShutdownReason::Evicted => {
                if !self.clients.is_empty() {
                    log::error!(
                        "conversation {}: evicted with {} clients (registry bug)",
                        self.id_str,
                        self.clients.len()
                    );
                }
            }
            ShutdownReason::ServerStopping => {}
        }
        for (_, slot) in std::mem::take(&mut self.clients) {
            slot.addr.do_send(StopClient {
                notify_connection: false,
            });
        }
        log::info!("conversation {}: stopping ({:?})", self.id_str, msg.reason);
        let _ = msg.reply.send(());
        ctx.stop();
    }
}
