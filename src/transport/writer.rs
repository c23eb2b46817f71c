//! The socket writer: one task per WebSocket drains the connection's bounded outbox into the
//! actix-ws `Session`, one frame at a time, and ends the socket after a close frame. Started by
//! [`super::start`]; the [`Connection`](super::Connection) actor only pushes into the outbox.

use std::time::Duration;

use actix_ws::{CloseCode, CloseReason, Session};
use roundtable_actors::outbox::{Budget, OutboxReceiver, Outgoing};

/// How long a close frame may wait for a peer that does not read before TCP is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Drains the outbox into the socket, one frame at a time; returns after a close frame or when
/// the peer is gone. Dropping the session then ends the HTTP response, which closes TCP. A
/// priority close (slow consumer) interrupts a write the peer is not reading.
pub(super) async fn write_loop(mut session: Session, mut rx: OutboxReceiver) {
    while let Some((item, budget)) = rx.next_with_budget().await {
        let send = async {
            match item {
                Outgoing::Text(text) => session
                    .text(budgeted_text(text, budget))
                    .await
                    .map(|()| None),
                Outgoing::Binary(bytes) => session.binary(bytes).await.map(|()| None),
                Outgoing::Ping(bytes) => session.ping(&bytes).await.map(|()| None),
                Outgoing::Pong(bytes) => session.pong(&bytes).await.map(|()| None),
                Outgoing::Close(reason) => Ok(Some(reason)),
            }
        };
        let outcome = tokio::select! {
            biased;
            sent = send => sent,
            Some(Outgoing::Close(reason)) = rx.abort_requested() => Ok(Some(reason)),
        };
        match outcome {
            Ok(None) => {}
            Ok(Some(reason)) => {
                rx.close();
                let reason = reason.map(|(code, text)| CloseReason {
                    code: CloseCode::from(code),
                    description: (!text.is_empty()).then_some(text),
                });
                // A peer that reads nothing would never take the close frame: give up on it.
                let _ = tokio::time::timeout(CLOSE_GRACE, session.close(reason)).await;
                return;
            }
            Err(_) => break,
        }
    }
    rx.close();
}

/// A text frame whose share of the socket's byte budget is released only when actix-ws has
/// encoded it for the socket and dropped it (not when it enters actix-ws's 32-frame channel),
/// so the budget bounds everything queued toward a peer.
fn budgeted_text(text: String, budget: Option<Budget>) -> bytestring::ByteString {
    struct Budgeted {
        text: String,
        _budget: Option<Budget>,
    }
    impl AsRef<[u8]> for Budgeted {
        fn as_ref(&self) -> &[u8] {
            self.text.as_bytes()
        }
    }
    let bytes = bytes::Bytes::from_owner(Budgeted {
        text,
        _budget: budget,
    });
    // SAFETY: the bytes are those of a `String`, hence valid UTF-8.
    unsafe { bytestring::ByteString::from_bytes_unchecked(bytes) }
}
