//! Read-your-writes across the nodes of a cluster (docs/cluster.md, "Reads"): a request
//! wrapped in [`CaughtUp`] is handled only once this node's copy of the shared registry has
//! applied every revision the store had when the request arrived. A conversation created,
//! renamed or deleted on another node, and acknowledged there, is therefore known here to the
//! very next join, rename, delete, list or search, instead of after the watch happens to
//! deliver it (`Conversation not found` for a conversation that exists, a list without it, a
//! join of one already deleted).
//!
//! How: the request is queued here in arrival order and the store's newest revision is asked
//! for (one JetStream request); once the watch has applied that revision (`shared.rs` reports
//! every revision, changes or not), the requests at the head of the queue run in order. Without
//! a cluster a request runs at once, unchanged. Who sends these: the transport, for every
//! `agent-server` request that reads or writes the list (`src/transport/agent_server.rs`).
//!
//! A node cut off from the store (NATS not connected, or the store not answering) cannot know
//! what other nodes acknowledged: its reads (lists, finds, content search, the live list)
//! answer from its copy, as they did before this module — available, possibly stale, and
//! `/health` says NATS is lost — while joins, creates, renames and deletes are refused
//! `Cluster unavailable` (they need the store anyway).
//!
//! Bounds: at most [`MAX_WAITING`] requests wait (past it: `Cluster unavailable: … too many
//! requests waiting`); none waits longer than [`CATCH_UP_TIMEOUT`] (a stalled watch, NATS out
//! of reach): it is answered `Cluster unavailable` with the revisions it waited between.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use actix::dev::MessageResponse;
use actix::prelude::*;
use tokio::sync::oneshot;

use super::ConversationRegistry;
use crate::protocol::RpcError;

/// Requests waiting for this node's copy to catch up, at most.
pub const MAX_WAITING: usize = 4096;

/// How long a request may wait for this node's copy to catch up before it is refused.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(10);

/// Handle `M` once this node's copy of the shared registry is current to the store's revision
/// at arrival (a single node: at once). Answers `Err` only when it cannot catch up.
pub struct CaughtUp<M>(
    /// The request.
    pub M,
);

impl<M> Message for CaughtUp<M>
where
    M: Message,
    M::Result: Send + 'static,
{
    type Result = Result<M::Result, RpcError>;
}

/// What a waiting request waits for.
enum Target {
    /// The store's revision is being asked for.
    Asking,
    /// Runs once the copy has applied this revision.
    Revision(u64),
    /// The store could not say: answered with this.
    Failed(RpcError),
}

/// A request runs (`Ok`) or is refused.
type Run = Box<
    dyn FnOnce(&mut ConversationRegistry, &mut Context<ConversationRegistry>, Result<(), RpcError>)
        + Send,
>;

/// One waiting request.
struct Waiting {
    /// Matches the answer of its revision request.
    ticket: u64,
    /// Only reads the list: answered from the copy when the store cannot say.
    read: bool,
    /// What it waits for.
    target: Target,
    /// Refused once past this.
    deadline: Instant,
    /// Runs or refuses it.
    run: Run,
}

/// The registry's read-your-writes state (see the module docs).
#[derive(Default)]
pub(super) struct CatchUp {
    /// The newest store revision this node's copy has applied.
    applied: u64,
    /// Requests in arrival order; only the head may run.
    waiting: VecDeque<Waiting>,
    /// Next ticket.
    next_ticket: u64,
}

/// `Handler<CaughtUp<M>>` for each request the transport sends through it (a blanket impl
/// over every `M` sends the trait solver into a loop). `read`: the request only reads the list, so a node cut off from the store answers it from
/// its copy (see the module docs).
macro_rules! caught_up {
    ($($m:ty => $read:expr),* $(,)?) => {$(
        impl Handler<CaughtUp<$m>> for ConversationRegistry {
            type Result = ResponseFuture<Result<<$m as Message>::Result, RpcError>>;

            fn handle(&mut self, msg: CaughtUp<$m>, ctx: &mut Self::Context) -> Self::Result {
                self.when_caught_up(msg.0, $read, ctx)
            }
        }
    )*};
}

caught_up!(
    super::CreateConversation => false,
    super::ListConversations => true,
    super::RenameConversation => false,
    super::DeleteConversation => false,
    super::FindConversations => true,
    super::SearchConversationContent => true,
    super::SubscribeConversations => true,
    super::JoinConversation => false,
);

impl ConversationRegistry {
    /// Handles `request` now (a single node) or once the copy has caught up (see the module
    /// docs); `Err` when it cannot.
    fn when_caught_up<M>(
        &mut self,
        request: M,
        read: bool,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<M::Result, RpcError>>
    where
        M: Message + Send + 'static,
        M::Result: Send + 'static,
        Self: Handler<M>,
        <Self as Handler<M>>::Result: MessageResponse<Self, M>,
    {
        let (answer_tx, answer_rx) = oneshot::channel::<M::Result>();
        let run_now = move |act: &mut Self, ctx: &mut Context<Self>| {
            <Self as Handler<M>>::handle(act, request, ctx).handle(ctx, Some(answer_tx));
        };
        let lost = || RpcError::Internal("the registry stopped".into());
        let Some(shared) = self.config.cluster.clone() else {
            run_now(self, ctx);
            return Box::pin(async move { answer_rx.await.map_err(|_| lost()) });
        };
        if self.catch_up.waiting.len() >= MAX_WAITING {
            return Box::pin(std::future::ready(Err(RpcError::ClusterUnavailable(
                format!(
                    "too many requests waiting for this node's copy of the conversation list \
                     ({MAX_WAITING}); retry"
                ),
            ))));
        }
        let (gate_tx, gate_rx) = oneshot::channel::<Result<(), RpcError>>();
        let ticket = self.catch_up.next_ticket;
        self.catch_up.next_ticket += 1;
        // Cut off from the store: nothing to ask. The request still queues, so it keeps its
        // order behind those already waiting; a read then runs on the copy, the rest are refused.
        let reachable = shared.reachable();
        let target = if reachable {
            Target::Asking
        } else {
            Target::Failed(RpcError::ClusterUnavailable(
                "NATS is not connected: this node cannot know the cluster's conversation list"
                    .into(),
            ))
        };
        self.catch_up.waiting.push_back(Waiting {
            ticket,
            read,
            target,
            deadline: Instant::now() + CATCH_UP_TIMEOUT,
            run: Box::new(move |act, ctx, outcome| {
                let go = outcome.is_ok();
                let _ = gate_tx.send(outcome);
                if go {
                    run_now(act, ctx);
                }
            }),
        });
        if reachable {
            ctx.spawn(
                shared
                    .revision()
                    .into_actor(self)
                    .map(move |revision, act, ctx| {
                        if let Some(w) =
                            act.catch_up.waiting.iter_mut().find(|w| w.ticket == ticket)
                        {
                            w.target = match revision {
                                Ok(r) => Target::Revision(r),
                                Err(e) => Target::Failed(RpcError::ClusterUnavailable(e.0)),
                            };
                        }
                        act.run_caught_up(ctx);
                    }),
            );
            ctx.run_later(CATCH_UP_TIMEOUT, |act, ctx| act.run_caught_up(ctx));
        } else {
            self.run_caught_up(ctx);
        }
        Box::pin(async move {
            gate_rx.await.map_err(|_| lost())??;
            answer_rx.await.map_err(|_| lost())
        })
    }
}

impl ConversationRegistry {
    /// The store is at `revision`, below what the copy had applied: the watch delivered
    /// revisions the store does not have (`reconcile.rs`). Requests arriving from now on wait
    /// for the watch from there.
    pub(super) fn rewind_catch_up(&mut self, revision: u64) {
        self.catch_up.applied = self.catch_up.applied.min(revision);
    }

    /// This node's copy has applied the store's `revision`: the requests waiting for it run.
    pub(super) fn caught_up_to(&mut self, revision: u64, ctx: &mut Context<Self>) {
        self.catch_up.applied = self.catch_up.applied.max(revision);
        self.run_caught_up(ctx);
    }

    /// Runs (or refuses) the waiting requests at the head of the queue that can go: the copy
    /// is current to their revision, the store could not answer, or they waited too long.
    fn run_caught_up(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        while let Some(head) = self.catch_up.waiting.front() {
            let outcome = match &head.target {
                Target::Revision(r) if *r <= self.catch_up.applied => Ok(()),
                Target::Failed(e) => Err(e.clone()),
                target if head.deadline <= now => {
                    let wanted = match target {
                        Target::Revision(r) => format!("revision {r}"),
                        _ => "the store's revision (no answer)".to_string(),
                    };
                    Err(RpcError::ClusterUnavailable(format!(
                        "this node's copy of the conversation list did not catch up within {} s \
                         (applied revision {}, waiting for {wanted})",
                        CATCH_UP_TIMEOUT.as_secs(),
                        self.catch_up.applied
                    )))
                }
                _ => break,
            };
            let waiting = self.catch_up.waiting.pop_front().expect("the head");
            let outcome = match outcome {
                Err(e) if waiting.read => {
                    log::debug!("registry: a read answered from this node's copy: {e}");
                    Ok(())
                }
                outcome => outcome,
            };
            (waiting.run)(self, ctx, outcome);
        }
    }
}
