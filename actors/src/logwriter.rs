//! The append writer shared by every conversation: one thread that appends lines to
//! conversation files (display logs, chat histories) and fsyncs each touched file once per
//! batch (group commit). Conversations never block on disk: they hand over bytes and go on,
//! and wait on [`LogWriter::sync`] only where durability matters (eviction, delete, shutdown).
//!
//! Appends to one file keep their order; a torn final line after a crash is dropped on load.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread;

use tokio::sync::oneshot;

enum Job {
    /// Append bytes to a file.
    Append(Arc<Path>, Vec<u8>),
    /// Answer once everything queued before is durable.
    Sync(oneshot::Sender<()>),
    /// Sync and close a file (conversation unloaded or deleted).
    Close(Arc<Path>, oneshot::Sender<()>),
    /// Replace a file's content durably (after everything queued for it).
    Replace(Arc<Path>, Vec<u8>, oneshot::Sender<Result<(), String>>),
}

/// Handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    tx: std_mpsc::Sender<Job>,
}

impl LogWriter {
    /// Starts the writer thread.
    pub fn start() -> LogWriter {
        let (tx, rx) = std_mpsc::channel();
        thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || writer_loop(rx))
            .expect("spawn log writer");
        LogWriter { tx }
    }

    /// Queues an append.
    pub fn append(&self, path: &Arc<Path>, bytes: Vec<u8>) {
        let _ = self.tx.send(Job::Append(path.clone(), bytes));
    }

    /// Resolves once every append queued so far is on disk.
    pub fn sync(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Job::Sync(tx));
        rx
    }

    /// Replaces `path` with `bytes` (temp file, fsync, rename, fsync directory) once every
    /// append queued before has landed; resolves with the outcome.
    pub fn replace(
        &self,
        path: &Arc<Path>,
        bytes: Vec<u8>,
    ) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Job::Replace(path.clone(), bytes, tx));
        rx
    }

    /// Syncs and closes `path`'s handle; resolves when done.
    pub fn close(&self, path: &Arc<Path>) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Job::Close(path.clone(), tx));
        rx
    }
}

/// Opens `path` for appending. A new file (and any missing directory above it) is created
/// here, off the actors' threads, and its directory entry is made durable.
fn open_append(path: &Path) -> std::io::Result<File> {
    match OpenOptions::new().append(true).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            crate::store::create_dir_durable(dir).map_err(std::io::Error::other)?;
            let f = OpenOptions::new().create(true).append(true).open(path)?;
            File::open(dir)?.sync_all()?;
            Ok(f)
        }
        Err(e) => Err(e),
    }
}

fn writer_loop(rx: std_mpsc::Receiver<Job>) {
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut dirty: Vec<PathBuf> = Vec::new();
        let mut acks = Vec::new();
        for job in batch {
            match job {
                Job::Append(path, bytes) => {
                    let file = match files.get_mut(path.as_ref()) {
                        Some(f) => f,
                        None => match open_append(&path) {
                            Ok(f) => files.entry(path.to_path_buf()).or_insert(f),
                            Err(e) => {
                                log::error!("{}: cannot open for append: {e}", path.display());
                                continue;
                            }
                        },
                    };
                    if let Err(e) = file.write_all(&bytes) {
                        log::error!("{}: append failed: {e}", path.display());
                    }
                    if !dirty.iter().any(|d| d.as_path() == path.as_ref()) {
                        dirty.push(path.to_path_buf());
                    }
                }
                Job::Sync(ack) => acks.push(ack),
                Job::Replace(path, bytes, ack) => {
                    if let Some(f) = files.remove(path.as_ref()) {
                        let _ = f.sync_data();
                        dirty.retain(|d| d.as_path() != path.as_ref());
                    }
                    let dir = path.parent().unwrap_or(Path::new("."));
                    let result = crate::store::create_dir_durable(dir)
                        .and_then(|()| crate::store::write_atomic(&path, &bytes))
                        .map_err(|e| e.to_string());
                    let _ = ack.send(result);
                }
                Job::Close(path, ack) => {
                    if let Some(f) = files.remove(path.as_ref()) {
                        let _ = f.sync_data();
                        dirty.retain(|d| d.as_path() != path.as_ref());
                    }
                    acks.push(ack);
                }
            }
        }
        for path in dirty {
            if let Some(f) = files.get(&path) {
                if let Err(e) = f.sync_data() {
                    log::error!("{}: fsync failed: {e}", path.display());
                }
            }
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}
