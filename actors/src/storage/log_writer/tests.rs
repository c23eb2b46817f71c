//! The log writer without the node log (`LogWriter::start`): backpressure, error texts,
//! retired directories, the replica hook; files prepared ahead of their first write (with
//! the node log too). The rest with the node log: `node_log/tests.rs`.

use super::*;
use crate::storage::block_on;
use crate::storage::group_commit::Committer;

/// Past the high-water mark producers see `backlogged`; `drained` resolves once the writer
/// has caught up, and everything queued is on disk, in order.
#[test]
fn the_queue_is_bounded_by_backpressure() {
    let dir = tempfile::tempdir().unwrap();
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let path: Arc<Path> = dir.path().join("big.log").into();
    let chunk = 1 << 20;
    // The writer stops at a hold (as under a backup) while the producer queues past the mark.
    let (hold, reached, release) = crate::storage::hold::Hold::for_test();
    writer.hold(hold);
    reached.recv().unwrap();
    let mut saw_backlog = false;
    for i in 0..(QUEUE_HIGH_WATER / chunk + 8) {
        writer.append(&path, vec![b'a' + (i % 26) as u8; chunk]);
        saw_backlog |= writer.backlogged();
    }
    assert!(saw_backlog, "past the high-water mark the producer is told");
    drop((reached, release));
    block_on(writer.drained());
    assert!(writer.queued_bytes() < QUEUE_LOW_WATER);
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    assert_eq!(writer.queued_bytes(), 0);
    let written = std::fs::read(&path).unwrap();
    assert_eq!(written.len(), (QUEUE_HIGH_WATER / chunk + 8) * chunk);
    assert!(written
        .chunks(chunk)
        .enumerate()
        .all(|(i, c)| c[0] == b'a' + (i % 26) as u8));
}

/// A failed write answers with the file's role and the OS error, never its path (the
/// answer reaches clients); `/health`'s text keeps the path for the operator.
#[test]
fn errors_toward_clients_name_no_paths() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let writer = LogWriter::start(metrics.clone(), dir.path().to_path_buf());
    // A regular file where the conversation's directory should be.
    std::fs::write(dir.path().join("conversation"), b"not a directory").unwrap();
    let history: Arc<Path> = dir
        .path()
        .join("conversation/sessions/chat/history.jsonl")
        .into();
    let replaced = block_on(writer.replace(&history, b"{}\n".to_vec())).unwrap();
    assert_eq!(
        replaced.unwrap_err(),
        "replace the chat history: Not a directory (os error 20)"
    );
    writer.append(&history, b"{}\n".to_vec());
    let synced = block_on(writer.sync(vec![history.clone()])).unwrap();
    assert_eq!(
        synced.unwrap_err(),
        "cannot open the chat history: Not a directory (os error 20)"
    );
    let failure = metrics.storage_failure().unwrap();
    assert_eq!(
        failure.client,
        "cannot open the chat history: Not a directory (os error 20)"
    );
    assert!(failure.operator.contains(&*history.to_string_lossy()));
}

/// After `retire`, nothing is written under the directory again.
#[test]
fn a_retired_directory_is_never_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let conversation = dir.path().join("conversation");
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let log: Arc<Path> = conversation.join("displayLog.jsonl").into();
    writer.append(&log, b"one\n".to_vec());
    block_on(writer.retire(conversation.clone())).unwrap();
    std::fs::remove_dir_all(&conversation).unwrap();
    writer.append(&log, b"late\n".to_vec());
    assert!(block_on(writer.replace(&log, b"x".to_vec()))
        .unwrap()
        .is_err());
    block_on(writer.sync(vec![log.clone()])).unwrap().unwrap();
    assert!(!conversation.exists());
}

/// A replica that records what it was handed and fails barriers with `failure`, if set.
#[derive(Default)]
struct FakeReplica {
    /// Each write it was handed: the file name, the op, the bytes.
    writes: std::sync::Mutex<Vec<(String, FileOp, Vec<u8>)>>,
    /// What every barrier fails with (`None`: they succeed).
    failure: std::sync::Mutex<Option<String>>,
    /// What `queued_bytes` reports.
    queued: std::sync::atomic::AtomicUsize,
}

impl Replicator for FakeReplica {
    fn record(&self, path: &Path, op: FileOp, bytes: &[u8]) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        self.writes.lock().unwrap().push((name, op, bytes.to_vec()));
    }
    fn queued_bytes(&self) -> usize {
        self.queued.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn wait_below(&self, _limit: usize) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    fn barrier(
        &self,
        _paths: &[Arc<Path>],
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        let answer = self.failure.lock().unwrap().clone().map_or(Ok(()), Err);
        Box::pin(async move { answer })
    }
}

/// With a replica, every append and replace is handed to it too, a barrier answers the
/// replica's failure once the disk's part succeeded, and the replica's queue counts toward
/// backpressure.
#[test]
fn a_replica_sees_every_write_and_its_barrier_counts() {
    let dir = tempfile::tempdir().unwrap();
    let replica = Arc::new(FakeReplica::default());
    block_on(async {
        let writer = LogWriter::start(Default::default(), dir.path().to_path_buf())
            .replicated(replica.clone());
        let log: Arc<Path> = dir.path().join("displayLog.jsonl").into();
        writer.append(&log, b"one\n".to_vec());
        writer.append_unreported(&log, b"two\n".to_vec());
        writer
            .replace(&log, b"all\n".to_vec())
            .await
            .unwrap()
            .unwrap();
        writer.sync(vec![log.clone()]).await.unwrap().unwrap();
        *replica.failure.lock().unwrap() = Some("the replica failed".into());
        assert_eq!(
            writer.sync(vec![log.clone()]).await.unwrap(),
            Err("the replica failed".to_string())
        );
        assert!(!writer.backlogged());
        replica
            .queued
            .store(QUEUE_HIGH_WATER + 1, std::sync::atomic::Ordering::Relaxed);
        assert!(writer.backlogged());
    });
    let writes = replica.writes.lock().unwrap().clone();
    let name = "displayLog.jsonl".to_string();
    assert_eq!(
        writes,
        vec![
            (name.clone(), FileOp::Append, b"one\n".to_vec()),
            (name.clone(), FileOp::Append, b"two\n".to_vec()),
            (name, FileOp::Replace, b"all\n".to_vec()),
        ]
    );
}

/// A new conversation's files, prepared: made empty (with their directories) in the writer's
/// idle moments, counted, and then written as usual; with the node log, replayed as usual.
#[test]
fn prepared_files_are_made_before_their_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let metrics = Arc::new(Metrics::default());
    let (writer, _) =
        LogWriter::start_with_log(metrics.clone(), root.to_path_buf(), Default::default()).unwrap();
    let conversation = root.join("conversations/c1");
    let paths: Vec<Arc<Path>> = [
        "displayLog.jsonl",
        "requests.jsonl",
        "sessions/chat/history.jsonl",
    ]
    .iter()
    .map(|name| conversation.join(name).into())
    .collect();
    writer.prepare(paths.clone());
    block_on(writer.prepared()).unwrap();
    for path in &paths {
        assert_eq!(std::fs::metadata(path).unwrap().len(), 0, "{path:?}");
    }
    assert_eq!(Metrics::get(&metrics.prepared_files), 3);
    // Prepared again (a reload before the first turn): nothing is made twice.
    writer.prepare(paths.clone());
    block_on(writer.prepared()).unwrap();
    assert_eq!(Metrics::get(&metrics.prepared_files), 3);
    writer.append(&paths[0], b"one\n".to_vec());
    block_on(writer.sync(vec![paths[0].clone()]))
        .unwrap()
        .unwrap();
    assert_eq!(std::fs::read(&paths[0]).unwrap(), b"one\n");
    // A crash that lost the file's bytes: the log brings them back into the prepared file.
    std::fs::write(&paths[0], b"").unwrap();
    drop(writer);
    let (writer, replayed) =
        LogWriter::start_with_log(Default::default(), root.to_path_buf(), Default::default())
            .unwrap();
    assert_eq!(replayed.appends, 1);
    assert_eq!(std::fs::read(&paths[0]).unwrap(), b"one\n");
    drop(writer);
}

/// A conversation deleted (or unloaded) before its files were prepared: nothing is made
/// under its directory.
#[test]
fn a_retired_or_closed_conversation_is_not_prepared() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let writer = LogWriter::start(metrics.clone(), dir.path().to_path_buf());
    let deleted = dir.path().join("deleted");
    let closed: Arc<Path> = dir.path().join("closed/displayLog.jsonl").into();
    // Held, so the prepares and what cancels them are taken in one batch, before any idle
    // moment.
    let (hold, reached, release) = crate::storage::hold::Hold::for_test();
    writer.hold(hold);
    reached.recv().unwrap();
    writer.prepare(vec![
        deleted.join("displayLog.jsonl").into(),
        closed.clone(),
    ]);
    let retired = writer.retire(deleted.clone());
    let closed_done = writer.close(&closed);
    release.send(()).unwrap();
    block_on(retired).unwrap();
    block_on(closed_done).unwrap();
    block_on(writer.prepared()).unwrap();
    assert!(!deleted.exists());
    assert!(!dir.path().join("closed").exists());
    assert_eq!(Metrics::get(&metrics.prepared_files), 0);
}

/// With the node log, a batch whose barriers all expect a successor waits up to
/// `SYNC_LINGER` for it; a barrier nothing follows, a close or a read-your-writes marker
/// ends the wait, and without the node log (or while writes fail) nothing waits.
#[test]
fn only_barriers_with_a_successor_coming_linger() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let (log, _) = NodeLog::open(dir.path(), Default::default(), metrics.clone()).unwrap();
    let with_log = WriterState::new(metrics.clone(), dir.path().to_path_buf(), Some(log));
    let without_log = WriterState::new(metrics.clone(), dir.path().to_path_buf(), None);
    let path: Arc<Path> = dir.path().join("c/displayLog.jsonl").into();
    let sync = |followed: bool| Job::Sync(vec![path.clone()], oneshot::channel().0, followed);
    let append = || Job::Append(path.clone(), b"x\n".to_vec(), true);

    let followed = [append(), sync(true), append(), sync(true)];
    assert_eq!(with_log.linger(&followed), Some(SYNC_LINGER));
    assert_eq!(without_log.linger(&followed), None);
    assert_eq!(with_log.linger(&[append(), sync(true), sync(false)]), None);
    assert_eq!(with_log.linger(&[append()]), None, "no barrier waits");
    assert_eq!(
        with_log.linger(&[sync(true), Job::Written(oneshot::channel().0)]),
        None
    );
    assert!(!WriterState::ends_linger(&sync(true)));
    assert!(!WriterState::ends_linger(&append()));
    assert!(WriterState::ends_linger(&sync(false)));
    assert!(WriterState::ends_linger(&Job::Close(
        path.clone(),
        oneshot::channel().0
    )));
    // While writes fail, nothing waits.
    metrics.storage_failed(crate::metrics::StorageFailure {
        operator: "test".into(),
        client: "test".into(),
    });
    assert_eq!(with_log.linger(&followed), None);
}
