//! The node log against real files. A machine crash loses what the page cache held and the
//! files never fsynced; the tests play that by cutting the conversation files back, then
//! dropping the writer without its clean-shutdown checkpoint (which is what `kill -9` leaves),
//! and check that opening the log again brings every acknowledged byte back.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::storage::block_on;
use crate::storage::log_writer::LogWriter;

/// A conversation's file under an instance directory (its directory exists, as the
/// conversation actor makes it before writing).
fn conversation_file(root: &Path, id: &str, name: &str) -> Arc<Path> {
    let dir = root.join("conversations").join(id);
    fs::create_dir_all(&dir).unwrap();
    dir.join(name).into()
}

fn start(root: &Path, segment_bytes: u64) -> (LogWriter, Replayed, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let config = NodeLogConfig {
        segment_bytes,
        enabled: true,
    };
    let (writer, replayed) =
        LogWriter::start_with_log(metrics.clone(), root.to_path_buf(), config).unwrap();
    (writer, replayed, metrics)
}

/// What the segments of `root` hold, in bytes (headers included). The checkpointer may
/// remove a listed segment meanwhile: it then holds nothing.
fn log_bytes(root: &Path) -> u64 {
    segments(&root.join(DIR_NAME))
        .unwrap()
        .iter()
        .filter_map(|(_, p)| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// One batch of appends to many files costs one fsync, and after a crash that lost the files'
/// unsynced bytes, opening the log writes them all back, exactly.
#[test]
fn a_crash_loses_nothing_the_log_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, replayed, metrics) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(
        replayed,
        Replayed {
            segments: 0,
            ..Replayed::default()
        }
    );
    let files: Vec<Arc<Path>> = (0..10)
        .map(|i| conversation_file(root, &format!("c{i}"), "displayLog.jsonl"))
        .collect();
    // Something written and fsynced before: a crash must not touch it.
    fs::write(&files[0], b"old line\n").unwrap();
    let fsyncs_before = Metrics::get(&metrics.log_fsyncs);
    let expected: Vec<Vec<u8>> = files
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let mut all = if i == 0 {
                b"old line\n".to_vec()
            } else {
                Vec::new()
            };
            for n in 0..3 {
                let line = format!("{{\"file\":{i},\"n\":{n}}}\n").into_bytes();
                writer.append(path, line.clone());
                all.extend(line);
            }
            all
        })
        .collect();
    // The writer takes what queued up as one batch at most a few times over.
    block_on(writer.sync(files.clone())).unwrap().unwrap();
    let fsyncs = Metrics::get(&metrics.log_fsyncs) - fsyncs_before;
    assert!(
        fsyncs <= 3,
        "{fsyncs} fsyncs for 10 files (one per batch, not per file)"
    );
    for (path, want) in files.iter().zip(&expected) {
        assert_eq!(&fs::read(path).unwrap(), want);
    }
    // `/metrics` shows what a crash would replay: every byte of the segments.
    assert_eq!(Metrics::gauge(&metrics.wal_bytes), log_bytes(root) as i64);
    assert!(log_bytes(root) > 30 * 30);
    drop(writer);
    // The machine crash: the unsynced bytes are gone (one file torn mid-line, one emptied,
    // one missing altogether; the first keeps its fsynced line).
    fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap()
        .set_len(9)
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .unwrap()
        .set_len(7)
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&files[2])
        .unwrap()
        .set_len(0)
        .unwrap();
    fs::remove_file(&files[3]).unwrap();
    let (writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(replayed.appends, 30);
    assert_eq!(replayed.files, 10);
    assert_eq!(replayed.skipped, 0);
    for (path, want) in files.iter().zip(&expected) {
        assert_eq!(&fs::read(path).unwrap(), want, "{}", path.display());
    }
    // Replayed, the old segments are gone: only a fresh, empty one is left.
    assert_eq!(log_bytes(root), MAGIC.len() as u64);
    drop(writer);
}

/// Replay writes each record at its own offset: a crash during replay (or a replay of records
/// already in the files) leaves the same bytes, never a duplicate.
#[test]
fn replaying_twice_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let path = conversation_file(root, "c", "requests.jsonl");
    for n in 0..5 {
        writer.append(&path, format!("record {n}\n").into_bytes());
    }
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    drop(writer);
    let want = fs::read(&path).unwrap();
    let wal = root.join(DIR_NAME);
    let kept: Vec<(PathBuf, Vec<u8>)> = segments(&wal)
        .unwrap()
        .into_iter()
        .map(|(_, p)| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    let (writer, first, _) = start(root, DEFAULT_SEGMENT_BYTES);
    drop(writer);
    assert_eq!(first.appends, 5);
    // The segments come back, as after a kill between writing the files and removing them.
    for (p, bytes) in &kept {
        fs::write(p, bytes).unwrap();
    }
    let (writer, second, _) = start(root, DEFAULT_SEGMENT_BYTES);
    drop(writer);
    assert_eq!(second.appends, 5);
    assert_eq!(fs::read(&path).unwrap(), want);
}

/// A replaced file (`@compact`) never gets an old append written into it by replay, and the
/// appends after the replace come back.
#[test]
fn a_replace_ends_what_replay_applies_to_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let path = conversation_file(root, "c", "history.jsonl");
    writer.append(&path, b"a long first line of the old history\n".to_vec());
    writer.append(&path, b"a second one\n".to_vec());
    block_on(writer.replace(&path, b"compacted\n".to_vec()))
        .unwrap()
        .unwrap();
    writer.append(&path, b"after\n".to_vec());
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    drop(writer);
    // The crash lost the unsynced append after the replace.
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(10)
        .unwrap();
    let (_writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(fs::read(&path).unwrap(), b"compacted\nafter\n");
    assert_eq!((replayed.appends, replayed.skipped), (1, 2));
}

/// A deleted conversation is never brought back by replay: not when its directory is gone,
/// and not when a crash interrupted the removal halfway (its retire marker is in the log).
#[test]
fn replay_never_recreates_a_deleted_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let gone = conversation_file(root, "gone", "displayLog.jsonl");
    let half = conversation_file(root, "half", "displayLog.jsonl");
    let half_chat = conversation_file(root, "half/sessions/chat", "history.jsonl");
    for path in [&gone, &half, &half_chat] {
        writer.append(path, b"line\n".to_vec());
    }
    block_on(writer.sync(vec![gone.clone(), half.clone()]))
        .unwrap()
        .unwrap();
    block_on(writer.retire(root.join("conversations/gone"))).unwrap();
    block_on(writer.retire(root.join("conversations/half"))).unwrap();
    drop(writer);
    fs::remove_dir_all(root.join("conversations/gone")).unwrap();
    // The removal got as far as one file.
    fs::remove_file(&half).unwrap();
    let (_writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert!(!root.join("conversations/gone").exists());
    assert!(!half.exists());
    assert_eq!(fs::read(&half_chat).unwrap(), b"line\n", "untouched");
    assert_eq!((replayed.appends, replayed.skipped), (0, 3));
}

/// A record torn by the crash ends its segment: every record before it is replayed, nothing
/// after it is trusted.
#[test]
fn a_torn_record_ends_replay_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let path = conversation_file(root, "c", "displayLog.jsonl");
    writer.append(&path, b"one\n".to_vec());
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    writer.append(&path, b"two\n".to_vec());
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    drop(writer);
    let (_, segment) = segments(&root.join(DIR_NAME)).unwrap().pop().unwrap();
    let len = fs::metadata(&segment).unwrap().len();
    // Half of the second record made it.
    fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    fs::write(&path, b"").unwrap();
    let (_writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(replayed.appends, 1);
    assert!(replayed.torn_bytes > 0);
    assert_eq!(fs::read(&path).unwrap(), b"one\n");
}

/// A flipped bit fails the record's checksum: replay stops there instead of writing garbage.
#[test]
fn a_corrupt_record_is_not_applied() {
    let mut buf = MAGIC.to_vec();
    encode(
        &mut buf,
        KIND_APPEND,
        Path::new("conversations/c/f"),
        0,
        b"good\n",
    );
    let good = buf.len();
    encode(
        &mut buf,
        KIND_APPEND,
        Path::new("conversations/c/f"),
        5,
        b"flip\n",
    );
    buf[good + HEADER + 3] ^= 0x10;
    let (records, torn) = decode(&buf);
    assert_eq!(
        records,
        vec![Record::Append {
            path: "conversations/c/f".into(),
            offset: 0,
            bytes: b"good\n".to_vec()
        }]
    );
    assert_eq!(torn, (buf.len() - good) as u64);
}

/// Segments are bounded: past the segment size the writer starts another and checkpoints the
/// old ones, and a clean-shutdown checkpoint leaves an empty log with every file durable.
#[test]
fn checkpoints_keep_the_log_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, metrics) = start(root, MIN_SEGMENT_BYTES);
    let path = conversation_file(root, "c", "displayLog.jsonl");
    let line = vec![b'x'; 1000];
    for _ in 0..40 {
        writer.append(&path, line.clone());
        block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
        // A segment holds its bound plus one batch; at most MAX_WAITING_SEGMENTS wait.
        assert!(
            log_bytes(root) <= (MAX_WAITING_SEGMENTS as u64 + 1) * (MIN_SEGMENT_BYTES + 1100),
            "the log grew to {} bytes",
            log_bytes(root)
        );
    }
    // The last checkpoint fsyncs each file its segment wrote, by itself.
    let others: Vec<Arc<Path>> = (0..5)
        .map(|i| conversation_file(root, &format!("o{i}"), "requests.jsonl"))
        .collect();
    for other in &others {
        writer.append(other, b"open\n".to_vec());
    }
    block_on(writer.sync(others.clone())).unwrap().unwrap();
    let fsyncs_before = Metrics::get(&metrics.log_fsyncs);
    block_on(writer.checkpoint()).unwrap();
    assert!(Metrics::get(&metrics.wal_checkpoints) >= 1);
    assert!(
        Metrics::get(&metrics.log_fsyncs) - fsyncs_before >= others.len() as u64,
        "the checkpoint did not fsync the files it covers"
    );
    assert_eq!(log_bytes(root), MAGIC.len() as u64);
    assert_eq!(Metrics::gauge(&metrics.wal_bytes), MAGIC.len() as i64);
    assert_eq!(fs::metadata(&path).unwrap().len(), 40_000);
    drop(writer);
    let (_writer, replayed, _) = start(root, MIN_SEGMENT_BYTES);
    assert_eq!(replayed.appends, 0);
}

/// A segment this build does not know stops the start with nothing touched.
#[test]
fn an_unknown_segment_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let wal = root.join(DIR_NAME);
    fs::create_dir_all(&wal).unwrap();
    let segment = wal.join(format!("{:020}.wal", 7));
    fs::write(&segment, b"RTWAL\x00\x00\x09 from the future").unwrap();
    let error = match LogWriter::start_with_log(
        Default::default(),
        root.to_path_buf(),
        NodeLogConfig::default(),
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a segment of an unknown format was accepted"),
    };
    assert!(error.contains("not a node log segment"), "{error}");
    assert_eq!(
        fs::read(&segment).unwrap(),
        b"RTWAL\x00\x00\x09 from the future"
    );
}

/// A directory rebuilt outside the writer (a cluster node restoring a conversation from the
/// log stream) after `forget`: replay never writes the older records into the new files, and
/// the records written after it come back.
#[test]
fn forgotten_records_stay_out_of_rebuilt_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let conversation = root.join("conversations/c");
    let path = conversation_file(root, "c", "displayLog.jsonl");
    writer.append(
        &path,
        b"this node's older line, longer than the rebuilt one\n".to_vec(),
    );
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    block_on(writer.forget(conversation.clone())).unwrap();
    // The rebuild: the directory replaced whole, as `restore_conversation` does.
    fs::remove_dir_all(&conversation).unwrap();
    fs::create_dir_all(&conversation).unwrap();
    fs::write(&path, b"rebuilt\n").unwrap();
    writer.append(&path, b"after\n".to_vec());
    block_on(writer.sync(vec![path.clone()])).unwrap().unwrap();
    drop(writer);
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(8)
        .unwrap();
    let (_writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(fs::read(&path).unwrap(), b"rebuilt\nafter\n");
    assert_eq!((replayed.appends, replayed.skipped), (1, 1));
}

/// The writer creates a new conversation's directories and files without fsyncing their
/// parents (the checkpoint does): a crash that lost those entries loses nothing, because
/// replay creates what is missing. And an unloaded conversation's delete retires it, so
/// replay does not bring a deleted one back.
#[test]
fn new_files_and_directories_come_back_after_a_crash_that_lost_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (writer, _, _) = start(root, DEFAULT_SEGMENT_BYTES);
    let conversation = root.join("conversations/fresh");
    let log: Arc<Path> = conversation.join("displayLog.jsonl").into();
    let chat: Arc<Path> = conversation.join("sessions/chat/history.jsonl").into();
    let deleted = conversation_file(root, "deleted", "displayLog.jsonl");
    writer.append(&log, b"entry\n".to_vec());
    writer.append(&chat, b"message\n".to_vec());
    writer.append(&deleted, b"old\n".to_vec());
    block_on(writer.sync(vec![log.clone(), chat.clone(), deleted.clone()]))
        .unwrap()
        .unwrap();
    block_on(writer.retire(root.join("conversations/deleted"))).unwrap();
    drop(writer);
    // The machine crashed before any entry of the new conversation reached the disk; the
    // deleted one's directory had been removed.
    fs::remove_dir_all(&conversation).unwrap();
    fs::remove_dir_all(root.join("conversations/deleted")).unwrap();
    let (_writer, replayed, _) = start(root, DEFAULT_SEGMENT_BYTES);
    assert_eq!(fs::read(&log).unwrap(), b"entry\n");
    assert_eq!(fs::read(&chat).unwrap(), b"message\n");
    assert!(!root.join("conversations/deleted").exists());
    assert_eq!((replayed.appends, replayed.skipped), (2, 1));
}
