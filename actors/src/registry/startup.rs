//! The registry's tables as a start finds them ([`StartupTables`]): every conversation of the
//! registry file (and of the journal replayed over it) as an unloaded [`Entry`], in registry
//! order, with the name index. After a clean shutdown (no journal) they are filled as the
//! file is parsed, on the main thread while the server's disk work runs beside it
//! ([`read_registry_early`]); otherwise by [`ConversationRegistry::open`] from the loaded
//! entries. Either way they become the registry's own maps.
//!
//! [`ConversationRegistry::open`]: super::ConversationRegistry::open

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Entry, NameSlot, Tables};
use crate::ids::ConversationId;
use crate::storage::layout::{Layout, EPHEMERAL_PREFIXES};
use crate::storage::registry_file::{self, EntrySink, ParsedEntry, StoredConversation};

/// The registry file read ahead of the registry's opening: its tables when there was no
/// journal, else its entries ([`registry_file::read_early`]).
pub type EarlyRegistry = registry_file::Prefetched<StartupTables>;

/// Reads `layout`'s registry file ahead of [`ConversationRegistry::open_prefetched`], which
/// takes the result (`clustered`: the registry will run in a cluster, which orders its
/// entries by creation time). `None` when the file is missing or does not parse (the
/// registry then reads it itself).
///
/// [`ConversationRegistry::open_prefetched`]: super::ConversationRegistry::open_prefetched
pub fn read_registry_early(layout: &Layout, clustered: bool) -> Option<EarlyRegistry> {
    registry_file::read_early(layout, Some(StartupTables::new(clustered)))
}

/// The registry's maps as loaded at startup, before the registry actor exists.
pub struct StartupTables {
    /// Every conversation served, by id.
    pub(super) entries: HashMap<ConversationId, Box<Entry>>,
    /// Registry order: order key → id.
    pub(super) order: BTreeMap<u64, ConversationId>,
    /// The next order key (standalone: the entries' count).
    pub(super) next_order: u64,
    /// The name index.
    pub(super) names: HashMap<u64, NameSlot>,
    /// Entries whose id is not a UUID: kept on disk, never served.
    pub(super) foreign: Vec<StoredConversation>,
    /// The ids in `foreign`, so that a repeated one is dropped like a repeated UUID.
    foreign_ids: HashSet<String>,
    /// Conversations left by crashed clients (`cli-ephemeral-`, `cli-replay-` names): not
    /// entered; their directories are removed by the opening registry.
    pub(super) ephemeral: Vec<ConversationId>,
    /// The file must be rewritten: an element was not an entry, an entry was in a legacy
    /// form, or an ephemeral one was swept.
    pub(super) needs_fold: bool,
    /// Entries dropped for repeating an id already entered (the first one stays).
    duplicates: usize,
    /// Elements of the file skipped for not being entries (no text id).
    skipped: usize,
    /// In a cluster, the order key is the creation time (every node orders alike).
    clustered: bool,
}

impl StartupTables {
    /// Empty tables; `clustered`: order by creation time rather than by file order.
    pub(super) fn new(clustered: bool) -> StartupTables {
        StartupTables {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_order: 0,
            names: HashMap::new(),
            foreign: Vec::new(),
            foreign_ids: HashSet::new(),
            ephemeral: Vec::new(),
            needs_fold: false,
            duplicates: 0,
            skipped: 0,
            clustered,
        }
    }

    /// Whether these tables order as a registry with (`true`) or without a cluster does.
    pub(super) fn clustered(&self) -> bool {
        self.clustered
    }

    /// Says what was left out: elements that are not entries, repeated ids.
    pub(super) fn log_left_out(&self, path: &std::path::Path) {
        if self.skipped > 0 {
            log::warn!(
                "{}: skipping {} registry entries with no conversationId",
                path.display(),
                self.skipped
            );
        }
        if self.duplicates > 0 {
            log::warn!(
                "{}: skipping {} registry entries whose id an earlier entry has",
                path.display(),
                self.duplicates
            );
        }
    }

    /// Enters one record: a UUID id as an unloaded entry, unless it repeats one entered or
    /// its name marks it ephemeral; any other id into `foreign`, as stored.
    fn add(&mut self, entry: ParsedEntry<'_>) {
        let Some(id) = ConversationId::parse(&entry.conversation_id) else {
            if self.foreign_ids.insert(entry.conversation_id.to_string()) {
                log::warn!(
                    "registry entry {:?} has an id that is not a UUID; kept on disk but not served",
                    entry.conversation_id
                );
                self.foreign.push(entry.into_stored());
            } else {
                self.duplicates += 1;
            }
            return;
        };
        if self.entries.contains_key(&id) {
            self.duplicates += 1;
            return;
        }
        if EPHEMERAL_PREFIXES.iter().any(|p| entry.name.starts_with(p)) {
            self.ephemeral.push(id);
            self.needs_fold = true;
            return;
        }
        let clustered = self.clustered;
        Tables {
            entries: &mut self.entries,
            order: &mut self.order,
            next_order: &mut self.next_order,
            names: &mut self.names,
        }
        .enter(
            clustered,
            id,
            &entry.name,
            &entry.created_at,
            entry.message_count,
            entry.extra,
        );
    }
}

impl EntrySink for StartupTables {
    fn entry(&mut self, entry: ParsedEntry<'_>) {
        self.needs_fold |= entry.legacy;
        self.add(entry);
    }

    fn not_an_entry(&mut self) {
        self.skipped += 1;
        self.needs_fold = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::registry_file::parse_registry;
    use crate::storage::registry_load::load_registry;

    /// What a table holds, comparable: per entry in registry order, the id, name, creation
    /// time, count and kept keys; then the foreign entries, the swept ids, and whether the
    /// file must be rewritten.
    fn contents(t: &StartupTables) -> String {
        let mut out = String::new();
        for (order, id) in &t.order {
            let e = &t.entries[id];
            assert_eq!(e.order, *order);
            out += &format!(
                "{id} {:?} {} {} {:?}\n",
                e.name,
                e.created_at,
                e.message_count,
                e.extra.as_deref()
            );
        }
        for f in &t.foreign {
            out += &format!("foreign {f:?}\n");
        }
        out + &format!("swept {:?}, fold {}", t.ephemeral, t.needs_fold)
    }

    /// A registry file with every oddity the parse handles (elements that are not entries,
    /// legacy ids, no creation time, repeated ids in two spellings, an id that is not a UUID,
    /// escaped text, kept keys, counts that are not whole numbers, ephemeral names) gives the
    /// same tables parsed straight into them, as a clean start does, and through the loaded
    /// entries, as a start with a journal to replay does; and the name index finds every name.
    #[test]
    fn the_early_tables_are_the_loaded_ones() {
        let (a, b, c, d) = (
            "0a1b2c3d-4e5f-4a6b-8c7d-000000000001",
            "0a1b2c3d-4e5f-4a6b-8c7d-000000000002",
            "0a1b2c3d-4e5f-4a6b-8c7d-000000000003",
            "0a1b2c3d-4e5f-4a6b-8c7d-000000000004",
        );
        let text = serde_json::json!({
            "version": 3,
            "sessions": [
                {"conversationId": a, "name": "plain", "createdAt": "2026-01-01T00:00:00.000Z", "messageCount": 4},
                42,
                ["not", "an", "entry"],
                {"name": "no id"},
                {"sessionId": b, "name": "legacy \"quoted\" \u{e9}", "createdAt": "2026-01-02T00:00:00.000Z", "source": {"kept": [1, 2]}},
                {"conversationId": a, "name": "repeated", "createdAt": "2026-01-03T00:00:00.000Z"},
                {"conversationId": a.to_uppercase(), "name": "repeated, upper case", "createdAt": "2026-01-03T00:00:00.000Z"},
                {"conversationId": "not-a-uuid", "name": "foreign", "createdAt": "2026-01-04T00:00:00.000Z", "readOnly": true},
                {"conversationId": "not-a-uuid", "name": "foreign again", "createdAt": "2026-01-04T00:00:00.000Z"},
                {"conversationId": c, "name": "cli-ephemeral-123", "createdAt": "2026-01-05T00:00:00.000Z"},
                {"conversationId": d, "name": "  Spaced Name ", "createdAt": "2026-01-06T00:00:00.000Z", "messageCount": 2.5, "name2": null},
            ]
        })
        .to_string();
        let temp = tempfile::tempdir().unwrap();
        let layout = Layout::new(temp.path());
        std::fs::create_dir_all(layout.conversations_dir()).unwrap();
        std::fs::write(layout.registry_file(), &text).unwrap();

        let mut early = StartupTables::new(false);
        parse_registry(text.as_bytes(), &mut early).unwrap();
        let mut loaded = StartupTables::new(false);
        let file = load_registry(&layout, false, None).unwrap();
        loaded.needs_fold = file.needs_fold;
        for stored in file.entries {
            loaded.entry(stored.into());
        }
        assert_eq!(contents(&early), contents(&loaded));
        let read = match read_registry_early(&layout, false) {
            Some(EarlyRegistry::Sink(tables)) => tables,
            _ => panic!("no journal: the tables are filled early"),
        };
        assert_eq!(contents(&read), contents(&early));

        let listed: Vec<&str> = early
            .order
            .values()
            .map(|id| &*early.entries[id].name)
            .collect();
        assert_eq!(
            listed,
            ["plain", "legacy \"quoted\" \u{e9}", "  Spaced Name "],
            "{}",
            contents(&early)
        );
        assert_eq!(early.foreign.len(), 1);
        assert_eq!(early.foreign[0].name, "foreign");
        assert_eq!(early.foreign[0].extra["readOnly"], true);
        assert_eq!(early.ephemeral.len(), 1);
        assert!(early.needs_fold);
        let d = ConversationId::parse(d).unwrap();
        assert_eq!(early.entries[&d].message_count, 0);
        // A count that is not a whole number is replaced by the entry's own (the record's
        // `messageCount` is written from it); other keys are kept.
        let kept = early.entries[&d].extra.as_deref().unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["name2"]);
        for (id, entry) in &early.entries {
            let key = super::super::name_key(&crate::naming::normalize(&entry.name));
            assert!(early.names[&key].ids().contains(id), "{}", entry.name);
        }
        assert_eq!(early.names.len(), 3);
    }

    /// With a journal to replay, the early read collects the entries instead.
    #[test]
    fn with_a_journal_the_early_read_leaves_the_tables_to_the_replay() {
        let temp = tempfile::tempdir().unwrap();
        let layout = Layout::new(temp.path());
        std::fs::create_dir_all(layout.conversations_dir()).unwrap();
        std::fs::write(layout.registry_file(), r#"{"sessions":[]}"#).unwrap();
        assert!(matches!(
            read_registry_early(&layout, false),
            Some(EarlyRegistry::Sink(_))
        ));
        std::fs::write(layout.journal_file(), b"").unwrap();
        assert!(matches!(
            read_registry_early(&layout, false),
            Some(EarlyRegistry::Entries(_))
        ));
        std::fs::write(layout.registry_file(), b"{not json").unwrap();
        assert!(read_registry_early(&layout, false).is_none());
    }
}
