//! Consistent snapshots of a running instance, for `roundtable backup` (`GET /backup`): every
//! file of the instance directory exactly as it was at one point of both writers' queues,
//! taken without copying and with the writers held only while it is linked.
//!
//! Every durable write goes through one of two [`GroupCommit`](super::group_commit) threads:
//! the [`LogWriter`] (display logs, chat histories, request journals) and the
//! [`RegistryWriter`] (registry journal, folds, directory removals). [`take`] queues a
//! [`Hold`] on each. A thread that reaches its hold has written everything queued before it
//! and writes nothing more until it is released. Once both are held, every file of the
//! instance is hard-linked into a fresh `<instance>/.backup-<ms>-<n>/` directory and each
//! one's length is recorded: O(files) `link` calls, no data copied. Then both threads are
//! released. The [`Snapshot`] is that link directory: append-only files are read up to
//! their recorded length (later appends to the same inode are cut off), and whole-file
//! rewrites (temp file and rename) give the live path a new inode and leave the linked one
//! as it was. The caller streams the files and drops the snapshot, which removes the
//! directory; [`sweep`] removes one a crash left behind, at startup.
//!
//! # What the point in time holds
//! Everything acknowledged before [`take`] was called: an acknowledgement waits for its
//! write's fsync, and the holds queue behind every earlier write. A registry change is
//! acknowledged only by the registry thread, so a conversation that the registry at the
//! cut does not list (created after it, or deleted before it) may still have files in the
//! link directory; the archive writer leaves those out.
//!
//! # Bounds
//! The writers are held for the link pass only: one `link` and one `stat` per file, plus a
//! `mkdir` per directory (about 30 µs a file on ext4 here: 0.1 s for 1,000 conversations of
//! three files, 1 s for 10,000).
//! Acknowledgements queued meanwhile wait that long; turns go on in memory. A file that
//! cannot be linked (another file system mounted inside the instance directory, a file
//! system without hard links) is copied instead, which holds the writers longer.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::durable::private_dir_builder;
use super::hold::Hold;
use super::journal::RegistryWriter;
use super::layout::Layout;
use super::log_writer::LogWriter;

/// Name prefix of the link directories inside the instance directory.
pub const LINK_DIR_PREFIX: &str = ".backup-";

/// Top-level names a snapshot leaves out: the lock (the restoring side takes its own), the
/// disk probe, link directories of other snapshots, the copies an upgrade kept, an unfinished
/// restore's marker, `search/` (the content index, rebuilt automatically) and `wal/` (the node
/// log: every record in it is already in the linked files, which the hold saw written).
fn excluded_at_top(name: &str) -> bool {
    matches!(
        name,
        "roundtable.lock"
            | ".roundtable-probe"
            | "search"
            | ".restore-incomplete"
            | super::node_log::DIR_NAME
    ) || name.starts_with(LINK_DIR_PREFIX)
        || name.starts_with(".upgrade-backup-")
}

/// Names left out anywhere: the clean-shutdown marker (a restored instance must not claim a
/// clean shutdown it never had) and the temp files of whole-file writes in progress.
fn excluded_anywhere(name: &str) -> bool {
    name == ".clean-shutdown" || (name.starts_with('.') && name.contains(".tmp-"))
}

/// One file of a snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    /// Path relative to the instance directory (and to the link directory).
    pub rel: PathBuf,
    /// Its length at the snapshot point: read no further.
    pub len: u64,
}

/// The instance at one point in time: a link directory and each file's length. Dropping it
/// removes the link directory.
#[derive(Debug)]
pub struct Snapshot {
    /// `<instance>/.backup-<ms>-<n>/`.
    pub dir: PathBuf,
    /// Every file, in directory-walk order.
    pub files: Vec<SnapshotFile>,
    /// When both writers were held (ms since the epoch).
    pub taken_at_ms: u64,
    /// How long the writers were held.
    pub held: Duration,
}

impl Snapshot {
    /// Where `file` is linked.
    pub fn path(&self, file: &SnapshotFile) -> PathBuf {
        self.dir.join(&file.rel)
    }

    /// The file at `rel` (relative to the instance directory), if the snapshot has it.
    pub fn file(&self, rel: &Path) -> Option<&SnapshotFile> {
        self.files.iter().find(|f| f.rel == rel)
    }
}

impl Snapshot {
    /// Forgets the files under `rel` (a directory relative to the instance directory) and lists
    /// what it holds now: for a directory rewritten inside the snapshot after it was taken (a
    /// cluster backup rebuilds each conversation's directory from the log stream).
    pub fn relist(&mut self, rel: &Path) -> io::Result<()> {
        self.files.retain(|f| !f.rel.starts_with(rel));
        list(&self.dir, rel, &mut self.files)
    }
}

/// Lists the files under `links/rel` with their lengths, recursively.
fn list(links: &Path, rel: &Path, files: &mut Vec<SnapshotFile>) -> io::Result<()> {
    let entries = match fs::read_dir(links.join(rel)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let child = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            list(links, &child, files)?;
        } else if kind.is_file() {
            files.push(SnapshotFile {
                rel: child,
                len: entry.metadata()?.len(),
            });
        }
    }
    Ok(())
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            log::warn!(
                "{}: cannot remove the backup's links ({e}); the next start removes them",
                self.dir.display()
            );
        }
    }
}

/// Takes a snapshot of `layout`'s instance (see the module docs). The holds are queued on
/// both writers now, from the caller's thread; a `backup-snapshot` thread waits for them,
/// links and releases. `Err` says why (a writer thread has stopped, an I/O error).
pub fn take(
    layout: &Layout,
    registry: &RegistryWriter,
    logs: &LogWriter,
) -> oneshot::Receiver<Result<Snapshot, String>> {
    let (answer, answered) = oneshot::channel();
    let (arrived_tx, arrived) = std_mpsc::channel();
    let mut releases = Vec::new();
    let mut hold = || {
        let (release, wait) = std_mpsc::channel();
        releases.push(release);
        Hold::new(arrived_tx.clone(), wait)
    };
    logs.hold(hold());
    registry.hold(hold());
    drop(arrived_tx);
    let root = layout.root.clone();
    let spawned = thread::Builder::new()
        .name("backup-snapshot".into())
        .spawn(move || {
            let result = (|| {
                for _ in 0..2 {
                    arrived
                        .recv()
                        .map_err(|_| "a storage writer thread has stopped".to_string())?;
                }
                let held = Instant::now();
                let taken_at_ms = crate::clock::now_millis();
                let linked = link_instance(&root);
                drop(releases);
                let (dir, files) = linked.map_err(|e| format!("backup snapshot: {e}"))?;
                Ok(Snapshot {
                    dir,
                    files,
                    taken_at_ms,
                    held: held.elapsed(),
                })
            })();
            let _ = answer.send(result);
        });
    if let Err(e) = spawned {
        log::error!("cannot start the backup-snapshot thread: {e}");
    }
    answered
}

/// Removes the link directories a crash left behind (run at startup, under the lock).
pub fn sweep(layout: &Layout) -> io::Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(&layout.root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let leftover = entry.file_name().to_str().is_some_and(|n| {
            n.starts_with(LINK_DIR_PREFIX) && entry.file_type().is_ok_and(|t| t.is_dir())
        });
        if leftover {
            fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Links every file of the instance at `root` into a fresh link directory: (its path, the
/// files). Runs while both writers are held.
fn link_instance(root: &Path) -> io::Result<(PathBuf, Vec<SnapshotFile>)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = root.join(format!(
        "{LINK_DIR_PREFIX}{}-{}",
        crate::clock::now_millis(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    private_dir_builder().create(&dir)?;
    let mut files = Vec::new();
    let walked = walk(root, Path::new(""), &dir, &mut files);
    if let Err(e) = walked {
        let _ = fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok((dir, files))
}

/// Links the files under `root/rel` into `links/rel`, recursively.
fn walk(root: &Path, rel: &Path, links: &Path, files: &mut Vec<SnapshotFile>) -> io::Result<()> {
    for entry in fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(text) = name.to_str() else {
            log::warn!("backup: skipping {:?}: not a UTF-8 name", entry.path());
            continue;
        };
        if (rel.as_os_str().is_empty() && excluded_at_top(text)) || excluded_anywhere(text) {
            continue;
        }
        let child = rel.join(&name);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            private_dir_builder().create(links.join(&child))?;
            walk(root, &child, links, files)?;
        } else if kind.is_file() {
            let target = links.join(&child);
            match link_or_copy(&entry.path(), &target) {
                Ok(()) => {}
                // Replaced or removed meanwhile by something outside the writers (a
                // conversation importing a legacy log): what it became is not ours to cut.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            let len = fs::symlink_metadata(&target)?.len();
            files.push(SnapshotFile { rel: child, len });
        } else {
            log::warn!(
                "backup: skipping {}: not a regular file or directory",
                entry.path().display()
            );
        }
    }
    Ok(())
}

/// Hard-links `from` to `to`, or copies it where a link is impossible (another file system,
/// one without hard links).
fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    match fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
        Err(e) => {
            log::warn!(
                "backup: cannot link {} ({e}); copying it while the writers wait",
                from.display()
            );
            fs::copy(from, to).map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::storage::block_on;

    /// Appends queued before the snapshot are in it, later ones are past its recorded length,
    /// a whole-file rewrite after it leaves the linked version intact, excluded names stay
    /// out, and dropping the snapshot removes its links.
    #[test]
    fn a_snapshot_is_one_point_of_both_writers() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.conversations_dir()).unwrap();
        fs::write(layout.registry_file(), b"{\"sessions\":[]}\n").unwrap();
        fs::write(dir.path().join("roundtable.lock"), b"1\n").unwrap();
        let metrics: Arc<crate::metrics::Metrics> = Default::default();
        let logs = LogWriter::start(metrics.clone(), dir.path().to_path_buf());
        let registry = RegistryWriter::start(layout.clone(), metrics);
        let log: Arc<Path> = layout.conversations_dir().join("c/displayLog.jsonl").into();
        logs.append(&log, b"one\n".to_vec());
        let snapshot = block_on(take(&layout, &registry, &logs)).unwrap().unwrap();
        logs.append(&log, b"two\n".to_vec());
        block_on(logs.replace(&Arc::from(layout.registry_file()), b"{}".to_vec()))
            .unwrap()
            .unwrap();
        block_on(logs.sync(vec![log.clone()])).unwrap().unwrap();

        let rel = Path::new("conversations/c/displayLog.jsonl");
        let file = snapshot.file(rel).expect("the log is in the snapshot");
        assert_eq!(file.len, 4);
        assert_eq!(fs::read(snapshot.path(file)).unwrap(), b"one\ntwo\n");
        let registry_file = snapshot
            .file(Path::new("conversations/conversations.json"))
            .unwrap();
        assert_eq!(
            fs::read(snapshot.path(registry_file)).unwrap(),
            b"{\"sessions\":[]}\n"
        );
        assert!(snapshot.file(Path::new("roundtable.lock")).is_none());
        let links = snapshot.dir.clone();
        assert!(links.starts_with(dir.path()));
        drop(snapshot);
        assert!(!links.exists());
    }

    /// A link directory left by a crash is removed at startup; nothing else is.
    #[test]
    fn sweep_removes_leftover_links_only() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".backup-1-0/conversations")).unwrap();
        fs::create_dir_all(dir.path().join("conversations")).unwrap();
        assert_eq!(sweep(&Layout::new(dir.path())).unwrap(), 1);
        assert!(!dir.path().join(".backup-1-0").exists());
        assert!(dir.path().join("conversations").exists());
    }
}
