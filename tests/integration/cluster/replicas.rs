//! `--cluster-replicas`: the JetStream replica count of the buckets and the log stream a node
//! creates. A single `nats-server` cannot hold more than one replica, so a node asked for three
//! on a fresh one refuses to start, naming the bucket and the count; a node asked for another
//! count than the existing buckets have says what it did about each.

use super::nats_or_skip;
use crate::harness::*;

/// On a fresh single server, `--cluster-replicas 3` stops the node at start (non-zero exit)
/// with `cannot create the bucket rt_registry with 3 replicas: …` and JetStream's reason.
#[test]
fn a_single_server_refuses_three_replicas_clearly() {
    let Some(nats) = nats_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url();
    let args = [
        "--cluster",
        &url,
        "--node-name",
        "a",
        "--cluster-replicas",
        "3",
    ];
    let log = match Server::try_start_in(dir.path(), &args) {
        Ok(server) => panic!("started with 3 replicas on one server:\n{}", server.log()),
        Err(log) => log,
    };
    assert!(
        log.contains("roundtable: cluster: cannot create the bucket rt_registry with 3 replicas: "),
        "{log}"
    );
    assert!(log.contains("replicas > 1 not supported"), "{log}");
}

/// Buckets and stream created with one replica; a node started with `--cluster-replicas 3`
/// logs, for each of them, that it updated the count or why it could not (what JetStream
/// answers depends on the server), and serves.
#[test]
fn existing_buckets_are_brought_to_the_asked_count_or_a_warning_says_why() {
    let Some(nats) = nats_or_skip() else { return };
    let url = nats.url();
    let a = Server::start(&["--cluster", &url, "--node-name", "a"]);
    let b = Server::start(&[
        "--cluster",
        &url,
        "--node-name",
        "b",
        "--cluster-replicas",
        "3",
    ]);
    let log = b.log();
    for what in [
        "bucket rt_registry",
        "stream RT_LOG",
        "bucket rt_owners",
        "bucket rt_nodes",
    ] {
        let updated = format!("the {what} had 1 replica(s); updated to 3");
        let refused = format!("the {what} has 1 replica(s), not the 3 of --cluster-replicas");
        assert!(
            log.contains(&updated) || log.contains(&refused),
            "{what}:\n{log}"
        );
    }
    let id = a.connect().create("replicated");
    eventually("b to list a's conversation", || {
        b.connect().names().contains(&"replicated".to_string())
    });
    b.connect().join(&id);
}
