//! The conversation registry file, `conversations/conversations.json`: what one entry looks
//! like ([`StoredConversation`]), loading it at startup (legacy keys, the `--repair` rule, then
//! the [journal](super::journal) replayed on top), and folding everything back into it.
//!
//! The file is TypeAgent's format, `{"sessions":[…]}`, and after a clean shutdown it alone is
//! complete, so TypeAgent's own server can read it. It is only ever replaced whole
//! ([`write_atomic`]), by [`fold`]: at startup when it is not in final form, by the
//! [`RegistryWriter`](super::journal::RegistryWriter) when the journal outgrows the registry,
//! and at clean shutdown, after which the registry leaves the `.clean-shutdown` marker
//! ([`write_clean_marker`]). Read and folded by the
//! [`ConversationRegistry`](crate::registry::ConversationRegistry).

use std::collections::HashMap;
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
    /// Keys we do not interpret, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The registry as loaded at startup, in registry order.
#[derive(Debug, Default)]
pub struct LoadedRegistry {
    /// Entries in registry order.
    pub entries: Vec<StoredConversation>,
    /// True when the file on disk is not in final form (legacy keys, journal present, sweep)
    /// and must be rewritten before serving.
    pub needs_fold: bool,
}

/// The registry file as parsed: its entries are checked one by one (`entry_from_value`).
#[derive(Deserialize)]
struct RegistryFile {
    #[serde(default)]
    sessions: Vec<Value>,
}

/// Loads `conversations.json` and replays the journal. A file that does not parse is an error
/// (never overwritten); with `repair` it is moved aside to `conversations.json.corrupt-<ts>` first.
pub fn load_registry(layout: &Layout, repair: bool) -> Result<LoadedRegistry, StoreError> {
    let path = layout.registry_file();
    let mut loaded = LoadedRegistry::default();
    match fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<RegistryFile>(&bytes) {
            Ok(file) => {
                for raw in &file.sessions {
                    match entry_from_value(raw) {
                        Some((entry, legacy)) => {
                            loaded.needs_fold |= legacy;
                            loaded.entries.push(entry);
                        }
                        None => {
                            log::warn!(
                                "{}: skipping a registry entry with no conversationId",
                                path.display()
                            );
                            loaded.needs_fold = true;
                        }
                    }
                }
            }
            Err(e) if repair => {
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
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path,
                    line: e.line(),
                    column: e.column(),
                    message: e.to_string(),
                })
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::Io { path, source: e }),
    }
    drop_duplicate_ids(&mut loaded.entries);
    let replayed = replay_journal(&layout.journal_file(), u64::MAX, &mut loaded.entries)?;
    loaded.needs_fold |= replayed > 0;
    Ok(loaded)
}

/// Rejects duplicate ids (keeps the first): a hand-edited file must not make two entries share
/// one directory.
fn drop_duplicate_ids(entries: &mut Vec<StoredConversation>) {
    let mut seen = HashMap::new();
    entries.retain(|e| seen.insert(e.conversation_id.clone(), ()).is_none());
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
            .iter()
            .filter_map(entry_from_value)
            .map(|(entry, _)| entry)
            .collect();
        drop_duplicate_ids(&mut entries);
    }
    if let Some((path, len)) = journal {
        replay_journal(path, len, &mut entries)?;
    }
    Ok(entries)
}

/// Accepts `conversationId`, or the legacy `sessionId` (second value: true = needs rewrite).
pub(super) fn entry_from_value(raw: &Value) -> Option<(StoredConversation, bool)> {
    // Built by copying out of the parsed tree, which stays alive until every entry is built:
    // the entries' strings then sit together in fresh memory and the whole tree can go back
    // to the OS at once (moving strings out would leave them scattered among its freed nodes).
    let obj = raw.as_object()?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str);
    let mut legacy = false;
    let conversation_id = match (text("conversationId"), text("sessionId")) {
        (Some(id), _) => id.to_string(),
        (None, Some(id)) => {
            legacy = true;
            id.to_string()
        }
        (None, None) => return None,
    };
    let created_at = match text("createdAt") {
        Some(t) => t.to_string(),
        None => {
            legacy = true;
            crate::clock::now_iso()
        }
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "conversationId" | "sessionId" | "name" | "createdAt"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some((
        StoredConversation {
            conversation_id,
            name: text("name").unwrap_or_default().to_string(),
            created_at,
            extra,
        },
        legacy,
    ))
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
