//! The outbox's unit tests: bounds, budgets, the close slot, storage given back, wakes.

use super::*;

/// Limits of `max_frames` frames and `max_bytes` bytes, without a server budget.
fn bounded(max_frames: usize, max_bytes: usize) -> OutboxLimits {
    OutboxLimits {
        max_frames,
        max_bytes,
        server: None,
    }
}

#[test]
fn bounds_frames_and_bytes() {
    let (tx, _rx) = outbox(bounded(2, 10));
    tx.push("abcd".into()).unwrap();
    tx.push("efgh".into()).unwrap();
    assert_eq!(tx.push("i".into()), Err(PushError::Full));
    let (tx, _rx) = outbox(bounded(10, 10));
    tx.push("abcdefgh".into()).unwrap();
    assert_eq!(tx.push("ijk".into()), Err(PushError::Full));
}

/// A budget whose clock started `ago`: queues that have not taken a frame since it was
/// made count as not reading (tests cannot wait for [`READING_WINDOW`]).
fn budget_started(total: usize, ago: Duration) -> Arc<ServerBudget> {
    let budget = ServerBudget::new(total);
    Arc::new(ServerBudget {
        epoch: Instant::now() - ago,
        ..Arc::try_unwrap(budget).unwrap()
    })
}

fn limits(server: &Arc<ServerBudget>) -> OutboxLimits {
    OutboxLimits {
        max_frames: 10,
        max_bytes: 100,
        server: Some(server.clone()),
    }
}

/// Queues draw from the server-wide budget too; a frame's share comes back when the
/// writer drops it. A push that does not fit closes the biggest holder — the pusher when
/// that is itself.
#[test]
fn the_server_budget_bounds_all_queues() {
    let server = ServerBudget::new(10);
    let (a, mut ra) = outbox(limits(&server));
    let (b, _rb) = outbox(limits(&server));
    a.push("abcdef".into()).unwrap();
    b.push("ghij".into()).unwrap();
    assert_eq!(server.available(), 0);
    let (c, _rc) = outbox(limits(&server));
    c.push("k".into()).unwrap();
    assert!(a.was_shed(), "the biggest holder made room");
    // 12 more: closing b (4) is not enough, so c (1) goes too, and its push fails.
    assert_eq!(c.push("lmnopqrstuvw".into()), Err(PushError::Full));
    assert!(b.was_shed() && c.was_shed());
    assert_eq!(server.available(), 10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // A's close comes first; its frame's share is held until the writer drops it.
    let (close, _) = rt.block_on(ra.next_with_budget()).unwrap();
    assert!(matches!(close, Outgoing::Close(Some((1008, _)))));
    let (frame, budget) = rt.block_on(ra.next_with_budget()).unwrap();
    assert!(matches!(frame, Outgoing::Text(t) if t == "abcdef"));
    drop(budget);
    drop(ra);
    assert_eq!(server.available(), 10);
}

/// The bytes of a fanned-out call that every recipient shares are charged once, and
/// given back when the last recipient's frame is written.
#[test]
fn shared_bytes_count_once() {
    let server = ServerBudget::new(1000);
    let tail: Arc<str> = Arc::from("x".repeat(90));
    let shared = SharedBytes::new(tail.len());
    let frame = |n| Outgoing::Spliced {
        prefix: Arc::from("p:"),
        number: n,
        tail: tail.clone(),
    };
    let queues: Vec<_> = (0..5).map(|_| outbox(limits(&server))).collect();
    for (i, (tx, _)) in queues.iter().enumerate() {
        tx.push_sharing(frame(i as u64), Some(&shared)).unwrap();
    }
    // 90 shared bytes once, plus each frame's own prefix and callId (3 bytes).
    assert_eq!(server.available(), 1000 - 90 - 5 * 3);
    drop(shared);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut budgets = Vec::new();
    for (_, mut rx) in queues {
        budgets.push(rt.block_on(rx.next_with_budget()).unwrap().1);
        assert!(server.available() < 1000, "still held by the other frames");
        budgets.pop();
    }
    assert_eq!(server.available(), 1000);
}

/// When the budget is exhausted, the socket holding the most unsent bytes among those not
/// reading is closed and the push goes through; a socket that reads is never chosen.
#[test]
fn an_exhausted_budget_closes_the_biggest_stalled_holder() {
    let server = budget_started(100, Duration::from_secs(10));
    let (small, mut small_rx) = outbox(limits(&server));
    let (big, mut big_rx) = outbox(limits(&server));
    let (reader, mut reader_rx) = outbox(limits(&server));
    small.push("s".repeat(20)).unwrap();
    big.push("b".repeat(60)).unwrap();
    // Neither has taken a frame for ten seconds.
    for rx in [&small_rx, &big_rx, &reader_rx] {
        rx.state.last_taken.store(0, Ordering::Release);
    }
    // The reader took a frame just now: it is reading, although it holds the most.
    reader.push("r".repeat(15)).unwrap();
    reader.push("r".repeat(5)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let held = rt.block_on(reader_rx.next_with_budget()).unwrap();
    drop(held);
    // 20 + 60 + 5 = 85 held; 30 more do not fit: the big stalled holder goes.
    reader.push("n".repeat(30)).unwrap();
    assert!(big.was_shed());
    assert!(!small.was_shed() && !reader.was_shed());
    assert!(matches!(
        small_rx.try_next_with_budget(),
        Some((Outgoing::Text(_), _))
    ));
    assert!(matches!(
        big_rx.try_next_with_budget(),
        Some((Outgoing::Close(Some((1008, _))), None))
    ));
    assert_eq!(big.push("x".into()), Err(PushError::Full));
    // Its bytes count as draining until its writer is gone; then they are simply free.
    drop(big_rx);
    assert_eq!(server.available(), 100 - 5 - 30);
}

/// Among sockets that are not reading, the one idle longest goes first, even when a
/// briefly stalled one (a reader not scheduled for a second) holds more.
#[test]
fn the_longest_idle_stalled_holder_goes_first() {
    let server = budget_started(100, Duration::from_secs(10));
    let (stuck, stuck_rx) = outbox(limits(&server));
    let (reader, reader_rx) = outbox(limits(&server));
    stuck.push("s".repeat(30)).unwrap();
    reader.push("r".repeat(60)).unwrap();
    // The stuck socket never took a frame; the reader last took one 2 s ago.
    stuck_rx.state.last_taken.store(0, Ordering::Release);
    let two_seconds_ago = server.now_ms() - 2_000;
    reader_rx
        .state
        .last_taken
        .store(two_seconds_ago, Ordering::Release);
    // 90 held; 25 more need 15: the stuck socket's 30 cover it.
    reader.push("n".repeat(25)).unwrap();
    assert!(stuck.was_shed());
    assert!(!reader.was_shed());
}

#[test]
fn closed_receiver_fails_pushes() {
    let (tx, mut rx) = outbox(OutboxLimits::default());
    rx.close();
    assert_eq!(tx.push("x".into()), Err(PushError::Closed));
}

/// A drained queue gives its storage back; the receiver ends once every sender is gone
/// and the queue is empty, after the frames still queued.
#[tokio::test]
async fn an_idle_queue_holds_no_storage_and_ends_with_its_senders() {
    let (tx, mut rx) = outbox(OutboxLimits::default());
    assert_eq!(
        rx.state.frames().queued.capacity(),
        0,
        "nothing allocated up front"
    );
    let second = tx.clone();
    tx.push("a".into()).unwrap();
    second.push("b".into()).unwrap();
    assert!(rx.state.frames().queued.capacity() > 0);
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "a"));
    assert!(matches!(rx.try_next_with_budget(), Some((Outgoing::Text(t), _)) if t == "b"));
    assert_eq!(
        (rx.state.frames().queued.capacity(), rx.batch.capacity()),
        (0, 0),
        "given back once empty"
    );
    tx.push("c".into()).unwrap();
    drop(tx);
    drop(second);
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "c"));
    assert!(rx.next().await.is_none(), "every sender is gone");
}

/// A receiver that goes away gives the byte budget of what it never wrote back, and
/// pushes fail `Closed` from then on.
#[test]
fn a_dropped_receiver_frees_what_it_held() {
    let (tx, rx) = outbox(bounded(4, 8));
    tx.push("abcdefgh".into()).unwrap();
    assert_eq!(tx.push("i".into()), Err(PushError::Full));
    drop(rx);
    assert_eq!(tx.state.bytes.available_permits(), 8);
    assert_eq!(tx.push("i".into()), Err(PushError::Closed));
}

/// The frame bound holds, and a close still gets through a full queue (ahead of it).
#[tokio::test]
async fn a_close_passes_a_full_queue() {
    let (tx, mut rx) = outbox(bounded(1, 1 << 20));
    tx.push("a".into()).unwrap();
    assert_eq!(tx.push("b".into()), Err(PushError::Full));
    tx.close(1000, "bye");
    assert!(matches!(
        rx.next().await,
        Some(Outgoing::Close(Some((1000, _))))
    ));
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "a"));
}

/// Frames the writer took out in a batch and has not handed on still count against the
/// frame bound.
#[tokio::test]
async fn frames_in_hand_count_against_the_bound() {
    let (tx, mut rx) = outbox(bounded(2, 1 << 20));
    tx.push("a".into()).unwrap();
    tx.push("b".into()).unwrap();
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "a"));
    tx.push("c".into()).unwrap();
    assert_eq!(
        tx.push("d".into()),
        Err(PushError::Full),
        "b is still in hand"
    );
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "b"));
    assert!(matches!(rx.next().await, Some(Outgoing::Text(t)) if t == "c"));
    tx.push("d".into()).unwrap();
}

/// A waker that counts its wakes.
struct Counting(AtomicUsize);

impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The writer waits (its waker registered); answers how many times it was woken since.
fn waiting_writer(rx: &mut OutboxReceiver) -> Arc<Counting> {
    use std::future::Future;
    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let waker = std::task::Waker::from(counting.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let next = std::pin::pin!(rx.next());
    assert!(next.poll(&mut cx).is_pending(), "nothing queued yet");
    counting
}

/// Pushes with [`Wakes`] wake each writer once, when the batch is done (or dropped), not
/// at every frame.
#[test]
fn later_pushes_wake_the_writer_once_after_the_batch() {
    let (tx, mut rx) = outbox(bounded(10, 1 << 20));
    let woken = waiting_writer(&mut rx);
    let mut wakes = Wakes::default();
    for text in ["a", "b", "c"] {
        tx.push_sharing_later(Outgoing::Text(text.into()), None, &mut wakes)
            .unwrap();
    }
    assert_eq!(
        woken.0.load(Ordering::SeqCst),
        0,
        "not before the batch ends"
    );
    wakes.wake_all();
    assert_eq!(woken.0.load(Ordering::SeqCst), 1, "once for three frames");
    let texts: Vec<_> = std::iter::from_fn(|| rx.try_next_with_budget())
        .map(|(frame, _)| frame.to_text().unwrap())
        .collect();
    assert_eq!(texts, ["a", "b", "c"], "one batch, in push order");

    // A batch that is dropped without `wake_all` still wakes its writers.
    let (tx, mut rx) = outbox(bounded(10, 1 << 20));
    let woken = waiting_writer(&mut rx);
    {
        let mut wakes = Wakes::default();
        tx.push_sharing_later(Outgoing::Text("d".into()), None, &mut wakes)
            .unwrap();
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    }
    assert_eq!(woken.0.load(Ordering::SeqCst), 1);
}

/// The writer sizes a write's buffer from the frames in hand: their wire lengths, counted
/// only as far as the limit asks.
#[test]
fn frames_in_hand_tell_their_wire_length() {
    let (tx, mut rx) = outbox(bounded(10, 1 << 20));
    let long = "x".repeat(300);
    tx.push("first".into()).unwrap();
    tx.push("ab".into()).unwrap();
    tx.push(long.clone()).unwrap();
    tx.push_frame(Outgoing::Ping(b"p".to_vec())).unwrap();
    assert_eq!(rx.in_hand_wire_len(usize::MAX), 0, "nothing taken yet");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (first, _) = rt.block_on(rx.next_with_budget()).unwrap();
    assert_eq!(first.wire_len_max(), 5 + 10);
    assert_eq!(rx.in_hand_wire_len(usize::MAX), (2 + 10) + (300 + 10) + 127);
    assert_eq!(
        rx.in_hand_wire_len(1),
        2 + 10,
        "counting stops once past the limit"
    );
    rx.try_next_with_budget().unwrap();
    assert_eq!(rx.in_hand_wire_len(usize::MAX), (300 + 10) + 127);
}
