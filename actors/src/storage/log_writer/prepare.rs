//! Files made ahead of their first write: a new conversation's display log, request journal
//! and chat history (and the directories above them) are created while the writer thread has
//! nothing else to do, so its first turn does not pay for them.
//!
//! Why: creating a file or a directory allocates an inode, and on ext4 that costs 0.1–0.5 ms
//! once many files were deleted in the last half minute (the allocator skips recently freed
//! inodes, reading the inode table for each; a build or a test run beside the server does
//! that). A first turn writes three files under three new directories, all on the writer
//! thread, so every other conversation's acknowledgement in that batch waited for six inode
//! allocations.
//!
//! Who talks to it: a conversation that loads without a display log sends
//! [`LogWriter::prepare`](super::LogWriter::prepare); the writer thread queues the paths here
//! and creates one per idle moment ([`WriterState::prepare_next`]), between batches, never
//! inside one. A path written, closed, forgotten or retired before its turn comes is dropped
//! from the queue: a deleted conversation's directory is never made again.
//!
//! Durability: a prepared file holds nothing, so losing it in a crash loses nothing. Its
//! directory entries are made durable as those of a file the first append creates: by the
//! node log's checkpoint (recorded in the current segment, which is never removed before the
//! segments holding the file's later appends), or at once without the log.
//!
//! Pace: an inode costs CPU as well as time (0.1–0.2 ms of the writer's CPU each on this
//! machine), and a thousand new conversations make 5,000 of them. Made as fast as the writer
//! can, they took a third of a two-core machine while 10,000 clients were connecting and
//! joining (`rooms`), so every join waited longer. While the rest of the server keeps more
//! than [`BUSY_SHARE`] of a core busy ([`BusyGauge`]), one file is made every [`BUSY_PACE`] at
//! most; once it is quiet again, the rest follow one per idle moment.
//!
//! Bound: [`MAX_PREPARED_PATHS`] queued; past it a path is not prepared (its first append
//! creates it, as before).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::WriterState;
use crate::metrics::Metrics;

/// Paths queued for creation at most (three per new conversation).
pub const MAX_PREPARED_PATHS: usize = 3 * 1024;

/// How often [`BusyGauge`] samples the server's CPU time.
const BUSY_WINDOW: Duration = Duration::from_millis(10);

/// The share of one core the server's other threads may use over [`BUSY_WINDOW`] before
/// preparing slows to [`BUSY_PACE`].
const BUSY_SHARE: f64 = 0.5;

/// One file per this while the server is busy: ~1% of a core, and a path still gets made
/// under load that never stops (tests wait for it).
const BUSY_PACE: Duration = Duration::from_millis(20);

/// Whether the server's threads other than the writer keep a core busy: the process's CPU
/// time minus the writer thread's own, over the last [`BUSY_WINDOW`]. Only the writer
/// thread uses it (the thread clock is the caller's).
pub(super) struct BusyGauge {
    /// When the last sample was taken (`None`: none yet).
    sampled_at: Option<Instant>,
    /// The other threads' CPU time at that sample.
    others_cpu: Duration,
    /// Whether they used more than [`BUSY_SHARE`] of a core in the window before it.
    busy: bool,
    /// When a file was last made while busy (for [`BUSY_PACE`]).
    last_busy_prepare: Option<Instant>,
}

impl BusyGauge {
    pub(super) fn new() -> BusyGauge {
        BusyGauge {
            sampled_at: None,
            others_cpu: Duration::ZERO,
            busy: false,
            last_busy_prepare: None,
        }
    }

    /// Samples again when a window has passed; then whether the server is busy. The first
    /// call only takes the first sample (on the writer's thread, whose clock it reads).
    fn busy(&mut self) -> bool {
        let now = Instant::now();
        let Some(sampled_at) = self.sampled_at else {
            self.sampled_at = Some(now);
            self.others_cpu = others_cpu_time();
            return false;
        };
        let elapsed = now.duration_since(sampled_at);
        if elapsed >= BUSY_WINDOW {
            let cpu = others_cpu_time();
            let used = cpu.saturating_sub(self.others_cpu);
            self.busy = used.as_secs_f64() > BUSY_SHARE * elapsed.as_secs_f64();
            self.sampled_at = Some(now);
            self.others_cpu = cpu;
        }
        self.busy
    }

    /// How long the writer waits before its next look at the queue: at once while quiet;
    /// while busy, until the next sample or the pace allows a file, whichever comes first.
    fn next_look(&self) -> Duration {
        if !self.busy {
            return Duration::ZERO;
        }
        let sample = self.sampled_at.map_or(Duration::ZERO, |at| {
            BUSY_WINDOW.saturating_sub(at.elapsed())
        });
        let pace = self
            .last_busy_prepare
            .map_or(Duration::ZERO, |at| BUSY_PACE.saturating_sub(at.elapsed()));
        sample.min(pace)
    }

    /// Whether a file may be made now, and notes it when the server is busy.
    fn may_prepare(&mut self) -> bool {
        if !self.busy() {
            return true;
        }
        if self
            .last_busy_prepare
            .is_some_and(|at| at.elapsed() < BUSY_PACE)
        {
            return false;
        }
        self.last_busy_prepare = Some(Instant::now());
        true
    }
}

/// The CPU time of the process's threads but the calling one.
fn others_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
        .saturating_sub(cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID))
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks exist on every Linux.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl WriterState {
    /// Queues `paths` for creation at the writer's next idle moments.
    pub(super) fn queue_prepare(&mut self, paths: Vec<std::sync::Arc<Path>>) {
        for path in paths {
            if self.to_prepare.len() >= MAX_PREPARED_PATHS {
                log::debug!(
                    "log writer: {} files wait to be prepared; {} is created by its first write",
                    self.to_prepare.len(),
                    path.display()
                );
                continue;
            }
            if !self.files.contains_key(path.as_ref()) && !self.is_retired(&path) {
                self.to_prepare.push_back(path.to_path_buf());
            }
        }
    }

    /// How long the writer may wait for a job before it looks at the queue again, when a
    /// creation waits (`None`: none waits).
    pub(super) fn prepare_wait(&self) -> Option<Duration> {
        self.has_prepare_work().then(|| self.busy_gauge.next_look())
    }

    /// Whether a queued creation waits for an idle moment.
    pub(super) fn has_prepare_work(&self) -> bool {
        #[cfg(test)]
        if !self.prepare_waiters.is_empty() {
            return true;
        }
        !self.to_prepare.is_empty()
    }

    /// Drops queued creations at or under `path` (it was closed, forgotten or retired).
    pub(super) fn cancel_prepare(&mut self, path: &Path) {
        self.to_prepare.retain(|p| !p.starts_with(path));
    }

    /// Creates the next queued file (and the directories above it) that does not exist yet;
    /// one per call, so a batch that arrives meanwhile waits for at most one. Paced while the
    /// server is busy.
    pub(super) fn prepare_next(&mut self) {
        if !self.has_prepare_work() || !self.busy_gauge.may_prepare() {
            return;
        }
        while let Some(path) = self.to_prepare.pop_front() {
            if self.files.contains_key(&path) || self.is_retired(&path) || path.exists() {
                continue;
            }
            self.create_empty(path);
            break;
        }
        #[cfg(test)]
        if self.to_prepare.is_empty() {
            for waiter in self.prepare_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Creates `path` empty; the handle is not kept (the first append opens it again, which
    /// costs no inode).
    fn create_empty(&mut self, path: PathBuf) {
        match self.open(&path) {
            Ok(_) => Metrics::inc(&self.metrics.prepared_files),
            // Not an error anyone waits for: the first append tries again and reports it.
            Err(e) => log::warn!("log writer: cannot prepare {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Another thread that keeps a core busy makes the gauge say so, and preparing then
    /// waits [`BUSY_PACE`] between files; the writer's own CPU time does not count.
    #[test]
    fn a_busy_server_paces_the_files_made_ahead() {
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        };
        let mut gauge = BusyGauge::new();
        assert!(!gauge.busy(), "the first call only samples");
        // Event-driven: look until the spinner has shown up in a window (it runs from the
        // start; a loaded machine only makes that sooner), with a generous bound.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !gauge.busy() {
            assert!(
                Instant::now() < deadline,
                "a spinning thread never made the gauge busy"
            );
            std::thread::sleep(BUSY_WINDOW);
        }
        assert!(
            gauge.may_prepare(),
            "the first file while busy is made at once"
        );
        assert!(!gauge.may_prepare(), "the next one waits for the pace");
        assert!(gauge.next_look() <= BUSY_PACE);
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
    }
}
