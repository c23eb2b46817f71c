//! Reading the registry at start: `conversations.json` (`registry_file.rs`, the file's format)
//! with the journal (`journal.rs`) replayed on top. Its own module so the file's format and
//! the journal, which folds into that file, do not need each other.

use std::fs;
use std::io;
use std::path::Path;

use super::durable::fsync_dir;
use super::journal::replay_journal;
use super::layout::Layout;
use super::registry_file::{corrupt, FileEntries, LoadedRegistry, StoredConversation};
use super::{io_err, StoreError};

/// Loads `conversations.json` and replays the journal. A file that does not parse is an error
/// (never overwritten); with `repair` it is moved aside to `conversations.json.corrupt-<ts>` first.
/// `prefetched`: the same file already parsed ([`read_early`](super::registry_file::read_early)), used when it parsed.
pub fn load_registry(
    layout: &Layout,
    repair: bool,
    prefetched: Option<FileEntries>,
) -> Result<LoadedRegistry, StoreError> {
    let path = layout.registry_file();
    let mut loaded = LoadedRegistry::default();
    let parsed = match prefetched {
        Some(entries) => Some(Ok(entries)),
        None => match fs::read(&path) {
            Ok(bytes) => Some(FileEntries::parse(&bytes, &path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::Io { path, source: e }),
        },
    };
    match parsed {
        Some(Ok(FileEntries {
            entries,
            needs_fold,
            ..
        })) => {
            loaded.entries = entries;
            loaded.needs_fold = needs_fold;
        }
        Some(Err(e)) if repair => {
            let aside = path.with_file_name(format!(
                "conversations.json.corrupt-{}",
                crate::clock::now_millis()
            ));
            fs::rename(&path, &aside).map_err(io_err(&path))?;
            fsync_dir(&layout.conversations_dir())?;
            log::warn!(
                "--repair: {} did not parse ({e}); moved it to {} and starting with an empty registry",
                path.display(),
                aside.display()
            );
            loaded.needs_fold = true;
        }
        Some(Err(e)) => return Err(corrupt(path, &e)),
        None => {}
    }
    let replayed = replay_journal(&layout.journal_file(), u64::MAX, &mut loaded.entries)?;
    loaded.needs_fold |= replayed.applied > 0;
    loaded.deleted = replayed.deleted;
    Ok(loaded)
}

/// The registry a backup snapshot holds: `registry` (the linked `conversations.json`, when
/// there is one) with the first `len` bytes of `journal` replayed on top, read as startup
/// would read it, without writing anything.
pub fn read_registry_at(
    registry: Option<&Path>,
    journal: Option<(&Path, u64)>,
) -> Result<Vec<StoredConversation>, StoreError> {
    let mut entries = Vec::new();
    if let Some(path) = registry {
        let bytes = fs::read(path).map_err(io_err(path))?;
        entries = FileEntries::parse(&bytes, path)
            .map_err(|e| corrupt(path.to_path_buf(), &e))?
            .entries;
    }
    if let Some((path, len)) = journal {
        replay_journal(path, len, &mut entries)?;
    }
    Ok(entries)
}
