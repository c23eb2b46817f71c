//! The append writer shared by every conversation: one [`GroupCommit`] thread that appends
//! lines to conversation files (display logs, chat histories, request journals) and makes each
//! batch durable with one write and one fsync of the [node log](super::node_log) (group
//! commit), however many files the batch touched; the files themselves are fsynced at the
//! log's checkpoints. Without the node log (`--no-wal`, and in unit tests that start it with
//! [`LogWriter::start`]) it fsyncs each touched file once per batch instead. Conversations never block on disk: they hand
//! over bytes and go on. What must be durable before it is acknowledged waits on
//! [`LogWriter::sync`], which resolves after the batch that holds it has been fsynced, with the
//! first error any earlier append to the named files met.
//!
//! Who talks to it: [`Conversation`](crate::conversation::Conversation) actors (appends, syncs,
//! `written` before reading back what they no longer hold in memory, `close` on eviction and
//! shutdown, `retire` on delete, `replace` for `@compact`), and a backup
//! [`snapshot`](super::snapshot) (`hold`). It talks to a [`Replicator`] when it has one
//! (`serve --cluster`): every append and replace is handed to it too, barriers and replaces
//! also wait for it, and its queue counts toward backpressure.
//!
//! This file holds the handle, the jobs and the writer's file handling; `batch.rs` is the
//! thread's batch (commit, answers, idle duties, lingering), `fallback.rs` what it does when
//! the node log or the disk fails, `prepare.rs` the files it makes ahead of their first write.
//!
//! # Guarantees
//! - Appends to one file keep their order, and every job is done in the order it was queued, so
//!   a `sync` or `close` covers every append queued before it.
//! - A failed append is cut back off the file (nothing half-written stays behind a later good
//!   line), the error is remembered for that file until the next `sync` naming it, and
//!   `/health` reports it ([`Metrics::storage_failed`]) until a write succeeds again. While
//!   writes fail the thread probes the disk every [`PROBE_INTERVAL`] so health recovers without
//!   waiting for traffic.
//! - After `retire(dir)` (delete), nothing is ever written under `dir` again: later appends
//!   there are dropped with an error in the log instead of recreating the directory.
//! - Errors answered to a barrier or a replace name the file by its [role](super::role), never
//!   its path (they reach clients); the log and `/health` name the path.
//!
//! # Bounds
//! - Queued bytes (the [`GroupCommit`] queue's weight): a producer sees
//!   [`LogWriter::backlogged`] once more than [`QUEUE_HIGH_WATER`] bytes wait, and pauses
//!   (conversations use `ctx.wait`, which holds their mailbox and turn without blocking the
//!   arbiter thread) until the queue drains below [`QUEUE_LOW_WATER`]. One handler can
//!   overshoot by what it appends itself, which the frame size bound limits.
//! - Open files: at most [`MAX_OPEN_FILES`] append handles (one per file of a loaded
//!   conversation, closed at eviction, delete and shutdown); past it the least recently
//!   written one is closed (fsynced first if this batch wrote it) and reopened when next
//!   written. Sockets and files share the process's open-file limit: without the cap, 1,900
//!   busy conversations × 3 files beside 19,000 sockets ran the server out of descriptors.
//! - Retired directories remembered: [`RETIRED_MEMORY`] (the actor that wrote there has stopped
//!   before it retires, so this only guards against a stray late job).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::durable::{create_dir_deferred, create_dir_durable, private_file_options, write_atomic};
use super::faults;
use super::group_commit::GroupCommit;
use super::hold::Hold;
use super::node_log::{NodeLog, NodeLogConfig, Replayed, IDLE_CHECKPOINT};
use super::replication::{FileOp, Replicator};
use crate::metrics::Metrics;

/// Queued bytes past which producers pause.
pub const QUEUE_HIGH_WATER: usize = 32 << 20;
/// Queued bytes below which paused producers go on.
pub const QUEUE_LOW_WATER: usize = 16 << 20;
/// How long a batch whose barriers all expect a successor from their producer waits for more
/// before its fsync: a stream of turns then shares fsyncs. Only with the node log, and never
/// for a barrier nothing follows (an idle conversation's submit or last turn).
pub const SYNC_LINGER: Duration = Duration::from_millis(2);
/// Append handles kept open at most (see the module's Bounds).
pub const MAX_OPEN_FILES: usize = 256;
/// Deleted directories remembered so a stray job cannot recreate them.
pub const RETIRED_MEMORY: usize = 4096;
/// How often a failing disk is probed for recovery.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The small file written, fsynced and removed in the instance directory to see whether a
/// failing disk is back.
pub const PROBE_FILE_NAME: &str = ".roundtable-probe";

/// How a write barrier or a replace is answered: `Err` names the first failure, the file by
/// its [role](super::role) (the text reaches clients; the log has the path).
type Ack = oneshot::Sender<Result<(), String>>;

/// A request to the writer thread.
enum Job {
    /// Append bytes to a file; `true`: a failure is reported to the next sync naming it.
    Append(Arc<Path>, Vec<u8>, bool),
    /// Answer once everything queued before is durable, with the first error an append to one
    /// of these files met since the last sync naming it. `true`: its producer will send
    /// another barrier soon (a turn runs or waits), so the fsync may wait for it
    /// ([`SYNC_LINGER`]).
    Sync(Vec<Arc<Path>>, Ack, bool),
    /// Sync and close a file (conversation unloaded).
    Close(Arc<Path>, oneshot::Sender<()>),
    /// Sync and close every file under a directory and refuse later writes there (delete).
    Retire(PathBuf, oneshot::Sender<()>),
    /// Close every file under a directory and log that older records of it no longer apply
    /// (its files are about to be rebuilt from elsewhere); later writes there go on.
    Forget(PathBuf, oneshot::Sender<()>),
    /// Answer once every job queued before has been written (read-your-writes).
    Written(oneshot::Sender<()>),
    /// Replace a file's content durably (after everything queued for it).
    Replace(Arc<Path>, Vec<u8>, Ack),
    /// Stop here, everything queued before written, until a backup snapshot has linked the
    /// files ([`snapshot`](super::snapshot)).
    Hold(Hold),
    /// Make every file durable by itself and empty the node log (clean shutdown).
    Checkpoint(oneshot::Sender<()>),
    /// Create these files (empty) when the thread is idle ([`prepare`]).
    Prepare(Vec<Arc<Path>>),
    /// Answer once nothing waits to be prepared (tests).
    #[cfg(test)]
    WhenPrepared(oneshot::Sender<()>),
}

/// Handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    /// The thread and its queue, weighed in bytes of appends and replaces.
    queue: GroupCommit<WriterState>,
    /// `serve --cluster`: every conversation file write is also handed to this replica (the
    /// cluster's log stream), and barriers wait for it as well as for the disk. `None`: the
    /// disk is the only copy.
    replicator: Option<Arc<dyn Replicator>>,
}

impl LogWriter {
    /// Starts the writer thread. `probe_dir` is where recovery probes write (the instance
    /// directory); failures and recoveries are reported to `metrics`.
    pub fn start(metrics: Arc<Metrics>, probe_dir: PathBuf) -> LogWriter {
        Self::start_inner(metrics, probe_dir, None)
    }

    /// Starts the writer thread of the instance at `root` with its node log: first replays
    /// what a crash left in the log (see [`NodeLog::open`]), then writes through it. With
    /// `config.enabled` false the log is replayed and then left unused.
    pub fn start_with_log(
        metrics: Arc<Metrics>,
        root: PathBuf,
        config: NodeLogConfig,
    ) -> Result<(LogWriter, Replayed), super::StoreError> {
        let (log, replayed) = NodeLog::open(&root, config, metrics.clone())?;
        let log = config.enabled.then_some(log);
        Ok((Self::start_inner(metrics, root, log), replayed))
    }

    fn start_inner(metrics: Arc<Metrics>, probe_dir: PathBuf, wal: Option<NodeLog>) -> LogWriter {
        let state = WriterState::new(metrics.clone(), probe_dir, wal);
        LogWriter {
            queue: GroupCommit::start("log-writer", state, metrics),
            replicator: None,
        }
    }

    /// This writer with conversation file writes also handed to `replicator`.
    pub fn replicated(mut self, replicator: Arc<dyn Replicator>) -> LogWriter {
        self.replicator = Some(replicator);
        self
    }

    /// The replication hook of every write: hands it to the replica, if any, before it is
    /// queued for the disk (so a barrier queued after it covers it in both).
    fn replicate(&self, path: &Path, op: FileOp, bytes: &[u8]) {
        if let Some(r) = &self.replicator {
            r.record(path, op, bytes);
        }
    }

    /// Bytes the replica has not stored yet (0 without one).
    fn replica_backlog(&self) -> usize {
        self.replicator.as_ref().map_or(0, |r| r.queued_bytes())
    }

    /// Resolves with the local outcome, then (with a replica) with the replica's.
    fn also_stored(
        &self,
        local: oneshot::Receiver<Result<(), String>>,
        paths: &[Arc<Path>],
    ) -> oneshot::Receiver<Result<(), String>> {
        let Some(replicator) = &self.replicator else {
            return local;
        };
        let stored = replicator.barrier(paths);
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let outcome = match local.await {
                Ok(Ok(())) => stored.await,
                Ok(Err(e)) => Err(e),
                Err(_) => Err("log writer stopped".to_string()),
            };
            let _ = tx.send(outcome);
        });
        rx
    }

    /// Queues a job; a job the stopped thread cannot take is logged as lost (its answer, if
    /// any, resolves as an error when its sender drops).
    fn send(&self, job: Job) {
        if self.queue.send(job).is_err() {
            log::error!("log writer has stopped; a write was lost");
        }
    }

    /// Queues an append. A failure is reported to the next [`sync`](LogWriter::sync) that
    /// names the file (and to `/health`).
    pub fn append(&self, path: &Arc<Path>, bytes: Vec<u8>) {
        self.replicate(path, FileOp::Append, &bytes);
        self.send(Job::Append(path.clone(), bytes, true));
    }

    /// Queues an append whose loss is harmless and that no later write waits for (a journal
    /// record that start-up recovery can rebuild): a failure goes to the log and `/health`
    /// only, so it cannot fail a later, unrelated acknowledgement.
    pub fn append_unreported(&self, path: &Arc<Path>, bytes: Vec<u8>) {
        self.replicate(path, FileOp::Append, &bytes);
        self.send(Job::Append(path.clone(), bytes, false));
    }

    /// Whether producers should pause (more than [`QUEUE_HIGH_WATER`] bytes queued).
    pub fn backlogged(&self) -> bool {
        self.queue.queued_weight() > QUEUE_HIGH_WATER || self.replica_backlog() > QUEUE_HIGH_WATER
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queue.queued_weight()
    }

    /// Resolves once the queue is below [`QUEUE_LOW_WATER`].
    pub async fn drained(&self) {
        self.queue.wait_below(QUEUE_LOW_WATER).await;
        if let Some(r) = &self.replicator {
            r.wait_below(QUEUE_LOW_WATER).await;
        }
    }

    /// Resolves once every append queued so far is on disk: `Err` names the first failure of
    /// an append to one of `paths` since the last sync that named it.
    pub fn sync(&self, paths: Vec<Arc<Path>>) -> oneshot::Receiver<Result<(), String>> {
        self.sync_inner(paths, false)
    }

    /// [`sync`](LogWriter::sync) from a producer that will send another barrier soon (its
    /// next turn runs or waits): with the node log, the fsync may wait up to
    /// [`SYNC_LINGER`] for it, so a stream of turns shares fsyncs.
    pub fn sync_followed(&self, paths: Vec<Arc<Path>>) -> oneshot::Receiver<Result<(), String>> {
        self.sync_inner(paths, true)
    }

    fn sync_inner(
        &self,
        paths: Vec<Arc<Path>>,
        followed: bool,
    ) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        let replicated = self.replicator.is_some().then(|| paths.clone());
        self.send(Job::Sync(paths, tx, followed));
        self.also_stored(rx, replicated.as_deref().unwrap_or_default())
    }

    /// Ends the wait of a batch lingering for a successor barrier ([`SYNC_LINGER`]): the
    /// producer has output waiting that a person watches (a streamed answer's first piece),
    /// so its barrier's fsync should not wait for the next one. Harmless when nothing lingers.
    pub fn hurry(&self) {
        // A read-your-writes marker no one waits for: it ends a linger, adds no fsync.
        self.send(Job::Written(oneshot::channel().0));
    }

    /// Resolves once every append queued so far has been written to its file (the fsync may
    /// still be under way), so a read of the file sees it. A conversation reads the part of
    /// its display log or chat history it no longer holds in memory only after this: what it
    /// let go of may still be in this queue.
    pub fn written(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Written(tx));
        rx
    }

    /// Replaces `path` with `bytes` (temp file, fsync, rename, fsync directory) once every
    /// append queued before has landed; resolves with the outcome.
    pub fn replace(
        &self,
        path: &Arc<Path>,
        bytes: Vec<u8>,
    ) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        self.replicate(path, FileOp::Replace, &bytes);
        self.send(Job::Replace(path.clone(), bytes, tx));
        self.also_stored(rx, std::slice::from_ref(path))
    }

    /// Syncs and closes `path`'s handle; resolves when done.
    pub fn close(&self, path: &Arc<Path>) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Close(path.clone(), tx));
        rx
    }

    /// Syncs and closes every file under `dir` and refuses later writes there; resolves when
    /// done. Used before a deleted conversation's directory is removed.
    pub fn retire(&self, dir: PathBuf) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Retire(dir, tx));
        rx
    }

    /// Closes every file under `dir` and makes it durable in the node log that none of its
    /// older records applies any more; resolves when that is on disk. For a directory whose
    /// files are about to be rebuilt outside the writer (a cluster node restoring a
    /// conversation from the log stream): a replay after a crash must not write old records
    /// into the new files. Later writes there are recorded as usual.
    pub fn forget(&self, dir: PathBuf) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Forget(dir, tx));
        rx
    }

    /// Queues a backup snapshot's hold: once every job queued before it is written, the
    /// thread waits in [`Hold::wait`] until the snapshot releases it.
    pub fn hold(&self, hold: Hold) {
        self.send(Job::Hold(hold));
    }

    /// Makes every file durable by itself and empties the node log, after everything queued
    /// before (clean shutdown: the next start has nothing to replay); resolves when done.
    pub fn checkpoint(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Checkpoint(tx));
        rx
    }

    /// Creates the files of `paths` that do not exist yet (empty, with the directories above
    /// them) when the thread has nothing else to do, so their first append allocates no
    /// inode (see the `log_writer::prepare` module). Nothing waits for it; a path written
    /// first is created by its append as usual.
    pub fn prepare(&self, paths: Vec<Arc<Path>>) {
        self.send(Job::Prepare(paths));
    }

    /// Resolves once every file queued for preparation so far has been made or dropped.
    #[cfg(test)]
    pub fn prepared(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::WhenPrepared(tx));
        rx
    }
}

/// An open append handle and the length the file had after the last good write.
struct OpenFile {
    file: File,
    len: u64,
    /// [`WriterState::clock`] at its last append: the least recent is closed first.
    used: u64,
    /// Written since its last fsync.
    unsynced: bool,
}

/// The writer thread's state: open files, per-file errors, retired directories.
struct WriterState {
    /// The node log every append is recorded in (`None`: each touched file is fsynced per
    /// batch instead).
    wal: Option<NodeLog>,
    /// Files with appends in node log records not fsynced yet: what a failed log fsync must
    /// make durable one by one instead. Emptied by every good log fsync.
    logged_unsynced: HashSet<PathBuf>,
    /// Append handles of the files written since they were last closed (at most
    /// [`MAX_OPEN_FILES`]).
    files: HashMap<PathBuf, OpenFile>,
    /// Counts appends, to order `files` by recency.
    clock: u64,
    /// First error of an append per file since the last sync that named it.
    errors: HashMap<PathBuf, String>,
    /// Deleted conversation directories: nothing is written under them again.
    retired: HashSet<PathBuf>,
    /// `retired` in insertion order, to bound it.
    retired_order: VecDeque<PathBuf>,
    /// `/health`'s storage failure and the fsync / barrier counters.
    metrics: Arc<Metrics>,
    /// Where recovery probes write (the instance directory).
    probe_dir: PathBuf,
    /// Files to create in idle moments, oldest first (at most
    /// [`MAX_PREPARED_PATHS`](prepare::MAX_PREPARED_PATHS)).
    to_prepare: VecDeque<PathBuf>,
    /// When the last batch was committed or the last idle duty (probe, idle checkpoint) ran:
    /// those duties wait for that much quiet, however many files were prepared meanwhile.
    quiet_since: Instant,
    /// Answered once `to_prepare` is empty (tests).
    #[cfg(test)]
    prepare_waiters: Vec<oneshot::Sender<()>>,
}

/// The files a batch wrote that are fsynced one by one at its end (no node log, or outside
/// the instance directory).
#[derive(Default)]
struct Dirty {
    files: Vec<PathBuf>,
}

impl Dirty {
    fn add(&mut self, path: &Path) {
        if !self.files.iter().any(|d| d == path) {
            self.files.push(path.to_path_buf());
        }
    }
}

/// Opens `path` for appending. A new file (and any missing directory above it) is created
/// here, off the actors' threads. Its directory entries are made durable at once, unless
/// `deferred` (the node log records the file's appends: replay recreates a missing file, and
/// a missing directory that no retire marker covers, so the entries only need to be durable
/// by the segment's checkpoint): then the directories whose entries changed are returned for
/// the checkpoint to fsync, and a new conversation costs no directory fsync on a turn's path.
fn open_append(path: &Path, deferred: bool) -> std::io::Result<(OpenFile, Vec<PathBuf>)> {
    let mut changed = Vec::new();
    let file = match OpenOptions::new().append(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            faults::check("create", dir)?;
            if deferred {
                changed = create_dir_deferred(dir).map_err(std::io::Error::other)?;
            } else {
                create_dir_durable(dir).map_err(std::io::Error::other)?;
            }
            let f = private_file_options().append(true).open(path)?;
            if deferred {
                changed.push(dir.to_path_buf());
            } else {
                File::open(dir)?.sync_all()?;
            }
            f
        }
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let open = OpenFile {
        file,
        len,
        used: 0,
        unsynced: false,
    };
    Ok((open, changed))
}

impl WriterState {
    fn new(metrics: Arc<Metrics>, probe_dir: PathBuf, wal: Option<NodeLog>) -> WriterState {
        WriterState {
            wal,
            logged_unsynced: HashSet::new(),
            files: HashMap::new(),
            clock: 0,
            errors: HashMap::new(),
            retired: HashSet::new(),
            retired_order: VecDeque::new(),
            metrics,
            probe_dir,
            to_prepare: VecDeque::new(),
            quiet_since: Instant::now(),
            #[cfg(test)]
            prepare_waiters: Vec::new(),
        }
    }

    /// How much quiet the next idle duty waits for: the probe while writes fail, the idle
    /// checkpoint while the node log holds records; `None`: no duty.
    fn idle_duty(&self) -> Option<Duration> {
        if self.metrics.storage_failure().is_some() {
            return Some(PROBE_INTERVAL);
        }
        self.wal
            .as_ref()
            .filter(|w| w.wants_idle_checkpoint())
            .map(|_| IDLE_CHECKPOINT)
    }

    /// Opens `path` for appending, creating it (and its directories) when missing. Under the
    /// node log the new directory entries are left to the segment's checkpoint, which fsyncs
    /// them; a failed log fsync falls back to fsyncing them with the batch's files.
    fn open(&mut self, path: &Path) -> std::io::Result<OpenFile> {
        let (file, changed_dirs) = open_append(path, self.logged(path))?;
        if let Some(wal) = self.wal.as_mut() {
            for dir in changed_dirs {
                wal.record_new_entry(&dir);
                self.logged_unsynced.insert(dir);
            }
        }
        Ok(file)
    }

    fn is_retired(&self, path: &Path) -> bool {
        path.ancestors().any(|a| self.retired.contains(a))
    }

    /// Logs and reports a failed write: the log and `/health` name `path`, the error kept for
    /// the next barrier (it reaches clients) names the file by its role.
    fn fail(&mut self, path: &Path, what: &str, e: std::io::Error, report: bool) {
        let failure = super::failure(what, path, &e);
        log::error!("{}", failure.operator);
        if report {
            self.errors
                .entry(path.to_path_buf())
                .or_insert_with(|| failure.client.clone());
        }
        self.metrics.storage_failed(failure);
    }

    fn append(&mut self, path: &Path, bytes: &[u8], report: bool, dirty: &mut Dirty) {
        if self.is_retired(path) {
            log::error!(
                "{}: append after its conversation was deleted, dropped",
                path.display()
            );
            return;
        }
        if !self.files.contains_key(path) {
            if self.files.len() >= MAX_OPEN_FILES {
                self.close_least_recent();
            }
            match self.open(path) {
                Ok(f) => {
                    self.files.insert(path.to_path_buf(), f);
                }
                Err(e) => return self.fail(path, "cannot open", e, report),
            }
        }
        self.clock += 1;
        let open = self.files.get_mut(path).expect("opened above");
        open.used = self.clock;
        open.unsynced = true;
        let written = faults::check("write", path).and_then(|()| open.file.write_all(bytes));
        match written {
            Ok(()) => {
                let offset = open.len;
                open.len += bytes.len() as u64;
                match self.wal.as_mut() {
                    Some(wal) => match wal.relative(path) {
                        Some(rel) => {
                            wal.record_append(path, rel, offset, bytes);
                            if !self.logged_unsynced.contains(path) {
                                self.logged_unsynced.insert(path.to_path_buf());
                            }
                        }
                        None => dirty.add(path),
                    },
                    None => dirty.add(path),
                }
            }
            Err(e) => {
                // Cut a partial write back off so the next good line starts clean.
                if let Err(cut) = open.file.set_len(open.len) {
                    log::error!("{}: cannot cut a failed append: {cut}", path.display());
                    self.files.remove(path);
                }
                self.fail(path, "append to", e, report);
            }
        }
    }

    fn fsync(&mut self, path: &Path) -> bool {
        let Some(open) = self.files.get_mut(path) else {
            return true;
        };
        Metrics::inc(&self.metrics.log_fsyncs);
        match faults::check("fsync", path).and_then(|()| open.file.sync_data()) {
            Ok(()) => {
                open.unsynced = false;
                true
            }
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty pages: reopen.
                self.files.remove(path);
                self.fail(path, "fsync of", e, true);
                false
            }
        }
    }

    /// Makes room: closes the least recently written eighth of the handles, those whose
    /// bytes are fsynced already (a batch writing to more files than the cap fsyncs the
    /// least recent of its own first, so its barriers still cover them). Pending errors stay.
    fn close_least_recent(&mut self) {
        let mut clean: Vec<(u64, PathBuf)> = self
            .files
            .iter()
            .filter(|(_, f)| !f.unsynced)
            .map(|(p, f)| (f.used, p.clone()))
            .collect();
        if clean.is_empty() {
            let Some(victim) = self
                .files
                .iter()
                .min_by_key(|(_, f)| f.used)
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            if self.fsync(&victim) {
                self.files.remove(&victim);
            }
            return;
        }
        clean.sort_unstable_by_key(|(used, _)| *used);
        for (_, path) in clean.into_iter().take(MAX_OPEN_FILES.div_ceil(8)) {
            self.files.remove(&path);
        }
    }

    /// Closes the files under `dir` and logs a retire marker: older records of them are
    /// skipped by replay.
    fn forget(&mut self, dir: &Path, dirty: &mut Dirty) {
        self.cancel_prepare(dir);
        if let Some(wal) = self.wal.as_mut() {
            if let Some(rel) = wal.relative(dir) {
                wal.record_retire(rel);
            }
        }
        let under: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect();
        for path in under {
            self.close(&path, dirty);
        }
    }

    /// Whether `path`'s appends are covered by the node log (so closing it needs no fsync: the
    /// next checkpoint flushes it).
    fn logged(&self, path: &Path) -> bool {
        self.wal
            .as_ref()
            .is_some_and(|w| w.relative(path).is_some())
    }

    fn close(&mut self, path: &Path, dirty: &mut Dirty) {
        self.cancel_prepare(path);
        if !self.logged(path) {
            self.fsync(path);
        }
        self.files.remove(path);
        self.errors.remove(path);
        dirty.files.retain(|d| d != path);
    }

    fn retire(&mut self, dir: PathBuf, dirty: &mut Dirty) {
        self.forget(&dir, dirty);
        self.errors.retain(|p, _| !p.starts_with(&dir));
        if self.retired.insert(dir.clone()) {
            self.retired_order.push_back(dir);
            if self.retired_order.len() > RETIRED_MEMORY {
                if let Some(old) = self.retired_order.pop_front() {
                    self.retired.remove(&old);
                }
            }
        }
    }

    fn replace(&mut self, path: &Path, bytes: &[u8], dirty: &mut Dirty) -> Result<(), String> {
        if self.is_retired(path) {
            log::error!(
                "{}: replace after its conversation was deleted",
                path.display()
            );
            return Err(format!(
                "{}: its conversation was deleted",
                super::role(path)
            ));
        }
        if self.logged(path) {
            // Replay must never apply an old append to the new file, nor skip one the old
            // file lacks: the old file is made durable, then the marker (one log fsync with
            // whatever the batch queued before it), then the rename.
            let marked = self.fsync_by_path(path).and_then(|()| {
                let wal = self.wal.as_mut().expect("logged");
                let rel = wal.relative(path).expect("logged").to_path_buf();
                wal.record_replace(&rel);
                self.commit_log(true)
            });
            if let Err(e) = marked {
                let failure = super::failure("replace", path, &e);
                log::error!("{}", failure.operator);
                let client = failure.client.clone();
                self.metrics.storage_failed(failure);
                return Err(client);
            }
        }
        self.close(path, dirty);
        let dir = path.parent().unwrap_or(Path::new("."));
        match create_dir_durable(dir).and_then(|()| write_atomic(path, bytes)) {
            Ok(()) => {
                self.metrics.storage_ok();
                Ok(())
            }
            Err(e) => {
                let mut failure = super::failure("replace", path, &e.cause());
                // The error's own path may be the temp file or the directory: keep it whole.
                failure.operator = format!("replace {}: {e}", path.display());
                log::error!("{}", failure.operator);
                let client = failure.client.clone();
                self.metrics.storage_failed(failure);
                Err(client)
            }
        }
    }
}

mod batch;
mod fallback;
mod prepare;
#[cfg(test)]
mod tests;
