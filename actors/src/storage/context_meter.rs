//! The context meter file: `<conversation>/sessions/<agent>/contextMeter.jsonl`, beside the
//! chat history whose size it measures. One JSON value per line, the meter after a change:
//! a [`ContextMeter`] object (`{"contextTokens","contextWindow","model"}`) after a turn that
//! reported usage, `null` after `@compact` or `@system meter reset`. The last line that
//! parses is the meter; a torn last line (a crash mid-append) is skipped, so the line before
//! it holds.
//!
//! Written like every other conversation file: appended through the shared log writer (group
//! commit: the line shares the fsync of the turn's display-log and chat-history appends, and
//! the turn's acknowledgement waits for it), which also publishes it to the cluster's log
//! stream; rewritten with only its last line once [`REWRITE_AFTER_BYTES`] were appended
//! (`conversation/meter.rs`). Backups take it with the rest of the conversation's directory.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::agent::usage::{ContextMeter, MAX_USAGE_TOKENS};

/// The meter file's name.
pub const FILE_NAME: &str = "contextMeter.jsonl";

/// Bytes appended before the file is rewritten with only its last line (a line is about 80
/// bytes: about 200 turns).
pub const REWRITE_AFTER_BYTES: u64 = 16 * 1024;

/// Bytes read from the end of the file at load: the last line is far shorter (the model
/// name in it is bounded by [`MAX_MODEL_CHARS`](crate::agent::usage::MAX_MODEL_CHARS)), and
/// reading only the end keeps the load's cost fixed whatever the file grew to.
pub const TAIL_BYTES: u64 = 4096;

/// The meter file of an agent under a conversation's directory (beside its
/// `history.jsonl`).
pub fn path(conversation_dir: &Path, agent: &str) -> PathBuf {
    conversation_dir
        .join("sessions")
        .join(agent)
        .join(FILE_NAME)
}

/// The line recording `meter` (`null` for a cleared meter), newline included.
pub fn line(meter: Option<&ContextMeter>) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&meter).expect("a meter serializes");
    bytes.push(b'\n');
    bytes
}

/// What a meter file says: the meter (`None` when cleared, or when there is no file) and the
/// file's length in bytes.
#[derive(Debug, Default, PartialEq)]
pub struct Stored {
    /// The last recorded meter.
    pub meter: Option<ContextMeter>,
    /// Bytes in the file (0 when missing).
    pub len: u64,
}

/// Reads the meter at `path`: the last complete line that parses, among the file's last
/// [`TAIL_BYTES`]. A missing file is no meter; an unreadable one too, with a warning (the
/// meter is a display: it never stops a conversation from loading).
pub fn load(path: &Path) -> Stored {
    match read_last(path) {
        Ok(stored) => stored,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Stored::default(),
        Err(e) => {
            log::warn!(
                "{}: cannot read the context meter ({e}); starting without one",
                path.display()
            );
            Stored::default()
        }
    }
}

fn read_last(path: &Path) -> io::Result<Stored> {
    let mut file = File::open(path)?;
    let len = file.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::with_capacity((len - start) as usize);
    file.read_to_end(&mut tail)?;
    // Only lines that end with a newline are complete; the piece after the last one is torn.
    let complete = match tail.iter().rposition(|b| *b == b'\n') {
        Some(end) => &tail[..end],
        None => &[][..],
    };
    if complete.len() < tail.len().saturating_sub(1) {
        log::warn!("{}: ignoring a torn last line", path.display());
    }
    let meter = complete
        .split(|b| *b == b'\n')
        .rev()
        .find_map(|line| serde_json::from_slice::<Option<ContextMeter>>(line).ok());
    // A meter recorded before usage reports were bounded may hold a figure no model gives
    // (9,223,372,036,854,775,807 was seen): not shown again, as if cleared.
    let meter = meter.flatten().filter(|m| {
        let believable = m.context_tokens <= MAX_USAGE_TOKENS;
        if !believable {
            log::warn!(
                "{}: ignoring a recorded context of {} tokens (above {MAX_USAGE_TOKENS})",
                path.display(),
                m.context_tokens
            );
        }
        believable
    });
    Ok(Stored { meter, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(tokens: u64) -> ContextMeter {
        ContextMeter {
            context_tokens: tokens,
            context_window: Some(8192),
            model: Some("m".into()),
        }
    }

    /// The last complete line wins: a later `null` clears, a torn last line is skipped (the
    /// one before it holds), a missing file is no meter.
    #[test]
    fn the_last_complete_line_is_the_meter() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "chat");
        assert_eq!(load(&file), Stored::default());
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut bytes = line(Some(&meter(100)));
        bytes.extend(line(Some(&meter(250))));
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&file).meter, Some(meter(250)));
        assert_eq!(load(&file).len, bytes.len() as u64);
        bytes.extend(b"{\"contextTokens\":9");
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&file).meter, Some(meter(250)));
        bytes.extend(b"99}\n");
        bytes.extend(line(None));
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&file).meter, None);
        // A figure above the usage bound, recorded before it existed, is not believed.
        bytes.extend(line(Some(&meter(i64::MAX as u64))));
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&file).meter, None);
        assert_eq!(line(None), b"null\n");
    }

    /// A file far longer than the tail read is read from its end only.
    #[test]
    fn only_the_end_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        let mut bytes = Vec::new();
        for n in 0..1000 {
            bytes.extend(line(Some(&meter(n))));
        }
        assert!(bytes.len() as u64 > 10 * TAIL_BYTES);
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&file).meter, Some(meter(999)));
    }
}
