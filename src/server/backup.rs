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
//! links. One backup runs at a time, from the claim to the removal of its links, whether its
//! client reads it all, goes away or never reads; a second gets 409.
//!
//! `GET /backup` also refuses what a web page can make a browser send without script
//! ([`guards::backup_refusal`]): the archive is every conversation.

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
    /// The slot, unless a backup holds it. (Not `then_some(Slot)`: that builds the `Slot`
    /// eagerly and drops it when the claim fails, releasing the running backup's slot — how
    /// answers came to alternate 200 / 409.)
    fn claim() -> Option<Slot> {
        if RUNNING.swap(true, Ordering::AcqRel) {
            None
        } else {
            Some(Slot)
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

/// `GET /backup`.
pub async fn backup(req: HttpRequest, state: Data<AppState>) -> HttpResponse {
    if let Some(refusal) = guards::backup_refusal(&req)
        .or_else(|| guards::client_refusal(&req, &state.config, "backup"))
    {
        return refusal;
    }
    let peer = req
        .peer_addr()
        .map_or_else(|| "unknown".into(), |a| a.to_string());
    let Some(slot) = Slot::claim() else {
        return HttpResponse::Conflict()
            .body("a backup is already running; try again when it has finished");
    };
    let (head_tx, head) = oneshot::channel();
    let (body_tx, mut body) = mpsc::channel(STREAM_CHUNKS);
    // The backup runs on its own task, not in this request's future: a client that goes away
    // while the snapshot is taken cancels nothing half-way, and the slot stays claimed until
    // the snapshot (its link directory) is gone.
    actix_web::rt::spawn(run(
        state.registry.clone(),
        Running { slot, peer },
        head_tx,
        body_tx,
    ));
    let (files, bytes) = match head.await {
        Ok(Ok(totals)) => totals,
        Ok(Err(Failed::Unavailable(e))) => {
            return HttpResponse::ServiceUnavailable().body(format!("cannot take a backup: {e}"))
        }
        Ok(Err(Failed::Internal(e))) => {
            return HttpResponse::InternalServerError().body(format!("cannot take a backup: {e}"))
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
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Roundtable-Backup-Files", files.to_string()))
        .insert_header(("X-Roundtable-Backup-Bytes", bytes.to_string()))
        .streaming(futures_util::stream::poll_fn(move |cx| body.poll_recv(cx)))
}

/// Why a backup did not start, as the response says it.
enum Failed {
    /// The server cannot take one now (stopping, a writer stopped, the registry is gone): 503.
    Unavailable(String),
    /// Planning the archive failed: 500.
    Internal(String),
}

/// What the response waits for first: the manifest's file and byte totals, or why there is
/// no archive.
type HeadTx = oneshot::Sender<Result<(u64, u64), Failed>>;
/// The body's chunks, or the error that cuts it short.
type BodyTx = mpsc::Sender<Result<Bytes, io::Error>>;

/// The running backup: the slot it holds and who asked, for the log.
struct Running {
    /// Released last, when the backup is over.
    slot: Slot,
    /// The client's address.
    peer: String,
}

/// Takes the snapshot, then streams it from a `backup-stream` thread (the archive writer
/// blocks on the bounded body channel, so it cannot run on an arbiter).
async fn run(
    registry: actix::Addr<roundtable_actors::registry::ConversationRegistry>,
    running: Running,
    head_tx: HeadTx,
    body_tx: BodyTx,
) {
    let snapshot = match registry.send(SnapshotInstance).await {
        Ok(Ok(snapshot)) => snapshot,
        Ok(Err(e)) => {
            log::error!("backup for {}: {e}", running.peer);
            let _ = head_tx.send(Err(Failed::Unavailable(e)));
            return;
        }
        Err(_) => {
            let e = "the conversation registry does not answer".to_string();
            let _ = head_tx.send(Err(Failed::Unavailable(e)));
            return;
        }
    };
    log::info!(
        "backup for {}: snapshot of {} files in {} (writers held {} µs)",
        running.peer,
        snapshot.files.len(),
        snapshot.dir.display(),
        snapshot.held.as_micros()
    );
    let spawned = std::thread::Builder::new()
        .name("backup-stream".into())
        .spawn(move || stream(snapshot, running, head_tx, body_tx));
    if let Err(e) = spawned {
        // The closure (snapshot, slot, head) was dropped with the error: links removed, the
        // slot free, and the response answered "the backup stream stopped".
        log::error!("backup: cannot start the stream thread: {e}");
    }
}

/// The `backup-stream` thread: plans the archive, answers the head, writes the body. Order
/// at the end matters: the snapshot (its link directory) goes first, then the slot, and only
/// then the body's senders, which ends the response — so a client that has read a whole
/// backup can start the next one at once, and never two link directories exist.
fn stream(snapshot: Snapshot, running: Running, head_tx: HeadTx, body_tx: BodyTx) {
    let Running { slot, peer } = running;
    let mut out = Chunks {
        tx: body_tx,
        buf: Vec::with_capacity(CHUNK_BYTES),
    };
    match archive::plan(&snapshot) {
        Err(e) => {
            log::error!("backup for {peer}: {e}");
            let _ = head_tx.send(Err(Failed::Internal(e)));
        }
        Ok(plan) => {
            if head_tx
                .send(Ok((plan.manifest.files, plan.manifest.bytes)))
                .is_err()
            {
                log::info!("backup for {peer}: the client went away before the archive started");
            } else {
                match archive::write(&snapshot, &plan, &mut out) {
                    Ok(()) => log::info!(
                        "backup for {peer}: sent {} files, {} bytes, {} conversations",
                        plan.manifest.files,
                        plan.manifest.bytes,
                        plan.manifest.conversations.len()
                    ),
                    Err(e) => {
                        log::error!("backup for {peer}: stopped: {e}");
                        // Fails at once when the client is gone; a client that stopped
                        // reading is dropped by the stall timeout (TCP_USER_TIMEOUT).
                        let _ = out.tx.blocking_send(Err(e));
                    }
                }
            }
        }
    }
    drop(snapshot);
    drop(slot);
    drop(out);
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
