//! What the registry needs of the cluster's shared store, as a trait ([`SharedStore`]) and
//! its types: the records every node knows, the changes, the snapshot, the counts. The
//! cluster module implements it over a NATS KV bucket; `shared.rs` (the sync) and
//! `reconcile.rs` (the checks of the copy) use it, so neither needs the other for its types.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use super::ClusterServices;
use crate::ids::ConversationId;
use crate::search::ContentHit;
use crate::storage::registry_file::StoredConversation;

/// Why the shared store (or the ownership service) could not answer: the text of a
/// `Cluster unavailable` answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SharedError(pub String);

/// One conversation's record in the shared store: what every node knows of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryRecord {
    /// UUIDv4.
    pub conversation_id: ConversationId,
    /// Name as given by the client (untrimmed).
    pub name: String,
    /// ISO-8601 creation time.
    pub created_at: String,
}

impl RegistryRecord {
    /// The record as the local registry file stores it.
    pub fn to_stored(&self) -> StoredConversation {
        StoredConversation {
            conversation_id: self.conversation_id.to_string(),
            name: self.name.clone(),
            created_at: self.created_at.clone(),
            message_count: None,
            extra: serde_json::Map::new(),
        }
    }
}

/// A change seen through the store's watch (or made by this node), with the store's revision
/// of it: the copy never lets an older revision undo a newer one it already holds.
#[derive(Debug, Clone)]
pub enum RegistryChange {
    /// A conversation was created or renamed.
    Put {
        /// The record as stored.
        record: RegistryRecord,
        /// The store's revision of this record (0: not known, which only ever adds a
        /// conversation the copy lacks).
        revision: u64,
    },
    /// A conversation was deleted.
    Deleted {
        /// The conversation.
        id: ConversationId,
        /// The store's revision of the delete (0: not known).
        revision: u64,
    },
}

/// Every record in the store, the deleted conversations whose markers it keeps, and the
/// revision to watch from so that nothing written after the snapshot is missed (changes
/// already in it may come again: applying them is idempotent). Taken at start and by every
/// check of the copy (`reconcile.rs`).
#[derive(Debug, Default)]
pub struct RegistrySnapshot {
    /// The records with their revisions, in no particular order.
    pub records: Vec<(RegistryRecord, u64)>,
    /// Deleted conversations with the revisions of their deletes.
    pub deleted: Vec<(ConversationId, u64)>,
    /// First revision the watch must deliver: the store's newest revision before the read,
    /// plus one. Everything up to `watch_from - 1` is in the snapshot.
    pub watch_from: u64,
}

/// The store's watch: each revision from the first one asked for, with the change it made
/// (`None`: a revision that changes no conversation, such as a name key's).
pub type ChangeStream = BoxStream<'static, (u64, Option<RegistryChange>)>;

/// What a create or a rename did in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The record is stored, at this revision.
    Stored(u64),
    /// Another conversation has the name: its name as stored (for the protocol's error).
    Taken(String),
}

/// The counts an owner shares about one of its conversations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedCounts {
    /// The conversation.
    pub conversation_id: ConversationId,
    /// Clients joined, relayed ones included.
    pub client_count: usize,
    /// `user-request` entries in its display log.
    pub message_count: u64,
}

/// The shared list of conversations, as the registry uses it. Every call answers a future that
/// owns what it needs (`'static`), so the actor can spawn it and go on with its mailbox.
pub trait SharedStore: Send + Sync + 'static {
    /// This node's name (for the log).
    fn node(&self) -> &str;

    /// Every record now, and where the watch must start.
    fn snapshot(&self) -> BoxFuture<'static, Result<RegistrySnapshot, SharedError>>;

    /// The changes from revision `from` on, each with its revision (`None`: a revision that
    /// changes no conversation). The stream ends when the watch fails; the caller restarts it
    /// from the last revision it saw.
    fn watch(&self, from: u64) -> BoxFuture<'static, Result<ChangeStream, SharedError>>;

    /// Creates a conversation: claims its name, then writes its record (`Stored` with the
    /// record's revision). `Taken` (with the holder's name) when another conversation has the
    /// name.
    fn create(&self, record: RegistryRecord) -> BoxFuture<'static, Result<Written, SharedError>>;

    /// Like `create`, for a conversation the store lost (`lost_records.rs`): only when the
    /// store holds nothing for its id, neither a record nor a delete marker (`Ok(None)`).
    fn create_lost(&self, record: RegistryRecord) -> SharedFuture<Option<Written>>;

    /// Renames a conversation (claims the new name, rewrites the record, releases the old
    /// name). `Ok(None)` when its record is gone (deleted on another node).
    fn rename(
        &self,
        id: ConversationId,
        name: String,
    ) -> BoxFuture<'static, Result<Option<Written>, SharedError>>;

    /// Deletes a conversation's record, its name, and its files' shared copy.
    fn delete(&self, id: ConversationId) -> BoxFuture<'static, Result<(), SharedError>>;

    /// Whether the store is within reach right now (NATS connected): when it is not, reads
    /// answer from this node's copy at once and writes are refused, instead of waiting for
    /// a revision that cannot come.
    fn reachable(&self) -> bool;

    /// How often this node checks its copy against a fresh snapshot (`reconcile.rs`).
    fn reconcile_time(&self) -> Duration;

    /// Counts checks of the copy and the repairs they made (for `/health` and `/metrics`).
    fn count_reconcile(&self, checks: usize, repairs: usize);

    /// `id`'s live record and its revision as the store's leader answers (`None`: none, or
    /// deleted): a check of the copy asks before it changes what its snapshot alone says
    /// (`reconcile.rs`).
    fn leader_record(
        &self,
        id: ConversationId,
    ) -> BoxFuture<'static, Result<Option<(RegistryRecord, u64)>, SharedError>>;

    /// The store's newest revision now: once this node's copy has applied it, the copy
    /// reflects every write any node has had acknowledged (read-your-writes, `catch_up.rs`).
    fn revision(&self) -> BoxFuture<'static, Result<u64, SharedError>>;

    /// The record of the conversation that holds `name`, if any.
    fn record_named(
        &self,
        name: String,
    ) -> BoxFuture<'static, Result<Option<RegistryRecord>, SharedError>>;

    /// Tells the other nodes the counts of conversations this node owns (best effort: a lost
    /// update is only a stale count until the next one).
    fn share_counts(&self, counts: Vec<SharedCounts>) -> BoxFuture<'static, ()>;

    /// The counts the other nodes share (never this node's own), for the server's life.
    fn counts_from_others(
        &self,
    ) -> BoxFuture<'static, Result<BoxStream<'static, SharedCounts>, SharedError>>;

    /// The other nodes' content-search hits for `query` (each node indexes what it wrote):
    /// what answered in time, best first per node; empty when alone or cut off.
    fn search_others(&self, query: String, max: Option<u64>)
        -> BoxFuture<'static, Vec<ContentHit>>;

    /// Writes `id`'s files, as the shared copy has them, into `dir` (a backup's snapshot).
    fn restore(
        &self,
        id: ConversationId,
        dir: PathBuf,
    ) -> BoxFuture<'static, Result<(), SharedError>>;
}

/// What most [`SharedStore`] calls answer.
pub type SharedFuture<T> = BoxFuture<'static, Result<T, SharedError>>;

/// How long one attempt at the snapshot may take.
const SNAPSHOT_ATTEMPT_TIME: Duration = Duration::from_secs(20);

/// One attempt at the store's snapshot, bounded by [`SNAPSHOT_ATTEMPT_TIME`]: a replay whose
/// consumer stops delivering must not keep the node from ever listening, nor a check of the
/// copy from ever ending (`reconcile.rs`).
pub(super) async fn bounded_snapshot(
    shared: &dyn ClusterServices,
) -> Result<RegistrySnapshot, SharedError> {
    tokio::time::timeout(SNAPSHOT_ATTEMPT_TIME, shared.snapshot())
        .await
        .unwrap_or_else(|_| {
            Err(SharedError(format!(
                "no snapshot within {} s",
                SNAPSHOT_ATTEMPT_TIME.as_secs()
            )))
        })
}
