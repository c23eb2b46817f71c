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
//! - Counts: owners share their conversations' client and message counts on `rt.counts`
//!   (`share_counts_soon`); the other nodes put them in their copy.
//!
//! Which node runs a conversation (leases) is `ownership.rs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::StreamExt;

use super::{ConversationRegistry, LoadState};
use crate::naming;
use crate::cluster::registry_kv::NameClaim;
use crate::cluster::{Cluster, ClusterError, RegistryChange, RegistryRecord};
use crate::ids::ConversationId;
use crate::protocol::{ConversationInfo, RpcError, RpcResult};
use crate::storage::journal::JournalRecord;

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
}
