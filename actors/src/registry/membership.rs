//! Join and leave: which conversation a join means (an id, or the default one, created when
//! there is none), the `Attach` handed to the conversation in mailbox order, and the
//! [`JoinLease`] that leaves on the socket's behalf when it vanishes.
//!
//! Talks to: the transport's connections (they send [`JoinConversation`] and
//! [`LeaveConversation`] and await the [`Pending`] answer) and the conversations (`Attach`,
//! `Detach`).

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::watchers::ChangeKind;
use super::{storage_error, ConversationRegistry, Entry, LoadState, DEFAULT_CONVERSATION_NAME};
use crate::client::{Client, ConversationGone};
use crate::conversation::{Attach, Attached, Conversation, Detach};
use crate::ids::{ConnectionId, ConversationId, ConversationRef};
use crate::outbox::Outbox;
use crate::protocol::{RpcError, RpcResult};

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

/// Membership of one socket in one conversation; dropping it leaves (see [`Joined::lease`]).
pub struct JoinLease {
    /// Where the automatic leave goes.
    registry: Addr<ConversationRegistry>,
    /// The joined conversation.
    conversation_id: ConversationId,
    /// The client's connection id in it.
    connection_id: ConnectionId,
    /// `false` once disarmed: the leave was explicit or the conversation is gone.
    armed: bool,
}

impl JoinLease {
    /// Gives up the automatic leave (explicit leave, or the conversation is already gone).
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for JoinLease {
    fn drop(&mut self) {
        if self.armed {
            self.registry.do_send(LeaveConversation {
                conversation_id: self.conversation_id,
                connection_id: self.connection_id,
            });
        }
    }
}

/// What the registry answers to a join or a leave: a future the *caller* awaits. The registry
/// decides (and forwards to the conversation) in its mailbox order, but does not wait for the
/// conversation's answer itself, so a join or a leave wakes the registry's thread once.
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
        let registry = ctx.address();
        let (tx, rx) = oneshot::channel();
        self.attach(
            id,
            Attach {
                outbox: msg.outbox,
                filter: msg.filter,
                connection: msg.connection,
                reply: tx,
            },
            ctx,
        );
        let pending: Pending<Joined> = Box::pin(async move {
            if let Some(ack) = created {
                storage_error(ack.await)?;
            }
            let Attached {
                connection_id,
                client,
                conversation,
                pending_interactions,
                queue_snapshot,
            } = rx
                .await
                .map_err(|_| RpcError::ConversationNotFound(id.to_string()))?;
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
                registry,
                conversation_id: id,
                connection_id,
                armed: true,
            };
            Ok(Joined {
                conversation_id: id,
                result,
                connection_id,
                client,
                conversation,
                lease,
            })
        });
        MessageResult(pending)
    }
}

/// `leaveConversation(id)` for a client this socket joined.
#[derive(Message)]
#[rtype(result = "Pending<()>")]
pub struct LeaveConversation {
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The client's connection id in it.
    pub connection_id: ConnectionId,
}

impl Handler<LeaveConversation> for ConversationRegistry {
    type Result = MessageResult<LeaveConversation>;

    fn handle(&mut self, msg: LeaveConversation, _ctx: &mut Self::Context) -> Self::Result {
        let not_found = RpcError::ConversationNotFound(msg.conversation_id.to_string());
        let addr = match self
            .entries
            .get(&msg.conversation_id)
            .map(|e| &**e)
            .filter(|e| !e.deleting)
        {
            Some(Entry {
                state: LoadState::Live(addr),
                ..
            }) => addr.clone(),
            _ => return MessageResult(ready(Err(not_found))),
        };
        let (tx, rx) = oneshot::channel();
        addr.do_send(Detach {
            connection_id: msg.connection_id,
            reply: Some(tx),
        });
        let pending: Pending<()> = Box::pin(async move {
            match rx.await {
                Ok(true) => Ok(()),
                _ => Err(not_found),
            }
        });
        MessageResult(pending)
    }
}
