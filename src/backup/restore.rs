//! `roundtable restore`: fills a new instance directory from an archive, durably, taking only
//! what it was asked for and never more bytes than it checked it has room for.
//!
//! 1. The manifest (the archive's first entry) is checked before anything else is read: its
//!    byte total must fit in the target file system's free space (with
//!    [`FREE_SPACE_MARGIN`] to spare) and under `--max-bytes`.
//! 2. The whole archive is checked ([`scan_with_manifest`]): nothing is written for a bad,
//!    truncated, newer or hostile one, nor for one whose entries hold more bytes than its
//!    manifest says (checked at each entry's header, before its data is read). The entries to restore are
//!    picked here (`Selection`): without `--with-config` only the conversations (`FORMAT`
//!    and `conversations/`); never a token (a restored `roundtable.toml` loses its `token`
//!    and `token-file` keys). The bytes to write are then checked against the free space
//!    again.
//! 3. The directory must be new or empty; `--force` empties it instead (the entries of a
//!    directory that holds a live instance are refused by its lock: the restore takes the
//!    instance lock for its whole run, as a server would).
//! 4. [`RESTORE_MARKER`] is written (durably) before the first file and removed (durably)
//!    after the last one is fsynced along with every directory it created: a server refuses
//!    a directory whose restore did not finish. When writing fails half-way, what was written
//!    is removed again (the directory too when the restore created it), so nothing is left
//!    half-written; only when that removal fails too does the marker stay.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use roundtable_actors::storage::durable::{
    create_dir_durable, fsync_dir, private_file_options, remove_durable, write_atomic,
};
use roundtable_actors::storage::format::{FORMAT_FILE, RESTORE_MARKER};
use roundtable_actors::storage::lock::InstanceLock;
use roundtable_actors::storage::StoreError;

use super::read::{decompressed, scan_with_manifest, ArchiveError, Scanned};
use super::Manifest;
use crate::config_file::INSTANCE_CONFIG;

/// `--max-bytes` when not given: the most a restore writes (64 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
/// Free space a restore leaves on the target file system, beyond what it writes (16 MiB):
/// the restored server needs room for its lock, its index and its first writes.
pub const FREE_SPACE_MARGIN: u64 = 16 << 20;
/// The largest `roundtable.toml` restored (with `--with-config`); a larger one is skipped.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Config keys a restore never brings back: a token, or the file that holds one.
const TOKEN_KEYS: [&str; 2] = ["token", "token-file"];

/// What `roundtable restore` was asked for.
#[derive(Debug, Clone)]
pub struct RestoreOptions {
    /// `--force`: empty a non-empty target first.
    pub force: bool,
    /// `--with-config`: also restore `roundtable.toml` (without its token) and the agents'
    /// instance storage (`chat/system-prompt.md`…).
    pub with_config: bool,
    /// `--max-bytes`: the most this restore writes.
    pub max_bytes: u64,
}

impl Default for RestoreOptions {
    fn default() -> RestoreOptions {
        RestoreOptions {
            force: false,
            with_config: false,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Why a restore did not happen (or did not finish).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The archive cannot be opened.
    #[error("{}: {source}", archive.display())]
    Open {
        /// The archive.
        archive: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The archive is refused (bad, truncated, newer, hostile).
    #[error("{}: {source}", archive.display())]
    Archive {
        /// The archive.
        archive: PathBuf,
        /// What is wrong with it.
        source: ArchiveError,
    },
    /// Refused before anything was written: too large, or no room for it.
    #[error("{}: {source}", archive.display())]
    Refused {
        /// The archive.
        archive: PathBuf,
        /// Why.
        source: Refusal,
    },
    /// The target holds something and `--force` was not given.
    #[error("{} is not empty; restore only fills a new or empty directory (--force deletes what it holds first)", dir.display())]
    NotEmpty {
        /// The target.
        dir: PathBuf,
    },
    /// The target exists and is not a directory.
    #[error("{} exists and is not a directory", dir.display())]
    NotADirectory {
        /// The target.
        dir: PathBuf,
    },
    /// The lock is held by a running server, or the target cannot be written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing failed half-way; what was written has been removed again.
    #[error("restoring into {} failed: {source}; nothing was kept ({})", dir.display(), if *removed { "the directory was removed" } else { "the directory was emptied" })]
    Undone {
        /// The target.
        dir: PathBuf,
        /// The failure.
        source: ArchiveError,
        /// Whether the directory itself was removed (the restore had created it).
        removed: bool,
    },
    /// Writing failed half-way and removing what was written failed too; the directory
    /// keeps the unfinished-restore marker.
    #[error("restoring into {} failed: {source}; removing what was written failed too ({cleanup}): the directory is marked unfinished (servers refuse it): run the restore again with --force", dir.display())]
    Unfinished {
        /// The target.
        dir: PathBuf,
        /// The failure.
        source: ArchiveError,
        /// Why the removal failed (boxed: the error stays small).
        cleanup: Box<StoreError>,
    },
}

/// A restore refused before anything is written; each text says nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// More bytes than `--max-bytes`.
    #[error("it would restore {bytes} bytes, more than --max-bytes {max}; nothing was written")]
    TooLarge {
        /// The bytes (the manifest's total, or what the entries hold so far).
        bytes: u64,
        /// `--max-bytes`.
        max: u64,
    },
    /// Entries that hold more than the manifest says (a hostile or broken archive).
    #[error("entry {path:?} ({size} bytes) goes past the {manifest} bytes its manifest says the archive holds; nothing was written")]
    BeyondManifest {
        /// The entry.
        path: String,
        /// Its size.
        size: u64,
        /// The manifest's byte total.
        manifest: u64,
    },
    /// Not enough free space on the target's file system.
    #[error("not enough free space for it in {}: it needs {needed} bytes ({bytes} bytes in {files} files, plus {FREE_SPACE_MARGIN} bytes kept free), the file system has {available} bytes free; nothing was written", dir.display())]
    NoSpace {
        /// The target.
        dir: PathBuf,
        /// Bytes to restore.
        bytes: u64,
        /// Files to restore.
        files: u64,
        /// What the check asked for: bytes, a block per file, and the margin.
        needed: u64,
        /// What the file system has (for an unprivileged user).
        available: u64,
    },
}

/// What a restore reports as it goes: the phase, files and bytes so far.
pub trait Progress {
    /// Called after each file of a phase (`"checking"`, then `"restoring"`).
    fn file(&mut self, phase: &'static str, files: u64, bytes: u64);

    /// The totals to restore, known once the archive has been checked.
    fn totals(&mut self, _files: u64, _bytes: u64) {}
}

/// What a finished restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The archive's manifest and end record.
    pub scanned: Scanned,
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Top-level names of the entries left out (not conversations, and no `--with-config`),
    /// with how many files and bytes they held.
    pub skipped: Vec<String>,
    /// Files left out.
    pub skipped_files: u64,
    /// Bytes left out.
    pub skipped_bytes: u64,
    /// What happened to `roundtable.toml`, when the archive had one and `--with-config` was
    /// given (its token keys dropped, or why it was left out).
    pub config_note: Option<String>,
}

/// Which entries a restore writes, decided while the archive is checked.
struct Selection {
    /// `--with-config`.
    with_config: bool,
    /// Files to write and their bytes (the restored config counts at its stripped size).
    files: u64,
    /// See `files`.
    bytes: u64,
    /// Top-level names left out.
    skipped: BTreeSet<String>,
    /// Files left out.
    skipped_files: u64,
    /// Bytes left out.
    skipped_bytes: u64,
    /// The config to write in place of the archive's (token keys removed); `None` when the
    /// archive has none or it is left out.
    config: Option<Vec<u8>>,
    /// See [`Restored::config_note`].
    config_note: Option<String>,
}

/// Whether an entry is conversation data: the layout version and everything under
/// `conversations/` (registry, journal, each conversation's directory).
fn is_conversation_data(rel: &Path) -> bool {
    rel == Path::new(FORMAT_FILE)
        || rel.components().next() == Some(Component::Normal("conversations".as_ref()))
}

/// The top-level name of `rel`, as the summary shows it (`chat/`, `roundtable.toml`).
fn top_name(rel: &Path) -> String {
    let mut parts = rel.components();
    let first = parts
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    if parts.next().is_some() {
        format!("{first}/")
    } else {
        first
    }
}

impl Selection {
    /// Decides about one entry while checking; reads the data of `roundtable.toml` only.
    fn consider(&mut self, rel: &Path, size: u64, data: &mut dyn Read) -> io::Result<()> {
        if is_conversation_data(rel) {
            self.files += 1;
            self.bytes += size;
            return Ok(());
        }
        if !self.with_config {
            self.skipped.insert(top_name(rel));
            self.skipped_files += 1;
            self.skipped_bytes += size;
            return Ok(());
        }
        if rel != Path::new(INSTANCE_CONFIG) {
            self.files += 1;
            self.bytes += size;
            return Ok(());
        }
        if size > MAX_CONFIG_BYTES {
            self.config_note = Some(format!(
                "{INSTANCE_CONFIG} was not restored: it is larger than {MAX_CONFIG_BYTES} bytes"
            ));
            return Ok(());
        }
        let mut text = Vec::new();
        data.take(MAX_CONFIG_BYTES).read_to_end(&mut text)?;
        match without_token(&String::from_utf8_lossy(&text)) {
            Ok((stripped, dropped)) => {
                self.config_note = Some(if dropped.is_empty() {
                    format!("{INSTANCE_CONFIG} restored")
                } else {
                    format!(
                        "{INSTANCE_CONFIG} restored without its {} (a restore never brings back a token: give the server one with token-file)",
                        dropped
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )
                });
                self.files += 1;
                self.bytes += stripped.len() as u64;
                self.config = Some(stripped.into_bytes());
            }
            Err(why) => {
                self.config_note = Some(format!("{INSTANCE_CONFIG} was not restored: {why}"));
            }
        }
        Ok(())
    }

    /// Whether the write pass writes `rel` (and with what instead of the archive's data).
    fn writes(&self, rel: &Path) -> Option<Option<&[u8]>> {
        if is_conversation_data(rel) {
            Some(None)
        } else if !self.with_config {
            None
        } else if rel == Path::new(INSTANCE_CONFIG) {
            self.config.as_deref().map(Some)
        } else {
            Some(None)
        }
    }
}

/// `text` (a config file) without its top-level `token` and `token-file` keys, each removed
/// with its whole lines so the rest stays as written (comments included); also which keys were
/// dropped. Refused when it does not parse, or still names a token after the removal (a token
/// in a form this cannot cut out, e.g. a table).
fn without_token(text: &str) -> Result<(String, Vec<&'static str>), String> {
    let parsed: HashMap<String, toml::Spanned<toml::Value>> =
        toml::from_str(text).map_err(|e| format!("it does not parse: {}", e.message()))?;
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let mut dropped = Vec::new();
    for key in TOKEN_KEYS {
        if let Some(value) = parsed.get(key) {
            // Both keys take a string (a table or array is no config this server reads, and
            // is not cut line by line).
            if !value.get_ref().is_str() {
                return Err(format!("its `{key}` is not a string"));
            }
            let span = value.span();
            // A key and the start of its value share a line; a value ends its last line.
            let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
            let end = text[span.end..]
                .find('\n')
                .map_or(text.len(), |i| span.end + i + 1);
            cut.push((start, end));
            dropped.push(key);
        }
    }
    cut.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in cut {
        out.push_str(&text[at..start.max(at)]);
        at = at.max(end);
    }
    out.push_str(&text[at..]);
    let check: HashMap<String, toml::Value> = toml::from_str(&out)
        .map_err(|e| format!("it does not parse without its token: {}", e.message()))?;
    if TOKEN_KEYS.iter().any(|k| check.contains_key(*k)) {
        return Err("its token could not be removed".into());
    }
    Ok((out, dropped))
}

/// Bytes free for an unprivileged user on the file system that holds `dir` (or would: the
/// nearest existing ancestor when `dir` is not there yet), and its block size.
fn free_space(dir: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(dir)?;
    let existing = absolute
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let path = std::ffi::CString::new(existing.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with NUL"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `stat` points to writable memory of the
    // right type; statvfs fills it or fails.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    let block = stat.f_frsize.max(1);
    Ok((stat.f_bavail.saturating_mul(block), block))
}

/// Refuses `bytes` in `files` files unless the file system of `dir` has room for them (a
/// block per file for rounding, and [`FREE_SPACE_MARGIN`]).
fn check_space(dir: &Path, files: u64, bytes: u64) -> Result<(), Refusal> {
    let Ok((available, block)) = free_space(dir) else {
        // No statvfs answer (an odd file system): the writes themselves will say.
        return Ok(());
    };
    let needed = bytes
        .saturating_add(files.saturating_mul(block))
        .saturating_add(FREE_SPACE_MARGIN);
    if needed > available {
        return Err(Refusal::NoSpace {
            dir: dir.into(),
            bytes,
            files,
            needed,
            available,
        });
    }
    Ok(())
}

/// Stops a scan from its callback with `refusal` (recovered by [`refusal_of`]).
fn stop(refusal: Refusal) -> io::Error {
    io::Error::other(refusal)
}

/// The [`Refusal`] a callback stopped the scan with, if that is why it stopped.
fn refusal_of(error: ArchiveError) -> Result<Refusal, ArchiveError> {
    match error {
        ArchiveError::Io(e) if e.get_ref().is_some_and(|inner| inner.is::<Refusal>()) => Ok(*e
            .into_inner()
            .expect("checked")
            .downcast::<Refusal>()
            .expect("checked")),
        other => Err(other),
    }
}

/// Checks `archive` and restores it into `dir` (see the module docs); says what it did.
pub fn restore(
    archive: &Path,
    dir: &Path,
    options: &RestoreOptions,
    progress: &mut dyn Progress,
) -> Result<Restored, RestoreError> {
    let open = || -> Result<Box<dyn Read>, RestoreError> {
        let file = File::open(archive).map_err(|source| RestoreError::Open {
            archive: archive.into(),
            source,
        })?;
        decompressed(file).map_err(|source| RestoreError::Open {
            archive: archive.into(),
            source,
        })
    };
    let refused = |error: ArchiveError| match refusal_of(error) {
        Ok(source) => RestoreError::Refused {
            archive: archive.into(),
            source,
        },
        Err(source) => RestoreError::Archive {
            archive: archive.into(),
            source,
        },
    };
    let mut selection = Selection {
        with_config: options.with_config,
        files: 0,
        bytes: 0,
        skipped: BTreeSet::new(),
        skipped_files: 0,
        skipped_bytes: 0,
        config: None,
        config_note: None,
    };
    // Set by the manifest hook, read by the entry hook.
    let manifest_bytes = std::cell::Cell::new(0);
    let (mut files, mut bytes) = (0u64, 0u64);
    scan_with_manifest(
        open()?,
        |manifest: &Manifest| {
            check_space(dir, manifest.files, manifest.bytes).map_err(stop)?;
            if manifest.bytes > options.max_bytes {
                return Err(stop(Refusal::TooLarge {
                    bytes: manifest.bytes,
                    max: options.max_bytes,
                }));
            }
            manifest_bytes.set(manifest.bytes);
            Ok(())
        },
        |rel, size, data| {
            // Checked at the header, before the entry's data is read.
            if bytes.saturating_add(size) > manifest_bytes.get() {
                return Err(stop(Refusal::BeyondManifest {
                    path: rel.display().to_string(),
                    size,
                    manifest: manifest_bytes.get(),
                }));
            }
            selection.consider(rel, size, data)?;
            files += 1;
            bytes += size;
            progress.file("checking", files, bytes);
            Ok(())
        },
    )
    .map_err(refused)?;
    if selection.bytes > options.max_bytes {
        return Err(refused(ArchiveError::Io(stop(Refusal::TooLarge {
            bytes: selection.bytes,
            max: options.max_bytes,
        }))));
    }
    check_space(dir, selection.files, selection.bytes).map_err(|source| RestoreError::Refused {
        archive: archive.into(),
        source,
    })?;
    progress.totals(selection.files, selection.bytes);

    check_target(dir, options.force)?;
    let created = !dir.exists();
    let lock = InstanceLock::acquire(dir)?;
    if options.force {
        empty_except(dir, &[])?;
    }
    write_atomic(&dir.join(RESTORE_MARKER), b"restore in progress\n")?;
    let mut touched = BTreeSet::new();
    let (mut files, mut bytes) = (0, 0);
    let written = scan_with_manifest(
        open()?,
        |_| Ok(()),
        |rel, size, data| {
            let Some(replacement) = selection.writes(rel) else {
                return Ok(());
            };
            let size = replacement.map_or(size, |r| r.len() as u64);
            // The archive was checked; one that changed since cannot write more than that.
            if bytes + size > selection.bytes {
                return Err(io::Error::other(format!(
                    "the archive changed after it was checked: {} goes past the {} bytes checked",
                    rel.display(),
                    selection.bytes
                )));
            }
            let path = dir.join(rel);
            let parent = path.parent().unwrap_or(dir);
            create_dir_durable(parent).map_err(io::Error::other)?;
            let mut out = private_file_options().truncate(true).open(&path)?;
            let copied = match replacement {
                Some(text) => out.write_all(text).map(|()| size)?,
                None => io::copy(&mut data.take(size), &mut out)?,
            };
            if copied != size {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} ends early", rel.display()),
                ));
            }
            out.sync_all()?;
            touched.insert(parent.to_path_buf());
            files += 1;
            bytes += size;
            progress.file("restoring", files, bytes);
            Ok(())
        },
    )
    .and_then(|scanned| {
        for d in &touched {
            fsync_dir(d).map_err(io::Error::other)?;
        }
        Ok(scanned)
    });
    let scanned = match written {
        Ok(scanned) => scanned,
        Err(source) => return Err(undo(dir, created, lock, source)),
    };
    remove_durable(&dir.join(RESTORE_MARKER), |m| fs::remove_file(m))?;
    Ok(Restored {
        scanned,
        files,
        bytes,
        skipped: selection.skipped.into_iter().collect(),
        skipped_files: selection.skipped_files,
        skipped_bytes: selection.skipped_bytes,
        config_note: selection.config_note,
    })
}

/// After a failed write pass: removes what was written (the whole directory when the restore
/// created it), the marker last; keeps the marker when that fails.
fn undo(dir: &Path, created: bool, lock: InstanceLock, source: ArchiveError) -> RestoreError {
    let cleaned = empty_except(dir, &[RESTORE_MARKER]).and_then(|()| {
        if created {
            drop(lock);
            remove_durable(dir, |d| fs::remove_dir_all(d)).map(drop)
        } else {
            remove_durable(&dir.join(RESTORE_MARKER), |m| fs::remove_file(m)).map(drop)
        }
    });
    match cleaned {
        Ok(()) => RestoreError::Undone {
            dir: dir.into(),
            source,
            removed: created,
        },
        Err(cleanup) => RestoreError::Unfinished {
            dir: dir.into(),
            source,
            cleanup: Box::new(cleanup),
        },
    }
}

/// Refuses a target that is a file, or a non-empty directory without `force`.
fn check_target(dir: &Path, force: bool) -> Result<(), RestoreError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                return Err(RestoreError::NotEmpty { dir: dir.into() });
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            Err(RestoreError::NotADirectory { dir: dir.into() })
        }
        Err(source) => Err(StoreError::Io {
            path: dir.into(),
            source,
        }
        .into()),
    }
}

/// Removes everything in `dir` but the lock this restore holds and the names in `keep`,
/// durably (`--force`, and undoing a failed restore).
fn empty_except(dir: &Path, keep: &[&str]) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: dir.into(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if name == "roundtable.lock" || keep.iter().any(|k| name == *k) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().map_err(io)?.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(|source| StoreError::Io { path, source })?;
    }
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_keys_are_cut_and_the_rest_kept() {
        let text = "# mine\nport = 9000\ntoken = \"s3cret\"\n\n# origins\nallow-origin = [\n  \"https://a.example\",\n]\ntoken-file = \"/home/a/t\" # comment\nidle-timeout = 5\n";
        let (out, dropped) = without_token(text).unwrap();
        assert_eq!(dropped, vec!["token", "token-file"]);
        assert_eq!(
            out,
            "# mine\nport = 9000\n\n# origins\nallow-origin = [\n  \"https://a.example\",\n]\nidle-timeout = 5\n"
        );
        assert!(without_token("token = \"\"\"\na\nb\"\"\"\nport = 1")
            .is_ok_and(|(o, _)| o == "port = 1"));
        assert!(without_token("port = 1").is_ok_and(|(o, d)| o == "port = 1" && d.is_empty()));
        assert!(without_token("token = ").is_err());
        // A token in a table form is not cut line by line: the file is refused.
        assert!(without_token("[token]\nx = 1\n").is_err());
    }

    #[test]
    fn conversation_data_is_format_and_conversations() {
        assert!(is_conversation_data(Path::new("FORMAT")));
        assert!(is_conversation_data(Path::new(
            "conversations/conversations.json"
        )));
        assert!(is_conversation_data(Path::new(
            "conversations/a/displayLog.jsonl"
        )));
        assert!(!is_conversation_data(Path::new("roundtable.toml")));
        assert!(!is_conversation_data(Path::new("chat/system-prompt.md")));
        assert_eq!(top_name(Path::new("chat/system-prompt.md")), "chat/");
        assert_eq!(top_name(Path::new("roundtable.toml")), "roundtable.toml");
    }
}
