//! Process-wide counters for `/health` and `/metrics`. Written by the transport (sockets,
//! frames), the client actors (slow-consumer closes) and the registry (evictions); read by the
//! HTTP handlers. Plain atomics: counting never waits on an actor.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

/// The counters. One instance per server, shared through an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// WebSocket connections open right now.
    pub sockets: AtomicI64,
    /// Client actors alive right now (one per socket per joined conversation).
    pub joined_clients: AtomicI64,
    /// Conversation actors alive right now.
    pub loaded_conversations: AtomicI64,
    /// Application messages received.
    pub frames_in: AtomicU64,
    /// Application messages queued for sending.
    pub frames_out: AtomicU64,
    /// Frames dropped because they were not valid envelopes.
    pub frames_dropped: AtomicU64,
    /// Clients closed because their outbound queue was full.
    pub slow_client_closes: AtomicU64,
    /// Conversations unloaded after idling.
    pub evictions: AtomicU64,
    /// invokeError answers per method. Touched only on the error path.
    rpc_errors: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    /// Counts one invokeError answer for `method`.
    pub fn rpc_error(&self, method: &str) {
        let mut map = self.rpc_errors.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(method.to_string()).or_default() += 1;
    }

    /// invokeError counts per method.
    pub fn rpc_errors(&self) -> BTreeMap<String, u64> {
        self.rpc_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Adds one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Reads a gauge.
    pub fn gauge(g: &AtomicI64) -> i64 {
        g.load(Ordering::Relaxed)
    }

    /// Moves a gauge by `delta`.
    pub fn add(g: &AtomicI64, delta: i64) {
        g.fetch_add(delta, Ordering::Relaxed);
    }
}
