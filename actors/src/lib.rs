//! Roundtable's actor system, storage and protocol types. No HTTP here: the transport in the
//! `roundtable` crate decodes frames and talks to these actors with messages.
//!
//! # Layout
//! - [`registry`]: the [`ConversationRegistry`](registry::ConversationRegistry) actor: every
//!   create / rename / delete / list / find (`registry/catalog.rs`), join / leave
//!   (`registry/membership.rs`), lazy load, idle eviction and shutdown
//!   (`registry/lifecycle.rs`).
//! - [`naming`]: name length, uniqueness key, `appendNumber`, `findConversations` scoring
//!   (the registry's rules, and the cluster's name keys).
//! - [`conversation`]: the [`Conversation`](conversation::Conversation) actor, one per loaded
//!   conversation, one file per concern (start, stop and timers in `mod.rs`, membership,
//!   routing, write barriers, the queue, interactions, the `dispatcher:<id>` channel, `@`
//!   commands ([`conversation::commands`]), agent turns, chat history) over plain state
//!   machines with no actix (`request_queue.rs`, `outbound_order.rs`, `answer_stream.rs`,
//!   `grammar.rs`) that import none of them.
//! - [`client`]: the [`Client`](client::Client) actor, one per joined client: its `clientio`
//!   channel, ready gate and bounded outbound queue ([`outbox`]).
//! - [`agent`]: chat messages, the `Provider` trait, the agent turn, built-in tools (one file
//!   each) and the built-in provider.
//! - [`storage`]: everything on disk: instance layout, migrations, instance lock, durable
//!   writes, the registry file and its journal, display logs, request journals, and the
//!   group-commit writer: each of the two writers (the log writer, the registry writer) runs
//!   one on its own thread.
//! - [`protocol`]: envelopes, agent-rpc messages, argument rules, exact error texts, frame
//!   splicing and WebSocket message reassembly.
//! - [`ids`]: [`ConnectionId`](ids::ConnectionId), typed from the join onwards.
//! - [`clock`]: the one `now_iso` / `now_millis` every timestamp comes from.
//! - [`metrics`]: counters read by `/health` and `/metrics`.
//! - [`cluster`]: `serve --cluster` (docs/cluster.md): the NATS connection, the registry in a
//!   JetStream key-value bucket, ownership leases, conversation files mirrored into a stream
//!   (and rebuilt from it), the node list and cross-node content search.
//! - [`memory`]: returning freed heap to the OS after large transient allocations.
//! - [`redact`]: credentials out of URLs before they are shown or logged.
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
pub mod cluster;
pub mod conversation;
pub mod ids;
pub mod memory;
pub mod metrics;
pub mod naming;
pub mod outbox;
pub mod protocol;
pub mod redact;
pub mod registry;
pub mod search;
pub mod storage;

/// The log target of security events: refused upgrades, refused origins, wrong tokens,
/// refused backups, log filter changes. The server's logger writes records of this target at
/// `info` and above whatever the run-time filter (`@system trace off` cannot hide an attack).
pub const SECURITY_LOG_TARGET: &str = "roundtable::security";
