//! WebSocket message reassembly: continuation frames joined into one message, capped in size,
//! text checked as UTF-8 while the fragments arrive (RFC 6455 sections 5.4 and 8.1). Pure
//! bytes in, a message or a close reason out, so it is fuzzed and unit-tested without sockets;
//! the transport's `Connection` feeds it the frames actix-ws decodes.

/// Which frame of a message a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// First frame of a fragmented text message.
    FirstText,
    /// First frame of a fragmented binary message.
    FirstBinary,
    /// A middle continuation frame.
    Continue,
    /// The final continuation frame.
    Last,
}

/// What a piece completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Reassembled {
    /// More fragments are needed.
    Pending,
    /// A complete text message (valid UTF-8).
    Text(String),
    /// A complete binary message.
    Binary(Vec<u8>),
}

/// Why the connection must close; the message in progress is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A first frame arrived inside a fragmented message.
    NewInsideFragmented,
    /// A continuation frame arrived with no message in progress.
    ContinuationWithoutFirst,
    /// The message grew past the cap.
    TooBig,
    /// Text that is not UTF-8.
    InvalidUtf8,
}

impl FrameError {
    /// The close code (RFC 6455 section 7.4.1).
    pub fn close_code(self) -> u16 {
        match self {
            FrameError::NewInsideFragmented | FrameError::ContinuationWithoutFirst => 1002,
            FrameError::TooBig => 1009,
            FrameError::InvalidUtf8 => 1007,
        }
    }

    /// The close reason text.
    pub fn reason(self) -> &'static str {
        match self {
            FrameError::NewInsideFragmented => "new message inside a fragmented one",
            FrameError::ContinuationWithoutFirst => "continuation without a first frame",
            FrameError::TooBig => "message too big",
            FrameError::InvalidUtf8 => "invalid UTF-8",
        }
    }
}

/// A message being reassembled.
struct Fragments {
    /// Text (UTF-8 checked) or binary.
    text: bool,
    /// Bytes so far.
    buf: Vec<u8>,
    /// Prefix of `buf` known to be valid UTF-8 (text only).
    checked: usize,
}

/// Reassembles one connection's fragmented messages. Holds at most `max` bytes.
pub struct Reassembler {
    /// Largest message, in bytes.
    max: usize,
    /// The message in progress.
    current: Option<Fragments>,
}

impl Reassembler {
    /// A reassembler for messages of at most `max` bytes.
    pub fn new(max: usize) -> Reassembler {
        Reassembler { max, current: None }
    }

    /// Whether a fragmented message is in progress.
    pub fn in_progress(&self) -> bool {
        self.current.is_some()
    }

    /// Adds one frame's payload.
    pub fn push(&mut self, piece: Piece, bytes: &[u8]) -> Result<Reassembled, FrameError> {
        let last = piece == Piece::Last;
        match piece {
            Piece::FirstText | Piece::FirstBinary if self.current.is_some() => {
                self.current = None;
                return Err(FrameError::NewInsideFragmented);
            }
            Piece::FirstText | Piece::FirstBinary => {
                self.current = Some(Fragments {
                    text: piece == Piece::FirstText,
                    buf: Vec::new(),
                    checked: 0,
                });
            }
            Piece::Continue | Piece::Last => {}
        }
        let Some(f) = self.current.as_mut() else {
            return Err(FrameError::ContinuationWithoutFirst);
        };
        if f.buf.len() + bytes.len() > self.max {
            self.current = None;
            return Err(FrameError::TooBig);
        }
        f.buf.extend_from_slice(bytes);
        if f.text {
            match std::str::from_utf8(&f.buf[f.checked..]) {
                Ok(_) => f.checked = f.buf.len(),
                // An incomplete character at the end may be finished by the next fragment.
                Err(e) if e.error_len().is_none() && !last => f.checked += e.valid_up_to(),
                Err(_) => {
                    self.current = None;
                    return Err(FrameError::InvalidUtf8);
                }
            }
        }
        if !last {
            return Ok(Reassembled::Pending);
        }
        let f = self.current.take().expect("checked above");
        Ok(if f.text {
            Reassembled::Text(String::from_utf8(f.buf).expect("validated incrementally"))
        } else {
            Reassembled::Binary(f.buf)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_text_split_inside_a_character() {
        let mut r = Reassembler::new(64);
        let bytes = "héllo".as_bytes();
        assert_eq!(
            r.push(Piece::FirstText, &bytes[..2]),
            Ok(Reassembled::Pending)
        );
        assert_eq!(
            r.push(Piece::Continue, &bytes[2..3]),
            Ok(Reassembled::Pending)
        );
        assert_eq!(
            r.push(Piece::Last, &bytes[3..]),
            Ok(Reassembled::Text("héllo".into()))
        );
        assert!(!r.in_progress());
    }

    #[test]
    fn refuses_what_rfc_6455_refuses() {
        let mut r = Reassembler::new(4);
        assert_eq!(
            r.push(Piece::Continue, b"x"),
            Err(FrameError::ContinuationWithoutFirst)
        );
        r.push(Piece::FirstBinary, b"ab").unwrap();
        assert_eq!(r.push(Piece::Last, b"cde"), Err(FrameError::TooBig));
        r.push(Piece::FirstText, b"a").unwrap();
        assert_eq!(
            r.push(Piece::FirstText, b"b"),
            Err(FrameError::NewInsideFragmented)
        );
        r.push(Piece::FirstText, &[0xe2, 0x82]).unwrap();
        assert_eq!(r.push(Piece::Last, b""), Err(FrameError::InvalidUtf8));
        r.push(Piece::FirstText, b"").unwrap();
        assert_eq!(r.push(Piece::Last, &[0xff]), Err(FrameError::InvalidUtf8));
        assert_eq!(r.push(Piece::FirstText, b"ok"), Ok(Reassembled::Pending));
    }
}
