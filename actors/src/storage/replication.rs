//! What the [`LogWriter`](super::log_writer::LogWriter) asks of a replica of the conversation
//! files: the [`Replicator`] trait. On a single node there is none; with `serve --cluster` the
//! cluster's log stream implements it (`LogReplicator`, in `cluster/log_stream.rs`), so every
//! write that reaches the disk also reaches the stream, and a write barrier waits for both.
//!
//! Storage defines the trait and the cluster implements it, so storage knows nothing of NATS.
//!
//! Who talks to it: the log writer only (one hook per append or replace, one per barrier, and
//! its backpressure); `serve` hands the writer its replicator at start-up.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;

/// What a replicated write does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Bytes added at the end.
    Append,
    /// The whole content.
    Replace,
}

/// A second home for the durable writes of conversation files. Calls come from the log
/// writer's producers (the conversation actors), in write order; an implementation must not
/// block them (it queues, and reports its queue through [`Replicator::queued_bytes`]).
pub trait Replicator: Send + Sync + 'static {
    /// Queues the write of `bytes` to `path` (`op`: appended or replacing the file). Files the
    /// replica does not keep are ignored.
    fn record(&self, path: &Path, op: FileOp, bytes: &[u8]);

    /// Bytes queued and not yet replicated: they count toward the log writer's backpressure
    /// (a slow replica pauses producers as a slow disk does).
    fn queued_bytes(&self) -> usize;

    /// Resolves once fewer than `limit` bytes wait.
    fn wait_below(&self, limit: usize) -> BoxFuture<'static, ()>;

    /// Resolves once everything recorded so far for the files of `paths` is replicated; `Err`
    /// (a text that may reach clients) when some of it was not. Called when the barrier is
    /// queued, so it covers exactly the writes queued before it.
    fn barrier(&self, paths: &[Arc<Path>]) -> BoxFuture<'static, Result<(), String>>;
}
