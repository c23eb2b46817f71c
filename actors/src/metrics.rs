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
    /// WebSocket upgrades answered 503 because [`Metrics::sockets`] was at the cap
    /// (`--max-sockets`, or what the descriptor limit allows).
    pub sockets_refused: AtomicU64,
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
    /// Joins a conversation took straight from a connection that found it in the live
    /// directory, without the registry's round trip.
    pub direct_joins: AtomicU64,
    /// invokeError answers per method name. Keys are bounded: a method the server does not
    /// know is counted as [`OTHER_METHOD`] (a client cannot grow this map). Touched only on the
    /// error path.
    rpc_errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Why storage writes fail right now (`None`: they do not). Set by the writer threads on a
    /// failed write, fsync or rename, cleared by their next success; `/health` answers 503 with
    /// it while it is set, and submits are refused with its client text.
    storage_failure: Mutex<Option<StorageFailure>>,
    /// Storage writes (appends, fsyncs, whole-file writes) that failed.
    pub storage_errors: AtomicU64,
    /// Writer threads (log writer, registry writer) that have ended. Each must live as long as
    /// the server, so any count here makes `/health` answer 503.
    pub dead_writers: AtomicU64,
    /// Times a conversation paused because the log writer's queue was over its bound.
    pub writer_backpressure: AtomicU64,
    /// fsyncs the log writer made: one per batch into the node log (or, without it, one per
    /// touched file per batch), plus one per checkpoint flush and per file closed or replaced.
    pub log_fsyncs: AtomicU64,
    /// Node log checkpoints done (covered files fsynced, their segments removed).
    pub wal_checkpoints: AtomicU64,
    /// Node log syncs (a batch's write and fdatasync) that took longer than
    /// [`SLOW_SYNC`](crate::storage::node_log::SLOW_SYNC): every acknowledgement on the node
    /// waited for each of them.
    pub log_slow_syncs: AtomicU64,
    /// Files the log writer created ahead of their first write, in its idle moments (a new
    /// conversation's files: its first turn then allocates no inode).
    pub prepared_files: AtomicU64,
    /// Bytes in the node log's segments right now (what a crash would replay); bounded by
    /// about 4 × `--wal-segment-bytes`.
    pub wal_bytes: AtomicI64,
    /// Write barriers the log writer confirmed; barriers ÷ fsyncs is what group commit buys.
    pub log_barriers: AtomicU64,
    /// Bumped each time a conversation actor starts or stops and each time the registry
    /// changes a conversation's load state (loaded, evicting, unloaded). Nothing in the server
    /// waits on it: it lets a watcher (the actor-level tests) await a lifecycle change instead
    /// of polling the counts. Cheap when nobody watches (a lock and a version bump).
    pub lifecycle: tokio::sync::watch::Sender<u64>,
    /// Documents added to the search index (live and by scans).
    pub search_documents: AtomicU64,
    /// Content searches answered.
    pub search_queries: AtomicU64,
    /// Search index reads or writes that failed.
    pub search_failures: AtomicU64,
    /// Times a conversation's documents went to a scan because the live queue was full.
    pub search_overflows: AtomicU64,
    /// Conversations waiting for the search writer to scan their logs (a rebuild shows here
    /// until it reaches 0).
    pub search_pending_scans: AtomicI64,
}

/// A failed storage write, told two ways: `/health` and the log are the operator's and name
/// the file's path; what reaches clients (a refused submit, `lastError`, `Storage error: …`)
/// names the file by its role (`append to the chat history: No space left on device …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageFailure {
    /// With the path, for `/health` and the log.
    pub operator: String,
    /// Without any path, for clients.
    pub client: String,
}

/// The `rpc_errors` label of every method name the server does not implement.
pub const OTHER_METHOD: &str = "other";

impl Metrics {
    /// Announces a lifecycle change to whoever watches [`Metrics::lifecycle`].
    pub fn lifecycle_changed(&self) {
        self.lifecycle.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Counts one invokeError answer for `method` (a known name, or [`OTHER_METHOD`]).
    pub fn rpc_error(&self, method: &str) {
        let label = crate::protocol::known_method(method).unwrap_or(OTHER_METHOD);
        let mut map = self.rpc_errors.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(label).or_default() += 1;
    }

    /// Records a failed storage write: `/health` turns 503 with its operator text until
    /// [`storage_ok`].
    ///
    /// [`storage_ok`]: Metrics::storage_ok
    pub fn storage_failed(&self, failure: StorageFailure) {
        Metrics::inc(&self.storage_errors);
        *self
            .storage_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(failure);
    }

    /// Records a successful storage write: clears a failure, logging the recovery once.
    pub fn storage_ok(&self) {
        let mut failure = self
            .storage_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(cause) = failure.take() {
            log::info!(
                "storage writes succeed again (they failed with: {})",
                cause.operator
            );
        }
    }

    /// Why storage writes fail right now, if they do (both texts).
    pub fn storage_failure(&self) -> Option<StorageFailure> {
        self.storage_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// invokeError counts per method.
    pub fn rpc_errors(&self) -> BTreeMap<&'static str, u64> {
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

    /// Sets a gauge.
    pub fn set(g: &AtomicI64, value: i64) {
        g.store(value, Ordering::Relaxed);
    }

    /// Moves a gauge by `delta`.
    pub fn add(g: &AtomicI64, delta: i64) {
        g.fetch_add(delta, Ordering::Relaxed);
    }
}
