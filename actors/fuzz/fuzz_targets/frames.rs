//! WebSocket message reassembly: any sequence of frames yields messages, `Pending` or a close
//! reason, never a panic, and a completed text message is valid UTF-8 within the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtable_actors::protocol::frames::{Piece, Reassembled, Reassembler};

const MAX: usize = 512;

fuzz_target!(|data: &[u8]| {
    let mut reassembler = Reassembler::new(MAX);
    let mut rest = data;
    // Each frame: one byte picks the piece and its length (low 6 bits), then the payload.
    while let Some((&head, tail)) = rest.split_first() {
        let piece = match head >> 6 {
            0 => Piece::FirstText,
            1 => Piece::FirstBinary,
            2 => Piece::Continue,
            _ => Piece::Last,
        };
        let len = usize::from(head & 0x3f).min(tail.len());
        let (payload, after) = tail.split_at(len);
        rest = after;
        match reassembler.push(piece, payload) {
            Ok(Reassembled::Text(text)) => assert!(text.len() <= MAX),
            Ok(Reassembled::Binary(bytes)) => assert!(bytes.len() <= MAX),
            Ok(Reassembled::Pending) | Err(_) => {}
        }
    }
});
