//! Join and leave: which conversation a join means (an id, or the default one, created when
//! there is none), the `Attach` handed to the conversation in mailbox order, the direct join
//! of a loaded conversation ([`join_loaded`], through the [`LiveDirectory`]), and the
//! [`JoinLease`] that leaves on the socket's behalf when it vanishes.
//!
//! Talks to: the transport's connections (they call [`join_loaded`] for a loaded conversation
//! named by id, else, or when it refuses, send [`JoinConversation`] and await the [`Pending`]
//! answer; they leave through the lease) and the conversations (`Attach`, `Detach`).

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::watchers::ChangeKind;
use super::{
    storage_error, ConversationRegistry, LiveConversation, LoadState, DEFAULT_CONVERSATION_NAME,
};
use crate::client::{Client, ConversationGone};
use crate::conversation::{Attach, Attached, Conversation, Detach};
use crate::ids::{ConnectionId, ConversationId, ConversationRef};
use crate::outbox::Outbox;
use crate::protocol::{RpcError, RpcResult};

#[cfg(doc)]
use super::LiveDirectory;

/// A successful join, handed back to the connection.
pub struct Joined {
    /// The resolved conversation id.
    pub conversation_id: ConversationId,
    /// The `JoinConversationResult` to send.
    pub result: Value,
    /// The client's connection id.
    pub connection_id: ConnectionId,
    /// The client actor (send it `Ready` after the result is queued).
    pub client: Addr<Client>,
    /// The conversation actor (dispatcher calls).
    pub conversation: Addr<Conversation>,
    /// Leaves the conversation when dropped, unless disarmed: a join whose socket vanished
    /// before the answer, or a socket that closes, never leaves a phantom client behind.
    pub lease: JoinLease,
}

impl Joined {
    /// The join `attached` answered, as the connection gets it.
    fn new(id: ConversationId, name: &str, attached: Attached) -> Joined {
        let Attached {
            connection_id,
            client,
            conversation,
            pending_interactions,
            queue_snapshot,
        } = attached;
        let mut result = json!({
            "connectionId": connection_id,
            "conversationId": id,
            "name": name,
            "pendingInteractions": pending_interactions,
        });
        if let Some(q) = queue_snapshot {
            result["queueSnapshot"] = q;
        }
        let lease = JoinLease {
            conversation: conversation.clone(),
            conversation_id: id,
            connection_id,
            armed: true,
        };
        Joined {
            conversation_id: id,
            result,
            connection_id,
            client,
            conversation,
            lease,
        }
    }
}

/// Membership of one socket in one conversation; dropping it leaves (see [`Joined::lease`]).
/// The leave goes straight to the conversation actor that took the join: if that actor has
/// stopped (evicted, deleted, moved) there is nothing to leave, and a successor actor for the
/// same id, whose connection ids restart, is never asked.
pub struct JoinLease {
    /// The conversation actor the client joined.
    conversation: Addr<Conversation>,
    /// Its id (for the leave's error).
    conversation_id: ConversationId,
    /// The client's connection id in it.
    connection_id: ConnectionId,
    /// `false` once disarmed: the leave was explicit or the conversation is gone.
    armed: bool,
}

impl JoinLease {
    /// Gives up the automatic leave (the conversation is already gone).
    pub fn disarm(mut self) {
        self.armed = false;
    }

    /// `leaveConversation`: detaches the client now; `Conversation not found: <id>` when it
    /// was no longer joined (the conversation was deleted or stopped meanwhile).
    pub fn leave(mut self) -> Pending<()> {
        self.armed = false;
        let not_found = RpcError::ConversationNotFound(self.conversation_id.to_string());
        let (tx, rx) = oneshot::channel();
        self.conversation.do_send(Detach {
            connection_id: self.connection_id,
            reply: Some(tx),
        });
        Box::pin(async move {
            match rx.await {
                Ok(true) => Ok(()),
                _ => Err(not_found),
            }
        })
    }
}

impl Drop for JoinLease {
    fn drop(&mut self) {
        if self.armed {
            self.conversation.do_send(Detach {
                connection_id: self.connection_id,
                reply: None,
            });
        }
    }
}

/// Joins `id`, which the [`LiveDirectory`] lists as `live`, straight through its actor's
/// mailbox, without the registry's round trip, and the conversation answers the join itself:
/// on its thread, right after the attach, it hands the [`Joined`] to `deliver`, which queues
/// the join result on the socket and keeps the `Joined` where the connection takes it up
/// before it reads anything more (false: the socket is gone, and the join is undone). The
/// client is live at once. Resolves `true` once answered so, `false` when the actor refused
/// (it reported idleness, or it is stopping) or has stopped: the caller then sends
/// [`JoinConversation`], and the registry orders the join against the eviction or delete as
/// always.
pub async fn join_loaded(
    id: ConversationId,
    live: LiveConversation,
    filter: bool,
    outbox: Outbox,
    connection: Recipient<ConversationGone>,
    deliver: Box<dyn FnOnce(Joined) -> bool + Send>,
) -> bool {
    let (tx, rx) = oneshot::channel();
    let name = live.name.clone();
    live.conversation.do_send(Attach {
        direct: true,
        outbox,
        filter,
        connection,
        answer: Some(Box::new(move |attached| {
            deliver(Joined::new(id, &name, attached))
        })),
        reply: tx,
    });
    matches!(rx.await, Ok(None))
}

/// What the registry answers to a join (and a lease to a leave): a future the *caller*
/// awaits. The registry decides (and forwards to the conversation) in its mailbox order, but
/// does not wait for the conversation's answer itself, so a join wakes the registry's thread
/// once.
pub type Pending<T> = std::pin::Pin<Box<dyn std::future::Future<Output = RpcResult<T>> + Send>>;

/// An answer known at once (an error, mostly), as a [`Pending`].
fn ready<T: Send + 'static>(result: RpcResult<T>) -> Pending<T> {
    Box::pin(async move { result })
}

/// `joinConversation({conversationId?, filter?, clientType?})`.
#[derive(Message)]
#[rtype(result = "Pending<Joined>")]
pub struct JoinConversation {
    /// The conversation the client named, or `None` for the default conversation.
    pub conversation_id: Option<ConversationRef>,
    /// `filter` option.
    pub filter: bool,
    /// Conversations this socket has already joined (for the "Already joined" error).
    pub already_joined: Vec<ConversationId>,
    /// The socket's bounded queue.
    pub outbox: Outbox,
    /// The socket's connection.
    pub connection: Recipient<ConversationGone>,
}

impl ConversationRegistry {
    /// The default conversation: named `default`, else the first, else none (create one).
    fn default_conversation(&self) -> Option<ConversationId> {
        self.in_order()
            .find(|(_, e)| e.name.to_lowercase() == DEFAULT_CONVERSATION_NAME)
            .or_else(|| self.in_order().next())
            .map(|(id, _)| id)
    }

    /// Hands an `Attach` to the conversation, loading it first if needed.
    pub(super) fn attach(&mut self, id: ConversationId, attach: Attach, ctx: &mut Context<Self>) {
        let entry = self
            .entries
            .get_mut(&id)
            .expect("attaching to a known entry");
        match &mut entry.state {
            LoadState::Evicting(waiting) => waiting.push(attach),
            LoadState::Live(addr) => {
                entry.attaches_sent += 1;
                addr.do_send(attach);
            }
            LoadState::Unloaded => {
                let addr = self.load(id, ctx);
                let entry = self.entries.get_mut(&id).expect("just loaded");
                entry.attaches_sent += 1;
                addr.do_send(attach);
            }
        }
    }
}

impl Handler<JoinConversation> for ConversationRegistry {
    type Result = MessageResult<JoinConversation>;

    fn handle(&mut self, msg: JoinConversation, ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return MessageResult(ready(Err(RpcError::ServerStopping)));
        }
        let mut created = None;
        let id = match &msg.conversation_id {
            Some(named) => match self.lookup(named) {
                Some(id) => id,
                None => {
                    let raw = named.raw().to_string();
                    return MessageResult(ready(Err(RpcError::ConversationNotFound(raw))));
                }
            },
            None => match self.default_conversation() {
                Some(id) => id,
                None if self.config.cluster.is_some() => {
                    return MessageResult(self.join_new_cluster_default(msg, ctx));
                }
                None => {
                    // Single-flighted by the mailbox: the next join already sees this entry.
                    let (id, ack) = self.create_entry(DEFAULT_CONVERSATION_NAME.to_string());
                    // Subscribers hear of it once it is durable; the join waits for the same.
                    let (durable, durable_rx) = oneshot::channel();
                    ctx.spawn(ack.into_actor(self).map(move |written, act, _| {
                        if matches!(written, Ok(Ok(()))) {
                            act.publish(ChangeKind::Created, id);
                        }
                        let _ =
                            durable
                                .send(written.unwrap_or_else(|_| {
                                    Err("registry writer stopped".to_string())
                                }));
                    }));
                    created = Some(durable_rx);
                    id
                }
            },
        };
        if msg.already_joined.contains(&id) {
            return MessageResult(ready(Err(RpcError::AlreadyJoined(id.to_string()))));
        }
        if self.config.cluster.is_some() && !self.ownership.holds(id) {
            // Take the ownership lease first (or learn which node serves it: the transport
            // then relays the join there, `src/transport/relay/`).
            return MessageResult(self.join_after_lease(id, msg, ctx));
        }
        let name = self.entries[&id].name.to_string();
        let (tx, rx) = oneshot::channel();
        self.attach(
            id,
            Attach {
                direct: false,
                outbox: msg.outbox,
                filter: msg.filter,
                connection: msg.connection,
                answer: None,
                reply: tx,
            },
            ctx,
        );
        let pending: Pending<Joined> = Box::pin(async move {
            if let Some(ack) = created {
                storage_error(ack.await)?;
            }
            let attached = rx
                .await
                .ok()
                .flatten()
                .ok_or_else(|| RpcError::ConversationNotFound(id.to_string()))?;
            Ok(Joined::new(id, &name, attached))
        });
        MessageResult(pending)
    }
}
