//! Conversations the shared store lost (`serve --cluster`, docs/cluster.md "What an
//! acknowledgement means"): a check of the copy (`reconcile.rs`) finds a conversation that
//! the store has no record of and no delete marker for (a delete always leaves one), and
//! this node holds its files. That is what a NATS server that acknowledged the create and
//! lost it answers (NATS 2.9 syncs its store about every two minutes: a power cut loses the
//! tail of what it acknowledged); removing the conversation would delete the only copy of
//! acknowledged turns. So the node writes its record again instead, with its id, name and
//! creation time (a name another conversation took meanwhile gets a number, as
//! `appendNumber` does), logged at WARN; its files reach the log stream when it is next
//! taken over (`cluster/takeover.rs` republishes what the stream lacks).
//!
//! A conversation gone without a marker whose files this node does not hold (created and
//! never joined here) is removed as before, once its absence lasts (`reconcile.rs`).
//!
//! Who talks to it: `reconcile.rs`'s check, through
//! [`ConversationRegistry::write_record_again`].

use actix::prelude::*;

use super::shared_store::{RegistryRecord, Written};
use super::ConversationRegistry;
use crate::ids::ConversationId;
use crate::naming;

/// Names tried when a lost conversation's name was taken by another meanwhile.
const NAME_ATTEMPTS: usize = 8;

impl ConversationRegistry {
    /// Whether this node holds data of conversation `id`: a file in its directory that is
    /// not empty (a conversation created and never joined has none; the files a node
    /// prepares for a new conversation are empty).
    pub(super) fn holds_files(&self, id: ConversationId) -> bool {
        let dir = self.config.layout.conversation_dir(&id);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|entry| {
            entry
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.len() > 0)
        })
    }

    /// The store has no record of `id` and no delete marker, and this node holds its files:
    /// writes its record again (once at a time per conversation) and applies it to the copy.
    pub(super) fn write_record_again(&mut self, id: ConversationId, ctx: &mut Context<Self>) {
        let Some(cluster) = self.config.cluster.clone() else {
            return;
        };
        let Some(entry) = self.entries.get(&id) else {
            return;
        };
        if !self.shared_copy.rewriting.insert(id) {
            return;
        }
        let requested = entry.name.to_string();
        let created_at = entry.created_at.to_string();
        let others: Vec<String> = self
            .in_order()
            .filter(|(other, _)| *other != id)
            .map(|(_, e)| e.name.to_string())
            .collect();
        let node = cluster.node().to_string();
        log::warn!(
            "cluster node {node}: conversation {id} ({requested:?}) is not in the store and has \
             no delete marker, but this node holds its files: the store lost it (a NATS server \
             that acknowledged its create and lost it in a power cut?); writing its record \
             again"
        );
        let registry = ctx.address();
        actix::spawn(async move {
            let mut candidate = requested.clone();
            let mut taken = Vec::new();
            for _ in 0..NAME_ATTEMPTS {
                let record = RegistryRecord {
                    conversation_id: id,
                    name: candidate.clone(),
                    created_at: created_at.clone(),
                };
                match cluster.create_lost(record.clone()).await {
                    Ok(None) => {
                        log::info!(
                            "cluster node {node}: conversation {id}: the store has a record or \
                             a delete marker for it after all; not written again"
                        );
                        break;
                    }
                    Ok(Some(Written::Stored(revision))) => {
                        log::warn!(
                            "cluster node {node}: conversation {id}: its record is in the store \
                             again as {candidate:?} (revision {revision})"
                        );
                        registry.do_send(RecordRewritten(id, Some((record, revision))));
                        return;
                    }
                    Ok(Some(Written::Taken(holder))) => {
                        taken.push(holder);
                        candidate = naming::append_number(
                            &requested,
                            others.iter().chain(&taken).map(String::as_str),
                        );
                    }
                    Err(e) => {
                        log::warn!(
                            "cluster node {node}: conversation {id}: its record could not be \
                             written again ({e}); the next check tries again"
                        );
                        break;
                    }
                }
            }
            registry.do_send(RecordRewritten(id, None));
        });
    }
}

/// A lost record's rewrite ended: written (the record and its revision, applied to the copy
/// whatever revision the copy held: the store's revisions start lower again after it lost
/// its tail), or not (the next check may try again).
#[derive(Message)]
#[rtype(result = "()")]
struct RecordRewritten(ConversationId, Option<(RegistryRecord, u64)>);

impl Handler<RecordRewritten> for ConversationRegistry {
    type Result = ();

    fn handle(&mut self, msg: RecordRewritten, _: &mut Self::Context) {
        let RecordRewritten(id, written) = msg;
        self.shared_copy.rewriting.remove(&id);
        if let Some((record, revision)) = written {
            if self.entries.contains_key(&id) {
                self.put_record(&record, revision);
            }
        }
    }
}
