//! The registry in a cluster (`serve --cluster`, docs/cluster.md "Registry"): the shared list of
//! conversations lives in a store every node reads and writes
//! ([`SharedStore`](super::SharedStore)); this actor's entries are the node's copy. The
//! registry defines what it needs of that store as a trait and its types (`shared_store.rs`);
//! the cluster module implements it over a NATS KV bucket
//! (`cluster/backend.rs`, `cluster/registry_kv.rs`), so nothing in the registry names NATS.
//!
//! - Writes (create, rename, delete) go to the store first (`catalog.rs` calls the functions
//!   here); only once it has stored them does the local copy change and the client get its
//!   answer, so an acknowledged change is durable cluster-wide and a node cut off from the
//!   store answers `Cluster unavailable` instead of diverging.
//! - [`start_shared_sync`] brings the local copy to the store's contents at start
//!   ([`SharedSnapshot`]), then applies every change any node makes ([`SharedChange`]), own
//!   changes included (applying is idempotent, and a record's revision keeps an older change
//!   from undoing a newer one), so `conversationsChanged` reaches the subscribers of every
//!   node. It also starts the checks of the copy against fresh snapshots (`reconcile.rs`),
//!   which repair what the watch missed.
//! - Lists follow creation time (then id) on every node, so all nodes list in one order.
//! - Counts: owners share their conversations' client and message counts through the store
//!   (`share_counts_soon`); the other nodes put them in their copy.
//!
//! Who talks to it: `serve` starts the sync; the catalog's create / rename / delete, the
//! membership's join of a cluster without conversations, the content search (other nodes'
//! hits) and the backup (conversations rebuilt from the store) call the store through
//! [`RegistryConfig::cluster`](super::RegistryConfig::cluster). Which node runs a conversation
//! (leases) is `ownership.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::StreamExt;

use super::reconcile::{self, SharedSnapshot, WatchState};
use super::shared_store::{
    bounded_snapshot, ChangeStream, RegistryChange, RegistryRecord, RegistrySnapshot, SharedCounts,
    SharedError, Written,
};
use super::{ClusterServices, ConversationRegistry, LoadState};
use crate::ids::ConversationId;
use crate::naming;
use crate::protocol::{ConversationInfo, RpcError, RpcResult};
use crate::storage::journal::JournalRecord;

use super::watchers::ChangeKind;

/// Attempts of an `appendNumber` create against names other nodes took meanwhile.
const APPEND_NUMBER_ATTEMPTS: usize = 8;

/// One revision from the store's watch, or a change this node made itself.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SharedChange {
    /// The store's revision (`None`: a change this node applies ahead of its watch); once
    /// applied, requests waiting for it go on (`catch_up.rs`).
    pub revision: Option<u64>,
    /// What the revision changed (`None`: a revision that changes no conversation, such as a
    /// name key's, which still counts as applied).
    pub change: Option<RegistryChange>,
}

impl SharedChange {
    /// A change this node applies ahead of its watch.
    fn local(change: RegistryChange) -> SharedChange {
        SharedChange {
            revision: None,
            change: Some(change),
        }
    }
}

fn unavailable(error: SharedError) -> RpcError {
    RpcError::ClusterUnavailable(error.0)
}

/// Loads the shared store into the registry, creates the `default` conversation when the
/// cluster has none (one node wins the name), then applies the store's changes and the other
/// nodes' counts for the server's life.
pub async fn start_shared_sync(
    shared: Arc<dyn ClusterServices>,
    registry: Addr<ConversationRegistry>,
) -> Result<(), SharedError> {
    log::debug!(
        "cluster node {}: reading the shared registry",
        shared.node()
    );
    let snapshot = snapshot_with_retries(shared.as_ref()).await?;
    let empty = snapshot.records.is_empty();
    let mut from = snapshot.watch_from;
    log::info!(
        "cluster node {}: registry has {} conversations",
        shared.node(),
        snapshot.records.len()
    );
    log::debug!(
        "cluster node {}: handing the snapshot to the registry",
        shared.node()
    );
    registry
        .send(SharedSnapshot {
            snapshot,
            start: true,
            watch_at: 0,
            sweep: false,
        })
        .await
        .map_err(|e| SharedError(format!("registry actor: {e}")))?;
    if empty {
        let record = default_record();
        match shared.create(record.clone()).await? {
            Written::Stored(revision) => {
                log::info!(
                    "cluster: created conversation {:?} ({})",
                    record.name,
                    record.conversation_id
                );
                registry.do_send(SharedChange::local(RegistryChange::Put {
                    record,
                    revision,
                }));
            }
            Written::Taken(_) => {} // another node made it; the watch brings it
        }
    }
    share_counts_from_others(shared.as_ref(), &registry).await?;
    // The watch tells the checks of the copy how far it got and when it had to start again
    // (whatever went wrong may have cost it changes); a check may send it back (`reconcile.rs`).
    let watch = Arc::new(WatchState::default());
    // The copy is current to the snapshot's revision: the watch starts from there.
    watch.applied.store(from - 1, Ordering::SeqCst);
    actix::spawn(reconcile::check_the_copy(
        shared.clone(),
        registry.clone(),
        watch.clone(),
    ));
    actix::spawn(async move {
        loop {
            match shared.watch(from).await {
                Ok(mut stream) => {
                    while let Some((revision, change)) =
                        next_or_stuck(shared.as_ref(), &mut stream, from, &watch.rewind).await
                    {
                        from = revision + 1;
                        // Every revision goes to the registry, changes or not: requests wait
                        // for the revision the store had when they arrived (`catch_up.rs`).
                        // `send` waits for room: a change is never dropped (a `try_send` on a
                        // busy registry's full mailbox lost it, and this node's copy stayed
                        // without it until restart). It fails only once the registry is gone.
                        let revision = Some(revision);
                        if registry
                            .send(SharedChange { revision, change })
                            .await
                            .is_err()
                        {
                            return;
                        }
                        watch.applied.fetch_max(from - 1, Ordering::SeqCst);
                        if watch.rewind.load(Ordering::SeqCst) != 0 {
                            break;
                        }
                    }
                    let rewind = watch.rewind.swap(0, Ordering::SeqCst);
                    if rewind != 0 {
                        // A check found the store behind what this watch delivered.
                        from = rewind;
                        watch.applied.store(rewind - 1, Ordering::SeqCst);
                        continue;
                    }
                    log::warn!("cluster: registry watch ended; restarting from revision {from}");
                }
                Err(e) => log::warn!("cluster: registry watch: {e}; retrying"),
            }
            watch.restarted.store(true, Ordering::SeqCst);
            if !registry.connected() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Ok(())
}

/// The shared store's snapshot, tried up to [`SNAPSHOT_ATTEMPTS`] times: a replay can fail
/// while a NATS server of the cluster restarts, and a node that gives up at start serves
/// no one.
async fn snapshot_with_retries(
    shared: &dyn ClusterServices,
) -> Result<RegistrySnapshot, SharedError> {
    let mut attempt = 1;
    loop {
        match bounded_snapshot(shared).await {
            Ok(snapshot) => return Ok(snapshot),
            Err(e) if attempt < SNAPSHOT_ATTEMPTS => {
                log::warn!(
                    "cluster node {}: reading the registry failed ({e}); attempt {} of {SNAPSHOT_ATTEMPTS}",
                    shared.node(),
                    attempt + 1
                );
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many times a starting node reads the shared registry before it gives up.
const SNAPSHOT_ATTEMPTS: u32 = 5;

/// How long the watch may deliver nothing before this node asks the store whether it has
/// missed something.
const WATCH_QUIET: Duration = Duration::from_secs(2);

/// The watch's next change; `None` when it ended, or when it stays quiet for [`WATCH_QUIET`]
/// while the store holds revisions from `from` on (the watch is stuck: a consumer that
/// async-nats neither delivers from nor reports lost, seen by the nemesis after a NATS server
/// restart, left a node's copy behind for good). The caller then watches again from `from`.
async fn next_or_stuck(
    shared: &dyn ClusterServices,
    stream: &mut ChangeStream,
    from: u64,
    rewind: &AtomicU64,
) -> Option<(u64, Option<RegistryChange>)> {
    loop {
        match tokio::time::timeout(WATCH_QUIET, stream.next()).await {
            Ok(next) => return next,
            // A check asked for a rewind: the caller starts again from there.
            Err(_) if rewind.load(Ordering::SeqCst) != 0 => return None,
            Err(_) => match shared.revision().await {
                Ok(newest) if newest >= from => {
                    log::warn!(
                        "cluster node {}: registry watch delivered nothing for {} s while the store is at revision {newest} (this node has applied {}); watching again",
                        shared.node(),
                        WATCH_QUIET.as_secs(),
                        from.saturating_sub(1)
                    );
                    return None;
                }
                // Nothing missed (or the store out of reach: the watch resumes by itself
                // once it is back, and this is asked again).
                _ => {}
            },
        }
    }
}

/// Applies the counts other nodes' conversations share, for the server's life.
async fn share_counts_from_others(
    shared: &dyn ClusterServices,
    registry: &Addr<ConversationRegistry>,
) -> Result<(), SharedError> {
    let mut counts = shared.counts_from_others().await?;
    let registry = registry.clone();
    actix::spawn(async move {
        while let Some(counts) = counts.next().await {
            // Waits for room too: a dropped count stayed stale until the owner's next one.
            if registry.send(OtherNodeCounts(counts)).await.is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// Counts another node's conversation has now.
#[derive(Message)]
#[rtype(result = "()")]
struct OtherNodeCounts(
    /// What the owner shared.
    SharedCounts,
);

impl Handler<OtherNodeCounts> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: OtherNodeCounts, ctx: &mut Self::Context) {
        let shared = msg.0;
        let id = shared.conversation_id;
        if self.ownership.holds(id) {
            return;
        }
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if !matches!(entry.state, LoadState::Unloaded) {
            return;
        }
        entry.message_count = shared.message_count;
        // Not running here: the counter holds what the owner said.
        entry.client_count = (shared.client_count > 0)
            .then(|| Arc::new(std::sync::atomic::AtomicUsize::new(shared.client_count)));
        self.mark_updated(id, ctx);
    }
}

fn default_record() -> RegistryRecord {
    RegistryRecord {
        conversation_id: ConversationId::new_random(),
        name: super::DEFAULT_CONVERSATION_NAME.to_string(),
        created_at: crate::clock::now_iso(),
    }
}

impl Handler<SharedChange> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: SharedChange, ctx: &mut Self::Context) {
        match msg.change {
            Some(RegistryChange::Put { record, revision }) => {
                self.apply_record(&record, revision);
            }
            Some(RegistryChange::Deleted { id, revision }) => {
                self.shared_copy.tombstone(id, revision);
                // A delete made here is already in progress (`deleting`); one from another
                // node closes this node's clients and removes what it holds.
                if self.entries.get(&id).is_some_and(|e| !e.deleting) {
                    log::info!("cluster: conversation {id} deleted on another node");
                    let removal = self.delete_local(id);
                    ctx.spawn(removal.map(|_, _, _| ()));
                }
            }
            None => {}
        }
        if let Some(revision) = msg.revision {
            self.caught_up_to(revision, ctx);
        }
    }
}

impl ConversationRegistry {
    /// The registry-order key of a conversation in a cluster: its creation time in
    /// milliseconds, then its id, so every node orders the list alike.
    pub(super) fn cluster_order_key(&self, id: ConversationId, created_at: &str) -> u64 {
        cluster_order_key(&self.order, id, created_at)
    }

    /// Makes the local copy agree with `record`, stored at `revision`: adds it, or renames it,
    /// unless the copy holds a newer revision of it, it was deleted, or (`revision` 0, not
    /// known) it is already there. Whether the copy changed.
    pub(super) fn apply_record(&mut self, record: &RegistryRecord, revision: u64) -> bool {
        let id = record.conversation_id;
        if self.shared_copy.is_deleted(id) {
            return false;
        }
        match self.entries.get(&id) {
            None => {}
            Some(entry) if entry.deleting || revision == 0 || revision <= entry.revision => {
                return false
            }
            Some(_) => {}
        }
        self.put_record(record, revision)
    }

    /// Makes the local copy hold `record` at `revision`, whatever revision it held (a check of
    /// the copy, on the store's leader's word: `reconcile.rs`); an entry being deleted here is
    /// left to its delete. Journals the change in the local file (the node's copy survives a
    /// restart) and tells subscribers. Whether the copy changed.
    pub(super) fn put_record(&mut self, record: &RegistryRecord, revision: u64) -> bool {
        let id = record.conversation_id;
        let changed = match self.entries.get_mut(&id) {
            None => {
                let stored = record.to_stored();
                self.journal_copy(JournalRecord::Put {
                    entry: stored.clone(),
                });
                self.insert_entry(id, stored);
                self.entries.get_mut(&id).expect("inserted").revision = revision;
                self.publish(ChangeKind::Created, id);
                true
            }
            Some(entry) if entry.deleting => false,
            Some(entry) if *entry.name == *record.name => {
                entry.revision = revision;
                false
            }
            Some(entry) => {
                entry.revision = revision;
                let old = std::mem::replace(&mut entry.name, record.name.as_str().into());
                let stored = entry.stored(id);
                self.unindex_name(&id, &old);
                self.index_name(id, &record.name);
                self.journal_copy(JournalRecord::Put { entry: stored });
                log::info!(
                    "cluster: conversation {id} renamed from {old:?} to {:?} (revision {revision})",
                    record.name
                );
                self.publish(ChangeKind::Renamed, id);
                true
            }
        };
        self.maybe_fold();
        changed
    }

    /// Writes a change of the local copy to the node's registry file. The change is already
    /// durable in the store (the answer does not wait for this); a failure is logged, and the
    /// next start replaces the copy from the store anyway.
    fn journal_copy(&mut self, record: JournalRecord) {
        let ack = self.journal(vec![record]);
        actix::spawn(async move {
            if let Ok(Err(e)) = ack.await {
                log::error!("cluster: the local copy of the registry was not written: {e}");
            }
        });
    }

    /// A join without a conversation id when the cluster has no conversation at all (every one
    /// was deleted): the `default` conversation is created in the store (or found, when
    /// another node won the name), applied here, and the join sent again.
    pub(super) fn join_new_cluster_default(
        &mut self,
        msg: super::JoinConversation,
        ctx: &mut Context<Self>,
    ) -> super::Pending<super::Joined> {
        let cluster = self.config.cluster.clone().expect("cluster mode");
        let registry = ctx.address();
        Box::pin(async move {
            let record = default_record();
            let (record, revision) =
                match cluster.create(record.clone()).await.map_err(unavailable)? {
                    Written::Stored(revision) => (record, revision),
                    // Its revision is not known here: the copy only adds it, if it lacks it.
                    Written::Taken(_) => cluster
                        .record_named(super::DEFAULT_CONVERSATION_NAME.to_string())
                        .await
                        .map_err(unavailable)?
                        .map(|record| (record, 0))
                        .ok_or_else(|| {
                            RpcError::ClusterUnavailable(
                                "the default conversation is being created on another node; \
                                 retry"
                                    .into(),
                            )
                        })?,
                };
            let lost = |_| RpcError::Internal("the registry stopped".into());
            registry
                .send(SharedChange::local(RegistryChange::Put {
                    record,
                    revision,
                }))
                .await
                .map_err(lost)?;
            registry.send(msg).await.map_err(lost)?.await
        })
    }

    /// `createConversation` in a cluster: the name is claimed in the store (another node may
    /// hold it though this copy has not heard yet); `appendNumber` moves past such names.
    pub(super) fn create_in_cluster(
        &mut self,
        cluster: Arc<dyn ClusterServices>,
        requested: String,
        first_choice: String,
        append_number: bool,
    ) -> ResponseActFuture<Self, RpcResult<ConversationInfo>> {
        let others: Vec<String> = if append_number {
            self.in_order().map(|(_, e)| e.name.to_string()).collect()
        } else {
            Vec::new()
        };
        let id = ConversationId::new_random();
        let created_at = crate::clock::now_iso();
        let work = async move {
            let mut candidate = first_choice;
            let mut taken: Vec<String> = Vec::new();
            for _ in 0..APPEND_NUMBER_ATTEMPTS {
                let record = RegistryRecord {
                    conversation_id: id,
                    name: candidate.clone(),
                    created_at: created_at.clone(),
                };
                match cluster.create(record.clone()).await.map_err(unavailable)? {
                    Written::Stored(revision) => return Ok((record, revision)),
                    Written::Taken(holder) if append_number => {
                        taken.push(holder);
                        candidate = naming::append_number(
                            &requested,
                            others.iter().chain(&taken).map(String::as_str),
                        );
                        naming::validate_length(&candidate)?;
                    }
                    Written::Taken(holder) => return Err(RpcError::NameExists(holder)),
                }
            }
            Err(RpcError::ClusterUnavailable(format!(
                "no free name for {requested:?} after {APPEND_NUMBER_ATTEMPTS} attempts"
            )))
        };
        Box::pin(work.into_actor(self).map(move |res, act, _| {
            let (record, revision) = res?;
            act.apply_record(&record, revision);
            let entry = act
                .entries
                .get(&id)
                .ok_or_else(|| RpcError::ConversationNotFound(id.to_string()))?;
            log::info!(
                "created conversation {id} ({:?}) in the cluster",
                entry.name
            );
            Ok(act.info(id, entry, false))
        }))
    }

    /// `renameConversation` in a cluster: the new name is claimed in the store and the record
    /// rewritten there; the local copy follows.
    pub(super) fn rename_in_cluster(
        &mut self,
        cluster: Arc<dyn ClusterServices>,
        id: ConversationId,
        name: String,
    ) -> ResponseActFuture<Self, RpcResult<()>> {
        let work = async move {
            match cluster
                .rename(id, name.clone())
                .await
                .map_err(unavailable)?
            {
                None => Err(RpcError::ConversationNotFound(id.to_string())),
                Some(Written::Taken(holder)) => Err(RpcError::NameExists(holder)),
                Some(Written::Stored(revision)) => Ok((name, revision)),
            }
        };
        Box::pin(work.into_actor(self).map(move |res, act, _| {
            let (name, revision) = res?;
            let Some(entry) = act.entries.get(&id) else {
                return Err(RpcError::ConversationNotFound(id.to_string()));
            };
            let record = RegistryRecord {
                conversation_id: id,
                name,
                created_at: entry.created_at.to_string(),
            };
            act.apply_record(&record, revision);
            Ok(())
        }))
    }
}

impl ConversationRegistry {
    /// In a cluster: shares `id`'s counts with the other nodes within
    /// [`UPDATE_INTERVAL`](super::UPDATE_INTERVAL) (changes coalesced), when this node owns it.
    pub(super) fn share_counts_soon(&mut self, id: ConversationId, ctx: &mut Context<Self>) {
        if self.config.cluster.is_none() || !self.ownership.holds(id) {
            return;
        }
        self.ownership.counts_dirty.insert(id);
        if self.ownership.counts_armed {
            return;
        }
        self.ownership.counts_armed = true;
        ctx.run_later(super::UPDATE_INTERVAL, |act, _| {
            act.ownership.counts_armed = false;
            let Some(cluster) = act.config.cluster.clone() else {
                return;
            };
            let dirty = std::mem::take(&mut act.ownership.counts_dirty);
            let counts: Vec<SharedCounts> = dirty
                .into_iter()
                .filter_map(|id| {
                    let entry = act.entries.get(&id)?;
                    Some(SharedCounts {
                        conversation_id: id,
                        client_count: entry.clients(),
                        message_count: entry.message_count,
                    })
                })
                .collect();
            actix::spawn(cluster.share_counts(counts));
        });
    }
}

/// The registry-order key of a conversation in a cluster, free in `order`: its creation time
/// in milliseconds, then its id, so every node orders the list alike.
pub(super) fn cluster_order_key(
    order: &std::collections::BTreeMap<u64, ConversationId>,
    id: ConversationId,
    created_at: &str,
) -> u64 {
    let millis = created_at
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond().max(0) as u64)
        .unwrap_or(0);
    let tie = u64::from(u16::from_be_bytes([
        id.as_uuid().as_bytes()[0],
        id.as_uuid().as_bytes()[1],
    ]));
    let mut key = (millis << 16) | tie;
    while order.contains_key(&key) {
        key += 1;
    }
    key
}
