//! On-disk state of the instance directory: layout, startup migrations, the instance lock, and
//! the conversation registry (`conversations/conversations.json` plus an append-only journal).
//!
//! The [`ConversationRegistry`](crate::registry::ConversationRegistry) actor is the only user at
//! run time. It keeps the registry in memory and hands every change to a [`RegistryWriter`]: a
//! dedicated thread that appends the change to `conversations.journal`, fsyncs once for every
//! change that arrived meanwhile (group commit), and only then answers. So a create costs one
//! small append whatever the registry size. When the journal grows past the number of live
//! conversations (and on clean shutdown) the writer folds it into `conversations.json` with a
//! durable rewrite and removes it; after a clean shutdown `conversations.json` alone is complete
//! and TypeAgent's own server can read it.
//!
//! Every whole-file write is: temp file, fsync, rename, fsync the directory ([`write_atomic`]).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::thread;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

/// Name prefixes swept at startup: conversations of clients that crashed before cleaning up.
pub const EPHEMERAL_PREFIXES: [&str; 2] = ["cli-ephemeral-", "cli-replay-"];

/// Errors of the storage layer. Startup errors are fatal and name the file involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Any I/O failure, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        /// File or directory involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The registry file does not parse. It is never overwritten; `--repair` moves it aside.
    #[error("{path} is not a valid registry (line {line}, column {column}: {message}); it was left untouched. Fix it by hand, or start with --repair to move it aside and begin with an empty registry")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line of the parse error.
        line: usize,
        /// 1-based column of the parse error.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// Another server holds the instance lock.
    #[error("instance directory {dir} is in use by another roundtable server (PID {pid}); stop it first or pick another --instance-dir")]
    Locked {
        /// The instance directory.
        dir: PathBuf,
        /// PID written by the holder, or "unknown".
        pid: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Paths inside one instance directory.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The instance directory itself.
    pub root: PathBuf,
}

impl Layout {
    /// Layout rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }
    /// `<root>/conversations`.
    pub fn conversations_dir(&self) -> PathBuf {
        self.root.join("conversations")
    }
    /// `<root>/conversations/conversations.json`.
    pub fn registry_file(&self) -> PathBuf {
        self.conversations_dir().join("conversations.json")
    }
    /// `<root>/conversations/conversations.journal`.
    pub fn journal_file(&self) -> PathBuf {
        self.conversations_dir().join("conversations.journal")
    }
    /// A conversation's persist directory. Only ever built from a parsed UUID.
    pub fn conversation_dir(&self, id: &Uuid) -> PathBuf {
        self.conversations_dir().join(id.to_string())
    }
    /// Instance storage of one agent, shared by all conversations.
    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        self.root.join(agent)
    }
}

/// Writes `bytes` to `path` durably: temp file, fsync, rename, fsync the directory. A crash at
/// any point leaves either the old or the new file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let result = (|| {
        crate::faults::check("write", path)?;
        let mut f = private_file_options().truncate(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        crate::faults::check("rename", path)?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        });
    }
    fsync_dir(dir)
}

/// Options that create a file readable and writable by its owner only (0600, whatever the
/// umask): conversations are private to the user running the server.
pub fn private_file_options() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.write(true).create(true).mode(0o600);
    options
}

/// A builder that creates directories for their owner only (0700, whatever the umask).
pub fn private_dir_builder() -> fs::DirBuilder {
    use std::os::unix::fs::DirBuilderExt;
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700);
    builder
}

/// Warns when `dir` (an existing instance or state directory) is open to other users: it holds
/// every conversation, and its mode was set before Roundtable made its files private.
pub fn warn_if_shared(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(dir) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            log::warn!(
                "{} is accessible to other users (mode {mode:o}); conversations are private: run chmod 700 {}",
                dir.display(),
                dir.display()
            );
        }
    }
}

/// fsyncs a directory so a rename or unlink inside it is durable.
pub fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Creates a directory and any missing parents, fsyncing the parent of each directory it
/// created so the new entries survive a crash.
pub fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
        missing.push(d);
        cur = d.parent();
    }
    for d in missing.into_iter().rev() {
        match private_dir_builder().create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(StoreError::Io {
                    path: d.to_path_buf(),
                    source: e,
                })
            }
        }
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
    }
    Ok(())
}

/// One registry entry as stored. Unknown keys (`source`, `readOnly`, `copilot`, …) are kept
/// verbatim so a round trip through Roundtable never loses what TypeAgent wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredConversation {
    /// UUIDv4 string.
    pub conversation_id: String,
    /// Name as given by the client (untrimmed).
    pub name: String,
    /// ISO-8601 creation time.
    pub created_at: String,
    /// Keys we do not interpret, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

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

/// The registry as loaded at startup, in registry order.
#[derive(Debug, Default)]
pub struct LoadedRegistry {
    /// Entries in registry order.
    pub entries: Vec<StoredConversation>,
    /// True when the file on disk is not in final form (legacy keys, journal present, sweep)
    /// and must be rewritten before serving.
    pub needs_fold: bool,
}

/// Startup migrations of reference section 8, steps 1–4. Returns what it did, for the log.
pub fn migrate(layout: &Layout) -> Result<Vec<String>, StoreError> {
    let mut done = Vec::new();
    let legacy = layout.root.join("server-sessions");
    let conversations = layout.conversations_dir();
    if legacy.is_dir() {
        if !conversations.exists() {
            fs::rename(&legacy, &conversations).map_err(io_err(&legacy))?;
            fsync_dir(&layout.root)?;
            done.push(format!(
                "renamed {} to {}",
                legacy.display(),
                conversations.display()
            ));
        } else {
            let mut moved = 0;
            for entry in fs::read_dir(&legacy).map_err(io_err(&legacy))? {
                let entry = entry.map_err(io_err(&legacy))?;
                let target = conversations.join(entry.file_name());
                if !target.exists() {
                    fs::rename(entry.path(), &target).map_err(io_err(&target))?;
                    moved += 1;
                }
            }
            fsync_dir(&conversations)?;
            // Entries already present in conversations/ win; the rest of the legacy directory
            // stays on disk when it is not empty (never delete user data).
            let _ = fs::remove_dir(&legacy);
            done.push(format!(
                "merged {moved} entries of {} into {}",
                legacy.display(),
                conversations.display()
            ));
        }
    }
    create_dir_durable(&conversations)?;
    let old_registry = conversations.join("sessions.json");
    if old_registry.is_file() {
        fs::rename(&old_registry, layout.registry_file()).map_err(io_err(&old_registry))?;
        fsync_dir(&conversations)?;
        done.push(format!(
            "renamed {} to conversations.json",
            old_registry.display()
        ));
    }
    Ok(done)
}

/// Holds the instance lock for the life of the server: an exclusive advisory lock on
/// `<root>/roundtable.lock`, which also records the holder's PID.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

impl InstanceLock {
    /// Takes the lock or fails with [`StoreError::Locked`] naming the holder's PID.
    pub fn acquire(root: &Path) -> Result<InstanceLock, StoreError> {
        warn_if_shared(root);
        create_dir_durable(root)?;
        let path = root.join("roundtable.lock");
        let mut file = private_file_options()
            .read(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(StoreError::Locked {
                    dir: root.to_path_buf(),
                    pid: if pid.is_empty() {
                        "unknown".into()
                    } else {
                        pid.to_string()
                    },
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::Io { path, source: e }),
        }
        file.set_len(0).map_err(io_err(&path))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(io_err(&path))?;
        Ok(InstanceLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[derive(Deserialize)]
struct RegistryFile {
    #[serde(default)]
    sessions: Vec<Value>,
}

/// Loads `conversations.json` and replays the journal. A file that does not parse is an error
/// (never overwritten); with `repair` it is moved aside to `conversations.json.corrupt-<ts>` first.
pub fn load_registry(layout: &Layout, repair: bool) -> Result<LoadedRegistry, StoreError> {
    let path = layout.registry_file();
    let mut loaded = LoadedRegistry::default();
    match fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<RegistryFile>(&bytes) {
            Ok(file) => {
                for raw in &file.sessions {
                    match entry_from_value(raw) {
                        Some((entry, legacy)) => {
                            loaded.needs_fold |= legacy;
                            loaded.entries.push(entry);
                        }
                        None => {
                            log::warn!(
                                "{}: skipping a registry entry with no conversationId",
                                path.display()
                            );
                            loaded.needs_fold = true;
                        }
                    }
                }
            }
            Err(e) if repair => {
                let aside =
                    path.with_file_name(format!("conversations.json.corrupt-{}", unix_millis()));
                fs::rename(&path, &aside).map_err(io_err(&path))?;
                fsync_dir(&layout.conversations_dir())?;
                log::warn!(
                    "--repair: {} did not parse ({e}); moved it to {} and starting with an empty registry",
                    path.display(),
                    aside.display()
                );
                loaded.needs_fold = true;
            }
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path,
                    line: e.line(),
                    column: e.column(),
                    message: e.to_string(),
                })
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::Io { path, source: e }),
    }
    // Reject duplicate ids (keep the first): a hand-edited file must not make two entries share
    // one directory.
    let mut seen = HashMap::new();
    loaded
        .entries
        .retain(|e| seen.insert(e.conversation_id.clone(), ()).is_none());
    let replayed = replay_journal(layout, &mut loaded.entries)?;
    loaded.needs_fold |= replayed > 0;
    Ok(loaded)
}

/// Accepts `conversationId`, or the legacy `sessionId` (second value: true = needs rewrite).
fn entry_from_value(raw: &Value) -> Option<(StoredConversation, bool)> {
    // Built by copying out of the parsed tree, which stays alive until every entry is built:
    // the entries' strings then sit together in fresh memory and the whole tree can go back
    // to the OS at once (moving strings out would leave them scattered among its freed nodes).
    let obj = raw.as_object()?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str);
    let mut legacy = false;
    let conversation_id = match (text("conversationId"), text("sessionId")) {
        (Some(id), _) => id.to_string(),
        (None, Some(id)) => {
            legacy = true;
            id.to_string()
        }
        (None, None) => return None,
    };
    let created_at = match text("createdAt") {
        Some(t) => t.to_string(),
        None => {
            legacy = true;
            crate::now_iso()
        }
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "conversationId" | "sessionId" | "name" | "createdAt"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some((
        StoredConversation {
            conversation_id,
            name: text("name").unwrap_or_default().to_string(),
            created_at,
            extra,
        },
        legacy,
    ))
}

fn replay_journal(
    layout: &Layout,
    entries: &mut Vec<StoredConversation>,
) -> Result<usize, StoreError> {
    let path = layout.journal_file();
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(StoreError::Io { path, source: e }),
    };
    let lines: Vec<String> = BufReader::new(file)
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
    Ok(applied)
}

/// Serializes the registry the way TypeAgent writes it: `{"sessions":[…]}`, two-space indented.
pub fn registry_json(entries: &[StoredConversation]) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        sessions: &'a [StoredConversation],
    }
    let mut bytes =
        serde_json::to_vec_pretty(&Out { sessions: entries }).expect("registry serializes");
    bytes.push(b'\n');
    bytes
}

/// Writes the full registry durably and removes the journal it supersedes.
pub fn fold(layout: &Layout, entries: &[StoredConversation]) -> Result<(), StoreError> {
    write_atomic(&layout.registry_file(), &registry_json(entries))?;
    let journal = layout.journal_file();
    match fs::remove_file(&journal) {
        Ok(()) => fsync_dir(&layout.conversations_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::Io {
            path: journal,
            source: e,
        }),
    }
}

/// Marker written after a clean shutdown's fold: the stored message counts are exact.
const CLEAN_MARKER: &str = ".clean-shutdown";

/// Records a clean shutdown (durably).
pub fn write_clean_marker(layout: &Layout) -> Result<(), StoreError> {
    write_atomic(&layout.conversations_dir().join(CLEAN_MARKER), b"clean\n")
}

/// True if the last run shut down cleanly; removes the marker (durably) so a crash of this
/// run is noticed next time.
pub fn take_clean_marker(layout: &Layout) -> Result<bool, StoreError> {
    let path = layout.conversations_dir().join(CLEAN_MARKER);
    match fs::remove_file(&path) {
        Ok(()) => {
            fsync_dir(&layout.conversations_dir())?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io { path, source: e }),
    }
}

/// Removes a conversation's persist directory (if any) and makes the removal durable.
pub fn remove_conversation_dir(layout: &Layout, id: &Uuid) -> Result<(), StoreError> {
    let dir = layout.conversation_dir(id);
    match fs::remove_dir_all(&dir) {
        Ok(()) => fsync_dir(&layout.conversations_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::Io {
            path: dir,
            source: e,
        }),
    }
}

/// A request to the writer thread.
enum WriteJob {
    /// Append these records; answer once they are durable.
    Append(Vec<JournalRecord>, oneshot::Sender<Result<(), String>>),
    /// Rewrite `conversations.json` from this snapshot and drop the journal.
    Fold(Vec<StoredConversation>, oneshot::Sender<Result<(), String>>),
    /// Remove a conversation's directory (after its delete record is durable).
    RemoveDir(Uuid, oneshot::Sender<Result<(), String>>),
}

/// Handle to the registry's writer thread (see the module docs). Dropping every handle ends
/// the thread after it has finished what it was given.
#[derive(Clone)]
pub struct RegistryWriter {
    tx: std_mpsc::Sender<WriteJob>,
}

impl RegistryWriter {
    /// Starts the writer thread for `layout`; failures and recoveries go to `metrics`.
    ///
    /// The job channel has no bound of its own: every job is an RPC some connection awaits,
    /// so it is bounded by sockets × [`MAX_IN_FLIGHT`](crate::protocol::MAX_IN_FLIGHT).
    pub fn start(
        layout: Layout,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> RegistryWriter {
        let (tx, rx) = std_mpsc::channel::<WriteJob>();
        thread::Builder::new()
            .name("registry-writer".into())
            .spawn(move || {
                let m = metrics.clone();
                let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    writer_loop(layout, rx, &m)
                }));
                if ended.is_err() {
                    crate::metrics::Metrics::inc(&metrics.dead_writers);
                }
            })
            .expect("spawn registry writer");
        RegistryWriter { tx }
    }

    /// Appends records; the receiver resolves once they are on disk.
    pub fn append(&self, records: Vec<JournalRecord>) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        if let Err(std_mpsc::SendError(WriteJob::Append(_, tx))) =
            self.tx.send(WriteJob::Append(records, tx))
        {
            let _ = tx.send(Err("registry writer stopped".into()));
        }
        rx
    }

    /// Folds the journal into `conversations.json` using this snapshot.
    pub fn fold(&self, snapshot: Vec<StoredConversation>) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        if let Err(std_mpsc::SendError(WriteJob::Fold(_, tx))) =
            self.tx.send(WriteJob::Fold(snapshot, tx))
        {
            let _ = tx.send(Err("registry writer stopped".into()));
        }
        rx
    }

    /// Removes a conversation directory.
    pub fn remove_dir(&self, id: Uuid) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        if let Err(std_mpsc::SendError(WriteJob::RemoveDir(_, tx))) =
            self.tx.send(WriteJob::RemoveDir(id, tx))
        {
            let _ = tx.send(Err("registry writer stopped".into()));
        }
        rx
    }
}

fn writer_loop(
    layout: Layout,
    rx: std_mpsc::Receiver<WriteJob>,
    metrics: &crate::metrics::Metrics,
) {
    let journal_path = layout.journal_file();
    let mut journal: Option<File> = None;
    while let Ok(first) = rx.recv() {
        // Group commit: everything that queued up while the last fsync ran goes in one batch.
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut pending_acks: Vec<oneshot::Sender<Result<(), String>>> = Vec::new();
        let mut buf = Vec::new();
        for job in batch {
            match job {
                WriteJob::Append(records, ack) => {
                    for r in &records {
                        serde_json::to_writer(&mut buf, r).expect("record serializes");
                        buf.push(b'\n');
                    }
                    pending_acks.push(ack);
                }
                other => {
                    // Flush the appends queued before this job first, to keep order.
                    flush_appends(
                        &journal_path,
                        &mut journal,
                        &mut buf,
                        &mut pending_acks,
                        metrics,
                    );
                    match other {
                        WriteJob::Fold(snapshot, ack) => {
                            journal = None;
                            let r = fold(&layout, &snapshot).map_err(|e| e.to_string());
                            match &r {
                                Ok(()) => metrics.storage_ok(),
                                Err(e) => {
                                    log::error!("registry fold failed: {e}");
                                    metrics.storage_failed(format!("registry fold: {e}"));
                                }
                            }
                            let _ = ack.send(r);
                        }
                        WriteJob::RemoveDir(id, ack) => {
                            let r =
                                remove_conversation_dir(&layout, &id).map_err(|e| e.to_string());
                            let _ = ack.send(r);
                        }
                        WriteJob::Append(..) => unreachable!(),
                    }
                }
            }
        }
        flush_appends(
            &journal_path,
            &mut journal,
            &mut buf,
            &mut pending_acks,
            metrics,
        );
    }
}

fn flush_appends(
    path: &Path,
    journal: &mut Option<File>,
    buf: &mut Vec<u8>,
    acks: &mut Vec<oneshot::Sender<Result<(), String>>>,
    metrics: &crate::metrics::Metrics,
) {
    if acks.is_empty() {
        return;
    }
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
        let written = crate::faults::check("write", path)
            .and_then(|()| f.write_all(buf))
            .and_then(|()| crate::faults::check("fsync", path))
            .and_then(|()| f.sync_data());
        if written.is_err() {
            // Cut the failed records back off: a later good append must not follow a torn one.
            let _ = f.set_len(len);
        }
        written
    })();
    buf.clear();
    let result = result.map_err(|e| {
        // Reopen next time: after a failed fsync the kernel may have dropped dirty pages.
        *journal = None;
        log::error!("{}: append failed: {e}", path.display());
        let cause = format!("{}: {e}", path.display());
        metrics.storage_failed(cause.clone());
        cause
    });
    if result.is_ok() {
        metrics.storage_ok();
    }
    for ack in acks.drain(..) {
        let _ = ack.send(result.clone());
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, name: &str) -> StoredConversation {
        StoredConversation {
            conversation_id: id.into(),
            name: name.into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            extra: Map::new(),
        }
    }

    #[test]
    fn journal_replays_over_the_snapshot_and_drops_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        migrate(&layout).unwrap();
        fold(&layout, &[entry("a", "A"), entry("b", "B")]).unwrap();
        let mut j = String::new();
        for r in [
            JournalRecord::Put {
                entry: entry("c", "C"),
            },
            JournalRecord::Put {
                entry: entry("a", "A2"),
            },
            JournalRecord::Delete {
                conversation_id: "b".into(),
            },
        ] {
            j.push_str(&serde_json::to_string(&r).unwrap());
            j.push('\n');
        }
        j.push_str("{\"op\":\"put\",\"entr");
        fs::write(layout.journal_file(), j).unwrap();
        let loaded = load_registry(&layout, false).unwrap();
        let names: Vec<_> = loaded.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["A2", "C"]);
        assert!(loaded.needs_fold);
    }

    #[test]
    fn corrupt_registry_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        migrate(&layout).unwrap();
        fs::write(layout.registry_file(), "{\"sessions\": [\n  {oops}\n]}").unwrap();
        let err = load_registry(&layout, false).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
        assert_eq!(
            fs::read_to_string(layout.registry_file()).unwrap(),
            "{\"sessions\": [\n  {oops}\n]}"
        );
        let loaded = load_registry(&layout, true).unwrap();
        assert!(loaded.entries.is_empty());
        let aside: Vec<_> = fs::read_dir(layout.conversations_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("conversations.json.corrupt-")
            })
            .collect();
        assert_eq!(aside.len(), 1);
    }

    #[test]
    fn unknown_keys_survive_a_round_trip() {
        let raw = serde_json::json!({"conversationId":"x","name":"n","createdAt":"t","source":"copilot","readOnly":true});
        let (e, legacy) = entry_from_value(&raw).unwrap();
        assert!(!legacy);
        assert_eq!(serde_json::to_value(&e).unwrap(), raw);
        let (e, legacy) =
            entry_from_value(&serde_json::json!({"sessionId":"y","name":"n","createdAt":"t"}))
                .unwrap();
        assert!(legacy);
        assert_eq!(e.conversation_id, "y");
    }
}
