//! A's side of relay links: one link per (node B, B's link id — one per conversation), shared
//! by every virtual connection serving a client of that conversation on B. Each virtual
//! connection's drain hands the link what it read from its outbox ([`Item`]), in order; the
//! link's one task takes everything queued at once, writes it as one message of entries
//! (`link_wire.rs`: a fanned-out call's shared bytes once, a reference per relay), publishes
//! it to `rt.node.<B>.link.<link>.out`, and sends a heartbeat when quiet for a third of the
//! lease time. The task ends when its last relay has ended.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::outbox::Outgoing;
use tokio::sync::{mpsc, watch};

use super::link_wire::Encoder;
use super::wire::{link_subject, max_piece, publish, LINK, PING, RELAY_QUEUE_FRAMES};

/// Bytes of entries after which a link message is sent without taking more.
const MESSAGE_TARGET: usize = 256 << 10;

/// What one relay hands its link.
pub(super) enum Item {
    /// Frames read from its outbox at once, in order.
    Frames {
        /// The relay's number within the link.
        slot: u32,
        /// Text frames and pings.
        frames: Vec<Outgoing>,
    },
    /// The relay ended (its virtual connection closed).
    End {
        /// The relay's number within the link.
        slot: u32,
    },
}

/// A's links by id. Bounded by the links alive: an entry whose task ended is dropped when the
/// task ends or the next link starts.
#[derive(Default)]
pub(crate) struct OutLinks {
    /// Each link's task.
    links: Mutex<HashMap<String, Task>>,
}

/// One link's task as [`OutLinks`] knows it.
struct Task {
    /// Its queue (weak: the task ends once no relay holds it).
    queue: mpsc::WeakSender<Item>,
    /// Becomes true (or closes) once the task has published its last message: a task started
    /// for the same link after it waits for that, so that their messages never interleave.
    finished: watch::Receiver<bool>,
}

impl OutLinks {
    /// The queue of link `link` toward node `to`, its task started if it has none. The task
    /// ends once every returned sender is dropped (its relays ended).
    pub(super) fn attach(
        self: &Arc<Self>,
        cluster: &Cluster,
        to: &str,
        link: &str,
    ) -> mpsc::Sender<Item> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = links.get(link).and_then(|t| alive(&t.queue)) {
            return tx;
        }
        let previous = links.remove(link).map(|t| t.finished);
        links.retain(|_, t| alive(&t.queue).is_some());
        let (tx, rx) = mpsc::channel(RELAY_QUEUE_FRAMES);
        let (finished_tx, finished) = watch::channel(false);
        links.insert(
            link.to_string(),
            Task {
                queue: tx.downgrade(),
                finished,
            },
        );
        log::info!("cluster: relay link {link} toward node {to}");
        let task = Link {
            cluster: cluster.clone(),
            subject: link_subject(to, link),
            heartbeat: cluster.lease_time() / 3,
            links: self.clone(),
            link: link.to_string(),
        };
        actix::spawn(async move {
            if let Some(mut previous) = previous {
                let _ = previous.wait_for(|done| *done).await;
            }
            task.run(rx).await;
            let _ = finished_tx.send(true);
        });
        tx
    }

    /// Forgets `link` if no relay holds its queue any more.
    fn forget(&self, link: &str) {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if links.get(link).is_some_and(|t| alive(&t.queue).is_none()) {
            links.remove(link);
        }
    }
}

/// The queue of a link whose task still runs.
fn alive(queue: &mpsc::WeakSender<Item>) -> Option<mpsc::Sender<Item>> {
    queue.upgrade().filter(|tx| !tx.is_closed())
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
    /// The link's task: takes what its relays queued, publishes it as link messages in order.
    async fn run(self, mut rx: mpsc::Receiver<Item>) {
        let Link {
            cluster,
            subject,
            heartbeat,
            links,
            link,
        } = self;
        let client = cluster.client().clone();
        let max = max_piece(&client);
        let mut encoder = Encoder::default();
        loop {
            let first = match tokio::time::timeout(heartbeat, rx.recv()).await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(_) => {
                    // Quiet: tell node B this one is alive.
                    if let Err(e) = publish(&client, &subject, max, PING, Bytes::new()).await {
                        log::warn!("cluster relay link {subject}: publish failed: {e}");
                        break;
                    }
                    continue;
                }
            };
            let mut body = Vec::new();
            encoder.begin(&mut body);
            let mut next = Some(first);
            while let Some(item) = next.take() {
                match item {
                    Item::Frames { slot, frames } => {
                        for frame in &frames {
                            encoder.frame(&mut body, slot, frame);
                        }
                    }
                    Item::End { slot } => encoder.end(&mut body, slot),
                }
                if body.len() < MESSAGE_TARGET {
                    next = rx.try_recv().ok();
                }
            }
            if let Err(e) = publish(&client, &subject, max, LINK, body.into()).await {
                log::warn!("cluster relay link {subject}: publish failed: {e}");
                break;
            }
            let counts = encoder.take_counts();
            let stats = cluster.stats();
            stats.relay_link_messages.fetch_add(1, Ordering::Relaxed);
            stats
                .relayed_frames
                .fetch_add(counts.deliveries, Ordering::Relaxed);
            stats
                .relayed_copies
                .fetch_add(counts.copies, Ordering::Relaxed);
        }
        // Relays still queueing see their link gone and end.
        drop(rx);
        links.forget(&link);
        log::debug!("cluster: relay link {link} ended");
    }
}
