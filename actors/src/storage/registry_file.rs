//! The conversation registry file, `conversations/conversations.json`: what one entry looks
//! like ([`StoredConversation`]), loading it at startup (legacy keys, the `--repair` rule, then
//! the [journal](super::journal) replayed on top; the parse itself starts early, on its own
//! thread, as a [`RegistryPrefetch`]), and folding everything back into it.
//!
//! The file is TypeAgent's format, `{"sessions":[…]}`, and after a clean shutdown it alone is
//! complete, so TypeAgent's own server can read it. It is only ever replaced whole
//! ([`write_atomic`]), by [`fold`]: at startup when it is not in final form, by the
//! [`RegistryWriter`](super::journal::RegistryWriter) when the journal outgrows the registry,
//! and at clean shutdown, after which the registry leaves the `.clean-shutdown` marker
//! ([`write_clean_marker`]). Read and folded by the
//! [`ConversationRegistry`](crate::registry::ConversationRegistry).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::durable::{fsync_dir, remove_durable, write_atomic};
use super::journal::replay_journal;
use super::layout::Layout;
use super::{io_err, StoreError};

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
    /// TypeAgent's `messageCount`, when it is a whole number: a field of its own rather than a
    /// key of `extra`, so that the 10,000 entries of a large registry do not each allocate a
    /// map for it at startup (that alone was 4 of the 10 ms a fresh process took to parse
    /// one). Any other value of the key stays in `extra`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number_or_none"
    )]
    pub message_count: Option<u64>,
    /// Keys we do not interpret, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `messageCount` as the derived `Deserialize` reads it (the journal, the cluster's copies,
/// which Roundtable wrote): a whole number, or `None` for any other value, which the registry
/// replaces with its own count anyway.
fn whole_number_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

/// The registry as loaded at startup, in registry order.
#[derive(Debug, Default)]
pub struct LoadedRegistry {
    /// Entries in registry order.
    pub entries: Vec<StoredConversation>,
    /// True when the file on disk is not in final form (legacy keys, journal present, sweep)
    /// and must be rewritten before serving.
    pub needs_fold: bool,
    /// Ids the journal deleted: their directories must be gone before the fold drops the
    /// journal (a crash between a delete's journal record and its directory's removal, or a
    /// removal that failed, leaves one behind).
    pub deleted: Vec<String>,
}

/// The registry file as parsed: each element of `sessions` is read straight into a
/// [`StoredConversation`] ([`FileEntry`]), with no `serde_json::Value` tree of the whole file
/// in between (10,000 entries parsed as a tree took 45 ms and peaked at 20 MB).
#[derive(Deserialize)]
struct RegistryFile {
    /// The entries, in registry order.
    #[serde(default)]
    sessions: Vec<FileEntry>,
}

/// One element of `sessions` as read from the file: `None` when it is not an object or has
/// no text `conversationId` (nor legacy `sessionId`): skipped with a warning, as TypeAgent
/// would not find it either. Otherwise the entry and whether it needs a rewrite (legacy
/// `sessionId`, no `createdAt`).
struct FileEntry(Option<(StoredConversation, bool)>);

/// A key of a registry entry: the four Roundtable reads, or any other (kept in `extra`).
/// Known keys are matched on the borrowed text, so they cost no allocation.
enum EntryKey {
    /// `conversationId`.
    ConversationId,
    /// `sessionId` (TypeAgent's legacy name for the id).
    SessionId,
    /// `name`.
    Name,
    /// `createdAt`.
    CreatedAt,
    /// `messageCount`.
    MessageCount,
    /// Anything else, written back unchanged.
    Other(String),
}

impl<'de> Deserialize<'de> for EntryKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = EntryKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<EntryKey, E> {
                Ok(match key {
                    "conversationId" => EntryKey::ConversationId,
                    "sessionId" => EntryKey::SessionId,
                    "name" => EntryKey::Name,
                    "createdAt" => EntryKey::CreatedAt,
                    "messageCount" => EntryKey::MessageCount,
                    other => EntryKey::Other(other.to_string()),
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The text of a value, or `None` when it is not a string (read as absent, as
/// `Value::as_str` did).
fn text_of(value: Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s),
        _ => None,
    }
}

impl<'de> Deserialize<'de> for FileEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = FileEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a registry entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FileEntry, A::Error> {
                // A repeated key: the last one counts (as in a parsed JSON object).
                let (mut id, mut legacy_id, mut name, mut created_at) = (None, None, None, None);
                let mut message_count = None;
                let mut extra = Map::new();
                while let Some(key) = map.next_key::<EntryKey>()? {
                    let value: Value = map.next_value()?;
                    match key {
                        EntryKey::ConversationId => id = text_of(value),
                        EntryKey::SessionId => legacy_id = text_of(value),
                        EntryKey::Name => name = text_of(value),
                        EntryKey::CreatedAt => created_at = text_of(value),
                        EntryKey::MessageCount => match value.as_u64() {
                            Some(count) => {
                                message_count = Some(count);
                                extra.remove("messageCount");
                            }
                            None => {
                                message_count = None;
                                extra.insert("messageCount".into(), value);
                            }
                        },
                        EntryKey::Other(k) => {
                            extra.insert(k, value);
                        }
                    }
                }
                let mut legacy = false;
                let conversation_id = match (id, legacy_id) {
                    (Some(id), _) => id,
                    (None, Some(id)) => {
                        legacy = true;
                        id
                    }
                    (None, None) => return Ok(FileEntry(None)),
                };
                let created_at = created_at.unwrap_or_else(|| {
                    legacy = true;
                    crate::clock::now_iso()
                });
                let entry = StoredConversation {
                    conversation_id,
                    name: name.unwrap_or_default(),
                    created_at,
                    message_count,
                    extra,
                };
                Ok(FileEntry(Some((entry, legacy))))
            }
            // Anything but an object is not an entry (skipped, not an error).
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FileEntry, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FileEntry(None))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<FileEntry, E> {
                Ok(FileEntry(None))
            }
        }
        d.deserialize_any(EntryVisitor)
    }
}

/// `conversations.json` read and parsed on a thread of its own, started as soon as the
/// instance lock is held ([`RegistryPrefetch::start`]), so that the parse, the longest step of
/// a large instance's start (10,000 entries: ~6 ms in a fresh process), runs beside the node
/// log's replay and the search index's opening instead of after them. Nothing else writes the
/// file before the registry opens, except a format upgrade or a migration:
/// [`ConversationRegistry::open`](crate::registry::ConversationRegistry::open) hands the
/// prefetch to [`load_registry`] only when neither ran, and drops it otherwise. A prefetch
/// that did not parse cleanly is ignored: the file is read again the ordinary way, so a missing
/// or corrupt file and `--repair` behave exactly as without one.
pub struct RegistryPrefetch(std::thread::JoinHandle<Option<FileEntries>>);

impl RegistryPrefetch {
    /// Starts reading and parsing `layout`'s registry file. `None` when no thread can be
    /// started (the registry is then read when it opens).
    pub fn start(layout: &Layout) -> Option<RegistryPrefetch> {
        let path = layout.registry_file();
        std::thread::Builder::new()
            .name("registry-prefetch".into())
            .spawn(move || {
                let bytes = fs::read(&path).ok()?;
                let file = serde_json::from_slice::<RegistryFile>(&bytes).ok()?;
                drop(bytes);
                Some(FileEntries::of(file, &path))
            })
            .map(RegistryPrefetch)
            .map_err(|e| log::debug!("registry prefetch: cannot start a thread: {e}"))
            .ok()
    }

    /// The parsed file's entries, once the thread is done; `None` when it did not parse.
    fn take(self) -> Option<FileEntries> {
        self.0.join().ok().flatten()
    }
}

/// Loads `conversations.json` and replays the journal. A file that does not parse is an error
/// (never overwritten); with `repair` it is moved aside to `conversations.json.corrupt-<ts>` first.
/// `prefetched`: the same file already parsed ([`RegistryPrefetch`]), used when it parsed.
pub fn load_registry(
    layout: &Layout,
    repair: bool,
    prefetched: Option<RegistryPrefetch>,
) -> Result<LoadedRegistry, StoreError> {
    let path = layout.registry_file();
    let mut loaded = LoadedRegistry::default();
    let parsed = match prefetched.and_then(RegistryPrefetch::take) {
        Some(entries) => Some(Ok(entries)),
        None => match fs::read(&path) {
            Ok(bytes) => Some(
                serde_json::from_slice::<RegistryFile>(&bytes)
                    .map(|file| FileEntries::of(file, &path)),
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::Io { path, source: e }),
        },
    };
    match parsed {
        Some(Ok(FileEntries {
            entries,
            needs_fold,
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
        Some(Err(e)) => {
            return Err(StoreError::Corrupt {
                path,
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
        }
        None => {}
    }
    let replayed = replay_journal(&layout.journal_file(), u64::MAX, &mut loaded.entries)?;
    loaded.needs_fold |= replayed.applied > 0;
    loaded.deleted = replayed.deleted;
    Ok(loaded)
}

/// The registry file's entries, ready for the journal's replay: entries with no id skipped
/// (with a warning), duplicates dropped. Made on the prefetch thread when there is one.
struct FileEntries {
    /// In registry order.
    entries: Vec<StoredConversation>,
    /// An entry was skipped or is in a legacy form: the file must be rewritten.
    needs_fold: bool,
}

impl FileEntries {
    fn of(file: RegistryFile, path: &Path) -> FileEntries {
        let mut needs_fold = false;
        let mut entries = Vec::with_capacity(file.sessions.len());
        for FileEntry(raw) in file.sessions {
            match raw {
                Some((entry, legacy)) => {
                    needs_fold |= legacy;
                    entries.push(entry);
                }
                None => {
                    log::warn!(
                        "{}: skipping a registry entry with no conversationId",
                        path.display()
                    );
                    needs_fold = true;
                }
            }
        }
        drop_duplicate_ids(&mut entries);
        FileEntries {
            entries,
            needs_fold,
        }
    }
}

/// Rejects duplicate ids (keeps the first): a hand-edited file must not make two entries share
/// one directory.
fn drop_duplicate_ids(entries: &mut Vec<StoredConversation>) {
    // Found by borrowing the ids (no copy of each); the second pass only runs when a
    // hand-edited file has duplicates.
    let mut seen = HashSet::with_capacity(entries.len());
    let duplicates: HashSet<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| !seen.insert(e.conversation_id.as_str()))
        .map(|(i, _)| i)
        .collect();
    drop(seen);
    if !duplicates.is_empty() {
        let mut i = 0;
        entries.retain(|_| {
            i += 1;
            !duplicates.contains(&(i - 1))
        });
    }
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
        let file: RegistryFile =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })?;
        entries = file
            .sessions
            .into_iter()
            .filter_map(|FileEntry(raw)| raw)
            .map(|(entry, _)| entry)
            .collect();
        drop_duplicate_ids(&mut entries);
    }
    if let Some((path, len)) = journal {
        replay_journal(path, len, &mut entries)?;
    }
    Ok(entries)
}

/// Accepts `conversationId`, or the legacy `sessionId` (second value: true = needs rewrite);
/// `None` for what is not an entry. The same rules as the file's own parse ([`FileEntry`]).
#[cfg(test)]
pub(super) fn entry_from_value(raw: &Value) -> Option<(StoredConversation, bool)> {
    FileEntry::deserialize(raw).ok().and_then(|FileEntry(e)| e)
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
    remove_durable(&layout.journal_file(), |file| fs::remove_file(file)).map(drop)
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
    remove_durable(&layout.conversations_dir().join(CLEAN_MARKER), |file| {
        fs::remove_file(file)
    })
}
