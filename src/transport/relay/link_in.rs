//! B's side of relay links: one link per (serving node A, conversation), shared by every
//! socket on this node relayed to that conversation. The link's task reads A's link messages
//! from `rt.node.<B>.link.<link>.out` and hands each entry to its relay's [`Route`]: the frame
//! into that socket's outbox (a call's shared bytes are one buffer for every socket given
//! it), a pong on the relay's `.in` for a ping, the end of the relay. A full socket ends its
//! own relay only. The link ends when its last relay has ended, or when A has been silent for a
//! whole lease time (A died: every relay on it ends and its clients rejoin).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use roundtable_actors::cluster::seal::StreamOpener;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::ids::ConversationId;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{Outbox, Outgoing, PushError, SharedBytes, Wakes};
use roundtable_actors::protocol::AGENT_SERVER_CHANNEL;
use serde::Deserialize;
use tokio::sync::oneshot;

use super::link_wire::{Decoder, Entry};
use super::wire::{Chunks, Publisher, LINK, PONG};
use super::{Unanswered, REJOIN_CALL_ID, REREGISTER_CALL_IDS};
use crate::transport::AppState;

/// B's links by (serving node, conversation): at most one per conversation relayed from
/// this node, each with at least one relay (a link is dropped with its last relay).
#[derive(Default)]
pub(crate) struct InLinks {
    /// The links.
    links: Mutex<HashMap<(String, ConversationId), Arc<InLink>>>,
}

/// One link (B's side).
pub(super) struct InLink {
    /// Its id (a UUID, part of its subject).
    pub(super) id: String,
    /// Its key in [`InLinks`].
    key: (String, ConversationId),
    /// The next relay's number.
    next_slot: AtomicU32,
    /// Its relays by number: those joining (registered before the request to A) and those
    /// joined. Bounded by the sockets relayed to the conversation.
    routes: Mutex<HashMap<u32, Route>>,
    /// Subscribed, its task started (once).
    subscribed: tokio::sync::OnceCell<()>,
    /// Dropped from [`InLinks`]: its task stops.
    retired: AtomicBool,
}

/// Where one relay's entries go.
pub(super) struct Route {
    /// Its socket's outbox and the relay's bookkeeping.
    pub(super) delivery: Delivery,
    /// The client's direction, for pongs.
    pub(super) pong: Publisher,
    /// Told when the relay ends, whether the client should rejoin elsewhere.
    pub(super) done: oneshot::Sender<bool>,
}

impl InLinks {
    /// Registers a relay to `conversation` on `node`, on its link (made if there is none):
    /// answers the link, the relay's number and what tells when the relay ends.
    pub(super) fn route(
        &self,
        node: &str,
        conversation: ConversationId,
        delivery: Delivery,
        pong: Publisher,
    ) -> (Arc<InLink>, u32, oneshot::Receiver<bool>) {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let key = (node.to_string(), conversation);
        let link = links
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(InLink {
                    id: uuid::Uuid::new_v4().to_string(),
                    key,
                    next_slot: AtomicU32::new(0),
                    routes: Mutex::new(HashMap::new()),
                    subscribed: tokio::sync::OnceCell::new(),
                    retired: AtomicBool::new(false),
                })
            })
            .clone();
        let slot = link.next_slot.fetch_add(1, Ordering::Relaxed);
        let (done, ended) = oneshot::channel();
        link.routes().insert(
            slot,
            Route {
                delivery,
                pong,
                done,
            },
        );
        (link, slot, ended)
    }

    /// Drops `link` when it has no relay left; answers whether it did (or it was dropped).
    fn retire_if_empty(&self, link: &Arc<InLink>) -> bool {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if !link.routes().is_empty() {
            return false;
        }
        if links.get(&link.key).is_some_and(|l| Arc::ptr_eq(l, link)) {
            links.remove(&link.key);
        }
        link.retired.store(true, Ordering::Release);
        true
    }

    /// Drops `link` whatever it holds (its node went silent).
    fn retire(&self, link: &Arc<InLink>) {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if links.get(&link.key).is_some_and(|l| Arc::ptr_eq(l, link)) {
            links.remove(&link.key);
        }
        link.retired.store(true, Ordering::Release);
    }
}

impl InLink {
    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Route>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to the link's subject and starts its task, once (before any relay on it
    /// asks A for a virtual connection, so that nothing A sends is missed).
    pub(super) async fn subscribe(
        self: &Arc<Self>,
        links: &Arc<InLinks>,
        cluster: &Cluster,
    ) -> Result<(), String> {
        self.subscribed
            .get_or_try_init(|| async {
                let subject = cluster.names().relay_link(cluster.node(), &self.id);
                let subscription = cluster
                    .client()
                    .subscribe(subject.clone())
                    .await
                    .map_err(|e| format!("subscribe: {e}"))?;
                actix::spawn(run(
                    self.clone(),
                    links.clone(),
                    subscription,
                    cluster.clone(),
                ));
                Ok::<(), String>(())
            })
            .await
            .map(|_| ())
    }

    /// Forgets relay `slot` (its request failed, or the socket no longer wants it); the link
    /// goes with its last relay.
    pub(super) fn drop_route(self: &Arc<Self>, links: &InLinks, slot: u32) {
        self.routes().remove(&slot);
        links.retire_if_empty(self);
    }
}

/// The link's task: hands each entry of A's messages to its relay; ends on A's silence for a
/// lease time (A's heartbeat comes every third of it) or once no relay is left. A message
/// without the cluster's seal, or taken already, is dropped before anything reads it (and
/// does not count as A's heartbeat).
async fn run(
    link: Arc<InLink>,
    links: Arc<InLinks>,
    mut subscription: async_nats::Subscriber,
    cluster: Cluster,
) {
    let silence: Duration = cluster.lease_time();
    let subject = cluster.names().relay_link(cluster.node(), &link.id);
    let mut opener = StreamOpener::default();
    let mut chunks = Chunks::default();
    let mut decoder = Decoder::default();
    let mut heard = tokio::time::Instant::now();
    while !link.retired.load(Ordering::Acquire) {
        let message = match tokio::time::timeout_at(heard + silence, subscription.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(_) => {
                if !link.routes().is_empty() {
                    log::warn!(
                        "cluster relay link {}: node {} went silent for {silence:?}",
                        link.id,
                        link.key.0
                    );
                }
                break;
            }
        };
        let Some(payload) = cluster.open_stream(&mut opener, &subject, &message.payload) else {
            continue;
        };
        heard = tokio::time::Instant::now();
        let Some((kind, body)) = chunks.take(payload) else {
            continue;
        };
        if kind != LINK {
            continue; // A's heartbeat
        }
        // Each socket's writer is woken once, after the message's last frame for it, so that
        // it writes all of them at once (one send, not one per frame).
        let mut wakes = Wakes::default();
        let mut routes = link.routes();
        decoder.read(&body, |slot, entry| {
            let Some(route) = routes.get_mut(&slot) else {
                return; // ended here already
            };
            let ended = match entry {
                Entry::Text(text) => route.delivery.text(text, &mut wakes),
                Entry::Spliced {
                    prefix,
                    number,
                    tail,
                    shared,
                } => route.delivery.push(
                    Outgoing::Spliced {
                        prefix,
                        number,
                        tail,
                    },
                    Some(&shared),
                    &mut wakes,
                ),
                Entry::Ping => {
                    route.pong.send(PONG, Bytes::new());
                    None
                }
                Entry::End => Some(true),
            };
            if let Some(rejoin) = ended {
                let route = routes.remove(&slot).expect("present");
                let _ = route.done.send(rejoin);
            }
        });
        let empty = routes.is_empty();
        drop(routes);
        wakes.wake_all();
        if empty && links.retire_if_empty(&link) {
            break;
        }
    }
    // Every relay still on it ends (A died or went silent): its clients rejoin.
    links.retire(&link);
    let routes: Vec<Route> = link.routes().drain().map(|(_, r)| r).collect();
    for route in routes {
        let _ = route.done.send(true);
    }
}

/// Where one relay puts the frames it receives (B's side).
pub(super) struct Delivery {
    /// The relayed conversation (for the log).
    pub(super) conversation: ConversationId,
    /// The node serving it (for the log).
    pub(super) node: String,
    /// The real socket's outbox (bounded: a full one closes the socket as a slow consumer).
    pub(super) socket: Outbox,
    /// For the frame counters.
    pub(super) state: Arc<AppState>,
    /// The callId of the relayed join, whose answer decides whether the relay goes on.
    pub(super) join_call_id: u64,
    /// The join is a transparent rejoin: its answer is not the client's.
    pub(super) silent_join: bool,
    /// The answer to the relayed join has not come yet.
    pub(super) join_pending: bool,
    /// The client's invokes not answered yet; answers passing through are taken out.
    pub(super) unanswered: Unanswered,
}

impl Delivery {
    /// One text frame from the serving node into the socket's outbox; `Some(rejoin)` ends the
    /// relay (the join was refused, or the socket cannot take more).
    fn text(&mut self, text: String, wakes: &mut Wakes) -> Option<bool> {
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
                } else if self.silent_join {
                    log::info!(
                        "cluster relay: joined conversation {} again through node {}",
                        self.conversation,
                        self.node
                    );
                }
                if !self.silent_join {
                    let _ = self.socket.push(text);
                }
                return failed.then_some(false);
            }
        }
        self.push(Outgoing::Text(text), None, wakes)
    }

    /// One frame into the socket's outbox (a call: never an answer), its writer woken by
    /// `wakes`; `Some(false)` ends the relay when the socket cannot take it.
    fn push(
        &mut self,
        frame: Outgoing,
        shared: Option<&Arc<SharedBytes>>,
        wakes: &mut Wakes,
    ) -> Option<bool> {
        match self.socket.push_sharing_later(frame, shared, wakes) {
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
pub(super) struct Answer {
    /// The channel.
    pub(super) name: String,
    /// Its type and callId.
    pub(super) message: AnswerMessage,
}

/// The part of an answer's `message` a relay reads.
#[derive(Deserialize)]
pub(super) struct AnswerMessage {
    /// `invokeResult` or `invokeError`.
    #[serde(rename = "type")]
    pub(super) kind: String,
    /// The invoke it answers.
    #[serde(rename = "callId")]
    pub(super) call_id: u64,
}

impl Answer {
    /// `text` read once when it is an answer; any other frame is only scanned for the two
    /// type names.
    pub(super) fn read(text: &str) -> Option<Answer> {
        if !text.contains("\"invokeResult\"") && !text.contains("\"invokeError\"") {
            return None;
        }
        serde_json::from_str::<Answer>(text)
            .ok()
            .filter(|a| a.message.kind == "invokeResult" || a.message.kind == "invokeError")
    }
}
