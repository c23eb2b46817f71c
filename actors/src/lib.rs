//! Roundtable's actor system, storage and protocol types. No HTTP here: the transport in the
//! `roundtable` crate decodes frames and talks to these actors with messages.
//!
//! # Layout
//! - [`protocol`]: envelopes, agent-rpc messages, argument rules, exact error texts.
//! - [`store`]: instance layout, migrations, instance lock, registry file + journal writer.
//! - [`registry`]: the [`ConversationRegistry`](registry::ConversationRegistry) actor: every
//!   create / rename / delete / join / leave, lazy load and idle eviction;
//!   [`registry::naming`]: name length, uniqueness key, `appendNumber`, `findConversations`
//!   scoring.
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
pub mod outbox;
pub mod protocol;
pub mod registry;
pub mod requests;
pub mod store;

// shim: issue-10 merge
pub use registry::naming;

/// Now as ISO-8601 UTC with milliseconds, like JavaScript's `new Date().toISOString()`.
pub fn now_iso() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    /// `new Date().toISOString()`'s shape: `2026-12-01T04:30:00.123Z`.
    #[test]
    fn now_iso_is_javascripts_format() {
        let now = super::now_iso();
        assert_eq!(now.len(), 24, "{now}");
        assert_eq!(
            (&now[4..5], &now[10..11], &now[19..20], &now[23..]),
            ("-", "T", ".", "Z")
        );
        assert!(now[20..23].bytes().all(|b| b.is_ascii_digit()), "{now}");
    }
}
