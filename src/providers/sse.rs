//! Server-sent events (the `text/event-stream` format both model APIs stream their answers
//! in), parsed incrementally: [`SseParser::push`] takes the response body's bytes as they
//! arrive, in pieces of any size, and hands back every event they complete. Pure (no I/O);
//! the OpenAI-compatible and Anthropic providers feed it from their streamed responses.
//!
//! What it follows of the format (the WHATWG HTML standard's "event stream" section): lines
//! end with `\n`, `\r\n` or a lone `\r` (even when a piece ends between the `\r` and its
//! `\n`); a blank line ends an event; `data:` lines are joined with `\n`; `event:` names the
//! event; a line starting with `:` is a comment (`: ping`, keep-alives) and ignored, as are
//! `id:` and `retry:` and unknown fields; one space after the colon is dropped. An event with
//! no `data` line is not dispatched (the standard's rule). The end of the body ends a last
//! event that lacked its blank line (some servers close right after the final `data:`).
//! `[DONE]` is an ordinary `data` value here: what it means is the provider's business.
//!
//! Bounded: a line longer than [`MAX_LINE_BYTES`] or an event whose data grows past
//! [`MAX_EVENT_BYTES`] is an [`SseError`], not unbounded memory. The parser keeps only the
//! line and the event being read.

use std::fmt;

/// Longest line accepted, in bytes: 4 MiB. A streamed answer's lines are one small JSON
/// chunk each (a few hundred bytes); a server that sends a whole answer as one event still
/// fits a long answer with its tool calls. A line that never ends (a broken or hostile
/// server) stops here.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Largest `data` of one event, in bytes (its `data:` lines joined): 4 MiB, as a line.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (Anthropic names every event; OpenAI-compatible servers none).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Why a stream cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line longer than [`MAX_LINE_BYTES`] without its end.
    LineTooLong,
    /// An event whose data is larger than [`MAX_EVENT_BYTES`].
    EventTooLarge,
    /// A line that is not UTF-8 (the format is UTF-8 only).
    NotUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::LineTooLong => write!(
                f,
                "an event-stream line is longer than {} MiB",
                MAX_LINE_BYTES / (1024 * 1024)
            ),
            SseError::EventTooLarge => write!(
                f,
                "an event's data is larger than {} MiB",
                MAX_EVENT_BYTES / (1024 * 1024)
            ),
            SseError::NotUtf8 => f.write_str("an event-stream line is not UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

/// The incremental parser: feed it with [`push`](Self::push), end it with
/// [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct SseParser {
    /// The bytes of the line being read (without its end).
    line: Vec<u8>,
    /// The last piece ended with `\r`: a `\n` starting the next piece belongs to it.
    after_cr: bool,
    /// The event being read: its name.
    event: Option<String>,
    /// Its data so far.
    data: String,
    /// Whether it had a `data` line (an empty `data:` counts).
    has_data: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Reads `bytes`, the next piece of the body, and appends every event it completes to
    /// `out`, in order.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            if self.line.len() + end > MAX_LINE_BYTES {
                return Err(SseError::LineTooLong);
            }
            self.line.extend_from_slice(&rest[..end]);
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line, out)?;
            // Keep the allocation for the next line.
            self.line = line;
            self.line.clear();
        }
        if self.line.len() + rest.len() > MAX_LINE_BYTES {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// The end of the body: a last line without its end, and an event without its blank
    /// line, are taken as complete.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line, out)?;
        }
        self.line_ended(b"", out)
    }

    /// One complete line.
    fn line_ended(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                let added = value.len() + usize::from(self.has_data);
                if self.data.len() + added > MAX_EVENT_BYTES {
                    return Err(SseError::EventTooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    /// Parses `pieces` in order, then the end of the body.
    fn parse(pieces: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut out)?;
        }
        parser.finish(&mut out)?;
        Ok(out)
    }

    /// The same stream split at every byte gives the same events as in one piece: line ends
    /// `\n`, `\r\n` and a lone `\r`, comments, joined data lines, named events, `[DONE]`.
    #[test]
    fn every_split_gives_the_same_events() {
        let stream: &[u8] = b": ping\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: message_start\n\
            data: one\ndata:two\n\ndata: three\r\rid: 7\nretry: 10\ndata:  four\n\n\
            data: [DONE]\n\n";
        let expected = vec![
            event(None, "{\"a\":1}"),
            event(Some("message_start"), "one\ntwo"),
            event(None, "three"),
            event(None, " four"),
            event(None, "[DONE]"),
        ];
        assert_eq!(parse(&[stream]).unwrap(), expected);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse(&[a, b]).unwrap(), expected, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(&bytes).unwrap(), expected);
    }

    /// An event without data is not dispatched; a field without a colon is a field with an
    /// empty value (`data` alone is an empty data line); an event name does not leak into the
    /// next event.
    #[test]
    fn events_without_data_and_bare_fields() {
        let out = parse(&[b"event: ping\n\ndata\n\nevent: x\ndata: 1\n\ndata: 2\n\n"]).unwrap();
        assert_eq!(
            out,
            vec![event(None, ""), event(Some("x"), "1"), event(None, "2")]
        );
    }

    /// The end of the body ends the last event when its blank line (or its line end) is
    /// missing; a stream that ends between events adds nothing.
    #[test]
    fn the_end_of_the_body_ends_the_last_event() {
        assert_eq!(parse(&[b"data: last"]).unwrap(), vec![event(None, "last")]);
        assert_eq!(
            parse(&[b"data: last\n"]).unwrap(),
            vec![event(None, "last")]
        );
        assert_eq!(parse(&[b"data: a\n\n"]).unwrap(), vec![event(None, "a")]);
        assert_eq!(parse(&[b""]).unwrap(), vec![]);
    }

    /// A line that never ends, however it arrives, stops at the bound with the exact error;
    /// so does an event made of many data lines; a line of exactly the bound is accepted.
    #[test]
    fn bounds_are_errors() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let piece = vec![b'x'; 1024 * 1024];
        let mut result = Ok(());
        for _ in 0..5 {
            result = parser.push(&piece, &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::LineTooLong));
        assert_eq!(
            SseError::LineTooLong.to_string(),
            "an event-stream line is longer than 4 MiB"
        );

        let mut line = b"data:".to_vec();
        line.extend(vec![b'y'; MAX_LINE_BYTES - 5]);
        line.push(b'\n');
        let mut parser = SseParser::new();
        parser
            .push(&line, &mut out)
            .expect("a line of the bound fits");

        let mut parser = SseParser::new();
        let data_line = format!("data: {}\n", "z".repeat(1024 * 1024));
        let mut result = Ok(());
        for _ in 0..5 {
            result = parser.push(data_line.as_bytes(), &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLarge));
        assert_eq!(
            SseError::EventTooLarge.to_string(),
            "an event's data is larger than 4 MiB"
        );
    }

    /// A line that is not UTF-8 is an error, not a lossy guess.
    #[test]
    fn non_utf8_is_an_error() {
        assert_eq!(parse(&[b"data: \xff\xfe\n\n"]), Err(SseError::NotUtf8));
        // A comment is skipped unread, whatever its bytes.
        assert_eq!(parse(&[b": \xff\n\n"]).unwrap(), vec![]);
    }
}
