//! The `Client` actor: one per client joined to a conversation (one socket joined to two
//! conversations has two). It owns that client's side of the `clientio:<id>` channel: the
//! outbound callId counter, the ready gate, and the push into the socket's bounded
//! [`Outbox`]. Its parent [`Conversation`](crate::conversation::Conversation) decides who gets
//! what and hands it over with [`Deliver`] through `try_send`, so a stuck client never blocks
//! the conversation.
//!
//! # Implementation notes
//! States: **Held** (created by `Attach`; frames are buffered, bounded, because the client
//! creates its `clientio` channel only after it has read the join result) → [`Ready`] (sent by
//! the connection right after it queued the join result) → **Live** (frames go straight to the
//! outbox) → **Stopped** on [`StopClient`] (leave, socket close, delete) or on a full outbox, in
//! which case the socket is closed with 1008 "slow consumer" and the conversation is told with
//! [`ClientLost`].

use std::sync::Arc;

use actix::prelude::*;

use crate::ids::{ConnectionId, ConversationId};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, PushError};

/// Close code sent to a client whose queue overflowed (RFC 6455 1008, policy violation).
pub const SLOW_CONSUMER_CLOSE_CODE: u16 = 1008;
/// Close reason sent with it.
pub const SLOW_CONSUMER_REASON: &str = "slow consumer: outbound queue full";
/// Frames a not-yet-ready client may hold; more means it is not reading.
const MAX_HELD_FRAMES: usize = 1024;
/// Mailbox bound of a client actor. The conversation hands over calls with `try_send`, so a
/// mailbox this deep means the client is stuck (it is then closed as a slow consumer).
pub const CLIENT_MAILBOX: usize = MAX_HELD_FRAMES;

/// A `clientio` call, serialized once and shared by every recipient.
#[derive(Debug)]
pub struct OutboundCall {
    /// Method name (`appendDisplay`, `notify`, …).
    pub method: &'static str,
    /// Everything after the callId (`,"name":…,"args":[…]}}`), built once for all recipients.
    tail: String,
    /// Where the args array starts in `tail`.
    args_start: usize,
}

impl OutboundCall {
    /// Serializes the arguments once.
    pub fn new(method: &'static str, args: &serde_json::Value) -> Arc<OutboundCall> {
        let args_json = serde_json::to_string(args).expect("args serialize");
        let tail = crate::protocol::call_tail(method, &args_json);
        let args_start = tail.len() - 2 - args_json.len();
        Arc::new(OutboundCall {
            method,
            tail,
            args_start,
        })
    }

    /// The JSON array of arguments.
    pub fn args_json(&self) -> &str {
        &self.tail[self.args_start..self.tail.len() - 2]
    }

    /// The whole frame for one recipient's channel prefix and callId.
    pub fn frame(&self, prefix: &str, call_id: u64) -> String {
        crate::protocol::splice_call(prefix, call_id, &self.tail)
    }
}

/// Sent by the client to its conversation when it dropped itself (slow consumer).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClientLost {
    /// The client's connection id within the conversation.
    pub connection_id: ConnectionId,
}

/// Sent to the socket's connection when a conversation it joined goes away under it (deleted,
/// or the client was dropped), so the connection forgets its channels.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ConversationGone {
    /// The conversation.
    pub conversation_id: ConversationId,
}

/// One client of one conversation.
pub struct Client {
    /// The start of every frame on this client's `clientio:<id>` channel, up to the callId.
    call_prefix: String,
    /// Conversation id, for logs.
    conversation_id: ConversationId,
    /// Connection id within the conversation (a decimal string).
    connection_id: ConnectionId,
    /// Next callId on this client's `clientio` channel (per channel and direction).
    next_call_id: u64,
    /// The socket's bounded queue.
    outbox: Outbox,
    /// False until the join result has been queued; frames wait in `held` meanwhile.
    ready: bool,
    /// Frames produced before the client was ready.
    held: Vec<String>,
    /// Parent, told when this client drops itself.
    conversation: Recipient<ClientLost>,
    /// The socket's connection, told when this client is gone.
    connection: Recipient<ConversationGone>,
    /// Shared counters.
    metrics: Arc<Metrics>,
    /// Set once this client has given up (slow consumer); later deliveries are dropped.
    lost: bool,
}

impl Client {
    /// A new, not-yet-ready client.
    pub fn new(
        conversation_id: ConversationId,
        connection_id: ConnectionId,
        outbox: Outbox,
        conversation: Recipient<ClientLost>,
        connection: Recipient<ConversationGone>,
        metrics: Arc<Metrics>,
    ) -> Client {
        Client {
            call_prefix: crate::protocol::call_prefix(&crate::protocol::clientio_channel(
                conversation_id,
            )),
            conversation_id,
            connection_id,
            next_call_id: 0,
            outbox,
            ready: false,
            held: Vec::new(),
            conversation,
            connection,
            metrics,
            lost: false,
        }
    }

    fn frame(&mut self, call: &OutboundCall) -> String {
        let id = self.next_call_id;
        self.next_call_id += 1;
        call.frame(&self.call_prefix, id)
    }

    fn push(&mut self, frame: String, ctx: &mut Context<Self>) {
        if self.lost {
            return;
        }
        match self.outbox.push(frame) {
            Ok(()) => Metrics::inc(&self.metrics.frames_out),
            Err(PushError::Full) => self.give_up(ctx),
            Err(PushError::Closed) => {
                // The socket is gone: leave now rather than linger as a phantom client.
                self.lost = true;
                self.conversation.do_send(ClientLost {
                    connection_id: self.connection_id,
                });
                ctx.stop();
            }
        }
    }

    fn give_up(&mut self, ctx: &mut Context<Self>) {
        self.lost = true;
        self.held.clear();
        Metrics::inc(&self.metrics.slow_client_closes);
        log::warn!(
            "conversation {} connection {}: closing slow client (outbound queue full)",
            self.conversation_id,
            self.connection_id
        );
        self.outbox
            .abort(SLOW_CONSUMER_CLOSE_CODE, SLOW_CONSUMER_REASON);
        self.conversation.do_send(ClientLost {
            connection_id: self.connection_id,
        });
        self.connection.do_send(ConversationGone {
            conversation_id: self.conversation_id,
        });
        ctx.stop();
    }
}

impl Actor for Client {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.metrics.joined_clients, 1);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.metrics.joined_clients, -1);
    }
}

/// One call for this client (already routed by the conversation).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Deliver {
    /// The call, shared by all recipients.
    pub call: Arc<OutboundCall>,
}

impl Handler<Deliver> for Client {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        if self.lost {
            return;
        }
        let frame = self.frame(&msg.call);
        if self.ready {
            self.push(frame, ctx);
        } else if self.held.len() >= MAX_HELD_FRAMES {
            self.give_up(ctx);
        } else {
            self.held.push(frame);
        }
    }
}

/// The join result has been queued on the socket: release held frames and go live.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ready;

impl Handler<Ready> for Client {
    type Result = ();

    fn handle(&mut self, _msg: Ready, ctx: &mut Self::Context) {
        self.ready = true;
        for frame in std::mem::take(&mut self.held) {
            self.push(frame, ctx);
        }
    }
}

/// Stop this client (leave, socket close, delete, shutdown). With `notify_connection` the
/// socket's connection is told the conversation is gone (delete).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopClient {
    /// Tell the connection to drop its channels for this conversation.
    pub notify_connection: bool,
}

impl Handler<StopClient> for Client {
    type Result = ();

    fn handle(&mut self, msg: StopClient, ctx: &mut Self::Context) {
        if msg.notify_connection {
            self.connection.do_send(ConversationGone {
                conversation_id: self.conversation_id,
            });
        }
        ctx.stop();
    }
}

/// The conversation could not even queue a frame for this client (its mailbox is full): close
/// it as a slow consumer.
#[derive(Message)]
#[rtype(result = "()")]
pub struct GiveUp;

impl Handler<GiveUp> for Client {
    type Result = ();

    fn handle(&mut self, _msg: GiveUp, ctx: &mut Self::Context) {
        if !self.lost {
            self.give_up(ctx);
        }
    }
}
