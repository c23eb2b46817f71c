//! Persistence: restart, journal, migrations, sweep, instance lock, corrupt registry.

use std::fs;

use serde_json::{json, Value};

use crate::harness::*;

fn registry(dir: &std::path::Path) -> Value {
    serde_json::from_str(&fs::read_to_string(dir.join("conversations/conversations.json")).unwrap())
        .unwrap()
}

/// Conversations survive a clean restart (the journal is folded into conversations.json) and
/// a crash (the journal is replayed).
/// Also: only a run that did not shut down cleanly is reported as one (a new instance
/// directory has no previous run; issue 26, finding 9).
#[test]
fn restart_and_crash_keep_every_conversation() {
    const UNCLEAN: &str = "previous run did not shut down cleanly";
    let temp = tempfile::tempdir().unwrap();
    let server = Server::start_in(temp.path(), &[]);
    assert!(!server.log().contains(UNCLEAN), "{}", server.log());
    let mut c = server.connect();
    let a = c.create("alpha");
    let b = c.create("beta");
    c.agent("renameConversation", json!([b, "beta 2"])).unwrap();
    let gone = c.create("gone");
    c.agent("deleteConversation", json!([gone])).unwrap();
    drop(c);
    assert!(server.shutdown().success());
    let server = Server::start_in(temp.path(), &[]);
    assert!(!server.log().contains(UNCLEAN), "{}", server.log());
    assert!(server.shutdown().success());
    let reg = registry(temp.path());
    let names: Vec<_> = reg["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, [json!("default"), json!("alpha"), json!("beta 2")]);
    assert!(!temp
        .path()
        .join("conversations/conversations.journal")
        .exists());

    // Crash: changes after the last fold live only in the journal.
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    c.create("after crash");
    c.agent("renameConversation", json!([a, "alpha 2"]))
        .unwrap();
    drop(c);
    server.kill();
    assert!(temp
        .path()
        .join("conversations/conversations.journal")
        .exists());
    let server = Server::start_in(temp.path(), &[]);
    assert!(server.log().contains(UNCLEAN), "{}", server.log());
    let mut c = server.connect();
    assert_eq!(c.names(), ["default", "alpha 2", "beta 2", "after crash"]);
    // Startup folded the journal: conversations.json alone is complete again.
    let reg = registry(temp.path());
    assert_eq!(reg["sessions"].as_array().unwrap().len(), 4);
}

/// A delete whose journal record is durable but whose directory was not removed yet (a crash
/// between the two, or a removal that failed) leaves no directory behind: the next start
/// removes it before folding the journal, and says so. Other conversations keep theirs.
#[test]
fn a_deleted_conversations_leftover_directory_is_removed_at_start() {
    let temp = tempfile::tempdir().unwrap();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    let doomed = c.create("doomed");
    let kept = c.create("kept");
    for id in [&doomed, &kept] {
        c.join(id);
        c.run_turn(id, "hello");
    }
    drop(c);
    assert!(server.shutdown().success());
    let dirs = temp.path().join("conversations");
    assert!(dirs.join(&doomed).join("displayLog.jsonl").exists());
    // What a delete leaves when the process dies right after journaling it.
    fs::write(
        dirs.join("conversations.journal"),
        format!("{}\n", json!({"op": "delete", "conversationId": doomed})),
    )
    .unwrap();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    assert_eq!(c.names(), ["default", "kept"]);
    assert!(!dirs.join(&doomed).exists(), "{}", server.log());
    assert!(
        server.log().contains(&format!(
            "conversation {doomed}: deleted, but its directory was still on disk"
        )),
        "{}",
        server.log()
    );
    c.join(&kept);
    let history = c.history(&kept);
    assert!(
        history.iter().any(|e| e.to_string().contains("hello")),
        "{history:?}"
    );
}

/// `server-sessions/` is renamed to `conversations/`, `sessions.json` to `conversations.json`,
/// `sessionId` becomes `conversationId`; unknown keys are kept.
#[test]
fn migrates_the_legacy_layout() {
    let temp = tempfile::tempdir().unwrap();
    let legacy = temp.path().join("server-sessions");
    let id = uuid::Uuid::new_v4().to_string();
    fs::create_dir_all(legacy.join(&id)).unwrap();
    fs::write(legacy.join(&id).join("displayLog.json"), "[]").unwrap();
    fs::write(
        legacy.join("sessions.json"),
        json!({"sessions": [{"sessionId": id, "name": "Old", "createdAt": "2025-01-01T00:00:00.000Z", "source": "copilot"}]})
            .to_string(),
    )
    .unwrap();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    assert_eq!(c.names(), ["Old"]);
    assert!(!legacy.exists());
    assert!(temp
        .path()
        .join("conversations")
        .join(&id)
        .join("displayLog.json")
        .exists());
    let reg = registry(temp.path());
    assert_eq!(reg["sessions"][0]["conversationId"], id.as_str());
    assert!(reg["sessions"][0].get("sessionId").is_none());
    assert_eq!(reg["sessions"][0]["source"], "copilot");
    assert!(!temp.path().join("conversations/sessions.json").exists());
}

/// When both directories exist, entries missing from `conversations/` are moved over; an
/// existing `sessions.json` replaces `conversations.json`.
#[test]
fn merges_legacy_directory_into_existing_one() {
    let temp = tempfile::tempdir().unwrap();
    let legacy = temp.path().join("server-sessions");
    let current = temp.path().join("conversations");
    let (a, b) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    fs::create_dir_all(legacy.join(&a)).unwrap();
    fs::create_dir_all(current.join(&b)).unwrap();
    fs::write(current.join(&b).join("keep"), "current").unwrap();
    fs::create_dir_all(legacy.join(&b)).unwrap();
    fs::write(legacy.join(&b).join("keep"), "legacy").unwrap();
    let entries = json!({"sessions": [
        {"conversationId": a, "name": "A", "createdAt": "2025-01-01T00:00:00.000Z"},
        {"conversationId": b, "name": "B", "createdAt": "2025-01-01T00:00:00.000Z"}]});
    fs::write(
        current.join("conversations.json"),
        json!({"sessions": []}).to_string(),
    )
    .unwrap();
    fs::write(current.join("sessions.json"), entries.to_string()).unwrap();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    assert_eq!(c.names(), ["A", "B"]);
    assert!(current.join(&a).is_dir());
    assert_eq!(
        fs::read_to_string(current.join(&b).join("keep")).unwrap(),
        "current"
    );
    // The conflicting legacy entry is left on disk, never deleted.
    assert_eq!(
        fs::read_to_string(legacy.join(&b).join("keep")).unwrap(),
        "legacy"
    );
}

/// A `sessions.json` that TypeAgent left beside an instance already at the current layout
/// (`FORMAT` 2, so no layout upgrade runs) still replaces `conversations.json` at startup,
/// and the list is the new file's: the registry file read ahead of the migration (while the
/// start's disk work runs) is not used.
#[test]
fn a_legacy_registry_replaces_the_current_one_parsed_ahead() {
    let temp = tempfile::tempdir().unwrap();
    let current = temp.path().join("conversations");
    fs::create_dir_all(&current).unwrap();
    fs::write(temp.path().join("FORMAT"), "2\n").unwrap();
    let (old, new) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let entry = |id: &str, name: &str| json!({"conversationId": id, "name": name, "createdAt": "2025-01-01T00:00:00.000Z"});
    fs::write(
        current.join("conversations.json"),
        json!({"sessions": [entry(&old, "replaced")]}).to_string(),
    )
    .unwrap();
    fs::write(
        current.join("sessions.json"),
        json!({"sessions": [entry(&new, "legacy")]}).to_string(),
    )
    .unwrap();
    let server = Server::start_in(temp.path(), &[]);
    assert!(
        server.log().contains("renamed") && server.log().contains("to conversations.json"),
        "{}",
        server.log()
    );
    let mut c = server.connect();
    assert_eq!(c.names(), ["legacy"]);
    assert_eq!(
        registry(temp.path())["sessions"][0]["conversationId"],
        new.as_str()
    );
}

/// Ephemeral conversations of crashed clients are swept at startup, directories too.
#[test]
fn sweeps_ephemeral_conversations() {
    let temp = tempfile::tempdir().unwrap();
    let conv = temp.path().join("conversations");
    let ids: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    for id in &ids {
        fs::create_dir_all(conv.join(id)).unwrap();
    }
    let sessions: Vec<Value> = ["cli-ephemeral-1234", "cli-replay-x", "Cli-ephemeral-kept"]
        .iter()
        .zip(&ids)
        .map(|(n, id)| json!({"conversationId": id, "name": n, "createdAt": "2025-01-01T00:00:00.000Z"}))
        .collect();
    fs::write(
        conv.join("conversations.json"),
        json!({"sessions": sessions}).to_string(),
    )
    .unwrap();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    assert_eq!(c.names(), ["Cli-ephemeral-kept"]);
    assert!(
        !conv.join(&ids[0]).exists() && !conv.join(&ids[1]).exists() && conv.join(&ids[2]).exists()
    );
    assert_eq!(
        registry(temp.path())["sessions"].as_array().unwrap().len(),
        1
    );
}

/// A second server on the same instance directory exits with an error naming the holder.
#[test]
fn instance_lock_names_the_holder() {
    let temp = tempfile::tempdir().unwrap();
    let first = Server::start_in(temp.path(), &[]);
    let err = Server::try_start_in(temp.path(), &[])
        .err()
        .expect("second server must not start");
    let pid = fs::read_to_string(temp.path().join("roundtable.lock")).unwrap();
    assert!(err.contains(&format!("PID {}", pid.trim())), "{err}");
    drop(first);
}

/// A registry that does not parse is never overwritten: the server refuses to start naming the
/// file and position; `--repair` moves it aside and starts empty.
#[test]
fn corrupt_registry_is_refused_then_repaired() {
    let temp = tempfile::tempdir().unwrap();
    let conv = temp.path().join("conversations");
    fs::create_dir_all(&conv).unwrap();
    let broken = "{\"sessions\": [\n  {\"conversationId\": \"x\",, }\n]}";
    fs::write(conv.join("conversations.json"), broken).unwrap();
    let err = Server::try_start_in(temp.path(), &[])
        .err()
        .expect("must refuse");
    assert!(
        err.contains("conversations.json") && err.contains("line 2"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(conv.join("conversations.json")).unwrap(),
        broken
    );

    let server = Server::start_in(temp.path(), &["--repair"]);
    let mut c = server.connect();
    assert_eq!(c.names(), ["default"]);
    let aside: Vec<_> = fs::read_dir(&conv)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("conversations.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(fs::read_to_string(aside[0].path()).unwrap(), broken);
}

/// A new conversation's files (display log, request journal, chat history) are made empty
/// when it is first joined, while the writer is idle, so its first turn allocates no inode;
/// the turn then writes into them, and a delete takes them away.
#[test]
fn a_new_conversations_files_are_prepared_at_its_first_join() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let id = c.create("fresh");
    let dir = server.dir.join("conversations").join(&id);
    assert!(!dir.exists(), "nothing is made before anyone joins");
    c.join(&id);
    let files = [
        dir.join("displayLog.jsonl"),
        dir.join("requests.jsonl"),
        dir.join("sessions/chat/history.jsonl"),
    ];
    eventually("the files are prepared", || {
        server.metric("roundtable_prepared_files_total") == 3.0
    });
    for file in &files {
        assert_eq!(fs::metadata(file).unwrap().len(), 0, "{}", file.display());
    }
    c.run_turn(&id, "hello");
    for file in &files {
        assert!(fs::metadata(file).unwrap().len() > 0, "{}", file.display());
    }
    assert_eq!(server.metric("roundtable_prepared_files_total"), 3.0);
    c.agent("deleteConversation", json!([id])).unwrap();
    assert!(!dir.exists());
}

/// A delete of a loaded conversation that fails (its registry record cannot be written)
/// leaves the conversation as it was: listed, joinable, and writable, with its turns
/// recorded as before; a second delete once the disk is back removes it.
#[test]
fn a_failed_delete_leaves_a_loaded_conversation_writable() {
    let instance = tempfile::tempdir().unwrap();
    let (server, switch) = Server::start_with_fault_switch(instance.path());
    let (mut a, id) = server.joined("kept after a failed delete");
    let first = Client::request_id(&a.submit(&id, "echo before"));
    a.until_complete(&id, &first);

    fs::write(&switch, "ENOSPC").unwrap();
    let mut other = server.connect();
    let err = other.agent("deleteConversation", json!([id])).unwrap_err();
    assert!(err.contains("No space left on device"), "{err}");
    fs::remove_file(&switch).unwrap();
    eventually("health recovers", || server.http_get("/health").0 == 200);

    assert!(other
        .names()
        .contains(&"kept after a failed delete".to_string()));
    other.join(&id);
    let again = Client::request_id(&other.submit(&id, "echo after"));
    other.until_complete(&id, &again);
    drop((a, other));
    // Both turns are on disk, not only in the reloaded conversation's memory.
    assert!(server.shutdown().success());
    let server = Server::start_in(instance.path(), &[]);
    let mut other = server.connect();
    other.join(&id);
    let history = other.history(&id);
    let results: Vec<_> = history
        .iter()
        .filter(|e| e["type"] == "command-result")
        .map(|e| e["requestId"]["requestId"].clone())
        .collect();
    assert_eq!(results, vec![json!(first), json!(again)], "{history:?}");

    let dir = server.dir.join("conversations").join(&id);
    assert!(dir.is_dir());
    other.agent("deleteConversation", json!([id])).unwrap();
    assert!(!dir.exists());
    assert!(!other
        .names()
        .contains(&"kept after a failed delete".to_string()));
}
