//! The HTTP → WebSocket hand-over. actix-http calls the [`upgrade_service`] for every request
//! that asks to upgrade its connection, with the request and the connection itself; the
//! HTTP/1 dispatcher that parsed it is gone from then on, and so are its two 8 KB buffers
//! (kept for the socket's whole life when the upgrade is answered through an ordinary
//! streaming response, as actix-ws does: 16 of the 24 KB a joined client cost).
//!
//! The request still runs through the whole actix-web [`App`](actix_web::App) — Host check,
//! routing, the security guards, the handshake checks — exactly as any other request; the
//! handler ([`super::start`]) finds a [`RawUpgrade`] slot in the request's extensions and
//! leaves in it what to start on the socket. This module writes the handler's response; after
//! `101 Switching Protocols` it hands the TCP stream, and whatever bytes the client sent
//! after its handshake, to that starter. Any other answer (a refusal) is written whole and the
//! connection closed.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use actix_codec::Framed;
use actix_http::body::{to_bytes, BoxBody, MessageBody};
use actix_http::h1::{Codec, Message};
use actix_http::{ConnectionType, HttpMessage as _, Request, Response, StatusCode};
use actix_service::{fn_factory, fn_service, Service, ServiceFactory};
use actix_web::dev::ServiceResponse;
use bytes::BytesMut;
use futures_util::SinkExt;
use tokio::net::TcpStream;

/// What the handler leaves for the upgraded socket: started with the stream and the bytes
/// already read past the handshake.
pub type Starter = Box<dyn FnOnce(TcpStream, BytesMut)>;

/// The slot an upgrade request carries in its extensions. The handler fills it when it
/// accepts the upgrade; an empty slot after a 101 means nobody will serve the socket.
#[derive(Clone, Default)]
pub struct RawUpgrade(Rc<RefCell<Option<Starter>>>);

impl RawUpgrade {
    /// Leaves what to start once the 101 is on the wire.
    pub fn set(&self, starter: Starter) {
        *self.0.borrow_mut() = Some(starter);
    }

    fn take(&self) -> Option<Starter> {
        self.0.borrow_mut().take()
    }
}

/// Writing an upgrade request's answer failed (the connection is dropped).
#[derive(Debug, thiserror::Error)]
#[error("upgrade: {0}")]
pub struct UpgradeError(#[from] io::Error);

impl From<UpgradeError> for Response<BoxBody> {
    fn from(_: UpgradeError) -> Self {
        Response::internal_server_error()
    }
}

/// The upgrade service for one worker: its own instance of the application (same routes,
/// same shared state) answers the upgrade requests.
pub fn upgrade_service<F>(
    app: F,
) -> impl ServiceFactory<
    (Request, Framed<TcpStream, Codec>),
    Config = (),
    Response = (),
    Error = UpgradeError,
    InitError = (),
>
where
    F: ServiceFactory<
            Request,
            Config = (),
            Response = ServiceResponse<BoxBody>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    F::Service: 'static,
{
    let app = Rc::new(app);
    fn_factory(move || {
        let service = app.new_service(());
        async move {
            let service = Rc::new(service.await?);
            Ok::<_, ()>(fn_service(move |(req, framed)| {
                upgrade(service.clone(), req, framed)
            }))
        }
    })
}

/// Runs one upgrade request through the application and writes its answer; after a 101, the
/// connection goes to the starter the handler left.
async fn upgrade<S>(
    app: Rc<S>,
    req: Request,
    mut framed: Framed<TcpStream, Codec>,
) -> Result<(), UpgradeError>
where
    S: Service<Request, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    let slot = RawUpgrade::default();
    req.extensions_mut().insert(slot.clone());
    let response: Response<BoxBody> = match app.call(req).await {
        Ok(res) => res.into_parts().1.into(),
        Err(e) => e.error_response().into(),
    };
    let (mut head, body) = response.into_parts();
    let switching = head.status() == StatusCode::SWITCHING_PROTOCOLS;
    match slot.take() {
        Some(start) if switching => {
            framed.send(Message::Item((head, body.size()))).await?;
            let parts = framed.into_parts();
            // The dispatcher's read buffer came along: keep it only if the client already
            // sent frames after its handshake.
            let leftover = if parts.read_buf.is_empty() {
                BytesMut::new()
            } else {
                parts.read_buf
            };
            start(parts.io, leftover);
        }
        _ => {
            if switching {
                log::error!("a 101 answer without a socket starter: closing the connection");
                return Ok(());
            }
            // A refusal: the whole answer, then the connection ends.
            head.head_mut().set_connection_type(ConnectionType::Close);
            let size = body.size();
            let bytes = to_bytes(body)
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
            framed.send(Message::Item((head, size))).await?;
            if !bytes.is_empty() {
                framed.send(Message::Chunk(Some(bytes))).await?;
            }
            framed.send(Message::Chunk(None)).await?;
        }
    }
    Ok(())
}
