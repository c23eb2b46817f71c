//! The writer thread's answers to a failing disk: when the node log's write or fsync fails,
//! the files (and the directories above them) its unsynced records covered are fsynced one by
//! one instead, so the batch's barriers stay truthful; while writes fail, a small probe file
//! tells when the disk is back.
//!
//! Who talks to it: the batch commit (`batch.rs`) calls [`WriterState::commit_log`]; the
//! idle duty calls [`WriterState::probe`].

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{faults, WriterState, PROBE_FILE_NAME};
use crate::metrics::Metrics;
use crate::storage::{self, node_log};

impl WriterState {
    /// fsyncs `path` through its handle, or by opening it (a file that does not exist has
    /// nothing to lose).
    pub(super) fn fsync_by_path(&mut self, path: &Path) -> std::io::Result<()> {
        if self.files.contains_key(path) {
            return if self.fsync(path) {
                Ok(())
            } else {
                Err(std::io::Error::other("fsync failed"))
            };
        }
        Metrics::inc(&self.metrics.log_fsyncs);
        match File::open(path) {
            Ok(f) => faults::check("fsync", path).and_then(|()| f.sync_data()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes the node log's pending records and, when `sync` (something waits for them),
    /// fsyncs the log. When that fails, the files its unsynced records covered are fsynced one
    /// by one instead (their barriers stay truthful) and the log's failure is reported; the
    /// error is returned for a caller that needs the log itself.
    pub(super) fn commit_log(&mut self, sync: bool) -> std::io::Result<()> {
        let Some(wal) = self.wal.as_mut() else {
            return Ok(());
        };
        let result = if sync { wal.sync() } else { wal.write() };
        match result {
            Ok(()) if !sync => Ok(()),
            Ok(()) => {
                for path in self.logged_unsynced.drain() {
                    if let Some(open) = self.files.get_mut(&path) {
                        open.unsynced = false;
                    }
                }
                Ok(())
            }
            Err(e) => {
                let log_path = self.probe_dir.join(node_log::DIR_NAME);
                let failure = storage::failure("append to", &log_path, &e);
                log::error!("{}; fsyncing the batch's files instead", failure.operator);
                self.metrics.storage_failed(failure);
                let unsynced: Vec<PathBuf> = self.logged_unsynced.drain().collect();
                for path in &unsynced {
                    if !self.files.contains_key(path) {
                        // Closed during the batch (its bytes are in the page cache), or a
                        // new directory.
                        if let Err(e) = self.fsync_by_path(path) {
                            self.fail(path, "fsync of", e, true);
                        }
                    } else {
                        self.fsync(path);
                    }
                }
                // The directories above them too: a file created (or prepared) in an earlier
                // batch has its entry made durable only by a checkpoint that may not have
                // run yet, and the records that would recreate it are the ones that failed.
                let mut above: HashSet<PathBuf> = HashSet::new();
                for path in &unsynced {
                    for dir in path.ancestors().skip(1) {
                        if dir == self.probe_dir || !dir.starts_with(&self.probe_dir) {
                            break;
                        }
                        above.insert(dir.to_path_buf());
                    }
                }
                for dir in above {
                    if let Err(e) = self.fsync_by_path(&dir) {
                        // Reported to `/health` here, and to the barriers of the files below.
                        let client = storage::failure("fsync of", &dir, &e).client;
                        self.fail(&dir, "fsync of", e, false);
                        for file in unsynced.iter().filter(|f| f.starts_with(&dir)) {
                            self.errors
                                .entry(file.clone())
                                .or_insert_with(|| client.clone());
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// While writes fail: write, fsync and remove a small file to see whether the disk is
    /// back, and clear the failure when it is.
    pub(super) fn probe(&mut self) {
        let probe = self.probe_dir.join(PROBE_FILE_NAME);
        let ok = faults::check("probe", &probe)
            .and_then(|()| {
                let mut f = File::create(&probe)?;
                f.write_all(b"probe")?;
                f.sync_data()
            })
            .is_ok();
        let _ = std::fs::remove_file(&probe);
        if ok {
            self.metrics.storage_ok();
        }
    }
}
