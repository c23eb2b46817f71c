//! Content search (`searchConversationContent`) over the real protocol: what a turn says is
//! found by the next search (requests and agent output, case-, accent- and prefix-insensitive,
//! phrases, ranked, with snippets), in conversations that are not loaded too; delete removes
//! a conversation's documents from the index before it answers; a missing, corrupt or
//! `--reindex`ed index is rebuilt from the display logs; bad queries get exact errors.

use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;

/// `searchConversationContent(query, max)`, answered.
fn search(c: &mut Client, query: &str, max: Option<u64>) -> Vec<Value> {
    c.agent("searchConversationContent", json!([query, max]))
        .unwrap_or_else(|e| panic!("search {query:?}: {e}"))
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("search {query:?}: not an array"))
}

/// The names of the hits, best first.
fn names(hits: &[Value]) -> Vec<String> {
    hits.iter()
        .map(|h| h["conversation"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// All snippets of the hit named `name`.
fn snippets_of(hits: &[Value], name: &str) -> Vec<String> {
    let hit = hits
        .iter()
        .find(|h| h["conversation"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} not among {hits:?}"));
    hit["snippets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// `(conversation id, requests indexed)` read straight from the index file (a second,
/// read-only SQLite connection; the server keeps writing through its own).
fn indexed(dir: &Path) -> Vec<(String, u64)> {
    let path = dir.join("search").join("index.sqlite");
    let conn = roundtable_actors::search::store::open_reader(&path).expect("open index");
    roundtable_actors::search::store::counts(&conn).expect("read index")
}

/// Requests and agent output are found by the very next search, ranked, with snippets that
/// mark the matched words; accents, case, prefixes and phrases; `maxMatches`; a search from a
/// socket that joined nothing; the answer's conversation is as `listConversations` shows it.
#[test]
fn turns_are_found_by_the_next_search() {
    let server = Server::start(&[]);
    let (mut a, trip) = server.joined("Trip");
    a.run_turn(&trip, "Weather in Zürich tomorrow?");
    a.run_turn(&trip, "And is Zürich expensive in winter?");
    let (mut b, food) = server.joined("Food");
    b.run_turn(&food, "Where is the best café near the station");
    b.run_turn(&food, "Also a café open on Sundays near Zurich airport");
    let (mut c, other) = server.joined("Other");
    c.run_turn(&other, "what is 2+3");

    let mut s = server.connect();
    // Case and accents do not matter; the conversation with more and stronger matches of
    // the word first.
    let hits = search(&mut s, "ZURICH", None);
    assert_eq!(names(&hits), ["Trip", "Food"], "{hits:#?}");
    assert!(
        snippets_of(&hits, "Trip")
            .iter()
            .any(|s| s.starts_with("user: ") && s.contains("**Zürich**")),
        "{hits:#?}"
    );
    let score = |h: &Value| h["score"].as_f64().unwrap();
    assert!(score(&hits[0]) >= score(&hits[1]), "{hits:#?}");
    assert!(hits.iter().all(|h| (0.0..=1.0).contains(&score(h))));
    // The conversation is as listConversations shows it.
    let listed = s.agent("listConversations", json!([null])).unwrap();
    let trip_listed = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["conversationId"] == trip.as_str())
        .unwrap()
        .clone();
    assert_eq!(hits[0]["conversation"], trip_listed);

    // Every word must match when some conversation has them all.
    assert_eq!(names(&search(&mut s, "zurich airport", None)), ["Food"]);
    // Prefixes: a bare word matches longer words, `word*` asks for it.
    let hits = search(&mut s, "expens", None);
    assert_eq!(names(&hits), ["Trip"]);
    // A hit names the seq of its best passage's entry (Roundtable extension): here the
    // second request, where a client opens the conversation.
    let seq = hits[0]["seq"].as_u64().expect("a seq");
    let log = a
        .invoke(
            &format!("dispatcher:{trip}"),
            "getDisplayHistory",
            json!([]),
        )
        .unwrap();
    let entry = log
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["seq"] == seq)
        .unwrap();
    assert_eq!(entry["type"], "user-request");
    assert_eq!(entry["command"], "And is Zürich expensive in winter?");
    assert_eq!(names(&search(&mut s, "sund*", None)), ["Food"]);
    // A quoted phrase needs its words in order.
    assert_eq!(
        names(&search(&mut s, "\"near the station\"", None)),
        ["Food"]
    );
    assert!(search(&mut s, "\"station the near\"", None).is_empty());
    // No conversation has all the words: the ones with some of them.
    let some = search(&mut s, "winter sundays", None);
    assert_eq!(some.len(), 2, "{some:#?}");
    // Agent output is found too (the builtin provider's refusal names itself).
    let hits = search(&mut s, "offline builtin provider", None);
    assert!(names(&hits).contains(&"Trip".to_string()), "{hits:#?}");
    assert!(
        snippets_of(&hits, "Trip")
            .iter()
            .any(|s| s.starts_with("agent: ") && s.contains("**offline builtin provider**")),
        "{hits:#?}"
    );
    // maxMatches bounds the answer; nothing to find, or nothing to search for, is [].
    assert_eq!(search(&mut s, "zurich", Some(1)).len(), 1);
    assert!(search(&mut s, "xylophone", None).is_empty());
    assert!(search(&mut s, "  ", None).is_empty());
    assert!(search(&mut s, "", None).is_empty());
    // Nothing a user types is query syntax: operators are words like any other.
    assert_eq!(
        names(&search(&mut s, "NEAR(zurich café) ^near: \"", None)),
        ["Food"]
    );
}

/// Bad queries get exact errors and the server goes on answering.
#[test]
fn bad_queries_get_exact_errors() {
    let server = Server::start(&[]);
    let mut s = server.connect();
    let long = "x".repeat(1100);
    assert_eq!(
        s.agent("searchConversationContent", json!([long, null])),
        Err("Search query too long: 1100 bytes (at most 1024)".to_string())
    );
    assert_eq!(
        s.agent("searchConversationContent", json!([5, null])),
        Err("Invalid argument 0 (query) of searchConversationContent: expected a string".into())
    );
    let err = s
        .agent("searchConversationContent", json!(["x", "many"]))
        .unwrap_err();
    assert!(err.contains("maxMatches"), "{err}");
    assert!(search(&mut s, "still answering", None).is_empty());
}

/// A deleted conversation's documents leave the index file before delete answers; the
/// others stay.
#[test]
fn delete_removes_content_before_it_answers() {
    let server = Server::start(&[]);
    let (mut a, gone) = server.joined("Gone");
    a.run_turn(&gone, "remember the marmalade");
    let (mut b, kept) = server.joined("Kept");
    b.run_turn(&kept, "marmalade on toast");
    let mut s = server.connect();
    assert_eq!(search(&mut s, "marmalade", None).len(), 2);
    let ids = |dir: &Path| -> Vec<String> { indexed(dir).into_iter().map(|(id, _)| id).collect() };
    assert!(ids(&server.dir).contains(&gone));

    s.agent("deleteConversation", json!([gone])).unwrap();
    let after = ids(&server.dir);
    assert!(!after.contains(&gone), "{after:?}");
    assert!(after.contains(&kept), "{after:?}");
    assert_eq!(names(&search(&mut s, "marmalade", None)), ["Kept"]);
}

/// Conversations that are not loaded are searched (after a restart nothing is loaded); a
/// missing index, a corrupt one and `--reindex` are each rebuilt from the display logs.
#[test]
fn unloaded_conversations_and_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &[]);
    let (mut a, lake) = server.joined("Lake");
    a.run_turn(&lake, "a walk along the Léman at dusk");
    let (mut b, hills) = server.joined("Hills");
    b.run_turn(&hills, "hiking in the Jura hills");
    drop((a, b));
    assert!(server.shutdown().success());

    // Restarted: nothing loaded, the index as it was.
    let server = Server::start_in(dir.path(), &[]);
    let mut s = server.connect();
    assert_eq!(names(&search(&mut s, "leman", None)), ["Lake"]);
    assert_eq!(
        server.metric("roundtable_loaded_conversations"),
        0.0,
        "searching loads nothing"
    );
    drop(s);
    assert!(server.shutdown().success());

    let index = dir.path().join("search").join("index.sqlite");
    let rebuilt = |server: &Server, why: &str| {
        server.wait_log("search index: caught up");
        let mut s = server.connect();
        assert_eq!(names(&search(&mut s, "leman", None)), ["Lake"], "{why}");
        assert_eq!(names(&search(&mut s, "jura", None)), ["Hills"], "{why}");
    };

    // Missing.
    std::fs::remove_dir_all(dir.path().join("search")).unwrap();
    let server = Server::start_in(dir.path(), &[]);
    rebuilt(&server, "missing");
    assert!(server.log().contains("(new index)"), "{}", server.log());
    assert!(server.shutdown().success());

    // Corrupt: overwritten with garbage (the WAL and shm files go with it).
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", index.display()));
    }
    std::fs::write(&index, vec![0x5a; 8192]).unwrap();
    let server = Server::start_in(dir.path(), &[]);
    rebuilt(&server, "corrupt");
    assert!(server.log().contains("is unusable"), "{}", server.log());
    assert!(server.shutdown().success());

    // --reindex.
    let server = Server::start_in(dir.path(), &["--reindex"]);
    rebuilt(&server, "--reindex");
    assert!(
        server.log().contains("--reindex: rebuilding"),
        "{}",
        server.log()
    );
    assert!(server.shutdown().success());
}
