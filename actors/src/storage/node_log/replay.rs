//! The node log's start-up replay: the records a crash left are written back at their offsets
//! into their files (runs of contiguous records in one `pwrite`), superseded ones skipped,
//! missing files and directories created, then the file systems flushed. Called by
//! [`NodeLog::open`](super::NodeLog::open) before anything reads a conversation file.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{safe_relative, Record, Replayed};
use crate::storage::durable::{create_dir_durable, fsync_dir, private_file_options};
use crate::storage::{faults, io_err, StoreError};

/// Flushes every dirty page of the file systems holding `roots` (one `syncfs` each), so
/// every file written before is on disk.
fn flush_file_systems(roots: &[File]) -> io::Result<()> {
    for root in roots {
        faults::check("fsync", Path::new("syncfs"))?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: `syncfs` takes a descriptor we own and has no other effect on memory.
            if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = root;
            // SAFETY: `sync` has no arguments and no effect on memory.
            unsafe { libc::sync() };
        }
    }
    Ok(())
}

/// Opens the directories whose file systems a checkpoint flushes: the instance directory and,
/// when it is another file system, its `conversations/` directory.
fn flush_roots(root: &Path) -> io::Result<Vec<File>> {
    use std::os::unix::fs::MetadataExt;
    let top = File::open(root)?;
    let mut roots = vec![top];
    let conversations = root.join("conversations");
    if let Ok(dir) = File::open(&conversations) {
        if dir.metadata()?.dev() != roots[0].metadata()?.dev() {
            roots.push(dir);
        }
    }
    Ok(roots)
}

/// A file being written back by replay: its handle, its length, and the run of contiguous
/// records not written yet (one `pwrite` per run instead of one per record).
struct ReplayFile {
    file: File,
    len: u64,
    run_at: u64,
    run: Vec<u8>,
}

impl ReplayFile {
    /// Bytes a run holds at most before it is written.
    const RUN_BYTES: usize = 256 << 10;

    fn flush(&mut self, path: &Path) -> Result<(), StoreError> {
        if !self.run.is_empty() {
            self.file
                .write_all_at(&self.run, self.run_at)
                .map_err(io_err(path))?;
            self.run.clear();
        }
        Ok(())
    }
}

/// Writes the replayed records into their files, then flushes the file systems (one `syncfs`
/// however many files) and fsyncs the directories of the files written.
pub(super) fn apply(
    root: &Path,
    records: &[Record],
    replayed: &mut Replayed,
) -> Result<(), StoreError> {
    // The last replace marker per file and retire marker per directory: what precedes them
    // no longer applies.
    let mut replaced_at: HashMap<&Path, usize> = HashMap::new();
    let mut retired_at: HashMap<&Path, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        match record {
            Record::Replace(p) => {
                replaced_at.insert(p, i);
            }
            Record::Retire(p) => {
                retired_at.insert(p, i);
            }
            Record::Append { .. } => {}
        }
    }
    let mut dir_exists: HashMap<&Path, bool> = HashMap::new();
    let mut open: HashMap<&Path, ReplayFile> = HashMap::new();
    let mut written: HashSet<&Path> = HashSet::new();
    for (i, record) in records.iter().enumerate() {
        let Record::Append {
            path,
            offset,
            bytes,
        } = record
        else {
            continue;
        };
        let superseded = replaced_at.get(path.as_path()).is_some_and(|&at| at > i)
            || path
                .ancestors()
                .skip(1)
                .any(|dir| retired_at.get(dir).is_some_and(|&at| at > i));
        if superseded || !safe_relative(path) {
            replayed.skipped += 1;
            continue;
        }
        // A missing directory was created after the last checkpoint and its entry never
        // reached the disk (the writer leaves new entries to the checkpoint). A deleted
        // conversation's directory is missing too, but its delete logged a retire marker
        // after these records (superseded above).
        let parent = path.parent().unwrap_or(Path::new(""));
        let exists = dir_exists
            .entry(parent)
            .or_insert_with(|| root.join(parent).is_dir());
        if !*exists {
            create_dir_durable(&root.join(parent))?;
            *exists = true;
        }
        if !open.contains_key(path.as_path()) {
            if open.len() >= 256 {
                for (path, mut file) in open.drain() {
                    file.flush(&root.join(path))?;
                }
            }
            let full = root.join(path);
            let file = private_file_options().open(&full).map_err(io_err(&full))?;
            let len = file.metadata().map_err(io_err(&full))?.len();
            open.insert(
                path,
                ReplayFile {
                    file,
                    len,
                    run_at: 0,
                    run: Vec::new(),
                },
            );
        }
        let target = open.get_mut(path.as_path()).expect("opened above");
        let at = if *offset > target.len {
            log::warn!(
                "{}: a replayed append belongs at byte {offset} but the file has {}; appended at its end",
                root.join(path).display(),
                target.len
            );
            target.len
        } else {
            *offset
        };
        if target.run.is_empty() || target.run_at + target.run.len() as u64 != at {
            target.flush(&root.join(path))?;
            target.run_at = at;
        }
        target.run.extend_from_slice(bytes);
        target.len = target.len.max(at + bytes.len() as u64);
        if target.run.len() >= ReplayFile::RUN_BYTES {
            target.flush(&root.join(path))?;
        }
        written.insert(path);
        replayed.appends += 1;
    }
    for (path, mut file) in open.drain() {
        file.flush(&root.join(path))?;
    }
    if !written.is_empty() {
        let roots = flush_roots(root).map_err(io_err(root))?;
        flush_file_systems(&roots).map_err(io_err(root))?;
    }
    // New files' directory entries.
    let dirs: HashSet<&Path> = written.iter().filter_map(|p| p.parent()).collect();
    for dir in dirs {
        fsync_dir(&root.join(dir))?;
    }
    replayed.files = written.len();
    Ok(())
}
