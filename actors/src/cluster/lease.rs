//! Ownership leases (docs/cluster.md "Ownership"): the KV bucket `rt_owners` holds, for every
//! loaded conversation, the node that runs its `Conversation` actor. A node loads a
//! conversation only after `create` of its key succeeded (insert-if-absent: one winner), renews
//! it with a compare-and-set every third of the lease time, and deletes it when the
//! conversation unloads. The bucket's `max_age` is the lease time: the key of a node that died
//! (or lost NATS) vanishes by itself, and the next join anywhere takes the conversation over,
//! rebuilding its files from the log stream.
//!
//! Who talks to it: the registry actor (`registry/ownership.rs`), through its
//! [`OwnershipService`](crate::registry::OwnershipService) (implemented in `backend.rs`):
//! acquire before a load, renew on its timer, release after an eviction, a delete or at
//! shutdown.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;

use super::{Cluster, ClusterError};
use crate::ids::ConversationId;

/// Lease time when `--lease-time` does not say (the bucket keeps the value of the node that
/// created it).
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(6);

/// What an acquisition found (before the files are brought current: the registry's
/// [`Lease`](crate::registry::Lease) is this plus the fence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This node owns the conversation; the revision to renew from.
    Owned(u64),
    /// Another node owns it.
    OwnedBy(String),
}

/// Opens (or creates) the owners bucket with `lease_time` as its `max_age`.
pub(super) async fn open_bucket(
    js: &jetstream::Context,
    names: &super::Names,
    lease_time: Duration,
    replicas: usize,
) -> Result<kv::Store, ClusterError> {
    super::open_or_create_bucket(
        js,
        &names.owners_bucket(),
        "Roundtable conversation ownership leases",
        lease_time,
        jetstream::stream::StorageType::File,
        replicas,
    )
    .await
}

fn key(id: ConversationId) -> String {
    id.to_string()
}

impl Cluster {
    /// Takes the lease of `id`, or says who holds it. A key that already names this node (left
    /// by this node's previous process, within the lease time) is taken back.
    pub async fn acquire_lease(&self, id: ConversationId) -> Result<Acquired, ClusterError> {
        self.require_connected()?;
        let owners = self.owners_bucket();
        let me = Bytes::from(self.node().to_string());
        for _ in 0..3 {
            match owners.create(key(id), me.clone()).await {
                Ok(revision) => return Ok(Acquired::Owned(revision)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(ClusterError::new("lease acquire", e)),
            }
            let Some(holder) = super::live_entry(owners, key(id), "lease read").await? else {
                continue; // released in between: acquire again
            };
            if holder.value == me {
                return owners
                    .update(key(id), me, holder.revision)
                    .await
                    .map(Acquired::Owned)
                    .map_err(|e| ClusterError::new("lease take-back", e));
            }
            return Ok(Acquired::OwnedBy(
                String::from_utf8_lossy(&holder.value).into_owned(),
            ));
        }
        Err(ClusterError(format!("lease of {id}: still contended")))
    }

    /// Renews the lease held at `revision`; the new revision, or an error when it was lost.
    pub async fn renew_lease(
        &self,
        id: ConversationId,
        revision: u64,
    ) -> Result<u64, ClusterError> {
        self.owners_bucket()
            .update(key(id), Bytes::from(self.node().to_string()), revision)
            .await
            .map_err(|e| ClusterError::new("lease renewal", e))
    }

    /// Gives the lease back (compare-and-set: a lease another node took meanwhile stays).
    pub async fn release_lease(&self, id: ConversationId, revision: u64) {
        if let Err(e) = self
            .owners_bucket()
            .delete_expect_revision(key(id), Some(revision))
            .await
        {
            log::debug!("conversation {id}: lease not released: {e}");
        }
    }
}
