//! [`SocketSlot`]: one WebSocket's place under the socket cap (`--max-sockets`, or the
//! descriptor limit less the reserve for files; `server::descriptors`).
//!
//! The place is taken by the upgrade route before the `101 Switching Protocols` goes out and
//! given back when the connection it became is dropped (or the upgrade that never became one).
//! Counting at the connection actor's start instead let a client that connected right after
//! another be checked before the first was counted: the cap was passed by one, and by more
//! under a burst of connects.
//!
//! Who talks to it: the upgrade route (`server::routes::upgrade`) takes one; the transport's
//! `Connection` holds it for its life.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use roundtable_actors::metrics::Metrics;

/// A counted socket: `roundtable_sockets` includes it until it is dropped.
#[derive(Debug)]
pub struct SocketSlot {
    /// Where the gauge lives.
    metrics: Arc<Metrics>,
}

impl SocketSlot {
    /// Takes a place when fewer than `cap` sockets hold one; `None` at the cap. The check and
    /// the count are one atomic step, so concurrent upgrades never pass the cap together.
    pub fn take(metrics: &Arc<Metrics>, cap: usize) -> Option<SocketSlot> {
        let cap = i64::try_from(cap).unwrap_or(i64::MAX);
        metrics
            .sockets
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < cap).then_some(open + 1)
            })
            .ok()?;
        Some(SocketSlot {
            metrics: metrics.clone(),
        })
    }
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        Metrics::add(&self.metrics.sockets, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_at_once_and_given_back_on_drop() {
        let metrics = Arc::new(Metrics::default());
        let a = SocketSlot::take(&metrics, 2).expect("first");
        let b = SocketSlot::take(&metrics, 2).expect("second");
        assert!(SocketSlot::take(&metrics, 2).is_none(), "at the cap");
        assert_eq!(
            Metrics::gauge(&metrics.sockets),
            2,
            "a refusal counts nothing"
        );
        drop(a);
        assert_eq!(Metrics::gauge(&metrics.sockets), 1);
        let c = SocketSlot::take(&metrics, 2).expect("a place was given back");
        drop((b, c));
        assert_eq!(Metrics::gauge(&metrics.sockets), 0);
    }
}
