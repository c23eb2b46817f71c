//! The shared registry in the JetStream key-value bucket `rt_registry` (docs/cluster.md,
//! "Registry"): `conv.<uuid>` holds a conversation's record, `name.<hex of the normalised name>`
//! holds the id that owns the name. Every create and rename claims the name key with an
//! insert-if-absent (`create`) or a compare-and-set on its revision, so two nodes racing for
//! one name end with one conversation and one `A conversation named … already exists` answer.
//!
//! A crash between the two writes of a create, or of a delete, leaves a name key whose
//! conversation record does not exist; the next claim of that name takes the key over once it
//! is [`STALE_NAME_CLAIM`] old (a younger one is a create still in flight, and wins).
//!
//! Who talks to it: the registry actor, through its [`SharedStore`](crate::registry::SharedStore)
//! (implemented in `backend.rs`), for writes, the snapshot at start and the watch that keeps
//! every node's in-memory copy current. The record, change and claim types are the registry's.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;

use super::{Cluster, ClusterError};
use crate::ids::ConversationId;
use crate::naming;
use crate::registry::{RegistryChange, RegistryRecord, RegistrySnapshot, Written};

/// A name key whose conversation record is missing is taken over after this long (a create
/// writes the record a round trip after the name key; only a crash leaves it missing longer).
pub const STALE_NAME_CLAIM: Duration = Duration::from_secs(10);
/// Compare-and-set retries of one rename before it answers `Cluster unavailable`.
const CAS_ATTEMPTS: usize = 8;

/// What a name claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameClaim {
    /// The name now names this conversation.
    Claimed,
    /// Another conversation has the name: its name as stored (for the protocol's error).
    Taken(String),
}

/// Opens the bucket, creating it on the first node of a new cluster.
pub(super) async fn open_bucket(
    js: &jetstream::Context,
    names: &super::Names,
    replicas: usize,
) -> Result<kv::Store, ClusterError> {
    super::open_or_create_bucket(
        js,
        &names.registry_bucket(),
        "Roundtable conversation registry",
        Duration::ZERO,
        jetstream::stream::StorageType::File,
        replicas,
    )
    .await
}

/// Whether a message of the bucket's stream is a delete (or purge) marker, not a value.
fn is_delete_marker(message: &async_nats::Message) -> bool {
    message.payload.is_empty()
        || message
            .headers
            .as_ref()
            .and_then(|h| h.get("KV-Operation"))
            .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
}

fn conv_key(id: ConversationId) -> String {
    format!("conv.{id}")
}

/// The name key: hex of the normalised name (KV keys allow only `[-/_=.a-zA-Z0-9]`).
fn name_key(name: &str) -> String {
    let normalized = naming::normalize(name);
    let mut key = String::with_capacity(5 + normalized.len() * 2);
    key.push_str("name.");
    for byte in normalized.bytes() {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

impl Cluster {
    /// Reads one conversation's record.
    async fn record(
        &self,
        id: ConversationId,
    ) -> Result<Option<(RegistryRecord, u64)>, ClusterError> {
        let entry =
            super::live_entry(self.registry_bucket(), conv_key(id), "registry read").await?;
        let Some(entry) = entry else { return Ok(None) };
        let record = serde_json::from_slice(&entry.value)
            .map_err(|e| ClusterError::new(&format!("registry record of {id}"), e))?;
        Ok(Some((record, entry.revision)))
    }

    /// The record of the conversation that holds `name`, if any.
    pub async fn record_named(&self, name: &str) -> Result<Option<RegistryRecord>, ClusterError> {
        let holder = self
            .registry_bucket()
            .get(name_key(name))
            .await
            .map_err(|e| ClusterError::new("registry name read", e))?;
        let Some(id) = holder
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(ConversationId::parse)
        else {
            return Ok(None);
        };
        Ok(self.record(id).await?.map(|(record, _)| record))
    }

    /// Makes `name`'s key name `id`: insert-if-absent, or take over a stale claim.
    pub async fn claim_name(
        &self,
        name: &str,
        id: ConversationId,
    ) -> Result<NameClaim, ClusterError> {
        let bucket = self.registry_bucket();
        let key = name_key(name);
        for _ in 0..CAS_ATTEMPTS {
            match bucket.create(&key, Bytes::from(id.to_string())).await {
                Ok(_) => return Ok(NameClaim::Claimed),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(ClusterError::new("registry name claim", e)),
            }
            self.stats().count_conflict();
            let Some(holder) = super::live_entry(bucket, &key, "registry name read").await? else {
                continue; // deleted in between: claim again
            };
            let holder_id = std::str::from_utf8(&holder.value)
                .ok()
                .and_then(ConversationId::parse);
            if holder_id == Some(id) {
                return Ok(NameClaim::Claimed);
            }
            if let Some(holder_id) = holder_id {
                if let Some((record, _)) = self.record(holder_id).await? {
                    return Ok(NameClaim::Taken(record.name));
                }
            }
            let age = jiff::Timestamp::now().as_second() - holder.created.unix_timestamp();
            if age < STALE_NAME_CLAIM.as_secs() as i64 {
                // A create still writing its record: it wins.
                return Ok(NameClaim::Taken(name.to_string()));
            }
            match bucket
                .update(&key, Bytes::from(id.to_string()), holder.revision)
                .await
            {
                Ok(_) => {
                    log::info!("cluster: took over the stale name claim {key}");
                    return Ok(NameClaim::Claimed);
                }
                Err(_) => continue, // someone else moved it: look again
            }
        }
        Err(ClusterError(format!(
            "registry name claim: still contended after {CAS_ATTEMPTS} attempts"
        )))
    }

    /// Removes `name`'s key if it still names `id` (compare-and-set: a newer claim stays).
    pub async fn release_name(&self, name: &str, id: ConversationId) -> Result<(), ClusterError> {
        let bucket = self.registry_bucket();
        let key = name_key(name);
        let Some(holder) = super::live_entry(bucket, &key, "registry name read").await? else {
            return Ok(());
        };
        if holder.value == id.to_string().as_bytes() {
            if let Err(e) = bucket
                .delete_expect_revision(&key, Some(holder.revision))
                .await
            {
                // Moved on (taken over): nothing of ours to remove.
                log::debug!("cluster: name key {key} not released: {e}");
            }
        }
        Ok(())
    }

    /// Creates a conversation: claims its name, then writes its record (`Stored` with its
    /// revision). Answers `Taken` with the holder's name when another conversation has it.
    pub async fn create_conversation(
        &self,
        record: &RegistryRecord,
    ) -> Result<Written, ClusterError> {
        self.require_connected()?;
        let claim = self
            .claim_name(&record.name, record.conversation_id)
            .await?;
        if let NameClaim::Taken(holder) = claim {
            return Ok(Written::Taken(holder));
        }
        let value = Bytes::from(serde_json::to_vec(record).expect("a record serializes"));
        let revision = match self
            .registry_bucket()
            .create(conv_key(record.conversation_id), value)
            .await
        {
            Ok(revision) => revision,
            Err(e) => {
                let _ = self
                    .release_name(&record.name, record.conversation_id)
                    .await;
                return Err(ClusterError::new("registry create", e));
            }
        };
        self.stats().count_write();
        Ok(Written::Stored(revision))
    }

    /// Creates the record of a conversation the bucket lost (a node holds its files, the
    /// bucket has no record and no delete marker: `registry/lost_records.rs`), as
    /// [`Cluster::create_conversation`] does; `None`, writing nothing, when the bucket holds a
    /// record or a delete marker for its id after all (a KV create would write over a
    /// marker and bring a deleted conversation back).
    pub async fn create_lost_conversation(
        &self,
        record: &RegistryRecord,
    ) -> Result<Option<Written>, ClusterError> {
        self.require_connected()?;
        let bucket = self.registry_bucket();
        let subject = format!("{}{}", bucket.prefix, conv_key(record.conversation_id));
        match bucket
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                self.create_conversation(record).await.map(Some)
            }
            Err(e) => Err(ClusterError::new("registry record read", e)),
        }
    }

    /// Renames a conversation: claims the new name (unless only its case or spacing changes),
    /// rewrites the record with a compare-and-set, releases the old name. `Ok(None)` when the
    /// record is gone (deleted on another node); `Stored` carries the record's new revision.
    pub async fn rename_conversation(
        &self,
        id: ConversationId,
        new_name: &str,
    ) -> Result<Option<Written>, ClusterError> {
        self.require_connected()?;
        let Some((current, _)) = self.record(id).await? else {
            return Ok(None);
        };
        let same_key = name_key(&current.name) == name_key(new_name);
        if !same_key {
            if let NameClaim::Taken(holder) = self.claim_name(new_name, id).await? {
                return Ok(Some(Written::Taken(holder)));
            }
        }
        for _ in 0..CAS_ATTEMPTS {
            let Some((mut record, revision)) = self.record(id).await? else {
                if !same_key {
                    let _ = self.release_name(new_name, id).await;
                }
                return Ok(None);
            };
            let old_name = std::mem::replace(&mut record.name, new_name.to_string());
            let value = Bytes::from(serde_json::to_vec(&record).expect("a record serializes"));
            match self
                .registry_bucket()
                .update(conv_key(id), value, revision)
                .await
            {
                Ok(revision) => {
                    self.stats().count_write();
                    if name_key(&old_name) != name_key(new_name) {
                        self.release_name(&old_name, id).await?;
                    }
                    return Ok(Some(Written::Stored(revision)));
                }
                Err(_) => self.stats().count_conflict(),
            }
        }
        Err(ClusterError(format!(
            "registry rename of {id}: still contended after {CAS_ATTEMPTS} attempts"
        )))
    }

    /// Deletes a conversation's record, then its name key.
    pub async fn delete_conversation(&self, id: ConversationId) -> Result<(), ClusterError> {
        self.require_connected()?;
        let current = self.record(id).await?;
        self.registry_bucket()
            .delete(conv_key(id))
            .await
            .map_err(|e| ClusterError::new("registry delete", e))?;
        self.stats().count_write();
        if let Some((record, _)) = current {
            self.release_name(&record.name, id).await?;
        }
        // Its files go with it, in the background (the record is already gone, so nothing
        // can reach them; a failure leaves only unreachable records).
        let cluster = self.clone();
        tokio::spawn(async move {
            if let Err(e) = cluster.purge_conversation(id).await {
                log::error!("{e}");
            }
        });
        Ok(())
    }

    /// `id`'s live record and its revision, as the bucket stream's leader answers (`None`:
    /// no record, or deleted). A check of a node's copy asks this before it changes anything
    /// its snapshot alone would: the snapshot's consumer may have read a replica that was
    /// behind, or one that held writes the cluster then dropped (`registry/reconcile.rs`).
    pub async fn leader_record(
        &self,
        id: ConversationId,
    ) -> Result<Option<(RegistryRecord, u64)>, ClusterError> {
        let bucket = self.registry_bucket();
        let subject = format!("{}{}", bucket.prefix, conv_key(id));
        let raw = match bucket
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(raw) => raw,
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                return Ok(None)
            }
            Err(e) => return Err(ClusterError::new("registry record read", e)),
        };
        let revision = raw.sequence;
        let message = async_nats::Message::try_from(raw)
            .map_err(|e| ClusterError::new("registry record read", e))?;
        if is_delete_marker(&message) {
            return Ok(None);
        }
        let record = serde_json::from_slice(&message.payload)
            .map_err(|e| ClusterError::new(&format!("registry record of {id}"), e))?;
        Ok(Some((record, revision)))
    }

    /// The bucket's newest revision (the last sequence of its stream).
    pub async fn registry_revision(&self) -> Result<u64, ClusterError> {
        // Asked of the server each time: `kv::Store::status` answers the stream info cached
        // when the bucket was opened.
        let mut stream = self.registry_bucket().stream.clone();
        let info = stream
            .info()
            .await
            .map_err(|e| ClusterError::new("registry status", e))?;
        Ok(info.state.last_sequence)
    }

    /// Every record now with its revision, the deleted conversations whose delete markers the
    /// bucket keeps, and where the watch must start (the newest revision before the read: the
    /// read itself may show later ones too).
    pub async fn registry_snapshot(&self) -> Result<RegistrySnapshot, ClusterError> {
        let bucket = self.registry_bucket();
        let watch_from = self.registry_revision().await? + 1;
        log::debug!(
            "cluster: registry snapshot up to revision {}",
            watch_from - 1
        );
        let conv_prefix = format!("{}conv.", bucket.prefix);
        let mut records = Vec::new();
        let mut deleted = Vec::new();
        self.replay(
            &bucket.stream,
            format!("{conv_prefix}>"),
            jetstream::consumer::DeliverPolicy::LastPerSubject,
            None,
            "registry snapshot",
            |message| {
                let Some(id) = message
                    .subject
                    .as_str()
                    .strip_prefix(conv_prefix.as_str())
                    .and_then(ConversationId::parse)
                else {
                    log::error!(
                        "cluster: registry record under {} has no id",
                        message.subject
                    );
                    return;
                };
                let Ok(info) = message.info() else {
                    // `replay` read the same info before handing the message over.
                    return;
                };
                let revision = info.stream_sequence;
                if is_delete_marker(message) {
                    deleted.push((id, revision));
                    return;
                }
                match serde_json::from_slice::<RegistryRecord>(&message.payload) {
                    Ok(record) => records.push((record, revision)),
                    Err(e) => log::error!(
                        "cluster: unreadable registry record on {}: {e}",
                        message.subject
                    ),
                }
            },
        )
        .await?;
        Ok(RegistrySnapshot {
            records,
            deleted,
            watch_from,
        })
    }

    /// Changes from `revision` on, for the registry actor. Ends when the watch fails (the
    /// caller restarts it from the last revision it saw).
    pub async fn watch_registry(
        &self,
        from: u64,
    ) -> Result<impl futures_util::Stream<Item = (u64, Option<RegistryChange>)>, ClusterError> {
        let watch = self
            .registry_bucket()
            .watch_all_from_revision(from)
            .await
            .map_err(|e| ClusterError::new("registry watch", e))?;
        let stats = self.clone();
        Ok(watch
            .take_while(|entry| std::future::ready(entry.is_ok()))
            .filter_map(move |entry| {
                let entry = entry.expect("errors end the stream above");
                stats.stats().count_watch_event();
                let change = entry
                    .key
                    .strip_prefix("conv.")
                    .and_then(ConversationId::parse)
                    .and_then(|id| match entry.operation {
                        kv::Operation::Put => match serde_json::from_slice(&entry.value) {
                            Ok(record) => Some(RegistryChange::Put {
                                record,
                                revision: entry.revision,
                            }),
                            Err(e) => {
                                log::error!(
                                    "cluster: unreadable registry record {}: {e}",
                                    entry.key
                                );
                                None
                            }
                        },
                        kv::Operation::Delete | kv::Operation::Purge => {
                            Some(RegistryChange::Deleted {
                                id,
                                revision: entry.revision,
                            })
                        }
                    });
                std::future::ready(Some((entry.revision, change)))
            }))
    }
}
