//! The entries of a link message (kind `L`, A → B): what one drain of A's link carries for the
//! relays that share it. The parts of a fanned-out call that every relayed client gets
//! unchanged — the conversation's `clientio` prefix and the call's serialized tail, the same
//! shared buffer in every recipient's outbox — cross the link once, as a numbered *piece*;
//! each relay's frame is then a reference (its slot, the two pieces and its own callId), so a
//! call to N clients on node B costs one copy of its bytes plus N small references, and each
//! client's frames stay in the order its virtual connection queued them.
//!
//! Entries, one after the other in the message body (integers big-endian):
//! - `R`: the sending link task is new: forget every piece (the first entry it sends).
//! - `D` id:u32 len:u32 bytes: piece `id` (text). B keeps the last [`PIECES`]; A references
//!   only those, and only pieces up to [`MAX_PIECE`] bytes (a larger call goes whole, per
//!   relay).
//! - `S` slot:u32 prefix:u32 callId:u64 tail:u32: a call for relay `slot`, prefix + callId +
//!   tail.
//! - `T` slot:u32 len:u32 bytes: a whole text frame for relay `slot`.
//! - `P` slot:u32: relay `slot`'s virtual connection pings (B answers on the relay's `.in`).
//! - `X` slot:u32: relay `slot` ended (A's virtual connection closed).

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use roundtable_actors::outbox::{Outgoing, SharedBytes};

/// Pieces B keeps (and A may reference) per link.
pub(super) const PIECES: usize = 64;
/// Largest piece: what B keeps per link is at most [`PIECES`] of these.
pub(super) const MAX_PIECE: usize = 32 << 10;

const RESET: u8 = b'R';
const DEFINE: u8 = b'D';
const SPLICED: u8 = b'S';
const TEXT: u8 = b'T';
const PING: u8 = b'P';
const END: u8 = b'X';

/// What a link message tells one relay (B's side).
pub(super) enum Entry {
    /// A whole text frame.
    Text(String),
    /// A call: prefix + callId + tail, the tail shared with every other relay given it.
    Spliced {
        /// The `clientio` prefix up to the callId.
        prefix: Arc<str>,
        /// The relayed client's callId.
        number: u64,
        /// The call after the callId.
        tail: Arc<str>,
        /// The tail's bytes, for the server budget (counted once for every socket holding it).
        shared: Arc<SharedBytes>,
    },
    /// The virtual connection's ping.
    Ping,
    /// The relay ended.
    End,
}

/// What an [`Encoder`] wrote since its counts were last taken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    /// Frames for one relay each (`S` and `T` entries).
    pub(super) deliveries: u64,
    /// Copies of frame bytes (`D` and `T` entries).
    pub(super) copies: u64,
}

/// A's side: writes entries, defining each piece once while B still has it.
#[derive(Default)]
pub(super) struct Encoder {
    /// Id of the next piece.
    next_id: u32,
    /// The last [`PIECES`] pieces defined, oldest first (held, so a pointer is never reused
    /// while it is compared).
    recent: VecDeque<(Arc<str>, u32)>,
    /// The first message (with its `R`) has been begun.
    started: bool,
    /// Since the last [`Encoder::take_counts`].
    counts: Counts,
}

impl Encoder {
    /// Starts a message body.
    pub(super) fn begin(&mut self, body: &mut Vec<u8>) {
        if !std::mem::replace(&mut self.started, true) {
            body.push(RESET);
        }
    }

    /// One frame of relay `slot` (pongs, binaries and closes are not relayed).
    pub(super) fn frame(&mut self, body: &mut Vec<u8>, slot: u32, frame: &Outgoing) {
        match frame {
            Outgoing::Spliced {
                prefix,
                number,
                tail,
            } if prefix.len() <= MAX_PIECE && tail.len() <= MAX_PIECE => {
                let prefix = self.piece(body, prefix);
                let tail = self.piece(body, tail);
                body.push(SPLICED);
                body.extend_from_slice(&slot.to_be_bytes());
                body.extend_from_slice(&prefix.to_be_bytes());
                body.extend_from_slice(&number.to_be_bytes());
                body.extend_from_slice(&tail.to_be_bytes());
                self.counts.deliveries += 1;
            }
            Outgoing::Ping(_) => {
                body.push(PING);
                body.extend_from_slice(&slot.to_be_bytes());
            }
            other => {
                let Some(text) = other.to_text() else { return };
                body.push(TEXT);
                body.extend_from_slice(&slot.to_be_bytes());
                put_bytes(body, text.as_bytes());
                self.counts.deliveries += 1;
                self.counts.copies += 1;
            }
        }
    }

    /// Relay `slot` ended.
    pub(super) fn end(&mut self, body: &mut Vec<u8>, slot: u32) {
        body.push(END);
        body.extend_from_slice(&slot.to_be_bytes());
    }

    /// The counts since the last call.
    pub(super) fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }

    /// The id of `piece`, defined in `body` first unless B has it already.
    fn piece(&mut self, body: &mut Vec<u8>, piece: &Arc<str>) -> u32 {
        // A piece is referenced only while the (at most two) definitions of the same frame
        // cannot take its place in B's ring.
        let next = self.next_id;
        if let Some((_, id)) =
            self.recent.iter().rev().find(|(p, id)| {
                Arc::ptr_eq(p, piece) && next.wrapping_sub(*id) <= (PIECES - 2) as u32
            })
        {
            return *id;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        body.push(DEFINE);
        body.extend_from_slice(&id.to_be_bytes());
        put_bytes(body, piece.as_bytes());
        self.counts.copies += 1;
        if self.recent.len() >= PIECES {
            self.recent.pop_front();
        }
        self.recent.push_back((piece.clone(), id));
        id
    }
}

fn put_bytes(body: &mut Vec<u8>, bytes: &[u8]) {
    body.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    body.extend_from_slice(bytes);
}

/// One piece as B keeps it.
struct Piece {
    /// Its id (a slot of the ring holds id % [`PIECES`]).
    id: u32,
    /// Its text.
    text: Arc<str>,
    /// Its charge on the server budget while frames holding it are queued.
    shared: Weak<SharedBytes>,
}

/// B's side: reads entries, keeping the last [`PIECES`] pieces.
pub(super) struct Decoder {
    /// Ring of pieces by id % [`PIECES`].
    pieces: Vec<Option<Piece>>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            pieces: (0..PIECES).map(|_| None).collect(),
        }
    }
}

/// Reads entries off a body.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        let (n, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*n))
    }
    fn u64(&mut self) -> Option<u64> {
        let (n, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_be_bytes(*n))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        let bytes = self.0.get(..len)?;
        self.0 = &self.0[len..];
        Some(bytes)
    }
}

impl Decoder {
    /// Calls `each(slot, entry)` for every entry of `body`, in order; stops at a malformed
    /// one. A call whose pieces B no longer has is dropped with a warning.
    pub(super) fn read(&mut self, body: &[u8], mut each: impl FnMut(u32, Entry)) {
        let mut cursor = Cursor(body);
        while let Some(kind) = cursor.u8() {
            let ok = match kind {
                RESET => {
                    self.pieces.iter_mut().for_each(|p| *p = None);
                    Some(())
                }
                DEFINE => (|| {
                    let id = cursor.u32()?;
                    let text = std::str::from_utf8(cursor.bytes()?).ok()?;
                    self.pieces[id as usize % PIECES] = Some(Piece {
                        id,
                        text: text.into(),
                        shared: Weak::new(),
                    });
                    Some(())
                })(),
                SPLICED => (|| {
                    let slot = cursor.u32()?;
                    let prefix = cursor.u32()?;
                    let number = cursor.u64()?;
                    let tail = cursor.u32()?;
                    match self.spliced(prefix, number, tail) {
                        Some(entry) => each(slot, entry),
                        None => log::warn!("cluster relay link: a call's pieces are gone"),
                    }
                    Some(())
                })(),
                TEXT => (|| {
                    let slot = cursor.u32()?;
                    let text = String::from_utf8(cursor.bytes()?.to_vec()).ok()?;
                    each(slot, Entry::Text(text));
                    Some(())
                })(),
                PING => cursor.u32().map(|slot| each(slot, Entry::Ping)),
                END => cursor.u32().map(|slot| each(slot, Entry::End)),
                _ => None,
            };
            if ok.is_none() {
                log::warn!("cluster relay link: a malformed message (entry {kind}) cut short");
                return;
            }
        }
    }

    /// The call prefix + `number` + tail from the pieces, when B has them.
    fn spliced(&mut self, prefix: u32, number: u64, tail: u32) -> Option<Entry> {
        let prefix = self.piece(prefix)?.text.clone();
        let piece = self.piece(tail)?;
        let shared = piece.shared.upgrade().unwrap_or_else(|| {
            let shared = SharedBytes::new(piece.text.len());
            piece.shared = Arc::downgrade(&shared);
            shared
        });
        Some(Entry::Spliced {
            prefix,
            number,
            tail: piece.text.clone(),
            shared,
        })
    }

    fn piece(&mut self, id: u32) -> Option<&mut Piece> {
        self.pieces[id as usize % PIECES]
            .as_mut()
            .filter(|p| p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What B reads back, per slot, as (kind, text).
    fn read(decoder: &mut Decoder, body: &[u8]) -> Vec<(u32, String)> {
        let mut seen = Vec::new();
        decoder.read(body, |slot, entry| {
            let text = match entry {
                Entry::Text(t) => t,
                Entry::Spliced {
                    prefix,
                    number,
                    tail,
                    ..
                } => format!("{prefix}{number}{tail}"),
                Entry::Ping => "ping".into(),
                Entry::End => "end".into(),
            };
            seen.push((slot, text));
        });
        seen
    }

    /// A call to three relays is one copy of its tail and prefix plus three references; each
    /// relay reads its own callId, in its own order, across messages; a too-large call goes
    /// whole; a reset forgets the pieces.
    #[test]
    fn shared_pieces_cross_once_and_order_is_kept() {
        let prefix: Arc<str> = "<p>".into();
        let tail: Arc<str> = "<t1>".into();
        let call = |n| Outgoing::Spliced {
            prefix: prefix.clone(),
            number: n,
            tail: tail.clone(),
        };
        let mut encoder = Encoder::default();
        let mut decoder = Decoder::default();
        let mut body = Vec::new();
        encoder.begin(&mut body);
        encoder.frame(&mut body, 1, &Outgoing::Text("reply".into()));
        encoder.frame(&mut body, 1, &call(7));
        encoder.frame(&mut body, 2, &call(0));
        encoder.frame(&mut body, 3, &Outgoing::Ping(Vec::new()));
        assert_eq!(
            encoder.take_counts(),
            Counts {
                deliveries: 3,
                copies: 3
            }
        );
        assert_eq!(
            read(&mut decoder, &body),
            [
                (1, "reply".into()),
                (1, "<p>7<t1>".into()),
                (2, "<p>0<t1>".into()),
                (3, "ping".into())
            ]
        );
        // The next message references the pieces already defined.
        let mut body = Vec::new();
        encoder.begin(&mut body);
        encoder.frame(&mut body, 3, &call(4));
        encoder.end(&mut body, 2);
        assert_eq!(encoder.take_counts().copies, 0);
        assert_eq!(
            read(&mut decoder, &body),
            [(3, "<p>4<t1>".into()), (2, "end".into())]
        );
        // Past PIECES other definitions, the tail is defined again.
        let mut body = Vec::new();
        for k in 0..PIECES {
            let other: Arc<str> = format!("<x{k}>").into();
            let frame = Outgoing::Spliced {
                prefix: other.clone(),
                number: 1,
                tail: other,
            };
            encoder.frame(&mut body, 1, &frame);
        }
        encoder.frame(&mut body, 1, &call(9));
        encoder.take_counts();
        let seen = read(&mut decoder, &body);
        assert_eq!(seen.last().unwrap(), &(1, "<p>9<t1>".to_string()));
        // The prefix, the oldest piece B has, is defined again with a new tail rather than
        // referenced (the tail's definition takes its place in B's ring).
        let mut body = Vec::new();
        for k in 0..PIECES - 2 {
            let other: Arc<str> = format!("<y{k}>").into();
            let frame = Outgoing::Spliced {
                prefix: other.clone(),
                number: 1,
                tail: other,
            };
            encoder.frame(&mut body, 1, &frame);
        }
        let frame = Outgoing::Spliced {
            prefix: prefix.clone(),
            number: 3,
            tail: "<t2>".into(),
        };
        encoder.frame(&mut body, 2, &frame);
        let seen = read(&mut decoder, &body);
        assert_eq!(seen.last().unwrap(), &(2, "<p>3<t2>".to_string()));
        // A large call goes whole.
        let big: Arc<str> = "y".repeat(MAX_PIECE + 1).into();
        let mut body = Vec::new();
        let frame = Outgoing::Spliced {
            prefix: prefix.clone(),
            number: 2,
            tail: big.clone(),
        };
        encoder.frame(&mut body, 5, &frame);
        assert_eq!(read(&mut decoder, &body), [(5, format!("<p>2{big}"))]);
        // A new link task resets B's pieces: a stale reference is dropped, not misread.
        let mut fresh = Encoder::default();
        let mut body = Vec::new();
        fresh.begin(&mut body);
        body.extend_from_slice(&[SPLICED, 0, 0, 0, 1, 0, 0, 0, 0]);
        body.extend_from_slice(&[0; 8]);
        body.extend_from_slice(&[0, 0, 0, 1]);
        assert!(read(&mut decoder, &body).is_empty());
    }
}
