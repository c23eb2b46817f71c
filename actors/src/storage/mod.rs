//! Everything Roundtable keeps on disk, and the rules that make it durable. No actor lives
//! here: the [`ConversationRegistry`](crate::registry::ConversationRegistry) and the
//! [`Conversation`](crate::conversation::Conversation) actors own the data and hand every write
//! to one of two writer threads, both run by [`group_commit`].
//!
//! # The instance directory
//! ```text
//! <instance-dir>/roundtable.lock                    lock: one server per directory, its PID
//! <instance-dir>/FORMAT                             format: the layout version (one number)
//! <instance-dir>/wal/<seq>.wal                      node_log: every conversation file write, until a checkpoint
//! <instance-dir>/conversations/
//!   conversations.json                              registry_file: {"sessions":[…]}
//!   conversations.journal                           journal: changes since the last fold
//!   .clean-shutdown                                 registry_file: message counts are exact
//!   <id>/                                           layout: one conversation's directory
//!   <id>/displayLog.jsonl                           display_log: what clients replay
//!   <id>/requests.jsonl                             requests: acknowledged, unfinished requests
//!   <id>/sessions/chat/                             the chat agent's history (chat_history)
//!   <id>/sessions/chat/contextMeter.jsonl           context_meter: its last known context usage
//! <instance-dir>/<agent>/                           agent instance storage (`chat/system-prompt.md`; read only)
//! <instance-dir>/.backup-<ms>-<n>/                  snapshot: a backup's hard links, while it streams
//! <instance-dir>/.upgrade-backup-v<N>/              format: what an upgrade from version N replaced
//! ```
//! [`layout::Layout`] builds every path; [`format`](mod@format) checks the layout version at startup and
//! upgrades older layouts (TypeAgent's through [`migrate`]). [`snapshot`] takes the
//! consistent, point-in-time view of a running instance that `roundtable backup` streams.
//!
//! # Who writes what
//! - `roundtable.lock`: the server at start-up ([`lock::InstanceLock`]).
//! - `conversations.json` and `conversations.journal`: the registry actor, through the
//!   [`journal::RegistryWriter`] thread (`registry-writer`), which also removes a deleted
//!   conversation's directory; at start-up, before that thread runs, the registry folds and
//!   sweeps directly ([`registry_file::fold`], [`layout::remove_conversation_dir`]).
//! - `.clean-shutdown`: the registry at clean shutdown, after its last fold; taken back at the
//!   next start-up ([`registry_load`], which reads [`registry_file`] with the journal replayed).
//! - Everything inside a conversation's directory (display log, request journal, chat
//!   history, context meter): its conversation actor, through the shared
//!   [`log_writer::LogWriter`] thread (`log-writer`).
//!
//! Both writer threads are [`group_commit::GroupCommit`]s: each takes whatever queued up while
//! its last fsync ran as one batch, makes it durable, and only then answers. The log writer
//! does it with one write and one fsync of the [`node_log`], whatever the batch touched, and
//! the files themselves are flushed at the log's checkpoints (and replayed from it after a
//! crash); the registry writer fsyncs its journal. A backup [`snapshot`] holds both at one
//! point of their queues while it hard-links the files.
//!
//! # Durability rules
//! - **Acknowledged means durable.** Nothing that reports a change is answered before the
//!   change is fsynced: a registry change waits on its journal append, a conversation's
//!   acknowledgements on a [`LogWriter::sync`](log_writer::LogWriter::sync) barrier.
//! - **Whole files** are replaced with a temp file, fsync, rename, fsync of the directory
//!   ([`durable::write_atomic`]): a crash leaves the old file or the new one, never a mix.
//!   New files and directories get their directory entry fsynced too
//!   ([`durable::create_dir_durable`]).
//! - **Appends** that fail are cut back off the file, so a later good line never follows a torn
//!   one; a torn last line left by a crash is dropped on load.
//! - **Nothing unreadable is overwritten**: a registry that does not parse stops the server
//!   ([`StoreError::Corrupt`]).
//! - Files are private to the server's user (0600, directories 0700).
//!
//! [`faults`] holds the test seams that inject disk errors into all of the above.

use std::io;
use std::path::{Path, PathBuf};

pub mod chat_history;
pub mod context_meter;
pub mod display_log;
pub mod durable;
pub mod faults;
pub mod format;
pub mod group_commit;
pub mod hold;
pub mod journal;
pub mod layout;
pub mod lock;
pub mod log_writer;
pub mod migrate;
pub mod node_log;
pub mod registry_file;
pub mod registry_load;
pub mod replication;
pub mod requests;
pub mod snapshot;

#[cfg(test)]
mod tests;

/// Runs `f` to completion on a fresh current-thread runtime with timers (the writer threads'
/// answers are awaited from plain `#[test]`s).
#[cfg(test)]
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a test runtime")
        .block_on(f)
}

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
    /// The instance directory's layout is newer than this Roundtable reads; nothing was
    /// touched.
    #[error("instance directory {dir} has layout version {found}, written by a newer Roundtable; this Roundtable ({version}) reads layout versions up to {supported}. The directory was left untouched: run the newer Roundtable on it", version = env!("CARGO_PKG_VERSION"))]
    LayoutTooNew {
        /// The instance directory.
        dir: PathBuf,
        /// The version its `FORMAT` file names.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The `FORMAT` file does not hold a number.
    #[error("{path} does not hold a layout version (it says {text:?}); it was left untouched. It should hold one number, such as 2")]
    BadFormat {
        /// The file.
        path: PathBuf,
        /// The start of what it holds.
        text: String,
    },
    /// A `roundtable restore` into this directory did not finish.
    #[error("instance directory {dir} holds an unfinished restore; run `roundtable restore ARCHIVE --instance-dir {dir} --force` again")]
    RestoreIncomplete {
        /// The instance directory.
        dir: PathBuf,
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

impl StoreError {
    /// What went wrong without the path: the OS error of an I/O failure, else the whole
    /// message. For texts that reach clients, which name a file by its [`role`] instead.
    pub fn cause(&self) -> String {
        match self {
            StoreError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        }
    }
}

/// What a file of the instance directory is, for messages that reach clients: a storage
/// error toward a client names the file by its role ("append to the chat history: No space
/// left on device"), never by its path, which stays in the server's log and `/health`.
pub fn role(path: &Path) -> &'static str {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(display_log::FILE_NAME) => "the display log",
        Some(requests::FILE_NAME) => "the request journal",
        Some(chat_history::FILE_NAME) => "the chat history",
        Some(context_meter::FILE_NAME) => "the context meter",
        Some(layout::JOURNAL_FILE_NAME) => "the conversation registry journal",
        Some(layout::REGISTRY_FILE_NAME) => "the conversation registry",
        Some(log_writer::PROBE_FILE_NAME) => "the storage probe file",
        Some(node_log::DIR_NAME) => "the node log",
        Some("conversations") => "the conversations directory",
        Some("sessions" | "chat") => "the chat history's directory",
        Some(name) if uuid::Uuid::parse_str(name).is_ok() => "the conversation's directory",
        _ => "a storage file",
    }
}

/// A failed write as the operator sees it (`/health`, names the path) and as clients see it
/// (names the file by its [`role`]): `<what> <file>: <error>`.
pub(crate) fn failure(
    what: &str,
    path: &Path,
    error: &dyn std::fmt::Display,
) -> crate::metrics::StorageFailure {
    crate::metrics::StorageFailure {
        operator: format!("{what} {}: {error}", path.display()),
        client: format!("{what} {}: {error}", role(path)),
    }
}

/// Wraps an I/O error into [`StoreError::Io`] naming `path` (for `map_err`).
pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}
