//! The log stream's fence across one node's ownership epochs of a conversation
//! (`actors/src/cluster/log_stream.rs`, "Ownership epochs"), against a real `nats-server -js`:
//! the node's replica is driven as the owner drives it (`begin` when it owns the conversation,
//! then records and barriers), with a second writer on the same subject as the other owner.
//! The nemesis found a node, deposed and owning the conversation again within a second,
//! publishing a `user-request` queued before it was deposed after its restore: the history held
//! that request twice. And it found an owner resumed from `SIGSTOP` writing, acknowledged,
//! after the new owner had restored the conversation and before it wrote anything: the new
//! owner's history lacked two acknowledged turns. A node that takes a conversation over now
//! claims its subject before it opens the files (`Cluster::claim_log`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use roundtable_actors::cluster::log_stream::LogReplicator;
use roundtable_actors::cluster::seal::ClusterSecret;
use roundtable_actors::cluster::{Cluster, ClusterAuth, ClusterSettings, Names, RegistryBackend};
use roundtable_actors::ids::ConversationId;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::registry::{Lease, OwnershipService};
use roundtable_actors::storage::log_writer::LogWriter;
use roundtable_actors::storage::replication::{FileOp, Replicator};

/// A connection to `nats` as node `node`.
async fn connect(nats: &crate::support::nats::NatsServer, node: &str) -> Cluster {
    Cluster::connect(ClusterSettings {
        url: nats.url(),
        node_name: node.into(),
        lease_time: Duration::from_secs(5),
        reconcile_time: Duration::from_secs(30),
        replicas: 1,
        names: Names::default(),
        auth: ClusterAuth::default(),
        secret: ClusterSecret::new("the fencing test's cluster secret".into())
            .expect("long enough"),
    })
    .await
    .expect("connected to NATS")
}

#[test]
fn an_owner_that_missed_a_takeover_cannot_write_after_the_new_owner_read_the_files() {
    let Some(nats) = super::nats_or_skip() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let id = ConversationId::new_random();

        // Node a owns the conversation (its lease has since lapsed, which it has not noticed:
        // stopped, say) and wrote one record.
        let a = connect(&nats, "a").await;
        let a_instance = tempfile::tempdir().expect("temp dir");
        let a_replicator = LogReplicator::start(&a, a_instance.path().join("conversations"));
        let a_file: Arc<Path> = a_instance
            .path()
            .join("conversations")
            .join(id.to_string())
            .join("display.jsonl")
            .into();
        a_replicator.begin(id, 0);
        a_replicator.record(&a_file, FileOp::Append, b"first\n");
        a_replicator
            .barrier(std::slice::from_ref(&a_file))
            .await
            .expect("a's first record stored");

        // Node b takes the lease and brings the files current, as a join there does.
        let b = connect(&nats, "b").await;
        let b_instance = tempfile::tempdir().expect("temp dir");
        let b_conversations = b_instance.path().join("conversations");
        let b_replicator = LogReplicator::start(&b, b_conversations.clone());
        let b_writer = LogWriter::start(Arc::new(Metrics::default()), b_instance.path().into());
        let backend = RegistryBackend::new(b.clone(), b_replicator.clone(), b_writer);
        let b_dir = b_conversations.join(id.to_string());
        let fence = match backend.acquire(id, b_dir.clone()).await.expect("acquired") {
            Lease::Owned { fence, .. } => fence,
            Lease::OwnedBy(node) => panic!("the lease is free, yet owned by {node}"),
        };
        backend.fence(id, fence);
        let a_first = a_replicator
            .current_through(id)
            .expect("a's first record's sequence");
        assert_eq!(
            b.claim_log(id, a_first).await.expect("answered"),
            None,
            "a claim fenced on a record the subject has moved past is refused (the taking-over \
             node then reads the files again)"
        );
        assert_eq!(
            std::fs::read_to_string(b_dir.join("display.jsonl")).expect("restored"),
            "first\n"
        );

        // Node a, unaware, runs a turn before b wrote anything: its write must be refused
        // (its client gets an error, not an acknowledgement), or b's history lacks it.
        a_replicator.record(&a_file, FileOp::Append, b"stale owner\n");
        let refused = a_replicator
            .barrier(std::slice::from_ref(&a_file))
            .await
            .expect_err("a write of the deposed owner after b read the files is refused");
        assert!(refused.contains("wrong last sequence"), "{refused}");

        // Node b writes on, fenced on its claim, and a restore anywhere reads what b holds.
        let b_file: Arc<Path> = b_dir.join("display.jsonl").into();
        b_replicator.record(&b_file, FileOp::Append, b"second\n");
        b_replicator
            .barrier(std::slice::from_ref(&b_file))
            .await
            .expect("b's record is stored");
        let elsewhere = tempfile::tempdir().expect("temp dir");
        let (records, _) = b
            .restore_conversation(id, elsewhere.path())
            .await
            .expect("restored");
        assert_eq!(records, 2, "the claim is not a file record");
        assert_eq!(
            std::fs::read_to_string(elsewhere.path().join("display.jsonl")).expect("restored"),
            "first\nsecond\n"
        );
    });
}

#[test]
fn records_queued_before_a_node_owns_a_conversation_again_are_never_published() {
    let Some(nats) = super::nats_or_skip() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let names = Names::default();
        let cluster = connect(&nats, "fenced").await;
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
