//! Cross-node joins (`serve --cluster`, docs/cluster.md "Requests, output and order"): a client
//! on node B joins a conversation that node A serves. B's socket keeps its [`Connection`];
//! for that conversation it becomes a relay to a *virtual connection* on A — an ordinary
//! [`Connection`] actor whose inbound frames come from NATS instead of a TCP reader and whose
//! outbox is drained to NATS instead of a TCP writer. Everything A's conversation does with
//! that client (join result, `clientio` calls, answers on `dispatcher:<id>`, interactions,
//! notices, the close when it is deleted) is therefore exactly what a local client gets, in the
//! order A's conversation decided, and B copies each frame into the real socket's outbox
//! unchanged (callIds included: the virtual connection serves this one client, so its
//! channels and callIds are the client's own).
//!
//! Subjects (`<relay>` is a UUID per cross-node join):
//! - `rt.node.<A>.relay.open` (request-reply): B asks A for a virtual connection.
//! - `rt.node.<A>.relay.<relay>.in`: B → A, the client's frames for that conversation.
//! - `rt.node.<B>.relay.<relay>.out`: A → B, the virtual connection's frames.
//!
//! Each message starts with one kind byte: `T` a text frame, `B` several (what A's outbox held
//! at once: each a 4-byte length and the frame), `C` a chunk of a message too large for one
//! NATS message (the rest follows, ending with its own kind), `P` a ping from A's
//! heartbeat, `O` B's pong, `X` the end (B's socket closed or left; A's connection closed).
//! One publisher task per direction keeps frames in order; its queue is bounded
//! ([`RELAY_QUEUE_FRAMES`]): past it the relay ends as a slow consumer would. Liveness: A's
//! virtual connection pings every `--ping-interval` and drops a relay that does not answer (B
//! died); A's side sends a heartbeat whenever it has been quiet for a third of the lease time,
//! and B ends a relay that hears nothing for a whole lease time (A died).
//!
//! Failover: when a relay ends without the client leaving (A died, or lost the conversation's
//! lease), B joins the conversation again on the client's behalf, without a join answer: it
//! retries until the old owner's lease lapses, then either takes the conversation over itself
//! (rebuilt from the log stream) or relays to whichever node did. The client keeps its socket
//! and channels and reads what it missed with `getDisplayHistory(afterSeq)`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::prelude::*;
use actix_http::ws::{Message, ProtocolError};
use bytes::Bytes;
use futures_util::StreamExt;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::ids::ConversationId;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, Outbox, OutboxReceiver, Outgoing, PushError};
use roundtable_actors::protocol::{self, RpcError, AGENT_SERVER_CHANNEL};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use roundtable_actors::client::Ready;
use roundtable_actors::ids::ConversationRef;

use super::Connection;
use crate::server::AppState;

/// Largest message a relay joins from chunks (a history answer of a very long conversation
/// can be tens of MB); a larger one is dropped with a warning.
pub const MAX_RELAYED_MESSAGE: usize = 256 << 20;
/// Frames one relay direction may have waiting for NATS.
pub const RELAY_QUEUE_FRAMES: usize = 4096;
/// Bytes of a NATS message's payload used for one chunk when a frame exceeds the server's
/// `max_payload` (room left for the kind byte and headers).
const CHUNK_MARGIN: usize = 1024;

const TEXT: u8 = b'T';
/// Several text frames in one message (see [`batch_frames`]).
const BATCH: u8 = b'B';
/// Text frames one [`BATCH`] carries at most.
const BATCH_FRAMES: usize = 256;
const CHUNK: u8 = b'C';
const PING: u8 = b'P';
const PONG: u8 = b'O';
const END: u8 = b'X';

fn open_subject(node: &str) -> String {
    format!("rt.node.{node}.relay.open")
}

fn in_subject(node: &str, relay: &str) -> String {
    format!("rt.node.{node}.relay.{relay}.in")
}

fn out_subject(node: &str, relay: &str) -> String {
    format!("rt.node.{node}.relay.{relay}.out")
}

/// B's request for a virtual connection.
#[derive(Serialize, Deserialize)]
struct OpenRelay {
    /// The relay's id (a UUID, part of its subjects).
    relay: String,
    /// The asking node (where the `.out` subject lives).
    from: String,
}

/// The sending half of one relay direction: a bounded queue drained in order by one task.
#[derive(Clone)]
pub(super) struct Publisher {
    /// To the task publishing this direction, in order; at most [`RELAY_QUEUE_FRAMES`].
    tx: mpsc::Sender<(u8, Bytes)>,
}

impl Publisher {
    /// Starts the task that publishes to `subject`; it ends after an [`END`] or when every
    /// handle is dropped.
    fn start(cluster: &Cluster, subject: String) -> Publisher {
        let (tx, mut rx) = mpsc::channel::<(u8, Bytes)>(RELAY_QUEUE_FRAMES);
        let client = cluster.client().clone();
        let stats = cluster.clone();
        actix::spawn(async move {
            let max = (client.server_info().max_payload.max(4 * CHUNK_MARGIN)) - CHUNK_MARGIN;
            while let Some((kind, body)) = rx.recv().await {
                let mut rest = body;
                loop {
                    let last = rest.len() <= max;
                    let piece = rest.split_to(rest.len().min(max));
                    let mut payload = Vec::with_capacity(piece.len() + 1);
                    payload.push(if last { kind } else { CHUNK });
                    payload.extend_from_slice(&piece);
                    if let Err(e) = client.publish(subject.clone(), payload.into()).await {
                        log::warn!("cluster relay {subject}: publish failed: {e}");
                        return;
                    }
                    if last {
                        break;
                    }
                }
                stats.stats().relayed_frames.fetch_add(1, Ordering::Relaxed);
                if kind == END {
                    return;
                }
            }
        });
        Publisher { tx }
    }

    /// Queues one message; false when the queue is full or the task has ended.
    pub(super) fn send(&self, kind: u8, body: impl Into<Bytes>) -> bool {
        self.tx.try_send((kind, body.into())).is_ok()
    }

    /// Queues a text frame.
    pub(super) fn text(&self, text: String) -> bool {
        self.send(TEXT, text)
    }

    /// Ends the relay (the other side stops).
    pub(super) fn end(&self) {
        let _ = self.send(END, Bytes::new());
    }
}

/// Joins the chunks of one frame; answers (kind, body) once a message completes one.
struct Chunks {
    /// The chunks of the message being joined (empty between messages); at most `limit`
    /// bytes.
    partial: Vec<u8>,
    /// The message being received is too large and is being skipped to its last part.
    dropping: bool,
    /// [`MAX_RELAYED_MESSAGE`] (tests use less).
    limit: usize,
}

impl Default for Chunks {
    fn default() -> Chunks {
        Chunks {
            partial: Vec::new(),
            dropping: false,
            limit: MAX_RELAYED_MESSAGE,
        }
    }
}

impl Chunks {
    fn take(&mut self, payload: &[u8]) -> Option<(u8, Vec<u8>)> {
        let (&kind, body) = payload.split_first()?;
        if kind == CHUNK {
            if self.partial.len() + body.len() > self.limit {
                log::warn!("cluster relay: a message past {} bytes dropped", self.limit);
                self.partial = Vec::new();
                self.dropping = true;
                return None;
            }
            if !self.dropping {
                self.partial.extend_from_slice(body);
            }
            return None;
        }
        if std::mem::take(&mut self.dropping) {
            return None;
        }
        let mut whole = std::mem::take(&mut self.partial);
        whole.extend_from_slice(body);
        Some((kind, whole))
    }
}

/// One cross-node join held by a socket on this node (B's side).
pub(super) struct RemoteJoin {
    /// The node that serves the conversation.
    pub(super) node: String,
    /// This relay's id (a late "gone" of an earlier relay for the same conversation is
    /// ignored).
    pub(super) relay: String,
    /// The join's `filter` option (a transparent rejoin asks for the same).
    pub(super) filter: bool,
    /// The client's frames toward the virtual connection.
    pub(super) publisher: Publisher,
    /// The client's invokes relayed and not answered yet (channel, callId → method): when the
    /// relay ends they are answered `Cluster unavailable` instead of never. Shared with the
    /// receiving task, which removes what the serving node answers; at most
    /// [`protocol::MAX_IN_FLIGHT`].
    pub(super) unanswered: Unanswered,
}

/// Invokes relayed and not answered yet, by (channel, callId), with their method.
pub(super) type Unanswered = Arc<std::sync::Mutex<HashMap<(String, u64), String>>>;

/// A client agent this socket registered in a relayed conversation: kept so that a
/// transparent rejoin registers it again with the new owner.
pub(super) struct RelayedAgent {
    /// The conversation it is registered in.
    pub(super) conversation: ConversationId,
    /// The registration as the client sent it.
    pub(super) registration: super::client_agents::ClientAgentRequest,
}

/// First callId of the registrations a transparent rejoin sends on the client's behalf (above
/// every callId a client may use, `MAX_SAFE_INTEGER`): their answers are not the client's.
const REREGISTER_CALL_IDS: u64 = 1 << 60;

/// What a transparent rejoin keeps between its attempts.
struct Rejoin {
    /// The join's `filter` option.
    filter: bool,
    /// The node that served the conversation until the relay ended.
    previous: String,
    /// When to stop retrying.
    deadline: std::time::Instant,
    /// The client agents to register again once joined.
    agents: Vec<super::client_agents::ClientAgentRequest>,
}

/// callId of the join a relay sends on its own (a transparent rejoin after the serving node
/// died or lost the conversation): its answer is not the client's and is not forwarded.
const REJOIN_CALL_ID: u64 = u64::MAX;

/// A relay ended: the other node closed it (leave, delete, lost lease), went silent (died), or
/// the socket could not take more.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct RemoteGone {
    /// The conversation.
    pub(super) conversation_id: ConversationId,
    /// Which relay.
    pub(super) relay: String,
    /// Whether the client should stay joined through another owner (false when the join
    /// itself failed or the socket is gone).
    pub(super) rejoin: bool,
}

impl Handler<RemoteGone> for Connection {
    type Result = ();

    fn handle(&mut self, msg: RemoteGone, ctx: &mut Self::Context) {
        let current = self
            .remote
            .get(&msg.conversation_id)
            .is_some_and(|r| r.relay == msg.relay);
        if !current {
            return;
        }
        let remote = self.remote.remove(&msg.conversation_id).expect("checked");
        let unanswered: Vec<((String, u64), String)> = remote
            .unanswered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for ((channel, call_id), method) in unanswered {
            let error = RpcError::ClusterUnavailable(format!(
                "the node serving conversation {} went away before answering; it may or may not \
                 have run",
                msg.conversation_id
            ));
            self.reply(&channel, call_id, &method, Err(error));
        }
        // Its client agents lived on the virtual connection that is gone; a rejoin registers
        // them again.
        let mut agents = Vec::new();
        self.remote_agents.retain(|_, agent| {
            if agent.conversation == msg.conversation_id {
                agents.push(agent.registration.clone());
                false
            } else {
                true
            }
        });
        if msg.rejoin && !self.closing {
            log::info!(
                "socket {}: relay to node {} for conversation {} ended; joining again",
                self.socket_id,
                remote.node,
                msg.conversation_id
            );
            let rejoin = Rejoin {
                filter: remote.filter,
                previous: remote.node,
                deadline: std::time::Instant::now() + self.rejoin_budget(),
                agents,
            };
            self.rejoin(msg.conversation_id, rejoin, ctx);
        } else {
            log::info!(
                "socket {}: relay to conversation {} ended",
                self.socket_id,
                msg.conversation_id
            );
        }
    }
}

impl Connection {
    /// How long a transparent rejoin keeps trying: the dead owner's lease must lapse first.
    fn rejoin_budget(&self) -> Duration {
        self.state
            .cluster
            .as_ref()
            .map_or(Duration::ZERO, |c| c.lease_time() * 3)
    }

    /// Joins `id` again without the client seeing a join answer: locally when this node takes
    /// the conversation over, else through a new relay to whichever node owns it now. The
    /// client keeps its channels; it sees the new owner's output from here on and reads what it
    /// missed with `getDisplayHistory(afterSeq)`.
    fn rejoin(&mut self, id: ConversationId, rejoin: Rejoin, ctx: &mut Context<Self>) {
        if self.closing || self.joined.contains_key(&id) || self.remote.contains_key(&id) {
            return;
        }
        let joining = self.join_request(
            Some(ConversationRef::parse(id.to_string())),
            rejoin.filter,
            ctx,
        );
        ctx.spawn(joining.into_actor(self).map(move |joined, act, ctx| {
            let retry = std::time::Instant::now() < rejoin.deadline;
            match joined {
                Ok(joined) => {
                    if act.closing || act.joined.contains_key(&id) || act.remote.contains_key(&id) {
                        return; // dropping it leaves again
                    }
                    log::info!(
                        "socket {}: rejoined conversation {id} on this node as connection {}",
                        act.socket_id,
                        joined.connection_id
                    );
                    let client = joined.client.clone();
                    act.adopt(joined);
                    client.do_send(Ready);
                    for (k, mut agent) in rejoin.agents.into_iter().enumerate() {
                        agent.conversation = Some(ConversationRef::parse(id.to_string()));
                        act.register_client_agent(REREGISTER_CALL_IDS + k as u64, agent, ctx);
                    }
                }
                // The old owner's lease has not lapsed yet, or the conversation is moving.
                Err(RpcError::OnOtherNode { ref node, .. })
                    if *node == rejoin.previous && retry =>
                {
                    ctx.run_later(REJOIN_RETRY, move |act, ctx| act.rejoin(id, rejoin, ctx));
                }
                Err(RpcError::ClusterUnavailable(_)) if retry => {
                    ctx.run_later(REJOIN_RETRY, move |act, ctx| act.rejoin(id, rejoin, ctx));
                }
                Err(RpcError::OnOtherNode { node, .. }) => {
                    act.pending_reregistrations.insert(id, rejoin.agents);
                    act.join_remote(None, id, node, rejoin.filter, ctx);
                }
                Err(e) => log::info!(
                    "socket {}: conversation {id} not rejoined: {e}",
                    act.socket_id
                ),
            }
        }));
    }

    /// The registry answered that `id` is served by `node`: ask that node for a virtual
    /// connection, then send it the join. `call_id` is the client's join (its answer comes
    /// back as is); `None` for a transparent rejoin, whose answer is not forwarded.
    pub(super) fn join_remote(
        &mut self,
        call_id: Option<u64>,
        id: ConversationId,
        node: String,
        filter: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(cluster) = self.state.cluster.clone() else {
            return;
        };
        let relay = uuid::Uuid::new_v4().to_string();
        let me = cluster.node().to_string();
        let request = OpenRelay {
            relay: relay.clone(),
            from: me.clone(),
        };
        let client = cluster.client().clone();
        let target = node.clone();
        let relay_for_sub = relay.clone();
        let opening = async move {
            let subscription = client
                .subscribe(out_subject(&me, &relay_for_sub))
                .await
                .map_err(|e| (format!("subscribe: {e}"), false))?;
            let body = serde_json::to_vec(&request).expect("serializes");
            let answer = client
                .request(open_subject(&target), body.into())
                .await
                .map_err(|e| {
                    // Gone (killed, or stopping): its lease lapses soon and a join can wait.
                    let gone = matches!(
                        e.kind(),
                        async_nats::RequestErrorKind::NoResponders
                            | async_nats::RequestErrorKind::TimedOut
                    );
                    (format!("node {target} does not answer: {e}"), gone)
                })?;
            if &answer.payload[..] != b"ok" {
                return Err((
                    format!(
                        "node {target}: {}",
                        String::from_utf8_lossy(&answer.payload)
                    ),
                    false,
                ));
            }
            Ok(subscription)
        };
        let fail = move |act: &mut Connection, error: RpcError| match call_id {
            Some(call_id) => act.reply(
                AGENT_SERVER_CHANNEL,
                call_id,
                "joinConversation",
                Err(error),
            ),
            None => log::warn!(
                "socket {}: conversation {id} not rejoined: {error}",
                act.socket_id
            ),
        };
        ctx.spawn(opening.into_actor(self).map(move |opened, act, ctx| {
            let subscription = match opened {
                Ok(s) => s,
                Err((e, gone)) => {
                    // A client's join waits for the conversation's new owner (the lease
                    // time, at most three of it) instead of failing during a failover.
                    if let (Some(call_id), true) = (call_id, gone) {
                        let budget = act.rejoin_budget();
                        let deadline = *act
                            .join_deadlines
                            .entry(call_id)
                            .or_insert_with(|| std::time::Instant::now() + budget);
                        if std::time::Instant::now() < deadline {
                            let conversation = Some(ConversationRef::parse(id.to_string()));
                            ctx.run_later(REJOIN_RETRY, move |act, ctx| {
                                act.join(call_id, conversation, filter, ctx)
                            });
                            return;
                        }
                    }
                    if let Some(call_id) = call_id {
                        act.join_deadlines.remove(&call_id);
                    }
                    return fail(act, RpcError::ClusterUnavailable(e));
                }
            };
            if let Some(call_id) = call_id {
                act.join_deadlines.remove(&call_id);
            }
            let publisher = Publisher::start(&cluster, in_subject(&node, &relay));
            if act.closing || act.remote.contains_key(&id) || act.joined.contains_key(&id) {
                publisher.end();
                return fail(act, RpcError::ChannelExists(protocol::clientio_channel(id)));
            }
            let join_call_id = match call_id {
                Some(call_id) => {
                    // From here the other node answers this callId.
                    act.in_flight
                        .remove(&(AGENT_SERVER_CHANNEL.to_string(), call_id));
                    call_id
                }
                None => REJOIN_CALL_ID,
            };
            let join = protocol::invoke_frame(
                AGENT_SERVER_CHANNEL,
                join_call_id,
                "joinConversation",
                &serde_json::json!([{"conversationId": id, "filter": filter}]),
            );
            publisher.text(join);
            log::info!(
                "socket {}: joining conversation {id} on node {node} (relay {relay})",
                act.socket_id
            );
            let relay_id = relay.clone();
            let unanswered = Unanswered::default();
            if let Some(call_id) = call_id {
                unanswered.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    (AGENT_SERVER_CHANNEL.to_string(), call_id),
                    "joinConversation".into(),
                );
            }
            ctx.spawn(
                receive(
                    subscription,
                    Delivery {
                        socket: act.outbox.clone(),
                        state: act.state.clone(),
                        join_call_id,
                        silent_join: call_id.is_none(),
                        join_pending: true,
                        unanswered: unanswered.clone(),
                    },
                    publisher.clone(),
                    cluster.lease_time(),
                )
                .into_actor(act)
                .map(move |rejoin, _, ctx| {
                    ctx.notify(RemoteGone {
                        conversation_id: id,
                        relay: relay_id,
                        rejoin,
                    })
                }),
            );
            act.remote.insert(
                id,
                RemoteJoin {
                    node,
                    relay,
                    filter,
                    publisher,
                    unanswered,
                },
            );
            // A transparent rejoin registers the client's agents again, behind its join.
            let agents = act.pending_reregistrations.remove(&id).unwrap_or_default();
            for (k, agent) in agents.into_iter().enumerate() {
                act.register_relayed_agent(REREGISTER_CALL_IDS + k as u64, id, agent);
            }
        }));
    }
}

/// Pause between attempts of a transparent rejoin.
const REJOIN_RETRY: Duration = Duration::from_millis(300);

/// B's side of one relay: copies A's frames into the socket's outbox, answers heartbeats, ends
/// on A's end, on silence for `silence` (A died: its heartbeat comes every third of it), or when
/// the socket cannot take more. The answer to `join_call_id` is held back when `silent_join`.
/// Answers whether the client should be rejoined elsewhere.
async fn receive(
    mut subscription: async_nats::Subscriber,
    mut delivery: Delivery,
    publisher: Publisher,
    silence: Duration,
) -> bool {
    let mut chunks = Chunks::default();
    let rejoin = 'relay: loop {
        let message = match tokio::time::timeout(silence, subscription.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => break true,
            Err(_) => {
                log::warn!("cluster relay: the serving node went silent for {silence:?}");
                break true;
            }
        };
        let Some((kind, body)) = chunks.take(&message.payload) else {
            continue;
        };
        match kind {
            TEXT => {
                if let Some(rejoin) = delivery.text(body) {
                    break rejoin;
                }
            }
            BATCH => {
                for frame in batch_frames(&body) {
                    if let Some(rejoin) = delivery.text(frame.to_vec()) {
                        break 'relay rejoin;
                    }
                }
            }
            PING => {
                publisher.send(PONG, Bytes::new());
            }
            END => break true,
            _ => {}
        }
    };
    publisher.end();
    rejoin
}

/// Where B's side of a relay puts the frames it receives.
struct Delivery {
    /// The real socket's outbox (bounded: a full one closes the socket as a slow consumer).
    socket: Outbox,
    /// For the frame counters.
    state: Arc<AppState>,
    /// The callId of the relayed join, whose answer decides whether the relay goes on.
    join_call_id: u64,
    /// The join is a transparent rejoin: its answer is not the client's.
    silent_join: bool,
    /// The answer to the relayed join has not come yet.
    join_pending: bool,
    /// The client's invokes not answered yet; answers passing through are taken out.
    unanswered: Unanswered,
}

impl Delivery {
    /// One text frame from the serving node into the socket's outbox; `Some(rejoin)` ends the
    /// relay (the join was refused, or the socket cannot take more).
    fn text(&mut self, body: Vec<u8>) -> Option<bool> {
        let text = String::from_utf8(body).ok()?;
        if text.contains(AGENT_SERVER_CHANNEL) && answers_own_call(&text) {
            // A registration a rejoin sent on the client's behalf: not the client's answer.
            return None;
        }
        if text.contains("\"invokeResult\"") || text.contains("\"invokeError\"") {
            if let Ok(frame) = serde_json::from_str::<serde_json::Value>(&text) {
                if let (Some(channel), Some(call_id)) =
                    (frame["name"].as_str(), frame["message"]["callId"].as_u64())
                {
                    self.unanswered
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&(channel.to_string(), call_id));
                }
            }
        }
        if self.join_pending && answers(&text, self.join_call_id) {
            self.join_pending = false;
            let failed = join_failed(&text);
            if failed {
                log::info!("cluster relay: join refused by the serving node: {text}");
            }
            if !self.silent_join {
                let _ = self.socket.push(text);
            }
            return failed.then_some(false);
        }
        match self.socket.push(text) {
            Ok(()) => {
                Metrics::inc(&self.state.metrics.frames_out);
                None
            }
            Err(PushError::Full) => {
                Metrics::inc(&self.state.metrics.slow_client_closes);
                self.socket.abort(
                    roundtable_actors::client::SLOW_CONSUMER_CLOSE_CODE,
                    roundtable_actors::client::SLOW_CONSUMER_REASON,
                );
                Some(false)
            }
            Err(_) => Some(false),
        }
    }
}

/// The frames of a [`BATCH`] message: each a big-endian `u32` length, then its bytes.
fn batch_frames(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        let frame = tail.get(..len)?;
        rest = &tail[len..];
        Some(frame)
    })
}

/// Appends one frame to a [`BATCH`] body.
fn push_batch_frame(body: &mut Vec<u8>, frame: &str) {
    body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    body.extend_from_slice(frame.as_bytes());
}

/// Whether `text` is an answer on `agent-server` to `call_id`.
fn answers(text: &str, call_id: u64) -> bool {
    text.contains(AGENT_SERVER_CHANNEL)
        && serde_json::from_str::<serde_json::Value>(text)
            .is_ok_and(|v| v["name"] == AGENT_SERVER_CHANNEL && v["message"]["callId"] == call_id)
}

/// Whether `text` answers, on `agent-server`, an invoke the server sent for the client
/// (callIds from [`REREGISTER_CALL_IDS`]; the rejoin's own join is `join_call_id`).
fn answers_own_call(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v["name"] == AGENT_SERVER_CHANNEL
            && v["message"]["callId"]
                .as_u64()
                .is_some_and(|id| (REREGISTER_CALL_IDS..REJOIN_CALL_ID).contains(&id))
    })
}

/// Whether `text` (an answer) is an `invokeError`.
fn join_failed(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|v| v["message"]["type"] == "invokeError")
}

/// A's side: answers `rt.node.<A>.relay.open` for the server's life, starting one virtual
/// connection per request.
pub async fn serve_relays(state: Arc<AppState>, cluster: Cluster) {
    let client = cluster.client().clone();
    let me = cluster.node().to_string();
    let mut requests = match client.subscribe(open_subject(&me)).await {
        Ok(s) => s,
        Err(e) => {
            log::error!("cluster node {me}: cannot serve relays: {e}");
            return;
        }
    };
    while let Some(request) = requests.next().await {
        let Some(reply) = request.reply.clone() else {
            continue;
        };
        let answer = match serde_json::from_slice::<OpenRelay>(&request.payload) {
            Ok(open)
                if uuid::Uuid::parse_str(&open.relay).is_ok()
                    && roundtable_actors::cluster::ClusterSettings::validate_node_name(
                        &open.from,
                    )
                    .is_ok() =>
            {
                match open_virtual(&state, &cluster, &open).await {
                    Ok(()) => Bytes::from_static(b"ok"),
                    Err(e) => Bytes::from(e),
                }
            }
            _ => Bytes::from_static(b"malformed relay request"),
        };
        let _ = client.publish(reply, answer).await;
    }
}

/// Starts the virtual connection of one relay.
async fn open_virtual(
    state: &Arc<AppState>,
    cluster: &Cluster,
    open: &OpenRelay,
) -> Result<(), String> {
    let client = cluster.client().clone();
    let inbound = client
        .subscribe(in_subject(cluster.node(), &open.relay))
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    let (tx, rx) = outbox(state.config.outbox.clone());
    let publisher = Publisher::start(cluster, out_subject(&open.from, &open.relay));
    let (done_tx, done_rx) = oneshot::channel::<()>();
    actix::spawn(drain(rx, publisher, cluster.lease_time() / 3, done_tx));
    let mut chunks = Chunks::default();
    let frames = inbound
        .take_until(done_rx)
        .filter_map(move |message| {
            let frame = chunks
                .take(&message.payload)
                .and_then(|(kind, body)| match kind {
                    TEXT => String::from_utf8(body)
                        .ok()
                        .map(|text| Ok(Message::Text(text.into()))),
                    PONG => Some(Ok(Message::Pong(Bytes::new()))),
                    END => Some(Ok(Message::Close(None))),
                    _ => None,
                });
            std::future::ready(frame)
        })
        .map(|frame: Result<Message, ProtocolError>| frame);
    let connection = Connection::new(state.clone(), tx, false, true);
    log::info!(
        "cluster: virtual connection for node {} (relay {})",
        open.from,
        open.relay
    );
    Connection::create(move |ctx| {
        ctx.add_stream(frames);
        connection
    });
    Ok(())
}

/// Queues `texts` as one message (a [`TEXT`] for one frame, a [`BATCH`] for several); false
/// when the queue toward the other node is full.
fn flush(publisher: &Publisher, texts: &mut Vec<String>) -> bool {
    match texts.len() {
        0 => true,
        1 => publisher.text(texts.pop().expect("one")),
        _ => {
            let mut body = Vec::with_capacity(texts.iter().map(|t| t.len() + 4).sum());
            for text in texts.drain(..) {
                push_batch_frame(&mut body, &text);
            }
            publisher.send(BATCH, body)
        }
    }
}

/// A's side: drains the virtual connection's outbox to NATS, in order.
async fn drain(
    mut rx: OutboxReceiver,
    publisher: Publisher,
    heartbeat: Duration,
    done: oneshot::Sender<()>,
) {
    'relay: loop {
        let first = match tokio::time::timeout(heartbeat, rx.next()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                // Quiet: tell the other node this one is alive.
                if !publisher.send(PING, Bytes::new()) {
                    break;
                }
                continue;
            }
        };
        // Every text frame queued now goes in one message (a turn's fan-out comes in bursts).
        let mut texts: Vec<String> = Vec::new();
        let mut next = Some(first);
        let mut stop = false;
        while let Some(frame) = next.take() {
            match frame {
                Outgoing::Ping(_) => {
                    if !flush(&publisher, &mut texts) || !publisher.send(PING, Bytes::new()) {
                        break 'relay;
                    }
                }
                Outgoing::Close(_) => {
                    stop = true;
                    break;
                }
                Outgoing::Pong(_) | Outgoing::Binary(_) => {}
                text => texts.extend(text.to_text()),
            }
            if texts.len() >= BATCH_FRAMES {
                break;
            }
            next = rx.try_next_with_budget().map(|(frame, _)| frame);
        }
        if !flush(&publisher, &mut texts) {
            log::warn!("cluster relay: queue toward the other node full; ending the relay");
            break;
        }
        if stop {
            break;
        }
    }
    rx.close();
    publisher.end();
    let _ = done.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch read back frame by frame, through the chunking a large message gets; a
    /// truncated batch yields its whole frames and stops.
    #[test]
    fn batches_and_chunks_round_trip() {
        let frames = ["{\"a\":1}", "", "{\"b\":\"ü\"}"];
        let mut body = Vec::new();
        for f in frames {
            push_batch_frame(&mut body, f);
        }
        let read: Vec<&[u8]> = batch_frames(&body).collect();
        assert_eq!(read, frames.map(str::as_bytes));
        // Split the way the publisher splits a message past max_payload.
        let (first, rest) = body.split_at(5);
        let mut chunks = Chunks::default();
        assert_eq!(chunks.take(&[&[CHUNK][..], first].concat()), None);
        let (kind, whole) = chunks.take(&[&[BATCH][..], rest].concat()).unwrap();
        assert_eq!((kind, whole.as_slice()), (BATCH, body.as_slice()));
        // A cut batch: the whole frames before the cut only.
        let cut = &body[..body.len() - 2];
        assert_eq!(batch_frames(cut).count(), 2);
        assert_eq!(chunks.take(&[]), None);
    }

    /// A message joined from chunks past the limit is dropped whole; the next one arrives.
    #[test]
    fn chunks_past_the_limit_are_dropped() {
        let mut chunks = Chunks {
            limit: 8,
            ..Chunks::default()
        };
        assert_eq!(chunks.take(b"C12345"), None);
        assert_eq!(chunks.take(b"C6789a"), None);
        assert_eq!(chunks.take(b"Cbcdef"), None);
        assert_eq!(chunks.take(b"Tend"), None);
        assert_eq!(chunks.take(b"Tnext"), Some((TEXT, b"next".to_vec())));
        assert_eq!(chunks.take(b"Cab"), None);
        assert_eq!(chunks.take(b"Tcd"), Some((TEXT, b"abcd".to_vec())));
    }
}
