//! The conversation runtime: command queue, completion protocol, routing, display log,
//! interactions, the agent loop with both providers, and slow readers.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// Two clients in one conversation both see a turn of the builtin agent: the echo of the
/// request, the tool call, its result, the answer and `commandComplete` with the ack's id.
#[test]
fn two_clients_share_a_turn_with_the_tool_loop() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    let id = a.create("shared");
    a.join(&id);
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
        assert_eq!(shown[2]["message"]["content"], "5");
        assert_eq!(shown[2]["requestId"]["connectionId"], "0");
        let (_, done) = calls.last().unwrap();
        assert_eq!(done[1], "commandComplete");
        assert_eq!(done[2], json!({"result": null}));
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

/// A turn stalled on a question: a client joining meanwhile gets the pending interaction and
/// the busy queue, another client answers it, `cancelInteraction` falls back to the default,
/// and a new submit supersedes a stalled turn.
#[test]
fn interactions_answered_by_another_client() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    let id = a.create("asking");
    a.join(&id);
    b.join(&id);
    let clientio = clientio(&id);
    let ack = a.submit(&id, "ask me Shall we proceed?");
    let asking = Client::request_id(&ack);
    let q = b.expect_call(&clientio, "requestInteraction");
    let interaction = q[0]["interactionId"].as_str().unwrap().to_string();
    assert_eq!(q[0]["type"], "question");
    assert_eq!(q[0]["message"], "Shall we proceed?");
    assert_eq!(q[0]["choices"], json!(["Yes", "No"]));
    assert_eq!(q[0]["requestId"]["requestId"], asking.as_str());

    let mut c = server.connect();
    let joined = c.join(&id);
    assert_eq!(
        joined["pendingInteractions"][0]["interactionId"],
        interaction.as_str()
    );
    assert_eq!(
        joined["queueSnapshot"]["running"]["requestId"],
        asking.as_str()
    );

    b.invoke(
        &dispatcher(&id),
        "respondToInteraction",
        json!([{"interactionId": interaction, "type": "question", "value": 0}]),
    )
    .unwrap();
    let calls = a.until_complete(&id, &asking);
    assert!(calls.iter().any(|(m, args)| m == "interactionResolved"
        && args[0] == interaction.as_str()
        && args[1] == 0));
    assert!(
        Client::texts(&calls).contains(&"You answered Yes.".to_string()),
        "{calls:?}"
    );
    assert_eq!(
        b.invoke(
            &dispatcher(&id),
            "respondToInteraction",
            json!([{"interactionId": "nope", "type": "question", "value": 1}])
        )
        .unwrap(),
        Value::Null
    );

    // cancelInteraction: the question has defaultId 1 ("No"), so the turn goes on with it.
    let ack = a.submit(&id, "ask me Really?");
    let rid = Client::request_id(&ack);
    let q = b.expect_call(&clientio, "requestInteraction");
    assert_eq!(q[0]["defaultId"], 1);
    b.send_call(
        &dispatcher(&id),
        "cancelInteraction",
        json!([q[0]["interactionId"]]),
    );
    let calls = a.until_complete(&id, &rid);
    assert!(calls.iter().any(|(m, _)| m == "interactionCancelled"));
    assert!(
        Client::texts(&calls).contains(&"You answered No.".to_string()),
        "{calls:?}"
    );

    // A new submit supersedes a stalled turn.
    let ack = a.submit(&id, "ask me Stalled?");
    let stalled = Client::request_id(&ack);
    let q = b.expect_call(&clientio, "requestInteraction");
    let ack = b.submit(&id, "hello again");
    let next = Client::request_id(&ack);
    let calls = a.until_complete(&id, &stalled);
    assert_eq!(calls.last().unwrap().1[1], "superseded");
    assert!(calls
        .iter()
        .any(|(m, args)| m == "interactionCancelled" && args[0] == q[0]["interactionId"]));
    let calls = a.until_complete(&id, &next);
    assert!(Client::texts(&calls).contains(&"echo: hello again".to_string()));

    // The history records the interactions.
    let history = c
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for k in [
        "pending-interaction",
        "interaction-resolved",
        "interaction-cancelled",
    ] {
        assert!(kinds.contains(&k), "{k} missing in {kinds:?}");
    }
}

/// A private question goes to the originator only, as `requestChoice`, answered with
/// `respondToChoice`; others cannot answer it.
#[test]
fn private_choice_for_the_originator_only() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    let id = a.create("private");
    a.join(&id);
    b.join(&id);
    let clientio = clientio(&id);
    // The builtin provider maps "ask me privately …" to ask_user with private: true.
    let ack = a.submit(&id, "ask me privately Delete it?");
    let rid = Client::request_id(&ack);
    let choice = a.expect_call(&clientio, "requestChoice");
    assert_eq!(choice[2], "yesNo");
    assert_eq!(choice[3], "Delete it?");
    assert!(b
        .try_expect_call(&clientio, "requestChoice", Duration::from_millis(300))
        .is_none());
    let choice_id = choice[1].as_str().unwrap().to_string();
    assert_eq!(
        b.invoke(
            &dispatcher(&id),
            "respondToChoice",
            json!([choice_id, true])
        )
        .unwrap_err(),
        "Choice not found or expired"
    );
    a.invoke(
        &dispatcher(&id),
        "respondToChoice",
        json!([choice_id, false]),
    )
    .unwrap();
    let calls = a.until_complete(&id, &rid);
    assert!(
        Client::texts(&calls).contains(&"You answered No.".to_string()),
        "{calls:?}"
    );
}

/// The agent loop against a scripted OpenAI-compatible server: a tool call, its result sent
/// back, then the final answer; a 500 becomes the command's error.
#[test]
fn openai_provider_runs_the_tool_loop() {
    let s = scripted(|n, body| match n {
        0 => (
            200,
            completion(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "calculate", "arguments": "{\"expression\":\"6*7\"}"}}]})),
        ),
        1 => {
            let last = body["messages"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(last["role"], "tool");
            (
                200,
                completion(
                    json!({"role": "assistant", "content": format!("The answer is {}.", last["content"].as_str().unwrap())}),
                ),
            )
        }
        _ => (500, "{\"error\":\"boom\"}".to_string()),
    });
    let server = Server::with_model(&s, "test-model", &[]);
    // instanceStorage of the chat agent: a system prompt shared by all conversations.
    std::fs::create_dir_all(server.dir.join("chat")).unwrap();
    std::fs::write(server.dir.join("chat/system-prompt.md"), "You are terse.").unwrap();
    let mut a = server.connect();
    let id = a.create("llm");
    a.join(&id);
    let calls = a.run_turn(&id, "what is six times seven?");
    let texts = Client::texts(&calls);
    assert!(texts.contains(&"42".to_string()), "{texts:?}");
    assert!(
        texts.contains(&"The answer is 42.".to_string()),
        "{texts:?}"
    );
    let bodies = s.bodies.lock().unwrap().clone();
    assert_eq!(bodies[0]["model"], "test-model");
    assert_eq!(
        bodies[0]["messages"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert!(bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "calculate"));
    assert_eq!(
        bodies[1]["messages"].as_array().unwrap().last().unwrap()["content"],
        "42"
    );

    let calls = a.run_turn(&id, "and now?");
    let done = &calls.last().unwrap().1;
    assert!(
        done[2]["result"]["lastError"]
            .as_str()
            .unwrap()
            .contains("HTTP 500"),
        "{done}"
    );
    // The failed turn did not lose the history: the next request carries every earlier message.
    let bodies = s.bodies.lock().unwrap().clone();
    assert!(bodies[2]["messages"].as_array().unwrap().len() >= 5);
}

/// With a slow model the queue fills: 100 queued requests fit, the 101st gets `queue_full`;
/// cancelling queued and running work answers the right kinds and events.
#[test]
fn queue_full_and_cancel() {
    let gate = Gate::closed();
    let held = gate.clone();
    let s = scripted(move |_, _| {
        held.pass();
        (
            200,
            completion(json!({"role": "assistant", "content": "done"})),
        )
    });
    let server = Server::with_model(&s, "test-model", &[]);
    let mut a = server.connect();
    let id = a.create("slow");
    a.join(&id);
    let running = Client::request_id(&a.submit(&id, "slow one"));
    let mut queued = Vec::new();
    for i in 0..100 {
        let ack = a
            .invoke(
                &dispatcher(&id),
                "submitCommand",
                json!([
                    format!("q{i}"),
                    null,
                    null,
                    format!("c{i}"),
                    format!("rid-{i}")
                ]),
            )
            .unwrap();
        assert_eq!(ack["ok"], true, "{i}: {ack}");
        assert_eq!(ack["entry"]["requestId"], format!("rid-{i}"));
        queued.push(format!("rid-{i}"));
    }
    let full = a
        .invoke(&dispatcher(&id), "submitCommand", json!(["one too many"]))
        .unwrap();
    assert_eq!(
        full,
        json!({"ok": false, "error": "queue_full", "maxDepth": 100})
    );
    let snap = a
        .invoke(&dispatcher(&id), "getQueueSnapshot", json!([]))
        .unwrap();
    assert_eq!(snap["running"]["requestId"], running.as_str());
    assert_eq!(snap["queued"].as_array().unwrap().len(), 100);

    let r = a
        .invoke(&dispatcher(&id), "cancelCommand", json!(["rid-5"]))
        .unwrap();
    assert_eq!(r, json!({"kind": "cancelled_queued", "requestId": "rid-5"}));
    let calls = a.until_complete(&id, "rid-5");
    assert_eq!(calls.last().unwrap().1[1], "cancelled");
    a.send_call(&dispatcher(&id), "cancelCommandByClientId", json!(["c6"]));
    let calls = a.until_complete(&id, "rid-6");
    assert_eq!(calls.last().unwrap().0, "requestCancelled");
    let r = a
        .invoke(&dispatcher(&id), "cancelCommand", json!([running]))
        .unwrap();
    assert_eq!(r["kind"], "cancelled_running");
    a.until_complete(&id, &running);
    let r = a
        .invoke(&dispatcher(&id), "cancelCommand", json!(["rid-5"]))
        .unwrap();
    assert_eq!(r["kind"], "already_completed");
    let r = a
        .invoke(&dispatcher(&id), "cancelCommand", json!(["never"]))
        .unwrap();
    assert_eq!(r["kind"], "not_found");
    // Release the model: everything left completes, in order.
    gate.open();
    let calls = a.until_complete(&id, "rid-99");
    assert_eq!(calls.last().unwrap().1[1], "commandComplete");
}

/// After the last client leaves, queued work waits out the grace period, then is cancelled
/// with `no_clients`; the running turn is left alone.
#[test]
fn no_clients_grace_cancels_queued_work() {
    let gate = Gate::closed();
    let held = gate.clone();
    let s = scripted(move |_, _| {
        held.pass();
        (
            200,
            completion(json!({"role": "assistant", "content": "done"})),
        )
    });
    let server = Server::with_model(&s, "m", &["--no-clients-grace", "0.3"]);
    let mut a = server.connect();
    let id = a.create("abandoned");
    a.join(&id);
    let running = Client::request_id(&a.submit(&id, "first"));
    a.submit(&id, "second");
    a.submit(&id, "third");
    drop(a);
    std::thread::sleep(Duration::from_millis(900));
    let mut b = server.connect();
    let joined = b.join(&id);
    assert_eq!(
        joined["queueSnapshot"]["running"]["requestId"],
        running.as_str()
    );
    assert_eq!(joined["queueSnapshot"]["queued"], json!([]));
    gate.open();
    b.until_complete(&id, &running);
}

/// A question nobody answers times out to its default, without an `interactionCancelled`
/// broadcast; the stalled turn going away with its last client is superseded after the grace.
#[test]
fn interaction_timeout_and_grace_supersede() {
    let server = Server::start(&["--interaction-timeout", "0.3", "--no-clients-grace", "0.2"]);
    let mut a = server.connect();
    let id = a.create("timeouts");
    a.join(&id);
    let ack = a.submit(&id, "ask me Anyone there?");
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&id, &rid);
    assert!(calls.iter().all(|(m, _)| m != "interactionCancelled"));
    assert!(
        Client::texts(&calls).contains(&"You answered No.".to_string()),
        "{calls:?}"
    );

    a.submit(&id, "ask me Still there?");
    a.expect_call(&clientio(&id), "requestInteraction");
    drop(a);
    std::thread::sleep(Duration::from_millis(700));
    let mut b = server.connect();
    let joined = b.join(&id);
    assert!(joined.get("queueSnapshot").is_none(), "{joined}");
    assert_eq!(joined["pendingInteractions"], json!([]));
}

/// History survives a restart and an eviction, seq continues, afterSeq returns only the tail.
#[test]
fn history_after_restart_eviction_and_after_seq() {
    let temp = tempfile::tempdir().unwrap();
    let server = Server::start_in(temp.path(), &["--idle-timeout", "0.2"]);
    let mut a = server.connect();
    let id = a.create("durable");
    a.join(&id);
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
    std::thread::sleep(Duration::from_millis(100));
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
    let mut a = server.connect();
    let mut b = server.connect();
    let id = a.create("commands");
    a.join(&id);
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
    assert!(c["completions"][0]["completions"]
        .as_array()
        .unwrap()
        .contains(&json!("@conversation")));
    let status = a.invoke(&d, "getStatus", json!([])).unwrap();
    assert!(status["agents"].is_array() && status["details"].as_str().unwrap().contains("builtin"));
    assert_eq!(
        a.invoke(&d, "getDeveloperMode", json!([])).unwrap(),
        json!(false)
    );
    assert_eq!(
        a.invoke(&d, "getTemplateSchema", json!([])).unwrap_err(),
        "No invoke handler getTemplateSchema"
    );
    assert!(a
        .invoke(&d, "submitCommand", json!([42]))
        .unwrap_err()
        .starts_with("Invalid argument 0 (command)"));
    // close: leave-like for this connection only.
    assert_eq!(b.invoke(&d, "close", json!([])).unwrap(), Value::Null);
    eventually("b left", || {
        b.agent("leaveConversation", json!([id])).err()
            == Some(format!("Not joined to conversation: {id}"))
    });
}

/// @compact collapses the chat history to a summary and shows it; the display log keeps
/// everything (it is never rewritten).
#[test]
fn compact_summarizes_history() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let id = a.create("compact me");
    a.join(&id);
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
    assert_eq!(lines.len(), 1);
    assert!(lines[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("[summary]"));
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
    let mut a = server.connect();
    let id = a.create("busy");
    a.join(&id);
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

/// An external tool server (`--tool-server echo=URL`): its tools are offered to the model as
/// `echo__<tool>`, a call is routed to it by that prefix, and its answer goes back to the model.
#[test]
fn external_tool_server_is_routed_by_prefix() {
    let tools = scripted(|_, body| {
        if body.is_null() {
            // GET /tools
            let list = json!([{"name": "shout", "description": "Upper-cases text",
                               "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}]);
            (200, list.to_string())
        } else {
            assert_eq!(body["tool"], "shout");
            let text = body["input"]["text"].as_str().unwrap().to_uppercase();
            (200, json!({"content": text}).to_string())
        }
    });
    let model = scripted(|n, body| match n {
        0 => {
            let offered: Vec<&str> = body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap())
                .collect();
            assert!(offered.contains(&"echo__shout"), "{offered:?}");
            (
                200,
                completion(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "echo__shout", "arguments": "{\"text\":\"hello\"}"}}]})),
            )
        }
        _ => {
            let last = body["messages"].as_array().unwrap().last().unwrap().clone();
            (
                200,
                completion(
                    json!({"role": "assistant", "content": format!("The server said {}", last["content"].as_str().unwrap())}),
                ),
            )
        }
    });
    let tool_arg = format!("echo={}", tools.url);
    let server = Server::with_model(&model, "m", &["--tool-server", &tool_arg]);
    let mut a = server.connect();
    let id = a.create("tools");
    a.join(&id);
    let calls = a.run_turn(&id, "shout hello");
    let texts = Client::texts(&calls);
    assert!(texts.contains(&"HELLO".to_string()), "{texts:?}");
    assert!(
        texts.contains(&"The server said HELLO".to_string()),
        "{texts:?}"
    );
    assert_eq!(tools.bodies.lock().unwrap().len(), 2);
}
