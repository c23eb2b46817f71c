//! A conversation's display log: every entry clients replay (`user-request`, `append-display`,
//! `notify`, interactions, `command-result`, …), in `seq` order, durable and append-only.
//!
//! On disk it is `displayLog.jsonl` in the conversation's directory, one line per entry:
//! `{"s":<seq>,"u":<user requests so far>,"e":<entry exactly as sent to clients>}`. The running
//! `u` lets a load read only the last line to know both the next `seq` and `messageCount`.
//! A torn last line (crash mid-append) is cut off with a warning on load. A TypeAgent
//! `displayLog.json` (one JSON array) found without a `.jsonl` is imported once and kept.
//!
//! Reads: the newest entries stay in memory (at most [`RECENT_ENTRIES`] and [`RECENT_BYTES`]);
//! older ones are read from the file, found by bisecting it on seq (lines are in seq order),
//! so `getDisplayHistory(afterSeq, page)` costs what it returns, not the log's size. Seqs are
//! contiguous from 0: the first entry of every log Roundtable began has seq 0 (a
//! TypeAgent log imported keeps the seqs it had). An entry let go of may still wait in the log
//! writer's queue: a read from the file waits for
//! [`LogWriter::written`](super::log_writer::LogWriter::written) first, so it returns exactly
//! what was logged. Owned by the [`Conversation`](crate::conversation::Conversation) actor.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::log_writer::LogWriter;

/// Entries kept in memory for cheap replay of recent history.
pub const RECENT_ENTRIES: usize = 2048;
/// Bytes of entry JSON kept in memory per conversation, whatever the count: 2,048 entries of
/// the usual size (a model's answer, a few KiB at most) fit, so reconnects replay from memory
/// as before, while turns of megabytes (the frame bound is 16 MiB) cannot pin more than this
/// per loaded conversation. An entry larger than this alone is read from disk.
pub const RECENT_BYTES: usize = 4 << 20;
/// File name inside the conversation directory.
pub const FILE_NAME: &str = "displayLog.jsonl";
/// TypeAgent's file name (a JSON array), imported once.
pub const LEGACY_FILE_NAME: &str = "displayLog.json";

#[derive(Deserialize)]
struct Line<'a> {
    s: u64,
    u: u64,
    #[serde(borrow)]
    e: &'a RawValue,
}

/// The log of one conversation.
pub struct DisplayLog {
    /// `displayLog.jsonl`.
    path: Arc<Path>,
    /// Seq of the next entry.
    next_seq: u64,
    /// `user-request` entries so far (`messageCount`).
    message_count: u64,
    /// The newest entries: (seq, entry JSON); at most [`RECENT_ENTRIES`] and
    /// [`RECENT_BYTES`].
    recent: VecDeque<(u64, Arc<str>)>,
    /// Bytes of entry JSON in `recent`.
    recent_bytes: usize,
    /// Shared append thread.
    writer: LogWriter,
}

impl DisplayLog {
    /// Opens (or creates) the log in `dir`, reading only its last line.
    pub fn open(dir: &Path, writer: LogWriter) -> io::Result<DisplayLog> {
        let path: PathBuf = dir.join(FILE_NAME);
        let legacy = dir.join(LEGACY_FILE_NAME);
        if !path.exists() && legacy.is_file() {
            import_legacy(&legacy, &path)?;
        }
        let (next_seq, message_count) = recover_tail(&path)?;
        Ok(DisplayLog {
            path: path.into(),
            next_seq,
            message_count,
            recent: VecDeque::new(),
            recent_bytes: 0,
            writer,
        })
    }

    /// Seq the next entry will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// `user-request` entries so far.
    pub fn message_count(&self) -> u64 {
        self.message_count
    }

    /// The file.
    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    /// Appends an entry (an object with `type`; `seq` and `timestamp` are filled in) and
    /// returns its seq. The write is queued on the log writer.
    pub fn append(&mut self, mut entry: Map<String, Value>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if entry.get("type").and_then(Value::as_str) == Some("user-request") {
            self.message_count += 1;
        }
        // serde_json's map sorts keys (no `preserve_order`), so the stored order is
        // alphabetical; clients read entries by key, never by position.
        entry.insert("seq".into(), seq.into());
        entry
            .entry("timestamp")
            .or_insert_with(|| crate::clock::now_millis().into());
        let json: Arc<str> = serde_json::to_string(&entry)
            .expect("entry serializes")
            .into();
        let mut line = format!("{{\"s\":{seq},\"u\":{},\"e\":", self.message_count).into_bytes();
        line.extend_from_slice(json.as_bytes());
        line.extend_from_slice(b"}\n");
        self.writer.append(&self.path, line);
        self.recent_bytes += json.len();
        self.recent.push_back((seq, json));
        while self.recent.len() > RECENT_ENTRIES || self.recent_bytes > RECENT_BYTES {
            let Some((_, old)) = self.recent.pop_front() else {
                break;
            };
            self.recent_bytes -= old.len();
        }
        seq
    }

    /// Entries with `seq > after` (all when `None`): from memory when they are all recent,
    /// otherwise a plan to read the older part from disk.
    pub fn read_after(&self, after: Option<i64>) -> HistoryRead {
        let from = after.map_or(0, |a| (a + 1).max(0) as u64);
        self.read_seqs(from, self.next_seq)
    }

    /// One page of history (`getDisplayHistory(afterSeq, {limit, beforeSeq})`): the newest
    /// `limit` entries with `after < seq < before` (either bound absent = open), in seq order.
    /// Seqs are contiguous from 0 (see [`append`](Self::append)), so the page is the seq range
    /// `[max(after + 1, before - limit), before)` and costs what it returns, wherever it lies.
    pub fn read_page(&self, after: Option<i64>, before: Option<i64>, limit: u64) -> HistoryRead {
        let low = after.map_or(0, |a| (a + 1).max(0) as u64);
        let below = before.map_or(self.next_seq, |b| (b.max(0) as u64).min(self.next_seq));
        let from = low.max(below.saturating_sub(limit));
        self.read_seqs(from, below)
    }

    /// Entries with `from <= seq < below`: the part still in memory, and the part before it
    /// to read from disk when there is one.
    fn read_seqs(&self, from: u64, below: u64) -> HistoryRead {
        let first_recent = self.recent.front().map_or(self.next_seq, |(s, _)| *s);
        let from_memory: Vec<Arc<str>> = self
            .recent
            .iter()
            .filter(|(s, _)| (from..below).contains(s))
            .map(|(_, e)| e.clone())
            .collect();
        if from >= first_recent || from >= below {
            HistoryRead::Ready(from_memory)
        } else {
            HistoryRead::Disk {
                path: self.path.to_path_buf(),
                from,
                below: first_recent.min(below),
                from_memory,
            }
        }
    }
}

/// How to answer a history read.
pub enum HistoryRead {
    /// Everything is in memory.
    Ready(Vec<Arc<str>>),
    /// Read `[from, below)` from disk (blocking: run it off the actor, once
    /// [`LogWriter::written`](super::log_writer::LogWriter::written) has resolved), then add
    /// `from_memory`.
    Disk {
        /// The log file.
        path: PathBuf,
        /// First seq wanted.
        from: u64,
        /// First seq not read from disk (the first held in memory, or the page's end).
        below: u64,
        /// The in-memory part.
        from_memory: Vec<Arc<str>>,
    },
}

/// Builds the JSON array text of a history answer.
pub fn history_json(parts: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let mut out = String::from("[");
    for (i, e) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(e.as_ref());
    }
    out.push(']');
    out
}

/// Reads entries with `from <= seq < below`. Lines are in seq order, so the first one wanted
/// is found by searching the file's bytes (`line_before_seq`: a few small reads whatever the
/// file's size), and the range is read forwards from there: a read costs what it returns,
/// wherever in the log it lies. Unparsable lines (a torn line being written) are skipped.
pub fn read_range(path: &Path, from: u64, below: u64) -> io::Result<Vec<String>> {
    read_range_at(path, None, from, below)
}

/// [`read_range`] over the first `len` bytes of the file only (a backup snapshot's cut), or
/// all of it for `None`.
pub fn read_range_at(
    path: &Path,
    len: Option<u64>,
    from: u64,
    below: u64,
) -> io::Result<Vec<String>> {
    use std::io::BufRead;
    if from >= below {
        return Ok(Vec::new());
    }
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let end = file.seek(SeekFrom::End(0))?;
    let end = len.map_or(end, |len| len.min(end));
    let start = line_before_seq(&mut file, end, from)?;
    file.seek(SeekFrom::Start(start))?;
    let mut reader = io::BufReader::with_capacity(64 * 1024, file.take(end - start));
    let mut out: Vec<String> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        // Lines before the range are skipped on their seq alone, unparsed.
        if seq_prefix(&line).is_some_and(|s| s < from) {
            continue;
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let Ok(parsed) = serde_json::from_slice::<Line<'_>>(body) else {
            continue;
        };
        if parsed.s >= below {
            break;
        }
        if parsed.s >= from {
            out.push(parsed.e.get().to_string());
        }
    }
    Ok(out)
}

/// Below this many bytes the search of [`line_before_seq`] stops and the rest is read
/// forwards.
const BISECT_SPAN: u64 = 16 * 1024;
/// The first step back from the end of [`line_before_seq`]: a few entries of the usual size.
const FIRST_STEP: u64 = 4 * 1024;

/// A byte offset among the first `end` bytes of a display log where a line starts and before
/// which every line has `seq < from` (0 at worst), searched on the seq that opens each line
/// (`{"s":<seq>,`, written by [`DisplayLog::append`] and the legacy import): steps back from
/// the end doubling each time (a read near the end, the usual one, takes one step), then
/// bisects what is left; about `2 log2(distance from the end / 4 KiB)` reads of 4 KiB each. A line whose start does not parse (torn, garbage) counts as "not before": the answer
/// is then only earlier, never wrong.
fn line_before_seq(file: &mut File, end: u64, from: u64) -> io::Result<u64> {
    let (mut lo, mut hi) = (0u64, end);
    let mut step = FIRST_STEP;
    while step < end {
        match line_at_or_after(file, end - step, end)? {
            Some((start, Some(seq))) if seq < from => {
                lo = start;
                break;
            }
            _ => {
                hi = end - step;
                step = step.saturating_mul(2);
            }
        }
    }
    while hi.saturating_sub(lo) > BISECT_SPAN {
        let mid = lo + (hi - lo) / 2;
        match line_at_or_after(file, mid, hi)? {
            Some((start, Some(seq))) if seq < from => lo = start,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// Bytes a probe of [`line_at_or_after`] reads at once.
const PROBE: usize = 4 * 1024;

/// The first line starting at or after byte `pos` and before `limit`: its offset and the seq
/// its first bytes name (`None` when they do not parse); `None` when no line starts there.
fn line_at_or_after(
    file: &mut File,
    pos: u64,
    limit: u64,
) -> io::Result<Option<(u64, Option<u64>)>> {
    let mut buf = vec![0u8; PROBE];
    if pos == 0 {
        file.seek(SeekFrom::Start(0))?;
        let n = read_some(file, &mut buf)?;
        return Ok((limit > 0).then(|| (0, seq_prefix(&buf[..n]))));
    }
    // The line starts after the first newline at or after `pos - 1`.
    let mut at = pos - 1;
    loop {
        if at >= limit {
            return Ok(None);
        }
        file.seek(SeekFrom::Start(at))?;
        let n = read_some(file, &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = buf[..n.min((limit - at) as usize)]
            .iter()
            .position(|b| *b == b'\n')
        {
            let start = at + i as u64 + 1;
            if start >= limit {
                return Ok(None);
            }
            let head = &buf[i + 1..n];
            if head.len() >= 32 || head.contains(&b',') {
                return Ok(Some((start, seq_prefix(head))));
            }
            // The line's first bytes are past this read.
            let mut head = Vec::with_capacity(32);
            file.seek(SeekFrom::Start(start))?;
            (&mut *file).take(32).read_to_end(&mut head)?;
            return Ok(Some((start, seq_prefix(&head))));
        }
        at += n as u64;
    }
}

/// Reads into `buf` until it is full or the file ends; the bytes read.
fn read_some(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The seq of a line from its first bytes, `{"s":<seq>,`.
fn seq_prefix(head: &[u8]) -> Option<u64> {
    let rest = head.strip_prefix(b"{\"s\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// `messageCount` of the log in `dir`, read from its last line only (0 when there is none).
pub fn message_count_on_disk(dir: &Path) -> u64 {
    let path = dir.join(FILE_NAME);
    if !path.exists() && dir.join(LEGACY_FILE_NAME).is_file() {
        // A TypeAgent log not imported yet: count it (rare, once).
        return fs::read(dir.join(LEGACY_FILE_NAME))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
            .map_or(0, |v| {
                v.iter().filter(|e| e["type"] == "user-request").count() as u64
            });
    }
    recover_tail(&path).map_or(0, |(_, count)| count)
}

/// Finds the last valid line: (next seq, message count). Cuts a torn tail off the file.
fn recover_tail(path: &Path) -> io::Result<(u64, u64)> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    let len = file.seek(SeekFrom::End(0))?;
    match last_line(&mut file, len)? {
        Some(last) => {
            if last.end < len {
                log::warn!(
                    "{}: dropping {} bytes of a torn last entry",
                    path.display(),
                    len - last.end
                );
                file.set_len(last.end)?;
                file.sync_all()?;
            }
            Ok((last.seq + 1, last.users))
        }
        None => {
            if len > 0 {
                log::warn!(
                    "{}: no complete entry; starting the log over",
                    path.display()
                );
                file.set_len(0)?;
                file.sync_all()?;
            }
            Ok((0, 0))
        }
    }
}

/// The last entry of the log at `path` when only its first `len` bytes count (a backup
/// snapshot's cut): `(seq, messageCount)`, `None` when there is none. Reads only the tail and
/// changes nothing.
pub fn last_entry_at(path: &Path, len: u64) -> io::Result<Option<(u64, u64)>> {
    let mut file = File::open(path)?;
    Ok(last_line(&mut file, len)?.map(|l| (l.seq, l.users)))
}

/// The last line of a display log that parses.
struct LastLine {
    /// Offset just past its newline.
    end: u64,
    /// Its seq.
    seq: u64,
    /// `user-request` entries up to it.
    users: u64,
}

/// Finds the last line that parses among the first `len` bytes of `file`, reading backwards
/// from `len` in 64 KiB chunks.
fn last_line(file: &mut File, len: u64) -> io::Result<Option<LastLine>> {
    // `buf` holds the file's bytes [pos, len).
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = len;
    loop {
        let mut search_end = buf.len();
        while let Some(nl) = buf[..search_end].iter().rposition(|b| *b == b'\n') {
            let start = match buf[..nl].iter().rposition(|b| *b == b'\n') {
                Some(p) => p + 1,
                None if pos == 0 => 0,
                None => break, // the line starts in an earlier chunk
            };
            if let Ok(line) = serde_json::from_slice::<Line<'_>>(&buf[start..nl]) {
                return Ok(Some(LastLine {
                    end: pos + nl as u64 + 1,
                    seq: line.s,
                    users: line.u,
                }));
            }
            search_end = start;
        }
        if pos == 0 {
            return Ok(None);
        }
        let start = pos.saturating_sub(64 * 1024);
        let mut chunk = vec![0u8; (pos - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
        pos = start;
    }
}

/// Calls `f(seq, entry)` for every complete entry of the log in `dir`, first to last, without
/// changing anything (the search index's scans). A line that does not parse (a torn last line
/// being written) is skipped. A TypeAgent `displayLog.json` not imported yet is read instead.
pub fn for_each_entry(dir: &Path, mut f: impl FnMut(u64, Value)) -> io::Result<()> {
    use std::io::BufRead;
    let path = dir.join(FILE_NAME);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let legacy = dir.join(LEGACY_FILE_NAME);
            if !legacy.is_file() {
                return Ok(());
            }
            let entries: Vec<Value> =
                serde_json::from_slice(&fs::read(&legacy)?).map_err(io::Error::other)?;
            for (i, entry) in entries.into_iter().enumerate() {
                let seq = entry.get("seq").and_then(Value::as_u64).unwrap_or(i as u64);
                f(seq, entry);
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    #[derive(Deserialize)]
    struct Owned {
        s: u64,
        e: Value,
    }
    let mut reader = io::BufReader::with_capacity(64 * 1024, file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') {
            return Ok(()); // a line still being written
        }
        if let Ok(parsed) = serde_json::from_slice::<Owned>(&line) {
            f(parsed.s, parsed.e);
        }
    }
}

/// Converts TypeAgent's `displayLog.json` (a JSON array) into `displayLog.jsonl`, durably.
fn import_legacy(legacy: &Path, path: &Path) -> io::Result<()> {
    let entries: Vec<Value> = match serde_json::from_slice(&fs::read(legacy)?) {
        Ok(v) => v,
        Err(e) => {
            log::warn!(
                "{}: not a JSON array ({e}); not imported, left in place",
                legacy.display()
            );
            return Ok(());
        }
    };
    let mut out = Vec::new();
    let mut users = 0u64;
    for (i, entry) in entries.into_iter().enumerate() {
        if entry.get("type").and_then(Value::as_str) == Some("user-request") {
            users += 1;
        }
        let seq = entry.get("seq").and_then(Value::as_u64).unwrap_or(i as u64);
        out.extend_from_slice(format!("{{\"s\":{seq},\"u\":{users},\"e\":").as_bytes());
        serde_json::to_writer(&mut out, &entry).map_err(io::Error::other)?;
        out.extend_from_slice(b"}\n");
    }
    // The cause without the path: it may reach clients ("display log unavailable: …").
    super::durable::write_atomic(path, &out).map_err(|e| io::Error::other(e.cause()))?;
    log::info!("imported {} into {}", legacy.display(), path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(kind: &str) -> Map<String, Value> {
        json!({"type": kind, "requestId": {"requestId": "r"}})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn appends_recovers_and_reads_tails() {
        let dir = tempfile::tempdir().unwrap();
        let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
        let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
        for i in 0..5000 {
            log.append(entry(if i % 10 == 0 {
                "user-request"
            } else {
                "append-display"
            }));
        }
        futures_block(writer.sync(vec![log.path().clone()]));
        let tail = match log.read_after(Some(4990)) {
            HistoryRead::Ready(v) => v,
            HistoryRead::Disk { .. } => panic!("tail must come from memory"),
        };
        assert_eq!(tail.len(), 9);
        match log.read_after(Some(9)) {
            HistoryRead::Disk {
                path,
                from,
                below,
                from_memory,
            } => {
                let disk = read_range(&path, from, below).unwrap();
                assert_eq!(disk.len() + from_memory.len(), 4990);
                let first: Value = serde_json::from_str(&disk[0]).unwrap();
                assert_eq!(first["seq"], 10);
                assert_eq!(first["type"], "user-request");
            }
            HistoryRead::Ready(_) => panic!("old entries are on disk"),
        }
        // Torn tail: reopen continues the seq and the count.
        let path = dir.path().join(FILE_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"{\"s\":5000,\"u\":5").unwrap();
        drop(f);
        let log = DisplayLog::open(dir.path(), writer).unwrap();
        assert_eq!(log.next_seq(), 5000);
        assert_eq!(log.message_count(), 500);
        assert!(fs::read(&path).unwrap().ends_with(b"}\n"));
    }

    /// Past [`RECENT_BYTES`] the oldest entries leave memory whatever their count; an entry
    /// larger than the bound alone is never held; a read returns every entry all the same.
    #[test]
    fn memory_holds_a_bounded_number_of_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
        let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
        let text = |seq: usize, len: usize| format!("{seq:04}{}", "t".repeat(len));
        let sizes: Vec<usize> = (0..40)
            .map(|i| if i == 30 { RECENT_BYTES + 1 } else { 300 << 10 })
            .collect();
        for (i, len) in sizes.iter().enumerate() {
            let mut e = entry("append-display");
            e.insert("text".into(), text(i, *len).into());
            log.append(e);
            assert!(log.recent_bytes <= RECENT_BYTES, "after entry {i}");
            let held: usize = log.recent.iter().map(|(_, e)| e.len()).sum();
            assert_eq!(held, log.recent_bytes);
        }
        // 300 KiB entries: 13 fit in 4 MiB; the big one (seq 30) went at once.
        assert_eq!(log.recent.len(), 9);
        assert_eq!(log.recent.front().unwrap().0, 31);
        futures_block(writer.sync(vec![log.path().clone()]));
        for after in [None, Some(0), Some(29), Some(30), Some(35)] {
            let all = match log.read_after(after) {
                HistoryRead::Ready(v) => v.iter().map(|e| e.to_string()).collect(),
                HistoryRead::Disk {
                    path,
                    from,
                    below,
                    from_memory,
                } => {
                    let mut v = read_range(&path, from, below).unwrap();
                    v.extend(from_memory.iter().map(|e| e.to_string()));
                    v
                }
            };
            let first = after.map_or(0, |a| a as usize + 1);
            assert_eq!(all.len(), 40 - first, "after {after:?}");
            for (k, e) in all.iter().enumerate() {
                let e: Value = serde_json::from_str(e).unwrap();
                assert_eq!(e["seq"], first + k);
                assert_eq!(e["text"], text(first + k, sizes[first + k]));
            }
        }
    }

    /// The seqs of a history read, from memory or (after the writer has written) from disk.
    fn seqs_of(read: HistoryRead) -> Vec<u64> {
        let entries: Vec<String> = match read {
            HistoryRead::Ready(v) => v.iter().map(|e| e.to_string()).collect(),
            HistoryRead::Disk {
                path,
                from,
                below,
                from_memory,
            } => {
                let mut v = read_range(&path, from, below).unwrap();
                v.extend(from_memory.iter().map(|e| e.to_string()));
                v
            }
        };
        entries
            .iter()
            .map(|e| {
                serde_json::from_str::<Value>(e).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }

    /// A page is the newest `limit` entries of `after < seq < before`, in order, whether it
    /// lies in memory, on disk, or across both.
    #[test]
    fn pages_read_the_newest_entries_of_a_range() {
        let dir = tempfile::tempdir().unwrap();
        let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
        let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
        for _ in 0..5000 {
            log.append(entry("append-display"));
        }
        futures_block(writer.sync(vec![log.path().clone()]));
        let first_recent = (5000 - RECENT_ENTRIES) as u64;
        let range = |a: u64, b: u64| (a..b).collect::<Vec<u64>>();
        // (afterSeq, beforeSeq, limit, seqs).
        type Case = (Option<i64>, Option<i64>, u64, Vec<u64>);
        let cases: [Case; 10] = [
            (None, None, 40, range(4960, 5000)),
            (None, Some(4960), 40, range(4920, 4960)),
            (
                None,
                Some(first_recent as i64 + 5),
                10,
                range(first_recent - 5, first_recent + 5),
            ),
            (None, Some(1000), 1000, range(0, 1000)),
            (None, Some(30), 1000, range(0, 30)),
            (None, Some(0), 10, vec![]),
            (None, Some(-4), 10, vec![]),
            (Some(4990), None, 1000, range(4991, 5000)),
            (Some(100), Some(120), 1000, range(101, 120)),
            (Some(-1), Some(9999), 3, range(4997, 5000)),
        ];
        for (after, before, limit, want) in cases {
            let got = seqs_of(log.read_page(after, before, limit));
            assert_eq!(got, want, "after {after:?} before {before:?} limit {limit}");
        }
        assert!(matches!(
            log.read_page(None, None, 40),
            HistoryRead::Ready(_)
        ));
    }

    /// The search finds any range of a log of 200,000 lines (some of them 100 KiB, one of them
    /// garbage, the last one torn), at its start, middle and end, and over a backup's cut.
    #[test]
    fn ranges_are_found_by_bisection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut out = Vec::new();
        let mut cut = 0;
        for s in 0..200_000u64 {
            if s == 150_000 {
                out.extend_from_slice(b"{\"s\":oops\n");
            }
            if s == 190_000 {
                cut = out.len() as u64;
            }
            let text = if s % 10_000 == 7 {
                "b".repeat(100 << 10)
            } else {
                format!("t{s}")
            };
            let e = json!({"seq": s, "text": text});
            out.extend_from_slice(format!("{{\"s\":{s},\"u\":0,\"e\":{e}}}\n").as_bytes());
        }
        // A torn last line, still being written.
        out.extend_from_slice(b"{\"s\":200000,\"u\":0,\"e\":{\"seq\":20");
        fs::write(&path, &out).unwrap();
        let seqs = |v: Vec<String>| -> Vec<u64> {
            v.iter()
                .map(|e| {
                    serde_json::from_str::<Value>(e).unwrap()["seq"]
                        .as_u64()
                        .unwrap()
                })
                .collect()
        };
        for (from, below) in [
            (0, 5),
            (0, 1),
            (9_990, 10_010),
            (100_000, 101_000),
            (149_999, 150_002),
            (199_990, 200_000),
            (199_999, u64::MAX),
            (200_000, 200_010),
        ] {
            let want: Vec<u64> = (from..below.min(200_000)).collect();
            assert_eq!(
                seqs(read_range(&path, from, below).unwrap()),
                want,
                "{from}..{below}"
            );
        }
        // Every start near the end: wherever the steps back from the end land.
        for from in 196_000..200_000 {
            let got = seqs(read_range(&path, from, from + 2).unwrap());
            assert_eq!(got, (from..(from + 2).min(200_000)).collect::<Vec<_>>());
        }
        let want: Vec<u64> = (189_990..190_000).collect();
        assert_eq!(
            seqs(read_range_at(&path, Some(cut), 189_990, 190_010).unwrap()),
            want
        );
    }

    #[test]
    fn imports_typeagent_logs() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = json!([
            {"type":"user-request","seq":0,"timestamp":1,"requestId":{"requestId":"a"},"command":"hi"},
            {"type":"command-result","seq":1,"timestamp":2,"requestId":{"requestId":"a"}}
        ]);
        fs::write(dir.path().join(LEGACY_FILE_NAME), legacy.to_string()).unwrap();
        let log = DisplayLog::open(
            dir.path(),
            LogWriter::start(Default::default(), dir.path().to_path_buf()),
        )
        .unwrap();
        assert_eq!((log.next_seq(), log.message_count()), (2, 1));
        let all = read_range(log.path(), 0, 2).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&all[0]).unwrap(), legacy[0]);
    }

    fn futures_block(rx: tokio::sync::oneshot::Receiver<Result<(), String>>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(rx).unwrap().unwrap();
    }
}
