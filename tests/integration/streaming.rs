//! Streamed answers end to end (issue 50): a scripted OpenAI-compatible endpoint over TLS
//! (the test CA passed through `SSL_CERT_FILE`) writes its answer in pieces, holding the next
//! one until the test lets it go, and the real server sends each piece to every joined client
//! as `appendDisplay(…, "inline")` while the endpoint is still writing; a client joining
//! mid-answer gets the words so far; the display log keeps the answer as one entry; a cancel
//! closes the upstream connection and keeps the answer so far, marked cancelled; a crash
//! mid-answer keeps what was checkpointed, marked interrupted.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// A server whose OpenAI-compatible provider is `endpoint`, trusting the test CA.
fn server_for(dir: &std::path::Path, endpoint: &ScriptedSse, extra: &[&str]) -> Server {
    let mut args = vec!["--provider", "openai"];
    args.extend_from_slice(extra);
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    Server::try_start_env(
        dir,
        &args,
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &endpoint.url("/v1")),
            ("ROUNDTABLE_OPENAI_MODEL", "streaming-model"),
            ("SSL_CERT_FILE", &ca),
            ("SSL_CERT_DIR", ""),
        ],
    )
    .unwrap_or_else(|log| panic!("{log}"))
}

/// Waits for the next inline piece on `c`'s `clientio:<id>`; its message.
fn next_piece(c: &mut Client, id: &str) -> Value {
    loop {
        let args = c.expect_call(&clientio(id), "appendDisplay");
        if args[1] == "inline" {
            return args[0].clone();
        }
    }
}

/// The display log's entries of request `rid`.
fn logged(c: &mut Client, id: &str, rid: &str) -> Vec<Value> {
    c.invoke(&dispatcher(id), "getDisplayHistory", json!([]))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["requestId"]["requestId"] == rid || e["message"]["requestId"]["requestId"] == rid
        })
        .cloned()
        .collect()
}

/// Words reach the sender and a second client while the endpoint still holds the rest; a
/// third client joining mid-answer gets the words so far, then the rest live; the log holds
/// the answer once, whole, and the thinking apart; the meter follows the last chunk's usage.
#[test]
fn every_client_watches_the_answer_being_written() {
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"reasoning_content": "Counting "})),
            chunk(json!({"reasoning_content": "stars."})),
            chunk(json!({"content": "Once upon "})),
            Step::Wait(held.clone()),
            chunk(json!({"content": "a **time**."})),
            finish("stop"),
            usage_chunk("streaming-model", 1200, 34),
            done(),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let server = server_for(dir.path(), &endpoint, &[]);
    let (mut a, id) = server.joined("stories");
    let mut b = server.connect();
    b.join(&id);
    let rid = Client::request_id(&a.submit(&id, "tell me a story"));
    // While the endpoint waits on the gate, both clients have the words so far.
    for c in [&mut a, &mut b] {
        let thinking = next_piece(c, &id);
        assert_eq!(thinking["thinking"], true, "{thinking}");
        assert_eq!(thinking["message"]["kind"], "info");
        let mut words = String::new();
        while !words.ends_with("Once upon ") {
            let piece = next_piece(c, &id);
            if piece["thinking"] != true {
                words.push_str(piece["message"]["content"].as_str().unwrap());
            }
        }
        assert_eq!(words, "Once upon ");
    }
    assert!(endpoint.requests()[0].body["stream"] == true);
    // A client joining now gets the thinking and the words sent so far, as one piece each.
    let mut c = server.connect();
    c.join(&id);
    let so_far: Vec<Value> = (0..2).map(|_| next_piece(&mut c, &id)).collect();
    assert_eq!(so_far[0]["message"]["content"], "Counting stars.");
    assert_eq!(so_far[1]["message"]["content"], "Once upon ");
    gate.open();
    for client in [&mut a, &mut b, &mut c] {
        let calls = client.until_complete(&id, &rid);
        let texts = Client::texts(&calls);
        assert!(
            texts.iter().any(|t| t.ends_with("a **time**.")),
            "{texts:?}"
        );
    }
    // The log: the thinking and the answer, once each, whole, marked streamed; no pieces.
    let entries = logged(&mut a, &id, &rid);
    let displays: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "append-display")
        .collect();
    assert_eq!(displays.len(), 2, "{entries:?}");
    assert_eq!(displays[0]["message"]["thinking"], true);
    assert_eq!(
        displays[0]["message"]["message"]["content"],
        "Counting stars."
    );
    assert_eq!(displays[1]["message"]["streamed"], true);
    assert_eq!(
        displays[1]["message"]["message"]["content"],
        "Once upon a **time**."
    );
    assert!(displays.iter().all(|d| d["mode"] == "block"));
    let status = a.invoke(&dispatcher(&id), "getStatus", json!([])).unwrap();
    assert_eq!(status["contextMeter"]["contextTokens"], 1234, "{status}");
}

/// The first piece does not wait for the turn's end: the request's acceptance is a write
/// barrier that may wait for the next one (the completion's) before its fsync, and the piece
/// is held behind it. The seam stretches that wait to ten minutes; the piece still arrives
/// while the endpoint holds the rest of the answer, because a piece someone watches ends it.
#[test]
fn the_first_piece_does_not_wait_for_the_turns_end() {
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"content": "Right away"})),
            Step::Wait(held.clone()),
            chunk(json!({"content": ", and the rest."})),
            finish("stop"),
            done(),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    let server = Server::try_start_env(
        dir.path(),
        &["--provider", "openai"],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &endpoint.url("/v1")),
            ("ROUNDTABLE_OPENAI_MODEL", "streaming-model"),
            ("SSL_CERT_FILE", &ca),
            ("SSL_CERT_DIR", ""),
            ("ROUNDTABLE_TEST_SYNC_LINGER_MS", "600000"),
        ],
    )
    .unwrap_or_else(|log| panic!("{log}"));
    let (mut a, id) = server.joined("right away");
    let rid = Client::request_id(&a.submit(&id, "answer at once"));
    assert_eq!(next_piece(&mut a, &id)["message"]["content"], "Right away");
    gate.open();
    a.until_complete(&id, &rid);
}

/// Cancelling a request while the model writes closes the upstream connection within 1 s;
/// the words so far stay in the log, marked cancelled.
#[test]
fn cancel_stops_the_model_and_keeps_the_answer_so_far() {
    let endpoint = ScriptedSse::tls(|_, _| {
        Reply::events(vec![
            chunk(json!({"content": "The first half"})),
            Step::HoldUntilClosed,
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let server = server_for(dir.path(), &endpoint, &[]);
    let (mut a, id) = server.joined("cancelled story");
    let rid = Client::request_id(&a.submit(&id, "a long story"));
    assert_eq!(
        next_piece(&mut a, &id)["message"]["content"],
        "The first half"
    );
    a.invoke(&dispatcher(&id), "cancelCommand", json!([rid]))
        .unwrap();
    assert!(
        endpoint.closed_within(Duration::from_secs(1)).is_some(),
        "the model's connection is still open a second after the cancel"
    );
    a.until_complete(&id, &rid);
    let entries = logged(&mut a, &id, &rid);
    let answer = entries
        .iter()
        .find(|e| e["type"] == "append-display")
        .unwrap_or_else(|| panic!("no answer logged: {entries:?}"));
    assert_eq!(answer["message"]["message"]["content"], "The first half");
    assert_eq!(answer["message"]["cancelled"], true);
}

/// `kill -9` while the model writes: what was checkpointed (a piece past 32 KiB forces one)
/// is in the history after the restart, marked interrupted, before the request's failure;
/// never a silently truncated "complete" answer.
#[test]
fn a_crash_mid_answer_keeps_the_checkpointed_part_marked_interrupted() {
    let long = "word ".repeat(8 * 1024);
    let first = long.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"content": first.clone()})),
            Step::HoldUntilClosed,
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let server = server_for(dir.path(), &endpoint, &[]);
    let (mut a, id) = server.joined("crashing story");
    let rid = Client::request_id(&a.submit(&id, "a very long story"));
    next_piece(&mut a, &id);
    // The checkpoint is on disk once the partial file holds the piece.
    let partial = dir
        .path()
        .join("conversations")
        .join(&id)
        .join("answer.partial.jsonl");
    eventually("the answer checkpointed", || {
        std::fs::read_to_string(&partial).is_ok_and(|t| t.len() > long.len())
    });
    server.kill();
    let server = server_for(dir.path(), &endpoint, &[]);
    let (mut b, _) = server.joined("other");
    b.join(&id);
    let entries = logged(&mut b, &id, &rid);
    let answer = entries
        .iter()
        .find(|e| e["type"] == "append-display" && e["message"]["interrupted"] == true)
        .unwrap_or_else(|| panic!("no interrupted answer: {entries:?}"));
    assert_eq!(answer["message"]["message"]["content"], long.as_str());
    assert!(
        entries
            .iter()
            .any(|e| e["type"] == "command-result" && e["error"].is_string()),
        "{entries:?}"
    );
}

/// The CLI (in a pseudo-terminal) prints the answer as it is written: the first words appear
/// while the endpoint still holds the rest, the thinking before them; `roundtable run` the
/// same.
#[test]
fn the_cli_prints_the_answer_as_it_is_written() {
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"reasoning_content": "Pondering."})),
            chunk(json!({"content": "Once upon "})),
            Step::Wait(held.clone()),
            chunk(json!({"content": "a time."})),
            finish("stop"),
            done(),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let server = server_for(dir.path(), &endpoint, &[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = crate::cli::pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    p.send_line("tell me a story").unwrap();
    p.exp_string("Pondering.").unwrap();
    // The first words, while the model still holds the rest.
    p.exp_string("Once upon ").unwrap();
    assert_eq!(endpoint.requests().len(), 1);
    gate.open();
    p.exp_string("a time.").unwrap();
    p.exp_string("CLI> ").unwrap();
}
