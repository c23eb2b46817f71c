//! One batch on the writer thread: the [`Committer`] that the group-commit thread drives. It
//! writes the batch's jobs in order, makes them durable with one node log fsync (or one per
//! touched file without the log), then answers the barriers; between batches it runs the idle
//! duties (probe, idle checkpoint, files to prepare) and decides whether a batch may linger
//! for the barrier its producer announced.
//!
//! Who talks to it: only the [`GroupCommit`](crate::storage::group_commit::GroupCommit) thread
//! the [`LogWriter`](super::LogWriter) starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{faults, Ack, Dirty, Job, WriterState, SYNC_LINGER};
use crate::metrics::Metrics;
use crate::storage::group_commit::Committer;

/// What a committed batch still owes once its bytes are released.
pub(super) struct BatchAnswers {
    /// Write barriers: the files they name and who waits.
    syncs: Vec<(Vec<Arc<Path>>, Ack)>,
    /// Closes, retires and checkpoints.
    closes: Vec<oneshot::Sender<()>>,
    /// Files closed and directories retired or forgotten by their owners in this batch: an
    /// error their unsynced bytes meet goes to this batch's barriers only (see `answer`).
    closed: Vec<PathBuf>,
}

impl Committer for WriterState {
    type Job = Job;
    type Answers = BatchAnswers;

    fn weight(job: &Job) -> usize {
        match job {
            Job::Append(_, b, _) | Job::Replace(_, b, _) => b.len(),
            _ => 0,
        }
    }

    /// Probe every [`PROBE_INTERVAL`](super::PROBE_INTERVAL) while writes fail, so health
    /// recovers without traffic; checkpoint after [`IDLE_CHECKPOINT`](super::IDLE_CHECKPOINT)
    /// when the node log holds records; both counted from the last batch. Files waiting to be
    /// prepared are made at once, one per wait.
    fn idle_timeout(&self) -> Option<Duration> {
        if self.has_prepare_work() && self.metrics.storage_failure().is_none() {
            return Some(Duration::ZERO);
        }
        self.idle_duty()
            .map(|quiet| quiet.saturating_sub(self.quiet_since.elapsed()))
    }

    fn idle(&mut self) {
        if self
            .idle_duty()
            .is_some_and(|quiet| self.quiet_since.elapsed() >= quiet)
        {
            if self.metrics.storage_failure().is_some() {
                self.probe();
            }
            if let Some(wal) = self.wal.as_mut() {
                wal.idle();
            }
            self.quiet_since = Instant::now();
        }
        if self.metrics.storage_failure().is_none() {
            self.prepare_next();
        }
    }

    /// The slow-writer test seam: jobs sent during the delay join this batch.
    fn before_batch(&mut self) {
        faults::writer_delay();
    }

    /// [`SYNC_LINGER`] when the node log is on and every barrier of the batch expects a
    /// successor; nothing else in it waits.
    fn linger(&self, batch: &[Job]) -> Option<Duration> {
        if self.wal.is_none() || self.metrics.storage_failure().is_some() {
            return None;
        }
        let waits_for_successor = batch.iter().any(|job| matches!(job, Job::Sync(_, _, true)));
        (waits_for_successor && !batch.iter().any(Self::ends_linger))
            .then(|| faults::sync_linger(SYNC_LINGER))
    }

    /// Anything but an append, a prepare or a barrier that expects a successor.
    fn ends_linger(job: &Job) -> bool {
        !matches!(
            job,
            Job::Sync(_, _, true) | Job::Append(..) | Job::Prepare(..)
        )
    }

    /// Appends, replaces, closes and retires in order, then one write and fsync of the node
    /// log (or one fsync per touched file without it).
    fn commit(&mut self, batch: Vec<Job>) -> BatchAnswers {
        self.quiet_since = Instant::now();
        let mut dirty = Dirty::default();
        let mut checkpoints = Vec::new();
        // Whether anything in the batch waits for durability: a batch of plain appends only
        // writes the node log, and the next fsync covers it.
        let sync = batch.iter().any(|job| {
            matches!(
                job,
                Job::Sync(..)
                    | Job::Close(..)
                    | Job::Retire(..)
                    | Job::Forget(..)
                    | Job::Checkpoint(..)
            )
        });
        let mut answers = BatchAnswers {
            syncs: Vec::new(),
            closes: Vec::new(),
            closed: Vec::new(),
        };
        let mut wrote = false;
        let failures_before = Metrics::get(&self.metrics.storage_errors);
        for job in batch {
            match job {
                Job::Append(path, bytes, report) => {
                    self.append(&path, &bytes, report, &mut dirty);
                    wrote = true;
                }
                Job::Sync(paths, ack, _) => answers.syncs.push((paths, ack)),
                // Every append queued before it is in its file now.
                Job::Written(ack) => {
                    let _ = ack.send(());
                }
                Job::Replace(path, bytes, ack) => {
                    let result = self.replace(&path, &bytes, &mut dirty);
                    let _ = ack.send(result);
                }
                Job::Close(path, ack) => {
                    self.close(&path, &mut dirty);
                    answers.closes.push(ack);
                    answers.closed.push(path.to_path_buf());
                }
                Job::Retire(dir, ack) => {
                    answers.closed.push(dir.clone());
                    self.retire(dir, &mut dirty);
                    answers.closes.push(ack);
                }
                Job::Forget(dir, ack) => {
                    self.forget(&dir, &mut dirty);
                    answers.closes.push(ack);
                    answers.closed.push(dir);
                }
                // The jobs before it are written (their fsync follows at the end of the
                // batch): the snapshot links exactly what they wrote.
                Job::Hold(hold) => hold.wait(),
                Job::Checkpoint(ack) => checkpoints.push(ack),
                Job::Prepare(paths) => self.queue_prepare(paths),
                #[cfg(test)]
                Job::WhenPrepared(ack) => self.prepare_waiters.push(ack),
            }
        }
        // A failure is reported inside and the files fsynced one by one instead.
        let _ = self.commit_log(sync);
        for path in std::mem::take(&mut dirty.files) {
            self.fsync(&path);
        }
        if !checkpoints.is_empty() {
            if let Some(wal) = self.wal.as_mut() {
                if let Err(e) = wal.checkpoint_inline() {
                    log::error!("node log: checkpoint failed (the log is kept and replayed at the next start): {e}");
                }
            }
            answers.closes.extend(checkpoints);
        }
        if wrote && Metrics::get(&self.metrics.storage_errors) == failures_before {
            // Every append of this batch landed: the disk works (again).
            self.metrics.storage_ok();
        }
        answers
    }

    /// Each barrier gets the first error an append to one of its files met since the last
    /// barrier naming it.
    fn answer(&mut self, answers: BatchAnswers) {
        for (paths, ack) in answers.syncs {
            Metrics::inc(&self.metrics.log_barriers);
            let mut error = None;
            for p in &paths {
                let e = self.errors.remove(p.as_ref());
                error = error.or(e);
            }
            let _ = ack.send(match error {
                Some(e) => Err(e),
                None => Ok(()),
            });
        }
        // An owner that closed a file (or retired its directory) names it in no later
        // barrier: an error its last unsynced bytes met (the node log's fallback runs after
        // the close) has been reported to this batch's barriers, logged and shown in
        // `/health`; kept, it would refuse the first write of the conversation's next load
        // once the disk is back. A file opened again in this batch keeps its errors.
        let files = &self.files;
        for closed in &answers.closed {
            self.errors
                .retain(|p, _| !p.starts_with(closed) || files.contains_key(p));
        }
        for ack in answers.closes {
            let _ = ack.send(());
        }
    }
}
