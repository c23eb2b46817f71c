//! The bounded outbound queue toward one socket. Every frame the server sends to a client goes
//! through an [`Outbox`]: replies from the connection itself and `clientio` calls from the
//! [`Client`](crate::client::Client) actors. The transport owns the [`OutboxReceiver`] and writes
//! frames to the socket one at a time, so a peer that stops reading fills the queue instead of
//! server memory.
//!
//! The bound is both a frame count (the channel capacity) and a byte budget (a semaphore whose
//! permits travel with each frame; the socket writer holds a frame's permits until the write
//! that carries it is done, so the budget covers what is being written too).
//! A push that does not fit fails at once with [`PushError::Full`]; the caller then closes the
//! client as a slow consumer. Nothing here ever waits.

use std::sync::Arc;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

/// Limits of one socket's queue.
#[derive(Debug, Clone)]
pub struct OutboxLimits {
    /// Frames waiting to be written.
    pub max_frames: usize,
    /// Bytes of frame text waiting to be written.
    pub max_bytes: usize,
    /// The server-wide byte budget every socket's queue also draws from (`None`: unbounded,
    /// for tests of one queue). Past it, a push fails like a full queue.
    pub server: Option<Arc<ServerBudget>>,
}

/// Bytes queued toward every socket together.
#[derive(Debug)]
pub struct ServerBudget {
    /// Free bytes.
    free: Arc<Semaphore>,
    /// The whole budget (a larger frame costs this much).
    total: usize,
}

impl ServerBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Arc<ServerBudget> {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(ServerBudget {
            free: Arc::new(Semaphore::new(total)),
            total,
        })
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.free.available_permits()
    }
}

/// Bytes queued toward every socket together, by default (`--max-queued-bytes-total`): sixteen
/// sockets at their own 32 MiB bound (the load harness's registry scenario has sixteen clients
/// reading a 17 MB list at once); a local service under attack stays under half a gigabyte.
pub const DEFAULT_SERVER_QUEUED_BYTES: usize = 512 << 20;

/// A frame's share of the byte budgets: the socket's and the server's, released on drop.
#[derive(Debug)]
pub struct Budget {
    _socket: OwnedSemaphorePermit,
    _server: Option<OwnedSemaphorePermit>,
}

impl Default for OutboxLimits {
    fn default() -> Self {
        // 4096 frames or 32 MiB, whichever comes first: room for a large history reply plus a
        // burst of live output, small enough that 1,000 stuck readers cannot exhaust memory.
        OutboxLimits {
            max_frames: 4096,
            max_bytes: 32 * 1024 * 1024,
            server: None,
        }
    }
}

/// What the writer does next.
#[derive(Debug)]
pub enum Outgoing {
    /// A JSON text frame.
    Text(String),
    /// A text frame written from three parts, `prefix` + `number` in decimal + `tail`: a
    /// `clientio` call for one recipient (its channel's prefix, its callId, the call serialized
    /// once for every recipient). Fan-out builds no text per recipient: the writer puts the
    /// parts straight into its write.
    Spliced {
        /// Everything before the number (shared by every frame of the channel).
        prefix: Arc<str>,
        /// The callId.
        number: u64,
        /// Everything after it (shared by every recipient of the call).
        tail: Arc<str>,
    },
    /// A binary frame (only the conformance echo endpoint sends these).
    Binary(Vec<u8>),
    /// A heartbeat ping.
    Ping(Vec<u8>),
    /// The answer to a peer's ping, with its payload.
    Pong(Vec<u8>),
    /// Close the socket with this code and reason (`None`: an empty close frame), then stop.
    Close(Option<(u16, String)>),
}

impl Outgoing {
    /// Payload bytes of a text frame (0 for the others).
    pub fn text_len(&self) -> usize {
        match self {
            Outgoing::Text(t) => t.len(),
            Outgoing::Spliced {
                prefix,
                number,
                tail,
            } => prefix.len() + decimal_digits(*number) + tail.len(),
            _ => 0,
        }
    }

    /// The text of a text frame, whole (tests and benches; the writer writes the parts).
    pub fn to_text(&self) -> Option<String> {
        match self {
            Outgoing::Text(t) => Some(t.clone()),
            Outgoing::Spliced {
                prefix,
                number,
                tail,
            } => Some(crate::protocol::splice_call(prefix, *number, tail)),
            _ => None,
        }
    }
}

/// Digits of `n` in decimal.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Why a push failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The queue is at its frame or byte bound: the peer is not reading.
    #[error("outbound queue full")]
    Full,
    /// The socket is gone.
    #[error("socket closed")]
    Closed,
}

/// Sending half; cheap to clone (one per joined conversation plus the connection's own).
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: mpsc::Sender<(Outgoing, Option<Budget>)>,
    bytes: Arc<Semaphore>,
    /// The server-wide budget, when there is one.
    server: Option<Arc<ServerBudget>>,
    max_bytes: usize,
    /// Close requests bypass the bounded queue so a full queue can still be closed.
    close: Arc<CloseSlot>,
}

/// One pending priority close (the first reason wins) and the writer's wake-up. A slot, not a
/// channel: a channel allocates a block of slots per socket for a message sent at most once.
#[derive(Debug, Default)]
struct CloseSlot {
    /// The close to send ahead of the queue.
    pending: std::sync::Mutex<Option<Outgoing>>,
    /// Wakes the writer (stores a permit when it is not waiting yet).
    notify: Notify,
}

impl CloseSlot {
    fn request(&self, close: Outgoing) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.is_none() {
            *pending = Some(close);
            self.notify.notify_one();
        }
    }

    async fn wait(&self) -> Outgoing {
        loop {
            if let Some(close) = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                return close;
            }
            self.notify.notified().await;
        }
    }
}

/// Receiving half, owned by the socket writer.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: mpsc::Receiver<(Outgoing, Option<Budget>)>,
    close: Arc<CloseSlot>,
}

/// Creates a queue with the given limits.
pub fn outbox(limits: OutboxLimits) -> (Outbox, OutboxReceiver) {
    let (tx, rx) = mpsc::channel(limits.max_frames.max(1));
    let close = Arc::new(CloseSlot::default());
    let max_bytes = limits.max_bytes.clamp(1, Semaphore::MAX_PERMITS);
    (
        Outbox {
            tx,
            bytes: Arc::new(Semaphore::new(max_bytes)),
            server: limits.server.clone(),
            max_bytes,
            close: close.clone(),
        },
        OutboxReceiver { rx, close },
    )
}

impl Outbox {
    /// Queues a text frame, or fails at once if it does not fit.
    pub fn push(&self, frame: String) -> Result<(), PushError> {
        self.push_frame(Outgoing::Text(frame))
    }

    /// Queues a frame of any kind, or fails at once if it does not fit.
    pub fn push_frame(&self, frame: Outgoing) -> Result<(), PushError> {
        if self.tx.is_closed() {
            return Err(PushError::Closed);
        }
        let len = match &frame {
            Outgoing::Text(_) | Outgoing::Spliced { .. } => frame.text_len(),
            Outgoing::Binary(b) | Outgoing::Ping(b) | Outgoing::Pong(b) => b.len(),
            Outgoing::Close(_) => 0,
        };
        // A frame larger than the whole budget may still go when the queue is otherwise empty.
        let cost = len.clamp(1, self.max_bytes) as u32;
        let acquire = |budget: &Arc<Semaphore>, cost: usize| match budget
            .clone()
            .try_acquire_many_owned(cost as u32)
        {
            Ok(p) => Ok(p),
            Err(tokio::sync::TryAcquireError::NoPermits) => Err(PushError::Full),
            Err(tokio::sync::TryAcquireError::Closed) => Err(PushError::Closed),
        };
        let socket = acquire(&self.bytes, cost as usize)?;
        let server = self
            .server
            .as_ref()
            .map(|s| acquire(&s.free, len.clamp(1, s.total)))
            .transpose()?;
        let budget = Budget {
            _socket: socket,
            _server: server,
        };
        self.tx
            .try_send((frame, Some(budget)))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => PushError::Full,
                mpsc::error::TrySendError::Closed(_) => PushError::Closed,
            })
    }

    /// Closes the socket after the frames already queued (graceful close, close echo). If the
    /// queue is full the close jumps ahead instead. Later closes are ignored.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        self.close_with(Some((code, reason.into())));
    }

    /// Like [`close`](Self::close) with an empty close frame (echoing a code-less close).
    pub fn close_empty(&self) {
        self.close_with(None);
    }

    fn close_with(&self, reason: Option<(u16, String)>) {
        if let Err(mpsc::error::TrySendError::Full((frame, _))) =
            self.tx.try_send((Outgoing::Close(reason), None))
        {
            self.close.request(frame);
        }
    }

    /// Closes the socket ahead of everything queued (slow consumer: the queue is the problem).
    pub fn abort(&self, code: u16, reason: impl Into<String>) {
        self.close
            .request(Outgoing::Close(Some((code, reason.into()))));
    }

    /// True once the writer has gone away.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl OutboxReceiver {
    /// The next thing to write. A pending close wins over queued frames; `None` when every
    /// sender is gone.
    pub async fn next(&mut self) -> Option<Outgoing> {
        self.next_with_budget().await.map(|(frame, _)| frame)
    }

    /// Like [`next`](Self::next), with the frame's share of the byte budget: the budget stays
    /// spent until the caller drops it (once the bytes are handed on for writing).
    pub async fn next_with_budget(&mut self) -> Option<(Outgoing, Option<Budget>)> {
        tokio::select! {
            biased;
            close = self.close.wait() => Some((close, None)),
            item = self.rx.recv() => item,
        }
    }

    /// The next thing to write if it is there now (a pending close first), without waiting:
    /// the writer puts every frame already queued into one write.
    pub fn try_next_with_budget(&mut self) -> Option<(Outgoing, Option<Budget>)> {
        let close = self
            .close
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match close {
            Some(close) => Some((close, None)),
            None => self.rx.try_recv().ok(),
        }
    }

    /// Resolves when a priority close ([`Outbox::abort`]) is requested; lets the writer stop
    /// waiting on a peer that does not read.
    pub async fn abort_requested(&mut self) -> Option<Outgoing> {
        Some(self.close.wait().await)
    }

    /// Stops accepting frames; pushes fail with [`PushError::Closed`] from now on.
    pub fn close(&mut self) {
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_frames_and_bytes() {
        let (tx, _rx) = outbox(OutboxLimits {
            max_frames: 2,
            max_bytes: 10,
            server: None,
        });
        tx.push("abcd".into()).unwrap();
        tx.push("efgh".into()).unwrap();
        assert_eq!(tx.push("i".into()), Err(PushError::Full));
        let (tx, _rx) = outbox(OutboxLimits {
            max_frames: 10,
            max_bytes: 10,
            server: None,
        });
        tx.push("abcdefgh".into()).unwrap();
        assert_eq!(tx.push("ijk".into()), Err(PushError::Full));
    }

    /// Queues draw from the server-wide budget too; a frame's share comes back when the
    /// writer drops it.
    #[test]
    fn the_server_budget_bounds_all_queues() {
        let server = ServerBudget::new(10);
        let limits = OutboxLimits {
            max_frames: 10,
            max_bytes: 100,
            server: Some(server.clone()),
        };
        let (a, mut ra) = outbox(limits.clone());
        let (b, _rb) = outbox(limits);
        a.push("abcdef".into()).unwrap();
        assert_eq!(b.push("ghijk".into()), Err(PushError::Full));
        b.push("ghij".into()).unwrap();
        assert_eq!(server.available(), 0);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (frame, budget) = rt.block_on(ra.next_with_budget()).unwrap();
        assert!(matches!(frame, Outgoing::Text(t) if t == "abcdef"));
        assert_eq!(server.available(), 0, "held until the frame is written");
        drop(budget);
        assert_eq!(server.available(), 6);
    }

    #[test]
    fn closed_receiver_fails_pushes() {
        let (tx, mut rx) = outbox(OutboxLimits::default());
        rx.close();
        assert_eq!(tx.push("x".into()), Err(PushError::Closed));
    }
}
