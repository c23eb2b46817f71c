//! The socket writer: one task per WebSocket drains the connection's bounded outbox into the
//! TCP write half. Every frame queued when it wakes goes out in one write (encoded by
//! actix-http's `ws` codec); a frame's share of the byte budget is released once the write that
//! carried it is done. Started by [`super::start`] once the upgrade is answered; the
//! [`Connection`](super::Connection) actor only pushes into the outbox.
//!
//! The writer ends after a close frame, when the peer is gone, or when every sender is gone;
//! it then tells the [`reader`](super::reader) to stop, and the socket closes as both halves
//! are dropped. A priority close (slow consumer) interrupts a write the peer is not reading:
//! what was started is finished and the close frame follows, within [`CLOSE_GRACE`].

use std::time::Duration;

use actix_codec::Encoder;
use actix_http::ws::{CloseCode, CloseReason, Codec, Message};
use bytes::{Buf, BytesMut};
use bytestring::ByteString;
use roundtable_actors::outbox::{OutboxReceiver, Outgoing};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::oneshot;

/// How long a close frame may wait for a peer that does not read before TCP is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Frames are gathered into one write up to about this many bytes.
const BATCH_BYTES: usize = 64 * 1024;

/// Control frames carry at most 125 payload bytes (RFC 6455 section 5.5): a close reason after
/// its two-byte code gets 123.
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// Drains the outbox into the socket; returns after a close frame, a write error, or when every
/// sender is gone. `done` stops the reader (dropped on return).
pub(super) async fn write_loop(
    mut io: OwnedWriteHalf,
    mut rx: OutboxReceiver,
    done: oneshot::Sender<()>,
) {
    let mut codec = Codec::new();
    let mut budgets = Vec::new();
    while let Some(first) = rx.next_with_budget().await {
        // Everything queued now, up to the batch size, in one buffer (a fresh one: an idle
        // socket keeps no write buffer).
        let mut buf = BytesMut::new();
        let mut closing = false;
        let mut next = Some(first);
        while let Some((frame, budget)) = next.take() {
            closing = encode(&mut codec, frame, &mut buf);
            budgets.extend(budget);
            if closing || buf.len() >= BATCH_BYTES {
                break;
            }
            next = rx.try_next_with_budget();
        }
        match write_batch(&mut io, &mut buf, &mut rx).await {
            Written::All => {}
            Written::Failed => break,
            Written::Aborted(reason) => {
                // Finish the frame the peer is partway through, then the close, or give up.
                if !closing {
                    encode(&mut codec, Outgoing::Close(reason), &mut buf);
                }
                let _ = tokio::time::timeout(CLOSE_GRACE, io.write_all(&buf)).await;
                break;
            }
        }
        budgets.clear();
        if closing {
            break;
        }
    }
    rx.close();
    let _ = io.shutdown().await;
    let _ = done.send(());
}

/// How a batch's write ended.
enum Written {
    /// Every byte is with the kernel.
    All,
    /// The peer is gone.
    Failed,
    /// A priority close came first; `buf` holds what is still to write.
    Aborted(Option<(u16, String)>),
}

/// Writes `buf`, unless a priority close is requested while the peer does not take it.
async fn write_batch(
    io: &mut OwnedWriteHalf,
    buf: &mut BytesMut,
    rx: &mut OutboxReceiver,
) -> Written {
    while !buf.is_empty() {
        // `write` is cancel-safe: when the close wins, nothing of this call was written.
        tokio::select! {
            biased;
            written = io.write(buf) => match written {
                Ok(0) | Err(_) => return Written::Failed,
                Ok(n) => buf.advance(n),
            },
            Some(Outgoing::Close(reason)) = rx.abort_requested() => return Written::Aborted(reason),
        }
    }
    Written::All
}

/// Encodes one frame into `buf`; true for a close frame (the last one).
fn encode(codec: &mut Codec, frame: Outgoing, buf: &mut BytesMut) -> bool {
    let (message, close) = match frame {
        Outgoing::Text(text) => (Message::Text(ByteString::from(text)), false),
        Outgoing::Binary(bytes) => (Message::Binary(bytes.into()), false),
        Outgoing::Ping(bytes) => (Message::Ping(bytes.into()), false),
        Outgoing::Pong(bytes) => (Message::Pong(bytes.into()), false),
        Outgoing::Close(reason) => {
            let reason = reason.map(|(code, mut text)| {
                if text.len() > MAX_CLOSE_REASON_BYTES {
                    let mut end = MAX_CLOSE_REASON_BYTES;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                }
                CloseReason {
                    code: CloseCode::from(code),
                    description: (!text.is_empty()).then_some(text),
                }
            });
            (Message::Close(reason), true)
        }
    };
    // The server codec does not fail on these messages (it only rejects nothing but
    // oversized control payloads, which the connection never builds).
    if let Err(e) = codec.encode(message, buf) {
        log::warn!("socket writer: cannot encode a frame: {e}");
    }
    close
}
