//! The bounded outbound queue toward one socket. Every frame the server sends to a client goes
//! through an [`Outbox`]: replies from the connection itself, and `clientio` calls that a
//! [`Conversation`](crate::conversation::Conversation) writes straight in through each joined
//! client's [`ClientOutput`](crate::client::ClientOutput) (no actor message in between). The
//! transport owns the [`OutboxReceiver`]; its writer takes every frame queued when it wakes and
//! sends them in one socket write (up to about 64 KiB), so a peer that stops reading fills the
//! queue instead of server memory.
//!
//! The bound is both a frame count (the queue's length) and a byte budget (a semaphore whose
//! permits travel with each frame; the socket writer holds a frame's permits until the write
//! that carries it is done, so the budget covers what is being written too). The queue
//! allocates on its first frame and gives its storage back whenever the writer empties it, so
//! an idle socket holds none.
//! A push that does not fit fails at once with [`PushError::Full`]; the caller then closes the
//! client as a slow consumer. Nothing here ever waits.
//!
//! # The server-wide budget
//! Every queue also draws from one [`ServerBudget`] (`--max-queued-bytes-total`), which counts
//! bytes held in memory, not copies: the part of a fanned-out call that every recipient shares
//! ([`SharedBytes`]) is charged once, by the first queue that takes it, and given back when the
//! last frame holding it is written. When a push would take the total past the budget, the
//! budget closes (1008, slow consumer) the sockets that hold the most unsent bytes — first
//! those that are not reading (a queue whose writer took no frame for [`READING_WINDOW`]), the
//! longest idle (in whole seconds) first, then by size — until what they hold covers the
//! excess; their bytes count as draining until their writers are gone. (A reader whose process
//! was not scheduled for a second on a loaded machine is idle for less than sockets that
//! never read, so they go before it.) A socket that reads holds little, so it is never the one closed while a
//! stuck one holds more; the push itself fails only when its own socket is among those closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Close code sent to a client whose queue overflowed (RFC 6455 1008, policy violation).
pub const SLOW_CONSUMER_CLOSE_CODE: u16 = 1008;
/// Close reason sent with it.
pub const SLOW_CONSUMER_REASON: &str = "slow consumer: outbound queue full";

/// Limits of one socket's queue.
#[derive(Debug, Clone)]
pub struct OutboxLimits {
    /// Frames waiting to be written.
    pub max_frames: usize,
    /// Bytes of frame text waiting to be written.
    pub max_bytes: usize,
    /// The server-wide byte budget every socket's queue also draws from (`None`: unbounded,
    /// for tests of one queue). Past it, the sockets that hold the most and do not read are
    /// closed (see the module docs).
    pub server: Option<Arc<ServerBudget>>,
}

/// A socket whose writer took a frame within this long is reading: the server budget closes
/// the sockets that are not reading first.
pub const READING_WINDOW: Duration = Duration::from_secs(1);

/// Bytes queued toward every socket together (see the module docs).
#[derive(Debug)]
pub struct ServerBudget {
    /// Bytes charged now (may pass `total` for a moment, while closed sockets drain).
    used: AtomicUsize,
    /// Bytes held by sockets this budget closed and whose writers are not gone yet: they are
    /// as good as free.
    draining: AtomicUsize,
    /// The budget.
    total: usize,
    /// Every live queue drawing from this budget, by queue id: where victims are found.
    /// Bounded by the open sockets; a queue leaves when its receiver is dropped.
    queues: Mutex<HashMap<u64, Weak<QueueState>>>,
    /// The next queue id.
    next_queue: AtomicU64,
    /// The clock `last_taken` readings count from.
    epoch: Instant,
}

impl ServerBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Arc<ServerBudget> {
        Arc::new(ServerBudget {
            used: AtomicUsize::new(0),
            draining: AtomicUsize::new(0),
            total: total.max(1),
            queues: Mutex::new(HashMap::new()),
            next_queue: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// Bytes free now (draining bytes count as free).
    pub fn available(&self) -> usize {
        (self.total + self.draining.load(Ordering::Acquire))
            .saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Milliseconds since this budget was made.
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Charges `bytes` for a push by `pusher`: fits, or makes room by closing sockets that
    /// hold the most and do not read, or fails (`Full`) when none is left to close.
    fn charge(
        self: &Arc<Self>,
        bytes: usize,
        pusher: &QueueState,
    ) -> Result<ServerCharge, PushError> {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        let charge = ServerCharge {
            budget: self.clone(),
            bytes,
        };
        if self.over_by() == 0 {
            return Ok(charge);
        }
        self.shed(pusher);
        if self.over_by() == 0 && !pusher.shed.load(Ordering::Acquire) {
            Ok(charge)
        } else {
            Err(PushError::Full)
        }
    }

    /// How far the charged bytes are past the budget, draining bytes counted as free.
    fn over_by(&self) -> usize {
        self.used
            .load(Ordering::Acquire)
            .saturating_sub(self.total + self.draining.load(Ordering::Acquire))
    }

    /// Closes the sockets holding the most unsent bytes, those not reading first, until their
    /// bytes cover the excess. O(sockets log sockets), with the queue map locked only while it
    /// is read: only when the budget is exhausted.
    fn shed(&self, pusher: &QueueState) {
        let now = self.now_ms();
        let window = READING_WINDOW.as_millis() as u64;
        // (reading, whole seconds idle, unsent bytes, queue): stalled ones first, the longest
        // idle first, then the biggest.
        let mut holders: Vec<(bool, u64, usize, Arc<QueueState>)> = {
            let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues
                .values()
                .filter_map(Weak::upgrade)
                .filter(|q| !q.shed.load(Ordering::Acquire))
                .filter_map(|q| {
                    let unsent = q.unsent();
                    let idle_for = now.saturating_sub(q.last_taken.load(Ordering::Acquire));
                    (unsent > 0).then_some((idle_for < window, idle_for / 1000, unsent, q))
                })
                .collect()
        };
        holders.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
        for (_, _, unsent, queue) in holders {
            if self.over_by() == 0 {
                break;
            }
            if queue.shed.swap(true, Ordering::AcqRel) {
                continue;
            }
            queue.draining.store(unsent, Ordering::Release);
            self.draining.fetch_add(unsent, Ordering::AcqRel);
            log::warn!(
                "outbound budget ({} bytes) exhausted: closing a socket that holds {unsent} unsent bytes and has not read for {} ms{}",
                self.total,
                now.saturating_sub(queue.last_taken.load(Ordering::Acquire)),
                if std::ptr::eq(Arc::as_ptr(&queue), pusher) { " (the one pushing)" } else { "" }
            );
            queue.close.request(Outgoing::Close(Some((
                SLOW_CONSUMER_CLOSE_CODE,
                SLOW_CONSUMER_REASON.into(),
            ))));
        }
    }

    /// Adds a queue; its id.
    fn register(&self, queue: &Arc<QueueState>) -> u64 {
        let id = self.next_queue.fetch_add(1, Ordering::Relaxed);
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::downgrade(queue));
        id
    }

    /// Removes a queue whose receiver is gone; its draining bytes are no longer owed.
    fn unregister(&self, id: u64, queue: &QueueState) {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        let draining = queue.draining.swap(0, Ordering::AcqRel);
        if draining > 0 {
            self.draining.fetch_sub(draining, Ordering::AcqRel);
        }
    }
}

/// Bytes charged to the [`ServerBudget`]; given back on drop.
#[derive(Debug)]
struct ServerCharge {
    /// The budget charged.
    budget: Arc<ServerBudget>,
    /// How much.
    bytes: usize,
}

impl Drop for ServerCharge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The bytes every recipient of one fanned-out call shares (its serialized tail): charged to
/// the server budget once, by the first queue that takes one of its frames, and given back when
/// the last [`Budget`] holding it is dropped (its frame written). Made by
/// [`OutboundCall`](crate::client::OutboundCall) for each fan-out.
#[derive(Debug)]
pub struct SharedBytes {
    /// How many bytes are shared.
    len: usize,
    /// The charge, once taken.
    charge: Mutex<Option<ServerCharge>>,
}

impl SharedBytes {
    /// `len` shared bytes, not charged yet.
    pub fn new(len: usize) -> Arc<SharedBytes> {
        Arc::new(SharedBytes {
            len,
            charge: Mutex::new(None),
        })
    }
}

/// A frame waiting to be written, with its share of the byte budgets (`None`: a close).
type Queued = (Outgoing, Option<Budget>);

/// The frames waiting to be written. A `VecDeque` that allocates on the first frame and is
/// given back whenever the writer empties it, so an idle socket holds no frame storage (a
/// tokio channel allocated a block of 32 slots, 2.4 KB, for every socket when it was made and
/// kept it for the socket's life).
#[derive(Debug, Default)]
struct Frames {
    /// In push order.
    queued: VecDeque<Queued>,
    /// [`Outbox`] handles alive: the receiver ends (`None`) once they are all gone and the
    /// queue is empty.
    senders: usize,
    /// The receiver, waiting for a frame (woken by the next push, or the last sender's drop).
    waiting: Option<std::task::Waker>,
}

/// Writers to wake once a batch of pushes is done ([`Outbox::push_sharing_later`]): each
/// writer at most once (a push takes the writer's waker, so later pushes to the same queue
/// find none). Dropping it wakes them, so no push is ever left unannounced.
#[derive(Debug, Default)]
pub struct Wakes {
    /// The writers taken from the queues pushed to, in push order.
    wakers: Vec<std::task::Waker>,
}

impl Wakes {
    /// Wakes every writer collected so far.
    pub fn wake_all(&mut self) {
        for waker in self.wakers.drain(..) {
            waker.wake();
        }
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        self.wake_all();
    }
}

/// One queue's state shared by its senders, its receiver and the server budget.
#[derive(Debug)]
struct QueueState {
    /// The frames waiting, at most `max_frames`.
    frames: Mutex<Frames>,
    /// Its bound in frames.
    max_frames: usize,
    /// Set when the receiver stopped accepting frames or went away: pushes fail `Closed`.
    closed: AtomicBool,
    /// Frames the receiver took out of `frames` in one batch and has not handed on yet: they
    /// count against `max_frames` too.
    in_hand: AtomicUsize,
    /// Free bytes of this queue's own budget.
    bytes: Arc<Semaphore>,
    /// Its size.
    max_bytes: usize,
    /// Close requests bypass the bounded queue so a full queue can still be closed.
    close: CloseSlot,
    /// When the writer last took a frame (ms on the server budget's clock): a queue with
    /// unsent bytes and no take for [`READING_WINDOW`] is not reading.
    last_taken: AtomicU64,
    /// Set when the server budget closed this socket (its pushes fail from then on).
    shed: AtomicBool,
    /// The unsent bytes credited to the server budget's `draining` when it was closed.
    draining: AtomicUsize,
}

impl QueueState {
    /// The frames, locked (a panic while holding the lock leaves them usable).
    fn frames(&self) -> std::sync::MutexGuard<'_, Frames> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a frame unless the queue is closed or full (then it is handed back). The
    /// writer is woken now, or by `later` when the caller pushes more frames first.
    fn try_push(&self, item: Queued, later: Option<&mut Wakes>) -> Result<(), (PushError, Queued)> {
        if self.closed.load(Ordering::Acquire) {
            return Err((PushError::Closed, item));
        }
        let mut frames = self.frames();
        if frames.queued.len() + self.in_hand.load(Ordering::Relaxed) >= self.max_frames {
            return Err((PushError::Full, item));
        }
        frames.queued.push_back(item);
        let waiting = frames.waiting.take();
        drop(frames);
        if let Some(waker) = waiting {
            match later {
                Some(wakes) => wakes.wakers.push(waker),
                None => waker.wake(),
            }
        }
        Ok(())
    }

    /// Bytes queued or being written.
    fn unsent(&self) -> usize {
        self.max_bytes
            .saturating_sub(self.bytes.available_permits())
    }
}

/// Bytes queued toward every socket together, by default (`--max-queued-bytes-total`): sixteen
/// sockets at their own 32 MiB bound (the load harness's registry scenario has sixteen clients
/// reading a 17 MB list at once); a local service under attack stays under half a gigabyte.
pub const DEFAULT_SERVER_QUEUED_BYTES: usize = 512 << 20;

/// A frame's share of the byte budgets: the socket's and the server's, released on drop.
#[derive(Debug)]
pub struct Budget {
    /// The socket's own bytes.
    _socket: OwnedSemaphorePermit,
    /// The server budget's charge for the bytes this frame alone holds.
    _server: Option<ServerCharge>,
    /// The fan-out whose shared bytes this frame holds (charged once for all of them).
    _shared: Option<Arc<SharedBytes>>,
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
    /// No bytes: what came before goes out in a write of its own, and the writer waits this
    /// long before the next. Follows a join result ([`crate::client::JOIN_SETTLE`]).
    Pause(std::time::Duration),
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

    /// Bytes this frame takes on the wire, at most: the payload and the largest header a
    /// server writes (10 bytes; control frames carry at most 125 payload bytes). The writer
    /// sizes its buffer with it.
    pub fn wire_len_max(&self) -> usize {
        const HEADER_MAX: usize = 10;
        const CONTROL_MAX: usize = 2 + 125;
        match self {
            Outgoing::Binary(b) => b.len() + HEADER_MAX,
            Outgoing::Ping(_) | Outgoing::Pong(_) | Outgoing::Close(_) => CONTROL_MAX,
            Outgoing::Pause(_) => 0,
            text => text.text_len() + HEADER_MAX,
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
#[derive(Debug)]
pub struct Outbox {
    /// The queue, its byte budget, close slot and progress, shared with the receiver and the
    /// server budget.
    state: Arc<QueueState>,
    /// The server-wide budget, when there is one.
    server: Option<Arc<ServerBudget>>,
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

impl Clone for Outbox {
    fn clone(&self) -> Self {
        self.state.frames().senders += 1;
        Outbox {
            state: self.state.clone(),
            server: self.server.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut frames = self.state.frames();
        frames.senders -= 1;
        let waiting = if frames.senders == 0 {
            frames.waiting.take()
        } else {
            None
        };
        drop(frames);
        if let Some(waker) = waiting {
            waker.wake();
        }
    }
}

/// Creates a queue with the given limits.
pub fn outbox(limits: OutboxLimits) -> (Outbox, OutboxReceiver) {
    let max_bytes = limits.max_bytes.clamp(1, Semaphore::MAX_PERMITS);
    let state = Arc::new(QueueState {
        frames: Mutex::new(Frames {
            queued: VecDeque::new(),
            senders: 1,
            waiting: None,
        }),
        max_frames: limits.max_frames.max(1),
        closed: AtomicBool::new(false),
        in_hand: AtomicUsize::new(0),
        bytes: Arc::new(Semaphore::new(max_bytes)),
        max_bytes,
        close: CloseSlot::default(),
        last_taken: AtomicU64::new(0),
        shed: AtomicBool::new(false),
        draining: AtomicUsize::new(0),
    });
    let server = limits.server.map(|budget| {
        state.last_taken.store(budget.now_ms(), Ordering::Release);
        let id = budget.register(&state);
        (budget, id)
    });
    (
        Outbox {
            state: state.clone(),
            server: server.as_ref().map(|(b, _)| b.clone()),
        },
        OutboxReceiver {
            state,
            batch: VecDeque::new(),
            server,
        },
    )
}

impl Outbox {
    /// Queues a text frame, or fails at once if it does not fit.
    pub fn push(&self, frame: String) -> Result<(), PushError> {
        self.push_frame(Outgoing::Text(frame))
    }

    /// Queues a frame of any kind, or fails at once if it does not fit.
    pub fn push_frame(&self, frame: Outgoing) -> Result<(), PushError> {
        self.push_sharing(frame, None)
    }

    /// Queues a frame part of which (`shared`'s bytes) other queues hold too: those bytes
    /// count once against the server budget, whichever queue takes them first.
    pub fn push_sharing(
        &self,
        frame: Outgoing,
        shared: Option<&Arc<SharedBytes>>,
    ) -> Result<(), PushError> {
        self.push_sharing_then(frame, shared, None)
    }

    /// Like [`push_sharing`](Self::push_sharing), the writer woken by `wakes` instead of now:
    /// a caller that hands many frames to many sockets at once (a relay link's message) wakes
    /// each writer once, after its last frame, so the writer puts them all into one write.
    pub fn push_sharing_later(
        &self,
        frame: Outgoing,
        shared: Option<&Arc<SharedBytes>>,
        wakes: &mut Wakes,
    ) -> Result<(), PushError> {
        self.push_sharing_then(frame, shared, Some(wakes))
    }

    fn push_sharing_then(
        &self,
        frame: Outgoing,
        shared: Option<&Arc<SharedBytes>>,
        later: Option<&mut Wakes>,
    ) -> Result<(), PushError> {
        if self.is_closed() {
            return Err(PushError::Closed);
        }
        if self.state.shed.load(Ordering::Acquire) {
            return Err(PushError::Full);
        }
        let len = match &frame {
            Outgoing::Text(_) | Outgoing::Spliced { .. } => frame.text_len(),
            Outgoing::Binary(b) | Outgoing::Ping(b) | Outgoing::Pong(b) => b.len(),
            Outgoing::Close(_) | Outgoing::Pause(_) => 0,
        };
        // The socket's own bound first: a push it refuses must not close other sockets.
        if len.clamp(1, self.state.max_bytes) > self.state.bytes.available_permits() {
            return Err(PushError::Full);
        }
        let (server, shared) = match &self.server {
            None => (None, None),
            Some(budget) => {
                let shared_len = shared.map_or(0, |s| s.len.min(len));
                if let Some(shared) = shared {
                    let mut charge = shared.charge.lock().unwrap_or_else(|e| e.into_inner());
                    if charge.is_none() {
                        *charge = Some(budget.charge(shared_len, &self.state)?);
                    }
                }
                let own = len - shared_len;
                let server = (own > 0)
                    .then(|| budget.charge(own, &self.state))
                    .transpose()?;
                (server, shared.cloned())
            }
        };
        // A frame larger than the whole budget may still go when the queue is otherwise empty.
        let cost = len.clamp(1, self.state.max_bytes) as u32;
        let socket = match self.state.bytes.clone().try_acquire_many_owned(cost) {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::NoPermits) => return Err(PushError::Full),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(PushError::Closed),
        };
        let budget = Budget {
            _socket: socket,
            _server: server,
            _shared: shared,
        };
        self.state
            .try_push((frame, Some(budget)), later)
            .map_err(|(e, _)| e)
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
        if let Err((PushError::Full, (frame, _))) =
            self.state.try_push((Outgoing::Close(reason), None), None)
        {
            self.state.close.request(frame);
        }
    }

    /// Closes the socket ahead of everything queued (slow consumer: the queue is the problem).
    pub fn abort(&self, code: u16, reason: impl Into<String>) {
        self.state
            .close
            .request(Outgoing::Close(Some((code, reason.into()))));
    }

    /// True once the server budget closed this socket to make room (see the module docs).
    pub fn was_shed(&self) -> bool {
        self.state.shed.load(Ordering::Acquire)
    }

    /// True once the writer has gone away (or stopped accepting frames).
    pub fn is_closed(&self) -> bool {
        self.state.closed.load(Ordering::Acquire)
    }
}

mod receiver;
pub use receiver::OutboxReceiver;

#[cfg(test)]
mod tests;
