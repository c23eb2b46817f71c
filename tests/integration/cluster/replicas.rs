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

/// A node started with `--cluster-replicas 3` while its NATS cluster is still forming (two of
/// three servers up: JetStream cannot place three replicas yet) waits, says so once, and
/// starts serving when the third server joins, instead of exiting. Seen in CI: the nemesis's
/// first node started before every server had joined JetStream's cluster.
#[test]
fn a_node_waits_for_a_forming_cluster_to_place_three_replicas() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;

    use crate::support::nats_cluster::NatsCluster;
    use crate::support::server::{listening_port, serve_command};

    if !crate::support::nats::available() {
        skip("nats-server is not installed (apt install nats-server; .ci/run does)");
        return;
    }
    let mut nats = NatsCluster::start_but(Some(2));
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url(0);
    let args = [
        "--cluster",
        url.as_str(),
        "--node-name",
        "a",
        "--cluster-replicas",
        "3",
    ];
    let mut child = serve_command(std::path::Path::new(binary()), dir.path(), &args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roundtable starts");
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let next_line = |log: &mut String| -> String {
        let line = lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("the node said nothing more ({e}); its log:\n{log}"));
        log.push_str(&line);
        log.push('\n');
        line
    };
    loop {
        let line = next_line(&mut log);
        assert!(
            !line.contains("cannot create the bucket"),
            "the node gave up on the forming cluster:\n{log}"
        );
        if line.contains("JetStream cannot place the bucket rt_registry yet") {
            break;
        }
    }
    nats.restart(2);
    let port = loop {
        let line = next_line(&mut log);
        if let Some(port) = listening_port(&line) {
            break port;
        }
    };
    let mut client = Client::connect(&format!("ws://127.0.0.1:{port}/"));
    let id = client.create("placed");
    client.join(&id);
    let _ = child.kill();
    let _ = child.wait();
}
