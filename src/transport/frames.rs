//! Inbound frames of one [`Connection`]: the handler of the [`reader`](super::reader)'s stream, the glue to the pure
//! reassembler (`roundtable_actors::protocol::frames`: continuations, the `max_frame_bytes` cap, the
//! server-wide reassembly budget), UTF-8 checks and the close codes each failure earns. A
//! complete message goes to [`Connection::on_message`].

use actix::prelude::*;
use actix_http::ws::{Item, Message, ProtocolError};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::Outgoing;
use roundtable_actors::protocol::frames::{Piece, Reassembled};

use super::Connection;

/// Close code (RFC 6455 section 7.4.1): the server is going away (shutdown, ping timeout).
pub(super) const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code (IANA registry): the server is restarting (`restart`); reconnect.
pub(super) const CLOSE_SERVICE_RESTART: u16 = 1012;
/// Close code: the peer broke the protocol.
pub(super) const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// Close code: a text message that is not UTF-8.
pub(super) const CLOSE_INVALID_DATA: u16 = 1007;
/// Close code: a frame or message over `max_frame_bytes`.
pub(super) const CLOSE_TOO_BIG: u16 = 1009;

impl Connection {
    /// Closes with the code a read error calls for: 1009 too big, 1007 bad UTF-8, else 1002.
    fn protocol_error(&mut self, err: ProtocolError) {
        let (code, reason) = match &err {
            ProtocolError::Overflow => (CLOSE_TOO_BIG, "message too big"),
            // A text frame that is not UTF-8. (Reserved bits also arrive as InvalidData, but
            // they are a protocol error: 1002.)
            ProtocolError::Io(e)
                if e.kind() == std::io::ErrorKind::InvalidData
                    && e.to_string().to_lowercase().contains("utf-8") =>
            {
                (CLOSE_INVALID_DATA, "invalid UTF-8")
            }
            _ => (CLOSE_PROTOCOL_ERROR, "protocol error"),
        };
        log::debug!("socket {}: {err}", self.socket_id);
        self.close(code, reason);
    }

    /// One continuation frame into the reassembler; a complete message is handled.
    fn fragment(&mut self, item: Item, ctx: &mut Context<Self>) {
        let (piece, bytes) = match item {
            Item::FirstText(b) => (Piece::FirstText, b),
            Item::FirstBinary(b) => (Piece::FirstBinary, b),
            Item::Continue(b) => (Piece::Continue, b),
            Item::Last(b) => (Piece::Last, b),
        };
        match self.fragments.push(piece, &bytes) {
            Ok(Reassembled::Pending) => {}
            Ok(Reassembled::Text(text)) => self.on_message(&text, ctx),
            Ok(Reassembled::Binary(bytes)) => self.on_binary(bytes, ctx),
            Err(e) => self.close(e.close_code(), e.reason()),
        }
    }

    /// A complete binary message: echoed on the echo endpoint, else read as UTF-8 JSON.
    pub(super) fn on_binary(&mut self, bytes: Vec<u8>, ctx: &mut Context<Self>) {
        if self.echo {
            Metrics::inc(&self.state.metrics.frames_in);
            self.send_frame(Outgoing::Binary(bytes));
            return;
        }
        // TypeAgent's server accepts binary frames carrying UTF-8 JSON.
        match String::from_utf8(bytes) {
            Ok(text) => self.on_message(&text, ctx),
            Err(_) => {
                Metrics::inc(&self.state.metrics.frames_dropped);
                log::warn!(
                    "socket {}: dropped a binary frame that is not UTF-8",
                    self.socket_id
                );
            }
        }
    }
}

impl StreamHandler<Result<Message, ProtocolError>> for Connection {
    fn handle(&mut self, item: Result<Message, ProtocolError>, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        match item {
            Err(e) => self.protocol_error(e),
            Ok(Message::Text(_) | Message::Binary(_)) if self.fragments.in_progress() => {
                self.close(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
            }
            Ok(Message::Text(text)) => self.on_message(&text, ctx),
            Ok(Message::Binary(bytes)) => self.on_binary(bytes.to_vec(), ctx),
            Ok(Message::Continuation(item)) => self.fragment(item, ctx),
            Ok(Message::Ping(bytes)) => {
                let _ = self.outbox.push_frame(Outgoing::Pong(bytes.to_vec()));
            }
            Ok(Message::Pong(_)) => self.awaiting_pong = false,
            Ok(Message::Close(reason)) => {
                self.closing = true;
                match reason {
                    Some(r) => self
                        .outbox
                        .close(r.code.into(), r.description.unwrap_or_default()),
                    None => self.outbox.close_empty(),
                }
            }
            Ok(Message::Nop) => {}
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
