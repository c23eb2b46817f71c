//! Roundtable's actor system, storage and protocol types. No HTTP here: the transport in the
//! `roundtable` crate decodes frames and talks to these actors with messages.
//!
//! # Layout
//! - [`protocol`]: envelopes, agent-rpc messages, argument rules, exact error texts.
//! - [`naming`]: name length, uniqueness key, `appendNumber`, `findConversations` scoring.
//! - [`store`]: instance layout, migrations, instance lock, registry file + journal writer.
//! - [`registry`]: the [`ConversationRegistry`](registry::ConversationRegistry) actor: every
//!   create / rename / delete / join / leave, lazy load and idle eviction.
//! - [`conversation`]: the [`Conversation`](conversation::Conversation) actor, one per loaded
//!   conversation: its clients, connection ids, idle timer.
//! - [`client`]: the [`Client`](client::Client) actor, one per joined client: its `clientio`
//!   channel, ready gate and bounded outbound queue.
//! - [`outbox`]: the bounded per-socket outbound queue.
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
pub mod commands;
pub mod conversation;
pub mod displaylog;
pub mod faults;
pub mod frames;
pub mod logwriter;
pub mod memory;
pub mod metrics;
pub mod naming;
pub mod outbox;
pub mod protocol;
pub mod registry;
pub mod requests;
pub mod store;

/// Now as ISO-8601 UTC with milliseconds, like JavaScript's `new Date().toISOString()`.
pub fn now_iso() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt).expect("timestamp formats")
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
