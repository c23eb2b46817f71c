//! A's side of relay links: one link per (node B, B's link id — one per conversation), shared
//! by every virtual connection serving a client of that conversation on B. The link's one
//! task reads the outboxes of all its virtual connections itself (woken by whichever has
//! frames), writes everything they hold at once as one message of entries (`link_wire.rs`: a
//! fanned-out call's shared bytes once, a reference per relay, each relay's frames in its
//! outbox's order), publishes it to `rt.node.<B>.link.<link>.out`, and sends a heartbeat when
//! quiet for a third of the lease time. A relay ends with its virtual connection's close;
//! while the task waits for NATS, the outboxes fill and a virtual connection that cannot take
//! more is closed as a slow consumer, like a socket (the others go on). The task ends when its
//! last relay has ended.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{self, SelectAll, Stream};
use futures_util::{FutureExt, StreamExt};
use roundtable_actors::cluster::seal::StreamSealer;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::outbox::{OutboxReceiver, Outgoing};
use tokio::sync::{mpsc, oneshot, watch};

use super::link_wire::Encoder;
use super::wire::{max_piece, publish, LINK, PING, RELAY_QUEUE_FRAMES};

/// Bytes of entries after which a link message is sent without taking more.
const MESSAGE_TARGET: usize = 256 << 10;

/// A virtual connection joining its link.
pub(super) struct Attach {
    /// The relay's number within the link.
    pub(super) slot: u32,
    /// The virtual connection's outbox, read by the link from now on.
    pub(super) outbox: OutboxReceiver,
    /// Told when the relay has ended (its close read, its end sent).
    pub(super) done: oneshot::Sender<()>,
}

/// A's links by id. Bounded by the links alive: a task removes its entry when it ends.
#[derive(Default)]
pub(crate) struct OutLinks {
    /// Each link's task.
    links: Mutex<HashMap<String, Task>>,
}

/// One link's task as [`OutLinks`] knows it.
struct Task {
    /// Where new relays go (at most [`RELAY_QUEUE_FRAMES`] waiting).
    queue: mpsc::Sender<Attach>,
    /// Becomes true (or closes) once the task has published its last message: a task started
    /// for the same link after it waits for that, so that their messages never interleave.
    finished: watch::Receiver<bool>,
}

impl OutLinks {
    /// Hands relay `attach` to link `link` toward node `to`, its task started if it has none.
    pub(super) fn attach(
        self: &Arc<Self>,
        cluster: &Cluster,
        to: &str,
        link: &str,
        attach: Attach,
    ) -> Result<(), String> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let attach = match links.get(link).filter(|t| !t.queue.is_closed()) {
            Some(task) => match task.queue.try_send(attach) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(format!("relay link {link} is overloaded"))
                }
                Err(mpsc::error::TrySendError::Closed(attach)) => attach,
            },
            None => attach,
        };
        let previous = links.remove(link).map(|t| t.finished);
        let (queue, attaches) = mpsc::channel(RELAY_QUEUE_FRAMES);
        let _ = queue.try_send(attach);
        let (finished_tx, finished) = watch::channel(false);
        links.insert(link.to_string(), Task { queue, finished });
        log::info!("cluster: relay link {link} toward node {to}");
        let task = Link {
            cluster: cluster.clone(),
            subject: cluster.names().relay_link(to, link),
            heartbeat: cluster.lease_time() / 3,
            links: self.clone(),
            link: link.to_string(),
        };
        actix::spawn(async move {
            if let Some(mut previous) = previous {
                let _ = previous.wait_for(|done| *done).await;
            }
            task.run(attaches).await;
            let _ = finished_tx.send(true);
        });
        Ok(())
    }

    /// Whether the link's task may end: no relay waits to attach. Its entry is removed (under
    /// the same lock [`OutLinks::attach`] takes, so no relay is left behind).
    fn may_end(&self, link: &str, attaches: &mut mpsc::Receiver<Attach>) -> Option<Attach> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(attach) = attaches.try_recv() {
            return Some(attach);
        }
        attaches.close();
        if links.get(link).is_some_and(|t| t.queue.is_closed()) {
            links.remove(link);
        }
        None
    }
}

/// What a relay's outbox yields the link: a frame, or `None` once it ended.
type Relayed = (u32, Option<Outgoing>);

/// The frames of one relay's outbox, then its end.
fn relay_frames(attach: Attach) -> Pin<Box<dyn Stream<Item = Relayed>>> {
    let slot = attach.slot;
    Box::pin(stream::unfold(
        Some((attach.outbox, attach.done)),
        move |state| async move {
            let (mut outbox, done) = state?;
            loop {
                let frame = match outbox.try_next_with_budget() {
                    Some((frame, _)) => Some(frame),
                    None => outbox.next().await,
                };
                match frame {
                    // The relaying node's own socket writer paces its join result.
                    Some(Outgoing::Pong(_) | Outgoing::Binary(_) | Outgoing::Pause(_)) => continue,
                    Some(Outgoing::Close(_)) | None => {
                        outbox.close();
                        let _ = done.send(());
                        return Some(((slot, None), None));
                    }
                    Some(frame) => return Some(((slot, Some(frame)), Some((outbox, done)))),
                }
            }
        },
    ))
}

/// What one link's task works with.
struct Link {
    /// For the NATS client and the counters.
    cluster: Cluster,
    /// `rt.node.<B>.link.<link>.out`.
    subject: String,
    /// Quiet this long, the task tells B it is alive.
    heartbeat: Duration,
    /// Where it is registered.
    links: Arc<OutLinks>,
    /// Its id.
    link: String,
}

impl Link {
    /// The link's task: reads its relays' outboxes, publishes link messages in order.
    async fn run(self, mut attaches: mpsc::Receiver<Attach>) {
        let cluster = self.cluster.clone();
        let max = max_piece(cluster.client());
        // A link task that starts again for the same link begins a later epoch.
        let mut stream = StreamSealer::default();
        let mut encoder = Encoder::default();
        let mut relays: SelectAll<Pin<Box<dyn Stream<Item = Relayed>>>> = SelectAll::new();
        let mut beat = tokio::time::interval(self.heartbeat);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sent = Instant::now();
        loop {
            let first = tokio::select! {
                biased;
                attach = attaches.recv(), if !attaches.is_closed() => {
                    if let Some(attach) = attach {
                        relays.push(relay_frames(attach));
                    }
                    continue;
                }
                item = relays.next(), if !relays.is_empty() => match item {
                    Some(item) => item,
                    None => continue,
                },
                _ = beat.tick() => {
                    if relays.is_empty() {
                        match self.links.may_end(&self.link, &mut attaches) {
                            Some(attach) => relays.push(relay_frames(attach)),
                            None => break,
                        }
                        continue;
                    }
                    if last_sent.elapsed() >= self.heartbeat {
                        // Quiet: tell node B this one is alive.
                        if let Err(e) = publish(&cluster, &mut stream, &self.subject, max, PING, Bytes::new()).await {
                            log::warn!("cluster relay link {}: publish failed: {e}", self.subject);
                            break;
                        }
                        last_sent = Instant::now();
                    }
                    continue;
                }
            };
            let mut body = Vec::new();
            encoder.begin(&mut body);
            let mut next = Some(first);
            while let Some((slot, frame)) = next.take() {
                match frame {
                    Some(frame) => encoder.frame(&mut body, slot, &frame),
                    None => encoder.end(&mut body, slot),
                }
                if body.len() < MESSAGE_TARGET {
                    next = relays.next().now_or_never().flatten();
                }
            }
            if let Err(e) =
                publish(&cluster, &mut stream, &self.subject, max, LINK, body.into()).await
            {
                log::warn!("cluster relay link {}: publish failed: {e}", self.subject);
                break;
            }
            last_sent = Instant::now();
            let counts = encoder.take_counts();
            let stats = self.cluster.stats();
            stats.relay_link_messages.fetch_add(1, Ordering::Relaxed);
            stats
                .relayed_frames
                .fetch_add(counts.deliveries, Ordering::Relaxed);
            stats
                .relayed_copies
                .fetch_add(counts.copies, Ordering::Relaxed);
            if relays.is_empty() {
                match self.links.may_end(&self.link, &mut attaches) {
                    Some(attach) => relays.push(relay_frames(attach)),
                    None => break,
                }
            }
        }
        // Relays still attached end: their outboxes close, their virtual connections stop.
        drop(relays);
        attaches.close();
        self.links.may_end(&self.link, &mut attaches);
        log::debug!("cluster: relay link {} ended", self.link);
    }
}
