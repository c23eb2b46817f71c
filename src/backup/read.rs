//! Reading a backup archive entry by entry, with every check: [`scan`]. Used by the CLI on the
//! stream it downloads (so a backup file is known good when written) and by restore, once to
//! check before anything is written and once to extract ([`scan_with_manifest`], which also
//! shows it the manifest first).

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use roundtable_actors::storage::format::LAYOUT_VERSION;

use super::{
    EndRecord, Manifest, ARCHIVE_FORMAT, END_NAME, INSTANCE_PREFIX, MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
};

/// Why an archive is refused.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Not a Roundtable backup at all, or not one this code can make sense of.
    #[error("not a Roundtable backup: {0}")]
    NotABackup(String),
    /// Written by a newer Roundtable.
    #[error("written by a newer Roundtable (backup format {format}, layout version {layout}); this Roundtable ({version}) reads backup format {ARCHIVE_FORMAT} and layout versions up to {LAYOUT_VERSION}: restore it with the newer Roundtable", version = env!("CARGO_PKG_VERSION"))]
    TooNew {
        /// The archive's format.
        format: u32,
        /// The layout version its instance files have.
        layout: u32,
    },
    /// An entry that would land outside the instance directory, or is not a plain file.
    #[error("refusing entry {path:?}: {why}")]
    UnsafeEntry {
        /// The entry's path as stored.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The stream ends before its end record.
    #[error("the archive is incomplete (it ends before its end record): the backup was cut short")]
    Incomplete,
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What a complete scan found.
#[derive(Debug, Clone)]
pub struct Scanned {
    /// The first entry.
    pub manifest: Manifest,
    /// The last entry (its totals match what came between).
    pub end: EndRecord,
}

/// Opens `source` as an archive stream, decompressing gzip when it starts with its magic.
pub fn decompressed<R: Read + 'static>(source: R) -> io::Result<Box<dyn Read>> {
    let mut buffered = BufReader::with_capacity(64 * 1024, source);
    let gzip = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(flate2::bufread::GzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    })
}

/// Walks the archive in `source` and checks it: the manifest first (format and layout
/// version not newer than this build's), then only regular files and directories under
/// `instance/` with safe relative paths, then the end record, matching the totals, and
/// nothing after it. `on_file(path, size, data)` gets each instance file, its path relative
/// to the instance directory (directories are not passed: files name their own); data it
/// leaves unread is skipped. Stops at the first problem.
pub fn scan(
    source: impl Read,
    on_file: impl FnMut(&Path, u64, &mut dyn Read) -> io::Result<()>,
) -> Result<Scanned, ArchiveError> {
    scan_with_manifest(source, |_| Ok(()), on_file)
}

/// [`scan`], calling `on_manifest` with the manifest once it is read and checked, before any
/// instance file: restore checks its totals against the free space and its bound there.
pub fn scan_with_manifest(
    source: impl Read,
    on_manifest: impl FnOnce(&Manifest) -> io::Result<()>,
    mut on_file: impl FnMut(&Path, u64, &mut dyn Read) -> io::Result<()>,
) -> Result<Scanned, ArchiveError> {
    let mut archive = tar::Archive::new(source);
    let mut entries = archive
        .entries()
        .map_err(|e| ArchiveError::NotABackup(e.to_string()))?;
    let manifest = match entries.next() {
        None => return Err(ArchiveError::NotABackup("it is empty".into())),
        Some(first) => {
            // Whatever stops the first header from reading, this is no archive of ours.
            let mut first = first.map_err(|e| ArchiveError::NotABackup(e.to_string()))?;
            let name = String::from_utf8_lossy(&first.path_bytes()).into_owned();
            if name != MANIFEST_NAME {
                return Err(ArchiveError::NotABackup(format!(
                    "its first entry is {name:?}, not {MANIFEST_NAME}"
                )));
            }
            read_manifest(&mut first)?
        }
    };
    on_manifest(&manifest)?;
    let mut seen = EndRecord { files: 0, bytes: 0 };
    let mut end = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| not_tar(&e))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if end.is_some() {
            return Err(ArchiveError::NotABackup(format!(
                "entry {raw:?} follows the end record"
            )));
        }
        if raw == END_NAME {
            let mut text = Vec::new();
            (&mut entry).take(4096).read_to_end(&mut text)?;
            end = Some(serde_json::from_slice::<EndRecord>(&text).map_err(|e| {
                ArchiveError::NotABackup(format!("its end record does not parse: {e}"))
            })?);
            continue;
        }
        let kind = entry.header().entry_type();
        let rel = instance_path(&raw)?;
        if kind.is_dir() {
            continue;
        }
        if !(kind.is_file() || kind.is_contiguous()) {
            return Err(ArchiveError::UnsafeEntry {
                path: raw,
                why: entry_kind(kind),
            });
        }
        let size = entry.size();
        on_file(&rel, size, &mut entry)?;
        seen.files += 1;
        seen.bytes += size;
    }
    let end = end.ok_or(ArchiveError::Incomplete)?;
    if end != seen || (manifest.files, manifest.bytes) != (seen.files, seen.bytes) {
        return Err(ArchiveError::NotABackup(format!(
            "its manifest and end record say {} files of {} bytes, it holds {} files of {} bytes",
            manifest.files, manifest.bytes, seen.files, seen.bytes
        )));
    }
    Ok(Scanned { manifest, end })
}

/// A tar-level read error: a cut stream is incomplete, anything else is not a backup. (The
/// tar crate reports a stream that ends inside a block or an entry's data as `Other` with
/// these texts.)
fn not_tar(e: &io::Error) -> ArchiveError {
    let text = e.to_string();
    if e.kind() == io::ErrorKind::UnexpectedEof
        || text.contains("unexpected EOF")
        || text.contains("failed to read entire block")
    {
        ArchiveError::Incomplete
    } else {
        ArchiveError::NotABackup(text)
    }
}

/// Parses the manifest, checking the versions before anything else so a newer archive is
/// named as such even when the rest of its manifest changed shape.
fn read_manifest(entry: &mut impl Read) -> Result<Manifest, ArchiveError> {
    let mut text = Vec::new();
    entry.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ArchiveError::NotABackup(format!(
            "its manifest is larger than {MAX_MANIFEST_BYTES} bytes"
        )));
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Versions {
        format: u32,
        layout_version: u32,
    }
    let bad = |e: serde_json::Error| ArchiveError::NotABackup(format!("its manifest: {e}"));
    let versions: Versions = serde_json::from_slice(&text).map_err(bad)?;
    if versions.format > ARCHIVE_FORMAT || versions.layout_version > LAYOUT_VERSION {
        return Err(ArchiveError::TooNew {
            format: versions.format,
            layout: versions.layout_version,
        });
    }
    serde_json::from_slice(&text).map_err(bad)
}

/// The path under the instance directory an entry names, refusing anything that could land
/// elsewhere: absolute paths, `..`, `.`, empty components, or a name outside `instance/`.
fn instance_path(raw: &str) -> Result<PathBuf, ArchiveError> {
    let unsafe_entry = |why| ArchiveError::UnsafeEntry {
        path: raw.to_string(),
        why,
    };
    if raw.starts_with('/') {
        return Err(unsafe_entry("an absolute path"));
    }
    let trimmed = raw.strip_suffix('/').unwrap_or(raw);
    let mut parts = trimmed.split('/');
    if parts.next() != Some(INSTANCE_PREFIX) {
        return Err(unsafe_entry("outside instance/"));
    }
    let mut rel = PathBuf::new();
    for part in parts {
        match part {
            ".." => {
                return Err(unsafe_entry(
                    "a path that leaves the instance directory (..)",
                ))
            }
            "" | "." => return Err(unsafe_entry("an empty or '.' path component")),
            _ if part.contains('\\') || part.contains('\0') => {
                return Err(unsafe_entry("a path component with '\\' or NUL"))
            }
            _ => rel.push(part),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(unsafe_entry("the instance directory itself"));
    }
    if rel == Path::new("roundtable.lock") || rel == Path::new(".restore-incomplete") {
        return Err(unsafe_entry("a name restore keeps for itself"));
    }
    Ok(rel)
}

/// What a refused entry type is, for the message.
fn entry_kind(kind: tar::EntryType) -> &'static str {
    if kind.is_symlink() {
        "a symbolic link (backups hold regular files only)"
    } else if kind.is_hard_link() {
        "a hard link (backups hold regular files only)"
    } else {
        "a device, FIFO or other special entry (backups hold regular files only)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_paths_stay_inside() {
        assert_eq!(
            instance_path("instance/conversations/a/displayLog.jsonl").unwrap(),
            PathBuf::from("conversations/a/displayLog.jsonl")
        );
        for bad in [
            "instance/../x",
            "instance/a/../../x",
            "/etc/passwd",
            "instance//x",
            "instance/./x",
            "x",
            "instance",
            "instance/roundtable.lock",
        ] {
            assert!(instance_path(bad).is_err(), "{bad}");
        }
    }
}
