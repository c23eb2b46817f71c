//! The cluster (`serve --cluster`, docs/cluster.md) against a real `nats-server -js` on
//! loopback and three real Roundtable nodes: one list and one set of names for every node,
//! the 50-way create race across nodes, a conversation shared by clients on different nodes
//! (turns, interactions, client agents), delete across nodes, losing and regaining NATS,
//! search and backup from any node. `failover.rs`: conversations moving between nodes;
//! `relay_links.rs`: relayed clients of one node share one link; `fencing.rs`: the log stream's
//! fence across one node's ownership epochs of a conversation; `attack.rs`: NATS access alone
//! reaches no conversation (the cluster secret's seals); `power_loss.rs`: a power cut that
//! costs JetStream acknowledged writes costs the cluster none.

mod attack;
mod auth;
mod failover;
mod fencing;
mod isolation;
mod nemesis;
mod power_loss;
mod reconcile;
mod relay_links;
mod replicas;

use std::sync::{Arc, Barrier};

use serde_json::{json, Value};

use crate::harness::*;
use crate::support::nats::{self, NatsServer};

/// A fresh `nats-server -js`, or `None` (the test returns, [`skip`]ped) where Debian's
/// `nats-server` is not installed: `.ci/run` installs it, and under `CI` a missing server
/// fails the test instead.
fn nats_or_skip() -> Option<NatsServer> {
    if nats::available() {
        return Some(NatsServer::start());
    }
    skip("nats-server is not installed (apt install nats-server; .ci/run does)");
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
        assert_eq!(health["cluster"]["cluster"], "rt");
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

/// Read-your-writes across nodes, at full speed: 100 rounds over three nodes of "create on
/// one node, join it by id on the next", "rename on one, list by the new name on the third",
/// and "delete on one, join on the next" — each the very next request, with no wait between.
/// (Before, a node answered from its copy of the registry whatever its watch had delivered
/// so far: `Conversation not found` for a conversation another node had just created, a list
/// without a rename, a join of a conversation deleted elsewhere.)
#[test]
fn every_node_reads_what_any_node_acknowledged() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    let mut clients: Vec<Client> = nodes.iter().map(|n| n.connect()).collect();
    for round in 0..100 {
        let (i, j, k) = (round % 3, (round + 1) % 3, (round + 2) % 3);
        let name = format!("ryw-{round:03}");
        let info = clients[i]
            .agent("createConversation", json!([name, null]))
            .unwrap();
        let id = info["conversationId"].as_str().unwrap().to_string();
        let joined = clients[j]
            .agent("joinConversation", json!([{"conversationId": id}]))
            .unwrap_or_else(|e| panic!("round {round}: join on node {j} after create on {i}: {e}"));
        assert_eq!(joined["conversationId"], id.as_str());
        clients[j].agent("leaveConversation", json!([id])).unwrap();
        let renamed = format!("ryw-renamed-{round:03}");
        clients[i]
            .agent("renameConversation", json!([id, renamed]))
            .unwrap();
        let listed = clients[k]
            .agent("listConversations", json!([renamed]))
            .unwrap();
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["conversationId"] == id.as_str() && c["name"] == renamed.as_str()),
            "round {round}: node {k} lists {listed} after a rename on node {i}"
        );
        clients[k].agent("deleteConversation", json!([id])).unwrap();
        assert_eq!(
            clients[i].agent("joinConversation", json!([{"conversationId": id}])),
            Err(format!("Conversation not found: {id}")),
            "round {round}: join on node {i} after a delete on node {k}"
        );
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
    // Positive signals that the channels are gone: a's connection drops them when the
    // conversation stops; b's relay ends (and any rejoin it tries finds nothing). From then on
    // the first leave on each socket is refused.
    nodes[0].wait_log(&format!(
        "conversation {id} is gone; its channels are closed"
    ));
    nodes[1].wait_log(&format!("conversation {id} ended"));
    for client in [&mut on_a, &mut on_b] {
        assert_eq!(
            client.agent("leaveConversation", json!([id])),
            Err(format!("Not joined to conversation: {id}"))
        );
        assert_eq!(
            client
                .agent("joinConversation", json!([{"conversationId": id}]))
                .unwrap_err(),
            format!("Conversation not found: {id}")
        );
    }
}

/// A clean stop of a node whose sockets are relayed to another (their NATS subscriptions
/// alive), then of the node serving them: both exit 0 and neither panics on the way out (the
/// tasks still holding subscriptions are dropped after the runtime stops: they used to panic,
/// and the abort-on-panic policy turned every clean stop into an abort).
#[test]
fn nodes_stop_cleanly_with_relays_alive() {
    let Some(nats) = nats_or_skip() else { return };
    let mut nodes = three_nodes(&nats);
    let (mut on_a, id) = nodes[0].joined("stopping");
    wait_same_lists(&nodes);
    let mut on_b = nodes[1].connect();
    on_b.join(&id);
    let ack = on_b.submit(&id, "what is 2+3");
    let rid = Client::request_id(&ack);
    assert_eq!(answer(&on_b.until_complete(&id, &rid)), "5");
    on_a.until_complete(&id, &rid);
    // b (the relayed side) first, then a (the serving side), then c.
    for node in [1, 0, 2] {
        let status = nodes[node].stop();
        let log = nodes[node].log();
        assert!(status.success(), "exit {status:?}; log:\n{log}");
        assert!(!log.contains("panicked"), "a panic on the way out:\n{log}");
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
        // Back from a fault, a node asks the store's leader about every conversation it has,
        // not only those its next snapshot shows otherwise (`registry/reconcile.rs`).
        node.wait_log("registry check after a fault: asking the store's leader about all");
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
