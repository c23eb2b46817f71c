//! The instance directory's layout version, `<instance>/FORMAT` (one number and a newline),
//! and the upgrades from older layouts. [`open`] runs first at startup, under the instance
//! lock, before the registry is read ([`ConversationRegistry::open`]); `roundtable restore`
//! reads [`LAYOUT_VERSION`] to refuse archives of a newer layout.
//!
//! | version | written by | on disk |
//! | --- | --- | --- |
//! | 0 | TypeAgent's agent server | `server-sessions/` or `conversations/sessions.json`, `sessionId` keys, `displayLog.json` arrays |
//! | 1 | Roundtable before `FORMAT` existed | `conversations/conversations.json` + `.journal`, `displayLog.jsonl`, `requests.jsonl`, `sessions/chat/history.jsonl` |
//! | 2 | Roundtable with `FORMAT` | version 1 and `FORMAT` |
//!
//! A directory without `FORMAT` is version 0 when TypeAgent's legacy registry is there
//! (`server-sessions/` or `conversations/sessions.json`), 1 when `conversations/` is, and new
//! otherwise. (TypeAgent's current layout, `conversations/conversations.json` with
//! `displayLog.json` arrays, reads as 1: nothing in it needs a renaming step.)
//!
//! # Upgrades
//! Each step keeps a copy of every file it replaces in `<instance>/.upgrade-backup-v<from>/`
//! (same relative paths, written durably) before it changes anything, and `FORMAT` is written
//! last ([`write_atomic`]): a crash mid-way leaves no `FORMAT`, and the next start runs the
//! (idempotent) steps again without overwriting the copies it already kept.
//! - 0 → 1: TypeAgent's renames ([`migrate`](super::migrate)); the registry file it may replace
//!   is copied first. `sessionId` keys are rewritten and `displayLog.json` imported when the
//!   registry and each conversation load, as for any version (the originals stay).
//! - 1 → 2: nothing on disk changes but `FORMAT`.
//!
//! A newer version is refused ([`StoreError::LayoutTooNew`]) and nothing is touched. So is a
//! directory holding an interrupted restore ([`RESTORE_MARKER`]).
//!
//! [`ConversationRegistry::open`]: crate::registry::ConversationRegistry::open

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::durable::{create_dir_durable, write_atomic};
use super::layout::Layout;
use super::migrate::migrate;
use super::{io_err, StoreError};

/// The version file's name, in the instance directory.
pub const FORMAT_FILE: &str = "FORMAT";
/// The layout this Roundtable writes (and the newest it reads).
pub const LAYOUT_VERSION: u32 = 2;
/// Left in an instance directory while `roundtable restore` fills it, removed (durably) when
/// it is complete: a server refuses a directory that has it.
pub const RESTORE_MARKER: &str = ".restore-incomplete";

/// The layout version of the directory at `root`, as found: `None` for a new (or empty) one.
pub fn detect(root: &Path) -> Result<Option<u32>, StoreError> {
    if let Some(version) = read_version(&root.join(FORMAT_FILE))? {
        return Ok(Some(version));
    }
    let layout = Layout::new(root);
    if root.join("server-sessions").is_dir()
        || layout.conversations_dir().join("sessions.json").is_file()
    {
        Ok(Some(0))
    } else if layout.conversations_dir().is_dir() {
        Ok(Some(1))
    } else {
        Ok(None)
    }
}

/// The number in a `FORMAT` file; `None` when there is no such file.
pub fn read_version(path: &Path) -> Result<Option<u32>, StoreError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| StoreError::BadFormat {
            path: path.to_path_buf(),
            text: text.chars().take(40).collect(),
        })
}

/// Refuses a layout newer than this Roundtable's.
pub fn check_supported(dir: &Path, found: u32) -> Result<(), StoreError> {
    if found > LAYOUT_VERSION {
        return Err(StoreError::LayoutTooNew {
            dir: dir.to_path_buf(),
            found,
            supported: LAYOUT_VERSION,
        });
    }
    Ok(())
}

/// Startup: refuses an interrupted restore or a newer layout, upgrades an older one in place
/// and writes `FORMAT`. Returns what it did, for the log.
pub fn open(layout: &Layout) -> Result<Vec<String>, StoreError> {
    let root = &layout.root;
    if root.join(RESTORE_MARKER).exists() {
        return Err(StoreError::RestoreIncomplete { dir: root.clone() });
    }
    let found = detect(root)?;
    let mut done = Vec::new();
    match found {
        Some(v) if v == LAYOUT_VERSION => return Ok(done),
        Some(v) => {
            check_supported(root, v)?;
            if v == 0 {
                let kept = keep_copies(root, 0, &typeagent_registry_files(layout))?;
                done.extend(migrate(layout)?);
                done.push(format!(
                    "kept TypeAgent's registry files ({kept}) in {}",
                    upgrade_backup_dir(root, 0).display()
                ));
            }
            done.push(format!(
                "upgraded {} from layout version {v} to {LAYOUT_VERSION}",
                root.display()
            ));
        }
        None => {}
    }
    write_atomic(
        &root.join(FORMAT_FILE),
        format!("{LAYOUT_VERSION}\n").as_bytes(),
    )?;
    Ok(done)
}

/// `<root>/.upgrade-backup-v<from>/`.
pub fn upgrade_backup_dir(root: &Path, from: u32) -> PathBuf {
    root.join(format!(".upgrade-backup-v{from}"))
}

/// The files the 0 → 1 renames may replace or move: TypeAgent's registry files (relative to
/// the instance directory).
fn typeagent_registry_files(layout: &Layout) -> Vec<PathBuf> {
    [
        "server-sessions/sessions.json",
        "conversations/sessions.json",
    ]
    .into_iter()
    .map(PathBuf::from)
    .chain(
        layout
            .registry_file()
            .strip_prefix(&layout.root)
            .ok()
            .map(Path::to_path_buf),
    )
    .filter(|rel| layout.root.join(rel).is_file())
    .collect()
}

/// Copies `files` (relative to `root`) into `.upgrade-backup-v<from>/` durably, keeping a copy
/// an earlier, interrupted upgrade made. Returns how many it holds.
fn keep_copies(root: &Path, from: u32, files: &[PathBuf]) -> Result<usize, StoreError> {
    let dir = upgrade_backup_dir(root, from);
    for rel in files {
        let copy = dir.join(rel);
        if copy.exists() {
            continue;
        }
        let original = root.join(rel);
        let bytes = fs::read(&original).map_err(io_err(&original))?;
        create_dir_durable(copy.parent().unwrap_or(&dir))?;
        write_atomic(&copy, &bytes)?;
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New directories get `FORMAT`, version 1 is upgraded by writing it, a newer version
    /// and an unfinished restore are refused untouched, and a second start does nothing.
    #[test]
    fn versions_are_detected_upgraded_and_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(open(&layout).unwrap().is_empty());
        assert_eq!(detect(dir.path()).unwrap(), Some(LAYOUT_VERSION));

        let v1 = tempfile::tempdir().unwrap();
        fs::create_dir_all(v1.path().join("conversations")).unwrap();
        assert_eq!(detect(v1.path()).unwrap(), Some(1));
        let done = open(&Layout::new(v1.path())).unwrap();
        assert!(done[0].contains("from layout version 1 to 2"), "{done:?}");
        assert!(open(&Layout::new(v1.path())).unwrap().is_empty());

        fs::write(dir.path().join(FORMAT_FILE), "3\n").unwrap();
        let err = open(&layout).unwrap_err().to_string();
        assert!(err.contains("layout version 3"), "{err}");
        assert!(err.contains("up to 2"), "{err}");
        assert_eq!(
            fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap(),
            "3\n"
        );

        fs::write(dir.path().join(FORMAT_FILE), "two").unwrap();
        assert!(matches!(open(&layout), Err(StoreError::BadFormat { .. })));

        fs::write(dir.path().join(RESTORE_MARKER), "").unwrap();
        assert!(matches!(
            open(&layout),
            Err(StoreError::RestoreIncomplete { .. })
        ));
    }
}
