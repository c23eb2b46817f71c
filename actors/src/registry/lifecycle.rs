//! How a conversation's actor comes and goes: opening the registry from disk (layout version,
//! migrations, journal replay, sweep, startup `default`), lazy load on the first join, idle
//! eviction guarded by generation and attach count, reload for joins that waited, the
//! background message recount after a crash, and the server's shutdown fold.
//!
//! Talks to: the conversations (`Shutdown`; they report [`ConversationEvent`]s) and the server
//! ([`ShutdownRegistry`]).

use std::sync::Arc;

use crate::ids::ConversationId;
use actix::prelude::*;
use tokio::sync::oneshot;

use super::startup::{EarlyRegistry, StartupTables};
use super::{
    new_stored, ConversationRegistry, LoadState, RegistryConfig, DEFAULT_CONVERSATION_NAME,
};
use crate::conversation::{
    Conversation, ConversationEvent, ConversationSetup, RegistryHandle, Shutdown, ShutdownReason,
};
use crate::metrics::Metrics;
use crate::storage::journal::RegistryWriter;
use crate::storage::registry_file::{EntrySink, Prefetched, StoredConversation};
use crate::storage::StoreError;
use crate::storage::{format, layout, migrate, registry_file, snapshot};

/// Removes the directories of conversations whose delete the journal holds but whose
/// directory is still there: a crash between the delete's journal record and the directory's
/// removal, or a removal that failed (the delete was answered with success either way: the
/// registry no longer has them). Done before the journal is folded away, which would forget
/// them; the node log was replayed before, so no record brings files back. A removal that
/// fails again is logged and the directory stays (never anything but a deleted conversation's
/// own directory: the id must be a UUID).
fn remove_leftover_directories(layout: &layout::Layout, deleted: &[String]) {
    for raw in deleted {
        let Some(id) = ConversationId::parse(raw) else {
            continue;
        };
        match layout::remove_conversation_dir(layout, &id) {
            Ok(false) => {}
            Ok(true) => log::warn!(
                "conversation {id}: deleted, but its directory was still on disk (a crash or a failed removal during the delete); removed it"
            ),
            Err(e) => log::error!(
                "conversation {id}: deleted, but its directory is still on disk and cannot be removed: {e}"
            ),
        }
    }
}

impl ConversationRegistry {
    /// Loads the registry from disk (layout version check and upgrade, leftover backup links,
    /// migrations, journal replay, ephemeral sweep, startup `default`) and starts its writer
    /// thread. Fails on a corrupt registry unless
    /// `config.repair`.
    pub fn open(config: RegistryConfig) -> Result<ConversationRegistry, StoreError> {
        let clustered = config.cluster.is_some();
        let early = super::read_registry_early(&config.layout, clustered);
        Self::open_prefetched(config, early)
    }

    /// [`open`](Self::open), with the registry file already read by
    /// [`read_registry_early`](super::read_registry_early) (with `clustered` as `config`'s),
    /// while the server's start did its disk work; used unless a layout upgrade or a
    /// migration changed the file since.
    pub fn open_prefetched(
        config: RegistryConfig,
        mut prefetch: Option<EarlyRegistry>,
    ) -> Result<ConversationRegistry, StoreError> {
        crate::memory::pin_allocator_thresholds();
        let layout = config.layout.clone();
        for step in format::open(&layout)? {
            log::info!("layout: {step}");
            prefetch = None;
        }
        match snapshot::sweep(&layout) {
            Ok(0) => {}
            Ok(n) => log::info!("removed {n} backup link directories left by a crash"),
            Err(e) => log::warn!("cannot remove leftover backup link directories: {e}"),
        }
        for step in migrate::migrate(&layout)? {
            log::info!("migration: {step}");
            prefetch = None;
        }
        // A new instance (no registry file nor journal, after migrations) has nothing to
        // recount and no previous run to blame.
        let journal = layout.journal_file().exists();
        let first_start = !layout.registry_file().exists() && !journal;
        let clustered = config.cluster.is_some();
        let (tables, deleted) = match prefetch {
            // Filled early: there was no journal to replay, nor is there now.
            Some(Prefetched::Sink(tables)) if !journal && tables.clustered() == clustered => {
                (tables, Vec::new())
            }
            prefetched => {
                let entries = match prefetched {
                    Some(Prefetched::Entries(entries)) => Some(entries),
                    _ => None,
                };
                let loaded =
                    crate::storage::registry_load::load_registry(&layout, config.repair, entries)?;
                let mut tables = StartupTables::new(clustered);
                tables.needs_fold = loaded.needs_fold;
                for stored in loaded.entries {
                    tables.entry(stored.into());
                }
                (tables, loaded.deleted)
            }
        };
        tables.log_left_out(&layout.registry_file());
        remove_leftover_directories(&layout, &deleted);
        for id in &tables.ephemeral {
            layout::remove_conversation_dir(&layout, id)?;
        }
        let swept = tables.ephemeral.len();
        let mut needs_fold = tables.needs_fold;
        // After a clean shutdown the stored message counts are exact; after a crash they may
        // trail, so each conversation's log tail is read once (one small read each).
        let clean = registry_file::take_clean_marker(&layout)? || first_start;
        if !clean {
            log::info!("previous run did not shut down cleanly; recounting messages from log tails in the background");
        }
        let mut reg = ConversationRegistry {
            recount_pending: !clean,
            writer: RegistryWriter::start(layout.clone(), config.metrics.clone()),
            config,
            entries: tables.entries,
            order: tables.order,
            next_order: tables.next_order,
            names: tables.names,
            foreign: tables.foreign,
            journal_len: 0,
            next_arbiter: 0,
            stopping: false,
            watchers: Default::default(),
            ownership: Default::default(),
            catch_up: Default::default(),
            shared_copy: Default::default(),
        };
        if swept > 0 {
            log::info!("swept {swept} ephemeral conversations left by crashed clients");
        }
        // In a cluster the `default` conversation is created in the shared registry, once
        // for all nodes (`start_shared_sync`).
        if reg.entries.is_empty() && reg.config.cluster.is_none() {
            let id = ConversationId::new_random();
            reg.insert_entry(id, new_stored(id, DEFAULT_CONVERSATION_NAME.to_string()));
            needs_fold = true;
            log::info!("empty registry: created conversation {DEFAULT_CONVERSATION_NAME:?} ({id})");
        }
        if needs_fold {
            registry_file::fold(&layout, &reg.snapshot())?;
        }
        log::info!("registry: {} conversations", reg.entries.len());
        if let Some(search) = &reg.config.runtime.search {
            search.sync(reg.entries.keys().copied().collect());
        }
        // The parse of a large registry is transient: give it back, off the start's path (the
        // trim walks every arena: ~0.5 ms at 10,000 conversations).
        crate::memory::trim_soon();
        Ok(reg)
    }

    /// After a crash the stored message counts may trail the display logs: reads each
    /// conversation's log tail on a blocking thread and takes the counts of the conversations
    /// still unloaded (a loaded one reports its own, newer count). Started once by
    /// `Actor::started`, so startup does not wait on one file read per conversation.
    pub(super) fn recount_message_counts(&mut self, ctx: &mut Context<Self>) {
        let layout = self.config.layout.clone();
        let ids: Vec<ConversationId> = self.entries.keys().copied().collect();
        let work = tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .map(|id| {
                    (
                        id,
                        crate::storage::display_log::message_count_on_disk(
                            &layout.conversation_dir(&id),
                        ),
                    )
                })
                .collect::<Vec<_>>()
        });
        let counted = async move { work.await.unwrap_or_default() }.into_actor(self);
        ctx.spawn(counted.map(|counts, act, _| {
            let mut changed = 0;
            for (id, count) in counts {
                // A loaded conversation reports its own, newer count.
                let unloaded = act
                    .entries
                    .get_mut(&id)
                    .filter(|e| matches!(e.state, LoadState::Unloaded));
                if let Some(e) = unloaded {
                    if e.message_count != count {
                        e.message_count = count;
                        changed += 1;
                    }
                }
            }
            log::info!(
                "recounted messages after an unclean shutdown ({changed} conversations changed)"
            );
        }));
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
    pub(super) fn load(
        &mut self,
        id: ConversationId,
        ctx: &mut Context<Self>,
    ) -> Addr<Conversation> {
        let arbiter = self.pick_arbiter();
        let registry = RegistryHandle::new(&ctx.address());
        let entry = self.entries.get_mut(&id).expect("loading a known entry");
        entry.generation += 1;
        entry.attaches_sent = 0;
        // A fresh counter per generation: a stopping actor cannot write into its successor's.
        let client_count = Arc::<std::sync::atomic::AtomicUsize>::default();
        entry.client_count = Some(client_count.clone());
        let setup = ConversationSetup {
            id,
            name: entry.name.to_string(),
            generation: entry.generation,
            dir: self.config.layout.conversation_dir(&id),
            idle_timeout: self.config.idle_timeout,
            registry,
            metrics: self.config.metrics.clone(),
            runtime: self.config.runtime.clone(),
            client_count,
            list_watched: self.watchers.active.clone(),
        };
        let addr = match arbiter {
            Some(a) => Conversation::start_in_arbiter(&a, move |_| Conversation::new(setup)),
            None => Conversation::new(setup).start(),
        };
        entry.state = LoadState::Live(addr.clone());
        self.config.directory.insert(id, addr.clone(), &entry.name);
        self.config.metrics.lifecycle_changed();
        addr
    }
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
                self.mark_updated(id, ctx);
                self.share_counts_soon(id, ctx);
            }
            ConversationEvent::ClientCount { id } => {
                self.mark_updated(id, ctx);
                self.share_counts_soon(id, ctx);
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
                if self.stop_live(id, ShutdownReason::Evicted, ctx) {
                    Metrics::inc(&self.config.metrics.evictions);
                    log::info!(
                        "conversation {id}: evicting after {:?} idle",
                        self.config.idle_timeout
                    );
                }
            }
        }
    }
}

impl ConversationRegistry {
    /// Stops `id`'s actor if it is live (Live → Evicting, joins that arrive now wait), for
    /// `reason`; [`evicted`](Self::evicted) follows once it has flushed. False when it was not
    /// live.
    pub(super) fn stop_live(
        &mut self,
        id: ConversationId,
        reason: ShutdownReason,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Some(entry) = self.entries.get_mut(&id) else {
            return false;
        };
        if !matches!(entry.state, LoadState::Live(_)) {
            return false;
        }
        let LoadState::Live(addr) =
            std::mem::replace(&mut entry.state, LoadState::Evicting(Vec::new()))
        else {
            unreachable!("checked above");
        };
        self.config.directory.remove(&id);
        entry.client_count = None;
        self.config.metrics.lifecycle_changed();
        let (tx, rx) = oneshot::channel();
        addr.do_send(Shutdown { reason, reply: tx });
        ctx.spawn(
            async move { rx.await.ok() }
                .into_actor(self)
                .map(move |_, act, ctx| act.evicted(id, ctx)),
        );
        true
    }

    /// The evicted actor has flushed and stopped: reload for any join that waited.
    pub(super) fn evicted(&mut self, id: ConversationId, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let LoadState::Evicting(waiting) = std::mem::replace(&mut entry.state, LoadState::Unloaded)
        else {
            return;
        };
        self.config.metrics.lifecycle_changed();
        let deleting = entry.deleting;
        if waiting.is_empty() || deleting {
            self.release_lease(id);
        }
        if !waiting.is_empty() && !deleting {
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
        self.config.directory.clear();
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
        self.config.metrics.lifecycle_changed();
        let writer = self.writer.clone();
        let layout = self.config.layout.clone();
        let this = _ctx.address();
        self.journal_len = 0;
        let leases = self.take_leases();
        Box::pin(async move {
            for rx in stops {
                let _ = rx.await;
            }
            // Everything is flushed: another node may take these over at once.
            leases.await;
            // Conversations reported their final counts before stopping; fold after them.
            let snapshot = this.send(TakeSnapshot).await.unwrap_or_default();
            match writer.fold(snapshot).await {
                Ok(Ok(())) => {
                    if let Err(e) = registry_file::write_clean_marker(&layout) {
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
