//! Ownership in a cluster (`serve --cluster`, docs/cluster.md "Ownership"): a conversation is
//! loaded only by the node holding its lease ([`Ownership`]). A join of an unloaded
//! conversation takes the lease first (and brings the conversation's files current from the
//! cluster's copy); when another node holds it the join answers [`RpcError::OnOtherNode`] and
//! the transport relays it there. Leases are renewed on a timer; a lost one stops the actor at
//! once (`ShutdownReason::Moved`); an eviction, a delete or the server's stop gives it back,
//! and so does a failed write to the cluster's copy ([`StreamWriteFailed`]: the conversation
//! is rebuilt from it on its next join).
//!
//! The registry defines what it needs of the leases here ([`OwnershipService`], [`Lease`]);
//! the cluster module implements it (`cluster/backend.rs`, over the `rt_owners` bucket and the
//! log stream), so nothing here names NATS.
//!
//! Who talks to it: the registry's join handler (`membership.rs`), eviction and delete
//! (`lifecycle.rs`, `catalog.rs`), its `started` (renewals) and shutdown (`take_leases`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::oneshot;

use super::shared_store::SharedError;
use super::{ConversationRegistry, JoinConversation, Joined, LoadState, Pending};
use crate::conversation::ShutdownReason;
use crate::ids::ConversationId;
use crate::protocol::{RpcError, RpcResult};

/// What taking a lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease {
    /// This node owns the conversation, and its directory holds the files as the cluster has
    /// them.
    Owned {
        /// The lease's revision: the next renewal's compare-and-set.
        revision: u64,
        /// Where the conversation's shared copy stands: its next write is fenced on it
        /// ([`OwnershipService::fence`]).
        fence: u64,
    },
    /// Another node owns it (its name).
    OwnedBy(String),
}

/// The ownership leases, as the registry uses them: one node at a time runs a conversation.
/// Futures own what they need (`'static`), so the actor can spawn them.
pub trait OwnershipService: Send + Sync + 'static {
    /// How long a lease lasts without renewal (it is renewed every third of that).
    fn lease_time(&self) -> Duration;

    /// Takes `id`'s lease, or says who holds it. Once taken, makes `dir` hold the
    /// conversation's files as the cluster has them (kept when they are current already); if
    /// that fails the lease is given back and the error answered.
    fn acquire(
        &self,
        id: ConversationId,
        dir: PathBuf,
    ) -> BoxFuture<'static, Result<Lease, SharedError>>;

    /// This node now runs `id` from the files [`acquire`](OwnershipService::acquire) brought
    /// current: its later writes to the cluster's copy are fenced on `fence` (refused once
    /// another owner wrote), and an earlier write failure is forgotten.
    fn fence(&self, id: ConversationId, fence: u64);

    /// Renews the lease held at `revision`: the new revision, or an error when it was lost.
    fn renew(
        &self,
        id: ConversationId,
        revision: u64,
    ) -> BoxFuture<'static, Result<u64, SharedError>>;

    /// Gives the lease held at `revision` back (one another node took meanwhile stays).
    fn release(&self, id: ConversationId, revision: u64) -> BoxFuture<'static, ()>;

    /// The conversations whose write to the cluster's copy failed, each once per failure (the
    /// registry stops them and gives their lease up). A second call replaces the first stream.
    fn write_failures(&self) -> BoxStream<'static, ConversationId>;

    /// For `/health`: this node holds `count` leases now.
    fn count_owned(&self, count: usize);

    /// For `/health`: a renewal succeeded.
    fn count_renewal(&self);

    /// For `/health`: a lease was lost (not renewed, or given up after a failed write).
    fn count_lease_lost(&self);
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
            let work = cluster.acquire(id, self.config.layout.conversation_dir(&id));
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
        lease: Result<Lease, SharedError>,
        ctx: &mut Context<Self>,
    ) {
        let waiting = self.ownership.acquiring.remove(&id).unwrap_or_default();
        let gone = self.stopping || self.entries.get(&id).is_none_or(|e| e.deleting);
        match lease {
            Ok(Lease::Owned { revision, .. }) if gone => {
                if let Some(cluster) = &self.config.cluster {
                    actix::spawn(cluster.release(id, revision));
                }
                for (_, tx) in waiting {
                    let _ = tx.send(answered(Err(RpcError::ConversationNotFound(
                        id.to_string(),
                    ))));
                }
            }
            Ok(Lease::Owned { revision, fence }) => {
                if let Some(cluster) = &self.config.cluster {
                    cluster.fence(id, fence);
                }
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
            cluster.count_owned(self.ownership.leases.len());
        }
    }

    /// Gives `id`'s lease back, if held (after an eviction or a delete: the files are flushed).
    pub(super) fn release_lease(&mut self, id: ConversationId) {
        let Some(revision) = self.ownership.leases.remove(&id) else {
            return;
        };
        self.count_owned();
        if let Some(cluster) = &self.config.cluster {
            actix::spawn(cluster.release(id, revision));
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
                let releases = leases
                    .into_iter()
                    .map(|(id, revision)| cluster.release(id, revision));
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
        let failures = futures_util::StreamExt::map(cluster.write_failures(), StreamWriteFailed);
        ctx.add_stream(failures);
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
            let renewal = cluster.renew(id, revision);
            async move { (id, revision, renewal.await) }
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
                            cluster.count_renewal();
                        }
                    }
                    Err(e) => act.lease_lost(id, e, ctx),
                }
            }
        }));
    }

    /// The lease of `id` could not be renewed: another node may own it now, so this node's
    /// actor stops at once (its clients' channels close; they join again and reach the owner).
    fn lease_lost(&mut self, id: ConversationId, why: SharedError, ctx: &mut Context<Self>) {
        self.ownership.leases.remove(&id);
        self.count_owned();
        if let Some(cluster) = &self.config.cluster {
            cluster.count_lease_lost();
        }
        log::warn!("conversation {id}: ownership lease lost ({why}); stopping it here");
        self.stop_live(id, ShutdownReason::Moved, ctx);
    }
}

/// A conversation's write to the cluster's copy failed (refused by fencing, or the cluster
/// gone): its files here now differ from the stream, so this node stops it and gives its lease up; the
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
            SharedError("a write to the log stream failed".into()),
            ctx,
        );
        if let Some(cluster) = &self.config.cluster {
            actix::spawn(cluster.release(id, revision));
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // The cluster's replica stopped: nothing more will be reported.
    }
}
