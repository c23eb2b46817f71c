//! The chat history file: one `ChatMessage` JSON object per line in
//! `<conversation>/sessions/<agent>/history.jsonl`. The conversation appends to it or replaces it
//! through the log writer (`conversation/chat.rs`) and holds only its newest part in memory:
//! [`load_tail`] reads that part backwards from the end of the file, [`window_start`] says where
//! it begins, and [`for_each_from`] streams the rest when someone asks for it (`@system
//! history`). A line that does not parse (a torn write, a hand edit) is skipped with a warning,
//! never fatal.
//!
//! The part held always begins where a turn begins ([`starts_turn`]): a tool result is never
//! held without the assistant message that asked for it, which the chat-completions format
//! requires before any `tool` message.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::agent::{ChatMessage, ContentBlock, Role};

/// Bytes read at a time when reading a history file backwards or counting its lines.
const CHUNK: usize = 64 * 1024;

/// The history file's name.
pub const FILE_NAME: &str = "history.jsonl";

/// An agent's history file under a conversation's directory
/// (`sessions/<agent>/history.jsonl`, the agent's `sessionStorage`).
pub fn path(conversation_dir: &Path, agent: &str) -> PathBuf {
    conversation_dir
        .join("sessions")
        .join(agent)
        .join(FILE_NAME)
}

/// The end of a compaction's line (see [`encode_compaction`]): a message line ends with its
/// content's `]}`, so no message a person or a model wrote can end so.
const COMPACTION_END: &[u8] = b",\"compaction\":true}";

/// A compaction's summary as a history line: the message with `"compaction": true` after it.
/// The file keeps every line before it (nothing is dropped from disk); the part the agent
/// reads ([`read_tail`]) begins at the newest such line.
pub fn encode_compaction(summary: &ChatMessage) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(summary).expect("message serializes");
    bytes.pop(); // its closing brace
    bytes.extend_from_slice(COMPACTION_END);
    bytes.push(b'\n');
    bytes
}

/// Whether `line` (without its newline) is a compaction's summary.
pub fn is_compaction(line: &[u8]) -> bool {
    line.ends_with(COMPACTION_END)
}

/// Messages as history lines (one JSON object each).
pub fn encode(messages: &[ChatMessage]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for m in messages {
        serde_json::to_writer(&mut bytes, m).expect("message serializes");
        bytes.push(b'\n');
    }
    bytes
}

/// Whether a turn begins at `message`: a user message that answers no tool call (a request's
/// first message; a cancelled request's note and `@compact`'s summary begin with one too).
pub fn starts_turn(message: &ChatMessage) -> bool {
    message.role == Role::User
        && !message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// Where the newest part of `messages` within the bounds begins: the earliest turn start
/// from which at most `max_messages` messages of at most `max_bytes` (their history lines,
/// `sizes`) remain; `messages.len()` (nothing) when not even the newest turn fits.
pub fn window_start(
    messages: &[ChatMessage],
    sizes: &[usize],
    max_bytes: usize,
    max_messages: usize,
) -> usize {
    let mut start = messages.len();
    let mut bytes = 0;
    for i in (0..messages.len()).rev() {
        bytes += sizes[i];
        if bytes > max_bytes || messages.len() - i > max_messages {
            break;
        }
        if starts_turn(&messages[i]) {
            start = i;
        }
    }
    start
}

/// The newest part of a history file and how long the file is.
#[derive(Debug, Default)]
pub struct Tail {
    /// The newest messages within the bounds, oldest first; the first begins a turn.
    pub messages: Vec<ChatMessage>,
    /// The size of each one's history line in bytes (newline included), same order.
    pub sizes: Vec<usize>,
    /// Lines in the file (messages, counting any that do not parse; a torn last line without
    /// its newline is not counted).
    pub total: usize,
}

/// Reads the newest messages of the history at `path`, at most `max_messages` of at most
/// `max_bytes`, beginning with a turn ([`window_start`]) and at the latest with the newest
/// compaction's summary ([`encode_compaction`]), backwards from the end of the file: a load costs the bound, not the file (the older lines are only counted). A missing
/// file is an empty history; an unreadable one too, with a warning.
pub fn load_tail(path: &Path, max_bytes: usize, max_messages: usize) -> Tail {
    match read_tail(path, max_bytes, max_messages) {
        Ok(tail) => tail,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Tail::default(),
        Err(e) => {
            log::warn!(
                "{}: cannot read the chat history ({e}); starting from an empty one",
                path.display()
            );
            Tail::default()
        }
    }
}

/// [`load_tail`]'s work, with its error (a missing file is `NotFound`): lines are taken from
/// the back of what has been read; the partial line at the front waits for the chunk before
/// it.
pub fn read_tail(path: &Path, max_bytes: usize, max_messages: usize) -> io::Result<Tail> {
    let mut file = File::open(path)?;
    let mut pos = file.seek(SeekFrom::End(0))?;
    // File bytes [pos, pos + data.len()) not taken as lines yet.
    let mut data: Vec<u8> = Vec::new();
    let mut newest_first: Vec<(ChatMessage, usize)> = Vec::new();
    let mut bytes = 0;
    let mut total = 0;
    // The piece after the file's last newline: empty, or a torn line.
    let mut last_piece = true;
    loop {
        if pos > 0 {
            let start = pos.saturating_sub(CHUNK as u64);
            let mut chunk = vec![0u8; (pos - start) as usize];
            file.seek(SeekFrom::Start(start))?;
            file.read_exact(&mut chunk)?;
            chunk.extend_from_slice(&data);
            data = chunk;
            pos = start;
        }
        let mut end = data.len();
        let full = loop {
            let (start, terminated) = match data[..end].iter().rposition(|b| *b == b'\n') {
                Some(nl) => (nl + 1, !last_piece),
                None if pos == 0 => (0, !last_piece),
                None => break false, // the line begins in an earlier chunk
            };
            let line = &data[start..end];
            if !line.is_empty() && !terminated {
                log::warn!("{}: ignoring a torn last line", path.display());
            }
            last_piece = false;
            if terminated {
                total += 1;
            }
            if !line.is_empty() && terminated {
                let size = line.len() + 1;
                if bytes + size > max_bytes || newest_first.len() >= max_messages {
                    // Full: the lines before this one are only counted.
                    total += data[..start].iter().filter(|b| **b == b'\n').count();
                    break true;
                }
                match serde_json::from_slice::<ChatMessage>(line) {
                    Ok(message) => {
                        bytes += size;
                        newest_first.push((message, size));
                        if is_compaction(line) {
                            // What the agent reads begins with the newest compaction.
                            total += data[..start].iter().filter(|b| **b == b'\n').count();
                            break true;
                        }
                    }
                    Err(e) => {
                        log::warn!("{}: skipping an unreadable line: {e}", path.display())
                    }
                }
            }
            end = start.saturating_sub(1);
            if start == 0 {
                break false;
            }
        };
        data.truncate(end);
        if full {
            total += count_newlines(&mut file, pos)?;
            break;
        }
        if pos == 0 {
            break;
        }
    }
    newest_first.reverse();
    let (mut messages, mut sizes): (Vec<_>, Vec<_>) = newest_first.into_iter().unzip();
    let start = window_start(&messages, &sizes, max_bytes, max_messages);
    messages.drain(..start);
    sizes.drain(..start);
    Ok(Tail {
        messages,
        sizes,
        total,
    })
}

/// Newlines among the first `len` bytes of `file`, read in chunks.
fn count_newlines(file: &mut File, len: u64) -> io::Result<usize> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = file.take(len);
    let mut buf = vec![0u8; CHUNK];
    let mut count = 0;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        count += buf[..n].iter().filter(|b| **b == b'\n').count();
    }
}

/// Calls `f(number, message)` for every line of the history at `path` from line `first + 1`
/// on (lines numbered from 1, in file order), one line in memory at a time; a line that does
/// not parse keeps its number and is passed as `None`. Returns the number of lines. The
/// lines before are skipped without being parsed. A missing file has none.
pub fn for_each_from(
    path: &Path,
    first: usize,
    mut f: impl FnMut(usize, Option<ChatMessage>),
) -> io::Result<usize> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::with_capacity(CHUNK, file);
    let mut number = 0;
    // Skip `first` lines without holding any of them.
    while number < first {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(number);
        }
        let (used, ended) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        reader.consume(used);
        if ended {
            number += 1;
        }
    }
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 || line.last() != Some(&b'\n') {
            return Ok(number); // the end, or a torn last line
        }
        number += 1;
        let message = serde_json::from_slice(&line)
            .map_err(|e| log::warn!("{}: line {number} unreadable: {e}", path.display()))
            .ok();
        f(number, message);
    }
}

/// Lines in the history at `path` (0 when it does not exist), counted without parsing.
pub fn count(path: &Path) -> io::Result<usize> {
    match File::open(path) {
        Ok(mut file) => {
            let len = file.metadata()?.len();
            count_newlines(&mut file, len)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::text(Role::User, text)
    }

    fn assistant(text: &str) -> ChatMessage {
        ChatMessage::text(Role::Assistant, text)
    }

    /// A turn with a tool call: question, call, result, answer.
    fn tool_turn(n: usize) -> Vec<ChatMessage> {
        vec![
            user(&format!("what is {n} + 1")),
            ChatMessage {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: format!("c{n}"),
                    name: "calculate".into(),
                    input: json!({"expression": format!("{n}+1")}),
                }],
            },
            ChatMessage {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: format!("c{n}"),
                    content: format!("{}", n + 1),
                    is_error: false,
                }],
            },
            assistant(&format!("{}", n + 1)),
        ]
    }

    fn sizes(messages: &[ChatMessage]) -> Vec<usize> {
        messages
            .iter()
            .map(|m| encode(std::slice::from_ref(m)).len())
            .collect()
    }

    fn json_of(messages: &[ChatMessage]) -> serde_json::Value {
        serde_json::to_value(messages).unwrap()
    }

    /// Issue 50: a compaction keeps every line on disk; what the agent reads begins with the
    /// newest compaction's summary, and every line is still counted and streamed; a message
    /// whose text ends like a compaction line is no compaction.
    #[test]
    fn the_tail_begins_at_the_newest_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "chat");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut bytes = encode(&tool_turn(1));
        bytes.extend(encode_compaction(&user("[summary] one")));
        bytes.extend(encode(&tool_turn(2)));
        bytes.extend(encode_compaction(&user("[summary] one, two")));
        let later = vec![user(",\"compaction\":true}"), assistant("ok")];
        bytes.extend(encode(&later));
        std::fs::write(&file, &bytes).unwrap();
        let tail = load_tail(&file, 1 << 20, 100);
        let mut expected = vec![user("[summary] one, two")];
        expected.extend(later);
        assert_eq!(json_of(&tail.messages), json_of(&expected));
        assert_eq!(tail.total, 12);
        assert_eq!(count(&file).unwrap(), 12);
        let mut seen = 0;
        for_each_from(&file, 0, |_, m| seen += usize::from(m.is_some())).unwrap();
        assert_eq!(seen, 12, "every line is kept and readable");
    }

    /// What `encode` writes, `load_tail` reads back; a torn or foreign line in between is
    /// skipped (but counted) and the lines around it survive; a missing file is an empty
    /// history.
    #[test]
    fn round_trip_skips_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "chat");
        assert_eq!(load_tail(&file, 1 << 20, 100).total, 0);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let first = user("hello");
        let second = assistant("hi");
        let mut bytes = encode(std::slice::from_ref(&first));
        bytes.extend_from_slice(b"{\"role\":\"user\",\"cont\n");
        bytes.extend_from_slice(&encode(std::slice::from_ref(&second)));
        // A torn last line (a crash mid-append) is not a message.
        bytes.extend_from_slice(b"{\"role\":\"assis");
        std::fs::write(&file, bytes).unwrap();
        let tail = load_tail(&file, 1 << 20, 100);
        assert_eq!(tail.total, 3);
        assert_eq!(json_of(&tail.messages), json_of(&[first, second]));
        let mut seen = Vec::new();
        let total = for_each_from(&file, 1, |n, m| seen.push((n, m.is_some()))).unwrap();
        assert_eq!((total, seen), (3, vec![(2, false), (3, true)]));
    }

    /// The part held begins with a turn: a bound that falls inside a turn leaves the whole
    /// turn out, so no tool result is held without its call.
    #[test]
    fn the_window_begins_with_a_turn() {
        let history: Vec<ChatMessage> = (0..3).flat_map(tool_turn).collect();
        let sizes = sizes(&history);
        let all: usize = sizes.iter().sum();
        assert_eq!(window_start(&history, &sizes, all, 100), 0);
        // One byte short: the first turn goes, whole.
        assert_eq!(window_start(&history, &sizes, all - 1, 100), 4);
        // Five messages at most: only the last turn (four) fits from a turn start.
        assert_eq!(window_start(&history, &sizes, all, 5), 8);
        // Not even the last turn fits: nothing.
        assert_eq!(window_start(&history, &sizes, sizes[11], 100), 12);
        for bound in (0..all).step_by(7) {
            let start = window_start(&history, &sizes, bound, 100);
            assert!(start == history.len() || starts_turn(&history[start]));
            assert!(sizes[start..].iter().sum::<usize>() <= bound);
        }
    }

    /// A long file is read from its end only as far as the bounds; lines longer than a read
    /// chunk and lines across chunk edges come back whole; every line is counted; the
    /// streamed scan sees the same lines with the same numbers.
    #[test]
    fn the_tail_is_read_backwards_within_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        let history: Vec<ChatMessage> = (0..60)
            .flat_map(|t| {
                vec![
                    user(&format!("{t:02} {}", "q".repeat(t * 3000))),
                    assistant(&format!("{t:02} {}", "a".repeat(100_000 - t * 1000))),
                ]
            })
            .collect();
        std::fs::write(&file, encode(&history)).unwrap();
        let sizes = sizes(&history);
        for (max_bytes, max_messages) in [(1 << 20, 1000), (usize::MAX, 7), (0, 10)] {
            let tail = load_tail(&file, max_bytes, max_messages);
            let start = window_start(&history, &sizes, max_bytes, max_messages);
            assert_eq!(tail.total, 120);
            assert_eq!(json_of(&tail.messages), json_of(&history[start..]));
            assert_eq!(tail.sizes, sizes[start..]);
        }
        assert_eq!(load_tail(&file, usize::MAX, usize::MAX).messages.len(), 120);
        let mut numbers = Vec::new();
        let total = for_each_from(&file, 115, |n, m| {
            assert_eq!(json_of(&[m.unwrap()]), json_of(&history[n - 1..n]));
            numbers.push(n);
        })
        .unwrap();
        assert_eq!((total, numbers), (120, vec![116, 117, 118, 119, 120]));
        assert_eq!(count(&file).unwrap(), 120);
    }
}
