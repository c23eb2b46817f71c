//! Files made ahead of their first write: a new conversation's display log, request journal
//! and chat history (and the directories above them) are created while the writer thread has
//! nothing else to do, so its first turn does not pay for them.
//!
//! Why: creating a file or a directory allocates an inode, and on ext4 *without a journal*
//! (the benchmark machine's root) that costs 0.2–0.4 ms once many files were deleted in the
//! last minutes: the allocator skips recently freed inodes, reading the inode table for each,
//! and checks for them only when the file system has no journal (`find_inode_bit` in
//! `fs/ext4/ialloc.c`). A build or a test run beside the server deletes that many. On a
//! journaled ext4 an inode costs ~20 µs here, deletions or not. A first turn writes three files under three new directories, all on the writer
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
//! Bound: [`MAX_PREPARED_PATHS`] queued; past it a path is not prepared (its first append
//! creates it, as before).

use std::path::{Path, PathBuf};

use super::WriterState;
use crate::metrics::Metrics;

/// Paths queued for creation at most (three per new conversation).
pub const MAX_PREPARED_PATHS: usize = 3 * 1024;

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
    /// one per call, so a batch that arrives meanwhile waits for at most one.
    pub(super) fn prepare_next(&mut self) {
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
