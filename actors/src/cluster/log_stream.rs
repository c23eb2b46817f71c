//! Conversation files in a JetStream stream (docs/cluster.md "Durability", slice 4): every
//! append to and every replacement of a conversation's files (display log, request journal,
//! chat history) is also published to stream `RT_LOG`, subject `rt.log.<id>`, and a write
//! barrier ([`LogWriter::sync`](crate::storage::log_writer::LogWriter::sync)) resolves only once
//! JetStream has stored everything queued before it. So an acknowledged turn survives the node
//! and its disk: the node that takes a conversation over rebuilds its files from the stream
//! ([`Cluster::restore_conversation`]) before the conversation actor opens them.
//!
//! Records: headers `Rt-File` (the path inside the conversation directory) and `Rt-Op`
//! (`append` or `replace`); a record larger than the NATS server's `max_payload` goes as
//! several messages with `Rt-Part: <k>/<n>` that the restore joins. Publishes are pipelined:
//! one task publishes in queue order, a second awaits the acknowledgements in the same order.
//! A publish that fails marks its conversation failed: every later barrier of that conversation
//! answers the error (nothing is acknowledged past a gap) until the conversation is closed and
//! rebuilt from the stream on its next load.
//!
//! Bounds: bytes waiting to be published count toward the log writer's backpressure
//! ([`LogReplicator::queued_bytes`]); acknowledgements in flight are at most
//! [`MAX_IN_FLIGHT`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch, Notify};

use super::{Cluster, ClusterError};
use crate::ids::ConversationId;

/// The stream's name.
pub const LOG_STREAM: &str = "RT_LOG";
/// Publish acknowledgements awaited at once.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Subject of a conversation's records.
pub fn log_subject(id: ConversationId) -> String {
    format!("rt.log.{id}")
}

/// What a record does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Bytes added at the end.
    Append,
    /// The whole content.
    Replace,
}

impl FileOp {
    fn as_str(self) -> &'static str {
        match self {
            FileOp::Append => "append",
            FileOp::Replace => "replace",
        }
    }
}

/// One write waiting to be published.
struct Record {
    /// Position in the replicator's queue (barriers wait for it).
    number: u64,
    conversation: ConversationId,
    file: String,
    op: FileOp,
    bytes: Vec<u8>,
}

/// Publishes conversation file writes to the stream; cheap to clone.
#[derive(Clone)]
pub struct LogReplicator {
    inner: Arc<Inner>,
}

struct Inner {
    /// `<instance>/conversations`: paths under it are replicated.
    conversations_dir: PathBuf,
    tx: mpsc::UnboundedSender<Record>,
    /// Numbers given out so far.
    queued: AtomicU64,
    /// Everything up to this number is stored (or failed, see `failed`).
    stored: watch::Receiver<u64>,
    /// Bytes queued and not yet published.
    queued_bytes: AtomicUsize,
    /// Woken when `queued_bytes` falls.
    drained: Notify,
    /// Conversations whose stream has a gap: (number of the failed record, why).
    failed: Mutex<HashMap<ConversationId, (u64, String)>>,
}

impl LogReplicator {
    /// Starts the publishing tasks (on the current runtime, the server's main one) for files
    /// under `conversations_dir`.
    pub fn start(cluster: &Cluster, conversations_dir: PathBuf) -> LogReplicator {
        let (tx, rx) = mpsc::unbounded_channel();
        let (stored_tx, stored_rx) = watch::channel(0);
        let replicator = LogReplicator {
            inner: Arc::new(Inner {
                conversations_dir,
                tx,
                queued: AtomicU64::new(0),
                stored: stored_rx,
                queued_bytes: AtomicUsize::new(0),
                drained: Notify::new(),
                failed: Mutex::default(),
            }),
        };
        let (acks_tx, acks_rx) = mpsc::channel(MAX_IN_FLIGHT);
        tokio::spawn(publish(cluster.clone(), replicator.clone(), rx, acks_tx));
        tokio::spawn(await_acks(replicator.clone(), acks_rx, stored_tx));
        replicator
    }

    /// The conversation and the file inside its directory that `path` names, when it is a
    /// conversation file.
    fn locate(&self, path: &Path) -> Option<(ConversationId, String)> {
        let rest = path.strip_prefix(&self.inner.conversations_dir).ok()?;
        let mut parts = rest.components();
        let id = ConversationId::parse(parts.next()?.as_os_str().to_str()?)?;
        let file = parts.as_path().to_str()?.to_string();
        (!file.is_empty()).then_some((id, file))
    }

    /// Queues a write of `path` (ignored for files that are not a conversation's).
    pub fn record(&self, path: &Path, op: FileOp, bytes: &[u8]) {
        let Some((conversation, file)) = self.locate(path) else {
            return;
        };
        let number = self.inner.queued.fetch_add(1, Ordering::SeqCst) + 1;
        self.inner
            .queued_bytes
            .fetch_add(bytes.len(), Ordering::Relaxed);
        let _ = self.inner.tx.send(Record {
            number,
            conversation,
            file,
            op,
            bytes: bytes.to_vec(),
        });
    }

    /// Bytes waiting to be published.
    pub fn queued_bytes(&self) -> usize {
        self.inner.queued_bytes.load(Ordering::Relaxed)
    }

    /// Resolves once fewer than `limit` bytes wait.
    pub async fn wait_below(&self, limit: usize) {
        loop {
            let notified = self.inner.drained.notified();
            if self.queued_bytes() < limit {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once everything queued so far for the conversations of `paths` is stored:
    /// `Err` when one of them has a gap.
    pub fn barrier(
        &self,
        paths: &[Arc<Path>],
    ) -> impl std::future::Future<Output = Result<(), String>> {
        let target = self.inner.queued.load(Ordering::SeqCst);
        let conversations: Vec<ConversationId> = paths
            .iter()
            .filter_map(|p| self.locate(p))
            .map(|(id, _)| id)
            .collect();
        let mut stored = self.inner.stored.clone();
        let replicator = self.clone();
        async move {
            if !conversations.is_empty() {
                while *stored.borrow_and_update() < target {
                    if stored.changed().await.is_err() {
                        return Err("cluster log stream: the publisher stopped".into());
                    }
                }
            }
            let failed = replicator.inner.failed.lock().unwrap();
            for id in &conversations {
                if let Some((number, why)) = failed.get(id) {
                    if *number <= target {
                        return Err(format!("cluster log stream: {why}"));
                    }
                }
            }
            Ok(())
        }
    }

    /// Forgets a conversation's failure (it was closed; its next load rebuilds from the stream).
    pub fn forget(&self, id: ConversationId) {
        self.inner.failed.lock().unwrap().remove(&id);
    }

    fn fail(&self, id: ConversationId, number: u64, why: String) {
        log::error!("conversation {id}: not stored in the cluster log stream: {why}");
        self.inner
            .failed
            .lock()
            .unwrap()
            .entry(id)
            .or_insert((number, why));
    }
}

/// The publishing task: records in queue order, each split to fit the server's `max_payload`.
async fn publish(
    cluster: Cluster,
    replicator: LogReplicator,
    mut rx: mpsc::UnboundedReceiver<Record>,
    acks: mpsc::Sender<PendingAck>,
) {
    let js = cluster.jetstream();
    let max = (cluster.client().server_info().max_payload.max(8192)) - 4096;
    while let Some(record) = rx.recv().await {
        let len = record.bytes.len();
        let parts: Vec<&[u8]> = if record.bytes.is_empty() {
            vec![&record.bytes[..]]
        } else {
            record.bytes.chunks(max).collect()
        };
        let count = parts.len();
        let subject = log_subject(record.conversation);
        for (k, part) in parts.into_iter().enumerate() {
            let mut headers = HeaderMap::new();
            headers.insert("Rt-File", record.file.as_str());
            headers.insert("Rt-Op", record.op.as_str());
            if count > 1 {
                headers.insert("Rt-Part", format!("{}/{count}", k + 1).as_str());
            }
            match js
                .publish_with_headers(subject.clone(), headers, Bytes::copy_from_slice(part))
                .await
            {
                Ok(ack) => {
                    // Only the last part's acknowledgement completes the record.
                    if k + 1 == count
                        && acks
                            .send((record.number, record.conversation, Some(ack)))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    replicator.fail(record.conversation, record.number, e.to_string());
                    // Barriers still move past it (and answer the failure).
                    if acks
                        .send((record.number, record.conversation, None))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    break;
                }
            }
        }
        replicator
            .inner
            .queued_bytes
            .fetch_sub(len, Ordering::Relaxed);
        replicator.inner.drained.notify_waiters();
    }
}

/// Awaits acknowledgements in publish order and advances the stored mark.
async fn await_acks(
    replicator: LogReplicator,
    mut acks: mpsc::Receiver<PendingAck>,
    stored: watch::Sender<u64>,
) {
    while let Some((number, conversation, ack)) = acks.recv().await {
        if let Some(Err(e)) = match ack {
            Some(ack) => Some(ack.await),
            None => None,
        } {
            replicator.fail(conversation, number, e.to_string());
        }
        let _ = stored.send(number);
    }
}

/// A record's number, its conversation, and JetStream's acknowledgement to wait for (`None`:
/// the publish itself failed, already recorded).
type PendingAck = (
    u64,
    ConversationId,
    Option<jetstream::context::PublishAckFuture>,
);

impl Cluster {
    /// Opens (or creates) the log stream.
    pub(super) async fn open_log_stream(
        js: &jetstream::Context,
    ) -> Result<stream::Stream, ClusterError> {
        js.get_or_create_stream(stream::Config {
            name: LOG_STREAM.into(),
            description: Some("Roundtable conversation files".into()),
            subjects: vec!["rt.log.>".into()],
            storage: stream::StorageType::File,
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| ClusterError::new("cannot open the log stream", e))
    }

    /// Rebuilds `dir` (a conversation's directory) from its records in the stream: the files
    /// exactly as the last owner wrote them. Answers the number of messages read.
    pub async fn restore_conversation(
        &self,
        id: ConversationId,
        dir: &Path,
    ) -> Result<u64, ClusterError> {
        let fail = |e: &dyn std::fmt::Display| {
            ClusterError(format!("restoring {id} from the log stream: {e}"))
        };
        let stream = self.log_stream();
        let consumer = stream
            .create_consumer(jetstream::consumer::push::OrderedConfig {
                deliver_subject: self.client().new_inbox(),
                filter_subject: log_subject(id),
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                replay_policy: jetstream::consumer::ReplayPolicy::Instant,
                ..Default::default()
            })
            .await
            .map_err(|e| fail(&e))?;
        let mut pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.map_err(|e| fail(&e))?;
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        let mut records = 0;
        while pending > 0 {
            let Some(message) = messages.next().await else {
                break;
            };
            let message = message.map_err(|e| fail(&e))?;
            pending = message.info().map(|i| i.pending).unwrap_or(0);
            let headers = message.headers.as_ref();
            let header = |name: &str| {
                headers
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
            };
            let (Some(file), Some(op)) = (header("Rt-File"), header("Rt-Op")) else {
                continue;
            };
            if file.split('/').any(|part| part == ".." || part.is_empty()) {
                log::warn!("conversation {id}: log record for a path outside it ignored: {file:?}");
                continue;
            }
            let content = files.entry(file).or_default();
            // A multi-part record starts over its file with its first part when it replaces.
            let first_part = header("Rt-Part").is_none_or(|p| p.starts_with("1/"));
            if op == "replace" && first_part {
                content.clear();
            }
            content.extend_from_slice(&message.payload);
            records += 1;
        }
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            for (file, content) in files {
                let path = dir.join(&file);
                crate::storage::durable::create_dir_durable(path.parent().expect("inside dir"))
                    .map_err(std::io::Error::other)?;
                crate::storage::durable::write_atomic(&path, &content)
                    .map_err(std::io::Error::other)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| fail(&e))?
        .map_err(|e| fail(&e))?;
        Ok(records)
    }

    /// Removes a deleted conversation's records.
    pub async fn purge_conversation(&self, id: ConversationId) -> Result<(), ClusterError> {
        self.log_stream()
            .purge()
            .filter(log_subject(id))
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::new(&format!("purging {id} from the log stream"), e))
    }
}
