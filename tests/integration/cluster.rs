//! The cluster (`serve --cluster`, docs/cluster.md) against a real `nats-server -js` on
//! loopback and three real Roundtable nodes: one list and one set of names for every node,
//! the 50-way create race across nodes, a conversation shared by clients on different nodes,
//! delete across nodes, and losing and regaining NATS.

use std::sync::{Arc, Barrier};

use serde_json::{json, Value};

use crate::harness::*;
use crate::support::nats::{self, NatsServer};

/// A fresh `nats-server -js`, or `None` (the test returns) where Debian's `nats-server` is not
/// installed and this is not CI: `.ci/run` installs it, and under `CI` a missing server fails
/// the test instead.
fn nats_or_skip() -> Option<NatsServer> {
    if nats::available() {
        return Some(NatsServer::start());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the cluster tests need nats-server: apt install nats-server"
    );
    eprintln!("skipped: nats-server is not installed (apt install nats-server; .ci/run does)");
    None
}

/// The agent's last answer in a turn's calls.
fn answer(calls: &[Call]) -> String {
    Client::texts(calls).pop().expect("an answer")
}

/// A turn's own calls (from `requestQueued` on): what came before differs per client (notices
/// of joins are for the others).
fn turn(calls: &[Call]) -> &[Call] {
    let start = calls
        .iter()
        .position(|(m, _)| m == "requestQueued")
        .expect("requestQueued");
    &calls[start..]
}

/// Three nodes `a`, `b`, `c` of one cluster, each on its own instance directory.
fn three_nodes(nats: &NatsServer) -> Vec<Server> {
    ["a", "b", "c"]
        .iter()
        .map(|node| Server::start(&["--cluster", &nats.url(), "--node-name", node]))
        .collect()
}

/// Names a node lists, sorted.
fn sorted_names(node: &Server) -> Vec<String> {
    let mut names = node.connect().names();
    names.sort();
    names
}

/// The list every node answers is the same (ids, names, order) once the watch has delivered.
fn wait_same_lists(nodes: &[Server]) -> Value {
    let mut agreed = Value::Null;
    eventually("every node to list the same conversations", || {
        let lists: Vec<Value> = nodes
            .iter()
            .map(|n| {
                let list = n
                    .connect()
                    .agent("listConversations", json!([null]))
                    .unwrap();
                let ids: Vec<Value> = list
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| json!([c["conversationId"], c["name"], c["createdAt"]]))
                    .collect();
                Value::from(ids)
            })
            .collect();
        agreed = lists[0].clone();
        lists.iter().all(|l| *l == lists[0])
    });
    agreed
}

/// Every node starts on the cluster's registry (one `default` for all), reports the cluster on
/// `/health` and `/metrics`; a conversation created, renamed and deleted on any node shows the
/// same on every node, names are unique across nodes, and the list order is the same.
#[test]
fn nodes_share_one_list_and_one_set_of_names() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    for (node, name) in nodes.iter().zip(["a", "b", "c"]) {
        let (status, body) = node.http_get("/health");
        assert_eq!(status, 200, "{body}");
        let health: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(health["cluster"]["node"], name);
        assert_eq!(health["cluster"]["nats"], "connected");
        let (_, metrics) = node.http_get("/metrics");
        assert!(
            metrics.contains(&format!(
                "roundtable_cluster_nats_connected{{node=\"{name}\"}} 1"
            )),
            "{metrics}"
        );
    }
    let list = wait_same_lists(&nodes);
    assert_eq!(
        list.as_array().unwrap().len(),
        1,
        "one default for the cluster: {list}"
    );
    assert_eq!(sorted_names(&nodes[2]), ["default"]);

    let mut on_a = nodes[0].connect();
    let mut on_b = nodes[1].connect();
    let id = on_a.create("Planning");
    // The same name on another node, in another case: the protocol's duplicate-name answer.
    assert_eq!(
        on_b.agent("createConversation", json!([" planning ", null]))
            .unwrap_err(),
        "A conversation named \"Planning\" already exists. Pick a different name."
    );
    // appendNumber moves past it, also from another node.
    let numbered = on_b
        .agent(
            "createConversation",
            json!(["planning", {"nameCollisionBehavior": "appendNumber"}]),
        )
        .unwrap();
    assert_eq!(numbered["name"], "planning (1)");
    wait_same_lists(&nodes);
    // A subscriber on c hears of a rename made on b.
    let mut watcher = nodes[2].connect();
    watcher.agent("subscribeConversations", json!([])).unwrap();
    on_b.agent("renameConversation", json!([id, "Roadmap"]))
        .unwrap();
    let change = watcher.expect_call(AGENT_SERVER, "conversationsChanged");
    assert_eq!(change[0]["kind"], "renamed");
    assert_eq!(change[0]["conversation"]["name"], "Roadmap");
    // The old name is free again on every node; the new one is taken on every node.
    let again = nodes[2].connect().create("Planning");
    assert_ne!(again, id);
    assert_eq!(
        nodes[0]
            .connect()
            .agent("createConversation", json!(["roadmap", null]))
            .unwrap_err(),
        "A conversation named \"Roadmap\" already exists. Pick a different name."
    );
    // Delete on c: gone from every list, and its name free.
    nodes[2]
        .connect()
        .agent("deleteConversation", json!([id]))
        .unwrap();
    let list = wait_same_lists(&nodes);
    assert!(!list.to_string().contains(&id), "{list}");
    nodes[1].connect().create("Roadmap");
    wait_same_lists(&nodes);
    assert!(nodes[0].metric("roundtable_cluster_registry_writes_total{node=\"a\"}") >= 1.0);
}

/// Fifty clients spread over three nodes create one name at the same moment: exactly one
/// conversation exists afterwards, and the 49 others got the protocol's duplicate-name error.
#[test]
fn fifty_way_create_race_across_nodes_makes_one_conversation() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    let barrier = Arc::new(Barrier::new(50));
    let results: Vec<Result<Value, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let url = nodes[i % 3].url();
                let barrier = barrier.clone();
                scope.spawn(move || {
                    let mut client = Client::connect(&url);
                    barrier.wait();
                    client.agent("createConversation", json!(["Race", null]))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<&Value> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(won.len(), 1, "exactly one create wins: {results:?}");
    for lost in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(
            lost,
            "A conversation named \"Race\" already exists. Pick a different name."
        );
    }
    let list = wait_same_lists(&nodes);
    let races = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c[1] == "Race")
        .count();
    assert_eq!(races, 1, "{list}");
    assert_eq!(
        list.to_string()
            .matches(won[0]["conversationId"].as_str().unwrap())
            .count(),
        1
    );
}

/// A conversation served by node a, with one client on a and one on b (its frames relayed
/// through NATS): both see every turn of both, in the same order, with the same sequence
/// numbers; the display history is the same from either node; leaving from b works like a
/// local leave; a client on b that rejoins resumes with `afterSeq`.
#[test]
fn clients_on_two_nodes_share_one_conversation() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    let (mut local, id) = nodes[0].joined("shared");
    wait_same_lists(&nodes);
    let mut remote = nodes[1].connect();
    let joined = remote.join(&id);
    assert_eq!(joined["conversationId"], id.as_str());
    assert_eq!(joined["name"], "shared");
    assert_eq!(joined["connectionId"], "1");
    // Joined twice from one socket: the usual error, also for a relayed join.
    assert_eq!(
        remote
            .agent("joinConversation", json!([{"conversationId": id}]))
            .unwrap_err(),
        format!(
            "Already joined conversation '{id}'. Call leaveConversation() before joining again."
        )
    );

    let ack = remote.submit(&id, "what is 2+3");
    let rid = Client::request_id(&ack);
    assert_eq!(ack["entry"]["originatorConnectionId"], "1");
    let seen_remote = remote.until_complete(&id, &rid);
    let seen_local = local.until_complete(&id, &rid);
    assert_eq!(answer(&seen_remote), "5");
    assert_eq!(
        turn(&seen_remote),
        turn(&seen_local),
        "the same calls in the same order"
    );
    let ack = local.submit(&id, "what is 4+5");
    let rid = Client::request_id(&ack);
    let seen_local = local.until_complete(&id, &rid);
    assert_eq!(answer(&seen_local), "9");
    assert_eq!(turn(&remote.until_complete(&id, &rid)), turn(&seen_local));

    let from_a = local
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let from_b = remote
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    assert_eq!(from_a, from_b);
    let entries = from_b.as_array().expect("entries");
    let last_seq = entries.last().unwrap()["seq"].as_u64().unwrap();

    // A third client, on c, sees the conversation's live output too.
    let mut third = nodes[2].connect();
    third.join(&id);
    let ack = third.submit(&id, "what is 1+1");
    let rid = Client::request_id(&ack);
    for client in [&mut local, &mut remote, &mut third] {
        assert_eq!(answer(&client.until_complete(&id, &rid)), "2");
    }

    // Leave from b, then join again: history after the last seq b saw holds the new turn.
    remote.agent("leaveConversation", json!([id])).unwrap();
    assert_eq!(
        remote.agent("leaveConversation", json!([id])).unwrap_err(),
        format!("Not joined to conversation: {id}")
    );
    remote.join(&id);
    let after = remote
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([last_seq]))
        .unwrap();
    let after = after.as_array().unwrap();
    assert_eq!(after[0]["seq"], last_seq + 1);
    assert_eq!(after[0]["command"], "what is 1+1");
    assert!(nodes[0].metric("roundtable_cluster_relayed_frames_total{node=\"a\"}") > 0.0);
    // a's virtual connections serve b's and c's clients; they are not a's sockets.
    eventually("a to count only its own socket", || {
        nodes[0].metric("roundtable_sockets") == 1.0
    });
    // Every node lists the same counts: the owner's clients (relayed ones included) and its
    // message count, shared with the others.
    for node in &nodes {
        eventually("every node to list the owner's counts", || {
            let list = node
                .connect()
                .agent("listConversations", json!([null]))
                .unwrap();
            let shared = list
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["conversationId"] == id.as_str())
                .unwrap()
                .clone();
            shared["clientCount"] == 3 && shared["messageCount"] == 3
        });
    }
}

/// Deleting on node c a conversation served by a, with clients on a and b: both clients get
/// the deletion notice and their channels close, and no node lists it.
#[test]
fn delete_on_one_node_reaches_clients_on_others() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    let (mut on_a, id) = nodes[0].joined("doomed");
    wait_same_lists(&nodes);
    let mut on_b = nodes[1].connect();
    on_b.join(&id);
    nodes[2]
        .connect()
        .agent("deleteConversation", json!([id]))
        .unwrap();
    for client in [&mut on_a, &mut on_b] {
        while client.expect_call(&clientio(&id), "appendDisplay")[0]["message"]["content"]
            != "[This conversation was deleted.]"
        {}
        loop {
            let n = client.expect_call(&clientio(&id), "notify");
            if n[1] == "conversationDeleted" {
                assert_eq!(n[2]["conversationId"], id.as_str());
                break;
            }
        }
    }
    let list = wait_same_lists(&nodes);
    assert!(!list.to_string().contains(&id));
    for client in [&mut on_a, &mut on_b] {
        eventually("channels closed", || {
            client.agent("leaveConversation", json!([id])).err()
                == Some(format!("Not joined to conversation: {id}"))
        });
        assert_eq!(
            client
                .agent("joinConversation", json!([{"conversationId": id}]))
                .unwrap_err(),
            format!("Conversation not found: {id}")
        );
    }
}

/// NATS goes away: `/health` turns 503 naming it and changes answer `Cluster unavailable`
/// (nothing changes on one node only); lists still answer from the node's copy. NATS comes
/// back (same store): health recovers, changes work again and reach the other nodes.
#[test]
fn losing_nats_fails_writes_clearly_and_recovers() {
    let Some(mut nats) = nats_or_skip() else {
        return;
    };
    let nodes: Vec<Server> = three_nodes(&nats).into_iter().take(2).collect();
    let mut on_a = nodes[0].connect();
    let before = on_a.create("before");
    on_a.join(&before);
    assert_eq!(answer(&on_a.run_turn(&before, "what is 3+4")), "7");
    wait_same_lists(&nodes);

    nats.stop();
    eventually("health to report NATS lost", || {
        nodes[0].http_get("/health").0 == 503
    });
    let (_, body) = nodes[0].http_get("/health");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["cluster"]["nats"], "disconnected", "{body}");
    assert!(
        health["problems"][0].as_str().unwrap().contains("NATS"),
        "{body}"
    );
    let refused = on_a
        .agent("createConversation", json!(["during", null]))
        .unwrap_err();
    assert!(refused.starts_with("Cluster unavailable: "), "{refused}");
    // A turn cannot be acknowledged either: its write cannot reach the stream (or the node
    // gives the conversation up when its lease cannot be renewed, whichever comes first).
    match on_a.invoke(
        &dispatcher(&before),
        "submitCommand",
        json!(["what is 1+6", null, null, "during-outage", null]),
    ) {
        Ok(answer) => {
            assert_eq!(answer["ok"], false, "{answer}");
            assert_eq!(answer["error"], "storage_error", "{answer}");
        }
        Err(error) => assert!(
            error.starts_with("Conversation not found") || error.starts_with("Cluster unavailable"),
            "{error}"
        ),
    }
    assert!(on_a.names().contains(&"before".to_string()));
    assert!(!on_a.names().contains(&"during".to_string()));

    nats.restart();
    for node in &nodes {
        eventually("health to recover", || node.http_get("/health").0 == 200);
    }
    on_a.create("after");
    eventually("the other node to hear of it", || {
        nodes[1].connect().names().contains(&"after".to_string())
    });
    // The conversation used before the outage works again, with its history, from either
    // node (its lease may have lapsed meanwhile: the next join takes it over).
    let mut again = nodes[1].connect();
    eventually("the conversation to be joinable again", || {
        again
            .agent("joinConversation", json!([{"conversationId": before}]))
            .is_ok()
    });
    assert_eq!(answer(&again.run_turn(&before, "what is 5+6")), "11");
    let entries = history(&mut again, &before);
    assert!(
        entries.iter().any(|e| e["command"] == "what is 3+4"),
        "{entries:?}"
    );
    assert!(nodes[0].metric("roundtable_cluster_disconnects_total{node=\"a\"}") >= 1.0);
}

/// `getDisplayHistory` of `id` through `client`.
fn history(client: &mut Client, id: &str) -> Vec<Value> {
    client
        .invoke(&dispatcher(id), "getDisplayHistory", json!([]))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

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
    assert_eq!(status["agents"][0]["name"], "androidDevice", "{status}");
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

/// Fencing: once another writer has appended to a conversation's subject in the log stream
/// (what a second owner would do after this node lost the lease without noticing), this
/// node's next write is refused by JetStream and the submit is answered with a storage error
/// instead of an acknowledgement: two owners never interleave silently. The node then gives
/// the conversation up, and the next join rebuilds it from the stream.
#[test]
fn a_write_after_another_owner_wrote_is_refused() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let a = Server::start(&["--cluster", &nats.url(), "--node-name", "a"]);
    let (mut client, id) = a.joined("fenced");
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
    let refused = client
        .invoke(
            &dispatcher(&id),
            "submitCommand",
            json!(["what is 2+2", null, null, "fenced-1", null]),
        )
        .unwrap();
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"], "storage_error", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.starts_with("cluster log stream: ") && message.contains("wrong last sequence"),
        "{refused}"
    );
    // a gives the conversation up at once (its files differ from the stream now): the
    // client's channels close, the lease is free, and the next join rebuilds it from the
    // stream, the other writer's record included, and goes on.
    eventually("a to give the conversation up", || {
        a.metric("roundtable_cluster_owned_conversations{node=\"a\"}") == 0.0
    });
    eventually("the client's channels to close", || {
        client.agent("leaveConversation", json!([id])).err()
            == Some(format!("Not joined to conversation: {id}"))
    });
    client.join(&id);
    assert!(a
        .dir
        .join("conversations")
        .join(&id)
        .join("interloper.txt")
        .exists());
    assert_eq!(answer(&client.run_turn(&id, "what is 2+2")), "4");
    let entries = history(&mut client, &id);
    assert!(
        entries.iter().any(|e| e["command"] == "what is 1+1"),
        "{entries:?}"
    );
}

/// A question a turn asks reaches a client on another node, which answers it; a client that
/// joins through a third node while the turn waits gets the pending interaction and the busy
/// queue in its join answer, as on one node.
#[test]
fn an_interaction_is_answered_from_another_node() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let nodes = three_nodes(&nats);
    let (mut asker, id) = nodes[0].joined("asking");
    wait_same_lists(&nodes);
    let mut answerer = nodes[1].connect();
    answerer.join(&id);
    let ack = asker.submit(&id, "ask me Shall we proceed?");
    let asking = Client::request_id(&ack);
    let q = answerer.expect_call(&clientio(&id), "requestInteraction");
    let interaction = q[0]["interactionId"].as_str().unwrap().to_string();
    assert_eq!(q[0]["message"], "Shall we proceed?");
    let joined = nodes[2].connect().join(&id);
    assert_eq!(
        joined["pendingInteractions"][0]["interactionId"],
        interaction.as_str()
    );
    assert_eq!(
        joined["queueSnapshot"]["running"]["requestId"],
        asking.as_str()
    );
    answerer
        .invoke(
            &dispatcher(&id),
            "respondToInteraction",
            json!([{"interactionId": interaction, "type": "question", "value": 0}]),
        )
        .unwrap();
    let calls = asker.until_complete(&id, &asking);
    assert!(
        Client::texts(&calls).contains(&"You answered Yes.".to_string()),
        "{calls:?}"
    );
    let seen = answerer.until_complete(&id, &asking);
    assert!(seen.iter().any(|(m, args)| m == "interactionResolved"
        && args[0] == interaction.as_str()
        && args[1] == 0));
}

/// A client-hosted agent registered from another node: the registration goes to the owner,
/// the model's call reaches the phone on its `agent:<name>` channel through the relay, and the
/// phone's answer comes back as the tool result.
#[test]
fn a_client_agent_on_another_node_runs_the_models_action() {
    use crate::client_agents::{alarm_model, registration, tool_results, PHONE};
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let model = alarm_model();
    let a = Server::with_model(
        &model,
        "test-model",
        &["--cluster", &nats.url(), "--node-name", "a"],
    );
    let b = Server::start(&["--cluster", &nats.url(), "--node-name", "b"]);
    let (mut cli, id) = a.joined("phone chat");
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"phone chat".to_string())
    });
    let mut phone = b.connect();
    phone.join(&id);
    assert_eq!(
        phone.agent(
            "registerClientAgent",
            registration("androidDevice", Some(&id))
        ),
        Ok(Value::Null)
    );
    // The name is taken on this socket, whichever node hosts it.
    assert_eq!(
        phone
            .agent(
                "registerClientAgent",
                registration("androidDevice", Some(&id))
            )
            .unwrap_err(),
        format!("Client agent 'androidDevice' is already registered on conversation '{id}'")
    );
    let rid = Client::request_id(&cli.submit(&id, "wake me at 7"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(args[0]["action"]["actionName"], "setAlarm");
    phone.send_result(
        PHONE,
        call_id,
        json!({"historyText": "Alarm set for 07:00.", "displayContent": "Alarm set for 07:00.",
            "entities": []}),
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [("Alarm set for 07:00.".to_string(), false)]
    );
    assert!(Client::texts(&calls).contains(&"Done: Alarm set for 07:00.".to_string()));
    assert_eq!(
        phone.agent("unregisterClientAgent", json!([{"name": "androidDevice"}])),
        Ok(Value::Null)
    );
}

/// Content search from any node finds what any node wrote: each node answers from its own
/// index and the asking node merges the hits, best first.
#[test]
fn content_search_from_any_node_finds_every_conversation() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let nodes = three_nodes(&nats);
    let (mut on_a, reptiles) = nodes[0].joined("Reptiles");
    on_a.run_turn(&reptiles, "tell me about the platypus");
    let (mut on_b, birds) = nodes[1].joined("Birds");
    on_b.run_turn(&birds, "tell me about the kingfisher");
    let found = |node: &Server, word: &str| -> Vec<String> {
        let hits = node
            .connect()
            .agent("searchConversationContent", json!([word, null]))
            .unwrap();
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["conversation"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    // c never owned either conversation; a and b each own one.
    eventually("c to find a's conversation", || {
        found(&nodes[2], "platypus") == ["Reptiles"]
    });
    eventually("c to find b's conversation", || {
        found(&nodes[2], "kingfisher") == ["Birds"]
    });
    eventually("a to find b's conversation", || {
        found(&nodes[0], "kingfisher") == ["Birds"]
    });
    assert_eq!(found(&nodes[1], "platypus"), ["Reptiles"]);
    assert!(found(&nodes[1], "aardvark").is_empty());
    eventually("every node to count three nodes", || {
        nodes.iter().all(|n| {
            n.metric(&format!(
                "roundtable_cluster_nodes{{node=\"{}\"}}",
                ["a", "b", "c"][nodes.iter().position(|m| m.port == n.port).unwrap()]
            )) == 3.0
        })
    });
}

/// `roundtable backup` from a node that never owned a conversation still holds all of them:
/// the node rebuilds every conversation from the log stream into its snapshot. The archive
/// restores into a single server that has every conversation with its history.
#[test]
fn a_backup_from_any_node_holds_the_whole_cluster() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let a = Server::start(&["--cluster", &nats.url(), "--node-name", "a"]);
    let b = Server::start(&["--cluster", &nats.url(), "--node-name", "b"]);
    let (mut on_a, alpha) = a.joined("alpha");
    assert_eq!(answer(&on_a.run_turn(&alpha, "what is 2+5")), "7");
    let (mut on_b, beta) = b.joined("beta");
    assert_eq!(answer(&on_b.run_turn(&beta, "what is 3+5")), "8");
    eventually("b to know alpha", || {
        b.connect().names().contains(&"alpha".to_string())
    });
    let archive_dir = tempfile::tempdir().unwrap();
    let archive = archive_dir.path().join("cluster.tar");
    crate::backup::backup(b.port, &archive);
    let restored = tempfile::tempdir().unwrap();
    let instance = restored.path().join("instance");
    let out = crate::backup::restore(&archive, &instance, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let single = Server::start_in(&instance, &[]);
    let mut c = single.connect();
    for (id, command) in [(&alpha, "what is 2+5"), (&beta, "what is 3+5")] {
        c.join(id);
        let entries = history(&mut c, id);
        assert!(
            entries.iter().any(|e| e["command"] == command),
            "{entries:?}"
        );
    }
}

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
