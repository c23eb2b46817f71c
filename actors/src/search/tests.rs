//! The index on real files: live documents, scans, deletes, rebuilds, queries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::storage::log_writer::LogWriter;

/// Waits until the writer's next commit (bounded).
fn next_commit(rx: &mut tokio::sync::watch::Receiver<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), rx.changed())
            .await
            .expect("a commit within 20 s")
            .expect("writer alive");
    });
}

/// Waits until `query` finds `want` conversations, asking again after each commit.
fn until_found(index: &SearchIndex, query: &str, want: usize) -> Vec<ContentHit> {
    let mut commits = index.committed();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        commits.borrow_and_update();
        let hits = index
            .query(query.into(), None)
            .blocking_recv()
            .unwrap()
            .unwrap();
        if hits.len() == want {
            return hits;
        }
        assert!(
            Instant::now() < deadline,
            "{query}: {} found, want {want}",
            hits.len()
        );
        next_commit(&mut commits);
    }
}

/// Writes a turn into a conversation's display log the way the conversation does.
fn write_turn(
    log: &mut crate::storage::display_log::DisplayLog,
    n: usize,
    ask: &str,
    answer: &str,
) {
    let rid = json!({"requestId": format!("r{n}")});
    for e in [
        json!({"type": "user-request", "requestId": rid, "command": ask}),
        json!({"type": "append-display", "message": {"message": {"type": "markdown", "content": answer}, "requestId": rid, "source": "chat"}, "mode": "block"}),
        json!({"type": "command-result", "requestId": rid}),
    ] {
        log.append(e.as_object().unwrap().clone());
    }
}

#[test]
fn live_documents_queries_snippets_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let index = SearchIndex::open(&layout, false, Arc::new(Metrics::default())).unwrap();
    let a = ConversationId::new_random();
    let b = ConversationId::new_random();
    // No sync: these conversations have no files; live documents are the only source.
    let mut ca = TurnCollector::default();
    let mut cb = TurnCollector::default();
    let feed = |c: &mut TurnCollector, id, seq, e: serde_json::Value| {
        if let Observed::Settled { seq, doc } = c.observe(seq, &e) {
            index.add(id, seq, doc);
        }
    };
    let rid = json!({"requestId": "1"});
    // Other talk, so the words searched for are rare (BM25 gives words in most documents
    // almost no weight).
    let c = ConversationId::new_random();
    let mut cc = TurnCollector::default();
    for n in 0..10u64 {
        let r = json!({"requestId": format!("c{n}")});
        feed(
            &mut cc,
            c,
            2 * n,
            json!({"type": "user-request", "requestId": r, "command": format!("unrelated chatter number {n}")}),
        );
        feed(
            &mut cc,
            c,
            2 * n + 1,
            json!({"type": "command-result", "requestId": r}),
        );
    }
    feed(
        &mut ca,
        a,
        0,
        json!({"type": "user-request", "requestId": rid, "command": "Weather in Zürich tomorrow?"}),
    );
    feed(
        &mut ca,
        a,
        1,
        json!({"type": "append-display", "message": {"message": "Cloudy over the lake, a café terrace maybe.", "requestId": rid, "source": "chat"}, "mode": "block"}),
    );
    feed(
        &mut ca,
        a,
        2,
        json!({"type": "command-result", "requestId": rid}),
    );
    feed(
        &mut cb,
        b,
        0,
        json!({"type": "user-request", "requestId": rid, "command": "zurich zurich zurich train times"}),
    );
    feed(
        &mut cb,
        b,
        1,
        json!({"type": "command-result", "requestId": rid}),
    );

    // Accent- and case-insensitive both ways; the conversation that says it more ranks first.
    let hits = until_found(&index, "ZURICH", 2);
    assert_eq!(hits[0].conversation, b);
    assert!(hits[0].score > hits[1].score && hits[1].score > 0.0);
    assert_eq!(
        hits[1].snippets,
        vec!["user: Weather in **Zürich** tomorrow?"]
    );
    // Where each opens: the matching request's seq, or the command-result ending the output.
    assert_eq!((hits[0].seq, hits[1].seq), (Some(0), Some(0)));
    assert_eq!(until_found(&index, "cafe", 1)[0].seq, Some(2));
    assert_eq!(until_found(&index, "cafe", 1)[0].conversation, a);
    // Prefix and phrase.
    assert_eq!(until_found(&index, "terr*", 1)[0].conversation, a);
    assert_eq!(
        until_found(&index, "\"over the lake\"", 1)[0].conversation,
        a
    );
    until_found(&index, "\"the over lake\"", 0);
    // Every word must match; when none matches all of them, any word does.
    assert_eq!(until_found(&index, "zurich train", 1)[0].conversation, b);
    assert_eq!(
        until_found(&index, "train nonexistentword", 1)[0].conversation,
        b
    );

    index.delete(b).blocking_recv().unwrap().unwrap();
    // Gone as soon as delete answers: no waiting.
    let hits = index
        .query("zurich".into(), None)
        .blocking_recv()
        .unwrap()
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].conversation, a);
    index.shutdown();
}

#[test]
fn scans_rebuild_a_missing_or_corrupt_index_and_skip_what_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let ids: Vec<ConversationId> = (0..3).map(|_| ConversationId::new_random()).collect();
    for (i, id) in ids.iter().enumerate() {
        let cdir = layout.conversation_dir(id);
        std::fs::create_dir_all(&cdir).unwrap();
        let mut log = crate::storage::display_log::DisplayLog::open(&cdir, writer.clone()).unwrap();
        write_turn(
            &mut log,
            0,
            &format!("question {i} about kiwis"),
            "answer about kiwis",
        );
        write_turn(&mut log, 1, "second question", &format!("marker{i} text"));
        writer
            .sync(vec![log.path().clone()])
            .blocking_recv()
            .unwrap()
            .unwrap();
    }
    let metrics = Arc::new(Metrics::default());
    let index = SearchIndex::open(&layout, false, metrics.clone()).unwrap();
    index.sync(ids.clone());
    assert_eq!(until_found(&index, "kiwis", 3).len(), 3);
    assert_eq!(until_found(&index, "marker1", 1)[0].conversation, ids[1]);
    let docs = Metrics::get(&metrics.search_documents);
    assert_eq!(docs, 12);
    index.shutdown();

    // Reopened on the same logs: nothing is scanned twice, nothing is lost.
    let metrics = Arc::new(Metrics::default());
    let index = SearchIndex::open(&layout, false, metrics.clone()).unwrap();
    index.sync(ids[..2].to_vec()); // the third was deleted while the server was down
    until_found(&index, "kiwis", 2);
    assert_eq!(Metrics::get(&metrics.search_documents), 0);
    index.shutdown();

    // A corrupt file is replaced by a rebuild.
    let path = index_path(&layout);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    std::fs::write(
        &path,
        b"this is not a database, it is garbage from a bad disk",
    )
    .unwrap();
    let index = SearchIndex::open(&layout, false, Arc::new(Metrics::default())).unwrap();
    index.sync(ids.clone());
    until_found(&index, "kiwis", 3);
    index.shutdown();

    // --reindex starts over and finds the same.
    let metrics = Arc::new(Metrics::default());
    let index = SearchIndex::open(&layout, true, metrics.clone()).unwrap();
    index.sync(ids.clone());
    until_found(&index, "marker2", 1);
    until_found(&index, "kiwis", 3);
    assert_eq!(Metrics::get(&metrics.search_documents), 12);
    index.shutdown();
}

#[test]
fn a_full_queue_sends_the_conversation_to_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let id = ConversationId::new_random();
    let cdir = layout.conversation_dir(&id);
    std::fs::create_dir_all(&cdir).unwrap();
    let mut log = crate::storage::display_log::DisplayLog::open(&cdir, writer.clone()).unwrap();
    let metrics = Arc::new(Metrics::default());
    let index = SearchIndex::open(&layout, false, metrics.clone()).unwrap();
    // Pretend the queue is full: the next document goes to a scan, and so does every later
    // one until the scan has read them all from the file.
    index
        .shared
        .queued_docs
        .fetch_add(MAX_QUEUED_DOCS, Ordering::Relaxed);
    write_turn(&mut log, 0, "overflowing pelican", "ok");
    index.add(id, 0, None);
    index
        .shared
        .queued_docs
        .fetch_sub(MAX_QUEUED_DOCS, Ordering::Relaxed);
    write_turn(&mut log, 1, "second pelican", "ok");
    index.add(id, 5, None); // diverted: the conversation waits for its scan
    assert_eq!(Metrics::get(&metrics.search_overflows), 1);
    writer
        .sync(vec![log.path().clone()])
        .blocking_recv()
        .unwrap()
        .unwrap();
    until_found(&index, "pelican", 1);
    let mut commits = index.committed();
    while index.pending_scans() > 0 {
        next_commit(&mut commits);
    }
    assert_eq!(Metrics::get(&metrics.search_documents), 4);
    index.shutdown();
}

/// A word in more than [`store::BROAD_DOCS`] documents is not scored by BM25 (that would walk
/// its whole doclist on every query): its matches rank by how many a conversation has, then
/// by recency; narrow words beside it are still ranked by BM25.
#[test]
fn broad_words_rank_by_count_and_recency_narrow_ones_by_bm25() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.sqlite");
    let (store, fresh) = store::Store::open(&path).unwrap();
    assert!(fresh);
    let doc = |seq: u64, text: &str| Doc {
        seq,
        kind: DocKind::Request,
        text: text.to_string(),
    };
    let (old, mid, new) = (
        ConversationId::new_random(),
        ConversationId::new_random(),
        ConversationId::new_random(),
    );
    store.begin().unwrap();
    let many: Vec<Doc> = (0..store::BROAD_DOCS as u64 + 500)
        .map(|n| doc(n, &format!("common filler {n}")))
        .collect();
    store.add(&old, &many, many.len() as u64).unwrap();
    store
        .add(&mid, &[doc(0, "common and rare together")], 0)
        .unwrap();
    store.add(&new, &[doc(0, "common alone")], 0).unwrap();
    store.commit().unwrap();
    let conn = store::open_reader(&path).unwrap();
    let found = |q: &str| -> Vec<ConversationId> {
        run_query(&conn, q, 10)
            .unwrap()
            .into_iter()
            .map(|h| h.conversation)
            .collect()
    };
    // Broad: the conversation with the most matches, then the newest first.
    assert_eq!(found("common"), [old, new, mid]);
    // A narrow word with it: BM25 over the narrow word, filtered by both.
    assert_eq!(found("common rare"), [mid]);
    assert_eq!(found("rare"), [mid]);
    // No document has every word: any word, narrow matches first.
    assert_eq!(found("rare nothinghere"), [mid]);
    assert_eq!(found("common nothinghere"), [old, new, mid]);
    let hits = run_query(&conn, "common rare", 10).unwrap();
    assert_eq!(hits[0].snippets, ["user: **common** and **rare** together"]);
}

/// Snippets are FTS5's: whatever the index's tokenizer matched is marked — accents and case
/// either way, prefixes (typed or implicit), every word of several — within a window of at
/// most [`ranking`]'s 16 tokens, `…` where it was cut, words side by side under one pair of
/// marks, line breaks as spaces.
#[test]
fn snippets_mark_every_match_the_index_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.sqlite");
    let (store, _) = store::Store::open(&path).unwrap();
    let long = (0..40)
        .map(|n| format!("w{n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let texts = [
        "Le Café de Flore, rue Saint-Benoît",
        "Weather in PARIS\ntomorrow?",
        "a terrace by the lake, an expensive view",
        "bowl of phở near the station",
        "the offline builtin provider answers",
        long.as_str(),
    ];
    store.begin().unwrap();
    for text in texts {
        let doc = Doc {
            seq: 0,
            kind: DocKind::Request,
            text: text.to_string(),
        };
        store.add(&ConversationId::new_random(), &[doc], 0).unwrap();
    }
    store.commit().unwrap();
    let conn = store::open_reader(&path).unwrap();
    let snippets = |q: &str| -> Vec<String> {
        run_query(&conn, q, 10)
            .unwrap()
            .into_iter()
            .flat_map(|h| h.snippets)
            .collect()
    };
    // Diacritics: typed without them, or with them where the text has none.
    assert_eq!(
        snippets("cafe"),
        ["user: Le **Café** de Flore, rue Saint-Benoît"]
    );
    assert_eq!(
        snippets("benoit"),
        ["user: Le Café de Flore, rue Saint-**Benoît**"]
    );
    // A letter the removed home-made table did not fold (found, but not marked, before).
    assert_eq!(snippets("pho"), ["user: bowl of **phở** near the station"]);
    // Case; the line break becomes a space.
    assert_eq!(snippets("paris"), ["user: Weather in **PARIS** tomorrow?"]);
    assert_eq!(
        snippets("Café"),
        ["user: Le **Café** de Flore, rue Saint-Benoît"]
    );
    // A typed prefix, and a bare word's implicit one.
    assert_eq!(
        snippets("terr*"),
        ["user: a **terrace** by the lake, an expensive view"]
    );
    assert_eq!(
        snippets("expens"),
        ["user: a terrace by the lake, an **expensive** view"]
    );
    // Several words: each marked; side by side (a phrase, or bare words) under one pair.
    assert_eq!(
        snippets("lake terrace"),
        ["user: a **terrace** by the **lake**, an expensive view"]
    );
    assert_eq!(
        snippets("builtin offline"),
        ["user: the **offline builtin** provider answers"]
    );
    assert_eq!(
        snippets("\"offline builtin provider\""),
        ["user: the **offline builtin provider** answers"]
    );
    // A long text: a window of 16 tokens around the match, cut on both sides.
    assert_eq!(
        snippets("w20"),
        ["user: …w13 w14 w15 w16 w17 w18 w19 **w20** w21 w22 w23 w24 w25 w26 w27 w28…"]
    );
}
