//! `roundtable restore`: fills a new instance directory from an archive, durably.
//!
//! 1. The whole archive is checked first ([`scan`]): nothing is written for a bad,
//!    truncated, newer or hostile one.
//! 2. The directory must be new or empty; `--force` empties it instead (the entries of a
//!    directory that holds a live instance are refused by its lock: the restore takes the
//!    instance lock for its whole run, as a server would).
//! 3. [`RESTORE_MARKER`] is written (durably) before the first file and removed (durably)
//!    after the last one is fsynced along with every directory it created: a server refuses
//!    a directory whose restore did not finish, so a half-restored instance is never served.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use roundtable_actors::storage::durable::{
    create_dir_durable, fsync_dir, private_file_options, remove_durable, write_atomic,
};
use roundtable_actors::storage::format::RESTORE_MARKER;
use roundtable_actors::storage::lock::InstanceLock;
use roundtable_actors::storage::StoreError;

use super::read::{decompressed, scan, ArchiveError, Scanned};

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
    /// Writing failed half-way; the directory keeps the unfinished-restore marker.
    #[error("restoring into {} failed: {source}; the directory is marked unfinished (servers refuse it): run the restore again with --force", dir.display())]
    Unfinished {
        /// The target.
        dir: PathBuf,
        /// The failure.
        source: ArchiveError,
    },
}

/// What a restore reports as it goes: the phase, files and bytes so far.
pub trait Progress {
    /// Called after each file of a phase (`"checking"`, then `"restoring"`).
    fn file(&mut self, phase: &'static str, files: u64, bytes: u64);

    /// The archive's totals, known once it has been checked.
    fn totals(&mut self, _files: u64, _bytes: u64) {}
}

/// Checks `archive` and restores it into `dir` (see the module docs); returns what it held.
pub fn restore(
    archive: &Path,
    dir: &Path,
    force: bool,
    progress: &mut dyn Progress,
) -> Result<Scanned, RestoreError> {
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
    let refused = |source| RestoreError::Archive {
        archive: archive.into(),
        source,
    };
    let (mut files, mut bytes) = (0, 0);
    let checked = scan(open()?, |_, size, _| {
        files += 1;
        bytes += size;
        progress.file("checking", files, bytes);
        Ok(())
    })
    .map_err(refused)?;
    progress.totals(checked.end.files, checked.end.bytes);

    check_target(dir, force)?;
    let _lock = InstanceLock::acquire(dir)?;
    if force {
        empty_except_lock(dir)?;
    }
    write_atomic(&dir.join(RESTORE_MARKER), b"restore in progress\n")?;
    let unfinished = |source| RestoreError::Unfinished {
        dir: dir.into(),
        source,
    };
    let mut touched = BTreeSet::new();
    let (mut files, mut bytes) = (0, 0);
    let scanned = scan(open()?, |rel, size, data| {
        let path = dir.join(rel);
        let parent = path.parent().unwrap_or(dir);
        create_dir_durable(parent).map_err(io::Error::other)?;
        let mut out = private_file_options().truncate(true).open(&path)?;
        if io::copy(data, &mut out)? != size {
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
    })
    .map_err(unfinished)?;
    for d in &touched {
        fsync_dir(d)?;
    }
    remove_durable(&dir.join(RESTORE_MARKER), |m| fs::remove_file(m))?;
    Ok(scanned)
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

/// `--force`: removes everything in `dir` but the lock this restore holds, durably.
fn empty_except_lock(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: dir.into(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_name() == "roundtable.lock" {
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
