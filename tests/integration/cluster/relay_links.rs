//! Relays per node and conversation: the clients on one node of a conversation another node
//! serves share one link, so a turn's fan-out crosses to that node once, not once per client.

use super::*;

/// Node a serves a conversation, five clients join it through node b: one turn reaches all
/// five with exactly the calls, in the order, a client on a sees, while a sends each call's
/// bytes toward b once (`relayed_copies`), not five times (`relayed_frames` counts the five
/// deliveries).
#[test]
fn a_turn_crosses_once_per_node_for_all_its_clients() {
    let Some(nats) = nats_or_skip() else { return };
    let nodes = three_nodes(&nats);
    let (mut local, id) = nodes[0].joined("links");
    wait_same_lists(&nodes);
    let mut relayed: Vec<Client> = (0..5)
        .map(|_| {
            let mut client = nodes[1].connect();
            client.join(&id);
            client
        })
        .collect();
    let frames = || nodes[0].metric("roundtable_cluster_relayed_frames_total{node=\"a\"}");
    let copies = || nodes[0].metric("roundtable_cluster_relayed_copies_total{node=\"a\"}");
    let messages = || nodes[0].metric("roundtable_cluster_relay_link_messages_total{node=\"a\"}");
    // A first turn, read by everyone: the joins' own frames (answers, notices to the
    // clients already joined) went out before it.
    let ack = local.submit(&id, "what is 1+1");
    let rid = Client::request_id(&ack);
    local.until_complete(&id, &rid);
    for client in &mut relayed {
        assert_eq!(answer(&client.until_complete(&id, &rid)), "2");
    }
    let (frames_before, copies_before, messages_before) = (frames(), copies(), messages());

    let ack = local.submit(&id, "what is 2+3");
    let rid = Client::request_id(&ack);
    let seen_local = local.until_complete(&id, &rid);
    assert_eq!(answer(&seen_local), "5");
    let calls = turn(&seen_local).len();
    for client in &mut relayed {
        let seen = client.until_complete(&id, &rid);
        assert_eq!(
            turn(&seen),
            turn(&seen_local),
            "the same calls in the same order"
        );
    }
    // Every call reached the five relayed clients...
    eventually("a to count the turn's relayed deliveries", || {
        frames() - frames_before >= (5 * calls) as f64
    });
    let delivered = frames() - frames_before;
    let sent = copies() - copies_before;
    // ...and crossed toward b once: one copy of each call (plus, at most, the conversation's
    // call prefix defined again), where a link per client would send five.
    assert!(
        sent <= delivered / 5.0 + 1.0,
        "{sent} copies sent for {delivered} relayed deliveries ({calls} calls per client)"
    );
    assert!(sent >= calls as f64, "{sent} copies for {calls} calls");
    // Link messages carry what the relays queued at once: at most one per relayed delivery
    // (how many fewer depends on the timing).
    let messages = messages() - messages_before;
    assert!(
        messages >= 1.0 && messages <= delivered,
        "{messages} link messages"
    );
}

/// Issue 50: a client joined through another node watches a streamed answer grow through the
/// relay: node a runs the turn on a streaming model that holds the rest of its answer, and a
/// client of node b has the first words before the model goes on.
#[test]
fn a_streamed_answer_reaches_a_relayed_client_as_it_is_written() {
    let Some(nats) = nats_or_skip() else { return };
    let gate = Gate::closed();
    let held = gate.clone();
    let endpoint = ScriptedSse::tls(move |_, _| {
        Reply::events(vec![
            chunk(json!({"content": "Relayed "})),
            Step::Wait(held.clone()),
            chunk(json!({"content": "words."})),
            finish("stop"),
            done(),
        ])
    });
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    let base = endpoint.url("/v1");
    let env = [
        ("ROUNDTABLE_OPENAI_BASE_URL", base.as_str()),
        ("ROUNDTABLE_OPENAI_MODEL", "streaming-model"),
        ("SSL_CERT_FILE", ca.as_str()),
        ("SSL_CERT_DIR", ""),
    ];
    let nodes: Vec<Server> = ["a", "b"]
        .iter()
        .map(|node| {
            Server::start_env(
                &[
                    "--cluster",
                    &nats.url(),
                    "--node-name",
                    node,
                    "--provider",
                    "openai",
                ],
                &env,
            )
        })
        .collect();
    let (mut local, id) = nodes[0].joined("streamed across");
    wait_same_lists(&nodes);
    let mut relayed = nodes[1].connect();
    relayed.join(&id);
    let rid = Client::request_id(&local.submit(&id, "tell me"));
    // The relayed client has the first words while the model holds the rest.
    let piece = loop {
        let args = relayed.expect_call(&clientio(&id), "appendDisplay");
        if args[1] == "inline" {
            break args[0].clone();
        }
    };
    assert_eq!(piece["message"]["content"], "Relayed ");
    gate.open();
    let texts = Client::texts(&relayed.until_complete(&id, &rid));
    assert!(texts.iter().any(|t| t.ends_with("words.")), "{texts:?}");
    local.until_complete(&id, &rid);
}
