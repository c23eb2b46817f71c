//! One client joined to a conversation (one socket joined to two conversations is two
//! clients), in two parts:
//! - [`ClientOutput`]: that client's side of the `clientio:<id>` channel — the outbound callId
//!   counter, the ready gate, the push into the socket's bounded [`Outbox`]. The parent
//!   [`Conversation`](crate::conversation::Conversation) owns it and writes each call it routes
//!   to this client straight into the outbox (one splice and one push per recipient, no actor
//!   message in between), so a stuck client never blocks the conversation: a full outbox is
//!   reported, not waited on.
//! - the [`Client`] actor: the client's lifecycle. The connection tells it [`Ready`] once the
//!   join result is queued (it passes that on to the conversation as [`ClientReady`]); it stops
//!   on [`StopClient`] (leave, socket close, delete), and on [`GiveUp`] / [`SocketGone`] when
//!   its output failed, telling the conversation ([`ClientLost`]) and, for a slow consumer,
//!   the connection ([`ConversationGone`]).
//!
//! # Implementation notes
//! Output states: **Held** (from the join; frames are buffered, bounded, because the client
//! creates its `clientio` channel only after it has read the join result) → **Live** on
//! [`ClientReady`] (held frames go out in order, then every frame straight to the outbox) →
//! **Lost** on a full outbox (the socket is closed with 1008 "slow consumer") or a closed one.

use std::sync::{Arc, Mutex, Weak};

use actix::prelude::*;

use crate::ids::{ConnectionId, ConversationId};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Outgoing, PushError, SharedBytes, Wakes};

/// How long a client's socket writer waits after its join result before the conversation's
/// first frames: TypeAgent's client library creates the `clientio` channel only once its join
/// call has returned, in a continuation that runs after the read that carried the result has
/// been handled, and drops a frame that came in that same read (`Invalid channel name
/// clientio:…`). TypeAgent's own server sends them a turn of its event loop later for the
/// same reason; a write of their own, 5 ms later, keeps them out of the result's read.
pub const JOIN_SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

/// The close a client whose queue overflowed gets (declared with the outbox that sends it).
pub use crate::outbox::{SLOW_CONSUMER_CLOSE_CODE, SLOW_CONSUMER_REASON};
/// Frames a not-yet-ready client may hold; more means it is not reading.
pub const MAX_HELD_FRAMES: usize = 1024;
/// Mailbox bound of a client actor. Only lifecycle messages reach it (ready, stop, give up),
/// never frames, so a handful is plenty.
pub const CLIENT_MAILBOX: usize = 16;

/// A `clientio` call, serialized once and shared by every recipient.
#[derive(Debug)]
pub struct OutboundCall {
    /// Method name (`appendDisplay`, `notify`, …).
    pub method: &'static str,
    /// Everything after the callId (`,"name":…,"args":[…]}}`), built once for all recipients
    /// and shared by their frames ([`Outgoing::Spliced`]).
    tail: Arc<str>,
    /// Where the args array starts in `tail`.
    args_start: usize,
    /// The server budget's charge for `tail` while any recipient's frame holds it (so it
    /// counts once, not once per recipient); a new one is made when the last is written.
    fan_out: Mutex<Weak<SharedBytes>>,
}

impl OutboundCall {
    /// Serializes the arguments once.
    pub fn new(method: &'static str, args: &serde_json::Value) -> Arc<OutboundCall> {
        let args_json = serde_json::to_string(args).expect("args serialize");
        let tail = crate::protocol::call_tail(method, &args_json);
        let args_start = tail.len() - 2 - args_json.len();
        Arc::new(OutboundCall {
            method,
            tail: tail.into(),
            args_start,
            fan_out: Mutex::new(Weak::new()),
        })
    }

    /// The shared bytes of this call's frames now queued anywhere (see `fan_out`).
    fn shared_bytes(&self) -> Arc<SharedBytes> {
        let mut fan_out = self.fan_out.lock().unwrap_or_else(|e| e.into_inner());
        fan_out.upgrade().unwrap_or_else(|| {
            let shared = SharedBytes::new(self.tail.len());
            *fan_out = Arc::downgrade(&shared);
            shared
        })
    }

    /// The JSON array of arguments.
    pub fn args_json(&self) -> &str {
        &self.tail[self.args_start..self.tail.len() - 2]
    }

    /// The whole frame for one recipient's channel prefix and callId, as text.
    pub fn frame(&self, prefix: &str, call_id: u64) -> String {
        crate::protocol::splice_call(prefix, call_id, &self.tail)
    }

    /// The frame for one recipient, as parts the socket writer joins (no text built here).
    pub fn spliced(&self, prefix: &Arc<str>, call_id: u64) -> Outgoing {
        Outgoing::Spliced {
            prefix: prefix.clone(),
            number: call_id,
            tail: self.tail.clone(),
        }
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
/// moved to another cluster node, or the client was dropped), so the connection forgets its
/// channels.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ConversationGone {
    /// The conversation.
    pub conversation_id: ConversationId,
    /// `Some` when this node lost the conversation to another node (`serve --cluster`): the
    /// connection joins it again on the client's behalf, and only if that fails tells the
    /// client with the moved notice. It holds the callId that notice takes on `clientio:<id>`
    /// (the next one the conversation would have used for this client).
    pub moved: Option<u64>,
}

/// What became of a frame handed to a [`ClientOutput`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// In the socket's outbox.
    Queued,
    /// Held until the client is ready.
    Held,
    /// The outbox (or the held buffer) is full: the client must be closed as a slow consumer.
    SlowConsumer,
    /// The socket is gone: the client must leave.
    SocketGone,
}

/// One client's side of its `clientio:<id>` channel, owned by the conversation (see the module
/// docs): callIds, the ready gate and the bounded push.
#[derive(Debug)]
pub struct ClientOutput {
    /// The start of every frame on this client's `clientio:<id>` channel, up to the callId.
    call_prefix: Arc<str>,
    /// Next callId on this client's `clientio` channel (per channel and direction).
    next_call_id: u64,
    /// The socket's bounded queue.
    outbox: Outbox,
    /// False until the join result has been queued; frames wait in `held` meanwhile.
    ready: bool,
    /// Frames produced before the client was ready (at most [`MAX_HELD_FRAMES`]), each with
    /// its call's shared bytes.
    held: Vec<(Outgoing, Arc<SharedBytes>)>,
    /// Shared counters (`frames_out`).
    metrics: Arc<Metrics>,
}

impl ClientOutput {
    /// A held (not yet ready) output into `outbox`; `call_prefix` is the conversation's
    /// `clientio` frame prefix, built once per conversation.
    pub fn new(call_prefix: Arc<str>, outbox: Outbox, metrics: Arc<Metrics>) -> ClientOutput {
        ClientOutput {
            call_prefix,
            next_call_id: 0,
            outbox,
            ready: false,
            held: Vec::new(),
            metrics,
        }
    }

    /// The callId this client's next call will take (a moved conversation hands it to the
    /// connection, whose notice, if it has to send one, goes on with it).
    pub fn next_call_id(&self) -> u64 {
        self.next_call_id
    }

    /// Frames `call` with this client's next callId and queues it (or holds it until ready).
    pub fn send(&mut self, call: &OutboundCall) -> Sent {
        self.send_then(call, None)
    }

    /// Like [`send`](Self::send), the socket's writer woken by `wakes` instead of now: a
    /// conversation releasing several calls at once (what waited for an fsync) hands each
    /// client all of them before its writer runs, so they go out in one write.
    pub fn send_later(&mut self, call: &OutboundCall, wakes: &mut Wakes) -> Sent {
        self.send_then(call, Some(wakes))
    }

    fn send_then(&mut self, call: &OutboundCall, wakes: Option<&mut Wakes>) -> Sent {
        let id = self.next_call_id;
        self.next_call_id += 1;
        let frame = call.spliced(&self.call_prefix, id);
        let shared = call.shared_bytes();
        if !self.ready {
            if self.held.len() >= MAX_HELD_FRAMES {
                return Sent::SlowConsumer;
            }
            self.held.push((frame, shared));
            return Sent::Held;
        }
        self.push(frame, &shared, wakes)
    }

    /// Queues a whole frame of another channel (an invoke's answer the conversation gives in
    /// line with this client's calls), in order with them (or held with them until ready).
    pub fn send_frame(&mut self, frame: String) -> Sent {
        let frame = Outgoing::Text(frame);
        let shared = SharedBytes::new(0);
        if !self.ready {
            if self.held.len() >= MAX_HELD_FRAMES {
                return Sent::SlowConsumer;
            }
            self.held.push((frame, shared));
            return Sent::Held;
        }
        self.push(frame, &shared, None)
    }

    /// The join result is queued: after a [`JOIN_SETTLE`] pause, the held frames go out in
    /// order, then every frame directly. Answers the first failure, if any.
    pub fn go_live(&mut self) -> Sent {
        self.ready = true;
        if let Err(e) = self.outbox.push_frame(Outgoing::Pause(JOIN_SETTLE)) {
            return match e {
                PushError::Full => Sent::SlowConsumer,
                PushError::Closed => Sent::SocketGone,
            };
        }
        for (frame, shared) in std::mem::take(&mut self.held) {
            match self.push(frame, &shared, None) {
                Sent::Queued => {}
                failed => return failed,
            }
        }
        Sent::Queued
    }

    fn push(
        &mut self,
        frame: Outgoing,
        shared: &Arc<SharedBytes>,
        wakes: Option<&mut Wakes>,
    ) -> Sent {
        let pushed = match wakes {
            Some(wakes) => self.outbox.push_sharing_later(frame, Some(shared), wakes),
            None => self.outbox.push_sharing(frame, Some(shared)),
        };
        match pushed {
            Ok(()) => {
                Metrics::inc(&self.metrics.frames_out);
                Sent::Queued
            }
            Err(PushError::Full) => Sent::SlowConsumer,
            Err(PushError::Closed) => Sent::SocketGone,
        }
    }

    /// Closes the socket as a slow consumer (1008) ahead of whatever is still queued.
    pub fn abort_slow(&mut self) {
        self.held.clear();
        self.outbox
            .abort(SLOW_CONSUMER_CLOSE_CODE, SLOW_CONSUMER_REASON);
    }
}

/// The lifecycle of one client of one conversation (see the module docs).
pub struct Client {
    /// Conversation id, for logs.
    conversation_id: ConversationId,
    /// Connection id within the conversation.
    connection_id: ConnectionId,
    /// Parent, told when this client is ready and when it drops itself.
    conversation: ConversationLink,
    /// The socket's connection, told when this client is gone.
    connection: Recipient<ConversationGone>,
    /// Shared counters.
    metrics: Arc<Metrics>,
    /// Set once this client has given up; it is stopping.
    lost: bool,
}

/// What a client tells its conversation.
pub struct ConversationLink {
    /// The join result is queued: the conversation may send.
    pub ready: Recipient<ClientReady>,
    /// This client dropped itself (slow consumer, socket gone).
    pub lost: Recipient<ClientLost>,
}

impl Client {
    /// A new client (its conversation holds its [`ClientOutput`], not yet ready).
    pub fn new(
        conversation_id: ConversationId,
        connection_id: ConnectionId,
        conversation: ConversationLink,
        connection: Recipient<ConversationGone>,
        metrics: Arc<Metrics>,
    ) -> Client {
        Client {
            conversation_id,
            connection_id,
            conversation,
            connection,
            metrics,
            lost: false,
        }
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

/// The join result has been queued on the socket: the client may receive. Sent by the
/// connection; passed on to the conversation as [`ClientReady`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ready;

impl Handler<Ready> for Client {
    type Result = ();

    fn handle(&mut self, _msg: Ready, _ctx: &mut Self::Context) {
        self.conversation.ready.do_send(ClientReady {
            connection_id: self.connection_id,
        });
    }
}

/// Sent by a client to its conversation once its join result is queued: the conversation
/// releases the frames it held for it and sends it everything from then on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClientReady {
    /// The client's connection id within the conversation.
    pub connection_id: ConnectionId,
}

/// Stop this client (leave, socket close, delete, move, shutdown). With `notify_connection`
/// the socket's connection is told the conversation is gone (delete, move).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopClient {
    /// Tell the connection to drop its channels for this conversation.
    pub notify_connection: bool,
    /// The conversation moved to another node: [`ConversationGone::moved`].
    pub moved: Option<u64>,
}

impl Handler<StopClient> for Client {
    type Result = ();

    fn handle(&mut self, msg: StopClient, ctx: &mut Self::Context) {
        if msg.notify_connection {
            self.connection.do_send(ConversationGone {
                conversation_id: self.conversation_id,
                moved: msg.moved,
            });
        }
        ctx.stop();
    }
}

/// The conversation found this client's outbox full and has closed its socket as a slow
/// consumer: the client tells the connection and the conversation, and stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct GiveUp;

impl Handler<GiveUp> for Client {
    type Result = ();

    fn handle(&mut self, _msg: GiveUp, ctx: &mut Self::Context) {
        if self.lost {
            return;
        }
        self.lost = true;
        Metrics::inc(&self.metrics.slow_client_closes);
        log::warn!(
            "conversation {} connection {}: closing slow client (outbound queue full)",
            self.conversation_id,
            self.connection_id
        );
        self.conversation.lost.do_send(ClientLost {
            connection_id: self.connection_id,
        });
        self.connection.do_send(ConversationGone {
            conversation_id: self.conversation_id,
            moved: None,
        });
        ctx.stop();
    }
}

/// The conversation found this client's socket closed: the client leaves now rather than
/// linger as a phantom (the connection is already gone).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SocketGone;

impl Handler<SocketGone> for Client {
    type Result = ();

    fn handle(&mut self, _msg: SocketGone, ctx: &mut Self::Context) {
        if self.lost {
            return;
        }
        self.lost = true;
        self.conversation.lost.do_send(ClientLost {
            connection_id: self.connection_id,
        });
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{outbox, OutboxLimits};

    /// A call routed before the join result goes out only at `go_live`, behind the pause
    /// that keeps it out of the result's write; later calls go straight to the outbox.
    #[test]
    fn held_calls_follow_the_join_results_pause() {
        let (tx, mut rx) = outbox(OutboxLimits::default());
        let mut output = ClientOutput::new(Arc::from("{\"c\":"), tx, Arc::default());
        let call = OutboundCall::new("notify", &serde_json::json!([1]));
        assert_eq!(output.send(&call), Sent::Held);
        assert!(rx.try_next_with_budget().is_none(), "held until ready");
        assert_eq!(output.go_live(), Sent::Queued);
        let (first, _) = rx.try_next_with_budget().expect("the pause");
        assert!(matches!(first, Outgoing::Pause(p) if p == JOIN_SETTLE));
        let (held, _) = rx.try_next_with_budget().expect("the held call");
        assert!(held.to_text().unwrap().contains("notify"));
        assert_eq!(output.send(&call), Sent::Queued);
        assert!(rx.try_next_with_budget().is_some());
    }
}
