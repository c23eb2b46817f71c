//! The outbound order: what a conversation emits (calls to its clients) and the write barriers
//! between them, released in emit order so that nothing reporting a change goes out before
//! the change is on disk ("acknowledged means durable"). A plain state machine (issue 51): no
//! actix, no I/O; the conversation feeds it events and applies what it answers.
//!
//! - [`emit`](OutboundOrder::emit): a call goes at once when nothing holds it, else it waits
//!   behind the barriers before it.
//! - [`barrier`](OutboundOrder::barrier): every call emitted after it waits until it is
//!   [`confirm`](OutboundOrder::confirm)ed (the log writer's answer), then its continuation
//!   runs at its place.
//! - [`next_release`](OutboundOrder::next_release): what may go now, in order: a run of calls
//!   (delivered together, client by client), or a confirmed barrier's continuation. While the
//!   caller runs a continuation, the calls and barriers it creates take the barrier's place —
//!   ahead of what was emitted after the barrier — until
//!   [`continuation_done`](OutboundOrder::continuation_done).
//!
//! Who talks to it: `routing.rs` (emit, deliver), `persistence.rs` (barriers and their release).
//! Generic over the continuation `K` so its rules are unit-tested with plain values.

use std::collections::VecDeque;
use std::sync::Arc;

use super::audience::Audience;
use crate::client::OutboundCall;

/// A call as it was emitted, with whom it was for at that moment.
pub(super) struct Emitted {
    /// The call.
    pub(super) call: Arc<OutboundCall>,
    /// Who gets it.
    pub(super) audience: Audience,
    /// Clients that joined after it was emitted (connection number at or above) skip it.
    pub(super) joined_below: u64,
}

/// An entry of the held order.
enum Held<K> {
    /// A call waiting for the barriers before it.
    Call(Emitted),
    /// A write barrier: `outcome` is set when the writer answers.
    Barrier {
        /// Matches the answer to its barrier.
        ticket: u64,
        /// The writer's answer, once it came.
        outcome: Option<Result<(), String>>,
        /// Runs at this place once the front of the order reaches it.
        then: K,
    },
}

/// Where calls and barriers created by a running continuation go.
struct Cursor {
    /// Insertion index (just behind what the continuation added so far).
    at: usize,
    /// The continuation queued a barrier: its later calls must wait too.
    blocked: bool,
}

/// What may go now ([`OutboundOrder::next_release`]).
pub(super) enum Release<K> {
    /// Calls up to the next barrier, in emit order.
    Calls(Vec<Emitted>),
    /// A confirmed barrier's continuation with the writer's answer: run it, then
    /// [`OutboundOrder::continuation_done`].
    Continue(K, Result<(), String>),
}

/// The held calls and barriers of one conversation (usually empty: only while a barrier is
/// unconfirmed).
pub(super) struct OutboundOrder<K> {
    /// Calls and barriers in emit order.
    held: VecDeque<Held<K>>,
    /// Ticket of the next barrier.
    next_ticket: u64,
    /// Set while a continuation runs.
    cursor: Option<Cursor>,
}

impl<K> Default for OutboundOrder<K> {
    fn default() -> Self {
        OutboundOrder {
            held: VecDeque::new(),
            next_ticket: 0,
            cursor: None,
        }
    }
}

impl<K> OutboundOrder<K> {
    /// Whether anything waits for a barrier.
    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// A call emitted now: given back when it may go at once, else held in its place.
    pub(super) fn emit(&mut self, call: Emitted) -> Option<Emitted> {
        match &mut self.cursor {
            Some(cursor) if cursor.blocked => {
                self.held.insert(cursor.at, Held::Call(call));
                cursor.at += 1;
                None
            }
            None if !self.held.is_empty() => {
                self.held.push_back(Held::Call(call));
                None
            }
            _ => Some(call),
        }
    }

    /// A write barrier with what runs at its place once confirmed; its ticket, which
    /// [`confirm`](Self::confirm) names.
    pub(super) fn barrier(&mut self, then: K) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let barrier = Held::Barrier {
            ticket,
            outcome: None,
            then,
        };
        match &mut self.cursor {
            Some(cursor) => {
                self.held.insert(cursor.at, barrier);
                cursor.at += 1;
                cursor.blocked = true;
            }
            None => self.held.push_back(barrier),
        }
        ticket
    }

    /// The writer answered barrier `ticket` (an unknown ticket changes nothing).
    pub(super) fn confirm(&mut self, ticket: u64, result: Result<(), String>) {
        if let Some(Held::Barrier { outcome, .. }) = self
            .held
            .iter_mut()
            .find(|h| matches!(h, Held::Barrier { ticket: t, .. } if *t == ticket))
        {
            *outcome = Some(result);
        }
    }

    /// What may go now, or `None` when the front waits for its barrier (or nothing is held).
    /// Not while a continuation runs.
    pub(super) fn next_release(&mut self) -> Option<Release<K>> {
        debug_assert!(self.cursor.is_none(), "a continuation is still running");
        match self.held.front()? {
            Held::Barrier { outcome: None, .. } => None,
            Held::Barrier { .. } => {
                let Some(Held::Barrier {
                    outcome: Some(outcome),
                    then,
                    ..
                }) = self.held.pop_front()
                else {
                    unreachable!("a confirmed barrier is at the front")
                };
                self.cursor = Some(Cursor {
                    at: 0,
                    blocked: false,
                });
                Some(Release::Continue(then, outcome))
            }
            Held::Call(_) => {
                let mut run = Vec::new();
                while let Some(Held::Call(_)) = self.held.front() {
                    if let Some(Held::Call(call)) = self.held.pop_front() {
                        run.push(call);
                    }
                }
                Some(Release::Calls(run))
            }
        }
    }

    /// The continuation [`next_release`](Self::next_release) gave has run.
    pub(super) fn continuation_done(&mut self) {
        self.cursor = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A call named by its method, for everyone.
    fn call(name: &'static str) -> Emitted {
        Emitted {
            call: OutboundCall::new(name, &json!([])),
            audience: Audience::Everyone,
            joined_below: 1,
        }
    }

    /// What the order releases now, as names: calls by method, continuations as `>name`
    /// (`run` is what the continuation does while it runs: the calls it emits, barriers it
    /// adds), until it holds.
    fn drain(
        order: &mut OutboundOrder<&'static str>,
        mut run: impl FnMut(&'static str, &mut OutboundOrder<&'static str>, &mut Vec<String>),
    ) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(release) = order.next_release() {
            match release {
                Release::Calls(calls) => out.extend(calls.iter().map(|c| c.call.method.into())),
                Release::Continue(name, outcome) => {
                    out.push(match outcome {
                        Ok(()) => format!(">{name}"),
                        Err(e) => format!(">{name}:{e}"),
                    });
                    run(name, order, &mut out);
                    order.continuation_done();
                }
            }
        }
        out
    }

    #[test]
    fn a_call_goes_at_once_when_nothing_holds_it() {
        let mut order = OutboundOrder::<&str>::default();
        assert!(order.emit(call("a")).is_some());
        assert!(order.is_empty());
        assert!(order.next_release().is_none());
    }

    #[test]
    fn calls_wait_for_the_barrier_before_them_and_its_continuation_runs_first() {
        let mut order = OutboundOrder::default();
        let ticket = order.barrier("accepted");
        assert!(order.emit(call("queued")).is_none());
        assert!(order.emit(call("started")).is_none());
        assert!(order.next_release().is_none(), "unconfirmed");
        order.confirm(ticket, Ok(()));
        let out = drain(&mut order, |_, order, out| {
            // The continuation's own call goes at once: nothing before it is held.
            let now = order.emit(call("answer")).expect("not held");
            out.push(now.call.method.into());
        });
        assert_eq!(out, [">accepted", "answer", "queued", "started"]);
        assert!(order.is_empty());
    }

    #[test]
    fn barriers_confirmed_out_of_order_release_in_emit_order() {
        let mut order = OutboundOrder::default();
        let first = order.barrier("first");
        order.emit(call("a"));
        let second = order.barrier("second");
        order.emit(call("b"));
        order.confirm(second, Ok(()));
        assert!(
            order.next_release().is_none(),
            "the first still holds everything"
        );
        order.confirm(first, Err("disk full".into()));
        let out = drain(&mut order, |_, _, _| {});
        assert_eq!(out, [">first:disk full", "a", ">second", "b"]);
    }

    #[test]
    fn a_continuations_barrier_holds_its_later_calls_ahead_of_the_rest() {
        let mut order = OutboundOrder::default();
        let first = order.barrier("first");
        order.emit(call("after-first"));
        order.confirm(first, Ok(()));
        let mut inner = None;
        let out = drain(&mut order, |name, order, out| {
            if name == "first" {
                out.extend(
                    order
                        .emit(call("before-inner"))
                        .map(|c| c.call.method.into()),
                );
                inner = Some(order.barrier("inner"));
                assert!(order.emit(call("after-inner")).is_none(), "held by inner");
            }
        });
        assert_eq!(out, [">first", "before-inner"], "inner holds the rest");
        order.confirm(inner.unwrap(), Ok(()));
        let out = drain(&mut order, |_, _, _| {});
        assert_eq!(out, [">inner", "after-inner", "after-first"]);
    }

    #[test]
    fn an_unknown_ticket_changes_nothing() {
        let mut order = OutboundOrder::default();
        order.barrier("b");
        order.emit(call("a"));
        order.confirm(99, Ok(()));
        assert!(order.next_release().is_none());
        assert!(!order.is_empty());
    }
}
