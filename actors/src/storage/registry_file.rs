//! The conversation registry file, `conversations/conversations.json`: what one entry looks
//! like ([`StoredConversation`]), loading it at startup (legacy keys, the `--repair` rule, then
//! the [journal](super::journal) replayed on top; the parse itself may come early,
//! [`read_early`], and feeds a sink, [`EntrySink`]), and folding everything back into it.
//!
//! The file is TypeAgent's format, `{"sessions":[…]}`, and after a clean shutdown it alone is
//! complete, so TypeAgent's own server can read it. It is only ever replaced whole
//! ([`write_atomic`]), by [`fold`]: at startup when it is not in final form, by the
//! [`RegistryWriter`](super::journal::RegistryWriter) when the journal outgrows the registry,
//! and at clean shutdown, after which the registry leaves the `.clean-shutdown` marker
//! ([`write_clean_marker`]). Read and folded by the
//! [`ConversationRegistry`](crate::registry::ConversationRegistry).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::durable::{remove_durable, write_atomic};
use super::layout::Layout;
use super::StoreError;

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

/// One element of `sessions` that is an entry, as parsed: its strings borrowed from the
/// file's bytes where nothing in them was escaped, so a sink that keeps only some of them
/// (the registry keeps the id as a UUID) copies nothing it does not keep.
pub struct ParsedEntry<'a> {
    /// `conversationId`, or the legacy `sessionId`.
    pub conversation_id: Cow<'a, str>,
    /// `name` (empty when absent or not text).
    pub name: Cow<'a, str>,
    /// `createdAt`, or now when absent (which makes the entry `legacy`).
    pub created_at: Cow<'a, str>,
    /// `messageCount`, when it is a whole number (any other value is in `extra`).
    pub message_count: Option<u64>,
    /// Keys not interpreted here, written back unchanged.
    pub extra: Map<String, Value>,
    /// The entry is in a legacy form (`sessionId`, no `createdAt`): the file must be rewritten.
    pub legacy: bool,
}

/// A stored record as an entry (its strings moved, not copied): the journal's replay hands
/// its result to the same sink as the file's parse.
impl From<StoredConversation> for ParsedEntry<'static> {
    fn from(stored: StoredConversation) -> Self {
        ParsedEntry {
            conversation_id: Cow::Owned(stored.conversation_id),
            name: Cow::Owned(stored.name),
            created_at: Cow::Owned(stored.created_at),
            message_count: stored.message_count,
            extra: stored.extra,
            legacy: false,
        }
    }
}

impl ParsedEntry<'_> {
    /// The entry as stored.
    pub fn into_stored(self) -> StoredConversation {
        StoredConversation {
            conversation_id: self.conversation_id.into_owned(),
            name: self.name.into_owned(),
            created_at: self.created_at.into_owned(),
            message_count: self.message_count,
            extra: self.extra,
        }
    }
}

/// What the registry file's parse hands its entries to, one at a time in file order, so that
/// no list of them is built unless the sink builds one ([`FileEntries`] does; the registry's
/// startup tables are filled straight from the file).
pub trait EntrySink {
    /// An element of `sessions` that is an entry.
    fn entry(&mut self, entry: ParsedEntry<'_>);
    /// An element that is not an object or has no text `conversationId` (nor legacy
    /// `sessionId`): skipped, as TypeAgent would not find it either; the file must be
    /// rewritten without it.
    fn not_an_entry(&mut self);
}

/// Parses `bytes`, TypeAgent's `{"sessions":[…]}`, into `sink`. Other top-level keys are
/// ignored; a missing `sessions` is an empty registry. On an error the sink holds part of the
/// file and must be dropped.
pub fn parse_registry(bytes: &[u8], sink: &mut impl EntrySink) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::de::DeserializeSeed::deserialize(FileSeed(sink), &mut de)?;
    de.end()
}

/// The whole file: an object whose `sessions` array goes to the sink (read the way a derived
/// `Deserialize` of a struct with that one field reads it: from an object, or from an array
/// whose first element is the field; a repeated `sessions` is an error).
struct FileSeed<'s, S>(&'s mut S);

impl<'de, S: EntrySink> serde::de::DeserializeSeed<'de> for FileSeed<'_, S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_struct("RegistryFile", &["sessions"], self)
    }
}

impl<'de, S: EntrySink> Visitor<'de> for FileSeed<'_, S> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("struct RegistryFile")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = false;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if key.as_str() == Some("sessions") {
                if seen {
                    return Err(serde::de::Error::duplicate_field("sessions"));
                }
                seen = true;
                map.next_value_seed(SessionsSeed(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        seq.next_element_seed(SessionsSeed(self.0))?;
        Ok(())
    }
}

/// The `sessions` array: each element to the sink.
struct SessionsSeed<'s, S>(&'s mut S);

impl<'de, S: EntrySink> serde::de::DeserializeSeed<'de> for SessionsSeed<'_, S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: EntrySink> Visitor<'de> for SessionsSeed<'_, S> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(EntrySeed(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

/// One element of `sessions`: an entry, or (anything but an object with a text id) not one.
struct EntrySeed<'s, S>(&'s mut S);

impl<'de, S: EntrySink> serde::de::DeserializeSeed<'de> for EntrySeed<'_, S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match d.deserialize_any(EntryVisitor)? {
            Some(entry) => self.0.entry(entry),
            None => self.0.not_an_entry(),
        }
        Ok(())
    }
}

/// Reads one element of `sessions`: `None` when it is not an entry.
struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Option<ParsedEntry<'de>>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a registry entry")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // A repeated key: the last one counts (as in a parsed JSON object).
        let (mut id, mut legacy_id, mut name, mut created_at) = (None, None, None, None);
        let mut message_count = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let Some(key) = key.into_cow() else {
                continue;
            };
            match &*key {
                "conversationId" => id = map.next_value::<Text<'de>>()?.into_cow(),
                "sessionId" => legacy_id = map.next_value::<Text<'de>>()?.into_cow(),
                "name" => name = map.next_value::<Text<'de>>()?.into_cow(),
                "createdAt" => created_at = map.next_value::<Text<'de>>()?.into_cow(),
                "messageCount" => {
                    let value: Value = map.next_value()?;
                    match value.as_u64() {
                        Some(count) => {
                            message_count = Some(count);
                            extra.remove("messageCount");
                        }
                        None => {
                            message_count = None;
                            extra.insert("messageCount".into(), value);
                        }
                    }
                }
                _ => {
                    extra.insert(key.into_owned(), map.next_value()?);
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
            (None, None) => return Ok(None),
        };
        let created_at = created_at.unwrap_or_else(|| {
            legacy = true;
            Cow::Owned(crate::clock::now_iso())
        });
        Ok(Some(ParsedEntry {
            conversation_id,
            name: name.unwrap_or_default(),
            created_at,
            message_count,
            extra,
            legacy,
        }))
    }
    // Anything but an object is not an entry (skipped, not an error).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A JSON value read for its text: borrowed from the input when nothing in it was escaped,
/// `Other` for any other value (read as absent, as `Value::as_str` does), whose contents are
/// skipped without being built.
enum Text<'de> {
    /// Straight from the input.
    Borrowed(&'de str),
    /// Unescaped into a string of its own.
    Owned(String),
    /// Not a string.
    Other,
}

impl<'de> Text<'de> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Text::Borrowed(s) => Some(s),
            Text::Owned(s) => Some(s),
            Text::Other => None,
        }
    }

    fn into_cow(self) -> Option<Cow<'de, str>> {
        match self {
            Text::Borrowed(s) => Some(Cow::Borrowed(s)),
            Text::Owned(s) => Some(Cow::Owned(s)),
            Text::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text::Borrowed(s))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text::Owned(s.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text::Owned(s))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Text<'de>, E> {
                Ok(Text::Other)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Text<'de>, E> {
                Ok(Text::Other)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Text<'de>, E> {
                Ok(Text::Other)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Text<'de>, E> {
                Ok(Text::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Text<'de>, E> {
                Ok(Text::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text::Other)
            }
        }
        d.deserialize_any(TextVisitor)
    }
}

/// What [`read_early`] made of the registry file.
pub enum Prefetched<S> {
    /// The sink filled from the file (there was no journal to replay over it).
    Sink(S),
    /// The file's entries, for the journal's replay.
    Entries(FileEntries),
}

/// Reads and parses `layout`'s registry file ahead of the registry's opening, while the
/// server's start does its disk work (the node log's replay, the search index's opening) on
/// another thread: at 10,000 entries the parse is the longest step of a start. With no
/// registry journal to replay over the file (a clean shutdown folded it), the entries go
/// straight into `sink` (the registry's own tables); otherwise, or without a sink, they are
/// collected as [`FileEntries`] for the replay. `None` when the file is missing or does not
/// parse: the registry then reads it the ordinary way, so a missing or corrupt file and
/// `--repair` behave exactly as without this. Nothing else writes the file before the
/// registry opens, except a format upgrade or a migration:
/// [`ConversationRegistry::open`](crate::registry::ConversationRegistry::open) drops what
/// this read when either ran.
///
/// Meant for the main thread: its malloc arena grows in large steps, where a thread's own
/// arena grows a page at a time, each step an `mprotect` holding the address-space lock that
/// every other thread's page faults wait on (10,000 entries: ~570 of them, and the disk work
/// beside it took 4–9 ms instead of 1–2).
pub fn read_early<S: EntrySink>(layout: &Layout, sink: Option<S>) -> Option<Prefetched<S>> {
    // Before the parse's buffers come and go (see the function's docs).
    crate::memory::pin_allocator_thresholds();
    let path = layout.registry_file();
    let bytes = fs::read(&path).ok()?;
    match sink {
        Some(mut sink) if !layout.journal_file().exists() => {
            parse_registry(&bytes, &mut sink).ok()?;
            Some(Prefetched::Sink(sink))
        }
        _ => FileEntries::parse(&bytes, &path)
            .ok()
            .map(Prefetched::Entries),
    }
}

/// The error of a registry file that does not parse.
pub(super) fn corrupt(path: PathBuf, e: &serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        path,
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    }
}

/// The registry file's entries as a list, ready for the journal's replay: entries with no id
/// skipped (with a warning), duplicates dropped (by its own parse).
pub struct FileEntries {
    /// In registry order.
    pub(super) entries: Vec<StoredConversation>,
    /// An entry was skipped or is in a legacy form: the file must be rewritten.
    pub(super) needs_fold: bool,
    /// Elements skipped for having no id (warned about once the parse is done).
    skipped: usize,
}

impl FileEntries {
    /// Parses the registry file's `bytes` (read from `path`, named in the warnings).
    pub(super) fn parse(bytes: &[u8], path: &Path) -> Result<FileEntries, serde_json::Error> {
        let mut file = FileEntries {
            entries: Vec::new(),
            needs_fold: false,
            skipped: 0,
        };
        parse_registry(bytes, &mut file)?;
        if file.skipped > 0 {
            log::warn!(
                "{}: skipping {} registry entries with no conversationId",
                path.display(),
                file.skipped
            );
        }
        drop_duplicate_ids(&mut file.entries);
        Ok(file)
    }
}

impl EntrySink for FileEntries {
    fn entry(&mut self, entry: ParsedEntry<'_>) {
        self.needs_fold |= entry.legacy;
        self.entries.push(entry.into_stored());
    }

    fn not_an_entry(&mut self) {
        self.skipped += 1;
        self.needs_fold = true;
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

/// Accepts `conversationId`, or the legacy `sessionId` (second value: true = needs rewrite);
/// `None` for what is not an entry. The same rules as the file's own parse ([`EntryVisitor`]).
#[cfg(test)]
pub(super) fn entry_from_value(raw: &Value) -> Option<(StoredConversation, bool)> {
    let text = serde_json::to_vec(raw).expect("a value serializes");
    let mut de = serde_json::Deserializer::from_slice(&text);
    let entry = serde::Deserializer::deserialize_any(&mut de, EntryVisitor)
        .ok()
        .flatten()?;
    let legacy = entry.legacy;
    Some((entry.into_stored(), legacy))
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
