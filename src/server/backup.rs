//! `GET /backup`: a consistent snapshot of the running instance, streamed as a tar archive
//! (format: [`crate::backup`]). Behind the same checks as a WebSocket upgrade (`Origin`, then
//! the token or the same-user rule: [`guards::client_refusal`]).
//!
//! HTTP rather than a protocol method: an archive is a byte stream of any size, which a
//! plain response carries with TCP's flow control and no encoding, while an agent-server
//! invoke would have to cut it into base64 JSON frames under the frame size bound and hold
//! them in the socket's outbound queue; and the protocol is TypeAgent's contract, which has
//! no such method.
//!
//! The registry takes the snapshot ([`SnapshotInstance`]: both storage writers held while
//! the files are hard-linked). A `backup-stream` thread then builds the manifest and writes
//! the archive into a bounded channel ([`STREAM_CHUNKS`] × [`CHUNK_BYTES`]) that the response
//! body drains, so a slow reader slows the thread, not the server's memory. When the stream
//! ends, fails or its client goes away, the thread drops the snapshot, which removes the
//! links. One backup runs at a time; a second gets 409.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use actix_web::http::header;
use actix_web::web::Data;
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use roundtable_actors::registry::SnapshotInstance;
use roundtable_actors::storage::snapshot::Snapshot;
use tokio::sync::{mpsc, oneshot};

use super::{guards, AppState};
use crate::backup::archive;

/// Bytes per body chunk.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks written ahead of the client (256 KiB per backup).
pub const STREAM_CHUNKS: usize = 4;

/// Set while a backup runs: one at a time (each holds the writers once and a link directory).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The running backup's claim; released on drop.
struct Slot;

impl Slot {
    fn claim() -> Option<Slot> {
        (!RUNNING.swap(true, Ordering::AcqRel)).then_some(Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

/// `GET /backup`.
pub async fn backup(req: HttpRequest, state: Data<AppState>) -> HttpResponse {
    if let Some(refusal) = guards::client_refusal(&req, &state.config, "backup") {
        return refusal;
    }
    let peer = req
        .peer_addr()
        .map_or_else(|| "unknown".into(), |a| a.to_string());
    let Some(slot) = Slot::claim() else {
        return HttpResponse::Conflict()
            .body("a backup is already running; try again when it has finished");
    };
    let snapshot = match state.registry.send(SnapshotInstance).await {
        Ok(Ok(snapshot)) => snapshot,
        Ok(Err(e)) => {
            log::error!("backup for {peer}: {e}");
            return HttpResponse::ServiceUnavailable().body(format!("cannot take a backup: {e}"));
        }
        Err(_) => {
            return HttpResponse::ServiceUnavailable()
                .body("cannot take a backup: the conversation registry does not answer")
        }
    };
    log::info!(
        "backup for {peer}: snapshot of {} files in {} (writers held {} µs)",
        snapshot.files.len(),
        snapshot.dir.display(),
        snapshot.held.as_micros()
    );
    let Some((head, mut body)) = stream(snapshot, slot, peer) else {
        return HttpResponse::ServiceUnavailable().body("cannot start the backup stream");
    };
    let (files, bytes) = match head.await {
        Ok(Ok(totals)) => totals,
        Ok(Err(e)) => {
            log::error!("backup: {e}");
            return HttpResponse::InternalServerError().body(format!("cannot take a backup: {e}"));
        }
        Err(_) => return HttpResponse::InternalServerError().body("the backup stream stopped"),
    };
    let name = format!(
        "roundtable-backup-{}.tar",
        roundtable_actors::clock::now_millis()
    );
    HttpResponse::Ok()
        .content_type("application/x-tar")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header(("X-Roundtable-Backup-Files", files.to_string()))
        .insert_header(("X-Roundtable-Backup-Bytes", bytes.to_string()))
        .streaming(futures_util::stream::poll_fn(move |cx| body.poll_recv(cx)))
}

/// What the response waits for first: the manifest's file and byte totals, or why there is
/// no archive.
type Head = oneshot::Receiver<Result<(u64, u64), String>>;
/// The body's chunks, or the error that cuts it short.
type Body = mpsc::Receiver<Result<Bytes, io::Error>>;

/// Starts the `backup-stream` thread for `snapshot`: it plans the archive, answers the head,
/// writes the body, and drops the snapshot (removing the links) and the slot when done.
/// `None` if the thread cannot start.
fn stream(snapshot: Snapshot, slot: Slot, peer: String) -> Option<(Head, Body)> {
    let (head_tx, head) = oneshot::channel();
    let (body_tx, body) = mpsc::channel(STREAM_CHUNKS);
    let who = peer.clone();
    let spawned = std::thread::Builder::new()
        .name("backup-stream".into())
        .spawn(move || {
            let _slot = slot;
            let plan = match archive::plan(&snapshot) {
                Ok(plan) => plan,
                Err(e) => {
                    let _ = head_tx.send(Err(e));
                    return;
                }
            };
            let _ = head_tx.send(Ok((plan.manifest.files, plan.manifest.bytes)));
            let mut out = Chunks {
                tx: body_tx.clone(),
                buf: Vec::with_capacity(CHUNK_BYTES),
            };
            match archive::write(&snapshot, &plan, &mut out) {
                Ok(()) => log::info!(
                    "backup for {peer}: sent {} files, {} bytes, {} conversations",
                    plan.manifest.files,
                    plan.manifest.bytes,
                    plan.manifest.conversations.len()
                ),
                Err(e) => {
                    log::error!("backup for {peer}: stopped: {e}");
                    let _ = body_tx.blocking_send(Err(e));
                }
            }
        });
    match spawned {
        Ok(_) => Some((head, body)),
        Err(e) => {
            log::error!("backup for {who}: cannot start the stream thread: {e}");
            None
        }
    }
}

/// The archive writer's sink: fills [`CHUNK_BYTES`] chunks and hands them to the response,
/// waiting while [`STREAM_CHUNKS`] are unsent. Fails once the response is gone.
struct Chunks {
    /// Toward the response body.
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    /// The chunk being filled.
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
