//! [`Hold`]: one writer thread's stop at a snapshot's point. The snapshot (`snapshot.rs`)
//! queues one on each writer (`log_writer.rs`, `journal.rs`); each writer runs it when it
//! reaches it. Its own module so the writers and the snapshot do not need each other.

use std::sync::mpsc as std_mpsc;

/// One writer thread's stop at the snapshot point, queued as a job on it.
pub struct Hold {
    /// Told once the thread reached the hold: everything queued before it is written.
    arrived: std_mpsc::Sender<()>,
    /// The thread waits here until the snapshot drops the other end (release).
    release: std_mpsc::Receiver<()>,
}

impl Hold {
    /// A hold that reports to `arrived` and waits on `release`.
    pub(super) fn new(arrived: std_mpsc::Sender<()>, release: std_mpsc::Receiver<()>) -> Hold {
        Hold { arrived, release }
    }

    /// A hold for a test: the receiver hears once the writer thread stopped at it, and the
    /// thread goes on once both returned ends are dropped.
    #[cfg(test)]
    pub(crate) fn for_test() -> (Hold, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
        let (arrived, reached) = std_mpsc::channel();
        let (release, wait) = std_mpsc::channel();
        let hold = Hold {
            arrived,
            release: wait,
        };
        (hold, reached, release)
    }

    /// Run by the writer thread when it reaches the hold: reports, then waits for the release.
    /// Returns at once if the snapshot has given up.
    pub fn wait(self) {
        let Hold { arrived, release } = self;
        if arrived.send(()).is_ok() {
            // Dropped before waiting, so a snapshot whose other hold was lost sees it.
            drop(arrived);
            let _ = release.recv();
        }
    }
}
