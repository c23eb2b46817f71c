//! Content search across nodes: each node indexes the conversations it owns or has owned (its
//! own writes, and the history it rebuilt when it took one over), so a search must ask every
//! node. The asking node sends the query on `rt.search` and merges the hits that come back with
//! its own (the best score per conversation, best first), waiting for as many answers as
//! nodes it knows of, [`SEARCH_WAIT`] at most.
//!
//! Node membership for that count: every node puts its name in the KV bucket `rt_nodes` (its
//! `max_age` the lease time) every third of the lease time, counts the keys then, and counts a
//! node that appears in between at once (the bucket's watch).
//!
//! Who talks to it: the registry's `searchConversationContent` handler, through
//! [`SharedStore::search_others`](crate::registry::SharedStore::search_others) (implemented in
//! `backend.rs` with [`Cluster::search_others`]; the registry merges the hits); `serve` starts
//! [`Cluster::serve_search`] and [`Cluster::announce_node`].

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Cluster, ClusterError};
use crate::search::{ContentHit, SearchIndex};

/// How long a search waits for the other nodes' answers at most.
pub const SEARCH_WAIT: Duration = Duration::from_millis(500);

/// A search request on `rt.search`.
#[derive(Serialize, Deserialize)]
struct SearchRequest {
    /// The user's text.
    query: String,
    /// `maxMatches`.
    max: Option<u64>,
    /// The asking node (it does not answer itself: it searched its own index directly).
    from: String,
}

/// One node's answer.
#[derive(Serialize, Deserialize)]
struct SearchAnswer {
    /// Who answers.
    node: String,
    /// Its index's hits, best first (scores from its own index's statistics).
    hits: Vec<ContentHit>,
}

/// Opens (or creates) the bucket of live nodes.
pub(super) async fn open_bucket(
    js: &jetstream::Context,
    names: &super::Names,
    lease_time: Duration,
    replicas: usize,
) -> Result<kv::Store, ClusterError> {
    super::open_or_create_bucket(
        js,
        &names.nodes_bucket(),
        "Roundtable nodes alive",
        lease_time,
        jetstream::stream::StorageType::Memory,
        replicas,
    )
    .await
}

impl Cluster {
    /// For the server's life: puts this node in `rt_nodes` every third of the lease time and
    /// counts the nodes alive: a node that appears is counted at once (the bucket's watch),
    /// one that died drops out at the next count (its key expires after the lease time).
    pub async fn announce_node(self) {
        let nodes = self.nodes_bucket().clone();
        let mut known: std::collections::HashSet<String> = Default::default();
        let mut watch = nodes.watch_all().await.ok();
        let mut next_count = Instant::now();
        loop {
            if Instant::now() >= next_count {
                next_count = Instant::now() + self.lease_time() / 3;
                if nodes
                    .put(self.node(), Bytes::from_static(b"alive"))
                    .await
                    .is_ok()
                {
                    if let Ok(keys) = nodes.keys().await {
                        known = keys
                            .filter_map(|k| std::future::ready(k.ok()))
                            .collect()
                            .await;
                    }
                }
                if watch.is_none() {
                    watch = nodes.watch_all().await.ok();
                }
            }
            self.stats()
                .known_nodes
                .store(known.len() as u64, Ordering::Relaxed);
            let wait = next_count.saturating_duration_since(Instant::now());
            match &mut watch {
                Some(w) => match tokio::time::timeout(wait, w.next()).await {
                    Ok(Some(Ok(entry))) => {
                        if matches!(entry.operation, kv::Operation::Put) {
                            known.insert(entry.key);
                        } else {
                            known.remove(&entry.key);
                        }
                    }
                    Ok(Some(Err(_)) | None) => watch = None,
                    Err(_) => {}
                },
                None => tokio::time::sleep(wait).await,
            }
        }
    }

    /// For the server's life: answers other nodes' searches from `search`.
    pub async fn serve_search(self, search: SearchIndex) {
        let mut requests = match self.client().subscribe(self.names().search_subject()).await {
            Ok(s) => s,
            Err(e) => {
                log::error!("cluster node {}: cannot serve searches: {e}", self.node());
                return;
            }
        };
        let subject = self.names().search_subject();
        while let Some(message) = requests.next().await {
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            // Only a node holding the cluster secret may ask (`seal.rs`): anyone else would
            // read every node's index.
            let Some(body) =
                self.open_stamped("a search", &subject, Some(&reply), &message.payload)
            else {
                continue;
            };
            let Ok(request) = serde_json::from_slice::<SearchRequest>(body) else {
                continue;
            };
            if request.from == self.node() {
                continue;
            }
            let asked = search.query(request.query, request.max);
            let cluster = self.clone();
            tokio::spawn(async move {
                let hits = match asked.await {
                    Ok(Ok(hits)) => hits,
                    _ => Vec::new(),
                };
                let answer = SearchAnswer {
                    node: cluster.node().to_string(),
                    hits,
                };
                let body = serde_json::to_vec(&answer).expect("an answer serializes");
                let sealed = cluster.seal_stamped(&reply, None, &body);
                let _ = cluster.client().publish(reply, sealed).await;
            });
        }
    }

    /// The other nodes' hits for `query`: as many answers as other nodes are known, or what
    /// came within [`SEARCH_WAIT`].
    pub async fn search_others(&self, query: String, max: Option<u64>) -> Vec<ContentHit> {
        let others = self
            .stats()
            .known_nodes
            .load(Ordering::Relaxed)
            .saturating_sub(1);
        if others == 0 || !self.connected() {
            return Vec::new();
        }
        let inbox = self.client().new_inbox();
        let Ok(mut answers) = self.client().subscribe(inbox.clone()).await else {
            return Vec::new();
        };
        let request = SearchRequest {
            query,
            max,
            from: self.node().to_string(),
        };
        let body = serde_json::to_vec(&request).expect("a request serializes");
        let subject = self.names().search_subject();
        let sealed = self.seal_stamped(&subject, Some(&inbox), &body);
        if self
            .client()
            .publish_with_reply(subject, inbox.clone(), sealed)
            .await
            .is_err()
        {
            return Vec::new();
        }
        let deadline = Instant::now() + SEARCH_WAIT;
        let mut hits = Vec::new();
        let mut heard = 0;
        while heard < others {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some(message)) = tokio::time::timeout(left, answers.next()).await else {
                break;
            };
            let Some(body) = self.open_stamped("a search answer", &inbox, None, &message.payload)
            else {
                continue;
            };
            if let Ok(answer) = serde_json::from_slice::<SearchAnswer>(body) {
                heard += 1;
                hits.extend(answer.hits);
            }
        }
        hits
    }
}
