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
mod tests;
