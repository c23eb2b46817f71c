//! The conversation runtime with the builtin agent: a turn seen by every client, filtered
//! clients, FIFO order across clients, `@` commands and small methods, the display log across
//! eviction and restart, `@compact`, and slow readers. Questions and choices are in
//! `interactions.rs`; turns driven by a scripted model in `providers.rs`.

use serde_json::{json, Value};

use crate::harness::*;

/// Two clients in one conversation both see a turn of the builtin agent: the echo of the
/// request, the tool call, its result, the answer and `commandComplete` with the ack's id.
#[test]
fn two_clients_share_a_turn_with_the_tool_loop() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("shared");
    let mut b = server.connect();
    b.join(&id);
    let ack = a.submit(&id, "what is 2+3");
    assert_eq!(ack["ok"], true);
    let rid = Client::request_id(&ack);
    assert_eq!(ack["entry"]["originatorConnectionId"], "0");
    assert_eq!(ack["entry"]["text"], "what is 2+3");
    assert_eq!(ack["entry"]["attachmentCount"], 0);
    for c in [&mut a, &mut b] {
        let calls = c.until_complete(&id, &rid);
        let user = calls
            .iter()
            .find(|(m, _)| m == "setUserRequest")
            .expect("setUserRequest");
        assert_eq!(user.1[0]["requestId"], rid.as_str());
        assert_eq!(user.1[1], "what is 2+3");
        let shown: Vec<&Value> = calls
            .iter()
            .filter(|(m, a)| m == "appendDisplay" && a[0]["requestId"]["requestId"] != "system")
            .map(|(_, a)| &a[0])
            .collect();
        assert_eq!(shown[0]["toolCall"]["name"], "calculate");
        assert_eq!(shown[1]["toolResult"]["content"], "5");
        assert_eq!(shown[1]["message"]["content"], "5");
        assert_eq!(shown[1]["requestId"]["connectionId"], "0");
        // Shown once: the builtin does not say the result again as its answer.
        assert_eq!(shown.len(), 2, "{shown:?}");
        let (_, done) = calls.last().unwrap();
        assert_eq!(done[1], "commandComplete");
        // A CommandResult with the turn's metrics (one action) and its trace id.
        let result = &done[2]["result"];
        assert_eq!(result["metrics"]["actions"].as_array().unwrap().len(), 1);
        assert_eq!(result["traceId"].as_str().unwrap().len(), 32);
        assert!(result.get("lastError").is_none(), "{result}");
        assert_eq!(done[3], "system");
        assert_eq!(done.as_array().unwrap().len(), 6);
    }
    // The history holds the same turn with seqs from 0.
    let history = b
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let entries = history.as_array().unwrap();
    assert_eq!(entries[0]["type"], "user-request");
    assert_eq!(entries[0]["command"], "what is 2+3");
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["seq"], i);
    }
    assert_eq!(entries.last().unwrap()["type"], "command-result");
    let list = a.agent("listConversations", json!(["shared"])).unwrap();
    assert_eq!(list[0]["messageCount"], 1);
    // A 1-argument submit (Android) works too.
    let ack = b
        .invoke(&dispatcher(&id), "submitCommand", json!(["hello"]))
        .unwrap();
    let rid = Client::request_id(&ack);
    let calls = b.until_complete(&id, &rid);
    assert!(Client::texts(&calls).contains(&"echo: hello".to_string()));
}

/// A client that joined with `filter: true` sees only what its own requests produce.
#[test]
fn filtered_client_sees_only_its_own() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut f = server.connect();
    let id = a.create("filtered");
    a.join(&id);
    f.agent(
        "joinConversation",
        json!([{"conversationId": id, "filter": true}]),
    )
    .unwrap();
    a.run_turn(&id, "hello from a");
    let ack = f.submit(&id, "hello from f");
    let rid = Client::request_id(&ack);
    let calls = f.until_complete(&id, &rid);
    assert_eq!(Client::texts(&calls), ["echo: hello from f"]);
    // The on-join status notices reach every joiner, filtered or not; nothing else is f's
    // unless its own request made it.
    let (notices, calls): (Vec<_>, Vec<_>) = calls
        .into_iter()
        .partition(|(m, args)| m == "notify" && args[1] == "statusNotice");
    assert_eq!(notices.len(), 2, "{notices:?}");
    for (m, args) in &calls {
        assert!(
            !m.starts_with("request") && m != "queueStateChanged",
            "queue events never reach filtered clients: {m}"
        );
        let conn = if m == "appendDisplay" {
            &args[0]["requestId"]["connectionId"]
        } else {
            &args[0]["connectionId"]
        };
        assert_eq!(conn, "1", "{m} {args}");
    }
    // The unfiltered client saw f's turn too.
    let calls = a.until_complete(&id, &rid);
    assert!(Client::texts(&calls).contains(&"echo: hello from f".to_string()));
}

/// 20 concurrent submits from 4 clients run one at a time in FIFO order, each turn's output
/// contiguous, while another conversation makes progress.
#[test]
fn fifo_across_clients_while_another_conversation_runs() {
    let server = Server::start(&[]);
    let mut watcher = server.connect();
    let id = watcher.create("busy");
    let other = watcher.create("other");
    watcher.join(&id);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let url = server.url();
            let id = id.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url);
                c.join(&id);
                let ids: Vec<u64> = (0..5)
                    .map(|i| {
                        c.send_invoke(
                            &dispatcher(&id),
                            "submitCommand",
                            json!([format!("t{t} m{i}")]),
                        )
                    })
                    .collect();
                ids.into_iter()
                    .map(|cid| Client::request_id(&c.wait_answer(&dispatcher(&id), cid).unwrap()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut side = server.connect();
    side.join(&other);
    let side_ack = side.submit(&other, "what is 6*7");
    let side_calls = side.until_complete(&other, &Client::request_id(&side_ack));
    assert!(Client::texts(&side_calls).contains(&"42".to_string()));
    let all: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(all.len(), 20);
    // Watch the 20 turns: queued order == started order == completion order; no interleaving.
    let mut queued = Vec::new();
    let mut started = Vec::new();
    let mut completed = Vec::new();
    let mut current: Option<String> = None;
    while completed.len() < 20 {
        let args = loop {
            let f = watcher.read_frame(WAIT).expect("frames keep coming");
            if f["message"]["type"] == "call" {
                break (
                    f["message"]["name"].as_str().unwrap().to_string(),
                    f["message"]["args"].clone(),
                );
            }
        };
        match args.0.as_str() {
            "requestQueued" => queued.push(args.1[0]["requestId"].as_str().unwrap().to_string()),
            "requestStarted" => {
                assert!(current.is_none(), "two turns at once");
                let r = args.1[0]["requestId"].as_str().unwrap().to_string();
                current = Some(r.clone());
                started.push(r);
            }
            "appendDisplay" | "setUserRequest" => {
                let rid = if args.0 == "appendDisplay" {
                    &args.1[0]["requestId"]["requestId"]
                } else {
                    &args.1[0]["requestId"]
                };
                if rid != "system" {
                    assert_eq!(
                        Some(rid.as_str().unwrap()),
                        current.as_deref(),
                        "output of another turn interleaved"
                    );
                }
            }
            "notify" if args.1[1] == "commandComplete" => {
                let r = args.1[0]["requestId"].as_str().unwrap().to_string();
                assert_eq!(Some(&r), current.as_ref());
                completed.push(r);
                current = None;
            }
            _ => {}
        }
    }
    assert_eq!(queued, started);
    assert_eq!(started, completed);
    let mut sorted_all = all.clone();
    sorted_all.sort();
    let mut sorted_done = completed.clone();
    sorted_done.sort();
    assert_eq!(sorted_all, sorted_done);
}

/// History survives a restart and an eviction, seq continues, afterSeq returns only the tail.
#[test]
fn history_after_restart_eviction_and_after_seq() {
    let temp = tempfile::tempdir().unwrap();
    let server = Server::start_in(temp.path(), &["--idle-timeout", "0.2"]);
    let (mut a, id) = server.joined("durable");
    for text in ["one", "two"] {
        a.run_turn(&id, text);
    }
    let before = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let n = before.as_array().unwrap().len();
    assert!(n >= 6);
    let tail = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([n as i64 - 3]))
        .unwrap();
    assert_eq!(tail.as_array().unwrap().len(), 2);
    assert_eq!(tail[0]["seq"], n - 2);
    assert_eq!(
        a.invoke(&dispatcher(&id), "getDisplayHistory", json!([null]))
            .unwrap(),
        before
    );
    assert_eq!(
        a.invoke(&dispatcher(&id), "getDisplayHistory", json!([-1]))
            .unwrap(),
        before
    );

    // Eviction keeps the log; a rejoin continues the same seq.
    a.agent("leaveConversation", json!([id])).unwrap();
    eventually("evicted", || {
        server.metric("roundtable_evictions_total") >= 1.0
    });
    a.join(&id);
    assert_eq!(
        a.invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
            .unwrap(),
        before
    );
    a.run_turn(&id, "three");
    let after = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([n as i64 - 1]))
        .unwrap();
    assert_eq!(after[0]["seq"], n);
    assert_eq!(after[0]["command"], "three");
    drop(a);
    assert!(server.shutdown().success());

    // Restart: the same history, and the message count survived.
    let server = Server::start_in(temp.path(), &[]);
    let mut b = server.connect();
    let list = b.agent("listConversations", json!(["durable"])).unwrap();
    assert_eq!(list[0]["messageCount"], 3);
    b.join(&id);
    let all = b
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    assert_eq!(
        all.as_array().unwrap().len(),
        after[0]["seq"].as_u64().unwrap() as usize + after.as_array().unwrap().len()
    );
    // A crash (kill) loses nothing that was answered, and the count is recounted.
    b.run_turn(&id, "four");
    server.kill();
    let server = Server::start_in(temp.path(), &[]);
    let mut c = server.connect();
    // Recounted from the log tail in the background after the unclean shutdown.
    eventually("message count recounted", || {
        c.agent("listConversations", json!(["durable"])).unwrap()[0]["messageCount"] == 4
    });
}

/// `@conversation` answers with takeAction to the originator only, then completes; `@help`
/// lists the commands; completion, status and developer mode answer.
#[test]
fn at_commands_and_small_methods() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("commands");
    let mut b = server.connect();
    b.join(&id);
    let ack = a.submit(&id, "@conversation switch research");
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&id, &rid);
    let action = calls
        .iter()
        .find(|(m, _)| m == "takeAction")
        .expect("takeAction");
    assert_eq!(action.1[0]["requestId"], rid.as_str());
    assert_eq!(action.1[1], "manage-conversation");
    assert_eq!(
        action.1[2],
        json!({"subcommand": "switch", "name": "research"})
    );
    let calls = b.until_complete(&id, &rid);
    assert!(calls.iter().all(|(m, _)| m != "takeAction"));

    let calls = a.run_turn(&id, "@help");
    assert!(Client::texts(&calls)[0].contains("@conversation"));

    let d = dispatcher(&id);
    let c = a
        .invoke(&d, "getCommandCompletion", json!(["@conv", "forward"]))
        .unwrap();
    assert_eq!(c["startIndex"], 1);
    assert!(c["completions"][0]["completions"]
        .as_array()
        .unwrap()
        .contains(&json!("conversation")));
    let status = a.invoke(&d, "getStatus", json!([])).unwrap();
    assert!(status["agents"].is_array() && status["details"].as_str().unwrap().contains("builtin"));
    assert_eq!(
        a.invoke(&d, "getDeveloperMode", json!([])).unwrap(),
        json!(false)
    );
    assert_eq!(
        a.invoke(&d, "noSuchMethod", json!([])).unwrap_err(),
        "No invoke handler noSuchMethod"
    );
    assert!(a
        .invoke(&d, "submitCommand", json!([42]))
        .unwrap_err()
        .starts_with("Invalid argument 0 (command)"));
    // close: leave-like for this connection only.
    // The answer comes before b's connection drops the conversation (the conversation tells
    // b's client, which tells the connection): wait until it says so, then the very first
    // leave must be refused, while a stays joined.
    assert_eq!(b.invoke(&d, "close", json!([])).unwrap(), Value::Null);
    server.wait_log(&format!(
        "conversation {id} is gone; its channels are closed"
    ));
    assert_eq!(
        b.agent("leaveConversation", json!([id])),
        Err(format!("Not joined to conversation: {id}"))
    );
    assert_eq!(a.agent("leaveConversation", json!([id])), Ok(Value::Null));
}

/// @compact collapses the chat history the model reads to a summary and shows it; the
/// history file keeps every line before the summary (issue 50: history on disk is never
/// dropped), and the display log keeps everything (it is never rewritten).
#[test]
fn compact_summarizes_history() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("compact me");
    for t in ["first question", "second question"] {
        a.run_turn(&id, t);
    }
    let before = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap()
        .as_array()
        .unwrap()
        .len();
    let calls = a.run_turn(&id, "@compact");
    let texts = Client::texts(&calls);
    assert!(
        texts[0].contains("Conversation compacted") && texts[0].contains("first question"),
        "{texts:?}"
    );
    let history_file = server
        .dir
        .join("conversations")
        .join(&id)
        .join("sessions/chat/history.jsonl");
    let lines: Vec<Value> = std::fs::read_to_string(&history_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Two turns of two messages each, then the summary, marked as the compaction.
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["content"][0]["text"], "first question");
    assert!(lines[4]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("[summary]"));
    assert_eq!(lines[4]["compaction"], true);
    // The model's next request begins with the summary.
    let session = Client::texts(&a.run_turn(&id, "@system session")).join("\n");
    assert!(session.contains(", 5 in the chat history"), "{session}");
    let after = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap()
        .as_array()
        .unwrap()
        .len();
    assert!(after > before);
    // sessionStorage goes with the conversation; instanceStorage stays.
    std::fs::create_dir_all(server.dir.join("chat")).unwrap();
    a.agent("deleteConversation", json!([id])).unwrap();
    assert!(!history_file.exists());
    assert!(server.dir.join("chat").is_dir());
}

/// A client that stops reading in a busy conversation is closed with 1008 while another keeps
/// receiving everything.
#[test]
fn slow_reader_in_a_busy_conversation() {
    // One turn of a 50 KB command puts ~300 KB toward each client (the text is in the ack,
    // requestQueued, requestStarted, the queue snapshot, setUserRequest and the echo), all at
    // once when its write barrier is confirmed: the budget holds a few turns, so the reading
    // client is never closed on a loaded machine, and the stuck one soon is.
    let server = Server::start(&["--max-queued-frames", "64", "--max-queued-bytes", "1048576"]);
    let (mut a, id) = server.joined("busy");
    let mut stuck = server.connect();
    stuck.join(&id);
    let big = "x".repeat(50_000);
    let mut done = 0;
    for i in 0..200 {
        let calls = a.run_turn(&id, &format!("{i} {big}"));
        assert_eq!(Client::texts(&calls).len(), 1);
        done += 1;
        if server.metric("roundtable_slow_client_closes_total") >= 1.0 {
            break;
        }
    }
    assert!(
        server.metric("roundtable_slow_client_closes_total") >= 1.0,
        "never closed after {done} turns"
    );
    // The fast client goes on at full speed.
    let calls = a.run_turn(&id, "still here");
    assert_eq!(Client::texts(&calls), ["echo: still here"]);
    assert_eq!(stuck.wait_close(), 1008);
    let list = a.agent("listConversations", json!(["busy"])).unwrap();
    assert_eq!(list[0]["clientCount"], 1);
}

/// The offline provider finds a place's time zone in the tz database ("in Tokyo" is
/// `Asia/Tokyo`, not UTC) and says plainly what it cannot answer instead of echoing it.
#[test]
fn builtin_provider_knows_places_and_says_what_it_cannot_do() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let id = c.create("clock");
    c.join(&id);
    let texts = Client::texts(&c.run_turn(&id, "what time is it in Tokyo?"));
    assert!(
        texts.iter().any(|t| t.contains("(Asia/Tokyo, UTC+09:00)")),
        "{texts:?}"
    );
    let texts = Client::texts(&c.run_turn(&id, "what time is it in Atlantis?"));
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("I don't know the time zone of \"Atlantis\"")),
        "{texts:?}"
    );
    let texts = Client::texts(&c.run_turn(&id, "Who wrote Hamlet?"));
    assert!(
        texts.iter().any(|t| t.starts_with("I can't answer that")),
        "{texts:?}"
    );
}
