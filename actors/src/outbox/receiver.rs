//! The receiving half of an outbox, owned by the socket writer: it takes the whole queue at
//! once as a batch (one lock per batch, not per frame), hands the frames on one by one with
//! their budgets, tells the writer how many wire bytes it holds, and on drop gives back the
//! budgets of what will never be written.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Budget, Outgoing, QueueState, Queued, ServerBudget};

/// Receiving half, owned by the socket writer.
#[derive(Debug)]
pub struct OutboxReceiver {
    /// Shared with the senders.
    pub(super) state: Arc<QueueState>,
    /// The frames taken out of the queue at once (one lock per batch, not per frame), handed
    /// on one by one; its storage is given back once it is empty.
    pub(super) batch: VecDeque<Queued>,
    /// The server budget and this queue's id in it, when there is one.
    pub(super) server: Option<(Arc<ServerBudget>, u64)>,
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        // What is still queued will never be written: its budgets go back now.
        self.state.closed.store(true, Ordering::Release);
        let unsent = std::mem::take(&mut self.state.frames().queued);
        drop(unsent);
        if let Some((server, id)) = &self.server {
            server.unregister(*id, &self.state);
        }
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
        let (state, batch) = (&self.state, &mut self.batch);
        let next = tokio::select! {
            biased;
            close = state.close.wait() => Some((close, None)),
            item = std::future::poll_fn(|cx| Self::poll_queued(state, batch, Some(cx))) => item,
        };
        self.taken();
        next
    }

    /// The oldest frame: from the batch in hand, else the whole queue is taken as the next
    /// batch. Empty: `Pending` (the receiver waits, when `cx` is given), or `None` once every
    /// sender is gone.
    fn poll_queued(
        state: &QueueState,
        batch: &mut VecDeque<Queued>,
        cx: Option<&mut std::task::Context<'_>>,
    ) -> std::task::Poll<Option<Queued>> {
        use std::task::Poll;
        let take = |batch: &mut VecDeque<Queued>| {
            let item = batch.pop_front()?;
            state.in_hand.fetch_sub(1, Ordering::Relaxed);
            if batch.is_empty() {
                *batch = VecDeque::new();
            }
            Some(item)
        };
        if let Some(item) = take(batch) {
            return Poll::Ready(Some(item));
        }
        let mut frames = state.frames();
        if !frames.queued.is_empty() {
            state.in_hand.store(frames.queued.len(), Ordering::Relaxed);
            *batch = std::mem::take(&mut frames.queued);
            drop(frames);
            return Poll::Ready(take(batch));
        }
        if frames.senders == 0 {
            return Poll::Ready(None);
        }
        let Some(cx) = cx else {
            return Poll::Pending;
        };
        match &frames.waiting {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => frames.waiting = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The next thing to write if it is there now (a pending close first), without waiting:
    /// the writer puts every frame already queued into one write.
    pub fn try_next_with_budget(&mut self) -> Option<(Outgoing, Option<Budget>)> {
        let close = self
            .state
            .close
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let next = match close {
            Some(close) => Some((close, None)),
            None => match Self::poll_queued(&self.state, &mut self.batch, None) {
                std::task::Poll::Ready(item) => item,
                std::task::Poll::Pending => None,
            },
        };
        if next.is_some() {
            self.taken();
        }
        next
    }

    /// Wire bytes ([`Outgoing::wire_len_max`]) of the frames already in hand, those the next
    /// [`try_next_with_budget`](Self::try_next_with_budget) calls hand on without taking the
    /// lock, up to `limit`: the writer sizes its next write's buffer with it.
    pub fn in_hand_wire_len(&self, limit: usize) -> usize {
        let mut total = 0;
        for (frame, _) in &self.batch {
            if total >= limit {
                break;
            }
            total += frame.wire_len_max();
        }
        total
    }

    /// Notes that the writer is taking frames (it is reading, for the server budget).
    fn taken(&self) {
        if let Some((budget, _)) = &self.server {
            self.state
                .last_taken
                .store(budget.now_ms(), Ordering::Release);
        }
    }

    /// Resolves when a priority close ([`Outbox::abort`](super::Outbox::abort)) is requested;
    /// lets the writer stop waiting on a peer that does not read.
    pub async fn abort_requested(&mut self) -> Option<Outgoing> {
        Some(self.state.close.wait().await)
    }

    /// Stops accepting frames; pushes fail with [`PushError::Closed`](super::PushError::Closed)
    /// from now on (the frames already queued can still be taken).
    pub fn close(&mut self) {
        self.state.closed.store(true, Ordering::Release);
    }
}
