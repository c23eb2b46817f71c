//! The registry in a cluster (`serve --cluster`, docs/cluster.md "Registry"): the shared list of
//! conversations lives in the NATS KV bucket; this actor's entries are the node's copy.
//!
//! - Writes (create, rename, delete) go to the bucket first (`catalog.rs` calls the functions
//!   here); only once JetStream has stored them does the local copy change and the client get
//!   its answer, so an acknowledged change is durable cluster-wide and a node cut off from NATS
//!   answers `Cluster unavailable` instead of diverging.
//! - [`start_cluster_sync`] replaces the local copy with the bucket's contents at start
//!   ([`ClusterSnapshot`]) and then applies every change any node makes ([`ClusterChange`]),
//!   own changes included (applying is idempotent), so `conversationsChanged` reaches the
//!   subscribers of every node.
//! - Lists follow creation time (then id) on every node, so all nodes list in one order.
//!
//! - Ownership: a conversation is loaded only by the node holding its lease in `rt_owners`
//!   ([`Ownership`]): a join of an unloaded conversation takes the lease first (and rebuilds
//!   the conversation's files from the log stream); when another node holds it the join answers
//!   [`RpcError::OnOtherNode`] and the transport relays it there. Leases are renewed on a timer;
//!   a lost one stops the actor at once (`ShutdownReason::Moved`); an eviction, a delete or the
//!   server's stop gives it back, and so does a failed write to the log stream
//!   ([`StreamWriteFailed`]: the conversation is rebuilt from the stream on its next join).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::StreamExt;

use super::{naming, ConversationRegistry, JoinConversation, Joined, LoadState, Pending};
use crate::cluster::lease::Lease;
use crate::cluster::registry_kv::NameClaim;
use crate::cluster::{Cluster, ClusterError, RegistryChange, RegistryRecord};
use crate::conversation::ShutdownReason;
use crate::ids::ConversationId;
use crate::protocol::{ConversationInfo, RpcError, RpcResult};
use crate::storage::journal::JournalRecord;
use crate::storage::log_writer::LogWriter;
use tokio::sync::oneshot;

use super::watchers::ChangeKind;

/// Attempts of an `appendNumber` create against names other nodes took meanwhile.
const APPEND_NUMBER_ATTEMPTS: usize = 8;

/// The bucket's contents at start: the local copy becomes exactly this.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClusterSnapshot {
    /// Every record in the bucket.
    pub records: Vec<RegistryRecord>,
}

/// One change from the bucket's watch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClusterChange(
    /// The change.
    pub RegistryChange,
);

fn unavailable(error: ClusterError) -> RpcError {
    RpcError::ClusterUnavailable(error.0)
}

/// Loads the bucket into the registry, creates the `default` conversation when the cluster has
/// none (one node wins the name), then applies the bucket's changes for the server's life.
pub async fn start_cluster_sync(
    cluster: Cluster,
    registry: Addr<ConversationRegistry>,
) -> Result<(), ClusterError> {
    let snapshot = cluster.registry_snapshot().await?;
    let empty = snapshot.records.is_empty();
    let mut from = snapshot.watch_from;
    log::info!(
        "cluster node {}: registry has {} conversations",
        cluster.node(),
        snapshot.records.len()
    );
    registry
        .send(ClusterSnapshot {
            records: snapshot.records,
        })
        .await
        .map_err(|e| ClusterError(format!("registry actor: {e}")))?;
    if empty {
        let record = default_record();
        match cluster.create_conversation(&record).await? {
            NameClaim::Claimed => {
                log::info!(
                    "cluster: created conversation {:?} ({})",
                    record.name,
                    record.conversation_id
                );
                registry.do_send(ClusterChange(RegistryChange::Put(record)));
            }
            NameClaim::Taken(_) => {} // another node made it; the watch brings it
        }
    }
    share_counts_from_others(&cluster, &registry).await?;
    actix::spawn(async move {
        loop {
            match cluster.watch_registry(from).await {
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    while let Some((revision, change)) = stream.next().await {
                        from = revision + 1;
                        if let Some(change) = change {
                            if registry.try_send(ClusterChange(change)).is_err()
                                && !registry.connected()
                            {
                                return;
                            }
                        }
                    }
                    log::warn!("cluster: registry watch ended; restarting from revision {from}");
                }
                Err(e) => log::warn!("cluster: registry watch: {e}; retrying"),
            }
            if !registry.connected() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Ok(())
}

/// Subject on which owners share the counts of their conversations (core NATS: a lost
/// update is only a stale count until the next one).
const COUNTS_SUBJECT: &str = "rt.counts";

/// What an owner shares about one conversation.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SharedCounts {
    /// The conversation.
    conversation_id: ConversationId,
    /// Clients joined, relayed ones included.
    client_count: usize,
    /// `user-request` entries in its display log.
    message_count: u64,
    /// The owner (a node ignores its own).
    node: String,
}

/// Applies the counts other nodes' conversations share, for the server's life.
async fn share_counts_from_others(
    cluster: &Cluster,
    registry: &Addr<ConversationRegistry>,
) -> Result<(), ClusterError> {
    let mut counts = cluster
        .client()
        .subscribe(COUNTS_SUBJECT)
        .await
        .map_err(|e| ClusterError(format!("subscribe to {COUNTS_SUBJECT}: {e}")))?;
    let me = cluster.node().to_string();
    let registry = registry.clone();
    actix::spawn(async move {
        while let Some(message) = counts.next().await {
            match serde_json::from_slice::<SharedCounts>(&message.payload) {
                Ok(shared) if shared.node != me => {
                    if registry.try_send(ClusterCounts(shared)).is_err() && !registry.connected() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => log::debug!("cluster: unreadable counts: {e}"),
            }
        }
    });
    Ok(())
}

/// Counts another node's conversation has now.
#[derive(Message)]
#[rtype(result = "()")]
struct ClusterCounts(
    /// What the owner shared.
    SharedCounts,
);

impl Handler<ClusterCounts> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: ClusterCounts, ctx: &mut Self::Context) {
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

impl Handler<ClusterSnapshot> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: ClusterSnapshot, ctx: &mut Self::Context) {
        let present: HashSet<ConversationId> =
            msg.records.iter().map(|r| r.conversation_id).collect();
        let gone: Vec<ConversationId> = self
            .entries
            .keys()
            .filter(|id| !present.contains(id))
            .copied()
            .collect();
        for id in gone {
            log::info!("cluster: conversation {id} was deleted while this node was away");
            let removal = self.delete_local(id);
            ctx.spawn(removal.map(|_, _, _| ()));
        }
        // Every node lists in creation-time order: re-key the entries loaded from the file.
        self.order.clear();
        let ids: Vec<ConversationId> = self.entries.keys().copied().collect();
        for id in ids {
            let created_at = self.entries[&id].created_at.to_string();
            let key = self.cluster_order_key(id, &created_at);
            self.entries.get_mut(&id).expect("listed").order = key;
            self.order.insert(key, id);
        }
        for record in &msg.records {
            self.apply_record(record);
        }
    }
}

impl Handler<ClusterChange> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: ClusterChange, ctx: &mut Self::Context) {
        match msg.0 {
            RegistryChange::Put(record) => self.apply_record(&record),
            RegistryChange::Deleted(id) => {
                // A delete made here is already in progress (`deleting`); one from another node
                // closes this node's clients and removes what it holds.
                if self.entries.get(&id).is_some_and(|e| !e.deleting) {
                    log::info!("cluster: conversation {id} deleted on another node");
                    let removal = self.delete_local(id);
                    ctx.spawn(removal.map(|_, _, _| ()));
                }
            }
        }
    }
}

impl ConversationRegistry {
    /// The registry-order key of a conversation in a cluster: its creation time in
    /// milliseconds, then its id, so every node orders the list alike.
    pub(super) fn cluster_order_key(&self, id: ConversationId, created_at: &str) -> u64 {
        let millis = created_at
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond().max(0) as u64)
            .unwrap_or(0);
        let tie = u64::from(u16::from_be_bytes([
            id.as_uuid().as_bytes()[0],
            id.as_uuid().as_bytes()[1],
        ]));
        let mut key = (millis << 16) | tie;
        while self.order.contains_key(&key) {
            key += 1;
        }
        key
    }

    /// Makes the local copy agree with `record`: adds it, or renames it. Journals the change in
    /// the local file (the node's copy survives a restart) and tells subscribers.
    pub(super) fn apply_record(&mut self, record: &RegistryRecord) {
        let id = record.conversation_id;
        match self.entries.get_mut(&id) {
            None => {
                let stored = record.to_stored();
                self.journal_copy(JournalRecord::Put {
                    entry: stored.clone(),
                });
                self.insert_entry(id, &stored);
                self.publish(ChangeKind::Created, id);
            }
            Some(entry) if entry.deleting || *entry.name == *record.name => {}
            Some(entry) => {
                let old = std::mem::replace(&mut entry.name, record.name.as_str().into());
                let stored = entry.stored(id);
                self.unindex_name(&id, &old);
                self.index_name(id, &record.name);
                self.journal_copy(JournalRecord::Put { entry: stored });
                log::info!(
                    "cluster: conversation {id} renamed from {old:?} to {:?}",
                    record.name
                );
                self.publish(ChangeKind::Renamed, id);
            }
        }
        self.maybe_fold();
    }

    /// Writes a change of the local copy to the node's registry file. The change is already
    /// durable in the bucket (the answer does not wait for this); a failure is logged, and the
    /// next start replaces the copy from the bucket anyway.
    fn journal_copy(&mut self, record: JournalRecord) {
        let ack = self.journal(vec![record]);
        actix::spawn(async move {
            if let Ok(Err(e)) = ack.await {
                log::error!("cluster: the local copy of the registry was not written: {e}");
            }
        });
    }

    /// A join without a conversation id when the cluster has no conversation at all (every one
    /// was deleted): the `default` conversation is created in the bucket (or found, when
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
            let record = match cluster
                .create_conversation(&record)
                .await
                .map_err(unavailable)?
            {
                NameClaim::Claimed => record,
                NameClaim::Taken(_) => cluster
                    .record_named(super::DEFAULT_CONVERSATION_NAME)
                    .await
                    .map_err(unavailable)?
                    .ok_or_else(|| {
                        RpcError::ClusterUnavailable(
                            "the default conversation is being created on another node; retry"
                                .into(),
                        )
                    })?,
            };
            let lost = |_| RpcError::Internal("the registry stopped".into());
            registry
                .send(ClusterChange(RegistryChange::Put(record)))
                .await
                .map_err(lost)?;
            registry.send(msg).await.map_err(lost)?.await
        })
    }

    /// `createConversation` in a cluster: the name is claimed in the bucket (another node may
    /// hold it though this copy has not heard yet); `appendNumber` moves past such names.
    pub(super) fn create_in_cluster(
        &mut self,
        cluster: Cluster,
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
                match cluster
                    .create_conversation(&record)
                    .await
                    .map_err(unavailable)?
                {
                    NameClaim::Claimed => return Ok(record),
                    NameClaim::Taken(holder) if append_number => {
                        taken.push(holder);
                        candidate = naming::append_number(
                            &requested,
                            others.iter().chain(&taken).map(String::as_str),
                        );
                        naming::validate_length(&candidate)?;
                    }
                    NameClaim::Taken(holder) => return Err(RpcError::NameExists(holder)),
                }
            }
            Err(RpcError::ClusterUnavailable(format!(
                "no free name for {requested:?} after {APPEND_NUMBER_ATTEMPTS} attempts"
            )))
        };
        Box::pin(work.into_actor(self).map(move |res, act, _| {
            let record = res?;
            act.apply_record(&record);
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

    /// `renameConversation` in a cluster: the new name is claimed in the bucket and the record
    /// rewritten with a compare-and-set; the local copy follows.
    pub(super) fn rename_in_cluster(
        &mut self,
        cluster: Cluster,
        id: ConversationId,
        name: String,
    ) -> ResponseActFuture<Self, RpcResult<()>> {
        let work = async move {
            match cluster
                .rename_conversation(id, &name)
                .await
                .map_err(unavailable)?
            {
                None => Err(RpcError::ConversationNotFound(id.to_string())),
                Some(NameClaim::Taken(holder)) => Err(RpcError::NameExists(holder)),
                Some(NameClaim::Claimed) => Ok(name),
            }
        };
        Box::pin(work.into_actor(self).map(move |res, act, _| {
            let name = res?;
            let Some(entry) = act.entries.get(&id) else {
                return Err(RpcError::ConversationNotFound(id.to_string()));
            };
            let record = RegistryRecord {
                conversation_id: id,
                name,
                created_at: entry.created_at.to_string(),
            };
            act.apply_record(&record);
            Ok(())
        }))
    }
}

/// Makes `dir` hold `id`'s files as the log stream has them, once this node has taken its
/// lease: kept as they are when this process wrote them last and nobody wrote after it (an
/// eviction and a reload here need no restore), else rebuilt from the stream. Answers the
/// stream sequence the conversation's next write is fenced on.
async fn bring_files_current(
    cluster: &Cluster,
    log_writer: &LogWriter,
    id: ConversationId,
    dir: &Path,
) -> Result<u64, ClusterError> {
    let current = log_writer.replicated_through(id);
    if current.is_some() && dir.is_dir() {
        let last = cluster.last_log_sequence(id).await?;
        if Some(last) == current {
            log::info!(
                "conversation {id}: owned by this node; its files are current (stream \
                 sequence {last})"
            );
            return Ok(last);
        }
    }
    let (records, last) = cluster.restore_conversation(id, dir).await?;
    log::info!("conversation {id}: owned by this node; {records} log records restored");
    Ok(last)
}

/// The ownership leases this node holds, and the joins waiting for one to be taken.
#[derive(Default)]
pub(super) struct Ownership {
    /// Conversation → revision of its lease in `rt_owners` (the next renewal's compare-and-set).
    /// Bounded by the loaded conversations.
    leases: HashMap<ConversationId, u64>,
    /// Joins waiting while a lease is taken; the first one started the acquisition. Bounded by
    /// the joins in flight (one per socket and conversation).
    acquiring: HashMap<ConversationId, Vec<WaitingJoin>>,
    /// A renewal round is running (a timer tick does not start a second one).
    renewing: bool,
    /// Owned conversations whose counts changed since they were last shared (bounded by the
    /// owned conversations), and whether the flush is armed.
    counts_dirty: HashSet<ConversationId>,
    /// A flush of `counts_dirty` is scheduled.
    counts_armed: bool,
}

impl Ownership {
    /// Whether this node holds `id`'s lease.
    pub(super) fn holds(&self, id: ConversationId) -> bool {
        self.leases.contains_key(&id)
    }
}

/// A join waiting for a lease, and where its real answer goes once the lease is decided.
type WaitingJoin = (JoinConversation, oneshot::Sender<Pending<Joined>>);

/// A join answered now.
fn answered<T: Send + 'static>(result: RpcResult<T>) -> Pending<T> {
    Box::pin(async move { result })
}

impl ConversationRegistry {
    /// A join of a conversation this node does not own: takes the lease (one acquisition for
    /// every join that arrives meanwhile), rebuilds the files from the log stream, then runs the
    /// joins as usual; when another node holds the lease they answer `OnOtherNode`.
    pub(super) fn join_after_lease(
        &mut self,
        id: ConversationId,
        msg: JoinConversation,
        ctx: &mut Context<Self>,
    ) -> Pending<Joined> {
        let unloaded = self
            .entries
            .get(&id)
            .is_some_and(|e| matches!(e.state, LoadState::Unloaded));
        if !unloaded {
            // Still stopping after a lost lease: the client library retries.
            return answered(Err(RpcError::ClusterUnavailable(format!(
                "conversation {id} is moving to another node; join again"
            ))));
        }
        let (tx, rx) = oneshot::channel();
        let first = !self.ownership.acquiring.contains_key(&id);
        self.ownership
            .acquiring
            .entry(id)
            .or_default()
            .push((msg, tx));
        if first {
            let cluster = self.config.cluster.clone().expect("cluster mode");
            let dir = self.config.layout.conversation_dir(&id);
            let log_writer = self.config.runtime.log_writer.clone();
            let work = async move {
                let lease = cluster.acquire_lease(id).await?;
                let Lease::Owned(revision) = lease else {
                    return Ok((lease, 0));
                };
                match bring_files_current(&cluster, &log_writer, id, &dir).await {
                    Ok(last_sequence) => Ok((lease, last_sequence)),
                    Err(e) => {
                        cluster.release_lease(id, revision).await;
                        Err(e)
                    }
                }
            };
            ctx.spawn(
                work.into_actor(self)
                    .map(move |lease, act, ctx| act.lease_decided(id, lease, ctx)),
            );
        }
        Box::pin(async move {
            rx.await
                .map_err(|_| RpcError::ConversationNotFound(id.to_string()))?
                .await
        })
    }

    /// The acquisition of `id`'s lease ended: run or answer the joins that waited for it.
    fn lease_decided(
        &mut self,
        id: ConversationId,
        lease: Result<(Lease, u64), ClusterError>,
        ctx: &mut Context<Self>,
    ) {
        let (lease, last_sequence) = match lease {
            Ok((lease, last)) => (Ok(lease), last),
            Err(e) => (Err(e), 0),
        };
        let waiting = self.ownership.acquiring.remove(&id).unwrap_or_default();
        let gone = self.stopping || self.entries.get(&id).is_none_or(|e| e.deleting);
        match lease {
            Ok(Lease::Owned(revision)) if gone => {
                if let Some(cluster) = self.config.cluster.clone() {
                    actix::spawn(async move { cluster.release_lease(id, revision).await });
                }
                for (_, tx) in waiting {
                    let _ = tx.send(answered(Err(RpcError::ConversationNotFound(
                        id.to_string(),
                    ))));
                }
            }
            Ok(Lease::Owned(revision)) => {
                self.config
                    .runtime
                    .log_writer
                    .replication_begins(id, last_sequence);
                self.ownership.leases.insert(id, revision);
                self.count_owned();
                if let Some(search) = &self.config.runtime.search {
                    search.restored(id);
                }
                for (msg, tx) in waiting {
                    let MessageResult(pending) =
                        <Self as Handler<JoinConversation>>::handle(self, msg, ctx);
                    let _ = tx.send(pending);
                }
            }
            Ok(Lease::OwnedBy(node)) => {
                for (_, tx) in waiting {
                    let error = RpcError::OnOtherNode {
                        id: id.to_string(),
                        node: node.clone(),
                    };
                    let _ = tx.send(answered(Err(error)));
                }
            }
            Err(e) => {
                log::warn!("conversation {id}: lease not taken: {e}");
                for (_, tx) in waiting {
                    let _ = tx.send(answered(Err(unavailable(e.clone()))));
                }
            }
        }
    }

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
            let shared: Vec<Vec<u8>> = dirty
                .into_iter()
                .filter_map(|id| {
                    let entry = act.entries.get(&id)?;
                    serde_json::to_vec(&SharedCounts {
                        conversation_id: id,
                        client_count: entry.clients(),
                        message_count: entry.message_count,
                        node: cluster.node().to_string(),
                    })
                    .ok()
                })
                .collect();
            actix::spawn(async move {
                for payload in shared {
                    if let Err(e) = cluster
                        .client()
                        .publish(COUNTS_SUBJECT, payload.into())
                        .await
                    {
                        log::debug!("cluster: counts not shared: {e}");
                    }
                }
            });
        });
    }

    fn count_owned(&self) {
        if let Some(cluster) = &self.config.cluster {
            cluster.stats().set_owned(self.ownership.leases.len());
        }
    }

    /// Gives `id`'s lease back, if held (after an eviction or a delete: the files are flushed).
    pub(super) fn release_lease(&mut self, id: ConversationId) {
        let Some(revision) = self.ownership.leases.remove(&id) else {
            return;
        };
        self.count_owned();
        if let Some(cluster) = self.config.cluster.clone() {
            actix::spawn(async move { cluster.release_lease(id, revision).await });
        }
    }

    /// Every lease, given back once the returned future runs (at shutdown, after the
    /// conversations stopped).
    pub(super) fn take_leases(&mut self) -> impl std::future::Future<Output = ()> {
        let leases: Vec<(ConversationId, u64)> = self.ownership.leases.drain().collect();
        self.count_owned();
        let cluster = self.config.cluster.clone();
        async move {
            if let Some(cluster) = cluster {
                let releases = leases.into_iter().map(|(id, revision)| {
                    let cluster = cluster.clone();
                    async move { cluster.release_lease(id, revision).await }
                });
                futures_util::future::join_all(releases).await;
            }
        }
    }

    /// In a cluster: renews every held lease each third of the lease time, and gives up at
    /// once any conversation whose write to the log stream failed.
    pub(super) fn start_lease_renewals(&mut self, ctx: &mut Context<Self>) {
        let Some(cluster) = &self.config.cluster else {
            return;
        };
        ctx.run_interval(cluster.lease_time() / 3, |act, ctx| act.renew_leases(ctx));
        if let Some(failures) = self.config.runtime.log_writer.replication_failures() {
            let failures = futures_util::stream::unfold(failures, |mut rx| async move {
                rx.recv().await.map(|id| (StreamWriteFailed(id), rx))
            });
            ctx.add_stream(failures);
        }
    }

    fn renew_leases(&mut self, ctx: &mut Context<Self>) {
        if self.ownership.renewing || self.ownership.leases.is_empty() || self.stopping {
            return;
        }
        let Some(cluster) = self.config.cluster.clone() else {
            return;
        };
        self.ownership.renewing = true;
        let held: Vec<(ConversationId, u64)> = self
            .ownership
            .leases
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        let work = futures_util::future::join_all(held.into_iter().map(move |(id, revision)| {
            let cluster = cluster.clone();
            async move { (id, revision, cluster.renew_lease(id, revision).await) }
        }));
        ctx.spawn(work.into_actor(self).map(|results, act, ctx| {
            act.ownership.renewing = false;
            for (id, old, renewed) in results {
                if act.ownership.leases.get(&id) != Some(&old) {
                    continue; // released meanwhile
                }
                match renewed {
                    Ok(revision) => {
                        act.ownership.leases.insert(id, revision);
                        if let Some(cluster) = &act.config.cluster {
                            cluster.stats().count_renewal();
                        }
                    }
                    Err(e) => act.lease_lost(id, e, ctx),
                }
            }
        }));
    }

    /// The lease of `id` could not be renewed: another node may own it now, so this node's
    /// actor stops at once (its clients' channels close; they join again and reach the owner).
    fn lease_lost(&mut self, id: ConversationId, why: ClusterError, ctx: &mut Context<Self>) {
        self.ownership.leases.remove(&id);
        self.count_owned();
        if let Some(cluster) = &self.config.cluster {
            cluster.stats().count_lease_lost();
        }
        log::warn!("conversation {id}: ownership lease lost ({why}); stopping it here");
        self.stop_live(id, ShutdownReason::Moved, ctx);
    }
}

/// A conversation's write to the log stream failed (refused by fencing, or NATS gone): its
/// files here now differ from the stream, so this node stops it and gives its lease up; the
/// next join (here or anywhere) rebuilds it from the stream.
pub(super) struct StreamWriteFailed(
    /// The conversation.
    ConversationId,
);

impl StreamHandler<StreamWriteFailed> for ConversationRegistry {
    fn handle(&mut self, msg: StreamWriteFailed, ctx: &mut Self::Context) {
        let id = msg.0;
        let Some(revision) = self.ownership.leases.get(&id).copied() else {
            return;
        };
        self.lease_lost(
            id,
            ClusterError("a write to the log stream failed".into()),
            ctx,
        );
        if let Some(cluster) = self.config.cluster.clone() {
            actix::spawn(async move { cluster.release_lease(id, revision).await });
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // The log writer's replicator stopped: nothing more will be reported.
    }
}
