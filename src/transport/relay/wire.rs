//! The wire format of relays (see the parent module's doc for the subjects and kinds; the
//! subjects themselves come from the cluster's [`Names`](roundtable_actors::cluster::Names)):
//! the one-byte kinds of a message, [`publish`] that splits what exceeds NATS'
//! `max_payload`, the [`Publisher`] that keeps a client's direction (B → A) in order, and
//! [`Chunks`] that joins a split message again. The entries inside a link's messages (A → B)
//! are `link_wire.rs`'s.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use roundtable_actors::cluster::seal::StreamSealer;
use roundtable_actors::cluster::Cluster;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Largest message a relay joins from chunks (a history answer of a very long conversation
/// can be tens of MB); a larger one is dropped with a warning.
pub const MAX_RELAYED_MESSAGE: usize = 256 << 20;
/// Frames one relay direction may have waiting for NATS.
pub const RELAY_QUEUE_FRAMES: usize = 4096;
/// Bytes of a NATS message's payload used for one chunk when a frame exceeds the server's
/// `max_payload` (room left for the kind byte, the seal and headers).
pub(super) const CHUNK_MARGIN: usize = 1024;

pub(super) const TEXT: u8 = b'T';
/// A link message (A → B): entries for the relays of one link (`link_wire.rs`).
pub(super) const LINK: u8 = b'L';
pub(super) const CHUNK: u8 = b'C';
pub(super) const PING: u8 = b'P';
pub(super) const PONG: u8 = b'O';
pub(super) const END: u8 = b'X';

/// B's request for a virtual connection.
#[derive(Serialize, Deserialize)]
pub(super) struct OpenRelay {
    /// The relay's id (a UUID, part of its `.in` subject).
    pub(super) relay: String,
    /// The asking node (where the link's subject lives).
    pub(super) from: String,
    /// The link the relay's frames travel on (a UUID B chose for the conversation and A).
    pub(super) link: String,
    /// The relay's number within its link.
    pub(super) slot: u32,
}

/// Largest part of a message one NATS message carries (the server's `max_payload` less
/// [`CHUNK_MARGIN`]).
pub(super) fn max_piece(client: &async_nats::Client) -> usize {
    client.server_info().max_payload.max(4 * CHUNK_MARGIN) - CHUNK_MARGIN
}

/// Publishes one message of `kind` to `subject`, split into [`CHUNK`]s past `max` bytes, each
/// NATS message sealed as the next of `stream` (the cluster's own authentication,
/// `roundtable_actors::cluster::seal`: the receiver takes each once, in order, and only from
/// a node holding the cluster secret).
pub(super) async fn publish(
    cluster: &Cluster,
    stream: &mut StreamSealer,
    subject: &str,
    max: usize,
    kind: u8,
    body: Bytes,
) -> Result<(), async_nats::PublishError> {
    let mut rest = body;
    loop {
        let last = rest.len() <= max;
        let piece = rest.split_to(rest.len().min(max));
        let mut payload = Vec::with_capacity(piece.len() + 1);
        payload.push(if last { kind } else { CHUNK });
        payload.extend_from_slice(&piece);
        let sealed = cluster.seal_stream(stream, subject, &payload);
        cluster
            .client()
            .publish(subject.to_string(), sealed)
            .await?;
        if last {
            return Ok(());
        }
    }
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
        let stats = cluster.clone();
        let cluster = cluster.clone();
        actix::spawn(async move {
            let max = max_piece(cluster.client());
            let mut stream = StreamSealer::default();
            while let Some((kind, body)) = rx.recv().await {
                if let Err(e) = publish(&cluster, &mut stream, &subject, max, kind, body).await {
                    log::warn!("cluster relay {subject}: publish failed: {e}");
                    return;
                }
                if kind == TEXT {
                    stats.stats().relayed_frames.fetch_add(1, Ordering::Relaxed);
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A message split the way [`publish`] splits one past `max_payload` is joined whole.
    #[test]
    fn chunks_round_trip() {
        let body = b"{\"a\":1}{\"b\":\"\xc3\xbc\"}".to_vec();
        let (first, rest) = body.split_at(5);
        let mut chunks = Chunks::default();
        assert_eq!(chunks.take(&[&[CHUNK][..], first].concat()), None);
        let (kind, whole) = chunks.take(&[&[LINK][..], rest].concat()).unwrap();
        assert_eq!((kind, whole.as_slice()), (LINK, body.as_slice()));
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
