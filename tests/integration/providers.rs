//! Turns driven by the scripted OpenAI-compatible model (`harness::fakes`): the provider's tool
//! loop, an external tool server routed by prefix, and the queue behaviours that need a model
//! held mid-turn (queue full, cancel kinds, the no-clients grace).

use serde_json::json;

use crate::harness::*;

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
    let (mut a, id) = server.joined("llm");
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
    // The model failed before any tool ran: an agent turn's failure, nothing done.
    assert_eq!(
        done[2]["result"]["disposition"],
        json!({"status": "failed", "path": "action", "mayHaveSideEffects": false})
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
    let s = model_held_by(&gate, |_| true);
    let server = Server::with_model(&s, "test-model", &[]);
    let (mut a, id) = server.joined("slow");
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
    assert_eq!(calls.last().unwrap().1[1], "user");
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
    let s = model_held_by(&gate, |_| true);
    let server = Server::with_model(&s, "m", &["--no-clients-grace", "0.3"]);
    let (mut a, id) = server.joined("abandoned");
    let running = Client::request_id(&a.submit(&id, "first"));
    a.submit(&id, "second");
    a.submit(&id, "third");
    drop(a);
    server.wait_log(&format!(
        "conversation {id}: no clients; cancelling 2 queued requests"
    ));
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
