//! WebSocket message reassembly: continuation frames joined into one message, capped in size,
//! text checked as UTF-8 while the fragments arrive (RFC 6455 sections 5.4 and 8.1). Pure
//! bytes in, a message or a close reason out, so it is fuzzed and unit-tested without sockets;
//! the transport's `Connection` feeds it the frames actix-http's `ws` codec parses.

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
    /// Every connection's messages in reassembly together would pass the server's budget.
    ServerBusy,
}

impl FrameError {
    /// The close code (RFC 6455 section 7.4.1).
    pub fn close_code(self) -> u16 {
        match self {
            FrameError::NewInsideFragmented | FrameError::ContinuationWithoutFirst => 1002,
            FrameError::TooBig => 1009,
            FrameError::InvalidUtf8 => 1007,
            FrameError::ServerBusy => 1013,
        }
    }

    /// The close reason text.
    pub fn reason(self) -> &'static str {
        match self {
            FrameError::NewInsideFragmented => "new message inside a fragmented one",
            FrameError::ContinuationWithoutFirst => "continuation without a first frame",
            FrameError::TooBig => "message too big",
            FrameError::InvalidUtf8 => "invalid UTF-8",
            FrameError::ServerBusy => "server busy: inbound budget exhausted, try again later",
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

/// Bytes held in reassembly by every connection together, against a cap.
#[derive(Debug)]
pub struct InboundBudget {
    /// Bytes held now.
    held: std::sync::atomic::AtomicUsize,
    /// The cap.
    cap: usize,
}

impl InboundBudget {
    /// A budget of `cap` bytes.
    pub fn new(cap: usize) -> std::sync::Arc<InboundBudget> {
        std::sync::Arc::new(InboundBudget {
            held: Default::default(),
            cap,
        })
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.held.fetch_add(n, Ordering::Relaxed);
        if before + n > self.cap {
            self.held.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reassembles one connection's fragmented messages. Holds at most `max` bytes, drawn from
/// the server-wide [`InboundBudget`] when there is one.
pub struct Reassembler {
    /// Largest message, in bytes.
    max: usize,
    /// The message in progress.
    current: Option<Fragments>,
    /// The server-wide budget.
    budget: Option<std::sync::Arc<InboundBudget>>,
}

impl Drop for Reassembler {
    fn drop(&mut self) {
        self.reset();
    }
}

impl Reassembler {
    /// A reassembler for messages of at most `max` bytes.
    pub fn new(max: usize) -> Reassembler {
        Reassembler {
            max,
            current: None,
            budget: None,
        }
    }

    /// A reassembler that also draws from `budget`.
    pub fn with_budget(max: usize, budget: std::sync::Arc<InboundBudget>) -> Reassembler {
        Reassembler {
            max,
            current: None,
            budget: Some(budget),
        }
    }

    /// Drops the message in progress, giving its bytes back.
    fn reset(&mut self) {
        if let (Some(f), Some(b)) = (self.current.take(), &self.budget) {
            b.give(f.buf.len());
        }
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
                self.reset();
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
            self.reset();
            return Err(FrameError::TooBig);
        }
        if self.budget.as_ref().is_some_and(|b| !b.take(bytes.len())) {
            self.reset();
            return Err(FrameError::ServerBusy);
        }
        let f = self.current.as_mut().expect("checked above");
        f.buf.extend_from_slice(bytes);
        if f.text {
            match std::str::from_utf8(&f.buf[f.checked..]) {
                Ok(_) => f.checked = f.buf.len(),
                // An incomplete character at the end may be finished by the next fragment.
                Err(e) if e.error_len().is_none() && !last => f.checked += e.valid_up_to(),
                Err(_) => {
                    self.reset();
                    return Err(FrameError::InvalidUtf8);
                }
            }
        }
        if !last {
            return Ok(Reassembled::Pending);
        }
        let f = self.current.take().expect("checked above");
        if let Some(b) = &self.budget {
            b.give(f.buf.len());
        }
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

    #[test]
    fn messages_in_reassembly_share_the_server_budget() {
        let budget = InboundBudget::new(10);
        let mut a = Reassembler::with_budget(100, budget.clone());
        let mut b = Reassembler::with_budget(100, budget.clone());
        a.push(Piece::FirstBinary, b"123456").unwrap();
        assert_eq!(
            b.push(Piece::FirstBinary, b"12345"),
            Err(FrameError::ServerBusy)
        );
        b.push(Piece::FirstBinary, b"1234").unwrap();
        assert_eq!(budget.held(), 10);
        assert!(matches!(
            a.push(Piece::Last, b""),
            Ok(Reassembled::Binary(_))
        ));
        assert_eq!(budget.held(), 4);
        drop(b);
        assert_eq!(budget.held(), 0);
    }
}
