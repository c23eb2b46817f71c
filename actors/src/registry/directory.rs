//! The live directory: the address and name of every loaded conversation, so a connection
//! can join (and leave) a loaded conversation without the registry actor's round trip.
//!
//! Written only by the registry, in its mailbox order: an entry appears when an actor starts
//! (Unloaded → Live), its name changes with a rename, and it goes when the actor is told to
//! stop (eviction, delete, move, server stop). Read by the transport's connections
//! (`src/transport/agent_server.rs`) for a join that names a conversation by id.
//!
//! An entry is a *hint*, never a decision: the conversation's own mailbox orders a direct
//! join against its eviction or delete. A conversation refuses a direct `Attach` once it has
//! reported idleness (the registry did not count the join and may be evicting) or once it is
//! stopping; a stopped actor drops it. Either way the joiner's reply channel closes and it
//! asks the registry, which decides as before. So a stale entry costs one extra hop, never a
//! join into a stopping conversation. Joins, leaves, evictions and deletes stay ordered
//! messages; the lock only guards this map of hints for the instants of a lookup or an
//! update.
//!
//! Bound: one entry per running conversation actor (the registry removes it when it stops the
//! actor), so the map never outgrows the loaded conversations. In a cluster the directory
//! stays empty: ownership and read-your-writes are decided in the registry's mailbox there.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use actix::Addr;

use crate::conversation::Conversation;
use crate::ids::ConversationId;

/// A loaded conversation, as a connection needs it for a direct join.
#[derive(Clone)]
pub struct LiveConversation {
    /// The running actor (it may be stopping: it then refuses the join).
    pub conversation: Addr<Conversation>,
    /// The conversation's name, for the join result (kept current by renames).
    pub name: Arc<str>,
}

/// The registry's map of loaded conversations, shared with the connections (see the module
/// docs: hints, not decisions).
#[derive(Default)]
pub struct LiveDirectory {
    /// `false` in a cluster: nothing is ever entered (so the map stays empty and every join
    /// asks the registry).
    enabled: bool,
    /// Loaded conversations by id.
    live: RwLock<HashMap<ConversationId, LiveConversation>>,
}

impl LiveDirectory {
    /// A directory the registry fills (a single node).
    pub fn new() -> LiveDirectory {
        LiveDirectory {
            enabled: true,
            live: RwLock::default(),
        }
    }

    /// A directory that stays empty (a cluster node).
    pub fn disabled() -> LiveDirectory {
        LiveDirectory::default()
    }

    /// The loaded conversation `id`, if the registry has it running.
    pub fn get(&self, id: &ConversationId) -> Option<LiveConversation> {
        self.read().get(id).cloned()
    }

    /// Conversations entered right now.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether none is entered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An actor for `id` started (registry only).
    pub(super) fn insert(&self, id: ConversationId, conversation: Addr<Conversation>, name: &str) {
        if self.enabled {
            let name = name.into();
            self.write()
                .insert(id, LiveConversation { conversation, name });
        }
    }

    /// `id` was renamed (registry only; no-op when it is not loaded).
    pub(super) fn rename(&self, id: &ConversationId, name: &str) {
        if let Some(entry) = self.write().get_mut(id) {
            entry.name = name.into();
        }
    }

    /// `id`'s actor is being stopped (registry only).
    pub(super) fn remove(&self, id: &ConversationId) {
        self.write().remove(id);
    }

    /// Every actor is being stopped (registry only: server stop).
    pub(super) fn clear(&self) {
        self.write().clear();
    }

    /// The map for reading; a panic elsewhere while it was held leaves hints that are still
    /// only hints, so the poison is ignored.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ConversationId, LiveConversation>> {
        self.live.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The map for writing (see [`Self::read`]).
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ConversationId, LiveConversation>> {
        self.live.write().unwrap_or_else(|e| e.into_inner())
    }
}
