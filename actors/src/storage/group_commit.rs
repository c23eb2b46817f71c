//! The batching writer thread behind each of the storage layer's two writers: the
//! [`LogWriter`](super::log_writer::LogWriter) (display logs, chat histories, request journals)
//! and the [`RegistryWriter`](super::journal::RegistryWriter) (`conversations.journal`) each
//! start one [`GroupCommit`], so a server runs two of these threads.
//!
//! A [`GroupCommit`] owns one thread and a queue. Producers [`send`](GroupCommit::send) jobs and
//! go on; the thread waits for a job, then takes *everything* that queued up meanwhile as one
//! batch and hands it to its [`Committer`], which writes the batch and fsyncs each touched file
//! once (group commit: one fsync serves every job that arrived while the last one ran). Only
//! then are the batch's jobs answered, so an answer always means "on disk".
//!
//! # Guarantees
//! - Jobs reach the committer in the order they were sent (one channel, one thread).
//! - A batch's weight is released *before* its answers go out: a paused producer can go on as
//!   soon as the bytes are written, without waiting for the acknowledgements.
//! - A panic in the committer ends the thread and counts it in
//!   [`Metrics::dead_writers`](crate::metrics::Metrics::dead_writers) (`/health` turns 503);
//!   later sends fail and each writer answers them with an error.
//!
//! # Bound
//! Every job has a weight ([`Committer::weight`], the bytes it holds). The queue counts the
//! weight sent and not yet committed ([`GroupCommit::queued_weight`]); producers that must stay
//! bounded check it against a high-water mark and wait for it to fall below a low-water mark
//! ([`GroupCommit::wait_below`]). The log writer pauses conversations this way (32 MiB /
//! 16 MiB). The registry writer's jobs weigh nothing: each is an RPC some connection awaits,
//! so its queue is bounded by its callers (sockets ×
//! [`MAX_IN_FLIGHT`](crate::protocol::MAX_IN_FLIGHT)). A batch is whatever is queued when the
//! thread wakes, so it is bounded by the same limits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::metrics::Metrics;

/// What a [`GroupCommit`] thread runs: it commits batches of jobs and answers them.
pub trait Committer: Send + 'static {
    /// What producers queue.
    type Job: Send + 'static;
    /// The answers a committed batch still owes, sent after its weight is released.
    type Answers;

    /// Bytes `job` holds while queued; counts toward the queue's bound. Zero by default.
    fn weight(_job: &Self::Job) -> usize {
        0
    }

    /// How long to wait for a job before [`idle`](Committer::idle) runs; `None` waits forever.
    fn idle_timeout(&self) -> Option<Duration> {
        None
    }

    /// Runs when no job came within [`idle_timeout`](Committer::idle_timeout).
    fn idle(&mut self) {}

    /// Runs once the first job of a batch arrived, before the rest of the queue is taken:
    /// whatever is sent meanwhile joins this batch.
    fn before_batch(&mut self) {}

    /// How long the batch taken so far may wait for more jobs before it is committed (`None`:
    /// commit at once). Asked once per batch, after the queue was taken.
    fn linger(&self, _batch: &[Self::Job]) -> Option<Duration> {
        None
    }

    /// Whether `job`, arriving while a batch lingers, ends the wait (the batch is committed
    /// with it and whatever is queued behind it).
    fn ends_linger(_job: &Self::Job) -> bool {
        true
    }

    /// Writes the batch (in order) and makes it durable; returns what is left to answer.
    fn commit(&mut self, batch: Vec<Self::Job>) -> Self::Answers;

    /// Sends the answers of a committed batch.
    fn answer(&mut self, answers: Self::Answers);
}

/// The queue's shared counters.
struct Queue {
    /// Weight of the jobs sent and not yet committed.
    queued: AtomicUsize,
    /// Woken after every batch, for producers waiting on [`GroupCommit::wait_below`].
    drained: Notify,
}

/// Handle to a writer thread; cheap to clone. Dropping every handle ends the thread after it
/// has committed what it was given.
pub struct GroupCommit<C: Committer> {
    /// The job queue; its receiver is the thread's.
    tx: std_mpsc::Sender<C::Job>,
    /// Queued weight and the drained signal, shared with the thread.
    queue: Arc<Queue>,
}

impl<C: Committer> Clone for GroupCommit<C> {
    fn clone(&self) -> Self {
        GroupCommit {
            tx: self.tx.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl<C: Committer> GroupCommit<C> {
    /// Starts the thread `name` running `committer`; its death is counted in `metrics`.
    pub fn start(name: &str, committer: C, metrics: Arc<Metrics>) -> GroupCommit<C> {
        let (tx, rx) = std_mpsc::channel();
        let queue = Arc::new(Queue {
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
        });
        let thread_queue = queue.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(rx, committer, &thread_queue)
                }));
                if ended.is_err() {
                    Metrics::inc(&metrics.dead_writers);
                }
            })
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        GroupCommit { tx, queue }
    }

    /// Queues a job; gives it back when the thread has ended.
    pub fn send(&self, job: C::Job) -> Result<(), C::Job> {
        let weight = C::weight(&job);
        self.queue.queued.fetch_add(weight, Ordering::Relaxed);
        self.tx.send(job).map_err(|std_mpsc::SendError(job)| {
            self.queue.queued.fetch_sub(weight, Ordering::Relaxed);
            job
        })
    }

    /// Weight queued and not yet committed.
    pub fn queued_weight(&self) -> usize {
        self.queue.queued.load(Ordering::Relaxed)
    }

    /// Resolves once the queued weight is below `limit`.
    pub async fn wait_below(&self, limit: usize) {
        loop {
            let notified = self.queue.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.queue.queued.load(Ordering::Relaxed) < limit {
                return;
            }
            notified.await;
        }
    }
}

/// The thread: wait for a job, take the queue as one batch, commit, release, answer.
fn run<C: Committer>(rx: std_mpsc::Receiver<C::Job>, mut committer: C, queue: &Queue) {
    loop {
        let first = match committer.idle_timeout() {
            Some(timeout) => match rx.recv_timeout(timeout) {
                Ok(job) => job,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    committer.idle();
                    continue;
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        committer.before_batch();
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        if let Some(wait) = committer.linger(&batch) {
            let deadline = Instant::now() + wait;
            while let Ok(job) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                let ends = C::ends_linger(&job);
                batch.push(job);
                if ends {
                    break;
                }
            }
            batch.extend(rx.try_iter());
        }
        let weight: usize = batch.iter().map(C::weight).sum();
        let answers = committer.commit(batch);
        // The batch is written: producers may go on before the acknowledgements go out.
        queue.queued.fetch_sub(weight, Ordering::Relaxed);
        queue.drained.notify_waiters();
        committer.answer(answers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each batch; waits for the test before it takes a batch and after it answered.
    struct Recorder {
        /// Each `recv` waits for the test to let the thread go on.
        gate: std_mpsc::Receiver<()>,
        /// Each answered batch.
        batches: std_mpsc::Sender<Vec<u32>>,
    }

    impl Committer for Recorder {
        type Job = u32;
        type Answers = Vec<u32>;
        fn weight(job: &u32) -> usize {
            *job as usize
        }
        fn before_batch(&mut self) {
            let _ = self.gate.recv();
        }
        fn commit(&mut self, batch: Vec<u32>) -> Vec<u32> {
            batch
        }
        fn answer(&mut self, batch: Vec<u32>) {
            let _ = self.batches.send(batch);
            let _ = self.gate.recv();
        }
    }

    /// Jobs sent while a batch is held join it, in order, and a batch's weight is released
    /// before it is answered.
    #[test]
    fn jobs_queued_meanwhile_form_one_batch_in_order() {
        let (step, gate) = std_mpsc::channel();
        let (batches_tx, batches) = std_mpsc::channel();
        let recorder = Recorder {
            gate,
            batches: batches_tx,
        };
        let writer = GroupCommit::start("group-commit-test", recorder, Default::default());
        for job in [1, 2, 3] {
            writer.send(job).unwrap();
        }
        assert_eq!(writer.queued_weight(), 6);
        step.send(()).unwrap();
        assert_eq!(batches.recv().unwrap(), [1, 2, 3]);
        // The thread is inside `answer` now: the weight is already released.
        assert_eq!(writer.queued_weight(), 0);
        step.send(()).unwrap();
        writer.send(4).unwrap();
        step.send(()).unwrap();
        assert_eq!(batches.recv().unwrap(), [4]);
        step.send(()).unwrap();
    }

    /// Lingers on a batch whose jobs are all odd: `wait` long; an even job ends the wait.
    struct Lingerer {
        wait: Duration,
        batches: std_mpsc::Sender<Vec<u32>>,
        /// Told each time a batch starts to linger.
        lingering: std_mpsc::Sender<()>,
    }

    impl Committer for Lingerer {
        type Job = u32;
        type Answers = Vec<u32>;
        fn linger(&self, batch: &[u32]) -> Option<Duration> {
            let linger = batch.iter().all(|j| !j.is_multiple_of(2));
            if linger {
                let _ = self.lingering.send(());
            }
            linger.then_some(self.wait)
        }
        fn ends_linger(job: &u32) -> bool {
            job.is_multiple_of(2)
        }
        fn commit(&mut self, batch: Vec<u32>) -> Vec<u32> {
            batch
        }
        fn answer(&mut self, batch: Vec<u32>) {
            let _ = self.batches.send(batch);
        }
    }

    /// A thread running a [`Lingerer`] that waits `wait`; the receivers get its committed
    /// batches and a message each time a batch starts to linger.
    fn start_lingerer(
        wait: Duration,
    ) -> (
        GroupCommit<Lingerer>,
        std_mpsc::Receiver<Vec<u32>>,
        std_mpsc::Receiver<()>,
    ) {
        let (batches_tx, batches) = std_mpsc::channel();
        let (lingering_tx, lingering) = std_mpsc::channel();
        let lingerer = Lingerer {
            wait,
            batches: batches_tx,
            lingering: lingering_tx,
        };
        let writer = GroupCommit::start("group-commit-linger", lingerer, Default::default());
        (writer, batches, lingering)
    }

    /// A lingering batch takes the jobs that come while it waits, until one that ends the
    /// wait: everything then goes in one commit, in order.
    #[test]
    fn a_lingering_batch_takes_jobs_until_one_ends_the_wait() {
        // Long enough that only the ending job can close the batch.
        let (writer, batches, lingering) = start_lingerer(Duration::from_secs(600));
        writer.send(1).unwrap();
        // The batch [1] was taken and waits: what comes now joins it.
        lingering.recv().unwrap();
        for job in [3, 5, 4] {
            writer.send(job).unwrap();
        }
        assert_eq!(batches.recv().unwrap(), [1, 3, 5, 4]);
        // A batch that does not linger is committed at once.
        writer.send(2).unwrap();
        assert_eq!(batches.recv().unwrap(), [2]);
    }

    /// A lingering batch nothing joins is committed when its wait is over.
    #[test]
    fn a_lingering_batch_is_committed_when_the_wait_is_over() {
        let (writer, batches, _lingering) = start_lingerer(Duration::from_millis(1));
        writer.send(7).unwrap();
        assert_eq!(batches.recv().unwrap(), [7]);
    }
}
