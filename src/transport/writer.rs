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
use bytes::{Buf, BufMut, Bytes, BytesMut};
use roundtable_actors::outbox::{Budget, OutboxReceiver, Outgoing};
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
        let (mut buf, large, end) = gather(first, &mut rx, &mut codec, &mut budgets);
        let closing = end == BatchEnd::Close;
        if let Some(text) = large {
            // Boxed: the two-part batch of a large frame is not part of the task's state,
            // which every socket keeps for its whole life (584 bytes with this path, 680 with
            // the two parts in it, 560 without the path).
            let go_on = Box::pin(send_large(&mut io, buf, text, &mut rx, &mut codec)).await;
            budgets.clear();
            if go_on {
                continue;
            }
            break;
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
        match end {
            BatchEnd::Close => break,
            BatchEnd::Pause(pause) => tokio::time::sleep(pause).await,
            BatchEnd::More => {}
        }
    }
    rx.close();
    let _ = io.shutdown().await;
    let _ = done.send(());
}

/// Writes a large text frame's `header` then its `text` (see [`gather`]); false when the
/// writer is done: the peer is gone, or a priority close came, which finishes the frame the
/// peer is partway through, then sends the close frame, or gives up after [`CLOSE_GRACE`].
async fn send_large(
    io: &mut OwnedWriteHalf,
    header: BytesMut,
    text: Bytes,
    rx: &mut OutboxReceiver,
    codec: &mut Codec,
) -> bool {
    let mut batch = header.chain(text);
    match write_batch(io, &mut batch, rx).await {
        Written::All => true,
        Written::Failed => false,
        Written::Aborted(reason) => {
            let mut close = BytesMut::new();
            encode(codec, Outgoing::Close(reason), &mut close);
            let mut rest = batch.chain(close);
            let _ = tokio::time::timeout(CLOSE_GRACE, io.write_all_buf(&mut rest)).await;
            false
        }
    }
}

/// How a batch [`gather`] made ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchEnd {
    /// At the byte bound or with the queue empty: go on with the next.
    More,
    /// With a close frame: the writer is done.
    Close,
    /// At an [`Outgoing::Pause`]: the next batch waits this long after the write.
    Pause(Duration),
}

/// Encodes `first` and everything queued behind it now, up to [`BATCH_BYTES`] or an
/// [`Outgoing::Pause`], into one buffer (a fresh one: an idle socket keeps no write buffer),
/// keeping their budgets in `budgets` until the write is done; how it ends. The buffer is
/// sized for the frames in hand: growing it frame by frame was 3% of the server's CPU under
/// `fanout`, and a fixed 4 KB start made every batch a large request that has glibc
/// consolidate its fast bins first (1.5% under `churn`, where most batches are one notice of
/// 200 bytes). Not async, so the frames it handles are not part of the writer task's state,
/// which every socket keeps for its whole life (736 → 560 bytes).
///
/// A text frame of [`BATCH_BYTES`] or more that comes first is a batch of its own and is not
/// copied: the buffer holds its header and the second part returned is its text, written
/// after it (a 10,000-conversation list is 1.7 MB, whose copy into a fresh buffer took a
/// millisecond). Otherwise there is no second part.
fn gather(
    first: (Outgoing, Option<Budget>),
    rx: &mut OutboxReceiver,
    codec: &mut Codec,
    budgets: &mut Vec<Budget>,
) -> (BytesMut, Option<Bytes>, BatchEnd) {
    if let (Outgoing::Text(text), _) = &first {
        if text.len() >= BATCH_BYTES {
            let (Outgoing::Text(text), budget) = first else {
                unreachable!("matched above")
            };
            let mut head = BytesMut::with_capacity(10);
            text_header(&mut head, text.len());
            budgets.extend(budget);
            return (head, Some(Bytes::from(text)), BatchEnd::More);
        }
    }
    let room = first.0.wire_len_max() + rx.in_hand_wire_len(BATCH_BYTES);
    let mut buf = BytesMut::with_capacity(room);
    let mut next = Some(first);
    while let Some((frame, budget)) = next.take() {
        if let Outgoing::Pause(pause) = frame {
            return (buf, None, BatchEnd::Pause(pause));
        }
        let closing = encode(codec, frame, &mut buf);
        budgets.extend(budget);
        if closing {
            return (buf, None, BatchEnd::Close);
        }
        if buf.len() >= BATCH_BYTES {
            break;
        }
        next = rx.try_next_with_budget();
    }
    (buf, None, BatchEnd::More)
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

/// Writes `batch`, unless a priority close is requested while the peer does not take it.
async fn write_batch(
    io: &mut OwnedWriteHalf,
    batch: &mut impl Buf,
    rx: &mut OutboxReceiver,
) -> Written {
    while batch.has_remaining() {
        // `write_buf` is cancel-safe: when the close wins, nothing of this call was written.
        tokio::select! {
            biased;
            written = io.write_buf(batch) => match written {
                Ok(0) | Err(_) => return Written::Failed,
                Ok(_) => {}
            },
            Some(Outgoing::Close(reason)) = rx.abort_requested() => return Written::Aborted(reason),
        }
    }
    Written::All
}

/// Encodes one frame into `buf`; true for a close frame (the last one). Text frames are
/// written here (header, then the text or its parts: no intermediate string); the others go
/// through the codec.
fn encode(codec: &mut Codec, frame: Outgoing, buf: &mut BytesMut) -> bool {
    let (message, close) = match frame {
        Outgoing::Text(text) => {
            buf.reserve(text.len() + 10);
            text_header(buf, text.len());
            buf.extend_from_slice(text.as_bytes());
            return false;
        }
        Outgoing::Spliced {
            ref prefix,
            number,
            ref tail,
        } => {
            buf.reserve(frame.text_len() + 10);
            text_header(buf, frame.text_len());
            buf.extend_from_slice(prefix.as_bytes());
            buf.extend_from_slice(roundtable_actors::protocol::decimal(number, &mut [0; 20]));
            buf.extend_from_slice(tail.as_bytes());
            return false;
        }
        Outgoing::Binary(bytes) => (Message::Binary(bytes.into()), false),
        Outgoing::Ping(bytes) => (Message::Ping(bytes.into()), false),
        Outgoing::Pong(bytes) => (Message::Pong(bytes.into()), false),
        // A batch ends at a pause before it is encoded (`gather`).
        Outgoing::Pause(_) => return false,
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

/// The header of a final, unmasked text frame (RFC 6455 section 5.2) of `len` payload bytes
/// (at most 10 bytes).
fn text_header(buf: &mut BytesMut, len: usize) {
    buf.put_u8(0x80 | 0x1);
    if len < 126 {
        buf.put_u8(len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        buf.put_u8(126);
        buf.put_u16(len);
    } else {
        buf.put_u8(127);
        buf.put_u64(len as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use actix_codec::Decoder;
    use actix_http::ws::Frame;

    /// What the writer encodes, read back by the codec's own parser (client side).
    fn parse(buf: &mut BytesMut) -> Vec<Frame> {
        let mut parser = Codec::new().client_mode().max_size(1 << 20);
        let mut frames = Vec::new();
        while let Some(frame) = parser.decode(buf).unwrap() {
            frames.push(frame);
        }
        assert!(buf.is_empty());
        frames
    }

    #[test]
    fn text_frames_of_every_length_class_and_spliced_calls() {
        let mut codec = Codec::new();
        let mut buf = BytesMut::new();
        let texts = [
            "",
            "short",
            &"x".repeat(125),
            &"y".repeat(126),
            &"z".repeat(70_000),
        ];
        for text in texts {
            assert!(!encode(
                &mut codec,
                Outgoing::Text(text.to_string()),
                &mut buf
            ));
        }
        for number in [0, 7, 10, 12_345, u64::MAX] {
            let frame = Outgoing::Spliced {
                prefix: Arc::from("{\"id\":"),
                number,
                tail: Arc::from("}"),
            };
            assert!(!encode(&mut codec, frame, &mut buf));
        }
        assert!(encode(
            &mut codec,
            Outgoing::Close(Some((1000, "bye".into()))),
            &mut buf
        ));
        let frames = parse(&mut buf);
        let mut expected: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        expected.extend(
            ["0", "7", "10", "12345", "18446744073709551615"].map(|n| format!("{{\"id\":{n}}}")),
        );
        for (frame, text) in frames.iter().zip(&expected) {
            match frame {
                Frame::Text(bytes) => assert_eq!(&bytes[..], text.as_bytes()),
                other => panic!("expected text {text:?}, got {other:?}"),
            }
        }
        assert!(
            matches!(&frames[expected.len()], Frame::Close(Some(r)) if r.description.as_deref() == Some("bye"))
        );
        assert_eq!(frames.len(), expected.len() + 1);
    }

    /// A text frame of `BATCH_BYTES` or more that starts a batch goes out uncopied, and the
    /// frames queued behind it follow it whole (one of them as large, copied into its batch),
    /// over a real socket.
    #[tokio::test]
    async fn a_large_text_frame_starting_a_batch_goes_out_uncopied() {
        use roundtable_actors::outbox::{outbox, OutboxLimits};
        use tokio::io::AsyncReadExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (peer, accepted) = tokio::join!(peer, listener.accept());
        let (_read_half, write_half) = accepted.unwrap().0.into_split();
        let (tx, rx) = outbox(OutboxLimits {
            max_frames: 16,
            max_bytes: 1 << 22,
            server: None,
        });
        let big: String = (0..BATCH_BYTES * 3 + 17)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let texts = [
            big.clone(),
            "between".to_string(),
            big.clone(),
            "after".to_string(),
        ];
        for text in &texts {
            tx.push(text.clone()).unwrap();
        }
        tx.push_frame(Outgoing::Close(None)).unwrap();
        let (done, _stopped) = oneshot::channel();
        let writer = tokio::spawn(write_loop(write_half, rx, done));
        let mut wire = Vec::new();
        peer.unwrap().read_to_end(&mut wire).await.unwrap();
        writer.await.unwrap();
        let frames = parse(&mut BytesMut::from(&wire[..]));
        assert_eq!(frames.len(), 5, "four texts and the close");
        for (frame, text) in frames.iter().zip(&texts) {
            match frame {
                Frame::Text(bytes) => assert!(&bytes[..] == text.as_bytes()),
                other => panic!("expected a text of {} bytes, got {other:?}", text.len()),
            }
        }
        assert!(matches!(frames[4], Frame::Close(None)));
    }

    /// A pause ends its write: the frame after it is not in the write of the frame before
    /// (a join result's, which TypeAgent's client library must have handled first), and it
    /// follows once the pause is over.
    #[tokio::test]
    async fn a_pause_ends_the_write_and_the_next_frame_follows_it() {
        use roundtable_actors::outbox::{outbox, OutboxLimits};
        use tokio::io::AsyncReadExt;

        async fn pair() -> (tokio::net::TcpStream, OwnedWriteHalf) {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
            let (peer, accepted) = tokio::join!(peer, listener.accept());
            (peer.unwrap(), accepted.unwrap().0.into_split().1)
        }
        let limits = || OutboxLimits {
            max_frames: 16,
            max_bytes: 1 << 20,
            server: None,
        };
        let result = "{\"result\":\"joined\"}";
        let wire_len = 2 + result.len();

        // A pause no test outlasts: what follows it cannot have gone yet.
        let (mut peer, write_half) = pair().await;
        let (tx, rx) = outbox(limits());
        tx.push(result.to_string()).unwrap();
        tx.push_frame(Outgoing::Pause(Duration::from_secs(3600)))
            .unwrap();
        tx.push("{\"after\":1}".to_string()).unwrap();
        let (done, _stopped) = oneshot::channel();
        let writer = tokio::spawn(write_loop(write_half, rx, done));
        let mut first = vec![0; wire_len];
        peer.read_exact(&mut first).await.unwrap();
        assert_eq!(&first[2..], result.as_bytes());
        // Had the next frame been in the same write, its bytes would be here with these.
        assert!(matches!(
            peer.try_read(&mut [0; 64]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        ));
        writer.abort();

        // A short pause: everything follows, in order.
        let (mut peer, write_half) = pair().await;
        let (tx, rx) = outbox(limits());
        tx.push(result.to_string()).unwrap();
        tx.push_frame(Outgoing::Pause(Duration::from_millis(1)))
            .unwrap();
        tx.push("{\"after\":1}".to_string()).unwrap();
        tx.push_frame(Outgoing::Close(None)).unwrap();
        let (done, _stopped) = oneshot::channel();
        let writer = tokio::spawn(write_loop(write_half, rx, done));
        let mut wire = Vec::new();
        peer.read_to_end(&mut wire).await.unwrap();
        writer.await.unwrap();
        let frames = parse(&mut BytesMut::from(&wire[..]));
        assert_eq!(frames.len(), 3, "the result, the next frame, the close");
        assert!(matches!(&frames[1], Frame::Text(b) if &b[..] == b"{\"after\":1}"));
    }
}
