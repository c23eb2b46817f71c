//! The inbound half of an upgraded socket: a stream of WebSocket messages parsed by actix-http's
//! `ws` codec from the TCP read half, fed to the [`Connection`](super::Connection) actor as its
//! stream. An idle socket holds no read buffer: bytes are read into a stack chunk and copied
//! into a heap buffer only while a frame is incomplete or more frames wait to be parsed.
//!
//! When the server closes the socket (the writer sent its close frame and is done), the read
//! half is not dropped at once: a socket closed with unread bytes in it is reset, and a reset
//! makes the peer's kernel drop what it had not read yet, the close frame included (a slow
//! consumer is closed exactly while its requests wait unread). So the stream ends, and
//! [`linger`] reads and discards what still comes until the peer's own close frame, its end
//! of stream, or [`LINGER`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_codec::Decoder;
use actix_http::ws::{Codec, Frame, Message, ProtocolError};
use bytes::BytesMut;
use bytestring::ByteString;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::oneshot;

/// Bytes read per system call.
const READ_CHUNK: usize = 8 * 1024;

/// How long a socket the server closed is still read (and what comes discarded) for the peer
/// to get the close frame and answer it.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes read per system call while lingering (kept small: every closing socket has one).
const LINGER_CHUNK: usize = 1024;

/// The socket's inbound messages; ends at end of stream, after a read error, or when the
/// writer has finished (it closed the socket).
pub(super) struct Frames {
    /// The TCP read half; handed to [`linger`] when the writer is done.
    io: Option<OwnedReadHalf>,
    /// Bytes read and not parsed yet; unallocated when empty.
    buf: BytesMut,
    /// The frame parser (`max_frame_bytes` per frame).
    codec: Codec,
    /// Fires (or is dropped) when the writer is done: the socket is closed, nothing more is
    /// read.
    writer_done: oneshot::Receiver<()>,
    /// Set once the stream has ended.
    done: bool,
}

impl Frames {
    /// Reads `io`, starting with `leftover` (bytes read past the handshake).
    pub(super) fn new(
        io: OwnedReadHalf,
        leftover: BytesMut,
        max_frame_bytes: usize,
        writer_done: oneshot::Receiver<()>,
    ) -> Frames {
        Frames {
            io: Some(io),
            buf: leftover,
            codec: Codec::new().max_size(max_frame_bytes),
            writer_done,
            done: false,
        }
    }

    /// Parses the next complete frame from the buffer, if there is one.
    fn parse(&mut self) -> Result<Option<Message>, ProtocolError> {
        let frame = self.codec.decode(&mut self.buf)?;
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            // Give the allocation back (a parsed frame's bytes keep their part alive).
            self.buf = BytesMut::new();
        }
        frame.map(message).transpose()
    }
}

impl Frames {
    /// Hands the read half to [`linger`] (once; on a runtime, else it is dropped).
    fn start_lingering(&mut self) {
        if let (Some(io), Ok(runtime)) = (self.io.take(), tokio::runtime::Handle::try_current()) {
            let codec = std::mem::replace(&mut self.codec, Codec::new());
            runtime.spawn(linger(io, std::mem::take(&mut self.buf), codec));
        }
    }
}

impl Drop for Frames {
    /// The connection may stop before the stream sees the writer done: the socket lingers
    /// all the same (at once done if the peer had closed).
    fn drop(&mut self) {
        self.start_lingering();
    }
}

/// A parsed frame as the message the connection handles; text must be UTF-8.
fn message(frame: Frame) -> Result<Message, ProtocolError> {
    Ok(match frame {
        Frame::Text(bytes) => ByteString::try_from(bytes)
            .map(Message::Text)
            .map_err(|e| ProtocolError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))?,
        Frame::Binary(bytes) => Message::Binary(bytes),
        Frame::Ping(bytes) => Message::Ping(bytes),
        Frame::Pong(bytes) => Message::Pong(bytes),
        Frame::Close(reason) => Message::Close(reason),
        Frame::Continuation(item) => Message::Continuation(item),
    })
}

impl Stream for Frames {
    type Item = Result<Message, ProtocolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if Pin::new(&mut this.writer_done).poll(cx).is_ready() {
            this.done = true;
            this.start_lingering();
            return Poll::Ready(None);
        }
        loop {
            match this.parse() {
                Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                Ok(None) => {}
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            let Some(io) = this.io.as_mut() else {
                this.done = true;
                return Poll::Ready(None);
            };
            match Pin::new(io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(ProtocolError::Io(e))));
                }
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(())) => this.buf.extend_from_slice(read.filled()),
            }
        }
    }
}

/// Reads a socket the server has closed until the peer's close frame, its end of stream, an
/// error or [`LINGER`], discarding what comes (frames parsed with `codec` from `buf` on; after
/// a frame that does not parse, bytes unparsed), then drops it: closed with nothing unread,
/// the socket ends with a FIN, not a reset.
async fn linger(mut io: OwnedReadHalf, mut buf: BytesMut, mut codec: Codec) {
    let drain = async {
        let mut parsing = true;
        let mut chunk = [0u8; LINGER_CHUNK];
        loop {
            while parsing {
                match codec.decode(&mut buf) {
                    Ok(Some(Frame::Close(_))) => return,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => parsing = false,
                }
            }
            if !parsing {
                buf = BytesMut::new();
            }
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) if parsing => buf.extend_from_slice(&chunk[..n]),
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;

    /// The server closes a socket whose peer sent requests the server never read (a slow
    /// consumer): the peer still gets everything written before the close, the close frame
    /// included, instead of a reset that drops it. Real sockets.
    #[tokio::test]
    async fn a_socket_the_server_closes_unread_ends_without_a_reset() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // The peer's receive window is small, so the server's last bytes are still in its
        // send queue when it closes (a slow consumer is one that does not read).
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let peer = socket.connect(listener.local_addr().unwrap());
        let (peer, accepted) = tokio::join!(peer, listener.accept());
        let mut peer = peer.unwrap();
        let (read_half, mut write_half) = accepted.unwrap().0.into_split();
        let (writer_done, stop_reading) = oneshot::channel();
        let mut frames = Frames::new(read_half, BytesMut::new(), 1 << 20, stop_reading);
        // Requests the server will not read: 64 KB of masked text frames.
        let mut requests = BytesMut::new();
        let mut client = Codec::new().client_mode();
        for _ in 0..64 {
            actix_codec::Encoder::encode(
                &mut client,
                Message::Text("x".repeat(1000).into()),
                &mut requests,
            )
            .unwrap();
        }
        peer.write_all(&requests).await.unwrap();
        // The server's last bytes (standing for its close frame), then its side shut.
        let last = b"the close frame".repeat(800);
        write_half.write_all(&last).await.unwrap();
        write_half.shutdown().await.unwrap();
        drop(write_half);
        writer_done.send(()).unwrap();
        assert!(
            frames.next().await.is_none(),
            "the stream ends with the writer"
        );
        drop(frames);
        let mut got = Vec::new();
        peer.read_to_end(&mut got)
            .await
            .expect("no reset: the server's socket was read to the end");
        assert_eq!(got, last);
    }
}
