//! Paged history (issue 29): `getDisplayHistory(afterSeq?, {limit, beforeSeq?})`, a Roundtable
//! extension TypeAgent's clients never send, answers the newest `limit` entries (before a seq,
//! after a seq), in seq order; entries long gone from the server's memory are read from disk;
//! wrong arguments get the protocol's usual errors; `[]` and `[afterSeq]` are unchanged.

use serde_json::{json, Value};

use crate::harness::*;

/// Entries in the fixture conversation, all on disk when the server starts (more than the
/// 2,048 a conversation keeps in memory).
const ENTRIES: u64 = 5000;

/// `getDisplayHistory(args)` on conversation `id`.
fn history(c: &mut Client, id: &str, args: Value) -> Rpc {
    c.invoke(&dispatcher(id), "getDisplayHistory", args)
}

/// The seqs of a history answer, each entry checked against the fixture's shape.
fn seqs(answer: Rpc) -> Vec<u64> {
    let answer = answer.unwrap();
    answer
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let seq = e["seq"].as_u64().unwrap();
            if seq < ENTRIES && seq % 3 == 0 {
                assert_eq!(e["type"], "user-request", "entry {seq}");
                assert_eq!(e["command"], fixture_command(seq / 3), "entry {seq}");
            }
            seq
        })
        .collect()
}

fn range(from: u64, below: u64) -> Vec<u64> {
    (from..below).collect()
}

/// A conversation of 5,000 entries written before the server starts (so every one is on disk
/// only) plus one live echo turn (4 entries, in memory): pages are read from disk, from memory
/// and across both.
#[test]
fn pages_read_the_newest_entries_before_and_after_a_seq() {
    let temp = tempfile::tempdir().unwrap();
    let id = write_long_conversation(temp.path(), "long", ENTRIES);
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    let rid = Client::request_id(&c.submit(&id, "live turn"));
    c.until_complete(&id, &rid);
    let total = ENTRIES + 4;
    // The newest page: three fixture entries from disk, the live turn from memory.
    assert_eq!(
        seqs(history(&mut c, &id, json!([null, {"limit": 7}]))),
        range(total - 7, total)
    );
    // The page before a seq.
    assert_eq!(
        seqs(history(
            &mut c,
            &id,
            json!([null, {"limit": 1000, "beforeSeq": 4000}])
        )),
        range(3000, 4000)
    );
    // afterSeq and a page together: the newest of those after it.
    assert_eq!(
        seqs(history(&mut c, &id, json!([4990, {"limit": 5}]))),
        range(total - 5, total)
    );
    assert_eq!(
        seqs(history(
            &mut c,
            &id,
            json!([100, {"limit": 1000, "beforeSeq": 120}])
        )),
        range(101, 120)
    );
    // A page reaching the first entry (seq 0) holds fewer than asked; before it, nothing.
    assert_eq!(
        seqs(history(
            &mut c,
            &id,
            json!([null, {"limit": 50, "beforeSeq": 30}])
        )),
        range(0, 30)
    );
    assert_eq!(
        seqs(history(
            &mut c,
            &id,
            json!([null, {"limit": 50, "beforeSeq": 0}])
        )),
        Vec::<u64>::new()
    );
    // Paging back from the newest entry walks the whole log once, in order.
    let mut pages: Vec<Vec<u64>> = Vec::new();
    let mut before: Option<u64> = None;
    loop {
        let page = seqs(history(
            &mut c,
            &id,
            json!([null, {"limit": 1000, "beforeSeq": before}]),
        ));
        let Some(first) = page.first() else { break };
        before = Some(*first);
        pages.push(page);
    }
    assert_eq!(pages.len(), 6);
    let walked: Vec<u64> = pages.into_iter().rev().flatten().collect();
    assert_eq!(walked, range(0, total));
    // TypeAgent's calls are unchanged; a `null` page is no page.
    assert_eq!(seqs(history(&mut c, &id, json!([]))), range(0, total));
    assert_eq!(
        seqs(history(&mut c, &id, json!([4990, null]))),
        range(4991, total)
    );
}

/// Wrong arguments get the protocol's invalid-argument errors, naming the field.
#[test]
fn bad_pages_are_refused_with_the_usual_errors() {
    let server = Server::start(&[]);
    let (mut c, id) = server.joined("bad pages");
    let limit =
        "Invalid argument 1 (limit) of getDisplayHistory: expected an integer from 1 to 1000";
    let cases: [(Value, &str); 9] = [
        (
            json!([null, 5]),
            "Invalid argument 1 (page) of getDisplayHistory: expected an object",
        ),
        (json!([null, {}]), limit),
        (json!([null, {"limit": 0}]), limit),
        (json!([null, {"limit": 1001}]), limit),
        (json!([null, {"limit": -3}]), limit),
        (json!([null, {"limit": 2.5}]), limit),
        (json!([null, {"limit": "10"}]), limit),
        (
            json!([null, {"limit": 10, "beforeSeq": "9"}]),
            "Invalid argument 1 (beforeSeq) of getDisplayHistory: expected an integer",
        ),
        (
            json!(["1", {"limit": 10}]),
            "Invalid argument 0 (afterSeq) of getDisplayHistory: expected an integer",
        ),
    ];
    for (args, error) in cases {
        assert_eq!(
            history(&mut c, &id, args.clone()),
            Err(error.into()),
            "{args}"
        );
    }
    // The bounds themselves are fine (`10.0` is an integer, as for every argument).
    for limit in [json!(1), json!(1000), json!(10.0)] {
        assert!(history(&mut c, &id, json!([null, {"limit": limit}])).is_ok());
    }
}
