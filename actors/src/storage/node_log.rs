//! The node log: one append-only write-ahead log per server that makes every conversation file
//! write durable with one write and one fsync per batch, however many conversations and files
//! the batch touches. The per-conversation files (display logs, request journals, chat
//! histories, context meters) keep their format and layout; they are written at once but
//! fsynced only at a *checkpoint*, after which the log segments they are covered by are
//! removed.
//!
//! Who talks to it: only the [`LogWriter`](super::log_writer::LogWriter)'s thread, which owns
//! the [`NodeLog`]; and the server at start-up ([`NodeLog::open`] replays what a crash left).
//!
//! This file holds the format and the [`NodeLog`] the writer drives; `replay.rs` writes a
//! crash's records back at start-up, `checkpoint.rs` is the thread that fsyncs what finished
//! segments wrote and removes them.
//!
//! # On disk
//! `<instance-dir>/wal/<seq>.wal`, segments numbered upward. A segment starts with [`MAGIC`];
//! each record is `len: u32 LE | crc32(payload): u32 LE | payload`, the payload
//! `kind: u8 | path length: u32 LE | path (relative to the instance directory) | offset: u64 LE
//! | bytes`. Kinds: an append (`bytes` belong at `offset` of the file), a replace marker (the
//! file was replaced whole: earlier appends to it no longer apply) and a retire marker (the
//! directory was deleted: earlier appends under it no longer apply). Appends are recorded with
//! the offset they were written at, so replaying a record twice writes the same bytes to the
//! same place: replay is idempotent, which is what makes a crash during a checkpoint or during
//! replay itself harmless.
//!
//! # Rules
//! - **A batch is durable when its records are**: the writer writes the batch's file appends
//!   (page cache only), then the batch's records in one `write` and, when anything in the batch
//!   waits for durability, one `fdatasync` of the current segment, and only then answers its
//!   barriers. The log is a prefix: a record is durable once any later record is, so a batch
//!   nothing waits on only writes, and the next fsync covers it.
//! - **Checkpoint**: when the current segment passes its size bound (or the writer has been
//!   idle for [`IDLE_CHECKPOINT`] with records in it), the writer starts the next segment and
//!   hands the older ones to the checkpointer thread with the files their records wrote (and
//!   the directories whose new entries they rely on: the writer creates files and
//!   directories without fsyncing their parents); it fsyncs those one by one (short fsyncs
//!   that interleave with the writer's own; one `syncfs` of the whole file system made the
//!   writer's fsyncs wait behind it) and then removes those segments. A crash before the removal replays them
//!   (idempotent); a failed flush keeps them and is tried again.
//! - **Replace** (`@compact`): the file is fsynced and the marker is fsynced into the log
//!   *before* the new file is renamed in, so replay never applies an old append to the new
//!   file and never skips an append the old file lacked.
//! - **Start-up** ([`NodeLog::open`]): every segment is read up to its first torn or
//!   corrupt record (a crash mid-write), the records are written into their files (skipping
//!   those superseded by a later replace or retire marker: a delete always logs one; a missing
//!   file or directory is created, its entry had not reached the disk), the file system is
//!   flushed (one `syncfs`: nothing else runs yet), and only then are the segments removed.
//!   An unknown segment header stops the server with nothing touched.
//! - **Write failures**: a failed write or fsync of the log is cut back off the segment (a
//!   torn record never sits before a good one) and the batch falls back to fsyncing each of
//!   its files, so its barriers stay truthful; a log that cannot even be cut back is left for
//!   a fresh segment.
//!
//! # Bounds
//! A segment holds [`DEFAULT_SEGMENT_BYTES`] (`--wal-segment-bytes`) plus at most one batch.
//! Segments waiting for a checkpoint are at most [`MAX_WAITING_SEGMENTS`]: past that the
//! writer checkpoints itself before it goes on (backpressure on a disk that cannot keep up), so
//! the log never exceeds about `(MAX_WAITING_SEGMENTS + 1) ×` the segment size, and replay
//! after a crash reads at most that much.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::durable::{create_dir_durable, private_file_options};
use super::{faults, io_err, StoreError};
use crate::metrics::Metrics;
use checkpoint::{remove_segments_below, run_checkpointer, CheckpointRequest};
use replay::apply;

/// The log's directory under the instance directory.
pub const DIR_NAME: &str = "wal";
/// What every segment starts with (format version 1).
pub const MAGIC: &[u8; 8] = b"RTWAL\x00\x00\x01";
/// Size past which the writer starts a new segment and checkpoints the old ones.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// The smallest segment bound accepted (tests and the `crash` scenario use small ones).
pub const MIN_SEGMENT_BYTES: u64 = 4096;
/// Segments waiting for a checkpoint at most before the writer checkpoints itself.
pub const MAX_WAITING_SEGMENTS: usize = 3;
/// Idle time after which a segment holding records is checkpointed anyway, so a quiet server
/// keeps little to replay.
pub const IDLE_CHECKPOINT: Duration = Duration::from_secs(10);

/// A batch whose write and fdatasync of the log take longer than this is counted
/// (`roundtable_log_slow_syncs_total`) and reported in the log: every acknowledgement on the
/// node waited for it.
pub const SLOW_SYNC: Duration = Duration::from_millis(50);
/// At most one slow-sync warning per this long; the ones in between are counted into the next.
pub const SLOW_SYNC_WARNING_INTERVAL: Duration = Duration::from_secs(10);

const KIND_APPEND: u8 = 1;
const KIND_REPLACE: u8 = 2;
const KIND_RETIRE: u8 = 3;
/// Record header: payload length and its CRC.
const HEADER: usize = 8;
/// Payload bytes before the path: kind and path length.
const PAYLOAD_FIXED: usize = 1 + 4 + 8;

/// How the writer uses the log.
#[derive(Clone, Copy, Debug)]
pub struct NodeLogConfig {
    /// Segment size bound (at least [`MIN_SEGMENT_BYTES`]).
    pub segment_bytes: u64,
    /// `false` (`--no-wal`): replay what is there at start-up, then fsync each file per batch
    /// as before the log existed (kept for comparisons).
    pub enabled: bool,
}

impl Default for NodeLogConfig {
    fn default() -> Self {
        NodeLogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            enabled: true,
        }
    }
}

/// What start-up replay did (logged, and asserted by tests).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Segments read.
    pub segments: usize,
    /// Append records written back into their files.
    pub appends: usize,
    /// Records skipped: superseded by a replace or retire marker.
    pub skipped: usize,
    /// Files written to.
    pub files: usize,
    /// Bytes of a torn or corrupt tail that ended a segment early.
    pub torn_bytes: u64,
}

/// One record read back from a segment.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    Append {
        path: PathBuf,
        offset: u64,
        bytes: Vec<u8>,
    },
    Replace(PathBuf),
    Retire(PathBuf),
}

/// The log as the writer thread holds it.
pub struct NodeLog {
    /// The instance directory: recorded paths are relative to it.
    root: PathBuf,
    /// `<root>/wal`.
    dir: PathBuf,
    /// Number of the segment being written.
    seq: u64,
    /// The segment being written; `None` after a failure that could not be cut back (the next
    /// commit starts a fresh segment first).
    file: Option<File>,
    /// Its length after the last good write.
    len: u64,
    /// Its length after the last good fsync: what a failure cuts it back to.
    synced_len: u64,
    /// Whether the segment holds records (not just its header).
    has_records: bool,
    /// Records of the current batch, not written yet.
    pending: Vec<u8>,
    /// Segment bound.
    segment_bytes: u64,
    /// Tells the checkpointer which segments are done and which files they wrote.
    checkpointer: std_mpsc::Sender<CheckpointRequest>,
    /// Files written, and directories whose entries changed (files or directories created in
    /// them), since the last segment was handed to the checkpointer: it fsyncs them all.
    segment_files: HashSet<PathBuf>,
    /// Segments handed to the checkpointer and not confirmed removed (counted by the
    /// checkpointer as it removes them).
    removed_below: Arc<std::sync::atomic::AtomicU64>,
    /// Counters (`log_fsyncs`, `wal_checkpoints`, `log_slow_syncs`).
    metrics: Arc<Metrics>,
    /// When the last slow-sync warning was logged, and the slow syncs since (not logged one
    /// by one: a slow disk would flood the log).
    slow_syncs: (Option<Instant>, u64),
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.wal"))
}

/// The segments in `dir`, by number.
fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".wal"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        found.push((seq, entry.path()));
    }
    found.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(found)
}

/// Appends one record to `buf`.
fn encode(buf: &mut Vec<u8>, kind: u8, path: &Path, offset: u64, bytes: &[u8]) {
    let path = path.as_os_str().as_bytes();
    let payload_len = PAYLOAD_FIXED + path.len() + bytes.len();
    let start = buf.len();
    buf.extend_from_slice(&(payload_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(kind);
    buf.extend_from_slice(&(path.len() as u32).to_le_bytes());
    buf.extend_from_slice(path);
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(bytes);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Reads the records of one segment up to the first torn or corrupt one; the second value is
/// how many bytes followed the last good record.
fn decode(bytes: &[u8]) -> (Vec<Record>, u64) {
    let mut records = Vec::new();
    let mut at = MAGIC.len();
    while bytes.len() >= at + HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if len < PAYLOAD_FIXED || crc32fast::hash(payload) != crc {
            break;
        }
        let kind = payload[0];
        let path_len = u32::from_le_bytes(payload[1..5].try_into().expect("4 bytes")) as usize;
        if PAYLOAD_FIXED + path_len > len {
            break;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&payload[5..5 + path_len]));
        let rest = &payload[5 + path_len..];
        let offset = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let record = match kind {
            KIND_APPEND => Record::Append {
                path,
                offset,
                bytes: rest[8..].to_vec(),
            },
            KIND_REPLACE => Record::Replace(path),
            KIND_RETIRE => Record::Retire(path),
            _ => break,
        };
        records.push(record);
        at += HEADER + len;
    }
    (records, (bytes.len() - at.min(bytes.len())) as u64)
}

/// A recorded path is relative and stays inside the instance directory.
fn safe_relative(path: &Path) -> bool {
    !path.as_os_str().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

impl NodeLog {
    /// Opens the log of the instance at `root`: replays every segment a crash left (see the
    /// module's rules), removes them, and starts a fresh segment. Refuses, touching nothing,
    /// a segment this build cannot read.
    pub fn open(
        root: &Path,
        config: NodeLogConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(NodeLog, Replayed), StoreError> {
        let dir = root.join(DIR_NAME);
        create_dir_durable(&dir)?;
        let found = segments(&dir).map_err(io_err(&dir))?;
        let mut replayed = Replayed::default();
        let mut records = Vec::new();
        let started = Instant::now();
        for (_, path) in &found {
            let bytes = fs::read(path).map_err(io_err(path))?;
            if bytes.len() < MAGIC.len() {
                // Created, never written: a crash while starting a segment.
                replayed.segments += 1;
                continue;
            }
            if &bytes[..MAGIC.len()] != MAGIC {
                return Err(StoreError::Io {
                    path: path.clone(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        "not a node log segment this Roundtable reads; the instance was left untouched",
                    ),
                });
            }
            let (mut read, torn) = decode(&bytes);
            replayed.segments += 1;
            replayed.torn_bytes += torn;
            records.append(&mut read);
        }
        apply(root, &records, &mut replayed)?;
        if !records.is_empty() {
            log::info!(
                "node log: replayed {} appends into {} files from {} segments ({} skipped, {} torn bytes) in {:.1} ms",
                replayed.appends,
                replayed.files,
                replayed.segments,
                replayed.skipped,
                replayed.torn_bytes,
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        faults::wal_hold("replay");
        let next = found.last().map_or(1, |(seq, _)| seq + 1);
        remove_segments_below(&dir, next, &metrics).map_err(io_err(&dir))?;
        Metrics::set(&metrics.wal_bytes, 0);
        let (tx, rx) = std_mpsc::channel();
        let removed_below = Arc::new(std::sync::atomic::AtomicU64::new(next));
        {
            let (thread_dir, removed_below, metrics) =
                (dir.clone(), removed_below.clone(), metrics.clone());
            std::thread::Builder::new()
                .name("wal-checkpoint".into())
                .spawn(move || run_checkpointer(thread_dir, rx, removed_below, metrics))
                .map_err(io_err(&dir))?;
        }
        let mut log = NodeLog {
            root: root.to_path_buf(),
            dir,
            seq: next,
            file: None,
            len: 0,
            synced_len: 0,
            has_records: false,
            pending: Vec::new(),
            segment_bytes: config.segment_bytes.max(MIN_SEGMENT_BYTES),
            checkpointer: tx,
            segment_files: HashSet::new(),
            removed_below,
            metrics,
            slow_syncs: (None, 0),
        };
        log.start_segment(next).map_err(io_err(&log.dir))?;
        Ok((log, replayed))
    }

    /// Creates segment `seq` (header, fsync, directory fsync) and writes to it from now on.
    fn start_segment(&mut self, seq: u64) -> io::Result<()> {
        let path = segment_path(&self.dir, seq);
        faults::check("create", &path)?;
        let mut file = private_file_options().truncate(true).open(&path)?;
        file.write_all(MAGIC)?;
        file.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        self.seq = seq;
        self.file = Some(file);
        self.len = MAGIC.len() as u64;
        self.synced_len = self.len;
        Metrics::add(&self.metrics.wal_bytes, self.len as i64);
        self.has_records = false;
        Ok(())
    }

    /// The path as recorded: relative to the instance directory, or `None` for a file
    /// outside it (the writer fsyncs those itself).
    pub fn relative<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        path.strip_prefix(&self.root)
            .ok()
            .filter(|rel| safe_relative(rel))
    }

    /// Queues an append record: `bytes` were written at `offset` of the file at `path`
    /// (`rel` inside the instance directory).
    pub fn record_append(&mut self, path: &Path, rel: &Path, offset: u64, bytes: &[u8]) {
        encode(&mut self.pending, KIND_APPEND, rel, offset, bytes);
        self.checkpoint_covers(path);
    }

    /// A directory whose entries changed (a file or directory created in it) that the
    /// current segment's records rely on: its checkpoint fsyncs it with the files.
    pub fn record_new_entry(&mut self, dir: &Path) {
        self.checkpoint_covers(dir);
    }

    /// The current segment's checkpoint must fsync `path` (a file or a directory) before it
    /// removes the segment.
    fn checkpoint_covers(&mut self, path: &Path) {
        if !self.segment_files.contains(path) {
            self.segment_files.insert(path.to_path_buf());
        }
    }

    /// Queues a replace marker for the file at `rel`.
    pub fn record_replace(&mut self, rel: &Path) {
        encode(&mut self.pending, KIND_REPLACE, rel, 0, &[]);
    }

    /// Queues a retire marker for the directory at `rel`.
    pub fn record_retire(&mut self, rel: &Path) {
        encode(&mut self.pending, KIND_RETIRE, rel, 0, &[]);
    }

    /// Writes the queued records to the segment without waiting for the disk: a batch that
    /// nothing waits on costs one `write`, and the next [`sync`](NodeLog::sync) covers it (the
    /// log is a prefix). On failure the segment is cut back to its last synced length.
    pub fn write(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        if self.file.is_none() {
            self.start_segment(self.seq + 1)?;
        }
        let path = segment_path(&self.dir, self.seq);
        let file = self.file.as_mut().expect("a segment is open");
        let result = faults::check("write", &path).and_then(|()| file.write_all(&pending));
        let written = pending.len() as u64;
        if pending.capacity() <= 4 << 20 {
            // Keep the allocation for the next batch (a large one is let go).
            self.pending = pending;
            self.pending.clear();
        }
        match result {
            Ok(()) => {
                self.len += written;
                Metrics::add(&self.metrics.wal_bytes, written as i64);
                self.has_records = true;
                Ok(())
            }
            Err(e) => Err(self.cut_back(e)),
        }
    }

    /// Writes what is queued and fsyncs the segment (one `fdatasync`, whatever number of
    /// batches and files it covers); rolls to the next segment past the bound. On failure
    /// everything after the last good sync is cut off: the caller makes the files those
    /// records covered durable another way.
    pub fn sync(&mut self) -> io::Result<()> {
        let started = Instant::now();
        self.write()?;
        if self.synced_len == self.len {
            return Ok(());
        }
        let path = segment_path(&self.dir, self.seq);
        let file = self.file.as_mut().expect("a segment is open");
        Metrics::inc(&self.metrics.log_fsyncs);
        match faults::check("fsync", &path).and_then(|()| file.sync_data()) {
            Ok(()) => {
                self.note_sync_time(started.elapsed());
                self.synced_len = self.len;
                if self.len >= self.segment_bytes {
                    self.roll();
                }
                Ok(())
            }
            Err(e) => Err(self.cut_back(e)),
        }
    }

    /// Counts a sync slower than [`SLOW_SYNC`] and warns about it, at most once per
    /// [`SLOW_SYNC_WARNING_INTERVAL`].
    fn note_sync_time(&mut self, took: Duration) {
        if took < SLOW_SYNC {
            return;
        }
        Metrics::inc(&self.metrics.log_slow_syncs);
        let (last, unreported) = &mut self.slow_syncs;
        *unreported += 1;
        if last.is_some_and(|at| at.elapsed() < SLOW_SYNC_WARNING_INTERVAL) {
            return;
        }
        let earlier = match *unreported - 1 {
            0 => String::new(),
            n => format!(
                " (and {n} more over {} ms since the last warning)",
                SLOW_SYNC.as_millis()
            ),
        };
        log::warn!(
            "node log: a batch's write and fsync took {} ms{earlier}; every acknowledgement on \
             this node waited for it (the disk is slow or busy)",
            took.as_millis()
        );
        *last = Some(Instant::now());
        *unreported = 0;
    }

    /// After a failed write or fsync: cuts the segment back to its last synced length (a torn
    /// record must never sit before a good one); a segment that cannot be cut is given up and
    /// the next write starts a fresh one. Returns the original error.
    fn cut_back(&mut self, error: io::Error) -> io::Error {
        if let Some(file) = self.file.as_mut() {
            let cut = file.set_len(self.synced_len).and_then(|()| {
                use std::io::Seek;
                file.seek(io::SeekFrom::Start(self.synced_len)).map(|_| ())
            });
            if cut.is_err() {
                self.file = None;
            }
        }
        Metrics::add(
            &self.metrics.wal_bytes,
            -((self.len - self.synced_len) as i64),
        );
        self.len = self.synced_len;
        error
    }

    /// Starts the next segment and hands the older ones to the checkpointer; checkpoints
    /// inline when too many wait already.
    fn roll(&mut self) {
        let next = self.seq + 1;
        if let Err(e) = self.start_segment(next) {
            log::error!("node log: cannot start segment {next}: {e}");
            return;
        }
        let removed = self
            .removed_below
            .load(std::sync::atomic::Ordering::Acquire);
        if (next - removed) as usize > MAX_WAITING_SEGMENTS {
            log::warn!(
                "node log: {} segments wait for a checkpoint; checkpointing before going on",
                next - removed
            );
            if let Err(e) = self.checkpoint_inline() {
                log::error!("node log: checkpoint failed (segments kept, retrying later): {e}");
            }
        } else {
            let files = std::mem::take(&mut self.segment_files)
                .into_iter()
                .collect();
            let _ = self.checkpointer.send(CheckpointRequest {
                below: next,
                files,
                done: None,
            });
        }
    }

    /// When idle with records in the current segment: roll, so the checkpointer takes it.
    pub fn idle(&mut self) {
        if self.has_records && self.file.is_some() {
            // A segment is handed over only once synced: a torn tail in an older segment
            // would hide nothing, as every later record was synced after it.
            match self.sync() {
                Ok(()) if self.has_records => self.roll(),
                Ok(()) => {}
                Err(e) => log::error!("node log: idle sync failed: {e}"),
            }
        }
    }

    /// Whether the idle checkpoint has something to do.
    pub fn wants_idle_checkpoint(&self) -> bool {
        self.has_records
    }

    /// Starts a fresh segment and checkpoints everything before it on this thread (clean
    /// shutdown, and backpressure when checkpoints fall behind). Returns the outcome.
    pub fn checkpoint_inline(&mut self) -> io::Result<()> {
        self.sync()?;
        if self.has_records || self.file.is_none() {
            self.start_segment(self.seq + 1)?;
        }
        let (done, outcome) = std_mpsc::channel();
        let files = std::mem::take(&mut self.segment_files)
            .into_iter()
            .collect();
        self.checkpointer
            .send(CheckpointRequest {
                below: self.seq,
                files,
                done: Some(done),
            })
            .map_err(|_| io::Error::other("the checkpoint thread has stopped"))?;
        outcome
            .recv()
            .map_err(|_| io::Error::other("the checkpoint thread has stopped"))?
            .map_err(io::Error::other)
    }
}

mod checkpoint;
mod replay;
#[cfg(test)]
mod tests;
