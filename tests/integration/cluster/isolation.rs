//! `--cluster-name`: two clusters (`one` and `two`) of two nodes each on one `nats-server`
//! and one account. Each has its own list, names, conversations, relays and search; nothing
//! one writes is visible to the other, and each has its own buckets and stream in JetStream.

use std::sync::Mutex;

use futures_util::StreamExt;

use super::*;

/// A NATS client of its own that records the subject of every message published on some
/// subjects, for the test's life (its own thread and runtime).
struct Tap {
    /// Subjects seen so far.
    seen: Arc<Mutex<Vec<String>>>,
    /// Ends the tap's loop.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tap {
    /// Subscribes to `subjects` on `url`; returns once the server has the subscriptions.
    fn start(url: &str, subjects: &[&str]) -> Tap {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (url, subjects) = (
            url.to_string(),
            subjects.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        );
        let kept = seen.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = async_nats::connect(url).await.unwrap();
                let mut subscriptions = Vec::new();
                for subject in subjects {
                    subscriptions.push(client.subscribe(subject).await.unwrap());
                }
                client.flush().await.unwrap();
                ready_tx.send(()).unwrap();
                let mut messages = futures_util::stream::select_all(subscriptions);
                loop {
                    tokio::select! {
                        Some(message) = messages.next() => {
                            kept.lock().unwrap().push(message.subject.to_string());
                        }
                        _ = &mut stopped => break,
                    }
                }
            });
        });
        ready_rx.recv_timeout(WAIT).expect("the tap subscribed");
        Tap {
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The subjects seen so far.
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Publishes `subject` (a marker the [`Tap`] waits for: everything published before it has
/// reached the tap too).
fn publish(url: &str, subject: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        client
            .publish(subject.to_string(), "".into())
            .await
            .unwrap();
        client.flush().await.unwrap();
    });
}

/// Node `node` of cluster `cluster` on `nats`.
fn node(nats: &NatsServer, cluster: &str, node: &str) -> Server {
    Server::start(&[
        "--cluster",
        &nats.url(),
        "--cluster-name",
        cluster,
        "--node-name",
        node,
    ])
}

/// Names and lists, the same name in both clusters, a conversation joined across nodes in
/// each (its turn relayed), joins, search and lists that never cross from one to the other,
/// and one set of buckets and one stream per cluster. The node names are the same in both
/// clusters on purpose: relays are addressed by cluster and node.
#[test]
fn two_clusters_on_one_nats_do_not_see_each_other() {
    let Some(nats) = nats_or_skip() else { return };
    // Whatever goes out under the default cluster's names, or under either cluster's.
    let tap = Tap::start(
        &nats.url(),
        &[
            "rt.>",
            "$KV.rt_registry.>",
            "$KV.rt_owners.>",
            "$KV.rt_nodes.>",
            "one.>",
            "two.>",
        ],
    );
    let one = [node(&nats, "one", "a"), node(&nats, "one", "b")];
    let two = [node(&nats, "two", "a"), node(&nats, "two", "b")];
    let one_list = wait_same_lists(&one);
    let two_list = wait_same_lists(&two);
    // Each cluster made its own `default`: one each, with different ids.
    assert_eq!(one_list.as_array().unwrap().len(), 1, "{one_list}");
    assert_eq!(two_list.as_array().unwrap().len(), 1, "{two_list}");
    assert_ne!(one_list, two_list);

    // The same name is free in each cluster, and taken within it.
    let (mut one_a, one_id) = one[0].joined("Shared name");
    let (mut two_a, two_id) = two[0].joined("Shared name");
    for (cluster, other) in [(&one, &two_id), (&two, &one_id)] {
        assert_eq!(
            cluster[1]
                .connect()
                .agent("createConversation", json!(["shared name", null]))
                .unwrap_err(),
            "A conversation named \"Shared name\" already exists. Pick a different name."
        );
        // The other cluster's conversation does not exist here.
        assert_eq!(
            cluster[1]
                .connect()
                .agent("joinConversation", json!([{"conversationId": other}]))
                .unwrap_err(),
            format!("Conversation not found: {other}")
        );
    }

    // In each cluster, a client on b joins the conversation a serves and both see a turn.
    for (cluster, owner, id, question, expected, animal) in [
        (&one, &mut one_a, &one_id, "what is 2+3", "5", "platypus"),
        (&two, &mut two_a, &two_id, "what is 3+4", "7", "kingfisher"),
    ] {
        let mut remote = cluster[1].connect();
        remote.join(id);
        let rid = Client::request_id(&remote.submit(id, question));
        assert_eq!(answer(&remote.until_complete(id, &rid)), expected);
        assert_eq!(answer(&owner.until_complete(id, &rid)), expected);
        owner.run_turn(id, &format!("tell me about the {animal}"));
    }
    assert!(one[0].metric("roundtable_cluster_relayed_frames_total{node=\"a\"}") > 0.0);
    assert!(two[0].metric("roundtable_cluster_relayed_frames_total{node=\"a\"}") > 0.0);

    // A conversation only one cluster has, and search: each finds its own turn only.
    one[1].connect().create("Only in one");
    let one_list = wait_same_lists(&one);
    let two_list = wait_same_lists(&two);
    assert_eq!(one_list.as_array().unwrap().len(), 3, "{one_list}");
    assert_eq!(two_list.as_array().unwrap().len(), 2, "{two_list}");
    assert!(!two_list.to_string().contains("Only in one"), "{two_list}");
    assert!(!two_list.to_string().contains(&one_id), "{two_list}");
    assert!(!one_list.to_string().contains(&two_id), "{one_list}");
    let found = |node: &Server, word: &str| -> Vec<String> {
        let hits = node
            .connect()
            .agent("searchConversationContent", json!([word, null]))
            .unwrap();
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["conversation"]["conversationId"].as_str().unwrap().into())
            .collect()
    };
    // b never owned its cluster's conversation: it asks the other nodes, of its cluster only.
    eventually("each cluster's b to find its own turn", || {
        found(&one[1], "platypus") == [one_id.clone()]
            && found(&two[1], "kingfisher") == [two_id.clone()]
    });
    assert!(found(&one[1], "kingfisher").is_empty());
    assert!(found(&two[1], "platypus").is_empty());
    // Each counts its own two nodes.
    eventually("every node to count the two nodes of its cluster", || {
        one.iter()
            .chain(&two)
            .zip(["a", "b", "a", "b"])
            .all(|(n, name)| {
                n.metric(&format!("roundtable_cluster_nodes{{node=\"{name}\"}}")) == 2.0
            })
    });

    // Every kind of subject went out under both clusters' names (counts go on a timer), and
    // nothing under the default names (what the tap saw up to a marker published last).
    eventually("every kind of subject under both names", || {
        let seen = tap.seen();
        ["one", "two"].iter().all(|cluster| {
            [".log.", ".search", ".counts", ".node.a.relay.open"]
                .iter()
                .all(|kind| {
                    seen.iter()
                        .any(|s| s.starts_with(&format!("{cluster}{kind}")))
                })
        })
    });
    publish(&nats.url(), "rt.tap.end");
    eventually("the tap to see the end marker", || {
        tap.seen().contains(&"rt.tap.end".to_string())
    });
    let default: Vec<String> = tap
        .seen()
        .into_iter()
        .filter(|s| (s.starts_with("rt.") || s.starts_with("$KV.rt_")) && s != "rt.tap.end")
        .collect();
    assert!(default.is_empty(), "under the default names: {default:?}");

    // JetStream holds one set per cluster, and none under the default name.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let streams = runtime.block_on(async {
        let client = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut names: Vec<String> = js
            .stream_names()
            .filter_map(|n| std::future::ready(n.ok()))
            .collect()
            .await;
        names.sort();
        names
    });
    assert_eq!(
        streams,
        [
            "KV_one_nodes",
            "KV_one_owners",
            "KV_one_registry",
            "KV_two_nodes",
            "KV_two_owners",
            "KV_two_registry",
            "ONE_LOG",
            "TWO_LOG"
        ]
    );
}
