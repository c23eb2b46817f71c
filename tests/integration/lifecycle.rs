//! Join / leave / eviction / delete: the ordered flows through the registry.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// The notice the other clients get when one joins.
const JOIN: &str = "[A new client has joined this conversation.]";

fn notice_text(args: &Value) -> String {
    args[0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Join shapes, connection ids, default resolution, notices to the *other* clients only,
/// nothing on clientio before the join reply, already-joined / not-joined errors.
#[test]
fn join_and_leave() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    // No id: the conversation named "default".
    let ra = a.agent("joinConversation", json!([null])).unwrap();
    assert_eq!(ra["name"], "default");
    assert_eq!(ra["connectionId"], "0");
    assert_eq!(ra["pendingInteractions"], json!([]));
    assert!(ra.get("queueSnapshot").is_none());
    let id = ra["conversationId"].as_str().unwrap().to_string();
    let rb = b.join(&id);
    assert_eq!(rb["connectionId"], "1");
    // A loaded conversation named by id is joined without the registry's round trip.
    assert_eq!(server.metric("roundtable_direct_joins_total"), 1.0);
    // A gets the join notice, B does not.
    let args = a.expect_call(&clientio(&id), "appendDisplay");
    assert_eq!(notice_text(&args), JOIN);
    assert_eq!(args[0]["requestId"], json!({"requestId": "system"}));
    assert_eq!(args[0]["source"], "system");
    assert_eq!(args[1], "block");

    let list = a.agent("listConversations", json!([null])).unwrap();
    assert_eq!(list[0]["clientCount"], 2);

    assert_eq!(
        a.agent("joinConversation", json!([{"conversationId": id}]))
            .unwrap_err(),
        format!(
            "Already joined conversation '{id}'. Call leaveConversation() before joining again."
        )
    );
    let other = a.create("other");
    assert_eq!(
        a.agent("leaveConversation", json!([other])).unwrap_err(),
        format!("Not joined to conversation: {other}")
    );
    let ghost = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        a.agent("joinConversation", json!([{"conversationId": ghost}]))
            .unwrap_err(),
        format!("Conversation not found: {ghost}")
    );

    // One socket may be joined to two conversations (join-before-leave switching).
    let r = a.join(&other);
    assert_eq!(r["connectionId"], "0");
    assert_eq!(
        a.agent("leaveConversation", json!([id])).unwrap(),
        Value::Null
    );
    // B never got the notice of its own join: the conversation sends B the notice of A's
    // leave after it, through the same queue, so it would have come first.
    let args = b.expect_none_before(
        "the notice of B's own join",
        |f| {
            is_call(&clientio(&id), "appendDisplay")(f)
                && notice_text(&f["message"]["args"]) == JOIN
        },
        |b| b.expect_call(&clientio(&id), "appendDisplay"),
    );
    assert_eq!(notice_text(&args), "[A client has left this conversation.]");
    eventually("client count drops", || {
        let l = a.agent("listConversations", json!([null])).unwrap();
        l[0]["clientCount"] == 1 && l[1]["clientCount"] == 1
    });
    // Closing a socket leaves everything it joined.
    a.close();
    drop(a);
    eventually("socket close leaves", || {
        let l = b.agent("listConversations", json!([null])).unwrap();
        l[1]["clientCount"] == 0
    });
    // Rejoining after leaving works and gets a fresh connection id.
    let mut c = server.connect();
    assert_eq!(c.join(&id)["connectionId"], "2");
    assert_eq!(server.metric("roundtable_direct_joins_total"), 2.0);
    // A direct join answers the name a rename just made.
    c.agent("renameConversation", json!([id, "renamed"]))
        .unwrap();
    let mut d = server.connect();
    assert_eq!(d.join(&id)["name"], "renamed");
    assert_eq!(server.metric("roundtable_direct_joins_total"), 3.0);
}

/// A loaded conversation named by id answers the join itself (issue 32: no round trip through
/// the connection and the client actor): the joiner's channels work from the answer on, join
/// after join, its clientio calls come after the answer, and two joins of it sent together are
/// one join and one refusal.
#[test]
fn a_loaded_conversation_answers_a_join_by_id_itself() {
    let server = Server::start(&[]);
    let mut owner = server.connect();
    let id = owner.create("answered here");
    owner.join(&id);
    let mut c = server.connect();
    let join = json!([{"conversationId": id}]);
    for round in 0..30 {
        let call = c.send_invoke("agent-server", "joinConversation", join.clone());
        let joined = c.wait_answer("agent-server", call).unwrap();
        assert_eq!(joined["conversationId"], id.as_str(), "round {round}");
        // Right behind the answer: the connection knows the join already.
        let status = c.invoke(&dispatcher(&id), "getStatus", json!([]));
        assert!(status.is_ok(), "round {round}: {status:?}");
        c.agent("leaveConversation", json!([id])).unwrap();
    }
    assert_eq!(server.metric("roundtable_direct_joins_total"), 30.0);

    // Nothing reaches clientio:<id> before the answer; the status dismissals follow it.
    let mut fresh = server.connect();
    let call = fresh.send_invoke("agent-server", "joinConversation", join.clone());
    let frames: Vec<Value> = (0..3)
        .map(|_| fresh.read_frame(Duration::from_secs(10)).expect("a frame"))
        .collect();
    assert_eq!(frames[0]["message"]["callId"], call, "{frames:?}");
    assert_eq!(frames[0]["message"]["type"], "invokeResult", "{frames:?}");
    for frame in &frames[1..] {
        assert_eq!(frame["name"], clientio(&id), "{frames:?}");
        assert_eq!(frame["message"]["args"][1], "statusNotice", "{frames:?}");
    }
    fresh.agent("leaveConversation", json!([id])).unwrap();

    // Two joins sent together: one joins, the other is refused as a second join.
    let first = c.send_invoke("agent-server", "joinConversation", join.clone());
    let second = c.send_invoke("agent-server", "joinConversation", join);
    let answers = [
        c.wait_answer("agent-server", first),
        c.wait_answer("agent-server", second),
    ];
    let refused = format!(
        "Already joined conversation '{id}'. Call leaveConversation() before joining again."
    );
    assert_eq!(
        answers.iter().filter(|a| a.is_ok()).count(),
        1,
        "{answers:?}"
    );
    assert!(
        answers.iter().any(|a| a.as_ref().err() == Some(&refused)),
        "{answers:?}"
    );
    assert!(c.invoke(&dispatcher(&id), "getStatus", json!([])).is_ok());
    let list = owner.agent("listConversations", json!([null])).unwrap();
    let entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["conversationId"] == id.as_str())
        .expect("listed");
    assert_eq!(
        entry["clientCount"], 2,
        "one client per joined socket: {list}"
    );
}

/// When the registry has no `default`, a join without id picks the first conversation.
#[test]
fn default_falls_back_to_first_in_registry_order() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let first = c.agent("listConversations", json!([])).unwrap()[0]["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    c.agent("renameConversation", json!([first, "not the default"]))
        .unwrap();
    let second = c.create("second");
    let r = c.agent("joinConversation", json!([{}])).unwrap();
    assert_eq!(r["conversationId"], first.as_str());
    // Deleting everything makes a join create `default` again.
    c.agent("deleteConversation", json!([first])).unwrap();
    c.agent("deleteConversation", json!([second])).unwrap();
    let r = c.agent("joinConversation", json!([])).unwrap();
    assert_eq!(r["name"], "default");
    assert_eq!(c.names(), ["default"]);
}

/// A conversation with no clients is evicted after the idle timeout and reloads on the next
/// join with connection ids starting over; joins racing the eviction all succeed.
#[test]
fn idle_eviction_and_join_during_eviction() {
    let server = Server::start(&["--idle-timeout", "0.2"]);
    let (mut c, id) = server.joined("evictable");
    assert_eq!(server.metric("roundtable_loaded_conversations"), 1.0);
    c.agent("leaveConversation", json!([id])).unwrap();
    eventually("evicted", || {
        server.metric("roundtable_evictions_total") >= 1.0
    });
    eventually("unloaded", || {
        server.metric("roundtable_loaded_conversations") == 0.0
    });
    assert_eq!(c.join(&id)["connectionId"], "0");
    c.agent("leaveConversation", json!([id])).unwrap();
    drop(c);

    // Hammer join/leave around a 1 ms idle timeout from two sockets: every join must succeed.
    let fast = Server::start(&["--idle-timeout", "0.001"]);
    let mut setup = fast.connect();
    let id = setup.create("racy");
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let url = fast.url();
            let id = id.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url);
                for _ in 0..150 {
                    c.join(&id);
                    c.agent("leaveConversation", json!([id])).unwrap();
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Everyone has left: the conversation is evicted for sure now (during the loop it may or
    // may not have been, depending on timing; every join above had to succeed either way).
    eventually("evicted", || {
        fast.metric("roundtable_evictions_total") >= 1.0
    });
    eventually("all left", || {
        let l = setup.agent("listConversations", json!([null])).unwrap();
        l.as_array().unwrap().iter().all(|c| c["clientCount"] == 0)
    });
}

/// Deleting a conversation two clients are joined to tells both, closes their channels,
/// removes the directory and the entry; later joins are "not found".
#[test]
fn delete_while_two_clients_are_joined() {
    let server = Server::start(&[]);
    let mut admin = server.connect();
    let mut a = server.connect();
    let mut b = server.connect();
    let id = admin.create("doomed");
    a.join(&id);
    b.join(&id);
    // b's join notice, then some content on disk.
    a.expect_call(&clientio(&id), "appendDisplay");
    let ack = a.submit(&id, "remember me");
    a.until_complete(&id, &Client::request_id(&ack));
    b.until_complete(&id, &Client::request_id(&ack));
    let dir = server.dir.join("conversations").join(&id);
    eventually("log written", || dir.join("displayLog.jsonl").is_file());
    assert_eq!(
        admin.agent("deleteConversation", json!([id])).unwrap(),
        Value::Null
    );
    for c in [&mut a, &mut b] {
        let args = c.expect_call(&clientio(&id), "appendDisplay");
        assert_eq!(notice_text(&args), "[This conversation was deleted.]");
        let n = c.expect_call(&clientio(&id), "notify");
        assert_eq!(n[1], "conversationDeleted");
        assert_eq!(n[2]["conversationId"], id.as_str());
    }
    assert!(!dir.exists());
    assert!(!admin.names().contains(&"doomed".to_string()));
    // Channels are closed: leaving says "not joined". The notices above go straight to the
    // sockets while each socket's connection drops the conversation a moment later (the
    // conversation tells each client, which tells its connection), so wait for both
    // connections to say they did; then the very first leave must be refused.
    server.wait_log_count(
        &format!("conversation {id} is gone; its channels are closed"),
        2,
    );
    for c in [&mut a, &mut b] {
        assert_eq!(
            c.agent("leaveConversation", json!([id])),
            Err(format!("Not joined to conversation: {id}"))
        );
    }
    assert_eq!(
        b.agent("joinConversation", json!([{"conversationId": id}]))
            .unwrap_err(),
        format!("Conversation not found: {id}")
    );
    assert_eq!(
        admin.agent("deleteConversation", json!([id])).unwrap_err(),
        format!("Conversation not found: {id}")
    );
    // The sockets themselves keep working.
    assert!(a.agent("listConversations", json!([])).is_ok());
}

/// 50 sockets create the same name at once: exactly one wins, the rest get the collision text.
#[test]
fn fifty_concurrent_creates_of_one_name() {
    let server = Server::start(&[]);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|_| {
            let url = server.url();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url);
                barrier.wait();
                c.agent("createConversation", json!(["Shared", null]))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(
            r,
            "A conversation named \"Shared\" already exists. Pick a different name."
        );
    }
    let mut c = server.connect();
    assert_eq!(c.names().iter().filter(|n| *n == "Shared").count(), 1);
}

/// `restart` (issue 26): answered void, every socket closes with 1012, and the same process
/// (re-executed in place) serves the same instance on the same port — a client connecting
/// meanwhile waits in the kept listener's backlog instead of being refused.
#[test]
fn restart_reexecutes_in_place_on_the_same_port() {
    let server = Server::start(&[]);
    let pid = server.pid();
    let mut c = server.connect();
    let id = c.create("kept across a restart");
    c.join(&id);
    c.run_turn(&id, "before the restart");
    let mut other = server.connect();
    assert_eq!(c.agent("restart", json!([])), Ok(Value::Null));
    assert_eq!(c.wait_close(), 1012);
    assert_eq!(other.wait_close(), 1012);
    // Connected while the old image stops or the new one starts: served by the new one (a
    // socket the stopping image still accepted is closed 1012 and reconnects, as clients do).
    let mut again = reconnect_after_restart(&server);
    assert!(again.names().contains(&"kept across a restart".to_string()));
    server.wait_log("restarted: serving on the 1 listening socket(s)");
    assert_eq!(server.pid(), pid, "the same process, re-executed");
    assert!(std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .contains("serve"));
    again.join(&id);
    let history = again
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    assert!(history.to_string().contains("before the restart"));
    again.run_turn(&id, "after the restart");
    // A second restart works the same way.
    assert_eq!(again.agent("restart", json!([])), Ok(Value::Null));
    assert_eq!(again.wait_close(), 1012);
    assert!(reconnect_after_restart(&server).names().len() >= 2);
}

/// A client of the restarted server: connects, and connects again when the socket is closed
/// with 1012 before `listConversations` is answered (accepted by the image that was
/// stopping). Bounded: each attempt ends with an answer or a close.
fn reconnect_after_restart(server: &Server) -> Client {
    for _ in 0..10 {
        let mut c = server.connect();
        let call = c.send_invoke(AGENT_SERVER, "listConversations", json!([null]));
        if c.try_wait_answer(AGENT_SERVER, call).is_some() {
            return c;
        }
        assert_eq!(
            c.close_code(),
            Some(1012),
            "only the stopping image may close us"
        );
    }
    panic!("no image of the server answered after 10 connections");
}
