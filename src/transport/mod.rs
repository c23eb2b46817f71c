//! The WebSocket transport: one `Connection` actor per socket, on the TCP stream that
//! actix-http's upgrade service hands over once the 101 is written (`upgrade.rs`): the socket
//! keeps no HTTP/1 dispatcher and no idle buffer (an actix-ws socket kept the dispatcher's two
//! 8 KB buffers for its whole life). Frames are parsed and written with actix-http's `ws`
//! codec (`reader.rs`, `writer.rs`). An earlier design, `actix-web-actors`, was dropped for
//! backpressure, by measurement:
//! a `WebsocketContext` actor is only polled when its socket is writable, so with a peer that
//! stops reading it stalls — it cannot run its heartbeat or close the socket — while producers'
//! `do_send`s pile up in its mailbox. A test server pushing 10 KB frames at 100 MB/s to a
//! non-reading peer grew from 5 MB to 440 MB RSS in 10 s. Here the socket writer is a separate
//! task fed by a bounded [`Outbox`]: the same non-reading peer is closed with 1008 within about
//! a second and RSS stays flat (the load harness's `slow` scenario).
//!
//! Inbound: frames are reassembled (continuations, capped at `max_frame_bytes`, close 1009
//! beyond), text is UTF-8 checked as fragments arrive (close 1007), other protocol errors close
//! with 1002 (1009 for oversize), pings are answered, and a ping goes out every
//! `ping_interval`; a peer that has not answered the previous one is dropped. Each complete
//! message is one envelope: `agent-server` and `discovery` invokes are handled by this actor
//! (the registry does the work), `dispatcher:<id>` goes to the joined conversation, and
//! answers on a hosted client agent's `agent:<name>` channel complete the server's invokes.
//!
//! Outbound: everything goes through the socket's bounded [`Outbox`]; one writer task drains
//! it into the TCP write half, every queued frame in one write. A full outbox closes the socket
//! as a slow consumer.
//!
//! Files: this one holds the actor (state, lifecycle, envelope routing, answers);
//! `upgrade.rs` the hand-over from HTTP; `reader.rs` the inbound frame stream;
//! `frames.rs` the inbound stream handler, reassembly glue and close codes; `writer.rs` the
//! writer task; `agent_server.rs` the typed `agent-server` requests and `discovery`;
//! `hosted_agents.rs` the client agents this socket hosts and the server → client invokes;
//! `relay/` (`serve --cluster`) a conversation another node serves: this socket's relay to a
//! virtual connection there, and the virtual connections this node serves for other nodes.
//!
//! # Implementation notes
//! States: **Open** → (**Closing**: a close frame was queued; inbound is ignored) → **Stopped**
//! when the inbound stream ends. Stopping drops every [`JoinLease`], which leaves each joined
//! conversation (and so unregisters this socket's client agents there), and fails every
//! server → client invoke still waiting for an answer.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::prelude::*;
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse};
use roundtable_actors::client::{ConversationGone, OutboundCall};
use roundtable_actors::conversation::Conversation;
use roundtable_actors::ids::{ConnectionId, ConversationId};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, Outbox, Outgoing, PushError};
use roundtable_actors::protocol::frames::Reassembler;
use roundtable_actors::protocol::{self, RpcResult, AGENT_SERVER_CHANNEL, DISPATCHER_PREFIX};
use roundtable_actors::registry::{ConversationsChanged, JoinLease, UnsubscribeConversations};
use serde_json::Value;
use tokio::sync::oneshot;

use frames::{CLOSE_GOING_AWAY, CLOSE_SERVICE_RESTART};
use lazy_map::LazyMap;

mod agent_server;
mod frames;
mod hosted_agents;
mod inbound;
mod lazy_map;
mod reader;
mod relay;
mod socket_budget;
mod socket_slot;
mod state;
mod upgrade;
mod writer;

pub use relay::{serve_relays, RelayLinks};
pub use socket_budget::{DescriptorBudget, DESCRIPTOR_RESERVE, HTTP_HEADROOM};
pub use socket_slot::SocketSlot;
pub use state::AppState;
pub use upgrade::{upgrade_service, RawUpgrade};

/// Accepts the upgrade and leaves in the request's [`RawUpgrade`] slot what starts a
/// [`Connection`] (or the echo endpoint when `echo`) on the socket once the 101 is written.
pub fn start(
    req: &HttpRequest,
    state: Arc<AppState>,
    echo: bool,
    slot: SocketSlot,
) -> HttpResponse {
    let Some(raw) = req.extensions().get::<RawUpgrade>().cloned() else {
        // Only the upgrade service runs requests that can be upgraded.
        return HttpResponse::InternalServerError().body("this connection cannot be upgraded");
    };
    let response = match actix_http::ws::handshake(req.head()) {
        Ok(mut accepted) => accepted.finish().map_into_boxed_body(),
        Err(refused) => return HttpResponse::from(actix_http::Response::from(refused)),
    };
    let max = state.config.max_frame_bytes;
    let (tx, rx) = outbox(state.config.outbox.clone());
    let peer = req.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut connection = Connection::new(state, tx, echo, false);
    connection.socket_slot = Some(slot);
    let socket_id = connection.socket_id;
    raw.set(Box::new(move |io, leftover| {
        log::debug!("socket {socket_id}: connected from {peer}");
        let (read, write) = io.into_split();
        let (writer_done, stop_reading) = oneshot::channel();
        let frames = reader::Frames::new(read, leftover, max, stop_reading);
        Connection::create(move |ctx| {
            ctx.add_stream(frames);
            actix::spawn(writer::write_loop(write, rx, writer_done));
            connection
        });
    }));
    HttpResponse::from(response)
}

/// What this socket has joined.
struct JoinedConversation {
    /// The client's connection id in the conversation.
    connection_id: ConnectionId,
    /// The conversation, for dispatcher calls.
    conversation: Addr<Conversation>,
    /// Leaves on drop.
    lease: JoinLease,
    /// The join's `filter` option (a rejoin after the conversation moved asks for the same).
    filter: bool,
}

/// One WebSocket.
pub struct Connection {
    /// Sequence number, for logs.
    socket_id: u64,
    /// Shared server state.
    state: Arc<AppState>,
    /// This socket's bounded outbound queue.
    outbox: Outbox,
    /// Conformance echo endpoint: echo every message, speak no protocol.
    echo: bool,
    /// Conversations this socket has joined, by id.
    joined: HashMap<ConversationId, JoinedConversation>,
    /// Joins in flight that the conversation answers itself, each with the slot where it
    /// leaves the membership on its thread before it queues the result; taken into `joined`
    /// before anything on the client's behalf reads it (`agent_server.rs`,
    /// `take_inline_joins`). A second join of one of these conversations takes the registry's
    /// way (and is refused as already joined). One per conversation, bounded by the invokes
    /// in flight; empty (no allocation) between joins.
    joining_inline: Vec<(ConversationId, agent_server::InlineSlot)>,
    /// Conversations this socket joined that another cluster node serves: their frames are
    /// relayed (`relay/`). Bounded like `joined` (one per conversation).
    remote: LazyMap<ConversationId, relay::RemoteJoin>,
    /// This is a virtual connection serving a client of another node: it never relays
    /// further, and it ends when it has no conversation left.
    relay: bool,
    /// Client agents this socket registered in relayed conversations, by name: their
    /// `agent:<name>` frames go through that conversation's relay. At most
    /// `MAX_AGENTS_PER_CONNECTION` together with `agents`.
    remote_agents: LazyMap<String, relay::RelayedAgent>,
    /// Client joins waiting for a conversation's new owner (the node that served it does not
    /// answer): until when they retry, by callId (at most `MAX_IN_FLIGHT`, one per invoke).
    join_deadlines: LazyMap<u64, std::time::Instant>,
    /// (channel, callId) of invokes being handled; a duplicate is dropped unanswered.
    in_flight: HashSet<(String, u64)>,
    /// Joins continuation frames into messages (capped at `max_frame_bytes`).
    fragments: Reassembler,
    /// A ping went out and no pong came back yet.
    awaiting_pong: bool,
    /// A close frame has been queued; everything inbound is ignored.
    closing: bool,
    /// The live conversation list: whether this socket subscribed (the registry is told when
    /// it stops), and changes that arrived before the subscribe answer went out.
    subscription: Subscription,
    /// callId of the next server → client `call` on `agent-server` (`conversationsChanged`).
    next_agent_server_call: u64,
    /// Client agents this socket hosts, by name (channel `agent:<name>`; one per name, as in
    /// TypeAgent). At most `MAX_AGENTS_PER_CONNECTION`.
    agents: LazyMap<String, hosted_agents::HostedAgent>,
    /// Server → client invokes waiting for their answer, by (channel, callId). At most
    /// `MAX_PENDING_INVOKES_PER_CONNECTION`; each also ends at `--client-agent-timeout`.
    pending: LazyMap<(String, u64), hosted_agents::PendingInvoke>,
    /// Token of the next client agent registration (tells registrations of a name apart).
    next_agent_token: u64,
    /// Its place under the socket cap (`None` for a relay's virtual connection, which is not
    /// a socket of this server): given back when the connection stops.
    socket_slot: Option<SocketSlot>,
}

/// Queues `frame` on a socket's `outbox`, counted; a full queue is closed as a slow consumer
/// (counted), unless the socket is `closing` already. True when it closed it. The connection
/// sends through it, and so does a conversation that answers a join on its own thread.
pub(super) fn queue_frame(
    outbox: &Outbox,
    metrics: &Metrics,
    frame: Outgoing,
    closing: bool,
) -> bool {
    match outbox.push_frame(frame) {
        Ok(()) => Metrics::inc(&metrics.frames_out),
        Err(PushError::Full) if !closing => {
            Metrics::inc(&metrics.slow_client_closes);
            outbox.abort(
                roundtable_actors::client::SLOW_CONSUMER_CLOSE_CODE,
                roundtable_actors::client::SLOW_CONSUMER_REASON,
            );
            return true;
        }
        Err(_) => {}
    }
    false
}

/// Answers above this size are followed by a heap trim (see `roundtable_actors::memory`).
const LARGE_ANSWER: usize = 1 << 20;

impl Connection {
    /// A connection writing to `outbox`: a socket's, or (`relay`) the virtual connection that
    /// serves a client of another cluster node (`relay/`).
    pub(super) fn new(state: Arc<AppState>, outbox: Outbox, echo: bool, relay: bool) -> Connection {
        let max = state.config.max_frame_bytes;
        let inbound = state.inbound.clone();
        Connection {
            socket_id: state.next_socket.fetch_add(1, Ordering::Relaxed),
            state,
            outbox,
            echo,
            relay,
            joined: HashMap::new(),
            joining_inline: Vec::new(),
            remote: LazyMap::default(),
            remote_agents: LazyMap::default(),
            join_deadlines: LazyMap::default(),
            in_flight: HashSet::new(),
            fragments: Reassembler::with_budget(max, inbound),
            awaiting_pong: false,
            closing: false,
            subscription: Subscription::None,
            next_agent_server_call: 0,
            agents: LazyMap::default(),
            pending: LazyMap::default(),
            next_agent_token: 0,
            socket_slot: None,
        }
    }

    /// A virtual connection that no longer has a conversation ends its relay (its only client
    /// left, or the conversation is gone).
    pub(super) fn end_idle_relay(&mut self) {
        if self.relay && self.joined.is_empty() {
            self.close(1000, "");
        }
    }

    /// The cross-node join a `dispatcher:<id>` or `clientio:<id>` channel belongs to, or the
    /// one whose conversation hosts the relayed client agent of an `agent:<name>` channel.
    fn remote_on(&self, channel: &str) -> Option<&relay::RemoteJoin> {
        if self.remote.is_empty() {
            return None;
        }
        if let Some(name) = channel.strip_prefix(protocol::AGENT_PREFIX) {
            return self.remote.get(&self.remote_agents.get(name)?.conversation);
        }
        let id = channel
            .strip_prefix(DISPATCHER_PREFIX)
            .or_else(|| channel.strip_prefix(protocol::CLIENTIO_PREFIX))?;
        self.remote.get(&ConversationId::parse(id)?)
    }

    /// Queues a close frame once; everything inbound is ignored from now on.
    pub(super) fn close(&mut self, code: u16, reason: &str) {
        if !self.closing {
            self.closing = true;
            log::debug!("socket {}: closing with {code} {reason}", self.socket_id);
            self.outbox.close(code, reason);
        }
    }

    /// Queues a text frame.
    pub(super) fn send(&mut self, frame: String) {
        self.send_frame(Outgoing::Text(frame));
    }

    /// Queues a frame; a full queue closes the socket as a slow consumer (counted once).
    pub(super) fn send_frame(&mut self, frame: Outgoing) {
        if queue_frame(&self.outbox, &self.state.metrics, frame, self.closing) {
            log::warn!(
                "socket {}: outbound queue full, closing slow client",
                self.socket_id
            );
            self.closing = true;
        }
    }

    /// Answers an invoke (`invokeResult` or `invokeError`, counted by method) and frees its
    /// callId.
    pub(super) fn reply(
        &mut self,
        channel: &str,
        call_id: u64,
        method: &str,
        result: RpcResult<Option<Value>>,
    ) {
        self.in_flight.remove(&(channel.to_string(), call_id));
        if channel == AGENT_SERVER_CHANNEL && !self.join_deadlines.is_empty() {
            self.join_deadlines.remove(&call_id);
        }
        if !self.relay && channel == AGENT_SERVER_CHANNEL && relay::on_clients_behalf(call_id) {
            // This node's own invoke (a transparent rejoin re-registering a client agent):
            // the client never sent it, so it gets no answer. (A virtual connection answers
            // them: the client's node reads those answers and keeps them from the client.)
            if let Err(e) = result {
                log::info!(
                    "socket {}: {method} on the client's behalf failed: {e}",
                    self.socket_id
                );
            }
            return;
        }
        let frame = match result {
            Ok(value) => protocol::invoke_result(channel, call_id, value.as_ref()),
            Err(e) => {
                self.state.metrics.rpc_error(method);
                log::debug!(
                    "socket {}: {channel} {method} #{call_id} failed: {e}",
                    self.socket_id
                );
                protocol::invoke_error(channel, call_id, &e.to_string())
            }
        };
        self.send(frame);
    }

    /// Answers with ready-made JSON text as the `result` (large answers are serialized once).
    pub(super) fn reply_raw(&mut self, channel: &str, call_id: u64, result_json: &str) {
        self.reply_frame(
            channel,
            call_id,
            protocol::invoke_result_raw(channel, call_id, result_json),
        );
    }

    /// The invoke was answered by the conversation, which queued the `invokeResult` on this
    /// socket itself ([`DispatcherReply::Sent`]): it is no longer in flight.
    pub(super) fn answered_in_line(&mut self, channel: &str, call_id: u64) {
        self.in_flight.remove(&(channel.to_string(), call_id));
    }

    /// Answers the invoke with `frame`, its whole `invokeResult` frame built by whoever
    /// computed the result ([`protocol::invoke_result_start`]).
    pub(super) fn reply_frame(&mut self, channel: &str, call_id: u64, frame: String) {
        self.in_flight.remove(&(channel.to_string(), call_id));
        let large = frame.len() > LARGE_ANSWER;
        self.send(frame);
        if large {
            roundtable_actors::memory::trim_soon();
        }
    }

    /// Runs `work` and answers the invoke with its result.
    pub(super) fn answer<F>(
        &mut self,
        ctx: &mut Context<Self>,
        channel: String,
        call_id: u64,
        method: String,
        work: F,
    ) where
        F: std::future::Future<Output = RpcResult<Option<Value>>> + 'static,
    {
        ctx.spawn(
            work.into_actor(self)
                .map(move |res, act, _| act.reply(&channel, call_id, &method, res)),
        );
    }
}

impl Actor for Connection {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.state.config.ping_interval, |act, ctx| {
            if act.closing {
                return;
            }
            if act.awaiting_pong {
                log::info!(
                    "socket {}: no pong to the previous ping, dropping",
                    act.socket_id
                );
                // Abort, not a polite close behind what is queued: the peer reads nothing.
                act.closing = true;
                act.outbox.abort(CLOSE_GOING_AWAY, "ping timeout");
                ctx.stop();
                return;
            }
            act.awaiting_pong = true;
            let _ = act.outbox.push_frame(Outgoing::Ping(Vec::new()));
        });
        // Graceful shutdown: close with 1001 (1012 for a restart).
        let mut closing = self.state.closing.clone();
        ctx.spawn(
            async move {
                while !*closing.borrow_and_update() {
                    if closing.changed().await.is_err() {
                        return false;
                    }
                }
                true
            }
            .into_actor(self)
            .map(|stop, act, _| {
                if !stop {
                    return;
                }
                if act
                    .state
                    .restarting
                    .load(std::sync::atomic::Ordering::Acquire)
                {
                    act.close(CLOSE_SERVICE_RESTART, "server restarting");
                } else {
                    act.close(CLOSE_GOING_AWAY, "server shutting down");
                }
            }),
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // Its place under the socket cap goes back now, not when the last future holding
        // the actor's state lets go of it.
        self.socket_slot = None;
        if !matches!(self.subscription, Subscription::None) {
            self.state.registry.do_send(UnsubscribeConversations {
                socket: self.socket_id,
            });
        }
        // Dropping the leases leaves every joined conversation; relays end.
        let n = self.joined.len() + self.remote.len();
        self.joined.clear();
        for (_, remote) in self.remote.drain() {
            remote.publisher.end();
        }
        self.fail_pending_invokes();
        // The writer task ends with the connection: a close already queued (the peer's close,
        // echoed) goes out; otherwise what is still queued is dropped ahead of it.
        if !self.closing {
            self.outbox.abort(CLOSE_GOING_AWAY, "");
        }
        log::debug!("socket {}: closed (left {n} conversations)", self.socket_id);
    }
}

/// A change of the live conversation list this socket subscribed to: queued as a `call` on
/// `agent-server` with this socket's next callId (bounded like every frame: a socket that does
/// not read is closed as a slow consumer).
impl Handler<ConversationsChanged> for Connection {
    type Result = ();

    fn handle(&mut self, msg: ConversationsChanged, _ctx: &mut Self::Context) {
        match &mut self.subscription {
            Subscription::None => {}
            Subscription::Answering(early) => early.push(msg.call),
            Subscription::Live => self.send_list_change(&msg.call),
        }
    }
}

/// Where this socket stands with the live conversation list.
#[derive(Debug)]
enum Subscription {
    /// Not subscribed: changes are dropped.
    None,
    /// `subscribeConversations` is being answered: changes wait here so none goes out before
    /// the list they change (the registry sends them right after it computed the list; they
    /// can only pile up for the moment the answer takes to reach this actor).
    Answering(Vec<Arc<OutboundCall>>),
    /// The list went out: changes are sent as they come.
    Live,
}

impl Connection {
    /// Queues one `conversationsChanged` call on `agent-server` with the next callId.
    fn send_list_change(&mut self, call: &OutboundCall) {
        if self.closing {
            return;
        }
        let call_id = self.next_agent_server_call;
        self.next_agent_server_call += 1;
        let prefix = protocol::call_prefix(AGENT_SERVER_CHANNEL);
        self.send(call.frame(&prefix, call_id));
    }

    /// The subscribe answer went out: the changes that came meanwhile follow it, in order.
    pub(super) fn list_answered(&mut self) {
        if let Subscription::Answering(early) =
            std::mem::replace(&mut self.subscription, Subscription::Live)
        {
            for call in early {
                self.send_list_change(&call);
            }
        }
    }
}

impl Handler<ConversationGone> for Connection {
    type Result = ();

    fn handle(&mut self, msg: ConversationGone, ctx: &mut Self::Context) {
        self.take_inline_joins();
        if let Some(joined) = self.joined.remove(&msg.conversation_id) {
            joined.lease.disarm();
            // A virtual connection does not follow: its relay ends, and the client's own node
            // joins again for it.
            match msg.moved.filter(|_| !self.relay && !self.closing) {
                Some(next_call_id) => {
                    self.follow_moved(msg.conversation_id, joined.filter, next_call_id, ctx)
                }
                None => {
                    self.drop_agents_of(msg.conversation_id, ctx);
                    log::info!(
                        "socket {}: conversation {} is gone; its channels are closed",
                        self.socket_id,
                        msg.conversation_id
                    );
                }
            }
        }
        self.end_idle_relay();
    }
}
