//! The inbound half of an upgraded socket: a stream of WebSocket messages parsed by actix-http's
//! `ws` codec from the TCP read half, fed to the [`Connection`](super::Connection) actor as its
//! stream. An idle socket holds no read buffer: bytes are read into a stack chunk and copied
//! into a heap buffer only while a frame is incomplete or more frames wait to be parsed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_codec::Decoder;
use actix_http::ws::{Codec, Frame, Message, ProtocolError};
use bytes::BytesMut;
use bytestring::ByteString;
use futures_util::Stream;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::oneshot;

/// Bytes read per system call.
const READ_CHUNK: usize = 8 * 1024;

/// The socket's inbound messages; ends at end of stream, after a read error, or when the
/// writer has finished (it closed the socket).
pub(super) struct Frames {
    /// The TCP read half.
    io: OwnedReadHalf,
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
            io,
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
            match Pin::new(&mut this.io).poll_read(cx, &mut read) {
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
