//! The wire format of a relay (see the parent module's doc for the subjects and kinds; the
//! subjects themselves come from the cluster's [`Names`](roundtable_actors::cluster::Names)): the one-byte kinds, the [`Publisher`] that keeps one direction in order and
//! splits what exceeds NATS' `max_payload`, [`Chunks`] that joins it again, and the batching of
//! several text frames into one message. Used by both sides: the socket's relay (`mod.rs`) and
//! the virtual connection (`serving.rs`).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use roundtable_actors::cluster::Cluster;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Largest message a relay joins from chunks (a history answer of a very long conversation
/// can be tens of MB); a larger one is dropped with a warning.
pub const MAX_RELAYED_MESSAGE: usize = 256 << 20;
/// Frames one relay direction may have waiting for NATS.
pub const RELAY_QUEUE_FRAMES: usize = 4096;
/// Bytes of a NATS message's payload used for one chunk when a frame exceeds the server's
/// `max_payload` (room left for the kind byte and headers).
pub(super) const CHUNK_MARGIN: usize = 1024;

pub(super) const TEXT: u8 = b'T';
/// Several text frames in one message (see [`batch_frames`]).
pub(super) const BATCH: u8 = b'B';
/// Text frames one [`BATCH`] carries at most.
pub(super) const BATCH_FRAMES: usize = 256;
pub(super) const CHUNK: u8 = b'C';
pub(super) const PING: u8 = b'P';
pub(super) const PONG: u8 = b'O';
pub(super) const END: u8 = b'X';

/// B's request for a virtual connection.
#[derive(Serialize, Deserialize)]
pub(super) struct OpenRelay {
    /// The relay's id (a UUID, part of its subjects).
    pub(super) relay: String,
    /// The asking node (where the `.out` subject lives).
    pub(super) from: String,
}

/// The sending half of one relay direction: a bounded queue drained in order by one task.
#[derive(Clone)]
pub(in crate::transport) struct Publisher {
    /// To the task publishing this direction, in order; at most [`RELAY_QUEUE_FRAMES`].
    tx: mpsc::Sender<(u8, Bytes)>,
}

impl Publisher {
    /// Starts the task that publishes to `subject`; it ends after an [`END`] or when every
    /// handle is dropped.
    pub(super) fn start(cluster: &Cluster, subject: String) -> Publisher {
        let (tx, mut rx) = mpsc::channel::<(u8, Bytes)>(RELAY_QUEUE_FRAMES);
        let client = cluster.client().clone();
        let stats = cluster.clone();
        actix::spawn(async move {
            let max = (client.server_info().max_payload.max(4 * CHUNK_MARGIN)) - CHUNK_MARGIN;
            while let Some((kind, body)) = rx.recv().await {
                let mut rest = body;
                loop {
                    let last = rest.len() <= max;
                    let piece = rest.split_to(rest.len().min(max));
                    let mut payload = Vec::with_capacity(piece.len() + 1);
                    payload.push(if last { kind } else { CHUNK });
                    payload.extend_from_slice(&piece);
                    if let Err(e) = client.publish(subject.clone(), payload.into()).await {
                        log::warn!("cluster relay {subject}: publish failed: {e}");
                        return;
                    }
                    if last {
                        break;
                    }
                }
                stats.stats().relayed_frames.fetch_add(1, Ordering::Relaxed);
                if kind == END {
                    return;
                }
            }
        });
        Publisher { tx }
    }

    /// Queues one message; false when the queue is full or the task has ended.
    pub(in crate::transport) fn send(&self, kind: u8, body: impl Into<Bytes>) -> bool {
        self.tx.try_send((kind, body.into())).is_ok()
    }

    /// Queues a text frame.
    pub(in crate::transport) fn text(&self, text: String) -> bool {
        self.send(TEXT, text)
    }

    /// Ends the relay (the other side stops).
    pub(in crate::transport) fn end(&self) {
        let _ = self.send(END, Bytes::new());
    }
}

/// Joins the chunks of one frame; answers (kind, body) once a message completes one.
pub(super) struct Chunks {
    /// The chunks of the message being joined (empty between messages); at most `limit`
    /// bytes.
    partial: Vec<u8>,
    /// The message being received is too large and is being skipped to its last part.
    dropping: bool,
    /// [`MAX_RELAYED_MESSAGE`] (tests use less).
    limit: usize,
}

impl Default for Chunks {
    fn default() -> Chunks {
        Chunks {
            partial: Vec::new(),
            dropping: false,
            limit: MAX_RELAYED_MESSAGE,
        }
    }
}

impl Chunks {
    pub(super) fn take(&mut self, payload: &[u8]) -> Option<(u8, Vec<u8>)> {
        let (&kind, body) = payload.split_first()?;
        if kind == CHUNK {
            if self.partial.len() + body.len() > self.limit {
                log::warn!("cluster relay: a message past {} bytes dropped", self.limit);
                self.partial = Vec::new();
                self.dropping = true;
                return None;
            }
            if !self.dropping {
                self.partial.extend_from_slice(body);
            }
            return None;
        }
        if std::mem::take(&mut self.dropping) {
            return None;
        }
        let mut whole = std::mem::take(&mut self.partial);
        whole.extend_from_slice(body);
        Some((kind, whole))
    }
}

/// The frames of a [`BATCH`] message: each a big-endian `u32` length, then its bytes.
pub(super) fn batch_frames(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        let frame = tail.get(..len)?;
        rest = &tail[len..];
        Some(frame)
    })
}

/// Appends one frame to a [`BATCH`] body.
pub(super) fn push_batch_frame(body: &mut Vec<u8>, frame: &str) {
    body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    body.extend_from_slice(frame.as_bytes());
}

/// Queues `texts` as one message (a [`TEXT`] for one frame, a [`BATCH`] for several); false
/// when the queue toward the other node is full.
pub(super) fn flush(publisher: &Publisher, texts: &mut Vec<String>) -> bool {
    match texts.len() {
        0 => true,
        1 => publisher.text(texts.pop().expect("one")),
        _ => {
            let mut body = Vec::with_capacity(texts.iter().map(|t| t.len() + 4).sum());
            for text in texts.drain(..) {
                push_batch_frame(&mut body, &text);
            }
            publisher.send(BATCH, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch read back frame by frame, through the chunking a large message gets; a
    /// truncated batch yields its whole frames and stops.
    #[test]
    fn batches_and_chunks_round_trip() {
        let frames = ["{\"a\":1}", "", "{\"b\":\"ü\"}"];
        let mut body = Vec::new();
        for f in frames {
            push_batch_frame(&mut body, f);
        }
        let read: Vec<&[u8]> = batch_frames(&body).collect();
        assert_eq!(read, frames.map(str::as_bytes));
        // Split the way the publisher splits a message past max_payload.
        let (first, rest) = body.split_at(5);
        let mut chunks = Chunks::default();
        assert_eq!(chunks.take(&[&[CHUNK][..], first].concat()), None);
        let (kind, whole) = chunks.take(&[&[BATCH][..], rest].concat()).unwrap();
        assert_eq!((kind, whole.as_slice()), (BATCH, body.as_slice()));
        // A cut batch: the whole frames before the cut only.
        let cut = &body[..body.len() - 2];
        assert_eq!(batch_frames(cut).count(), 2);
        assert_eq!(chunks.take(&[]), None);
    }

    /// A message joined from chunks past the limit is dropped whole; the next one arrives.
    #[test]
    fn chunks_past_the_limit_are_dropped() {
        let mut chunks = Chunks {
            limit: 8,
            ..Chunks::default()
        };
        assert_eq!(chunks.take(b"C12345"), None);
        assert_eq!(chunks.take(b"C6789a"), None);
        assert_eq!(chunks.take(b"Cbcdef"), None);
        assert_eq!(chunks.take(b"Tend"), None);
        assert_eq!(chunks.take(b"Tnext"), Some((TEXT, b"next".to_vec())));
        assert_eq!(chunks.take(b"Cab"), None);
        assert_eq!(chunks.take(b"Tcd"), Some((TEXT, b"abcd".to_vec())));
    }
}
