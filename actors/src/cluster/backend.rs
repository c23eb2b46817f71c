//! The registry's side of the cluster: [`RegistryBackend`] implements the two traits the
//! registry defines for a cluster, [`SharedStore`] (the shared list of conversations, the
//! counts owners share, other nodes' search hits, a conversation's files for a backup) and
//! [`OwnershipService`] (leases, and the files and fence that come with taking one), over this
//! node's [`Cluster`] connection and its log stream's [`LogReplicator`]. Each method hands the
//! work to the file that owns it (`registry_kv.rs`, `lease.rs`, `log_stream.rs`, `search.rs`);
//! what is here is the glue and the counts' wire format; bringing a conversation's files
//! current when its lease is taken is `takeover.rs`'s.
//!
//! Who talks to it: `serve` builds it ([`RegistryBackend::new`]) and hands it to the registry
//! (`RegistryConfig::cluster`) and to `start_shared_sync`; the registry actor calls it.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::lease::Acquired;
use super::log_stream::LogReplicator;
use super::{Cluster, ClusterError};
use crate::ids::ConversationId;
use crate::registry::{
    ChangeStream, Lease, OwnershipService, RegistryRecord, RegistrySnapshot, SharedCounts,
    SharedError, SharedFuture, SharedStore, Written,
};
use crate::search::ContentHit;
use crate::storage::log_writer::LogWriter;

impl From<ClusterError> for SharedError {
    fn from(e: ClusterError) -> SharedError {
        SharedError(e.0)
    }
}

/// What the registry uses of the cluster; cheap to clone.
#[derive(Clone)]
pub struct RegistryBackend {
    /// The connection, the buckets and the log stream.
    pub(super) cluster: Cluster,
    /// The log writer's replica, whose per-conversation progress says whether this node's
    /// files are current and holds the fence of each owned conversation's writes.
    pub(super) replicator: LogReplicator,
    /// The log writer itself: before a conversation's files are rebuilt from the stream, it
    /// logs that the node log's older records of them no longer apply.
    pub(super) log_writer: LogWriter,
}

impl RegistryBackend {
    /// The registry's backend over `cluster`, whose conversation files the log writer
    /// replicates through `replicator`.
    pub fn new(
        cluster: Cluster,
        replicator: LogReplicator,
        log_writer: LogWriter,
    ) -> RegistryBackend {
        RegistryBackend {
            cluster,
            replicator,
            log_writer,
        }
    }
}

/// Counts in one message on `rt.counts`: ~150 bytes each, so a message stays far below
/// NATS' default `max_payload` (1 MiB).
const COUNTS_PER_MESSAGE: usize = 1024;

/// What an owner shares about one conversation on `rt.counts` (a flush's counts go as a few
/// sealed messages, each a JSON array of these).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountsMessage {
    /// The conversation.
    conversation_id: ConversationId,
    /// Clients joined, relayed ones included.
    client_count: usize,
    /// `user-request` entries in its display log.
    message_count: u64,
    /// The owner (a node ignores its own).
    node: String,
}

impl SharedStore for RegistryBackend {
    fn node(&self) -> &str {
        self.cluster.node()
    }

    fn snapshot(&self) -> BoxFuture<'static, Result<RegistrySnapshot, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.registry_snapshot().await?) })
    }

    fn watch(&self, from: u64) -> BoxFuture<'static, Result<ChangeStream, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.watch_registry(from).await?.boxed()) })
    }

    fn create(&self, record: RegistryRecord) -> BoxFuture<'static, Result<Written, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.create_conversation(&record).await?) })
    }

    fn create_lost(&self, record: RegistryRecord) -> SharedFuture<Option<Written>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.create_lost_conversation(&record).await?) })
    }

    fn rename(
        &self,
        id: ConversationId,
        name: String,
    ) -> BoxFuture<'static, Result<Option<Written>, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.rename_conversation(id, &name).await?) })
    }

    fn delete(&self, id: ConversationId) -> BoxFuture<'static, Result<(), SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.delete_conversation(id).await?) })
    }

    fn reachable(&self) -> bool {
        self.cluster.connected()
    }

    fn reconcile_time(&self) -> std::time::Duration {
        self.cluster.inner.settings.reconcile_time
    }

    fn count_reconcile(&self, checks: usize, repairs: usize) {
        self.cluster.stats().count_reconcile(checks, repairs);
    }

    fn leader_record(
        &self,
        id: ConversationId,
    ) -> BoxFuture<'static, Result<Option<(RegistryRecord, u64)>, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.leader_record(id).await?) })
    }

    fn revision(&self) -> BoxFuture<'static, Result<u64, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.registry_revision().await?) })
    }

    fn record_named(
        &self,
        name: String,
    ) -> BoxFuture<'static, Result<Option<RegistryRecord>, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.record_named(&name).await?) })
    }

    fn share_counts(&self, counts: Vec<SharedCounts>) -> BoxFuture<'static, ()> {
        let cluster = self.cluster.clone();
        let node = cluster.node().to_string();
        let shared: Vec<CountsMessage> = counts
            .into_iter()
            .map(|c| CountsMessage {
                conversation_id: c.conversation_id,
                client_count: c.client_count,
                message_count: c.message_count,
                node: node.clone(),
            })
            .collect();
        Box::pin(async move {
            if shared.is_empty() {
                return;
            }
            // A few sealed messages per flush (at most one flush per `UPDATE_INTERVAL`): each
            // is stamped (`seal.rs`), and the receivers remember its nonce.
            let subject = cluster.names().counts_subject();
            for batch in shared.chunks(COUNTS_PER_MESSAGE) {
                let body = serde_json::to_vec(batch).expect("counts serialize");
                let sealed = cluster.seal_stamped(&subject, None, &body);
                if let Err(e) = cluster.client().publish(subject.clone(), sealed).await {
                    log::debug!("cluster: counts not shared: {e}");
                }
            }
        })
    }

    fn counts_from_others(
        &self,
    ) -> BoxFuture<'static, Result<BoxStream<'static, SharedCounts>, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            let subject = cluster.names().counts_subject();
            let counts = cluster
                .client()
                .subscribe(subject.clone())
                .await
                .map_err(|e| SharedError(format!("subscribe to {subject}: {e}")))?;
            let me = cluster.node().to_string();
            let others = counts.flat_map(move |message| {
                // Only counts a node holding the cluster secret shared (`seal.rs`).
                let shared = cluster
                    .open_stamped("counts", &subject, None, &message.payload)
                    .map(serde_json::from_slice::<Vec<CountsMessage>>);
                let counts: Vec<SharedCounts> = match shared {
                    Some(Ok(shared)) => shared
                        .into_iter()
                        .filter(|c| c.node != me)
                        .map(|c| SharedCounts {
                            conversation_id: c.conversation_id,
                            client_count: c.client_count,
                            message_count: c.message_count,
                        })
                        .collect(),
                    Some(Err(e)) => {
                        log::debug!("cluster: unreadable counts: {e}");
                        Vec::new()
                    }
                    None => Vec::new(),
                };
                futures_util::stream::iter(counts)
            });
            Ok(others.boxed())
        })
    }

    fn search_others(
        &self,
        query: String,
        max: Option<u64>,
    ) -> BoxFuture<'static, Vec<ContentHit>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { cluster.search_others(query, max).await })
    }

    fn restore(
        &self,
        id: ConversationId,
        dir: PathBuf,
    ) -> BoxFuture<'static, Result<(), SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            cluster.restore_conversation(id, &dir).await?;
            Ok(())
        })
    }
}

impl OwnershipService for RegistryBackend {
    fn lease_time(&self) -> Duration {
        self.cluster.lease_time()
    }

    fn acquire(
        &self,
        id: ConversationId,
        dir: PathBuf,
    ) -> BoxFuture<'static, Result<Lease, SharedError>> {
        let backend = self.clone();
        Box::pin(async move {
            let revision = match backend.cluster.acquire_lease(id).await? {
                Acquired::Owned(revision) => revision,
                Acquired::OwnedBy(node) => return Ok(Lease::OwnedBy(node)),
            };
            match backend.bring_files_current(id, &dir).await {
                Ok(fence) => Ok(Lease::Owned { revision, fence }),
                Err(e) => {
                    backend.cluster.release_lease(id, revision).await;
                    Err(e.into())
                }
            }
        })
    }

    fn fence(&self, id: ConversationId, fence: u64) {
        self.replicator.begin(id, fence);
    }

    fn renew(
        &self,
        id: ConversationId,
        revision: u64,
    ) -> BoxFuture<'static, Result<u64, SharedError>> {
        let cluster = self.cluster.clone();
        Box::pin(async move { Ok(cluster.renew_lease(id, revision).await?) })
    }

    fn release(&self, id: ConversationId, revision: u64) -> BoxFuture<'static, ()> {
        let cluster = self.cluster.clone();
        Box::pin(async move { cluster.release_lease(id, revision).await })
    }

    fn write_failures(&self) -> BoxStream<'static, ConversationId> {
        futures_util::stream::unfold(self.replicator.failures(), |mut rx| async move {
            rx.recv().await.map(|id| (id, rx))
        })
        .boxed()
    }

    fn count_owned(&self, count: usize) {
        self.cluster.stats().set_owned(count);
    }

    fn count_renewal(&self) {
        self.cluster.stats().count_renewal();
    }

    fn count_lease_lost(&self) {
        self.cluster.stats().count_lease_lost();
    }
}
