//! The durable baseline's log: the least a server must do before it may call a turn
//! complete and mean durable. Each turn's display-log entries (the lines Roundtable writes for an echo turn:
//! `user-request`, `append-display`, `command-result`) are appended to the conversation's
//! `displayLog.jsonl`, in Roundtable's line format (`{"s":<seq>,"u":<user requests>,"e":
//! <entry>}`), by one writer thread with group commit: it takes every turn pending when it
//! wakes, writes each file's share in one `write`, makes one `fdatasync` per file touched, and
//! only then hands the batch back (the baseline sends the turns' completions from there).
//!
//! Files live under the directory given with `__baseline --durable DIR`, one numbered
//! directory per conversation (`DIR/<n>/displayLog.jsonl`): numbered, so an id a client sent
//! never becomes a path. Owned by the writer thread that [`spawn`] starts; the baseline's
//! sockets send it [`Pending`] turns.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde_json::{Map, Value};

/// File name of a conversation's log, as Roundtable's.
pub const FILE_NAME: &str = "displayLog.jsonl";

/// One turn waiting for its entries to be durable.
pub struct Pending<T> {
    /// The conversation id (the baseline's room).
    pub conversation: String,
    /// The turn's entries, objects with `type` and their fields (`seq` and `timestamp` are
    /// filled in when written, as Roundtable's log does).
    pub entries: Vec<Map<String, Value>>,
    /// What to do once they are durable (the baseline: the calls held back).
    pub then: T,
}

/// One open log and its counters.
struct LogFile {
    /// `displayLog.jsonl`, opened for appending.
    file: File,
    /// Seq of the next entry.
    next_seq: u64,
    /// `user-request` entries so far (the line's `u`).
    users: u64,
}

/// Every conversation's log, written in batches.
pub struct GroupLog {
    /// Where the numbered conversation directories go.
    dir: PathBuf,
    /// Conversation id → its open log.
    files: HashMap<String, LogFile>,
}

impl GroupLog {
    /// Logs under `dir` (created if missing).
    pub fn new(dir: &Path) -> GroupLog {
        GroupLog {
            dir: dir.to_path_buf(),
            files: HashMap::new(),
        }
    }

    /// Appends the entries of every turn in `batch`, in order, then makes each file touched
    /// durable with one `fdatasync`. Returns the number of fsyncs.
    pub fn commit<T>(&mut self, batch: &[Pending<T>]) -> io::Result<usize> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Each file's lines for this batch, in first-touched order.
        let mut touched: Vec<(String, Vec<u8>)> = Vec::new();
        for turn in batch {
            if !self.files.contains_key(&turn.conversation) {
                let log = self.open(self.files.len())?;
                self.files.insert(turn.conversation.clone(), log);
            }
            let log = self
                .files
                .get_mut(&turn.conversation)
                .expect("opened above");
            let at = match touched.iter().position(|(c, _)| *c == turn.conversation) {
                Some(i) => i,
                None => {
                    touched.push((turn.conversation.clone(), Vec::new()));
                    touched.len() - 1
                }
            };
            for entry in &turn.entries {
                log.line(entry.clone(), now, &mut touched[at].1);
            }
        }
        for (conversation, bytes) in &touched {
            let log = self.files.get_mut(conversation).expect("opened above");
            log.file.write_all(bytes)?;
        }
        for (conversation, _) in &touched {
            self.files[conversation].file.sync_data()?;
        }
        Ok(touched.len())
    }

    /// Creates conversation directory `n` and its log; the new directory entries are made
    /// durable too (once per conversation).
    fn open(&self, n: usize) -> io::Result<LogFile> {
        let dir = self.dir.join(n.to_string());
        fs::create_dir_all(&dir)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(FILE_NAME))?;
        File::open(&dir)?.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        Ok(LogFile {
            file,
            next_seq: 0,
            users: 0,
        })
    }
}

impl LogFile {
    /// Appends `entry` as one line to `out`, with its `seq` and `timestamp`.
    fn line(&mut self, mut entry: Map<String, Value>, now: u64, out: &mut Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if entry.get("type").and_then(Value::as_str) == Some("user-request") {
            self.users += 1;
        }
        entry.insert("seq".into(), seq.into());
        entry.entry("timestamp").or_insert_with(|| now.into());
        let _ = write!(out, "{{\"s\":{seq},\"u\":{},\"e\":", self.users);
        serde_json::to_writer(&mut *out, &entry).expect("entry serializes");
        out.extend_from_slice(b"}\n");
    }
}

/// Starts the writer thread on `dir`: it commits every batch of pending turns, then gives
/// the batch to `durable` with the outcome (a failed write is reported, and the turns still
/// complete, so a full disk shows in the figures and on stderr instead of hanging clients).
pub fn spawn<T, F>(dir: &Path, mut durable: F) -> io::Result<mpsc::Sender<Pending<T>>>
where
    T: Send + 'static,
    F: FnMut(Vec<Pending<T>>, io::Result<usize>) + Send + 'static,
{
    fs::create_dir_all(dir)?;
    let mut log = GroupLog::new(dir);
    let (tx, rx) = mpsc::channel::<Pending<T>>();
    std::thread::Builder::new()
        .name("durable-log".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                batch.extend(rx.try_iter());
                let outcome = log.commit(&batch);
                durable(batch, outcome);
            }
        })?;
    Ok(tx)
}
