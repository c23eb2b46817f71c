//! The registry journal, `conversations/conversations.journal`: every create, rename and
//! delete since the last [`fold`], one JSON line each, and the [`RegistryWriter`] thread that
//! appends to it.
//!
//! The [`ConversationRegistry`](crate::registry::ConversationRegistry) actor keeps the registry
//! in memory and hands every change to the [`RegistryWriter`]: a [`GroupCommit`] thread that
//! appends the change to the journal, fsyncs once for every change that arrived meanwhile
//! (group commit), and only then answers. So a create costs one small append whatever the
//! registry size. When the journal grows past the number of live conversations (and on clean
//! shutdown) the writer folds it into `conversations.json` with a durable rewrite and removes
//! it. At startup [`load_registry`](super::registry_load::load_registry) replays it over
//! `conversations.json`; a torn last line (an append that never completed, so its RPC was never
//! answered) is dropped. A backup [`snapshot`](super::snapshot) queues a `hold` on the
//! writer to take the registry at one point of its queue.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ids::ConversationId;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::durable::private_file_options;
use super::group_commit::{Committer, GroupCommit};
use super::hold::Hold;
use super::layout::{remove_conversation_dir, Layout};
use super::registry_file::{fold, StoredConversation};
use super::{faults, io_err, StoreError};
use crate::metrics::Metrics;

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum JournalRecord {
    /// Create or rename: the entry's full new state (idempotent on replay).
    Put {
        /// The entry.
        entry: StoredConversation,
    },
    /// Delete by id (idempotent on replay).
    Delete {
        /// The id.
        #[serde(rename = "conversationId")]
        conversation_id: String,
    },
}

/// What [`replay_journal`] did.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    /// Records applied (a torn last line counts: the file must be folded).
    pub applied: usize,
    /// Ids of the delete records applied, in journal order: their directories should be gone.
    pub deleted: Vec<String>,
}

/// Applies the journal at `path` over `entries` (the registry file, in order), reading at
/// most `limit` bytes of it (a backup snapshot's length; `u64::MAX` for all).
pub(super) fn replay_journal(
    path: &Path,
    limit: u64,
    entries: &mut Vec<StoredConversation>,
) -> Result<Replayed, StoreError> {
    let path = path.to_path_buf();
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Replayed::default()),
        Err(e) => return Err(StoreError::Io { path, source: e }),
    };
    let lines: Vec<String> = BufReader::new(file.take(limit))
        .lines()
        .collect::<Result<_, _>>()
        .map_err(io_err(&path))?;
    let mut index: HashMap<String, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.conversation_id.clone(), i))
        .collect();
    let mut applied = 0;
    let mut deleted = Vec::new();
    let mut deleted_ids = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: JournalRecord = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) if n + 1 == lines.len() => {
                // A torn last line: the append never completed, so its RPC was never answered.
                log::warn!("{}: dropping a torn last line ({e})", path.display());
                applied += 1;
                continue;
            }
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path,
                    line: n + 1,
                    column: e.column(),
                    message: e.to_string(),
                })
            }
        };
        applied += 1;
        match record {
            JournalRecord::Put { entry } => match index.get(&entry.conversation_id) {
                Some(&i) => entries[i] = entry,
                None => {
                    index.insert(entry.conversation_id.clone(), entries.len());
                    entries.push(entry);
                }
            },
            JournalRecord::Delete { conversation_id } => {
                if let Some(i) = index.remove(&conversation_id) {
                    deleted.push(i);
                }
                deleted_ids.push(conversation_id);
            }
        }
    }
    if !deleted.is_empty() {
        deleted.sort_unstable();
        let mut k = 0;
        let mut i = 0;
        entries.retain(|_| {
            let keep = deleted.get(k) != Some(&i);
            if !keep {
                k += 1;
            }
            i += 1;
            keep
        });
    }
    // An id deleted and then put back (a restore) keeps its directory.
    deleted_ids.retain(|id| !index.contains_key(id));
    Ok(Replayed {
        applied,
        deleted: deleted_ids,
    })
}

/// How a [`RegistryWriter`] job is answered: `Err` carries the cause, for `Storage error: …`.
type Ack = oneshot::Sender<Result<(), String>>;

/// A request to the writer thread.
enum WriteJob {
    /// Append these records; answer once they are durable.
    Append(Vec<JournalRecord>, Ack),
    /// Rewrite `conversations.json` from this snapshot and drop the journal.
    Fold(Vec<StoredConversation>, Ack),
    /// Remove a conversation's directory (after its delete record is durable).
    RemoveDir(ConversationId, Ack),
    /// Stop here, everything queued before durable, until a backup snapshot has linked the
    /// files ([`snapshot`](super::snapshot)).
    Hold(Hold),
}

impl WriteJob {
    /// Answers the job without doing it (the thread has ended). A dropped hold tells its
    /// snapshot.
    fn refuse(self) {
        let (WriteJob::Append(_, ack) | WriteJob::Fold(_, ack) | WriteJob::RemoveDir(_, ack)) =
            self
        else {
            return;
        };
        let _ = ack.send(Err("registry writer stopped".into()));
    }
}

/// Handle to the registry's writer thread (see the module docs). Dropping every handle ends
/// the thread after it has finished what it was given.
#[derive(Clone)]
pub struct RegistryWriter {
    /// The thread and its queue.
    queue: GroupCommit<JournalCommitter>,
}

impl RegistryWriter {
    /// Starts the writer thread for `layout`; failures and recoveries go to `metrics`.
    ///
    /// The job queue has no bound of its own: every job is an RPC some connection awaits,
    /// so it is bounded by sockets × [`MAX_IN_FLIGHT`](crate::protocol::MAX_IN_FLIGHT).
    pub fn start(layout: Layout, metrics: Arc<Metrics>) -> RegistryWriter {
        let committer = JournalCommitter {
            journal_path: layout.journal_file(),
            layout,
            journal: None,
            metrics: metrics.clone(),
        };
        RegistryWriter {
            queue: GroupCommit::start("registry-writer", committer, metrics),
        }
    }

    /// Queues `job` built around a fresh answer channel; returns its receiver.
    fn submit(&self, job: impl FnOnce(Ack) -> WriteJob) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        if let Err(job) = self.queue.send(job(tx)) {
            job.refuse();
        }
        rx
    }

    /// Appends records; the receiver resolves once they are on disk.
    pub fn append(&self, records: Vec<JournalRecord>) -> oneshot::Receiver<Result<(), String>> {
        self.submit(|ack| WriteJob::Append(records, ack))
    }

    /// Folds the journal into `conversations.json` using this snapshot.
    pub fn fold(&self, snapshot: Vec<StoredConversation>) -> oneshot::Receiver<Result<(), String>> {
        self.submit(|ack| WriteJob::Fold(snapshot, ack))
    }

    /// Removes a conversation directory.
    pub fn remove_dir(&self, id: ConversationId) -> oneshot::Receiver<Result<(), String>> {
        self.submit(|ack| WriteJob::RemoveDir(id, ack))
    }

    /// Queues a backup snapshot's hold: once every job queued before it is durable, the
    /// thread waits in [`Hold::wait`] until the snapshot releases it.
    pub fn hold(&self, hold: Hold) {
        if let Err(job) = self.queue.send(WriteJob::Hold(hold)) {
            job.refuse();
        }
    }
}

/// The registry writer thread's state: the open journal and where to report failures.
struct JournalCommitter {
    /// The instance layout (fold and directory removal).
    layout: Layout,
    /// `conversations.journal`.
    journal_path: PathBuf,
    /// The journal's append handle; `None` after a fold or a failure, reopened on next use.
    journal: Option<File>,
    /// `/health`'s storage failure and the dead-writer count.
    metrics: Arc<Metrics>,
}

/// A run of appends waiting for one write and one fsync.
#[derive(Default)]
struct PendingAppends {
    /// The records' lines, in order.
    buf: Vec<u8>,
    /// Who waits for them.
    acks: Vec<Ack>,
}

impl Committer for JournalCommitter {
    type Job = WriteJob;
    /// Every job of a batch is answered during [`commit`](Committer::commit), in order.
    type Answers = ();

    /// Appends run together until a fold or removal, which first flushes the appends queued
    /// before it, to keep order.
    fn commit(&mut self, batch: Vec<WriteJob>) {
        let mut pending = PendingAppends::default();
        for job in batch {
            match job {
                WriteJob::Append(records, ack) => {
                    for r in &records {
                        serde_json::to_writer(&mut pending.buf, r).expect("record serializes");
                        pending.buf.push(b'\n');
                    }
                    pending.acks.push(ack);
                }
                WriteJob::Fold(snapshot, ack) => {
                    self.flush_appends(&mut pending);
                    self.journal = None;
                    let r = match fold(&self.layout, &snapshot) {
                        Ok(()) => {
                            self.metrics.storage_ok();
                            Ok(())
                        }
                        Err(e) => {
                            log::error!("registry fold failed: {e}");
                            let registry = self.layout.registry_file();
                            let mut failure = super::failure("rewrite", &registry, &e.cause());
                            failure.operator = format!("registry fold: {e}");
                            let client = failure.client.clone();
                            self.metrics.storage_failed(failure);
                            Err(client)
                        }
                    };
                    let _ = ack.send(r);
                }
                WriteJob::RemoveDir(id, ack) => {
                    self.flush_appends(&mut pending);
                    let r = remove_conversation_dir(&self.layout, &id)
                        .map(drop)
                        .map_err(|e| e.to_string());
                    let _ = ack.send(r);
                }
                WriteJob::Hold(hold) => {
                    self.flush_appends(&mut pending);
                    hold.wait();
                }
            }
        }
        self.flush_appends(&mut pending);
    }

    fn answer(&mut self, (): ()) {}
}

impl JournalCommitter {
    /// Writes and fsyncs the pending appends as one, then answers each of them.
    fn flush_appends(&mut self, pending: &mut PendingAppends) {
        if pending.acks.is_empty() {
            return;
        }
        let path = &self.journal_path;
        let journal = &mut self.journal;
        let buf = &pending.buf;
        let result = (|| -> io::Result<()> {
            if journal.is_none() {
                let existed = path.exists();
                let f = private_file_options().append(true).open(path)?;
                if !existed {
                    if let Some(dir) = path.parent() {
                        File::open(dir)?.sync_all()?;
                    }
                }
                *journal = Some(f);
            }
            let f = journal.as_mut().expect("journal open");
            let len = f.metadata()?.len();
            let written = faults::check("write", path)
                .and_then(|()| f.write_all(buf))
                .and_then(|()| faults::check("fsync", path))
                .and_then(|()| f.sync_data());
            if written.is_err() {
                // Cut the failed records back off: a later good append must not follow a torn one.
                let _ = f.set_len(len);
            }
            written
        })();
        pending.buf.clear();
        let result = result.map_err(|e| {
            // Reopen next time: after a failed fsync the kernel may have dropped dirty pages.
            self.journal = None;
            log::error!("{}: append failed: {e}", path.display());
            // Registry RPCs answer `Storage error: <client text>`, which names no path.
            let failure = super::failure("append to", path, &e);
            let client = failure.client.clone();
            self.metrics.storage_failed(failure);
            client
        });
        if result.is_ok() {
            self.metrics.storage_ok();
        }
        for ack in pending.acks.drain(..) {
            let _ = ack.send(result.clone());
        }
    }
}
