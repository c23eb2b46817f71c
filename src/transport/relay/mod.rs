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
//! Relays per node and conversation: all the relays between one node B and one conversation
//! served by A share one *link* (A → B), so a call A's conversation fans out to many clients
//! on B crosses NATS once: its shared bytes once, then a small reference per client, each
//! client's frames in the order its virtual connection queued them (`link_wire.rs`).
//!
//! Subjects (`<relay>` is a UUID per cross-node join, `<link>` a UUID B picks per serving node
//! and conversation):
//! - `rt.node.<A>.relay.open` (request-reply): B asks A for a virtual connection, naming the
//!   link and the relay's number (*slot*) in it.
//! - `rt.node.<A>.relay.<relay>.in`: B → A, the client's frames for that conversation.
//! - `rt.node.<B>.link.<link>.out`: A → B, the frames of every virtual connection of the link.
//!
//! Each message starts with one kind byte: `T` a text frame (B → A), `L` a link message (A →
//! B: entries for its relays — frames, shared pieces, a relay's ping, a relay's end), `C` a
//! chunk of a message too large for one NATS message (the rest follows, ending with its own
//! kind), `P` a ping (A's heartbeat on a link), `O` B's pong, `X` the end of a relay (B's
//! socket closed or left). One task per direction keeps frames in order: per relay B → A (its
//! queue bounded, [`wire::RELAY_QUEUE_FRAMES`]: past it the socket is closed), per link A → B
//! (it reads the virtual connections' bounded outboxes itself: one that fills up while the
//! link waits for NATS is closed as a slow consumer, its relay ends, the others go on); a
//! socket on B that cannot take its frames ends its own relay, not the link. Liveness: A's virtual connection pings every
//! `--ping-interval` and drops a relay that does not answer (B died); A's link sends a
//! heartbeat whenever it has been quiet for a third of the lease time, and B ends every relay
//! of a link that hears nothing for a whole lease time (A died). A link ends with its last
//! relay.
//!
//! Failover: when a relay ends without the client leaving (A died, or lost the conversation's
//! lease), B joins the conversation again on the client's behalf, without a join answer: it
//! retries until the old owner's lease lapses, then either takes the conversation over itself
//! (rebuilt from the log stream) or relays to whichever node did. The client keeps its socket
//! and channels and reads what it missed with `getDisplayHistory(afterSeq)`.
//!
//! Files: this one is B's side of a relay (the socket's relays, transparent rejoins);
//! `link_in.rs` B's side of links (A's frames into the sockets); `serving.rs` A's side
//! (virtual connections); `link_out.rs` A's side of links; `wire.rs` the message format
//! (subjects, kinds, ordered publishing, chunks); `link_wire.rs` the entries of a link
//! message.

mod link_in;
mod link_out;
mod link_wire;
mod serving;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use roundtable_actors::client::Ready;
use roundtable_actors::conversation::Conversation;
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::protocol::{self, RpcError, AGENT_SERVER_CHANNEL, MAX_SAFE_INTEGER};

use link_in::Delivery;
pub use serving::serve_relays;
use wire::{OpenRelay, Publisher};

use super::Connection;

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
    /// `Some` for a relay a transparent rejoin opened (until when it may retry, and why it
    /// rejoined): if the serving node refuses its join, the rejoin tries again until then,
    /// and then the client is told as [`Connection::rejoin_failed`] says.
    pub(super) rejoined: Option<(std::time::Instant, RejoinAfter)>,
}

/// Who a cross-node join is for.
pub(super) enum JoinFor {
    /// The client's own `joinConversation`, this callId: the serving node's answer is the
    /// client's.
    Client(u64),
    /// A transparent rejoin on the client's behalf: the answer is not forwarded.
    Rejoin(Rejoin),
}

/// Why a socket joins a conversation again on its client's behalf, which decides what the
/// client is told if that fails.
#[derive(Debug, Clone, Copy)]
pub(super) enum RejoinAfter {
    /// This node lost the conversation to another node; the client's channels here closed
    /// without a word, and `next_call_id` is the callId its notice takes on `clientio:<id>`.
    Moved {
        /// The next callId the conversation would have used for this client.
        next_call_id: u64,
    },
    /// The relay to the node serving it ended: that node died or lost the conversation, or
    /// the conversation was deleted there (then that node told the client already).
    RelayEnded,
}

/// This node's relay links, both sides (in the server's state).
#[derive(Default)]
pub struct RelayLinks {
    /// A's side: the links this node's virtual connections publish on.
    out: Arc<link_out::OutLinks>,
    /// B's side: the links this node's relayed sockets receive on.
    inbound: Arc<link_in::InLinks>,
}

/// Invokes relayed and not answered yet, by (channel, callId), with their method.
pub(super) type Unanswered = Arc<std::sync::Mutex<HashMap<(String, u64), String>>>;

/// A client agent this socket registered in a relayed conversation: kept so that a
/// transparent rejoin registers it again with the new owner.
pub(super) struct RelayedAgent {
    /// The conversation it is registered in.
    pub(super) conversation: ConversationId,
    /// The registration as the client sent it.
    pub(super) registration: super::hosted_agents::ClientAgentRequest,
}

/// First callId of the registrations a transparent rejoin sends on the client's behalf: their
/// answers are not the client's. The relay's own calls take the top 2^20 callIds agent-rpc
/// allows (up to `MAX_SAFE_INTEGER`); the serving node drops any callId above that as
/// malformed, which silently dropped every rejoin through a relay while these were 2^60 and
/// `u64::MAX`. Clients count their callIds up from 0 and never reach this range.
const REREGISTER_CALL_IDS: u64 = MAX_SAFE_INTEGER - (1 << 20);

/// Whether `call_id` on `agent-server` is one of the calls this node makes on a client's
/// behalf (a rejoin's join and registrations): their answers are not the client's.
pub(super) fn on_clients_behalf(call_id: u64) -> bool {
    call_id >= REREGISTER_CALL_IDS
}

/// What a transparent rejoin keeps between its attempts.
pub(super) struct Rejoin {
    /// The join's `filter` option.
    filter: bool,
    /// The node that served the conversation until the relay ended.
    previous: String,
    /// When to stop retrying.
    deadline: std::time::Instant,
    /// The client agents to register again once joined.
    agents: Vec<super::hosted_agents::ClientAgentRequest>,
    /// Why: what the client is told if the rejoin fails.
    after: RejoinAfter,
}

/// callId of the join a relay sends on its own (a transparent rejoin after the serving node
/// died or lost the conversation): its answer is not the client's and is not forwarded.
const REJOIN_CALL_ID: u64 = MAX_SAFE_INTEGER;

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
                after: RejoinAfter::RelayEnded,
            };
            self.rejoin(msg.conversation_id, rejoin, ctx);
        } else if let Some((deadline, after)) = remote.rejoined.filter(|_| !self.closing) {
            // The node the rejoin went to refused its join (it could not take the
            // conversation over yet, or it moved on): try again until the deadline. (Or the
            // socket could not take its frames: then nothing more reaches it anyway.)
            if std::time::Instant::now() < deadline && !self.outbox.is_closed() {
                let rejoin = Rejoin {
                    filter: remote.filter,
                    previous: remote.node,
                    deadline,
                    agents,
                    after,
                };
                let id = msg.conversation_id;
                ctx.run_later(REJOIN_RETRY, move |act, ctx| act.rejoin(id, rejoin, ctx));
            } else {
                let error = RpcError::ClusterUnavailable(format!(
                    "node {} refused the join on the client's behalf",
                    remote.node
                ));
                self.rejoin_failed(msg.conversation_id, after, &error);
            }
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
                    act.adopt(joined, rejoin.filter);
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
                    let filter = rejoin.filter;
                    act.join_remote(JoinFor::Rejoin(rejoin), id, node, filter, ctx);
                }
                Err(e) => act.rejoin_failed(id, rejoin.after, &e),
            }
        }));
    }

    /// This node lost conversation `id` to another node (`next_call_id`: the client's next
    /// callId on `clientio:<id>`): its channels here are closed. The connection joins it again
    /// on the client's behalf, wherever it is served now, once this socket's client agents
    /// there have gone (their teardown ran); they are registered again behind the join. The
    /// client keeps its channels and callIds, sees nothing but the new owner's join notices,
    /// and reads what it missed with `getDisplayHistory(afterSeq)`.
    pub(super) fn follow_moved(
        &mut self,
        id: ConversationId,
        filter: bool,
        next_call_id: u64,
        ctx: &mut Context<Self>,
    ) {
        let Some(cluster) = self.state.cluster.clone() else {
            return self.drop_agents_of(id, ctx); // only a cluster moves conversations
        };
        log::info!(
            "socket {}: conversation {id} moved off this node; joining it again",
            self.socket_id
        );
        let deadline = std::time::Instant::now() + self.rejoin_budget();
        let previous = cluster.node().to_string();
        let after = RejoinAfter::Moved { next_call_id };
        let agents = self.registrations_in(id);
        let then: super::hosted_agents::AfterLifecycle = Box::new(move |act, ctx| {
            let rejoin = Rejoin {
                filter,
                previous,
                deadline,
                agents,
                after,
            };
            act.rejoin(id, rejoin, ctx);
        });
        self.retire_agents_then(id, then, ctx);
    }

    /// A rejoin on the client's behalf failed: the client is told, with the notice and the
    /// channel close a delete sends (its channels are closed already). Moved off this node:
    /// the moved notice, or, when the conversation no longer exists, the delete notice and
    /// `conversationDeleted`. A relay that ended: the moved notice, but nothing when the
    /// conversation no longer exists (its node told the client when it was deleted there).
    pub(super) fn rejoin_failed(
        &mut self,
        id: ConversationId,
        after: RejoinAfter,
        error: &RpcError,
    ) {
        if self.joined.contains_key(&id) || self.remote.contains_key(&id) {
            // The client joined it again itself meanwhile: nothing to tell.
            log::info!(
                "socket {}: conversation {id} not rejoined on the client's behalf ({error}); \
                 the client joined it itself",
                self.socket_id
            );
            return;
        }
        log::info!(
            "socket {}: conversation {id} not rejoined: {error}; the client is told",
            self.socket_id
        );
        let gone = matches!(error, RpcError::ConversationNotFound(_));
        let (notices, call_id) = match after {
            RejoinAfter::RelayEnded if gone => return,
            RejoinAfter::Moved { next_call_id } if gone => {
                (Conversation::deleted_notices(id).to_vec(), next_call_id)
            }
            RejoinAfter::Moved { next_call_id } => {
                (vec![Conversation::moved_notice()], next_call_id)
            }
            // The serving node kept this client's callIds; clients ignore a call's callId.
            RejoinAfter::RelayEnded => (vec![Conversation::moved_notice()], 0),
        };
        let prefix = protocol::call_prefix(&protocol::clientio_channel(id));
        for (k, notice) in notices.iter().enumerate() {
            self.send(notice.frame(&prefix, call_id + k as u64));
        }
    }

    /// The registry answered that `id` is served by `node`: ask that node for a virtual
    /// connection, then send it the join: the client's own (its answer comes back as is), or
    /// a transparent rejoin's, whose answer is not forwarded.
    pub(super) fn join_remote(
        &mut self,
        join: JoinFor,
        id: ConversationId,
        node: String,
        filter: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(cluster) = self.state.cluster.clone() else {
            return;
        };
        let (call_id, mut rejoin) = match join {
            JoinFor::Client(call_id) => (Some(call_id), None),
            JoinFor::Rejoin(rejoin) => (None, Some(rejoin)),
        };
        let rejoined = rejoin.as_ref().map(|r| (r.deadline, r.after));
        let relay = uuid::Uuid::new_v4().to_string();
        let me = cluster.node().to_string();
        let join_call_id = call_id.unwrap_or(REJOIN_CALL_ID);
        let unanswered = Unanswered::default();
        if let Some(call_id) = call_id {
            unanswered.lock().unwrap_or_else(|e| e.into_inner()).insert(
                (AGENT_SERVER_CHANNEL.to_string(), call_id),
                "joinConversation".into(),
            );
        }
        // The relay's route on its link is there before A is asked, so that nothing A sends
        // is missed.
        let publisher = Publisher::start(&cluster, cluster.names().relay_in(&node, &relay));
        let links = self.state.relay_links.inbound.clone();
        let delivery = Delivery {
            conversation: id,
            node: node.clone(),
            socket: self.outbox.clone(),
            state: self.state.clone(),
            join_call_id,
            silent_join: call_id.is_none(),
            join_pending: true,
            unanswered: unanswered.clone(),
        };
        let (link, slot, ended) = links.route(&node, id, delivery, publisher.clone());
        let request = OpenRelay {
            relay: relay.clone(),
            from: me,
            link: link.id.clone(),
            slot,
        };
        let client = cluster.client().clone();
        let target = node.clone();
        let opening_link = link.clone();
        let opening_links = links.clone();
        let open_subject = cluster.names().relay_open(&target);
        let opening = async move {
            opening_link
                .subscribe(&opening_links, &cluster)
                .await
                .map_err(|e| (e, false))?;
            let body = serde_json::to_vec(&request).expect("serializes");
            // Sealed for this subject and this reply subject (the cluster's authentication).
            let inbox = client.new_inbox();
            let sealed = cluster.seal_stamped(&open_subject, Some(&inbox), &body);
            let answer = client
                .send_request(
                    open_subject,
                    async_nats::Request::new()
                        .payload(sealed)
                        .inbox(inbox.clone()),
                )
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
            let Some(answer) =
                cluster.open_stamped("a relay open's answer", &inbox, None, &answer.payload)
            else {
                return Err((
                    format!("node {target}: an answer without the cluster's seal"),
                    false,
                ));
            };
            if answer != b"ok" {
                return Err((
                    format!("node {target}: {}", String::from_utf8_lossy(answer)),
                    false,
                ));
            }
            Ok(())
        };
        let fail = move |act: &mut Connection, error: RpcError| match call_id {
            Some(call_id) => act.reply(
                AGENT_SERVER_CHANNEL,
                call_id,
                "joinConversation",
                Err(error),
            ),
            None => {
                let after = rejoined.map_or(RejoinAfter::RelayEnded, |(_, after)| after);
                act.rejoin_failed(id, after, &error);
            }
        };
        ctx.spawn(opening.into_actor(self).map(move |opened, act, ctx| {
            if let Err((e, gone)) = opened {
                link.drop_route(&links, slot);
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
                // A rejoin waits for it as long too (its own deadline).
                if let Some(rejoin) = rejoin.take() {
                    if gone && std::time::Instant::now() < rejoin.deadline {
                        ctx.run_later(REJOIN_RETRY, move |act, ctx| act.rejoin(id, rejoin, ctx));
                        return;
                    }
                }
                if let Some(call_id) = call_id {
                    act.join_deadlines.remove(&call_id);
                }
                return fail(act, RpcError::ClusterUnavailable(e));
            }
            if let Some(call_id) = call_id {
                act.join_deadlines.remove(&call_id);
            }
            if act.closing || act.remote.contains_key(&id) || act.joined.contains_key(&id) {
                link.drop_route(&links, slot);
                publisher.end();
                return fail(act, RpcError::ChannelExists(protocol::clientio_channel(id)));
            }
            if let Some(call_id) = call_id {
                // From here the other node answers this callId.
                act.in_flight
                    .remove(&(AGENT_SERVER_CHANNEL.to_string(), call_id));
            }
            let join = protocol::invoke_frame(
                AGENT_SERVER_CHANNEL,
                join_call_id,
                "joinConversation",
                &serde_json::json!([{"conversationId": id, "filter": filter}]),
            );
            publisher.text(join);
            log::info!(
                "socket {}: joining conversation {id} on node {node} (relay {relay}, link {} \
                 slot {slot})",
                act.socket_id,
                link.id
            );
            let relay_id = relay.clone();
            let ending = publisher.clone();
            ctx.spawn(
                async move { ended.await.unwrap_or(true) }
                    .into_actor(act)
                    .map(move |rejoin, _, ctx| {
                        ending.end();
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
                    rejoined,
                },
            );
            // A transparent rejoin registers the client's agents again, behind its join.
            let agents = rejoin.map(|r| r.agents).unwrap_or_default();
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
    /// unavailable` if the relay ends first; the calls this node makes on the client's behalf,
    /// [`on_clients_behalf`], are not counted). False when `id` is not relayed.
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
        if !on_clients_behalf(call_id) {
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

#[cfg(test)]
mod tests {
    use super::link_in::Answer;
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
