//! A power cut that takes a node and its NATS server together (issue 49, finding 2). NATS 2.9
//! acknowledges a JetStream write before it fsyncs it (its file store syncs about every two
//! minutes), so a power cut can cost JetStream the tail of what it acknowledged while the
//! node's own files, fsynced before every acknowledgement, hold it. Simulated as the review
//! did: the store is copied at one point (what the disk would hold), more turns are
//! acknowledged, node and NATS are killed, and the copy is put back. The restarted node must
//! republish what its files hold beyond the stream, not replace them with the shorter stream,
//! and must keep (and write again) a conversation whose create the bucket lost.

use serde_json::{json, Value};

use super::{answer, nats_or_skip};
use crate::harness::*;

/// The commands of a display history, in order.
fn commands(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .filter_map(|e| e["command"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_power_cut_that_loses_jetstreams_tail_loses_no_acknowledged_turn() {
    let Some(mut nats) = nats_or_skip() else {
        return;
    };
    let url = nats.url();
    let instance = tempfile::tempdir().unwrap();
    let node_a = [
        "--cluster",
        url.as_str(),
        "--node-name",
        "a",
        "--reconcile-time",
        "1",
    ];
    let a = Server::start_in(instance.path(), &node_a);
    let (mut client, kept) = a.joined("kept");
    assert_eq!(answer(&client.run_turn(&kept, "what is 1+1")), "2");
    // What JetStream's disk holds when the power goes: everything up to here.
    let copies = tempfile::tempdir().unwrap();
    let synced = copies.path().join("store");
    nats.copy_store(&synced);
    // Acknowledged after that point: a turn of a conversation, a new conversation and its
    // first turn.
    assert_eq!(answer(&client.run_turn(&kept, "what is 2+3")), "5");
    let (mut second, fresh) = a.joined("fresh");
    assert_eq!(answer(&second.run_turn(&fresh, "what is 4+5")), "9");
    drop((client, second));
    a.kill();
    nats.stop();
    nats.replace_store(&synced);
    nats.restart();

    let a = Server::start_in(instance.path(), &node_a);
    let mut client = a.connect();
    let names = client.names();
    assert!(
        names.contains(&"kept".to_string()) && names.contains(&"fresh".to_string()),
        "{names:?}"
    );
    client.join(&kept);
    assert_eq!(
        commands(&client.history(&kept)),
        ["what is 1+1", "what is 2+3"],
        "every acknowledged turn of an existing conversation"
    );
    client.join(&fresh);
    assert_eq!(
        commands(&client.history(&fresh)),
        ["what is 4+5"],
        "the first turn of the conversation whose create JetStream lost"
    );
    a.wait_log("republished");
    // Checks of the copy against the bucket (every second here) keep it: its record was
    // written again, so none finds it gone (a conversation gone without a delete marker is
    // removed two reconcile times after the first find).
    let checks = |node: &Server| {
        let (_, body) = node.http_get("/health");
        let health: Value = serde_json::from_str(&body).unwrap();
        health["cluster"]["registryReconciles"].as_u64().unwrap()
    };
    let first = checks(&a);
    eventually("node a to check its copy three more times", || {
        checks(&a) >= first + 3
    });
    assert!(client.names().contains(&"fresh".to_string()));
    // The stream and the bucket hold it all: a node with no files of its own, once a is gone,
    // rebuilds both conversations from the stream.
    drop(client);
    a.shutdown();
    let b = Server::start(&["--cluster", url.as_str(), "--node-name", "b"]);
    let mut on_b = b.connect();
    assert!(on_b.names().contains(&"fresh".to_string()));
    on_b.join(&kept);
    assert_eq!(
        commands(&on_b.history(&kept)),
        ["what is 1+1", "what is 2+3"]
    );
    on_b.join(&fresh);
    assert_eq!(commands(&on_b.history(&fresh)), ["what is 4+5"]);
}

/// The same power cut, then another node takes the conversation over from the shorter stream
/// and writes on top of it before the first node is back: the two histories diverged. The
/// first node deletes nothing: its copy (with the turn JetStream lost) goes to
/// `<instance>/set-aside/`, said at ERROR, and the cluster's version (with the other node's
/// turn) is served.
#[test]
fn a_copy_that_diverged_from_the_stream_is_set_aside_not_deleted() {
    let Some(mut nats) = nats_or_skip() else {
        return;
    };
    let url = nats.url();
    let instance = tempfile::tempdir().unwrap();
    let args = |name: &'static str| {
        [
            "--cluster",
            url.as_str(),
            "--node-name",
            name,
            "--lease-time",
            "2",
        ]
    };
    let a = Server::start_in(instance.path(), &args("a"));
    let (mut client, id) = a.joined("shared");
    assert_eq!(answer(&client.run_turn(&id, "what is 1+1")), "2");
    let copies = tempfile::tempdir().unwrap();
    let synced = copies.path().join("store");
    nats.copy_store(&synced);
    assert_eq!(answer(&client.run_turn(&id, "what is 2+3")), "5");
    drop(client);
    a.kill();
    nats.stop();
    nats.replace_store(&synced);
    nats.restart();

    // b takes it over from the stream (which lost "2+3") and writes a turn of its own.
    let b = Server::start(&args("b"));
    let mut on_b = b.connect();
    eventually("b to take the conversation over", || {
        on_b.agent("joinConversation", json!([{"conversationId": id}]))
            .is_ok()
    });
    assert_eq!(answer(&on_b.run_turn(&id, "what is 4+5")), "9");
    drop(on_b);
    b.shutdown();

    let a = Server::start_in(instance.path(), &args("a"));
    let mut client = a.connect();
    client.join(&id);
    assert_eq!(
        commands(&client.history(&id)),
        ["what is 1+1", "what is 4+5"],
        "the cluster's version is served"
    );
    let set_aside: Vec<_> = std::fs::read_dir(instance.path().join("set-aside"))
        .expect("a set-aside directory")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    assert!(set_aside[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with(&id));
    let kept = std::fs::read_to_string(set_aside[0].join("displayLog.jsonl")).unwrap();
    assert!(kept.contains("what is 2+3"), "{kept}");
    let log = a.log();
    let line = log
        .lines()
        .find(|l| l.contains("differ both ways"))
        .unwrap_or_else(|| panic!("no word of the divergence:\n{log}"));
    assert!(
        line.contains("ERROR") && line.contains("set-aside"),
        "{line}"
    );
}
