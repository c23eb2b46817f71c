//! Content search: `searchConversationContent` over every conversation's user requests and
//! agent output, loaded or not.
//!
//! Who talks to it: each [`Conversation`](crate::conversation::Conversation) hands it the
//! documents its entries complete ([`SearchIndex::add`], never blocking: a send on a channel);
//! the registry tells it at start which conversations exist ([`SearchIndex::sync`]), deletes a
//! conversation's documents before a delete answers ([`SearchIndex::delete`]) and asks it
//! queries ([`SearchIndex::query`]). It runs on two threads of its own, never on an arbiter:
//!
//! - the **writer** (`writer.rs`) owns the index file ([`store`], SQLite FTS5): it batches
//!   documents into one transaction per round (at most [`BATCH_WINDOW`] old, so a turn is
//!   searchable well within a second), and between rounds *scans* conversations whose
//!   documents it may have missed;
//! - the **query thread** answers searches through its own read connection (WAL: readers never
//!   wait for the writer).
//!
//! At start a third, short-lived thread of low CPU priority reads every conversation's log
//! tail for the writer's reconciliation (`last_seqs`), so that check does not slow the
//! threads answering the first clients.
//!
//! A query sees every document handed over before it was asked (so a turn whose completion a
//! client has seen is searchable by that client's next search): it waits, at most
//! [`FRESHNESS_WAIT`], until the writer has committed every document job sent before it, and
//! the writer cuts its round short when a query waits.
//!
//! A scan reads a conversation's display log from the start and indexes what lies past its
//! `indexed_seq` with the same [`TurnCollector`] the live path uses. Conversations are
//! scanned when the index is new (missing, corrupt, another format, `--reindex`: the rebuild
//! is a scan of everything), when their log ends past what the index holds at start (an
//! unclean stop lost documents that were still queued), and when the live queue was full
//! ([`MAX_QUEUED_DOCS`]): while a conversation waits for its scan, its live documents are not
//! queued (the scan will read them from the file; it retries until the file holds the last
//! one it was told about).

pub mod query;
mod ranking;
pub mod store;
pub mod text;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::ids::ConversationId;
use crate::metrics::Metrics;
use crate::storage::layout::Layout;

pub use query::QueryError;
pub use ranking::run_query;
pub use text::{Doc, DocKind, Observed, TurnCollector};
use writer::Writer;

/// Live document jobs queued for the writer at most; past it, the conversation is scanned
/// instead (nothing is dropped, nothing waits).
pub const MAX_QUEUED_DOCS: usize = 16_384;
/// Queries waiting for the query thread at most; past it a query is refused ([`SearchError::Busy`]).
pub const MAX_QUEUED_QUERIES: usize = 64;
/// A writer round commits after this long at most (documents are searchable after a commit).
pub const BATCH_WINDOW: Duration = Duration::from_millis(200);
/// A query waits at most this long for the documents sent before it to be committed (the
/// writer commits early when a query waits, so this only bites when the disk stalls).
pub const FRESHNESS_WAIT: Duration = Duration::from_secs(1);
/// Documents per transaction at most.
const BATCH_DOCS: usize = 4096;
/// The startup reconciliation begins no earlier than this after the index opened, so the
/// first clients (a restart's reconnecting ones) are served first: its read of the index's
/// rows and of every log tail, begun at once, delayed the first `listConversations` of a
/// 10,000-conversation instance by ~3 ms at the median and up to 10 ms (BENCHMARKS.md,
/// 2026-12-05). The job keeps its place: every job queued after it still waits for it.
pub const STARTUP_SYNC_DELAY: Duration = Duration::from_millis(250);
/// A round that holds documents waits this long for more before it commits, unless a query
/// waits for them (it wakes the writer) or a delete waits for its answer: under a stream of
/// turns one commit carries many (a commit per turn was 6% of the server's CPU under
/// `fanout`), and a turn is searchable this much later at worst.
const COMMIT_LINGER: Duration = Duration::from_millis(10);
/// A scan whose file did not yet hold the last document it was told about is retried after
/// this long (the log writer has not written it yet).
const RESCAN_DELAY: Duration = Duration::from_millis(500);
/// Most conversations one query answers.
pub const MAX_MATCHES: usize = 100;
/// Default `maxMatches`.
pub const DEFAULT_MATCHES: usize = 10;

/// Why a search was not answered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SearchError {
    /// The query itself is refused.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// [`MAX_QUEUED_QUERIES`] are waiting.
    #[error("Search is busy ({MAX_QUEUED_QUERIES} queries waiting); try again")]
    Busy,
    /// The index could not be read.
    #[error("Search index unavailable: {0}")]
    Unavailable(String),
}

/// One conversation that matched (serialized as it travels between cluster nodes).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ContentHit {
    /// The conversation.
    pub conversation: ConversationId,
    /// In (0, 1), higher is better.
    pub score: f64,
    /// Its best matching passages, matched words in `**…**`.
    pub snippets: Vec<String>,
    /// The seq of its best matching document's entry (the `user-request`, or the
    /// `command-result` that ended the output), where a client can open the conversation.
    #[serde(default)]
    pub seq: Option<u64>,
}

/// Hits a query answers: `maxMatches`, else [`DEFAULT_MATCHES`], at most [`MAX_MATCHES`].
pub fn effective_max(max: Option<u64>) -> usize {
    max.map_or(DEFAULT_MATCHES, |m| (m as usize).min(MAX_MATCHES))
}

/// A conversation waiting for a scan.
struct PendingScan {
    /// The highest seq of a live document not queued for it: the scan is done once the index
    /// holds it.
    wanted: Option<u64>,
    /// When to try (a retry waits [`RESCAN_DELAY`]).
    due: Instant,
}

/// Told once a delete is committed (or why it failed).
type DeleteDone = oneshot::Sender<Result<(), String>>;

/// What the writer is asked.
enum Job {
    /// Documents of one conversation, completed up to `settled`.
    Docs {
        conversation: ConversationId,
        docs: Vec<Doc>,
        settled: u64,
    },
    /// The conversations that exist, at start.
    Sync { conversations: Vec<ConversationId> },
    /// A conversation's files were rebuilt from the cluster's log stream (this node took it
    /// over): index what its log holds beyond the index.
    Restored { conversation: ConversationId },
    /// Remove a conversation's documents; answered once that is committed.
    Delete {
        conversation: ConversationId,
        done: DeleteDone,
    },
    /// A conversation was put in the scan queue by the live path: look at the queue (sent
    /// once per conversation put there, so bounded like the queue).
    Wake,
    /// Commit and stop.
    Shutdown,
}

/// A query for the query thread.
struct QueryJob {
    text: String,
    max: usize,
    /// `Docs` jobs sent before this query: it answers once that many are committed.
    docs_sent: u64,
    reply: oneshot::Sender<Result<Vec<ContentHit>, SearchError>>,
}

/// State both sides share.
struct Shared {
    /// To the writer.
    jobs: mpsc::Sender<Job>,
    /// `Docs` jobs in `jobs` (bounded by [`MAX_QUEUED_DOCS`]).
    queued_docs: AtomicUsize,
    /// `Docs` jobs ever sent (counted before the send).
    docs_sent: AtomicU64,
    /// `Docs` jobs the writer has handled and committed; queries wait on `docs_progress`.
    docs_committed: Mutex<u64>,
    /// Signalled after each commit.
    docs_progress: Condvar,
    /// Queries waiting for a commit: the writer ends its round early while any do.
    queries_waiting: AtomicUsize,
    /// Conversations waiting for a scan; bounded by the registry's size.
    scans: Mutex<HashMap<ConversationId, PendingScan>>,
    /// To the query thread.
    queries: mpsc::Sender<QueryJob>,
    /// Jobs in `queries` (bounded by [`MAX_QUEUED_QUERIES`]).
    queued_queries: AtomicUsize,
    /// Counters.
    metrics: Arc<Metrics>,
    /// The threads, joined at shutdown.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Bumped after each commit of the writer (a round or a scan): lets a watcher (tests, the
    /// load harness through `/metrics`) await "more is searchable" instead of polling.
    committed: tokio::sync::watch::Sender<u64>,
}

/// The handle every actor holds. Cheap to clone.
#[derive(Clone)]
pub struct SearchIndex {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SearchIndex")
    }
}

/// `<instance>/search/index.sqlite`.
pub fn index_path(layout: &Layout) -> PathBuf {
    layout.root.join("search").join("index.sqlite")
}

/// Creates the index file empty (an empty file is an empty SQLite database) for its owner
/// only, as every instance file is: SQLite would create it 0644, and gives its `-wal` and
/// `-shm` files the main file's mode.
fn create_private(path: &Path) -> std::io::Result<()> {
    crate::storage::durable::private_file_options()
        .open(path)
        .map(drop)
}

/// Moves an unusable index file (and its WAL) away; it is derived data, so it is removed
/// rather than kept.
fn discard(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", path.display()));
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("search index: cannot remove {}: {e}", p.display());
            }
        }
    }
}

impl SearchIndex {
    /// Opens the index of `layout` (creating, resetting or rebuilding it as needed) and starts
    /// its threads. `reindex`: throw the index away and rebuild it from the logs.
    pub fn open(
        layout: &Layout,
        reindex: bool,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<SearchIndex> {
        let path = index_path(layout);
        crate::storage::durable::private_dir_builder()
            .recursive(true)
            .create(path.parent().expect("has a parent"))?;
        if reindex {
            log::info!("search index: --reindex: rebuilding from the display logs");
            discard(&path);
        }
        create_private(&path)?;
        let (store, fresh) = match store::Store::open(&path) {
            Ok(opened) => opened,
            Err(e) => {
                log::warn!(
                    "search index {} is unusable ({e}); rebuilding it from the display logs",
                    path.display()
                );
                discard(&path);
                create_private(&path)?;
                store::Store::open(&path).map_err(std::io::Error::other)?
            }
        };
        let reader = store::open_reader(&path).map_err(std::io::Error::other)?;
        let (jobs, job_rx) = mpsc::channel();
        let (queries, query_rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            jobs,
            queued_docs: AtomicUsize::new(0),
            docs_sent: AtomicU64::new(0),
            docs_committed: Mutex::new(0),
            docs_progress: Condvar::new(),
            queries_waiting: AtomicUsize::new(0),
            scans: Mutex::new(HashMap::new()),
            queries,
            queued_queries: AtomicUsize::new(0),
            metrics,
            threads: Mutex::new(Vec::new()),
            committed: tokio::sync::watch::Sender::new(0),
        });
        let writer = Writer {
            store,
            fresh,
            layout: layout.clone(),
            shared: shared.clone(),
            order: VecDeque::new(),
            started_sync: None,
            opened: Instant::now(),
        };
        let w = std::thread::Builder::new()
            .name("roundtable-search".into())
            .spawn(move || writer.run(job_rx))?;
        let q_shared = shared.clone();
        let q = std::thread::Builder::new()
            .name("roundtable-search-query".into())
            .spawn(move || answer_queries(reader, query_rx, q_shared))?;
        shared
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([w, q]);
        Ok(SearchIndex { shared })
    }

    /// Tells the writer which conversations exist (once, at start): documents of others go,
    /// new or behind ones are scanned.
    pub fn sync(&self, conversations: Vec<ConversationId>) {
        let _ = self.shared.jobs.send(Job::Sync { conversations });
    }

    /// `conversation`'s files were rebuilt from the cluster's log stream: what its log holds
    /// beyond the index is scanned (as at start for a conversation that is behind).
    pub fn restored(&self, conversation: ConversationId) {
        // Pending at once, before the conversation's actor starts: its live documents then
        // wait for the scan (else the first of them would move the index past the history).
        self.shared
            .scans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(conversation)
            .or_insert(PendingScan {
                wanted: None,
                due: Instant::now(),
            });
        let _ = self.shared.jobs.send(Job::Restored { conversation });
    }

    /// Hands over what one entry of `conversation` settled (from its [`TurnCollector`]).
    /// Never blocks.
    pub fn add(&self, conversation: ConversationId, settled: u64, doc: Option<Doc>) {
        let shared = &self.shared;
        {
            let mut scans = shared.scans.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(scan) = scans.get_mut(&conversation) {
                // Waiting for a scan: the scan reads this from the file.
                scan.wanted = Some(scan.wanted.map_or(settled, |w| w.max(settled)));
                return;
            }
            if shared.queued_docs.load(Ordering::Relaxed) >= MAX_QUEUED_DOCS {
                log::debug!(
                    "conversation {conversation}: search queue full; the conversation will be scanned"
                );
                scans.insert(
                    conversation,
                    PendingScan {
                        wanted: Some(settled),
                        due: Instant::now() + RESCAN_DELAY,
                    },
                );
                Metrics::inc(&shared.metrics.search_overflows);
                Metrics::set(&shared.metrics.search_pending_scans, scans.len() as i64);
                drop(scans);
                let _ = shared.jobs.send(Job::Wake);
                return;
            }
        }
        shared.queued_docs.fetch_add(1, Ordering::Relaxed);
        shared.docs_sent.fetch_add(1, Ordering::SeqCst);
        let job = Job::Docs {
            conversation,
            docs: doc.into_iter().collect(),
            settled,
        };
        if shared.jobs.send(job).is_err() {
            shared.queued_docs.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Removes `conversation`'s documents; resolves once that is committed.
    pub fn delete(&self, conversation: ConversationId) -> oneshot::Receiver<Result<(), String>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::SendError(Job::Delete { done, .. })) =
            self.shared.jobs.send(Job::Delete { conversation, done })
        {
            let _ = done.send(Err("the search writer has stopped".into()));
        }
        rx
    }

    /// Runs a query on the query thread.
    pub fn query(
        &self,
        text: String,
        max: Option<u64>,
    ) -> oneshot::Receiver<Result<Vec<ContentHit>, SearchError>> {
        let (reply, rx) = oneshot::channel();
        let shared = &self.shared;
        if shared.queued_queries.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED_QUERIES {
            shared.queued_queries.fetch_sub(1, Ordering::Relaxed);
            let _ = reply.send(Err(SearchError::Busy));
            return rx;
        }
        let max = effective_max(max);
        let docs_sent = shared.docs_sent.load(Ordering::SeqCst);
        if let Err(mpsc::SendError(job)) = shared.queries.send(QueryJob {
            text,
            max,
            docs_sent,
            reply,
        }) {
            shared.queued_queries.fetch_sub(1, Ordering::Relaxed);
            let _ = job.reply.send(Err(SearchError::Unavailable(
                "the query thread has stopped".into(),
            )));
        }
        rx
    }

    /// Changes after each commit of the writer.
    pub fn committed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.committed.subscribe()
    }

    /// Conversations waiting for a scan (a rebuild in progress shows here).
    pub fn pending_scans(&self) -> usize {
        self.shared
            .scans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Commits what is queued and stops both threads (blocking; called once the
    /// conversations have stopped).
    pub fn shutdown(&self) {
        let _ = self.shared.jobs.send(Job::Shutdown);
        // Dropping our senders is not possible (other clones hold them); the query thread
        // stops on an empty query it recognises.
        let (reply, _rx) = oneshot::channel();
        let _ = self.shared.queries.send(QueryJob {
            text: String::new(),
            max: 0,
            docs_sent: 0,
            reply,
        });
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
    }
}

/// The query thread.
fn answer_queries(
    conn: rusqlite::Connection,
    queries: mpsc::Receiver<QueryJob>,
    shared: Arc<Shared>,
) {
    while let Ok(job) = queries.recv() {
        shared.queued_queries.fetch_sub(1, Ordering::Relaxed);
        if job.max == 0 && job.text.is_empty() {
            break; // shutdown
        }
        Metrics::inc(&shared.metrics.search_queries);
        wait_for_documents(&shared, job.docs_sent);
        let res = run_query(&conn, &job.text, job.max);
        if let Err(SearchError::Unavailable(e)) = &res {
            Metrics::inc(&shared.metrics.search_failures);
            log::error!("search query failed: {e}");
        }
        let _ = job.reply.send(res);
    }
    log::debug!("search query thread stopped");
}

/// Waits (at most [`FRESHNESS_WAIT`]) until `docs_sent` document jobs are committed.
fn wait_for_documents(shared: &Shared, docs_sent: u64) {
    let committed = shared
        .docs_committed
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if *committed >= docs_sent {
        return;
    }
    shared.queries_waiting.fetch_add(1, Ordering::SeqCst);
    // A writer lingering for more documents commits now.
    let _ = shared.jobs.send(Job::Wake);
    let (committed, timeout) = shared
        .docs_progress
        .wait_timeout_while(committed, FRESHNESS_WAIT, |c| *c < docs_sent)
        .unwrap_or_else(|e| e.into_inner());
    shared.queries_waiting.fetch_sub(1, Ordering::SeqCst);
    if timeout.timed_out() {
        log::warn!(
            "search: answering from the index as it is, {} documents behind",
            docs_sent - *committed
        );
    }
}

#[cfg(test)]
mod tests;
