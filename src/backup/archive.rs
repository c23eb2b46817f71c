//! Writing a backup archive from a [`Snapshot`]: [`plan`] picks the files and builds the
//! [`Manifest`] (a few small reads: the registry at the cut, each display log's last line,
//! each request journal), [`write()`] streams the tar. Both run on the route's `backup-stream`
//! thread, never on an actor.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};

use roundtable_actors::storage::format::{self, LAYOUT_VERSION};
use roundtable_actors::storage::snapshot::{Snapshot, SnapshotFile};
use roundtable_actors::storage::{display_log, registry_file, registry_load, requests};

use super::{
    EndRecord, Manifest, ManifestConversation, ARCHIVE_FORMAT, END_NAME, INSTANCE_PREFIX,
    MANIFEST_NAME,
};

/// The registry file and journal, relative to the instance directory.
const REGISTRY_FILE: &str = "conversations/conversations.json";
const JOURNAL_FILE: &str = "conversations/conversations.journal";

/// What goes into one archive.
pub struct Plan {
    /// The first entry.
    pub manifest: Manifest,
    /// The instance files, each read up to its snapshot length.
    pub files: Vec<SnapshotFile>,
}

/// Picks the files of `snapshot` that go in and describes them. A conversation directory
/// the registry at the cut does not list (created after it, deleted before it, or an
/// orphan) is left out.
pub fn plan(snapshot: &Snapshot) -> Result<Plan, String> {
    let registry = registry_load::read_registry_at(
        snapshot
            .file(Path::new(REGISTRY_FILE))
            .map(|f| snapshot.path(f))
            .as_deref(),
        snapshot
            .file(Path::new(JOURNAL_FILE))
            .map(|f| (snapshot.path(f), f.len))
            .as_ref()
            .map(|(p, len)| (p.as_path(), *len)),
    )
    .map_err(|e| format!("reading the registry at the snapshot point: {e}"))?;
    let listed: HashSet<&str> = registry
        .iter()
        .map(|e| e.conversation_id.as_str())
        .collect();
    let files: Vec<SnapshotFile> = snapshot
        .files
        .iter()
        .filter(|f| conversation_of(&f.rel).is_none_or(|id| listed.contains(id)))
        .cloned()
        .collect();
    let mut conversations = Vec::with_capacity(registry.len());
    for entry in &registry {
        conversations.push(describe(snapshot, entry).map_err(|e| {
            format!(
                "reading conversation {} at the snapshot point: {e}",
                entry.conversation_id
            )
        })?);
    }
    let layout_version = snapshot
        .file(Path::new(format::FORMAT_FILE))
        .map(|f| format::read_version(&snapshot.path(f)))
        .transpose()
        .map_err(|e| e.to_string())?
        .flatten()
        .unwrap_or(LAYOUT_VERSION);
    let manifest = Manifest {
        format: ARCHIVE_FORMAT,
        layout_version,
        roundtable_version: env!("CARGO_PKG_VERSION").into(),
        snapshot_at: iso(snapshot.taken_at_ms),
        snapshot_millis: snapshot.taken_at_ms,
        writers_held_micros: snapshot.held.as_micros() as u64,
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.len).sum(),
        conversations,
    };
    Ok(Plan { manifest, files })
}

/// The conversation id a path under `conversations/<id>/…` belongs to.
fn conversation_of(rel: &Path) -> Option<&str> {
    let mut parts = rel.components();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Component::Normal(top)), Some(Component::Normal(id)), Some(_))
            if top == "conversations" =>
        {
            id.to_str()
        }
        _ => None,
    }
}

/// One registry entry's manifest line: its display log's last entry and its open requests,
/// read up to their snapshot lengths.
fn describe(
    snapshot: &Snapshot,
    entry: &registry_file::StoredConversation,
) -> io::Result<ManifestConversation> {
    let dir = PathBuf::from("conversations").join(&entry.conversation_id);
    let log = snapshot.file(&dir.join(display_log::FILE_NAME));
    let (last_seq, message_count) = match log {
        Some(f) => display_log::last_entry_at(&snapshot.path(f), f.len)?
            .map_or((None, 0), |(seq, count)| (Some(seq), count)),
        None => legacy_tail(snapshot, &dir.join(display_log::LEGACY_FILE_NAME)),
    };
    let open = match snapshot.file(&dir.join(requests::FILE_NAME)) {
        Some(f) => {
            let journal = BufReader::new(File::open(snapshot.path(f))?.take(f.len));
            requests::parse_open(journal, &f.rel)
        }
        None => Vec::new(),
    };
    let mut open_requests = Vec::new();
    for request in open {
        // Its result may be durable before its `closed` record: then it finished (a restored
        // conversation's recovery skips it the same way).
        let finished = match (request.started_seq, log, last_seq) {
            (Some(from), Some(f), Some(last)) => has_result(
                &snapshot.path(f),
                f.len,
                from,
                last,
                request.accepted.request_id.as_str(),
            )?,
            _ => false,
        };
        if !finished {
            open_requests.push(request.accepted.request_id.as_str().to_string());
        }
    }
    Ok(ManifestConversation {
        conversation_id: entry.conversation_id.clone(),
        name: entry.name.clone(),
        created_at: entry.created_at.clone(),
        last_seq,
        message_count,
        open_requests,
    })
}

/// Whether the log at `path`, cut at `len`, holds a `command-result` for `request` with a seq
/// in `from..=last`.
fn has_result(path: &Path, len: u64, from: u64, last: u64, request: &str) -> io::Result<bool> {
    Ok(display_log::read_range_at(path, Some(len), from, last + 1)?
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .any(|e| e["type"] == "command-result" && e["requestId"]["requestId"] == request))
}

/// Last seq and message count of a TypeAgent `displayLog.json` not imported yet (a JSON
/// array; rare, and read whole).
fn legacy_tail(snapshot: &Snapshot, rel: &Path) -> (Option<u64>, u64) {
    let Some(f) = snapshot.file(rel) else {
        return (None, 0);
    };
    let entries: Vec<serde_json::Value> = std::fs::read(snapshot.path(f))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let users = entries
        .iter()
        .filter(|e| e["type"] == "user-request")
        .count() as u64;
    let last = entries
        .len()
        .checked_sub(1)
        .map(|i| entries[i]["seq"].as_u64().unwrap_or(i as u64));
    (last, users)
}

/// ms since the epoch as ISO-8601 UTC with milliseconds.
fn iso(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// Streams the archive of `plan` into `out`: manifest, files (each cut at its snapshot
/// length), end record. Fails when `out` does (the client went away) or a file cannot be read.
pub fn write(snapshot: &Snapshot, plan: &Plan, out: impl Write) -> io::Result<()> {
    let mut tar = tar::Builder::new(out);
    let manifest = serde_json::to_vec_pretty(&plan.manifest).map_err(io::Error::other)?;
    append_bytes(&mut tar, MANIFEST_NAME, &manifest)?;
    for file in &plan.files {
        let path = snapshot.path(file);
        let opened = File::open(&path)?;
        let mtime = opened
            .metadata()?
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(file.len);
        header.set_mode(0o600);
        header.set_mtime(mtime);
        let data = Exact {
            inner: opened.take(file.len),
            left: file.len,
            path: &path,
        };
        tar.append_data(
            &mut header,
            Path::new(INSTANCE_PREFIX).join(&file.rel),
            data,
        )?;
    }
    let end = EndRecord {
        files: plan.files.len() as u64,
        bytes: plan.manifest.bytes,
    };
    append_bytes(&mut tar, END_NAME, &serde_json::to_vec(&end)?)?;
    tar.into_inner()?.flush()
}

/// Appends a small file built in memory.
fn append_bytes<W: Write>(tar: &mut tar::Builder<W>, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    tar.append_data(&mut header, name, bytes)
}

/// A file's data up to its snapshot length, failing if it ends sooner (the header already
/// promised that many bytes).
struct Exact<'a> {
    /// The file, limited to the length.
    inner: io::Take<File>,
    /// Bytes still owed.
    left: u64,
    /// For the error.
    path: &'a Path,
}

impl Read for Exact<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} shrank below its snapshot length while it was being archived",
                    self.path.display()
                ),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}
