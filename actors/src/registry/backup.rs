//! [`SnapshotInstance`]: a backup's consistent snapshot of the instance directory, taken
//! through the registry because it owns both storage writers' handles (its own
//! [`RegistryWriter`](crate::storage::journal::RegistryWriter) and the conversations'
//! [`LogWriter`](crate::storage::log_writer::LogWriter)). The registry only queues the
//! holds; the waiting and linking run on a thread of their own
//! ([`snapshot::take`]), so the registry's mailbox is not held up.
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
        Box::pin(async move {
            taken
                .await
                .unwrap_or_else(|_| Err("the backup snapshot thread has stopped".into()))
        })
    }
}
