//! The log stream's fence across one node's ownership epochs of a conversation
//! (`actors/src/cluster/log_stream.rs`, "Ownership epochs"), against a real `nats-server -js`:
//! the node's replica is driven as the owner drives it (`begin` when it owns the conversation,
//! then records and barriers), with a second writer on the same subject as the other owner.
//! The nemesis found a node, deposed and owning the conversation again within a second,
//! publishing a `user-request` queued before it was deposed after its restore: the history held
//! that request twice.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use roundtable_actors::cluster::log_stream::LogReplicator;
use roundtable_actors::cluster::{Cluster, ClusterAuth, ClusterSettings, Names};
use roundtable_actors::ids::ConversationId;
use roundtable_actors::storage::replication::{FileOp, Replicator};

#[test]
fn records_queued_before_a_node_owns_a_conversation_again_are_never_published() {
    let Some(nats) = super::nats_or_skip() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let names = Names::default();
        let cluster = Cluster::connect(ClusterSettings {
            url: nats.url(),
            node_name: "fenced".into(),
            lease_time: Duration::from_secs(5),
            reconcile_time: Duration::from_secs(30),
            replicas: 1,
            names: names.clone(),
            auth: ClusterAuth::default(),
        })
        .await
        .expect("connected to NATS");
        let instance = tempfile::tempdir().expect("temp dir");
        let conversations = instance.path().join("conversations");
        let replicator = LogReplicator::start(&cluster, conversations.clone());
        let id = ConversationId::new_random();
        let file: Arc<Path> = conversations
            .join(id.to_string())
            .join("display.jsonl")
            .into();
        let files = [file.clone()];

        // This node owns the conversation and writes.
        replicator.begin(id, 0);
        replicator.record(&file, FileOp::Append, b"first\n");
        replicator.barrier(&files).await.expect("first stored");
        let first = replicator
            .current_through(id)
            .expect("fenced on its record");

        // Another owner writes after it: this node is deposed.
        let js = async_nats::jetstream::new(
            async_nats::connect(nats.url())
                .await
                .expect("second client"),
        );
        let subject = names.log_subject(id);
        let mut headers = HeaderMap::new();
        headers.insert("Rt-File", "display.jsonl");
        headers.insert("Rt-Op", "append");
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            first.to_string().as_str(),
        );
        let other = js
            .publish_with_headers(subject, headers, "other owner\n".into())
            .await
            .expect("published")
            .await
            .expect("stored")
            .sequence;

        // Records this node queued before it knew, held (the first in flight, or all still
        // queued) while the node restores and owns the conversation again.
        nats.pause();
        for k in 0..3 {
            replicator.record(&file, FileOp::Append, format!("stale {k}\n").as_bytes());
        }
        replicator.begin(id, other);
        nats.resume();

        // The new epoch writes: neither the earlier epoch's failure fails its barrier, nor do
        // the earlier epoch's records land under its fence.
        replicator.record(&file, FileOp::Append, b"after\n");
        replicator
            .barrier(&files)
            .await
            .expect("the new epoch's record is stored");
        let mut stream = js
            .get_stream(names.log_stream())
            .await
            .expect("the log stream");
        let last = stream
            .info()
            .await
            .expect("stream info")
            .state
            .last_sequence;
        let mut stored = Vec::new();
        for sequence in 1..=last {
            let raw = stream
                .get_raw_message(sequence)
                .await
                .expect("every record is there");
            let message = async_nats::Message::try_from(raw).expect("a message");
            stored.push(String::from_utf8(message.payload.to_vec()).expect("text"));
        }
        assert_eq!(
            stored,
            ["first\n", "other owner\n", "after\n"],
            "the subject holds the first epoch's record, the other owner's, and the new \
             epoch's; nothing queued before the node owned it again"
        );
        assert_eq!(
            replicator.current_through(id),
            Some(last),
            "the new epoch's files are current through its own record"
        );
    });
}
