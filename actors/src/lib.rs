//! Roundtable's actor system, storage and protocol types. No HTTP here: the transport in the
//! `roundtable` crate decodes frames and talks to these actors with messages.
//!
//! # Layout
//! - [`protocol`]: envelopes, agent-rpc messages, argument rules, exact error texts, frame
//!   splicing and WebSocket message reassembly.
//! - [`naming`]: name length, uniqueness key, `appendNumber`, `findConversations` scoring.
//! - [`storage`]: everything on disk: instance layout, migrations, instance lock, durable
//!   writes, the registry file and its journal, display logs, request journals, and the one
//!   group-commit writer thread both writers run on.
//! - [`registry`]: the [`ConversationRegistry`](registry::ConversationRegistry) actor: every
//!   create / rename / delete / join / leave, lazy load and idle eviction.
//! - [`conversation`]: the [`Conversation`](conversation::Conversation) actor, one per loaded
//!   conversation, one file per concern: membership and timers (`mod.rs`), routing, write
//!   barriers, the queue, interactions, the `dispatcher:<id>` channel, `@` commands
//!   ([`conversation::commands`]), agent turns, chat history.
//! - [`client`]: the [`Client`](client::Client) actor, one per joined client: its `clientio`
//!   channel, ready gate and bounded outbound queue.
//! - [`outbox`]: the bounded per-socket outbound queue.
//! - [`ids`]: [`ConnectionId`](ids::ConnectionId), typed from the join onwards.
//! - [`clock`]: the one `now_iso` / `now_millis` every timestamp comes from.
//! - [`metrics`]: counters read by `/health` and `/metrics`.
//! - [`memory`]: returning freed heap to the OS after large transient allocations.
//!
//! # Actor tree
//! ```text
//! ConversationRegistry (one, own arbiter, supervised)
//!  └─ Conversation (one per loaded conversation, spread over one arbiter per core)
//!      └─ Client (one per joined client; holds an Outbox toward the socket)
//! ```

pub mod agent;
pub mod client;
pub mod clock;
pub mod conversation;
pub mod ids;
pub mod memory;
pub mod metrics;
pub mod naming;
pub mod outbox;
pub mod protocol;
pub mod registry;
pub mod storage;

pub use storage::display_log as displaylog; // shim: issue-10 merge
pub use storage::faults; // shim: issue-10 merge
pub use storage::log_writer as logwriter; // shim: issue-10 merge
pub use storage::requests; // shim: issue-10 merge

/// The storage items by their paths before they moved into [`storage`].
pub mod store {
    // shim: issue-10 merge
    pub use crate::storage::durable::{
        create_dir_durable, fsync_dir, private_dir_builder, private_file_options, warn_if_shared,
        write_atomic,
    };
    pub use crate::storage::journal::{JournalRecord, RegistryWriter};
    pub use crate::storage::layout::{remove_conversation_dir, Layout, EPHEMERAL_PREFIXES};
    pub use crate::storage::lock::InstanceLock;
    pub use crate::storage::migrate::migrate;
    pub use crate::storage::registry_file::{
        fold, load_registry, registry_json, take_clean_marker, write_clean_marker, LoadedRegistry,
        StoredConversation,
    };
    pub use crate::storage::StoreError;
}

pub use conversation::commands; // shim: issue-10 merge

/// Moved under [`protocol`]; kept at the old path until the callers are rewired.
pub use protocol::frames; // shim: issue-10 merge

/// Moved to [`clock`]; kept at the old path until the callers are rewired.
pub use clock::{now_iso, now_millis}; // shim: issue-10 merge
