//! The `ConversationRegistry` actor: the single owner of the list of conversations (loaded or
//! not) and the only one that starts or stops [`Conversation`] actors. Every create, rename,
//! delete, and every join of a conversation that is not loaded, passes through its mailbox, so
//! load, eviction and delete are serialised without locks (a join of a loaded conversation
//! goes straight to its actor, which orders it against its own eviction: `directory.rs`).
//! Durable changes go through the [`RegistryWriter`] thread; an RPC is answered only once its
//! change is on disk.
//!
//! Talks to: the transport's connections (every message of `catalog` and `membership`, and
//! the [`LiveDirectory`] they read),
//! its conversations (`Attach`, `Detach`, `Shutdown`; they answer with [`ConversationEvent`]s),
//! and the writer thread.
//!
//! This file holds the actor, its entries and their states; the messages it is sent live next
//! to their handlers, except the three a conversation sends up ([`ConversationEvent`],
//! [`ReadHandoffSource`], [`GetConversationInfo`]), which the conversation defines
//! (`conversation/upward.rs`) so that it never names the registry:
//! - `catalog.rs`: create / rename / delete / list / find, and whether an id exists.
//! - `membership.rs`: join / leave and the [`JoinLease`] that leaves for a vanished socket.
//! - `directory.rs`: the [`LiveDirectory`] of loaded conversations, through which a
//!   connection joins and leaves a loaded conversation without this actor's round trip.
//! - `lifecycle.rs`: opening the registry from disk, lazy load, idle eviction, shutdown.
//! - `backup.rs`: the consistent snapshot a backup streams ([`SnapshotInstance`]).
//! - `handoff_source.rs`: a handoff's source found and its history read ([`ReadHandoffSource`]).
//! - `watchers.rs`: the live conversation list (`subscribeConversations`, a Roundtable
//!   extension): changes pushed to subscribed sockets, count updates coalesced.
//! - [`naming`] (below the registry, shared with the cluster): the name rules (length,
//!   uniqueness key, `appendNumber`, find scoring).
//! - `catch_up.rs` (`serve --cluster`): read-your-writes: [`CaughtUp`] requests wait until
//!   this node's copy has applied the store's revision they arrived at.
//! - `shared_store.rs`: what the registry needs of a cluster's shared store (`SharedStore` and
//!   its types), used by `shared.rs` and `reconcile.rs` alike.
//! - `shared.rs` (`serve --cluster`): this node's copy of the registry shared by the cluster,
//!   and creates / renames / deletes written there first ([`SharedStore`]).
//! - `ownership.rs` (`serve --cluster`): the leases that decide which node runs a conversation
//!   ([`OwnershipService`]).
//!
//! In a cluster the registry talks to the other nodes only through [`ClusterServices`], the
//! two traits above, which the cluster module implements: the registry defines what it needs,
//! and names nothing of the cluster or NATS.
//!
//! # Implementation notes
//! Each entry is in one of these states (`LoadState`, plus the `deleting` flag):
//!
//! | state | meaning | leaves it on | to |
//! | --- | --- | --- | --- |
//! | **Unloaded** | on disk only | [`JoinConversation`]: a `Conversation` is started (generation + 1) and the `Attach` queued in its mailbox (loading is this one step; there is no separate Loading state) | Live |
//! | **Live** | an actor runs and is in the [`LiveDirectory`]; joins the registry sees are forwarded as `Attach` with `do_send` (so they keep mailbox order) and counted in `attaches_sent`; connections also attach directly, which the conversation refuses once it reported idleness | the last client's leave ([`JoinLease::leave`], or the lease dropped): the conversation arms its idle timer | Live, idle |
//! | **Live, idle** | no clients; the timer lives in the conversation, the registry still sees Live | a join (its `Attach` disarms the timer); or [`ConversationEvent::IdleExpired`] whose generation and attach count match: `Shutdown{Evicted}` sent | Live; Evicting |
//! | **Evicting** | the actor flushes and stops; joins that arrive now wait in the state | the `Shutdown` reply (`evicted`): waiting joins are replayed on a freshly loaded actor | Live, or Unloaded when nobody waited |
//! | **Deleting** (flag, any state) | joins and renames answer `Conversation not found`, lists skip it; the actor is shut down (clients told, waiting joins dropped), the delete journaled, the directory removed | the journal acknowledgement of [`DeleteConversation`]; a failed append clears the flag | Deleted (entry dropped); Unloaded |
//!
//! A stale `IdleExpired` (the conversation was rejoined since its timer fired, or a join is in
//! flight, or it reports for an earlier actor) is ignored: the registry evicts only when the
//! report's generation equals the entry's and its attach count equals `attaches_sent`.
//! [`ShutdownRegistry`] stops every live conversation and folds the journal.

mod backup;
mod catalog;
mod catch_up;
mod directory;
mod handoff_source;
mod lifecycle;
mod lost_records;
mod membership;
mod ownership;
mod reconcile;
mod shared;
mod shared_store;
mod startup;
mod watchers;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::ids::{ConversationId, ConversationRef};
use actix::prelude::*;
use tokio::sync::oneshot;

use crate::conversation::{Attach, Conversation, RuntimeConfig};
use crate::metrics::Metrics;
use crate::naming;
use crate::protocol::{ConversationInfo, RpcError, RpcResult};
use crate::storage::journal::JournalRecord;
use crate::storage::journal::RegistryWriter;
use crate::storage::layout::Layout;
use crate::storage::registry_file::StoredConversation;

pub use crate::conversation::{ConversationEvent, GetConversationInfo, ReadHandoffSource};
pub use backup::SnapshotInstance;
pub use catalog::{
    CollisionBehavior, ConversationExists, CreateConversation, DeleteConversation,
    FindConversations, ListConversations, RenameConversation, SearchConversationContent,
};
pub use catch_up::{CaughtUp, CATCH_UP_TIMEOUT, MAX_WAITING};
pub use directory::{LiveConversation, LiveDirectory};
pub use lifecycle::ShutdownRegistry;
pub use membership::{join_loaded, JoinConversation, JoinLease, Joined, Pending};
pub use ownership::{Lease, OwnershipService};
pub use reconcile::{SharedSnapshot, DEFAULT_RECONCILE_TIME};
pub use shared::{start_shared_sync, SharedChange};
pub use shared_store::{
    ChangeStream, RegistryChange, RegistryRecord, RegistrySnapshot, SharedCounts, SharedError,
    SharedFuture, SharedStore, Written,
};
pub use startup::{read_registry_early, EarlyRegistry, StartupTables};
pub use watchers::{
    ChangeKind, ConversationsChanged, SubscribeConversations, UnsubscribeConversations,
    CONVERSATIONS_CHANGED, UPDATE_INTERVAL,
};

/// Name of the conversation created when the registry is empty.
pub const DEFAULT_CONVERSATION_NAME: &str = "default";
/// Journal records tolerated before folding, at minimum (the bound grows with the registry so
/// folding stays amortised O(1) per change).
const MIN_FOLD_THRESHOLD: usize = 1024;

/// Settings of the registry.
#[derive(Clone)]
pub struct RegistryConfig {
    /// Instance directory layout.
    pub layout: Layout,
    /// How long a conversation with no clients stays loaded.
    pub idle_timeout: Duration,
    /// Move an unparsable registry aside instead of refusing to start.
    pub repair: bool,
    /// Arbiters conversations are spread over (one per core); empty = the registry's own.
    pub conversation_arbiters: Vec<ArbiterHandle>,
    /// Shared counters.
    pub metrics: Arc<Metrics>,
    /// Agent and storage settings every conversation shares.
    pub runtime: Arc<RuntimeConfig>,
    /// `serve --cluster`: the registry shared by the nodes and the ownership leases. Every
    /// create / rename / delete is written there first; the entries here are this node's copy,
    /// fed by its watch (`shared.rs`). `None`: a single node, the files are the truth.
    pub cluster: Option<Arc<dyn ClusterServices>>,
    /// Loaded conversations' addresses, shared with the connections so a join of a loaded
    /// conversation skips this actor ([`LiveDirectory`]; kept empty in a cluster).
    pub directory: Arc<LiveDirectory>,
}

/// What the registry needs of the other nodes in a cluster: the shared list of conversations
/// and the ownership leases, in one object (a cluster has both or neither). Implemented by the
/// cluster module for every type that implements the two traits.
pub trait ClusterServices: SharedStore + OwnershipService {}

impl<T: SharedStore + OwnershipService> ClusterServices for T {}

/// Whether a conversation's actor runs (see the table under "Implementation notes").
enum LoadState {
    /// Not running: on disk only; the next join loads it.
    Unloaded,
    /// Running (idle or not: the idle timer lives in the conversation); joins go straight to
    /// this address.
    Live(Addr<Conversation>),
    /// Stopping after idling. Joins that arrive meanwhile wait here, in order, because the
    /// old actor must flush before a new one reads the same files.
    Evicting(Vec<Attach>),
}

/// One conversation in the registry, loaded or not. Kept compact (10,000 of them are held for
/// the server's life): the id is the map's key, not a second string; text fields are boxed
/// (no spare capacity); what TypeAgent stored beyond the known keys is boxed and absent for
/// entries Roundtable made; an unloaded conversation has no client counter. The record as
/// stored on disk is rebuilt from it when needed ([`Entry::stored`]).
struct Entry {
    /// Name as given by the client (untrimmed).
    name: Box<str>,
    /// ISO-8601 creation time, as stored.
    created_at: Box<str>,
    /// Keys of the stored record that Roundtable does not interpret (`source`, `readOnly`, …),
    /// written back unchanged; `None` when there are none (`messageCount` is never here: it is
    /// `message_count`).
    extra: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    /// Position in registry order (key of `order`), so lists keep the order of creation.
    order: u64,
    /// Whether and how it is loaded.
    state: LoadState,
    /// Bumped each time an actor is started; idle reports of an earlier actor carry an older
    /// one and are ignored, so a stale timer never evicts a reloaded conversation.
    generation: u64,
    /// Attaches sent to the current actor. An idle report that has seen fewer raced with a
    /// join still in the conversation's mailbox, so it does not evict.
    attaches_sent: u64,
    /// Live clients, written by the actor itself so `clientCount` needs no message per join;
    /// a fresh counter per generation, so a stopping actor cannot write into its successor's;
    /// `None` while no actor runs (no clients, no allocation).
    client_count: Option<Arc<AtomicUsize>>,
    /// `user-request` entries in the display log, reported by the actor and written back at
    /// the next fold.
    message_count: u64,
    /// A delete is in progress: the entry stays (its name stays taken) until the delete is
    /// durable, but joins, renames and lists no longer see it.
    deleting: bool,
    /// In a cluster: the shared store's revision of the record this copy holds, so an older
    /// revision (a late watch delivery, a snapshot read before a rename) never undoes a newer
    /// one (`shared.rs`, `reconcile.rs`). 0: not known (loaded from this node's file, or a
    /// single node).
    revision: u64,
}

impl Entry {
    /// A conversation not loaded, at `order` in registry order, with the stored record's
    /// fields. Its strings are copied, not moved, so that what the parse allocated is freed whole
    /// and goes back to the OS instead of staying pinned by strings moved out of it (moving
    /// them saved no measurable time and cost 0.4–1.4 MB of idle RSS at 10,000
    /// conversations). A
    /// `messageCount` that is not a whole number is replaced by 0 (then by the actor's count).
    fn unloaded(
        order: u64,
        name: &str,
        created_at: &str,
        message_count: Option<u64>,
        mut extra: serde_json::Map<String, serde_json::Value>,
    ) -> Box<Entry> {
        // Kept in the entry only (not twice); `snapshot` writes it back into the record.
        extra.remove("messageCount");
        Box::new(Entry {
            name: Box::from(name),
            created_at: Box::from(created_at),
            extra: (!extra.is_empty()).then(|| Box::new(extra)),
            order,
            state: LoadState::Unloaded,
            generation: 0,
            attaches_sent: 0,
            client_count: None,
            message_count: message_count.unwrap_or(0),
            deleting: false,
            revision: 0,
        })
    }

    /// Clients joined right now.
    fn clients(&self) -> usize {
        self.client_count
            .as_ref()
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The record as stored on disk (without `messageCount`: [`ConversationRegistry::snapshot`]
    /// adds it when folding).
    fn stored(&self, id: ConversationId) -> StoredConversation {
        StoredConversation {
            conversation_id: id.to_string(),
            name: self.name.to_string(),
            created_at: self.created_at.to_string(),
            message_count: None,
            extra: self.extra.as_deref().cloned().unwrap_or_default(),
        }
    }
}

/// Registry entries sharing one name-index slot (normalized names that hash alike; more than
/// one id only for hand-edited files or hash collisions).
enum NameSlot {
    /// The usual case: one conversation.
    One(ConversationId),
    /// Several; each is checked against the normalized name.
    Many(Vec<ConversationId>),
}

impl NameSlot {
    fn ids(&self) -> &[ConversationId] {
        match self {
            NameSlot::One(id) => std::slice::from_ref(id),
            NameSlot::Many(ids) => ids,
        }
    }
}

/// The name index's key: a hash of the normalized name (the names themselves live in the
/// entries; a lookup confirms the match there).
fn name_key(normalized: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(normalized)
}

/// Adds `id` under `name` to the name index `names`.
fn index_name_in(names: &mut HashMap<u64, NameSlot>, id: ConversationId, name: &str) {
    let key = name_key(&naming::normalize(name));
    match names.entry(key) {
        std::collections::hash_map::Entry::Vacant(slot) => {
            slot.insert(NameSlot::One(id));
        }
        std::collections::hash_map::Entry::Occupied(mut slot) => {
            let slot = slot.get_mut();
            *slot = NameSlot::Many(slot.ids().iter().copied().chain([id]).collect());
        }
    }
}

/// The registry's maps of conversations, borrowed together: the one way a conversation
/// enters them, whether the running registry ([`ConversationRegistry::insert_entry`]) or the
/// start's tables (`startup.rs`) hold them.
struct Tables<'a> {
    entries: &'a mut HashMap<ConversationId, Box<Entry>>,
    order: &'a mut BTreeMap<u64, ConversationId>,
    next_order: &'a mut u64,
    names: &'a mut HashMap<u64, NameSlot>,
}

impl Tables<'_> {
    /// Enters `id`, unloaded: at the end of registry order, or (`clustered`) at its place by
    /// creation time; under its name in the name index.
    fn enter(
        self,
        clustered: bool,
        id: ConversationId,
        name: &str,
        created_at: &str,
        message_count: Option<u64>,
        extra: serde_json::Map<String, serde_json::Value>,
    ) {
        let order = if clustered {
            shared::cluster_order_key(self.order, id, created_at)
        } else {
            *self.next_order += 1;
            *self.next_order - 1
        };
        self.order.insert(order, id);
        index_name_in(self.names, id, name);
        self.entries.insert(
            id,
            Entry::unloaded(order, name, created_at, message_count, extra),
        );
    }
}

/// The registry actor. Start it with [`ConversationRegistry::open`] then `Supervisor::start*`.
pub struct ConversationRegistry {
    /// Settings.
    config: RegistryConfig,
    /// The durable writer thread: journal appends and folds happen off the actor's thread,
    /// and an RPC is answered when its append is acknowledged.
    writer: RegistryWriter,
    /// All conversations by id. Each entry is boxed: a hash table keeps a quarter to a half of
    /// its slots empty, and an empty slot costs 24 bytes this way instead of the 136 of an
    /// inline entry (10,000 conversations: 16,384 slots, 2.2 → 1.6 MB with the boxes).
    entries: HashMap<ConversationId, Box<Entry>>,
    /// Registry order: order key → id (ids are random; lists follow creation order).
    order: BTreeMap<u64, ConversationId>,
    /// Next order key; only grows, so a new entry always sorts last.
    next_order: u64,
    /// The name index: hash of the normalized name → the ids with it, so a collision check is
    /// one lookup without a second copy of every name ([`NameSlot`]).
    names: HashMap<u64, NameSlot>,
    /// Entries whose id is not a UUID: never served (ids touch paths), but written back.
    foreign: Vec<StoredConversation>,
    /// Records appended since the last fold; a fold is due past `MIN_FOLD_THRESHOLD` or the
    /// number of entries, whichever is larger.
    journal_len: usize,
    /// Round-robin index into `config.conversation_arbiters`.
    next_arbiter: usize,
    /// Set by [`ShutdownRegistry`]: no new work, and idle reports no longer evict.
    stopping: bool,
    /// Sockets subscribed to the live conversation list, and the coalesced count updates.
    watchers: watchers::Watchers,
    /// The last run crashed: stored message counts may trail the logs; recount them (once,
    /// in the background, so startup does not wait on one file read per conversation).
    recount_pending: bool,
    /// `serve --cluster`: the conversations this node holds the ownership lease of, and the
    /// joins waiting for a lease to be taken (`ownership.rs`).
    ownership: ownership::Ownership,
    /// `serve --cluster`: requests waiting for this node's copy of the shared registry to
    /// apply the store's revision they arrived at (read-your-writes, `catch_up.rs`).
    catch_up: catch_up::CatchUp,
    /// `serve --cluster`: the deletes this copy applied that a snapshot may not show yet, so
    /// that a snapshot read before them does not bring them back (`reconcile.rs`).
    shared_copy: reconcile::SharedCopy,
}

impl ConversationRegistry {
    /// Adds the entry of `stored`, at the end of registry order (in a cluster, at its place
    /// by creation time).
    fn insert_entry(&mut self, id: ConversationId, stored: StoredConversation) {
        let clustered = self.config.cluster.is_some();
        Tables {
            entries: &mut self.entries,
            order: &mut self.order,
            next_order: &mut self.next_order,
            names: &mut self.names,
        }
        .enter(
            clustered,
            id,
            &stored.name,
            &stored.created_at,
            stored.message_count,
            stored.extra,
        );
    }

    fn remove_entry(&mut self, id: &ConversationId) {
        self.config.directory.remove(id);
        if let Some(entry) = self.entries.remove(id) {
            self.order.remove(&entry.order);
            self.unindex_name(id, &entry.name);
        }
    }

    /// Adds `id` under `name` to the name index.
    fn index_name(&mut self, id: ConversationId, name: &str) {
        index_name_in(&mut self.names, id, name);
    }

    /// Removes `id` (indexed under `name`) from the name index.
    fn unindex_name(&mut self, id: &ConversationId, name: &str) {
        let key = name_key(&naming::normalize(name));
        let Some(slot) = self.names.get_mut(&key) else {
            return;
        };
        let rest: Vec<ConversationId> = slot.ids().iter().copied().filter(|x| x != id).collect();
        match rest.as_slice() {
            [] => {
                self.names.remove(&key);
            }
            [one] => *slot = NameSlot::One(*one),
            _ => *slot = NameSlot::Many(rest),
        }
    }

    /// The ids indexed under the normalized name `key` (confirm the name on the entry).
    fn named(&self, normalized: &str) -> impl Iterator<Item = ConversationId> + '_ {
        self.names
            .get(&name_key(normalized))
            .map(NameSlot::ids)
            .unwrap_or_default()
            .iter()
            .copied()
    }

    fn snapshot(&self) -> Vec<StoredConversation> {
        self.order
            .values()
            .filter_map(|id| self.entries.get(id).map(|e| (*id, e)))
            .map(|(id, e)| {
                let mut stored = e.stored(id);
                if e.message_count > 0 {
                    stored.message_count = Some(e.message_count);
                }
                stored
            })
            .chain(self.foreign.iter().cloned())
            .collect()
    }

    fn info(&self, id: ConversationId, entry: &Entry, indexed: bool) -> ConversationInfo {
        ConversationInfo {
            conversation_id: id,
            name: entry.name.to_string(),
            client_count: entry.clients(),
            created_at: entry.created_at.to_string(),
            message_count: entry.message_count,
            indexed_message_count: indexed.then_some(0),
        }
    }

    /// The conversations not being deleted, in registry order, with their ids.
    fn in_order(&self) -> impl Iterator<Item = (ConversationId, &Entry)> {
        self.order
            .values()
            .filter_map(|id| self.entries.get(id).map(|e| (*id, &**e)))
            .filter(|(_, e)| !e.deleting)
    }

    /// The conversation a client named, if it exists and is not being deleted.
    fn lookup(&self, named: &ConversationRef) -> Option<ConversationId> {
        let id = named.id()?;
        self.entries.get(&id).filter(|e| !e.deleting).map(|_| id)
    }

    /// Queues records on the writer; the receiver resolves when they are durable.
    fn journal(&mut self, records: Vec<JournalRecord>) -> oneshot::Receiver<Result<(), String>> {
        self.journal_len += records.len();
        self.writer.append(records)
    }

    /// Folds the journal into `conversations.json` once it outgrows the registry.
    fn maybe_fold(&mut self) {
        if self.journal_len > MIN_FOLD_THRESHOLD.max(self.entries.len()) {
            self.journal_len = 0;
            let done = self.writer.fold(self.snapshot());
            actix::spawn(async move {
                if let Ok(Err(e)) = done.await {
                    log::error!("registry fold failed (the journal keeps every change): {e}");
                }
            });
        }
    }
}

fn new_stored(id: ConversationId, name: String) -> StoredConversation {
    StoredConversation {
        conversation_id: id.to_string(),
        name,
        created_at: crate::clock::now_iso(),
        message_count: None,
        extra: serde_json::Map::new(),
    }
}

fn storage_error(result: Result<Result<(), String>, oneshot::error::RecvError>) -> RpcResult<()> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(RpcError::Storage(e)),
        Err(_) => Err(RpcError::Storage("registry writer stopped".into())),
    }
}

impl Actor for ConversationRegistry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Every connection sends here; a deep mailbox keeps `send` from parking senders.
        ctx.set_mailbox_capacity(1 << 16);
        if std::mem::take(&mut self.recount_pending) {
            self.recount_message_counts(ctx);
        }
        self.start_lease_renewals(ctx);
    }
}

impl actix::Supervised for ConversationRegistry {
    /// Keeps the entries on purpose: they mirror what is on disk and the conversations they
    /// point at still run; only `stopping` is cleared. The server binary aborts on any panic
    /// (its panic policy), so this runs only where that hook is not installed.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        // The same value is reused: entries and running conversations are still valid.
        log::warn!(
            "conversation registry restarting; keeping {} entries",
            self.entries.len()
        );
        self.stopping = false;
    }
}

/// Makes the registry panic (test seam, see [`crate::storage::faults`]); the panic policy applies.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PanicForTest;

impl Handler<PanicForTest> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, _msg: PanicForTest, _ctx: &mut Self::Context) {
        panic!("test panic requested through testPanic");
    }
}

/// Figures for `/health` and `/metrics`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RegistryStats {
    /// Conversations in the registry.
    pub conversations: usize,
    /// Conversations loaded in memory.
    pub loaded: usize,
}

/// Asks for [`RegistryStats`].
#[derive(Message)]
#[rtype(result = "RegistryStats")]
pub struct GetRegistryStats;

impl Handler<GetRegistryStats> for ConversationRegistry {
    type Result = MessageResult<GetRegistryStats>;

    fn handle(&mut self, _msg: GetRegistryStats, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(RegistryStats {
            conversations: self.entries.len(),
            loaded: self
                .entries
                .values()
                .filter(|e| matches!(e.state, LoadState::Live(_)))
                .count(),
        })
    }
}
