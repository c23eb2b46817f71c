//! Unit tests of the registry file and its journal: replay, the corrupt-file rule, round trips.

use std::fs;

use serde_json::Map;

use super::journal::JournalRecord;
use super::layout::Layout;
use super::migrate::migrate;
use super::registry_file::{entry_from_value, fold, StoredConversation};
use super::registry_load::load_registry;
use super::{role, StoreError};
use std::path::Path;

fn entry(id: &str, name: &str) -> StoredConversation {
    StoredConversation {
        conversation_id: id.into(),
        name: name.into(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        message_count: None,
        extra: Map::new(),
    }
}

#[test]
fn journal_replays_over_the_snapshot_and_drops_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    migrate(&layout).unwrap();
    fold(&layout, &[entry("a", "A"), entry("b", "B")]).unwrap();
    let mut j = String::new();
    for r in [
        JournalRecord::Put {
            entry: entry("c", "C"),
        },
        JournalRecord::Put {
            entry: entry("a", "A2"),
        },
        JournalRecord::Delete {
            conversation_id: "b".into(),
        },
    ] {
        j.push_str(&serde_json::to_string(&r).unwrap());
        j.push('\n');
    }
    j.push_str("{\"op\":\"put\",\"entr");
    fs::write(layout.journal_file(), j).unwrap();
    let loaded = load_registry(&layout, false, None).unwrap();
    let names: Vec<_> = loaded.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["A2", "C"]);
    assert!(loaded.needs_fold);
}

#[test]
fn corrupt_registry_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    migrate(&layout).unwrap();
    fs::write(layout.registry_file(), "{\"sessions\": [\n  {oops}\n]}").unwrap();
    let err = load_registry(&layout, false, None).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
    assert_eq!(
        fs::read_to_string(layout.registry_file()).unwrap(),
        "{\"sessions\": [\n  {oops}\n]}"
    );
    let loaded = load_registry(&layout, true, None).unwrap();
    assert!(loaded.entries.is_empty());
    let aside: Vec<_> = fs::read_dir(layout.conversations_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("conversations.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
}

#[test]
fn unknown_keys_survive_a_round_trip() {
    let raw = serde_json::json!({"conversationId":"x","name":"n","createdAt":"t","source":"copilot","readOnly":true});
    let (e, legacy) = entry_from_value(&raw).unwrap();
    assert!(!legacy);
    assert_eq!(serde_json::to_value(&e).unwrap(), raw);
    let (e, legacy) =
        entry_from_value(&serde_json::json!({"sessionId":"y","name":"n","createdAt":"t"})).unwrap();
    assert!(legacy);
    assert_eq!(e.conversation_id, "y");
}

/// `messageCount` has a field of its own when it is a whole number and stays an unknown key
/// otherwise; either way the entry serializes back to what was read, and the journal's
/// derived parse reads the field back.
#[test]
fn message_count_is_a_field_when_whole_and_kept_verbatim_otherwise() {
    let raw = serde_json::json!({"conversationId":"x","name":"n","createdAt":"t","messageCount":7,"source":"s"});
    let (e, _) = entry_from_value(&raw).unwrap();
    assert_eq!(e.message_count, Some(7));
    assert!(!e.extra.contains_key("messageCount"));
    assert_eq!(serde_json::to_value(&e).unwrap(), raw);
    let reread: StoredConversation = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(reread, e);

    let odd =
        serde_json::json!({"conversationId":"x","name":"n","createdAt":"t","messageCount":"7"});
    let (e, _) = entry_from_value(&odd).unwrap();
    assert_eq!(e.message_count, None);
    assert_eq!(e.extra["messageCount"], "7");
    assert_eq!(serde_json::to_value(&e).unwrap(), odd);

    // A repeated key in the file: the last one counts, and only one is written back.
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    migrate(&layout).unwrap();
    fs::write(
        layout.registry_file(),
        r#"{"sessions":[{"conversationId":"x","name":"n","createdAt":"t","messageCount":"7","messageCount":3},
                        {"conversationId":"y","name":"n","createdAt":"t","messageCount":3,"messageCount":"7"}]}"#,
    )
    .unwrap();
    let loaded = load_registry(&layout, false, None).unwrap().entries;
    assert_eq!(
        (loaded[0].message_count, loaded[0].extra.get("messageCount")),
        (Some(3), None)
    );
    assert_eq!(
        (loaded[1].message_count, loaded[1].extra.get("messageCount")),
        (None, Some(&serde_json::json!("7")))
    );
}

/// The log writer keeps at most `MAX_OPEN_FILES` append handles: writing to more files than
/// that closes the least recent ones (and reopens them when written again), and every byte
/// is on disk once its barrier answers.
#[test]
fn log_writer_bounds_its_open_files() {
    use super::log_writer::{LogWriter, MAX_OPEN_FILES};
    use std::path::Path;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let files: Vec<Arc<Path>> = (0..MAX_OPEN_FILES + 40)
        .map(|i| Arc::from(dir.path().join(format!("c{i}")).join("log.jsonl")))
        .collect();
    // Two rounds, so evicted files are reopened and appended to; each round in one batch
    // and in separate ones.
    for round in 0..2 {
        for f in &files {
            writer.append(f, format!("line {round}\n").into_bytes());
        }
        writer.sync(files.clone()).blocking_recv().unwrap().unwrap();
    }
    for f in &files {
        assert_eq!(std::fs::read_to_string(f).unwrap(), "line 0\nline 1\n");
    }
    // Descriptors of this process that point into the test's directory.
    let ours = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|target| target.starts_with(dir.path())))
        .count();
    assert!(ours <= MAX_OPEN_FILES, "{ours} files open");
    assert!(ours > 0);
}

/// Clients see a failed file or directory by its role, never by its path.
#[test]
fn roles_name_files_and_directories_without_paths() {
    let conversation = Path::new("/i/conversations/6fca24fc-5b24-4b22-82c0-78a5fa3fd444");
    assert_eq!(
        role(&conversation.join("displayLog.jsonl")),
        "the display log"
    );
    assert_eq!(role(conversation), "the conversation's directory");
    assert_eq!(
        role(&conversation.join("sessions/chat")),
        "the chat history's directory"
    );
    assert_eq!(
        role(conversation.parent().unwrap()),
        "the conversations directory"
    );
    assert_eq!(role(Path::new("/i/elsewhere")), "a storage file");
}
