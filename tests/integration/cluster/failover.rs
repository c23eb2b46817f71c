//! Conversations moving between nodes: eviction and reload elsewhere, `kill -9` of the owner
//! with 0 acknowledged turns lost, fencing of a deposed owner's writes, joins during a
//! failover, and the reload shortcut of the node that wrote last.

use super::*;

/// Conversation files live in the cluster's log stream: a conversation used and evicted on
/// node a is taken over by node b on its next join there, with the same history (b never had
/// its files); the ownership gauge follows the lease.
#[test]
fn an_evicted_conversation_moves_to_another_node_with_its_history() {
    let Some(nats) = nats_or_skip() else { return };
    let flags = |node| {
        vec![
            "--cluster".to_string(),
            nats.url(),
            "--node-name".into(),
            node,
            "--idle-timeout".into(),
            "0.2".into(),
        ]
    };
    let start = |node: &str| {
        let args = flags(node.to_string());
        Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let a = start("a");
    let b = start("b");
    let (mut on_a, id) = a.joined("moving");
    assert_eq!(answer(&on_a.run_turn(&id, "what is 6*7")), "42");
    on_a.run_turn(&id, "remember the zebrafish");
    let before = history(&mut on_a, &id);
    assert_eq!(
        a.metric("roundtable_cluster_owned_conversations{node=\"a\"}"),
        1.0
    );
    on_a.agent("leaveConversation", json!([id])).unwrap();
    eventually("a to evict it and give its lease back", || {
        a.metric("roundtable_cluster_owned_conversations{node=\"a\"}") == 0.0
    });
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"moving".to_string())
    });
    let mut on_b = b.connect();
    on_b.join(&id);
    assert_eq!(
        b.metric("roundtable_cluster_owned_conversations{node=\"b\"}"),
        1.0
    );
    assert!(!b
        .dir
        .join("conversations")
        .join(&id)
        .join("missing")
        .exists());
    assert_eq!(
        history(&mut on_b, &id),
        before,
        "the same history on the new owner"
    );
    // The conversation goes on from there, and a joins through b now.
    assert_eq!(answer(&on_b.run_turn(&id, "what is 1+2")), "3");
    on_a.join(&id);
    let seen = history(&mut on_a, &id);
    assert!(
        seen.len() > before.len() && seen[..before.len()] == before[..],
        "{seen:?}"
    );
    assert_eq!(
        a.metric("roundtable_cluster_owned_conversations{node=\"a\"}"),
        0.0
    );
    // b's content index took in what a wrote before the move.
    eventually("b's search to find a's turn", || {
        let found = on_b
            .agent("searchConversationContent", json!(["zebrafish", null]))
            .unwrap();
        found.to_string().contains(&id)
    });
}

/// `kill -9` of the node that owns a conversation: within a few lease times another node owns
/// it, the client on a surviving node keeps its socket and its join (rejoined for it) and every
/// turn acknowledged before the kill is in the history; a client of the dead node reconnects
/// to another node and resumes with `afterSeq`. An invoke the surviving client sent into the
/// dead relay is answered `Cluster unavailable`.
#[test]
fn kill_9_of_the_owner_loses_no_acknowledged_turn() {
    let Some(nats) = nats_or_skip() else { return };
    let url = nats.url();
    let start =
        |node: &str| Server::start(&["--cluster", &url, "--node-name", node, "--lease-time", "2"]);
    let a = start("a");
    let b = start("b");
    let c = start("c");
    let (mut on_a, id) = a.joined("critical");
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"critical".to_string())
    });
    let mut on_b = b.connect();
    on_b.join(&id);
    // A client agent registered through the relay (hosted by b's socket, registered on a).
    assert_eq!(
        on_b.agent(
            "registerClientAgent",
            crate::client_agents::registration("androidDevice", Some(&id))
        ),
        Ok(Value::Null)
    );
    for i in 0..3 {
        let client = if i == 1 { &mut on_a } else { &mut on_b };
        let text = format!("what is {i}+10");
        assert_eq!(answer(&client.run_turn(&id, &text)), (i + 10).to_string());
    }
    let acknowledged = history(&mut on_b, &id);
    let last_seen_on_a = acknowledged.last().unwrap()["seq"].as_u64().unwrap();

    let killed = std::time::Instant::now();
    a.kill();
    // An invoke relayed to the dead owner is answered when the relay gives up, not never.
    let stranded = on_b.send_invoke(&dispatcher(&id), "getDisplayHistory", json!([]));
    let error = on_b.wait_answer(&dispatcher(&id), stranded).unwrap_err();
    assert!(
        error.starts_with("Cluster unavailable: the node serving conversation"),
        "{error}"
    );
    b.wait_log(&format!("rejoined conversation {id} on this node"));
    eprintln!(
        "failover: b owns the conversation {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(
        b.metric("roundtable_cluster_owned_conversations{node=\"b\"}"),
        1.0
    );
    let after = history(&mut on_b, &id);
    assert!(
        after.len() >= acknowledged.len() && after[..acknowledged.len()] == acknowledged[..],
        "every acknowledged entry survives: before {acknowledged:?}, after {after:?}"
    );
    // The surviving client goes on without joining again, its client agent registered again
    // with the new owner on its behalf.
    assert_eq!(answer(&on_b.run_turn(&id, "what is 2+2")), "4");
    let status = on_b
        .invoke(&dispatcher(&id), "getStatus", json!([]))
        .unwrap();
    assert!(
        status["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "androidDevice"),
        "{status}"
    );
    // The dead node's client reconnects elsewhere and reads what it missed.
    let mut back = c.connect();
    back.join(&id);
    let missed = back
        .invoke(
            &dispatcher(&id),
            "getDisplayHistory",
            json!([last_seen_on_a]),
        )
        .unwrap();
    let missed = missed.as_array().unwrap();
    assert_eq!(missed[0]["seq"], last_seen_on_a + 1);
    assert!(
        missed.iter().any(|e| e["command"] == "what is 2+2"),
        "{missed:?}"
    );
}

/// `kill -9` of the owner while clients on two other nodes are joined to its conversation
/// through relays: one of those nodes takes the conversation over, and the other's client
/// follows it there through a new relay, without joining again. Before, the join that relay
/// sent on the client's behalf carried a callId above `Number.MAX_SAFE_INTEGER`, which the
/// new owner dropped as malformed: the client sat joined to nothing.
#[test]
fn relayed_clients_on_two_nodes_follow_the_conversation_when_its_owner_dies() {
    let Some(nats) = nats_or_skip() else { return };
    let url = nats.url();
    let start =
        |node: &str| Server::start(&["--cluster", &url, "--node-name", node, "--lease-time", "2"]);
    let a = start("a");
    let b = start("b");
    let c = start("c");
    let (mut on_a, id) = a.joined("followed");
    assert_eq!(answer(&on_a.run_turn(&id, "what is 1+1")), "2");
    let mut relayed = Vec::new();
    for node in [&b, &c] {
        eventually("the node to know the conversation", || {
            node.connect().names().contains(&"followed".to_string())
        });
        let mut client = node.connect();
        client.join(&id);
        relayed.push(client);
    }
    a.kill();
    let owned = |node: &Server, name: &str| {
        node.metric(&format!(
            "roundtable_cluster_owned_conversations{{node=\"{name}\"}}"
        ))
    };
    eventually("b or c to own the conversation", || {
        owned(&b, "b") + owned(&c, "c") == 1.0
    });
    let (on_c, on_b) = (relayed.pop().unwrap(), relayed.pop().unwrap());
    let (owner, mut on_owner, follower, mut on_follower) = if owned(&b, "b") == 1.0 {
        ("b", on_b, &c, on_c)
    } else {
        ("c", on_c, &b, on_b)
    };
    follower.wait_log(&format!(
        "joined conversation {id} again through node {owner}"
    ));
    // The follower goes on without joining again, and the owner's client sees its turn.
    assert_eq!(answer(&on_follower.run_turn(&id, "what is 2+3")), "5");
    assert!(
        history(&mut on_owner, &id)
            .iter()
            .any(|e| e["command"] == "what is 2+3"),
        "the follower's turn is in the owner's history"
    );
    assert_eq!(answer(&on_owner.run_turn(&id, "what is 4+4")), "8");
    assert!(history(&mut on_follower, &id)
        .iter()
        .any(|e| e["command"] == "what is 4+4"));
}

/// Fencing: once another writer has appended to a conversation's subject in the log stream
/// (what a second owner would do after this node lost the lease without noticing), this
/// node's next write is refused by JetStream and the submit is answered with a storage error
/// instead of an acknowledgement: two owners never interleave silently. The node then gives
/// the conversation up, and its client follows it without a word: the connection joins it
/// again on the client's behalf (here on the same node, which rebuilds it from the stream)
/// and registers its client agent there again. The client goes on without joining again and
/// never sees the moved notice.
#[test]
fn a_write_after_another_owner_wrote_is_refused_and_the_client_follows() {
    use crate::client_agents::registration;
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let a = Server::start(&["--cluster", &nats.url(), "--node-name", "a"]);
    let (mut client, id) = a.joined("fenced");
    assert_eq!(
        client.agent(
            "registerClientAgent",
            registration("androidDevice", Some(&id))
        ),
        Ok(Value::Null)
    );
    assert_eq!(answer(&client.run_turn(&id, "what is 1+1")), "2");
    // Another writer appends to the conversation's subject behind a's back.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let nats = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(nats);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Rt-File", "interloper.txt");
        headers.insert("Rt-Op", "append");
        js.publish_with_headers(format!("rt.log.{id}"), headers, "hello\n".into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let refused = client.expect_none_before("the moved notice", is_moved_notice, |client| {
        let refused = client
            .invoke(
                &dispatcher(&id),
                "submitCommand",
                json!(["what is 2+2", null, null, "fenced-1", null]),
            )
            .unwrap();
        // a gives the conversation up at once (its files differ from the stream now); the
        // connection joins it again (the lease is free) and registers the agent again.
        a.wait_log(&format!(
            "conversation {id} moved off this node; joining it again"
        ));
        a.wait_log(&format!("rejoined conversation {id} on this node"));
        // The client goes on without joining again: its turn runs on the rebuilt
        // conversation, the other writer's record included. A moved notice, had one been
        // sent, would have been queued before this turn's frames.
        assert_eq!(answer(&client.run_turn(&id, "what is 2+2")), "4");
        refused
    });
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"], "storage_error", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.starts_with("cluster log stream: ") && message.contains("wrong last sequence"),
        "{refused}"
    );
    assert!(a
        .dir
        .join("conversations")
        .join(&id)
        .join("interloper.txt")
        .exists());
    let entries = history(&mut client, &id);
    assert!(
        entries.iter().any(|e| e["command"] == "what is 1+1"),
        "{entries:?}"
    );
    // The client agent was registered again in the rebuilt conversation.
    assert_eq!(
        client
            .agent(
                "registerClientAgent",
                registration("androidDevice", Some(&id))
            )
            .unwrap_err(),
        format!("Client agent 'androidDevice' is already registered on conversation '{id}'")
    );
}

/// An owner stopped (`SIGSTOP`) past its lease loses its conversation to the node whose
/// relayed client took it over; once it runs again it finds its lease gone, and its own
/// client follows the conversation to the new owner through a relay, without joining again
/// and without a notice.
#[test]
fn the_clients_of_an_owner_that_lost_its_lease_follow_the_conversation() {
    let Some(nats) = nats_or_skip() else { return };
    let url = nats.url();
    let start =
        |node: &str| Server::start(&["--cluster", &url, "--node-name", node, "--lease-time", "1"]);
    let a = start("a");
    let b = start("b");
    let (mut on_a, id) = a.joined("paused");
    assert_eq!(answer(&on_a.run_turn(&id, "what is 1+2")), "3");
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"paused".to_string())
    });
    let mut on_b = b.connect();
    on_b.join(&id);
    // SAFETY: signals a child process this test started and still owns.
    assert_eq!(unsafe { libc::kill(a.pid() as i32, libc::SIGSTOP) }, 0);
    // b's relay hears nothing from a: its client joins again, and b takes the conversation
    // over once a's lease has lapsed.
    b.wait_log(&format!("rejoined conversation {id} on this node"));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(a.pid() as i32, libc::SIGCONT) }, 0);
    on_a.expect_none_before("the moved notice", is_moved_notice, |on_a| {
        a.wait_log(&format!(
            "conversation {id} moved off this node; joining it again"
        ));
        a.wait_log(&format!("joined conversation {id} again through node b"));
        assert_eq!(answer(&on_a.run_turn(&id, "what is 2+2")), "4");
    });
    assert!(
        history(&mut on_b, &id)
            .iter()
            .any(|e| e["command"] == "what is 2+2"),
        "a's client's turn ran on b"
    );
    assert_eq!(
        b.metric("roundtable_cluster_owned_conversations{node=\"b\"}"),
        1.0
    );
}

/// When the client cannot follow its conversation (the node lost it because NATS went away,
/// and no node can take it over before the rejoin gives up), it is told as a delete tells it:
/// the moved notice, and its channels are closed. Once NATS is back, joining again works.
#[test]
fn a_client_that_cannot_follow_a_lost_conversation_is_told() {
    let Some(mut nats) = nats_or_skip() else {
        return;
    };
    let a = Server::start(&[
        "--cluster",
        &nats.url(),
        "--node-name",
        "a",
        "--lease-time",
        "1",
    ]);
    let (mut client, id) = a.joined("stranded");
    assert_eq!(answer(&client.run_turn(&id, "what is 3+3")), "6");
    nats.stop();
    // The lease cannot be renewed, the node gives the conversation up, the rejoin fails for
    // three lease times, then the notice comes.
    loop {
        let shown = client.expect_call(&clientio(&id), "appendDisplay");
        if shown[0]["message"]["content"] == MOVED_NOTICE {
            break;
        }
    }
    assert!(a.log().contains(&format!(
        "conversation {id} moved off this node; joining it again"
    )));
    a.wait_log(&format!("conversation {id} not rejoined: "));
    assert_eq!(
        client.agent("leaveConversation", json!([id])).unwrap_err(),
        format!("Not joined to conversation: {id}")
    );
    nats.restart();
    eventually("the conversation to be joinable again", || {
        client
            .agent("joinConversation", json!([{"conversationId": id}]))
            .is_ok()
    });
    assert_eq!(answer(&client.run_turn(&id, "what is 4+3")), "7");
}

/// Whether `frame` is the notice a client gets when it could not follow its conversation.
fn is_moved_notice(frame: &Value) -> bool {
    frame["message"]["name"] == "appendDisplay"
        && frame["message"]["args"][0]["message"]["content"] == MOVED_NOTICE
}

/// What that notice says.
const MOVED_NOTICE: &str =
    "[This conversation moved to another server node. Join it again to continue.]";

/// A client that joins while the conversation's owner is dead and its lease has not lapsed
/// yet is not refused: its join waits for a new owner (here its own node) and succeeds.
#[test]
fn a_join_during_failover_waits_for_the_new_owner() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let url = nats.url();
    let a = Server::start(&["--cluster", &url, "--node-name", "a", "--lease-time", "2"]);
    let b = Server::start(&["--cluster", &url, "--node-name", "b", "--lease-time", "2"]);
    let (mut on_a, id) = a.joined("orphaned");
    assert_eq!(answer(&on_a.run_turn(&id, "what is 5+5")), "10");
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"orphaned".to_string())
    });
    a.kill();
    let mut late = b.connect();
    let joined = late.join(&id);
    assert_eq!(joined["conversationId"], id.as_str());
    let entries = history(&mut late, &id);
    assert!(
        entries.iter().any(|e| e["command"] == "what is 5+5"),
        "{entries:?}"
    );
    assert_eq!(answer(&late.run_turn(&id, "what is 6+6")), "12");
}

/// A conversation evicted and joined again on the node that wrote it last is not rebuilt from
/// the stream (its files are current, checked against the stream's last sequence); after
/// another node wrote to it, it is.
#[test]
fn a_reload_on_the_same_node_skips_the_restore_unless_another_node_wrote() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let url = nats.url();
    let flags = |node: &'static str| {
        vec![
            "--cluster".to_string(),
            url.clone(),
            "--node-name".into(),
            node.into(),
            "--idle-timeout".into(),
            "0.2".into(),
        ]
    };
    let start = |node: &'static str| {
        let args = flags(node);
        Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let a = start("a");
    let b = start("b");
    let (mut on_a, id) = a.joined("local");
    assert_eq!(answer(&on_a.run_turn(&id, "what is 2+9")), "11");
    let before = history(&mut on_a, &id);
    let evicted = |node: &Server, name: &str| {
        eventually("the conversation to be evicted", || {
            node.metric(&format!(
                "roundtable_cluster_owned_conversations{{node=\"{name}\"}}"
            )) == 0.0
        })
    };
    on_a.agent("leaveConversation", json!([id])).unwrap();
    evicted(&a, "a");
    on_a.join(&id);
    a.wait_log(&format!(
        "conversation {id}: owned by this node; its files are current"
    ));
    assert_eq!(history(&mut on_a, &id), before);
    // b writes a turn; back on a, the files are rebuilt with it.
    on_a.agent("leaveConversation", json!([id])).unwrap();
    evicted(&a, "a");
    let mut on_b = b.connect();
    on_b.join(&id);
    assert_eq!(answer(&on_b.run_turn(&id, "what is 3+9")), "12");
    on_b.agent("leaveConversation", json!([id])).unwrap();
    evicted(&b, "b");
    on_a.join(&id);
    let after = history(&mut on_a, &id);
    assert!(
        after.iter().any(|e| e["command"] == "what is 3+9"),
        "{after:?}"
    );
    assert_eq!(
        a.log()
            .matches(&format!(
                "conversation {id}: owned by this node; its files are current"
            ))
            .count(),
        1,
        "the second reload on a restored"
    );
}
