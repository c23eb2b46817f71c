//! The `ConversationRegistry` actor: the single owner of the list of conversations (loaded or
//! not) and the only one that starts or stops [`Conversation`] actors. Every create, rename,
//! delete, join and leave passes through its mailbox, so load, eviction and delete are
//! serialised without locks. Durable changes go through the [`RegistryWriter`] thread; an RPC
//! is answered only once its change is on disk.
//!
//! Talks to: the transport's connections (all messages below), its conversations (`Attach`,
//! `Detach`, `Shutdown`; they answer with [`ConversationEvent`]s), and the writer thread.
//!
//! # Implementation notes
//! Each entry is in one of these states:
//! - **Unloaded**: on disk only. A join starts a `Conversation` (generation + 1) → Live.
//! - **Live**: an actor runs. Joins are forwarded as `Attach` with `do_send` (so they keep
//!   mailbox order) and counted in `attaches_sent`. An `IdleExpired` whose generation and
//!   attach count match → **Evicting**; a stale one (the conversation was rejoined, or a join
//!   is in flight) is ignored.
//! - **Evicting**: `Shutdown{Evicted}` sent; joins that arrive now wait in `waiting` and are
//!   replayed on a freshly loaded actor when the old one has flushed (`EvictDone`) → Live, or
//!   → Unloaded when nobody waited.
//! - **Deleting** (`deleting` flag, any state): joins and renames answer
//!   `Conversation not found`; the conversation is shut down (clients told), the delete is
//!   journaled, the directory removed, then the entry is dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::client::{Client, ConversationGone};
use crate::conversation::{
    Attach, Attached, Conversation, ConversationSetup, Detach, RuntimeConfig, Shutdown,
    ShutdownReason,
};
use crate::metrics::Metrics;
use crate::naming;
use crate::outbox::Outbox;
use crate::protocol::{ConversationInfo, ConversationMatch, RpcError, RpcResult};
use crate::store::{self, JournalRecord, Layout, RegistryWriter, StoreError, StoredConversation};

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
}

enum LoadState {
    /// Not running.
    Unloaded,
    /// Running.
    Live(Addr<Conversation>),
    /// Stopping after idling; joins wait here.
    Evicting(Vec<Attach>),
}

struct Entry {
    /// What is stored on disk.
    stored: StoredConversation,
    /// Position in registry order (key of `order`).
    order: u64,
    /// Whether and how it is loaded.
    state: LoadState,
    /// Bumped each time an actor is started; stale idle reports carry an older one.
    generation: u64,
    /// Attaches sent to the current actor.
    attaches_sent: u64,
    /// Live clients as last reported by the actor.
    client_count: Arc<AtomicUsize>,
    /// `user-request` entries in the display log.
    message_count: u64,
    /// A delete is in progress.
    deleting: bool,
}

/// The registry actor. Start it with [`ConversationRegistry::open`] then `Supervisor::start*`.
pub struct ConversationRegistry {
    /// Settings.
    config: RegistryConfig,
    /// The durable writer thread.
    writer: RegistryWriter,
    /// All conversations by id.
    entries: HashMap<Uuid, Entry>,
    /// Registry order: order key → id.
    order: BTreeMap<u64, Uuid>,
    /// Next order key.
    next_order: u64,
    /// Normalized name → ids with that name (more than one only in hand-edited files).
    names: HashMap<String, Vec<Uuid>>,
    /// Entries whose id is not a UUID: never served (ids touch paths), but written back.
    foreign: Vec<StoredConversation>,
    /// Records appended since the last fold.
    journal_len: usize,
    /// Round-robin index into `config.conversation_arbiters`.
    next_arbiter: usize,
    /// Set by [`ShutdownRegistry`]: no new work.
    stopping: bool,
    /// The last run crashed: stored message counts may trail the logs; recount them (once,
    /// in the background, so startup does not wait on one file read per conversation).
    recount_pending: bool,
}

impl ConversationRegistry {
    /// Loads the registry from disk (migrations, journal replay, ephemeral sweep, startup
    /// `default`) and starts its writer thread. Fails on a corrupt registry unless
    /// `config.repair`.
    pub fn open(config: RegistryConfig) -> Result<ConversationRegistry, StoreError> {
        let layout = config.layout.clone();
        for step in store::migrate(&layout)? {
            log::info!("migration: {step}");
        }
        let loaded = store::load_registry(&layout, config.repair)?;
        let mut needs_fold = loaded.needs_fold;
        // After a clean shutdown the stored message counts are exact; after a crash they may
        // trail, so each conversation's log tail is read once (one small read each).
        let clean = store::take_clean_marker(&layout)?;
        if !clean {
            log::info!("previous run did not shut down cleanly; recounting messages from log tails in the background");
        }
        let mut reg = ConversationRegistry {
            recount_pending: !clean,
            writer: RegistryWriter::start(layout.clone(), config.metrics.clone()),
            config,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_order: 0,
            names: HashMap::new(),
            foreign: Vec::new(),
            journal_len: 0,
            next_arbiter: 0,
            stopping: false,
        };
        let mut swept = 0;
        for stored in loaded.entries {
            let Ok(id) = Uuid::parse_str(&stored.conversation_id) else {
                log::warn!(
                    "registry entry {:?} has an id that is not a UUID; kept on disk but not served",
                    stored.conversation_id
                );
                reg.foreign.push(stored);
                continue;
            };
            if store::EPHEMERAL_PREFIXES
                .iter()
                .any(|p| stored.name.starts_with(p))
            {
                store::remove_conversation_dir(&layout, &id)?;
                swept += 1;
                needs_fold = true;
                continue;
            }
            reg.insert_entry(id, stored);
        }
        if swept > 0 {
            log::info!("swept {swept} ephemeral conversations left by crashed clients");
        }
        if reg.entries.is_empty() {
            let id = Uuid::new_v4();
            reg.insert_entry(id, new_stored(id, DEFAULT_CONVERSATION_NAME.to_string()));
            needs_fold = true;
            log::info!("empty registry: created conversation {DEFAULT_CONVERSATION_NAME:?} ({id})");
        }
        if needs_fold {
            store::fold(&layout, &reg.snapshot())?;
        }
        log::info!("registry: {} conversations", reg.entries.len());
        // The parse of a large registry is transient: give it back.
        crate::memory::trim();
        Ok(reg)
    }

    fn insert_entry(&mut self, id: Uuid, stored: StoredConversation) {
        let order = self.next_order;
        self.next_order += 1;
        self.order.insert(order, id);
        self.names
            .entry(naming::normalize(&stored.name))
            .or_default()
            .push(id);
        // Kept in the entry only (not twice); `snapshot` writes it back into the record.
        let mut stored = stored;
        let message_count = stored
            .extra
            .remove("messageCount")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        self.entries.insert(
            id,
            Entry {
                stored,
                order,
                state: LoadState::Unloaded,
                generation: 0,
                attaches_sent: 0,
                client_count: Arc::default(),
                message_count,
                deleting: false,
            },
        );
    }

    fn remove_entry(&mut self, id: &Uuid) {
        if let Some(entry) = self.entries.remove(id) {
            self.order.remove(&entry.order);
            self.unindex_name(id, &entry.stored.name);
        }
    }

    fn unindex_name(&mut self, id: &Uuid, name: &str) {
        let key = naming::normalize(name);
        if let Some(ids) = self.names.get_mut(&key) {
            ids.retain(|x| x != id);
            if ids.is_empty() {
                self.names.remove(&key);
            }
        }
    }

    fn snapshot(&self) -> Vec<StoredConversation> {
        self.order
            .values()
            .filter_map(|id| self.entries.get(id))
            .map(|e| {
                let mut stored = e.stored.clone();
                if e.message_count > 0 {
                    stored
                        .extra
                        .insert("messageCount".into(), e.message_count.into());
                }
                stored
            })
            .chain(self.foreign.iter().cloned())
            .collect()
    }

    fn info(&self, entry: &Entry, indexed: bool) -> ConversationInfo {
        ConversationInfo {
            conversation_id: entry.stored.conversation_id.clone(),
            name: entry.stored.name.clone(),
            client_count: entry.client_count.load(Ordering::Relaxed),
            created_at: entry.stored.created_at.clone(),
            message_count: entry.message_count,
            indexed_message_count: indexed.then_some(0),
        }
    }

    fn in_order(&self) -> impl Iterator<Item = &Entry> {
        self.order
            .values()
            .filter_map(|id| self.entries.get(id))
            .filter(|e| !e.deleting)
    }

    /// Looks up a client-supplied id: parsed as a UUID before anything else.
    fn lookup(&self, raw: &str) -> Option<Uuid> {
        let id = Uuid::parse_str(raw).ok()?;
        self.entries.get(&id).filter(|e| !e.deleting).map(|_| id)
    }

    /// The existing conversation (other than `except`) whose normalized name is `key`.
    fn name_owner(&self, key: &str, except: Option<Uuid>) -> Option<&Entry> {
        self.names
            .get(key)?
            .iter()
            .filter(|id| Some(**id) != except)
            .filter_map(|id| self.entries.get(id))
            .find(|e| !e.deleting)
    }

    /// Applies the naming rules: the name to store, or the collision error.
    fn resolve_name(
        &self,
        requested: &str,
        collision: &str,
        except: Option<Uuid>,
    ) -> RpcResult<String> {
        let Some(owner) = self.name_owner(&naming::normalize(requested), except) else {
            return Ok(requested.to_string());
        };
        match collision {
            "appendNumber" => {
                let except_id = except.map(|u| u.to_string());
                let others = self
                    .in_order()
                    .filter(|e| Some(&e.stored.conversation_id) != except_id.as_ref())
                    .map(|e| e.stored.name.as_str());
                let name = naming::append_number(requested, others);
                naming::validate_length(&name)?;
                match self.name_owner(&naming::normalize(&name), except) {
                    None => Ok(name),
                    Some(o) => Err(RpcError::NameExists(o.stored.name.clone())),
                }
            }
            _ => Err(RpcError::NameExists(owner.stored.name.clone())),
        }
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

    fn pick_arbiter(&mut self) -> Option<ArbiterHandle> {
        let arbiters = &self.config.conversation_arbiters;
        if arbiters.is_empty() {
            return None;
        }
        self.next_arbiter = (self.next_arbiter + 1) % arbiters.len();
        Some(arbiters[self.next_arbiter].clone())
    }

    /// Starts the conversation actor for `id` (Unloaded → Live).
    fn load(&mut self, id: Uuid, ctx: &mut Context<Self>) -> Addr<Conversation> {
        let arbiter = self.pick_arbiter();
        let registry = ctx.address();
        let entry = self.entries.get_mut(&id).expect("loading a known entry");
        entry.generation += 1;
        entry.attaches_sent = 0;
        // A fresh counter per generation: a stopping actor cannot write into its successor's.
        entry.client_count = Arc::default();
        let setup = ConversationSetup {
            id,
            name: entry.stored.name.clone(),
            generation: entry.generation,
            dir: self.config.layout.conversation_dir(&id),
            idle_timeout: self.config.idle_timeout,
            registry,
            metrics: self.config.metrics.clone(),
            runtime: self.config.runtime.clone(),
            client_count: entry.client_count.clone(),
        };
        let addr = match arbiter {
            Some(a) => Conversation::start_in_arbiter(&a, move |_| Conversation::new(setup)),
            None => Conversation::new(setup).start(),
        };
        entry.state = LoadState::Live(addr.clone());
        addr
    }

    /// Hands an `Attach` to the conversation, loading it first if needed.
    fn attach(&mut self, id: Uuid, attach: Attach, ctx: &mut Context<Self>) {
        let entry = self
            .entries
            .get_mut(&id)
            .expect("attaching to a known entry");
        match &mut entry.state {
            LoadState::Evicting(waiting) => waiting.push(attach),
            LoadState::Live(addr) => {
                entry.attaches_sent += 1;
                addr.do_send(attach);
            }
            LoadState::Unloaded => {
                let addr = self.load(id, ctx);
                let entry = self.entries.get_mut(&id).expect("just loaded");
                entry.attaches_sent += 1;
                addr.do_send(attach);
            }
        }
    }

    /// Creates an entry in memory and journals it. Answers with the journal acknowledgement.
    fn create_entry(&mut self, name: String) -> (Uuid, oneshot::Receiver<Result<(), String>>) {
        let id = Uuid::new_v4();
        let stored = new_stored(id, name);
        let ack = self.journal(vec![JournalRecord::Put {
            entry: stored.clone(),
        }]);
        self.insert_entry(id, stored);
        (id, ack)
    }
}

fn new_stored(id: Uuid, name: String) -> StoredConversation {
    StoredConversation {
        conversation_id: id.to_string(),
        name,
        created_at: crate::now_iso(),
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
            let layout = self.config.layout.clone();
            let ids: Vec<Uuid> = self.entries.keys().copied().collect();
            let work = tokio::task::spawn_blocking(move || {
                ids.into_iter()
                    .map(|id| {
                        (
                            id,
                            crate::displaylog::message_count_on_disk(&layout.conversation_dir(&id)),
                        )
                    })
                    .collect::<Vec<_>>()
            });
            ctx.spawn(async move { work.await.unwrap_or_default() }.into_actor(self).map(|counts, act, _| {
                let mut changed = 0;
                for (id, count) in counts {
                    // A loaded conversation reports its own, newer count.
                    if let Some(e) = act.entries.get_mut(&id).filter(|e| matches!(e.state, LoadState::Unloaded)) {
                        if e.message_count != count {
                            e.message_count = count;
                            changed += 1;
                        }
                    }
                }
                log::info!("recounted messages after an unclean shutdown ({changed} conversations changed)");
            }));
        }
    }
}

impl actix::Supervised for ConversationRegistry {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        // The same value is reused: entries and running conversations are still valid.
        log::warn!(
            "conversation registry restarting; keeping {} entries",
            self.entries.len()
        );
        self.stopping = false;
    }
}

/// `createConversation(name, {nameCollisionBehavior})`.
#[derive(Message)]
#[rtype(result = "RpcResult<ConversationInfo>")]
pub struct CreateConversation {
    /// Requested name (raw).
    pub name: String,
    /// `error` (default) or `appendNumber`.
    pub collision: Option<String>,
}

impl Handler<CreateConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<ConversationInfo>>;

    fn handle(&mut self, msg: CreateConversation, _ctx: &mut Self::Context) -> Self::Result {
        let prepared = (|| {
            if self.stopping {
                return Err(RpcError::ServerStopping);
            }
            naming::validate_name(&msg.name)?;
            let collision = msg.collision.as_deref().unwrap_or("error");
            if collision != "error" && collision != "appendNumber" {
                return Err(RpcError::UnknownCollisionBehavior(collision.to_string()));
            }
            self.resolve_name(&msg.name, collision, None)
        })();
        let name = match prepared {
            Ok(n) => n,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        let (id, ack) = self.create_entry(name);
        Box::pin(
            async move { storage_error(ack.await) }
                .into_actor(self)
                .map(move |res, act, _| match res {
                    Ok(()) => {
                        act.maybe_fold();
                        let entry = act
                            .entries
                            .get(&id)
                            .ok_or_else(|| RpcError::ConversationNotFound(id.to_string()))?;
                        log::info!("created conversation {id} ({:?})", entry.stored.name);
                        Ok(act.info(entry, false))
                    }
                    Err(e) => {
                        act.remove_entry(&id);
                        Err(e)
                    }
                }),
        )
    }
}

/// `listConversations(filter)`: case-insensitive untrimmed substring, registry order. Answers
/// the JSON array text, serialized straight from the entries (no copy of 100,000 names).
#[derive(Message)]
#[rtype(result = "String")]
pub struct ListConversations {
    /// Substring filter; `None` lists everything.
    pub filter: Option<String>,
}

impl Handler<ListConversations> for ConversationRegistry {
    type Result = MessageResult<ListConversations>;

    fn handle(&mut self, msg: ListConversations, _ctx: &mut Self::Context) -> Self::Result {
        let filter = msg.filter.map(|f| f.to_lowercase());
        let mut out = Vec::with_capacity(160 * self.entries.len().min(1 << 16) + 2);
        out.push(b'[');
        let listed = self.in_order().filter(|e| {
            filter
                .as_ref()
                .is_none_or(|f| e.stored.name.to_lowercase().contains(f.as_str()))
        });
        for (i, e) in listed.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let info = crate::protocol::ConversationInfoRef {
                conversation_id: &e.stored.conversation_id,
                name: &e.stored.name,
                client_count: e.client_count.load(Ordering::Relaxed),
                created_at: &e.stored.created_at,
                message_count: e.message_count,
                indexed_message_count: Some(0),
            };
            serde_json::to_writer(&mut out, &info).expect("info serializes");
        }
        out.push(b']');
        MessageResult(String::from_utf8(out).expect("serde_json writes UTF-8"))
    }
}

/// `findConversations(query, maxMatches)`: lexical scoring, best first.
#[derive(Message)]
#[rtype(result = "Vec<ConversationMatch>")]
pub struct FindConversations {
    /// The query (trimmed here).
    pub query: String,
    /// At most this many (default 10).
    pub max_matches: Option<u64>,
}

impl Handler<FindConversations> for ConversationRegistry {
    type Result = MessageResult<FindConversations>;

    fn handle(&mut self, msg: FindConversations, _ctx: &mut Self::Context) -> Self::Result {
        let query = naming::js_trim(&msg.query).to_lowercase();
        if query.is_empty() {
            return MessageResult(Vec::new());
        }
        let mut matches: Vec<ConversationMatch> = self
            .in_order()
            .filter_map(|e| {
                let score = naming::score(&query, &e.stored.name);
                (score > 0.0).then(|| ConversationMatch {
                    conversation: self.info(e, true),
                    score,
                })
            })
            .collect();
        // Stable sort keeps registry order on ties.
        matches.sort_by(|a, b| {
            b.score
                .partial_cmp(&a.score)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        matches.truncate(msg.max_matches.unwrap_or(10).min(usize::MAX as u64) as usize);
        MessageResult(matches)
    }
}

/// `renameConversation(id, newName, options)`.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct RenameConversation {
    /// Raw id from the client.
    pub id: String,
    /// New name (raw).
    pub new_name: String,
    /// `error` (default) or `appendNumber`.
    pub collision: Option<String>,
}

impl Handler<RenameConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<()>>;

    fn handle(&mut self, msg: RenameConversation, _ctx: &mut Self::Context) -> Self::Result {
        let prepared = (|| {
            if self.stopping {
                return Err(RpcError::ServerStopping);
            }
            naming::validate_name(&msg.new_name)?;
            let id = self
                .lookup(&msg.id)
                .ok_or_else(|| RpcError::ConversationNotFound(msg.id.clone()))?;
            let collision = msg.collision.as_deref().unwrap_or("error");
            if collision != "error" && collision != "appendNumber" {
                return Err(RpcError::UnknownCollisionBehavior(collision.to_string()));
            }
            let name = self.resolve_name(&msg.new_name, collision, Some(id))?;
            Ok((id, name))
        })();
        let (id, name) = match prepared {
            Ok(p) => p,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        let entry = self.entries.get_mut(&id).expect("looked up");
        let old = std::mem::replace(&mut entry.stored.name, name.clone());
        let record = JournalRecord::Put {
            entry: entry.stored.clone(),
        };
        self.unindex_name(&id, &old);
        self.names
            .entry(naming::normalize(&name))
            .or_default()
            .push(id);
        let ack = self.journal(vec![record]);
        Box::pin(
            async move { storage_error(ack.await) }
                .into_actor(self)
                .map(move |res, act, _| {
                    match &res {
                        Ok(()) => {
                            log::info!("renamed conversation {id} from {old:?} to {name:?}");
                            act.maybe_fold();
                        }
                        Err(_) => {
                            if let Some(entry) = act.entries.get_mut(&id) {
                                entry.stored.name = old.clone();
                            }
                            act.unindex_name(&id, &name);
                            act.names
                                .entry(naming::normalize(&old))
                                .or_default()
                                .push(id);
                        }
                    }
                    res
                }),
        )
    }
}

/// `deleteConversation(id)`.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct DeleteConversation {
    /// Raw id from the client.
    pub id: String,
}

impl Handler<DeleteConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<()>>;

    fn handle(&mut self, msg: DeleteConversation, _ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(fut::ready(Err(RpcError::ServerStopping)));
        }
        let Some(id) = self.lookup(&msg.id) else {
            return Box::pin(fut::ready(Err(RpcError::ConversationNotFound(msg.id))));
        };
        let entry = self.entries.get_mut(&id).expect("looked up");
        entry.deleting = true;
        let stopped = match std::mem::replace(&mut entry.state, LoadState::Unloaded) {
            LoadState::Live(addr) => {
                let (tx, rx) = oneshot::channel();
                addr.do_send(Shutdown {
                    reason: ShutdownReason::Deleted,
                    reply: tx,
                });
                Some(rx)
            }
            // Waiting joins are dropped: their joiners get `Conversation not found`.
            LoadState::Evicting(_) | LoadState::Unloaded => None,
        };
        entry.client_count = Arc::default();
        let writer = self.writer.clone();
        self.journal_len += 1;
        let work = async move {
            if let Some(rx) = stopped {
                let _ = rx.await;
            }
            storage_error(
                writer
                    .append(vec![JournalRecord::Delete {
                        conversation_id: id.to_string(),
                    }])
                    .await,
            )?;
            if let Ok(Err(e)) = writer.remove_dir(id).await {
                log::error!(
                    "conversation {id}: deleted from the registry but its directory remains: {e}"
                );
            }
            Ok(())
        };
        Box::pin(
            work.into_actor(self)
                .map(move |res: RpcResult<()>, act, _| {
                    match &res {
                        Ok(()) => {
                            act.remove_entry(&id);
                            act.maybe_fold();
                            log::info!("deleted conversation {id}");
                        }
                        Err(e) => {
                            log::error!("conversation {id}: delete failed: {e}");
                            if let Some(entry) = act.entries.get_mut(&id) {
                                entry.deleting = false;
                            }
                        }
                    }
                    res
                }),
        )
    }
}

/// A successful join, handed back to the connection.
pub struct Joined {
    /// The resolved conversation id.
    pub conversation_id: String,
    /// The `JoinConversationResult` to send.
    pub result: Value,
    /// The client's connection id.
    pub connection_id: String,
    /// The client actor (send it `Ready` after the result is queued).
    pub client: Addr<Client>,
    /// The conversation actor (dispatcher calls).
    pub conversation: Addr<Conversation>,
    /// Leaves the conversation when dropped, unless disarmed: a join whose socket vanished
    /// before the answer, or a socket that closes, never leaves a phantom client behind.
    pub lease: JoinLease,
}

/// Membership of one socket in one conversation; dropping it leaves (see [`Joined::lease`]).
pub struct JoinLease {
    registry: Addr<ConversationRegistry>,
    conversation_id: String,
    connection_id: String,
    armed: bool,
}

impl JoinLease {
    /// Gives up the automatic leave (explicit leave, or the conversation is already gone).
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for JoinLease {
    fn drop(&mut self) {
        if self.armed {
            self.registry.do_send(LeaveConversation {
                conversation_id: std::mem::take(&mut self.conversation_id),
                connection_id: std::mem::take(&mut self.connection_id),
            });
        }
    }
}

/// What the registry answers to a join or a leave: a future the *caller* awaits. The registry
/// decides (and forwards to the conversation) in its mailbox order, but does not wait for the
/// conversation's answer itself, so a join or a leave wakes the registry's thread once.
pub type Pending<T> = std::pin::Pin<Box<dyn std::future::Future<Output = RpcResult<T>> + Send>>;

fn ready<T: Send + 'static>(result: RpcResult<T>) -> Pending<T> {
    Box::pin(async move { result })
}

/// `joinConversation({conversationId?, filter?, clientType?})`.
#[derive(Message)]
#[rtype(result = "Pending<Joined>")]
pub struct JoinConversation {
    /// Raw id, or `None` for the default conversation.
    pub conversation_id: Option<String>,
    /// `filter` option.
    pub filter: bool,
    /// Conversations this socket has already joined (for the "Already joined" error).
    pub already_joined: Vec<String>,
    /// The socket's bounded queue.
    pub outbox: Outbox,
    /// The socket's connection.
    pub connection: Recipient<ConversationGone>,
}

impl ConversationRegistry {
    /// The default conversation: named `default`, else the first, else none (create one).
    fn default_conversation(&self) -> Option<Uuid> {
        self.in_order()
            .find(|e| e.stored.name.to_lowercase() == DEFAULT_CONVERSATION_NAME)
            .or_else(|| self.in_order().next())
            .and_then(|e| Uuid::parse_str(&e.stored.conversation_id).ok())
    }
}

impl Handler<JoinConversation> for ConversationRegistry {
    type Result = MessageResult<JoinConversation>;

    fn handle(&mut self, msg: JoinConversation, ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return MessageResult(ready(Err(RpcError::ServerStopping)));
        }
        let mut created = None;
        let id = match &msg.conversation_id {
            Some(raw) => match self.lookup(raw) {
                Some(id) => id,
                None => {
                    let raw = raw.clone();
                    return MessageResult(ready(Err(RpcError::ConversationNotFound(raw))));
                }
            },
            None => match self.default_conversation() {
                Some(id) => id,
                None => {
                    // Single-flighted by the mailbox: the next join already sees this entry.
                    let (id, ack) = self.create_entry(DEFAULT_CONVERSATION_NAME.to_string());
                    created = Some(ack);
                    id
                }
            },
        };
        let id_str = id.to_string();
        if msg.already_joined.contains(&id_str) {
            return MessageResult(ready(Err(RpcError::AlreadyJoined(id_str))));
        }
        let name = self.entries[&id].stored.name.clone();
        let registry = ctx.address();
        let (tx, rx) = oneshot::channel();
        self.attach(
            id,
            Attach {
                outbox: msg.outbox,
                filter: msg.filter,
                connection: msg.connection,
                reply: tx,
            },
            ctx,
        );
        let pending: Pending<Joined> = Box::pin(async move {
            if let Some(ack) = created {
                storage_error(ack.await)?;
            }
            let Attached {
                connection_id,
                client,
                conversation,
                pending_interactions,
                queue_snapshot,
            } = rx
                .await
                .map_err(|_| RpcError::ConversationNotFound(id_str.clone()))?;
            let mut result = json!({
                "connectionId": connection_id,
                "conversationId": id_str,
                "name": name,
                "pendingInteractions": pending_interactions,
            });
            if let Some(q) = queue_snapshot {
                result["queueSnapshot"] = q;
            }
            let lease = JoinLease {
                registry,
                conversation_id: id_str.clone(),
                connection_id: connection_id.clone(),
                armed: true,
            };
            Ok(Joined {
                conversation_id: id_str,
                result,
                connection_id,
                client,
                conversation,
                lease,
            })
        });
        MessageResult(pending)
    }
}

/// `leaveConversation(id)` for a client this socket joined.
#[derive(Message)]
#[rtype(result = "Pending<()>")]
pub struct LeaveConversation {
    /// The conversation.
    pub conversation_id: String,
    /// The client's connection id in it.
    pub connection_id: String,
}

impl Handler<LeaveConversation> for ConversationRegistry {
    type Result = MessageResult<LeaveConversation>;

    fn handle(&mut self, msg: LeaveConversation, _ctx: &mut Self::Context) -> Self::Result {
        let not_found = RpcError::ConversationNotFound(msg.conversation_id.clone());
        let addr = match self
            .lookup(&msg.conversation_id)
            .and_then(|id| self.entries.get(&id))
        {
            Some(Entry {
                state: LoadState::Live(addr),
                ..
            }) => addr.clone(),
            _ => return MessageResult(ready(Err(not_found))),
        };
        let (tx, rx) = oneshot::channel();
        addr.do_send(Detach {
            connection_id: msg.connection_id,
            reply: Some(tx),
        });
        let pending: Pending<()> = Box::pin(async move {
            match rx.await {
                Ok(true) => Ok(()),
                _ => Err(not_found),
            }
        });
        MessageResult(pending)
    }
}

/// Reports from conversations.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ConversationEvent {
    /// The idle timer fired with no clients.
    IdleExpired {
        /// Conversation.
        id: Uuid,
        /// Generation of the reporting actor.
        generation: u64,
        /// Attaches it had handled when the timer fired.
        attaches_seen: u64,
    },
    /// The message count changed.
    MessageCount {
        /// Conversation.
        id: Uuid,
        /// `user-request` entries now.
        count: u64,
    },
}

impl Handler<ConversationEvent> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: ConversationEvent, ctx: &mut Self::Context) {
        match msg {
            ConversationEvent::MessageCount { id, count } => {
                if let Some(e) = self.entries.get_mut(&id) {
                    // Persisted with the next fold (clean shutdown at the latest); after a
                    // crash it is recounted from the log.
                    e.message_count = count;
                }
            }
            ConversationEvent::IdleExpired {
                id,
                generation,
                attaches_seen,
            } => {
                let Some(entry) = self.entries.get_mut(&id) else {
                    return;
                };
                let current =
                    entry.generation == generation && entry.attaches_sent == attaches_seen;
                if !current || entry.deleting || self.stopping {
                    log::debug!("conversation {id}: stale idle report ignored");
                    return;
                }
                // Only a live conversation is evicted; an `Evicting` one keeps its waiting joins.
                if !matches!(entry.state, LoadState::Live(_)) {
                    return;
                }
                let LoadState::Live(addr) =
                    std::mem::replace(&mut entry.state, LoadState::Evicting(Vec::new()))
                else {
                    unreachable!("checked above");
                };
                entry.client_count = Arc::default();
                Metrics::inc(&self.config.metrics.evictions);
                log::info!(
                    "conversation {id}: evicting after {:?} idle",
                    self.config.idle_timeout
                );
                let (tx, rx) = oneshot::channel();
                addr.do_send(Shutdown {
                    reason: ShutdownReason::Evicted,
                    reply: tx,
                });
                ctx.spawn(
                    async move { rx.await.ok() }
                        .into_actor(self)
                        .map(move |_, act, ctx| {
                            act.evicted(id, ctx);
                        }),
                );
            }
        }
    }
}

impl ConversationRegistry {
    /// The evicted actor has flushed and stopped: reload for any join that waited.
    fn evicted(&mut self, id: Uuid, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let LoadState::Evicting(waiting) = std::mem::replace(&mut entry.state, LoadState::Unloaded)
        else {
            return;
        };
        if !waiting.is_empty() && !entry.deleting {
            log::info!(
                "conversation {id}: {} joins arrived during eviction; reloading",
                waiting.len()
            );
            for attach in waiting {
                self.attach(id, attach, ctx);
            }
        }
    }
}

/// Server stop: stop every conversation, fold the journal into `conversations.json`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShutdownRegistry;

impl Handler<ShutdownRegistry> for ConversationRegistry {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: ShutdownRegistry, _ctx: &mut Self::Context) -> Self::Result {
        self.stopping = true;
        let mut stops = Vec::new();
        for entry in self.entries.values_mut() {
            if let LoadState::Live(addr) = std::mem::replace(&mut entry.state, LoadState::Unloaded)
            {
                let (tx, rx) = oneshot::channel();
                addr.do_send(Shutdown {
                    reason: ShutdownReason::ServerStopping,
                    reply: tx,
                });
                stops.push(rx);
            }
        }
        let writer = self.writer.clone();
        let layout = self.config.layout.clone();
        let this = _ctx.address();
        self.journal_len = 0;
        Box::pin(async move {
            for rx in stops {
                let _ = rx.await;
            }
            // Conversations reported their final counts before stopping; fold after them.
            let snapshot = this.send(TakeSnapshot).await.unwrap_or_default();
            match writer.fold(snapshot).await {
                Ok(Ok(())) => {
                    if let Err(e) = store::write_clean_marker(&layout) {
                        log::error!("cannot record the clean shutdown: {e}");
                    }
                    log::info!("registry saved");
                }
                Ok(Err(e)) => log::error!(
                    "registry fold at shutdown failed (the journal keeps every change): {e}"
                ),
                Err(_) => log::error!("registry writer gone at shutdown"),
            }
        })
    }
}

/// The registry in order, as stored (used by the shutdown fold).
#[derive(Message)]
#[rtype(result = "Vec<StoredConversation>")]
struct TakeSnapshot;

impl Handler<TakeSnapshot> for ConversationRegistry {
    type Result = MessageResult<TakeSnapshot>;

    fn handle(&mut self, _msg: TakeSnapshot, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot())
    }
}

/// Whether a conversation exists (and is not being deleted), for the answer to an invoke on a
/// `dispatcher:<id>` channel the socket has not joined.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct ConversationExists {
    /// Raw id from the channel name.
    pub id: String,
}

impl Handler<ConversationExists> for ConversationRegistry {
    type Result = bool;

    fn handle(&mut self, msg: ConversationExists, _ctx: &mut Self::Context) -> bool {
        self.lookup(&msg.id)
            .and_then(|id| self.entries.get(&id))
            .is_some_and(|e| !e.deleting)
    }
}

/// Makes the registry panic (test seam, see [`crate::faults`]); the panic policy applies.
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
