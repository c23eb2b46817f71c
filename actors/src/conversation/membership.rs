//! Who is in the conversation: a client joins ([`Attach`], answered with [`Attached`]),
//! becomes ready once its join result is queued (`ClientReady`), leaves ([`Detach`]) or is
//! lost (`ClientLost`: its output failed). The registry sends `Attach` and `Detach` in its
//! mailbox order; a connection may attach directly through the live directory.

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::client::{
    Client, ClientLost, ClientOutput, ClientReady, ConversationGone, ConversationLink,
    CLIENT_MAILBOX,
};
use crate::ids::ConnectionId;
use crate::metrics::Metrics;
use crate::outbox::Outbox;

use super::{audience, routing, ClientSlot, Conversation};

/// What a successful [`Attach`] returns to the joining connection (through the registry).
pub struct Attached {
    /// The client's connection id (decimal string).
    pub connection_id: ConnectionId,
    /// The client actor; the connection sends it [`Ready`](crate::client::Ready).
    pub client: Addr<Client>,
    /// The conversation, for dispatcher calls and leave.
    pub conversation: Addr<Conversation>,
    /// Pending interactions visible to this client (always an array).
    pub pending_interactions: Vec<Value>,
    /// Queue snapshot, present only while the queue is busy.
    pub queue_snapshot: Option<Value>,
}

/// Answers a direct join on the conversation's own thread: gets the [`Attached`], queues the
/// join result on the joiner's socket, and returns whether the joiner was still there.
pub type AnswerJoin = Box<dyn FnOnce(Attached) -> bool + Send>;

/// A client joins. Sent by the registry with `do_send` so joins keep the registry's order,
/// or straight by a connection that found this actor in the
/// [`LiveDirectory`](crate::registry::LiveDirectory) (`direct`); the answer travels back on
/// `reply`, or, with `answer`, goes out from here.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Attach {
    /// Sent by a connection, not the registry: refused (`reply` dropped, the joiner then asks
    /// the registry) once this actor reported idleness or is stopping, because the registry
    /// did not count it and may already be evicting.
    pub direct: bool,
    /// The socket's bounded queue.
    pub outbox: Outbox,
    /// `filter` join option.
    pub filter: bool,
    /// The socket's connection, told if this conversation goes away under it.
    pub connection: Recipient<ConversationGone>,
    /// The join result is queued here, by this actor, right after the attach (a connection's
    /// direct join): the client is then live at once, and its held frames follow the result,
    /// without the round trip through the connection and [`Ready`](crate::client::Ready)
    /// (two cross-thread wake-ups per join). `None`: `reply` gets the [`Attached`] and the
    /// connection answers.
    pub answer: Option<AnswerJoin>,
    /// Where the outcome goes: the [`Attached`] (`None` when `answer` answered the join);
    /// dropped unsent when a direct join is refused.
    pub reply: oneshot::Sender<Option<Attached>>,
}

impl Handler<Attach> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Self::Context) {
        if msg.direct {
            if self.stopping || self.idle_reported {
                // Dropping `reply` sends the joiner to the registry.
                log::debug!(
                    "conversation {}: direct join refused (idle reported or stopping)",
                    self.setup.id
                );
                return;
            }
            Metrics::inc(&self.setup.metrics.direct_joins);
        } else {
            self.attaches_seen += 1;
            self.idle_reported = false;
        }
        self.disarm_timers(ctx);
        let connection_id = ConnectionId(self.next_connection_id);
        self.next_connection_id += 1;
        let client = Client::new(
            self.setup.id,
            connection_id,
            ConversationLink {
                ready: ctx.address().recipient(),
                lost: ctx.address().recipient(),
            },
            msg.connection,
            self.setup.metrics.clone(),
        );
        let mut output = ClientOutput::new(
            self.clientio_prefix.clone(),
            msg.outbox,
            self.setup.metrics.clone(),
        );
        // The mailbox bound must hold from the first message: a burst of joins would
        // otherwise overflow the default 16 before `started` runs.
        let client = Client::create(move |ctx| {
            ctx.set_mailbox_capacity(CLIENT_MAILBOX);
            client
        });
        // The joiner's first calls (callIds 0 and 1), whatever its filter; held until the
        // join result has been queued.
        for notice in Self::status_dismissals() {
            output.send(&notice);
        }
        // Others only: the joiner is not in `clients` yet.
        self.emit(Self::join_notice(), &audience::Audience::Everyone);
        self.clients.insert(
            connection_id,
            ClientSlot {
                addr: client.clone(),
                output,
                lost: false,
                filter: msg.filter,
                working_directory: None,
            },
        );
        // An answer being written: the words so far, then the rest live.
        if !msg.filter {
            self.stream_so_far_to(connection_id);
        }
        log::debug!(
            "conversation {} connection {connection_id}: joined ({} clients)",
            self.setup.id,
            self.clients.len()
        );
        self.report_count();
        let attached = Attached {
            connection_id,
            client,
            conversation: ctx.address(),
            pending_interactions: self.pending_for(connection_id, msg.filter),
            queue_snapshot: self.busy().then(|| self.queue.snapshot()),
        };
        let delivered = match msg.answer {
            Some(answer) => {
                let answered = answer(attached);
                if answered {
                    let _ = msg.reply.send(None);
                    // The result is queued ahead of anything this client gets.
                    self.client_ready(connection_id);
                }
                answered
            }
            None => msg.reply.send(Some(attached)).is_ok(),
        };
        if !delivered {
            // The joiner vanished before the answer: undo the join.
            self.drop_client(connection_id, false);
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
    pub connection_id: ConnectionId,
    /// Whether the client was joined (absent when nobody waits).
    pub reply: Option<oneshot::Sender<bool>>,
}

impl Handler<Detach> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Self::Context) {
        let joined = self.drop_client(msg.connection_id, false);
        if joined {
            log::debug!(
                "conversation {} connection {}: left ({} clients)",
                self.setup.id,
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

impl Handler<ClientReady> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: ClientReady, _ctx: &mut Self::Context) {
        self.client_ready(msg.connection_id);
    }
}

impl Conversation {
    /// The client's join result is queued on its socket: its held frames go out, and
    /// everything from now on.
    fn client_ready(&mut self, connection_id: ConnectionId) {
        if let Some(slot) = self.clients.get_mut(&connection_id) {
            if !slot.lost {
                let sent = slot.output.go_live();
                routing::settle(self.setup.id, connection_id, slot, sent);
            }
        }
    }
}

impl Handler<ClientLost> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: ClientLost, ctx: &mut Self::Context) {
        if self.clients.remove(&msg.connection_id).is_some() {
            self.drop_client_agents(msg.connection_id);
            self.after_leave(ctx);
        }
    }
}
