//! [`SnapshotInstance`]: a backup's consistent snapshot of the instance directory, taken
//! through the registry because it owns both storage writers' handles (its own
//! [`RegistryWriter`](crate::storage::journal::RegistryWriter) and the conversations'
//! [`LogWriter`](crate::storage::log_writer::LogWriter)). The registry only queues the
//! holds; the waiting and linking run on a thread of their own
//! ([`snapshot::take`]), so the registry's mailbox is not held up.
//!
//! In a cluster the conversations' directories in the snapshot are rebuilt from the cluster's
//! copy ([`SharedStore::restore`](super::SharedStore::restore); the node's own copies may be
//! partial or old).
//!
//! Talks to: the server's `GET /backup` route.

use actix::prelude::*;

use super::ConversationRegistry;
use crate::storage::snapshot::{self, Snapshot};

/// Take a [`Snapshot`] of the instance directory. `Err` says why not (the server is stopping,
/// a writer thread has stopped, an I/O error).
#[derive(Message)]
#[rtype(result = "Result<Snapshot, String>")]
pub struct SnapshotInstance;

impl Handler<SnapshotInstance> for ConversationRegistry {
    type Result = ResponseFuture<Result<Snapshot, String>>;

    fn handle(&mut self, _msg: SnapshotInstance, _ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(async { Err("the server is stopping".to_string()) });
        }
        let taken = snapshot::take(
            &self.config.layout,
            &self.writer,
            &self.config.runtime.log_writer,
        );
        // In a cluster this node's directories hold only what it owns or owned (maybe an
        // older state): every conversation of the registry is rebuilt from the log stream
        // into the snapshot instead, so a backup from any node holds the whole cluster.
        let from_stream = self.config.cluster.clone().map(|cluster| {
            let ids: Vec<_> = self.in_order().map(|(id, _)| id).collect();
            (cluster, ids)
        });
        let conversations = self
            .config
            .layout
            .conversations_dir()
            .strip_prefix(&self.config.layout.root)
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|_| "conversations".into());
        Box::pin(async move {
            let mut snapshot = taken
                .await
                .unwrap_or_else(|_| Err("the backup snapshot thread has stopped".into()))?;
            if let Some((cluster, ids)) = from_stream {
                for id in ids {
                    let rel = conversations.join(id.to_string());
                    cluster
                        .restore(id, snapshot.dir.join(&rel))
                        .await
                        .map_err(|e| format!("backup: {e}"))?;
                    snapshot
                        .relist(&rel)
                        .map_err(|e| format!("backup: listing {}: {e}", rel.display()))?;
                }
            }
            Ok(snapshot)
        })
    }
}
