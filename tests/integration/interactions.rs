//! Questions and choices asked by a running turn: answered by another client, private to the
//! originator, cancelled to their default, timed out, and a stalled turn superseded.

use serde_json::{json, Value};

use crate::harness::*;

/// A turn stalled on a question: a client joining meanwhile gets the pending interaction and
/// the busy queue, another client answers it, `cancelInteraction` falls back to the default,
/// and a new submit supersedes a stalled turn.
#[test]
fn interactions_answered_by_another_client() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("asking");
    let mut b = server.connect();
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
    assert_eq!(calls.last().unwrap().1[1], "user");
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
    let (mut a, id) = server.joined("private");
    let mut b = server.connect();
    b.join(&id);
    let clientio = clientio(&id);
    // The builtin provider maps "ask me privately …" to ask_user with private: true.
    let ack = a.submit(&id, "ask me privately Delete it?");
    let rid = Client::request_id(&ack);
    let choice = a.expect_call(&clientio, "requestChoice");
    assert_eq!(choice[2], "yesNo");
    assert_eq!(choice[3], "Delete it?");
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
    // B sees the rest of the turn, sent after the question through the same queue: the
    // question would have come before it.
    b.expect_none_before(
        "the private question",
        is_call(&clientio, "requestChoice"),
        |b| b.until_complete(&id, &rid),
    );
}

/// A question nobody answers times out to its default, without an `interactionCancelled`
/// broadcast; the stalled turn going away with its last client is superseded after the grace.
#[test]
fn interaction_timeout_and_grace_supersede() {
    let server = Server::start(&["--interaction-timeout", "0.3", "--no-clients-grace", "0.2"]);
    let (mut a, id) = server.joined("timeouts");
    let ack = a.submit(&id, "ask me Anyone there?");
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&id, &rid);
    assert!(calls.iter().all(|(m, _)| m != "interactionCancelled"));
    assert!(
        Client::texts(&calls).contains(&"You answered No.".to_string()),
        "{calls:?}"
    );

    let stalled = Client::request_id(&a.submit(&id, "ask me Still there?"));
    a.expect_call(&clientio(&id), "requestInteraction");
    drop(a);
    // Logged once the cancellation is on disk and announced: the conversation is idle again.
    server.wait_log(&format!(
        "conversation {id}: {stalled} cancelled (no_clients), saved and announced"
    ));
    let mut b = server.connect();
    let joined = b.join(&id);
    assert!(joined.get("queueSnapshot").is_none(), "{joined}");
    assert_eq!(joined["pendingInteractions"], json!([]));
}
