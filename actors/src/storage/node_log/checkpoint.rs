//! The node log's checkpoints: the checkpointer thread fsyncs the files (and directories)
//! finished segments wrote, then removes those segments. Fed by [`NodeLog`](super::NodeLog)
//! when it rolls to a new segment, goes idle or checkpoints itself.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::segments;
use crate::metrics::Metrics;
use crate::storage::faults;

/// Removes the segments of `dir` numbered below `below`, then fsyncs `dir`; takes their
/// bytes off the `wal_bytes` gauge.
pub(super) fn remove_segments_below(
    dir: &Path,
    below: u64,
    metrics: &Metrics,
) -> io::Result<usize> {
    let mut removed = 0;
    for (seq, path) in segments(dir)? {
        if seq >= below {
            break;
        }
        let bytes = fs::metadata(&path).map_or(0, |m| m.len());
        match fs::remove_file(&path) {
            Ok(()) => {
                removed += 1;
                Metrics::add(&metrics.wal_bytes, -(bytes as i64));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    File::open(dir)?.sync_all()?;
    Ok(removed)
}

/// A request to the checkpointer: the segments below `below` may go once `files` (every
/// file their records wrote) are fsynced; `done` (the writer's own checkpoints) is told the
/// outcome.
pub(super) struct CheckpointRequest {
    /// The first segment that stays.
    pub(super) below: u64,
    /// Every file (and directory with new entries) the segments' records rely on.
    pub(super) files: Vec<PathBuf>,
    /// Told the outcome (the writer's own checkpoints); `None` for a roll.
    pub(super) done: Option<std_mpsc::Sender<Result<(), String>>>,
}

/// fsyncs each file, and each directory whose entries changed (one that is gone was
/// deleted: nothing to keep).
fn fsync_files(files: &HashSet<PathBuf>, metrics: &Metrics) -> io::Result<()> {
    for path in files {
        Metrics::inc(&metrics.log_fsyncs);
        match File::open(path) {
            Ok(f) => faults::check("fsync", path)
                .and_then(|()| match f.metadata()?.is_dir() {
                    true => f.sync_all(),
                    false => f.sync_data(),
                })
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }
    Ok(())
}

/// The checkpointer thread: fsyncs the files the finished segments wrote, one by one (a few
/// short fsyncs interleave with the writer's own, where flushing the whole file system at once
/// made them wait behind it), then removes the segments. A failed checkpoint keeps everything
/// and is tried again every second.
pub(super) fn run_checkpointer(
    dir: PathBuf,
    requests: std_mpsc::Receiver<CheckpointRequest>,
    removed_below: Arc<std::sync::atomic::AtomicU64>,
    metrics: Arc<Metrics>,
) {
    let mut want: Option<u64> = None;
    let mut files: HashSet<PathBuf> = HashSet::new();
    let mut waiting: Vec<(std_mpsc::Sender<Result<(), String>>, bool)> = Vec::new();
    loop {
        let next = match want {
            Some(_) => requests.recv_timeout(Duration::from_secs(1)),
            None => requests
                .recv()
                .map_err(|_| std_mpsc::RecvTimeoutError::Disconnected),
        };
        let mut take = |request: CheckpointRequest| {
            want = Some(want.map_or(request.below, |w| w.max(request.below)));
            files.extend(request.files);
            if let Some(done) = request.done {
                waiting.push((done, true));
            }
        };
        match next {
            Ok(request) => take(request),
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
        }
        while let Ok(request) = requests.try_recv() {
            take(request);
        }
        let Some(below) = want else { continue };
        // The writer's own checkpoints (clean stop, backpressure) are never held.
        let held = waiting.is_empty();
        let started = Instant::now();
        let outcome = fsync_files(&files, &metrics).and_then(|()| {
            if held {
                faults::wal_hold("checkpoint");
            }
            remove_segments_below(&dir, below, &metrics)
        });
        match outcome {
            Ok(removed) => {
                Metrics::inc(&metrics.wal_checkpoints);
                log::debug!(
                    "node log: checkpoint fsynced {} files and removed {removed} segments below {below} in {:.1} ms",
                    files.len(),
                    started.elapsed().as_secs_f64() * 1000.0
                );
                removed_below.fetch_max(below, std::sync::atomic::Ordering::Release);
                want = None;
                files.clear();
                for (done, _) in waiting.drain(..) {
                    let _ = done.send(Ok(()));
                }
            }
            Err(e) => {
                log::error!("node log: checkpoint failed (segments kept, retrying): {e}");
                for (done, _) in waiting.drain(..) {
                    let _ = done.send(Err(e.to_string()));
                }
            }
        }
    }
}
