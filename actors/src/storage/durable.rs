//! Durable whole-file writes and private file modes, used by every writer of the storage layer
//! (and by the CLI for its state file).
//!
//! The rule: a file is replaced with a temp file, fsync, rename, fsync of the directory
//! ([`write_atomic`]), so a crash at any point leaves either the old or the new file. A new
//! directory entry (file or directory) is made durable by fsyncing its parent
//! ([`create_dir_durable`], [`fsync_dir`]). Files are created 0600 and directories 0700,
//! whatever the umask: conversations are private to the user running the server.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{faults, io_err, StoreError};

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
        faults::check("write", path)?;
        let mut f = private_file_options().truncate(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        faults::check("rename", path)?;
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

/// Removes `path` with `remove` (a call of `fs::remove_file` or `fs::remove_dir_all`) and fsyncs its
/// directory so the removal is durable. A missing `path` is not an error: `Ok(false)`.
pub fn remove_durable(
    path: &Path,
    remove: impl FnOnce(&Path) -> io::Result<()>,
) -> Result<bool, StoreError> {
    match remove(path) {
        Ok(()) => {
            fsync_dir(path.parent().unwrap_or(Path::new(".")))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Creates a directory and any missing parents, fsyncing the parent of each directory it
/// created so the new entries survive a crash.
pub fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    for parent in create_dir_deferred(dir)? {
        fsync_dir(&parent)?;
    }
    Ok(())
}

/// Creates `dir` and any missing parent like [`create_dir_durable`], but leaves the new
/// directory entries to the caller: returns the directories whose entries changed (each
/// created directory's parent, outermost first), for a caller whose write-ahead log replays
/// the creation after a crash and fsyncs them later (the node log's checkpoint).
pub fn create_dir_deferred(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut changed = Vec::new();
    if dir.is_dir() {
        return Ok(changed);
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
            changed.push(parent.to_path_buf());
        }
    }
    Ok(changed)
}
