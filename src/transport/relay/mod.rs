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
//! Subjects (`<relay>` is a UUID per cross-node join; `rt` is the cluster name, see
//! [`Names`](roundtable_actors::cluster::Names)):
//! - `rt.node.<A>.relay.open` (request-reply): B asks A for a virtual connection.
//! - `rt.node.<A>.relay.<relay>.in`: B → A, the client's frames for that conversation.
//! - `rt.node.<B>.relay.<relay>.out`: A → B, the virtual connection's frames.
//!
//! Each message starts with one kind byte: `T` a text frame, `B` several (what A's outbox held
//! at once: each a 4-byte length and the frame), `C` a chunk of a message too large for one
//! NATS message (the rest follows, ending with its own kind), `P` a ping from A's
//! heartbeat, `O` B's pong, `X` the end (B's socket closed or left; A's connection closed).
//! One publisher task per direction keeps frames in order; its queue is bounded
//! ([`wire::RELAY_QUEUE_FRAMES`]): past it the relay ends as a slow consumer would. Liveness: A's
//! virtual connection pings every `--ping-interval` and drops a relay that does not answer (B
//! died); A's side sends a heartbeat whenever it has been quiet for a third of the lease time,
//! and B ends a relay that hears nothing for a whole lease time (A died).
//!
//! Failover: when a relay ends without the client leaving (A died, or lost the conversation's
//! lease), B joins the conversation again on the client's behalf, without a join answer: it
//! retries until the old owner's lease lapses, then either takes the conversation over itself
//! (rebuilt from the log stream) or relays to whichever node did. The client keeps its socket
//! and channels and reads what it missed with `getDisplayHistory(afterSeq)`.
//!
//! Files: this one is B's side (the socket's relays, transparent rejoins, what B does with A's
//! frames); `serving.rs` is A's side (virtual connections); `wire.rs` the message format both
//! use (subjects, kinds, ordered publishing, chunks, batches).

mod serving;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use futures_util::StreamExt;
use roundtable_actors::client::Ready;
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{Outbox, PushError};
use roundtable_actors::protocol::{self, RpcError, AGENT_SERVER_CHANNEL};
use serde::Deserialize;

pub use serving::serve_relays;
use wire::{batch_frames, Chunks, OpenRelay, Publisher};
use wire::{BATCH, END, PING, PONG, TEXT};

use super::Connection;
use crate::server::AppState;

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
        let out_subject = cluster.names().relay_out(&me, &relay);
        let open_subject = cluster.names().relay_open(&target);
        let opening = async move {
            let subscription = client
                .subscribe(out_subject)
                .await
                .map_err(|e| (format!("subscribe: {e}"), false))?;
            let body = serde_json::to_vec(&request).expect("serializes");
            let answer = client
                .request(open_subject, body.into())
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
            let publisher = Publisher::start(&cluster, cluster.names().relay_in(&node, &relay));
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

impl Connection {
    /// Sends `method(args)`, the client's invoke `call_id` on `agent-server`, through the
    /// relay of conversation `id`: the serving node's virtual connection answers it with the
    /// client's callId, and until it does the invoke counts as unanswered (answered `Cluster
    /// unavailable` if the relay ends first; the server's own invokes, above
    /// `MAX_SAFE_INTEGER`, are not counted). False when `id` is not relayed.
    pub(super) fn relay_invoke(
        &mut self,
        id: ConversationId,
        call_id: u64,
        method: &str,
        args: serde_json::Value,
    ) -> bool {
        let Some(remote) = self.remote.get(&id) else {
            return false;
        };
        let ch = AGENT_SERVER_CHANNEL;
        self.in_flight.remove(&(ch.to_string(), call_id));
        if call_id <= protocol::MAX_SAFE_INTEGER {
            remote
                .unanswered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((ch.to_string(), call_id), method.to_string());
        }
        remote
            .publisher
            .text(protocol::invoke_frame(ch, call_id, method, &args));
        true
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
        if let Some(answer) = Answer::read(&text) {
            let on_agent_server = answer.name == AGENT_SERVER_CHANNEL;
            let call_id = answer.message.call_id;
            if on_agent_server && (REREGISTER_CALL_IDS..REJOIN_CALL_ID).contains(&call_id) {
                // A registration a rejoin sent on the client's behalf: not the client's answer.
                return None;
            }
            self.unanswered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(answer.name, call_id));
            if self.join_pending && on_agent_server && call_id == self.join_call_id {
                self.join_pending = false;
                let failed = answer.message.kind == "invokeError";
                if failed {
                    log::info!("cluster relay: join refused by the serving node: {text}");
                }
                if !self.silent_join {
                    let _ = self.socket.push(text);
                }
                return failed.then_some(false);
            }
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

/// The envelope of an answer frame (`invokeResult` / `invokeError`) passing through a relay:
/// what B needs to route it (the rest of the frame, a result of any size, is skipped).
#[derive(Deserialize)]
struct Answer {
    /// The channel.
    name: String,
    /// Its type and callId.
    message: AnswerMessage,
}

/// The part of an answer's `message` a relay reads.
#[derive(Deserialize)]
struct AnswerMessage {
    /// `invokeResult` or `invokeError`.
    #[serde(rename = "type")]
    kind: String,
    /// The invoke it answers.
    #[serde(rename = "callId")]
    call_id: u64,
}

impl Answer {
    /// `text` read once when it is an answer; any other frame is only scanned for the two
    /// type names.
    fn read(text: &str) -> Option<Answer> {
        if !text.contains("\"invokeResult\"") && !text.contains("\"invokeError\"") {
            return None;
        }
        serde_json::from_str::<Answer>(text)
            .ok()
            .filter(|a| a.message.kind == "invokeResult" || a.message.kind == "invokeError")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers are read (any result size is skipped); frames that only mention an answer type,
    /// or are not answers, pass as ordinary frames.
    #[test]
    fn answers_are_told_from_other_frames() {
        let result =
            protocol::invoke_result(AGENT_SERVER_CHANNEL, 7, Some(&serde_json::json!([1])));
        let answer = Answer::read(&result).expect("an invokeResult");
        assert_eq!(
            (
                answer.name.as_str(),
                answer.message.call_id,
                answer.message.kind.as_str()
            ),
            (AGENT_SERVER_CHANNEL, 7, "invokeResult")
        );
        let error = protocol::invoke_error("dispatcher:x", REJOIN_CALL_ID, "no");
        let answer = Answer::read(&error).expect("an invokeError");
        assert_eq!(
            (
                answer.name.as_str(),
                answer.message.call_id,
                answer.message.kind.as_str()
            ),
            ("dispatcher:x", REJOIN_CALL_ID, "invokeError")
        );
        let call = protocol::invoke_frame(
            "clientio:x",
            3,
            "setDisplay",
            &serde_json::json!(["invokeResult"]),
        );
        assert!(Answer::read(&call).is_none());
        assert!(Answer::read("{\"invokeError\": 1}").is_none());
    }
}
