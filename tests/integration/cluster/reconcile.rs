//! A node's copy of the conversation list is checked against the registry bucket
//! (`actors/src/registry/reconcile.rs`): what the bucket's watch never delivers still reaches
//! the copy. A record purged from the bucket's stream makes no watch event at all, so it
//! stands in for a change the watch missed.

use serde_json::json;

use super::{answer, nats_or_skip};
use crate::harness::*;
use crate::support::nats::NatsServer;

/// Node `a` of a cluster on `nats`, checking its copy every second.
fn checking_node(nats: &NatsServer) -> Server {
    Server::start(&[
        "--cluster",
        &nats.url(),
        "--node-name",
        "a",
        "--reconcile-time",
        "1",
    ])
}

/// Purges the records of `ids` from the bucket's stream behind the nodes' backs: a purge of a
/// subject writes no marker, so no watch has anything to deliver.
fn purge_records(nats: &NatsServer, ids: &[String]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let nats = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(nats);
        let stream = js.get_stream("KV_rt_registry").await.unwrap();
        for id in ids {
            let purged = stream
                .purge()
                .filter(format!("$KV.rt_registry.conv.{id}"))
                .await
                .unwrap();
            assert_eq!(purged.purged, 1);
        }
    });
}

/// The ids a node lists.
fn listed_ids(node: &Server) -> Vec<String> {
    node.connect()
        .agent("listConversations", json!([null]))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["conversationId"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_record_gone_from_the_bucket_without_a_watch_event_leaves_the_copy() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let a = checking_node(&nats);
    let (mut client, kept) = a.joined("kept");
    let gone = client.agent("createConversation", json!(["gone"])).unwrap()["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(listed_ids(&a).contains(&gone));
    let repairs = || {
        let (_, body) = a.http_get("/health");
        let health: serde_json::Value = serde_json::from_str(&body).unwrap();
        (
            health["cluster"]["registryReconciles"].as_u64().unwrap(),
            health["cluster"]["registryRepairs"].as_u64().unwrap(),
        )
    };
    assert_eq!(repairs().1, 0, "nothing to repair yet");
    purge_records(&nats, std::slice::from_ref(&gone));
    eventually("a's checks to drop the purged conversation", || {
        !listed_ids(&a).contains(&gone)
    });
    // A purge writes no delete marker: the first check that found it gone kept it, and only
    // a check two reconcile times later removed it.
    let log = a.log();
    let kept_at = log
        .find(&format!(
            "conversation {gone} is not in the store and has no delete marker"
        ))
        .expect("the first find kept it");
    let removed_at = log
        .find(&format!(
            "conversation {gone} is not in the store, but this node had it: removed here"
        ))
        .expect("removed");
    assert!(kept_at < removed_at);
    let (checks, repaired) = repairs();
    assert!(checks >= 1, "{checks} checks");
    assert_eq!(repaired, 1, "one repair: the purged record");
    // The rest of the list and the clients are untouched.
    assert!(listed_ids(&a).contains(&kept));
    let refused = client
        .agent("joinConversation", json!([{"conversationId": gone}]))
        .unwrap_err();
    assert!(refused.contains("Conversation not found"), "{refused}");
    assert_eq!(answer(&client.run_turn(&kept, "what is 1+1")), "2");
}

/// Many conversations gone at once is what a NATS server still catching up answers, not what
/// a watch misses: a check removes none of them, and says so (under the nemesis a node once
/// removed 966 conversations this way, all back a minute later).
#[test]
fn a_check_removes_nothing_when_many_conversations_look_gone_at_once() {
    let Some(nats) = nats_or_skip() else {
        return;
    };
    let a = checking_node(&nats);
    let mut client = a.connect();
    let ids: Vec<String> = (0..10)
        .map(|i| {
            client
                .agent("createConversation", json!([format!("many-{i}")]))
                .unwrap()["conversationId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    purge_records(&nats, &ids);
    a.wait_log("the store answered without 10 conversations this node has");
    let listed = listed_ids(&a);
    assert!(
        ids.iter().all(|id| listed.contains(id)),
        "nothing removed: {listed:?}"
    );
}
