//! Ownership in a cluster (`serve --cluster`, docs/cluster.md "Ownership"): a conversation is
//! loaded only by the node holding its lease in `rt_owners` ([`Ownership`]). A join of an
//! unloaded conversation takes the lease first (and brings the conversation's files current
//! from the log stream); when another node holds it the join answers
//! [`RpcError::OnOtherNode`] and the transport relays it there. Leases are renewed on a timer;
//! a lost one stops the actor at once (`ShutdownReason::Moved`); an eviction, a delete or the
//! server's stop gives it back, and so does a failed write to the log stream
//! ([`StreamWriteFailed`]: the conversation is rebuilt from the stream on its next join).
//!
//! Who talks to it: the registry's join handler (`membership.rs`), eviction and delete
//! (`lifecycle.rs`, `catalog.rs`), its `started` (renewals) and shutdown (`take_leases`).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::{ConversationRegistry, JoinConversation, Joined, LoadState, Pending};
use crate::cluster::lease::Lease;
use crate::cluster::{Cluster, ClusterError};
use crate::conversation::ShutdownReason;
use crate::ids::ConversationId;
use crate::protocol::{RpcError, RpcResult};
use crate::storage::log_writer::LogWriter;

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
    pub(super) counts_dirty: HashSet<ConversationId>,
    /// A flush of `counts_dirty` is scheduled.
    pub(super) counts_armed: bool,
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
                    let _ = tx.send(answered(Err(RpcError::ClusterUnavailable(e.0.clone()))));
                }
            }
        }
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
