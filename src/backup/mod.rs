//! Backup archives: what `GET /backup` streams and `roundtable restore` reads.
//!
//! An archive is one tar stream (GNU headers; gzip-compressed when the CLI was asked for a
//! `.gz` / `.tgz` file):
//!
//! ```text
//! roundtable-backup.json     the [`Manifest`]: format, layout version, snapshot time, and per
//!                            conversation its id, name, last seq, messageCount, open requests
//! instance/<path>            every file of the instance directory at the snapshot point
//! roundtable-backup.end      the [`EndRecord`]: file and byte totals, so a cut stream is seen
//! ```
//!
//! - [`archive`]: the server side: which files of a
//!   [`Snapshot`](roundtable_actors::storage::snapshot::Snapshot) go in (the conversations the
//!   registry lists at the cut, never the lock, link or upgrade-copy directories), the
//!   manifest, and the tar stream.
//! - [`read`]: walks an archive and checks it entry by entry (manifest first and not newer
//!   than this build, no entry outside `instance/`, regular files only, end record last and
//!   matching). The CLI runs it on what it downloads and restore runs it twice: once to check
//!   before anything is written, once to extract.
//! - [`restore`]: fills a new instance directory durably.
//!
//! Who talks to it: `src/server/backup.rs` (the route) and `src/cli/backup.rs` (the commands).

use serde::{Deserialize, Serialize};

pub mod archive;
pub mod read;
pub mod restore;

/// The archive format this build writes (and the newest it reads).
pub const ARCHIVE_FORMAT: u32 = 1;
/// The manifest's name: the archive's first entry.
pub const MANIFEST_NAME: &str = "roundtable-backup.json";
/// The end record's name: the archive's last entry.
pub const END_NAME: &str = "roundtable-backup.end";
/// The directory every instance file sits under in the archive.
pub const INSTANCE_PREFIX: &str = "instance";
/// The largest manifest read (about 300 bytes per conversation: 200,000 conversations).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What an archive holds and from when: its first entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`ARCHIVE_FORMAT`] of the writer: a reader refuses a newer one.
    pub format: u32,
    /// The instance directory's layout version (`FORMAT`) at the snapshot: a reader refuses
    /// one newer than it can serve.
    pub layout_version: u32,
    /// The Roundtable that wrote it.
    pub roundtable_version: String,
    /// The snapshot point, ISO-8601 UTC.
    pub snapshot_at: String,
    /// The snapshot point, ms since the epoch.
    pub snapshot_millis: u64,
    /// How long the storage writers were held for the snapshot (µs).
    pub writers_held_micros: u64,
    /// Instance files in the archive.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The registry at the snapshot point, in registry order.
    pub conversations: Vec<ManifestConversation>,
}

/// One conversation as the snapshot holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConversation {
    /// Its id.
    pub conversation_id: String,
    /// Its name at the snapshot point.
    pub name: String,
    /// Its `createdAt`.
    pub created_at: String,
    /// Seq of its last display-log entry (`None`: no entry yet). A restored server's history
    /// is the original's up to this seq, then one failed `command-result` for each of
    /// `open_requests` (they were running or queued at the snapshot point).
    pub last_seq: Option<u64>,
    /// `user-request` entries up to `last_seq`.
    pub message_count: u64,
    /// Requests acknowledged and not finished at the snapshot point.
    pub open_requests: Vec<String>,
}

/// The archive's last entry: what came before it, so a stream cut short is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndRecord {
    /// Instance files before it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}
