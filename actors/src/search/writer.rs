//! The search index's writer thread: rounds of document jobs committed together, the
//! startup reconciliation against the display logs (their tails read on a thread of lower
//! priority), and the scans that index a conversation from its log. Started by
//! [`SearchIndex::open`](super::SearchIndex::open); fed through [`Job`]s; shares
//! [`Shared`] with the handles and the query thread.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{
    store, DeleteDone, Job, Observed, PendingScan, Shared, TurnCollector, BATCH_DOCS, BATCH_WINDOW,
    COMMIT_LINGER, RESCAN_DELAY, STARTUP_SYNC_DELAY,
};
use crate::ids::ConversationId;
use crate::metrics::Metrics;
use crate::storage::display_log;
use crate::storage::layout::Layout;

/// The writer thread's state.
pub(super) struct Writer {
    /// The index.
    pub(super) store: store::Store,
    /// The index was empty when opened: the first sync scans everything (a rebuild).
    pub(super) fresh: bool,
    /// Where the display logs are.
    pub(super) layout: Layout,
    /// Shared with the handles.
    pub(super) shared: Arc<Shared>,
    /// Scan order (first come, first scanned); entries of `shared.scans`.
    pub(super) order: VecDeque<ConversationId>,
    /// When the startup sync began, for the "caught up" log line.
    pub(super) started_sync: Option<(Instant, usize)>,
    /// When the index was opened: the startup sync waits until [`STARTUP_SYNC_DELAY`] after.
    pub(super) opened: Instant,
}

impl Writer {
    /// Jobs first; between them, scans back to back while any is due; asleep otherwise.
    pub(super) fn run(mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            let job = if self.order.is_empty() {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return self.finish(),
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(mpsc::TryRecvError::Disconnected) => return self.finish(),
                    Err(mpsc::TryRecvError::Empty) => {
                        if self.scan_next() {
                            continue;
                        }
                        // Nothing due yet (a scan waiting for the log writer): a nap that
                        // any job ends.
                        match jobs.recv_timeout(Duration::from_millis(20)) {
                            Ok(job) => job,
                            Err(mpsc::RecvTimeoutError::Timeout) => continue,
                            Err(mpsc::RecvTimeoutError::Disconnected) => return self.finish(),
                        }
                    }
                }
            };
            if !self.round(job, &jobs) {
                return self.finish();
            }
            self.scan_next();
        }
    }

    /// Handles `first` and whatever else is queued, within [`BATCH_WINDOW`], in one
    /// transaction. `false` when told to stop.
    fn round(&mut self, first: Job, jobs: &mpsc::Receiver<Job>) -> bool {
        let started = Instant::now();
        let mut docs = 0;
        let mut doc_jobs = 0;
        let mut next = Some(first);
        let mut keep_running = true;
        let mut answers: Vec<(DeleteDone, Result<(), String>)> = Vec::new();
        while let Some(job) = next.take() {
            if !self.store.in_transaction() {
                if let Err(e) = self.store.begin() {
                    self.failed("begin", &e);
                }
            }
            match job {
                Job::Docs {
                    conversation,
                    docs: d,
                    settled,
                } => {
                    self.shared.queued_docs.fetch_sub(1, Ordering::Relaxed);
                    doc_jobs += 1;
                    match self.store.add(&conversation, &d, settled) {
                        Ok(n) => {
                            docs += n;
                            self.shared
                                .metrics
                                .search_documents
                                .fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) => {
                            self.failed("add", &e);
                            self.want_scan(conversation, Some(settled));
                        }
                    }
                }
                Job::Sync { conversations } => self.sync(conversations),
                Job::Restored { conversation } => self.restored(conversation),
                Job::Delete { conversation, done } => {
                    self.forget_scan(&conversation);
                    let res = self
                        .store
                        .remove(&conversation.to_string())
                        .map_err(|e| e.to_string());
                    answers.push((done, res));
                }
                Job::Wake => {}
                Job::Shutdown => keep_running = false,
            }
            if !keep_running
                || docs >= BATCH_DOCS
                || started.elapsed() >= BATCH_WINDOW
                || self.shared.queries_waiting.load(Ordering::SeqCst) > 0
            {
                break;
            }
            next = jobs.try_recv().ok();
            let linger = COMMIT_LINGER.saturating_sub(started.elapsed());
            if next.is_none() && doc_jobs > 0 && answers.is_empty() && !linger.is_zero() {
                // More documents are likely on their way (see COMMIT_LINGER); a query that
                // waits sends `Wake`, which ends the wait and, being counted, the round.
                next = jobs.recv_timeout(linger).ok();
            }
        }
        self.commit();
        if doc_jobs > 0 {
            *self
                .shared
                .docs_committed
                .lock()
                .unwrap_or_else(|e| e.into_inner()) += doc_jobs;
            self.shared.docs_progress.notify_all();
        }
        for (done, res) in answers {
            let _ = done.send(res);
        }
        keep_running
    }

    /// Commits the open transaction, if any.
    fn commit(&mut self) {
        if self.store.in_transaction() {
            if let Err(e) = self.store.commit() {
                self.failed("commit", &e);
            }
        }
        self.shared.committed.send_modify(|n| *n += 1);
    }

    fn failed(&self, what: &str, e: &rusqlite::Error) {
        Metrics::inc(&self.shared.metrics.search_failures);
        log::error!("search index: {what} failed: {e}");
    }

    fn finish(mut self) {
        self.commit();
        log::debug!("search writer stopped");
    }

    /// A conversation taken over in a cluster: its log may now hold entries another node
    /// wrote; scan it from where the index stands (from the start when the index is ahead of
    /// the log, which the takeover's rebuilt log can make it).
    fn restored(&mut self, id: ConversationId) {
        let indexed = match self.store.state(&id) {
            Ok(state) => state.map(|(_, seq)| seq),
            Err(e) => {
                self.failed("read", &e);
                None
            }
        };
        let last = last_seqs(&self.layout, &[id]).pop().flatten();
        log::debug!("search index: {id} taken over: indexed up to {indexed:?}, log up to {last:?}");
        // The index is ahead of the rebuilt log (it held entries the stream did not keep):
        // start this conversation over.
        if indexed.is_some_and(|seq| last.is_none_or(|l| l < seq)) {
            if let Err(e) = self.store.remove(&id.to_string()) {
                self.failed("remove", &e);
            }
        }
        // `SearchIndex::restored` already put it in the scan queue, and live documents that
        // arrived since wait for that scan: it always runs (it reads what is past the index).
        self.want_scan(id, None);
    }

    /// The startup reconciliation, no earlier than [`STARTUP_SYNC_DELAY`] after the index
    /// opened: drop documents of conversations that are gone; queue a scan of each
    /// conversation the index lacks or whose log ends past it (the log tails are read at low
    /// priority, [`last_seqs`]; none when the index is new: everything is scanned). Then gives
    /// back the page cache the comparison filled.
    fn sync(&mut self, conversations: Vec<ConversationId>) {
        let wait = STARTUP_SYNC_DELAY.saturating_sub(self.opened.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let existing: HashSet<ConversationId> = conversations.iter().copied().collect();
        let indexed: HashMap<String, u64> = match self.store.conversations() {
            Ok(rows) => rows.into_iter().collect(),
            Err(e) => {
                self.failed("read", &e);
                HashMap::new()
            }
        };
        for id in indexed.keys() {
            if ConversationId::parse(id).is_none_or(|c| !existing.contains(&c)) {
                if let Err(e) = self.store.remove(id) {
                    self.failed("remove", &e);
                }
            }
        }
        let mut behind = 0;
        // A new index scans everything: no log tail needs reading.
        let lasts = if self.fresh {
            vec![None; conversations.len()]
        } else {
            last_seqs(&self.layout, &conversations)
        };
        for (id, last) in conversations.into_iter().zip(lasts) {
            let needs = match indexed.get(&id.to_string()) {
                None => last.is_some(),
                // The index is ahead of the log (a crash took entries the index had already
                // taken): start this conversation over.
                Some(seq) if last.is_none_or(|l| l < *seq) => {
                    log::info!("search index: {id} is ahead of its log; indexing it again");
                    if let Err(e) = self.store.remove(&id.to_string()) {
                        self.failed("remove", &e);
                    }
                    last.is_some()
                }
                Some(seq) => last.is_some_and(|l| l > *seq),
            };
            if needs || self.fresh {
                behind += 1;
                self.want_scan(id, None);
            }
        }
        if behind > 0 {
            log::info!(
                "search index: {behind} conversations to index from their logs{}",
                if self.fresh { " (new index)" } else { "" }
            );
            self.started_sync = Some((Instant::now(), behind));
        }
        self.fresh = false;
        // The comparison's maps and tail reads are garbage now: give them back (this thread's
        // malloc arena keeps freed memory otherwise).
        drop(indexed);
        drop(existing);
        self.store.release_memory();
        crate::memory::trim();
    }

    /// Queues a scan of `conversation` (now), remembering `wanted`.
    fn want_scan(&mut self, conversation: ConversationId, wanted: Option<u64>) {
        let mut scans = self.shared.scans.lock().unwrap_or_else(|e| e.into_inner());
        let entry = scans.entry(conversation).or_insert_with(|| {
            self.order.push_back(conversation);
            PendingScan {
                wanted: None,
                due: Instant::now(),
            }
        });
        entry.wanted = entry.wanted.max(wanted);
        Metrics::set(
            &self.shared.metrics.search_pending_scans,
            scans.len() as i64,
        );
    }

    fn forget_scan(&mut self, conversation: &ConversationId) {
        let mut scans = self.shared.scans.lock().unwrap_or_else(|e| e.into_inner());
        if scans.remove(conversation).is_some() {
            self.order.retain(|c| c != conversation);
        }
        Metrics::set(
            &self.shared.metrics.search_pending_scans,
            scans.len() as i64,
        );
    }

    /// Scans the first due conversation of the queue (also picks up ones the live path
    /// queued), in its own transaction. `false` when none was due.
    fn scan_next(&mut self) -> bool {
        {
            // Conversations the live path put in `scans` (queue full) join the order here.
            let scans = self.shared.scans.lock().unwrap_or_else(|e| e.into_inner());
            if scans.len() != self.order.len() {
                let known: HashSet<ConversationId> = self.order.iter().copied().collect();
                self.order
                    .extend(scans.keys().filter(|c| !known.contains(c)).copied());
            }
        }
        let Some(id) = self.order.pop_front() else {
            return false;
        };
        let due = {
            let scans = self.shared.scans.lock().unwrap_or_else(|e| e.into_inner());
            scans.get(&id).map(|s| s.due)
        };
        // Gone from the queue (deleted meanwhile): on to the next.
        let Some(due) = due else { return true };
        if due > Instant::now() {
            self.order.push_back(id);
            return false;
        }
        let indexed = match self.store.state(&id) {
            Ok(s) => s.map(|(_, seq)| seq),
            Err(e) => {
                self.failed("read", &e);
                self.order.push_back(id);
                return false;
            }
        };
        let dir = self.layout.conversation_dir(&id);
        let mut collector = TurnCollector::default();
        let mut docs = Vec::new();
        let mut settled = None;
        let read = display_log::for_each_entry(&dir, |seq, entry: Value| {
            if let Observed::Settled { seq, doc } = collector.observe(seq, &entry) {
                if indexed.is_none_or(|s| seq > s) {
                    docs.extend(doc);
                    settled = Some(seq);
                }
            }
        });
        if let Err(e) = read {
            log::warn!("search index: cannot read the log of {id}: {e}");
        }
        let mut added = 0;
        if let Some(settled) = settled {
            let res = self.store.begin().and_then(|()| {
                let n = self.store.add(&id, &docs, settled)?;
                self.store.commit()?;
                Ok(n)
            });
            match res {
                Ok(n) => added = n,
                Err(e) => {
                    self.failed("scan", &e);
                    if self.store.in_transaction() {
                        let _ = self.store.commit();
                    }
                }
            }
        }
        self.shared
            .metrics
            .search_documents
            .fetch_add(added as u64, Ordering::Relaxed);
        let now_at = settled.or(indexed);
        let mut scans = self.shared.scans.lock().unwrap_or_else(|e| e.into_inner());
        let done = match scans.get(&id).and_then(|s| s.wanted) {
            Some(wanted) => now_at.is_some_and(|s| s >= wanted),
            None => true,
        };
        if done {
            scans.remove(&id);
        } else if let Some(s) = scans.get_mut(&id) {
            s.due = Instant::now() + RESCAN_DELAY;
            self.order.push_back(id);
        }
        let left = scans.len();
        Metrics::set(&self.shared.metrics.search_pending_scans, left as i64);
        drop(scans);
        self.shared.committed.send_modify(|n| *n += 1);
        if let Some((since, total)) = self.started_sync {
            let scanned = total.saturating_sub(left);
            if left == 0 {
                log::info!(
                    "search index: caught up ({total} conversations scanned in {:.1} s)",
                    since.elapsed().as_secs_f64()
                );
                self.started_sync = None;
                self.store.release_memory();
                crate::memory::trim();
            } else if scanned % 1000 == 0 {
                log::info!("search index: {scanned} of {total} conversations scanned");
            }
        }
        true
    }
}

/// Nice increment of the thread that reads the log tails at startup: it yields the CPU to the
/// threads serving clients (on a 2-core machine the 10,000 tail reads of the catch-up check
/// otherwise took a core for 100+ ms while the first `listConversations` was answered).
const TAIL_READER_NICE: libc::c_int = 10;

/// [`last_seq`] of each of `conversations`' logs, in order. Read on a short-lived thread of
/// lower CPU priority ([`TAIL_READER_NICE`]; a thread's nice value can only be raised, hence a
/// thread of its own rather than the writer); the writer waits for it, so the startup
/// reconciliation still happens before any other job, as if it read them itself. Read here
/// when that thread cannot be started.
fn last_seqs(layout: &Layout, conversations: &[ConversationId]) -> Vec<Option<u64>> {
    let read = |layout: &Layout, ids: &[ConversationId]| -> Vec<Option<u64>> {
        ids.iter()
            .map(|id| last_seq(&layout.conversation_dir(id)))
            .collect()
    };
    let (l, ids) = (layout.clone(), conversations.to_vec());
    let reader = std::thread::Builder::new()
        .name("roundtable-search-tails".into())
        .spawn(move || {
            lower_this_threads_priority(TAIL_READER_NICE);
            read(&l, &ids)
        });
    match reader.map(JoinHandle::join) {
        Ok(Ok(lasts)) => lasts,
        _ => read(layout, conversations),
    }
}

/// Adds `increment` to the calling thread's nice value (relative, so a server started under
/// `nice` keeps the difference; on Linux `nice` applies to the calling thread only); a no-op
/// elsewhere.
fn lower_this_threads_priority(increment: libc::c_int) {
    #[cfg(target_os = "linux")]
    // SAFETY: nice has no memory preconditions; under Linux/NPTL the nice value is a
    // per-thread attribute, so only this thread is lowered.
    unsafe {
        libc::nice(increment);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = increment;
}

/// The seq of the last entry of the log in `dir` (reads its tail only).
fn last_seq(dir: &Path) -> Option<u64> {
    let path = dir.join(display_log::FILE_NAME);
    match std::fs::metadata(&path) {
        Ok(m) => display_log::last_entry_at(&path, m.len())
            .ok()
            .flatten()
            .map(|(seq, _)| seq),
        // A TypeAgent log not imported yet: scan it.
        Err(_) => dir
            .join(display_log::LEGACY_FILE_NAME)
            .is_file()
            .then_some(u64::MAX),
    }
}
