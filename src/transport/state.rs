//! [`AppState`]: what every request handler and connection shares (settings, the registry,
//! counters, the stop signals, the socket budget). It lives with the transport, which the
//! server's routes stand on, so the transport never needs the server.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::protocol::frames::InboundBudget;
use roundtable_actors::registry::{ConversationRegistry, LiveDirectory};
use roundtable_actors::storage::log_writer::LogWriter;
use tokio::sync::watch;

use crate::config::ServerConfig;

/// Shared by every request handler and connection.
pub struct AppState {
    /// Settings.
    pub config: ServerConfig,
    /// The registry actor.
    pub registry: Addr<ConversationRegistry>,
    /// The registry's loaded conversations: a join of one goes straight to its actor.
    pub directory: Arc<LiveDirectory>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Process start, for `/health` uptime.
    pub started: Instant,
    /// The port actually bound (answers `lookupPort`).
    pub port: u16,
    /// Set to true to stop the server gracefully (the `shutdown` and `restart` RPCs, SIGINT,
    /// SIGTERM).
    pub stop: watch::Sender<bool>,
    /// Set (before `stop`) by the `restart` RPC: sockets close with 1012 and the process
    /// starts again ([`restart`](crate::server::restart)).
    pub restarting: std::sync::atomic::AtomicBool,
    /// Becomes true when connections must close with 1001.
    pub closing: watch::Receiver<bool>,
    /// Sequence for connection ids in logs.
    pub next_socket: std::sync::atomic::AtomicU64,
    /// The conversations' append writer (its queue length for `/metrics`).
    pub log_writer: LogWriter,
    /// Bytes of fragmented messages in reassembly, over every connection.
    pub inbound: Arc<InboundBudget>,
    /// `serve --cluster`: the NATS connection, for `/health` and `/metrics`.
    pub cluster: Option<Cluster>,
    /// `serve --cluster`: the relay links toward other nodes and from them.
    pub relay_links: super::RelayLinks,
    /// How the descriptors are shared: the WebSocket cap the upgrade route enforces.
    pub descriptors: super::DescriptorBudget,
}
