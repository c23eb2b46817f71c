//! The live conversation list, a Roundtable extension of the `agent-server` channel: a socket
//! that sends `subscribeConversations` gets the list in the answer, then a `call`
//! `conversationsChanged` with `{kind, conversation}` for every change (reference extension,
//! README's protocol table). TypeAgent clients never subscribe, so they never see these calls.
//!
//! `created`, `renamed` and `deleted` go out as soon as the change is durable (from the catalog's
//! success paths, before the RPC's own answer). `updated` (client or message counts) is
//! coalesced: a changed conversation is marked dirty and all dirty ones go out together at most
//! every [`UPDATE_INTERVAL`], so a socket gets at most a few per conversation per second however
//! busy it is. Nothing is tracked while nobody subscribes: conversations report client counts
//! only while [`Watchers::active`] is set.
//!
//! Talks to: the transport's connections (subscribe, unsubscribe, and the
//! [`ConversationsChanged`] they turn into frames), the catalog and lifecycle handlers (which
//! call [`ConversationRegistry::publish`] and [`ConversationRegistry::mark_updated`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::json;

use super::ConversationRegistry;
use crate::client::OutboundCall;
use crate::ids::ConversationId;

/// How often coalesced `updated` changes go out (at most).
pub const UPDATE_INTERVAL: Duration = Duration::from_millis(250);

/// The method name of the change calls.
pub const CONVERSATIONS_CHANGED: &str = "conversationsChanged";

/// What happened to a conversation, as `kind` in a [`ConversationsChanged`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// `createConversation` (or the default conversation made for a first join).
    Created,
    /// `renameConversation`.
    Renamed,
    /// `deleteConversation`.
    Deleted,
    /// Client count or message count changed (coalesced).
    Updated,
}

impl ChangeKind {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Renamed => "renamed",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Updated => "updated",
        }
    }
}

/// One change for one subscribed socket: the `conversationsChanged` call, serialized once for
/// every subscriber (the connection splices its own callId on `agent-server`).
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct ConversationsChanged {
    /// `call conversationsChanged [{kind, conversation}]`.
    pub call: Arc<OutboundCall>,
}

/// The subscribers and the pending coalesced updates; one per registry.
#[derive(Default)]
pub(super) struct Watchers {
    /// Subscribed sockets by the transport's socket number: at most one entry per open socket
    /// (bounded by the server's connection limit); removed by `UnsubscribeConversations`,
    /// which every subscribed connection sends when it stops.
    subscribers: HashMap<u64, Recipient<ConversationsChanged>>,
    /// Conversations whose counts changed since the last flush (bounded by the registry's
    /// entries; empty while nobody subscribes).
    dirty: HashSet<ConversationId>,
    /// A flush is scheduled.
    flush_armed: bool,
    /// Shared with every conversation: set while anyone subscribes, so conversations report
    /// client-count changes (`ConversationEvent::ClientCount`) only when someone listens.
    pub(super) active: Arc<AtomicBool>,
}

/// `subscribeConversations()`: answers the current list (the `listConversations` JSON), after
/// which every change reaches `recipient`. Subscribing again replaces the earlier recipient.
#[derive(Message)]
#[rtype(result = "String")]
pub struct SubscribeConversations {
    /// The transport's socket number (the key an unsubscribe names).
    pub socket: u64,
    /// Where the changes go.
    pub recipient: Recipient<ConversationsChanged>,
}

impl Handler<SubscribeConversations> for ConversationRegistry {
    type Result = MessageResult<SubscribeConversations>;

    fn handle(&mut self, msg: SubscribeConversations, _ctx: &mut Self::Context) -> Self::Result {
        self.watchers.subscribers.insert(msg.socket, msg.recipient);
        self.watchers.active.store(true, Ordering::Relaxed);
        log::debug!(
            "socket {}: subscribed to the conversation list ({} subscribers)",
            msg.socket,
            self.watchers.subscribers.len()
        );
        MessageResult(self.list_json(None, None))
    }
}

/// `unsubscribeConversations()`, and a subscribed socket's close: no more changes go to it.
/// Answers whether it was subscribed.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct UnsubscribeConversations {
    /// The transport's socket number.
    pub socket: u64,
}

impl Handler<UnsubscribeConversations> for ConversationRegistry {
    type Result = bool;

    fn handle(&mut self, msg: UnsubscribeConversations, _ctx: &mut Self::Context) -> bool {
        let was = self.watchers.subscribers.remove(&msg.socket).is_some();
        if was {
            log::debug!(
                "socket {}: unsubscribed from the conversation list ({} subscribers)",
                msg.socket,
                self.watchers.subscribers.len()
            );
        }
        if self.watchers.subscribers.is_empty() {
            self.watchers.active.store(false, Ordering::Relaxed);
            self.watchers.dirty.clear();
        }
        was
    }
}

impl ConversationRegistry {
    /// Tells every subscriber about `kind` for `id` now (created / renamed / deleted: call it
    /// once the change is durable, while the entry still exists).
    pub(super) fn publish(&mut self, kind: ChangeKind, id: ConversationId) {
        if self.watchers.subscribers.is_empty() {
            return;
        }
        let Some(entry) = self.entries.get(&id) else {
            return;
        };
        let info = self.info(id, entry, true);
        let call = OutboundCall::new(
            CONVERSATIONS_CHANGED,
            &json!([{"kind": kind.as_str(), "conversation": info}]),
        );
        self.watchers.dirty.remove(&id);
        // A subscriber whose connection has stopped drops the message; its unsubscribe follows.
        for recipient in self.watchers.subscribers.values() {
            recipient.do_send(ConversationsChanged { call: call.clone() });
        }
    }

    /// Notes that `id`'s counts changed; subscribers get one `updated` for it at the next
    /// flush (at most every [`UPDATE_INTERVAL`]).
    pub(super) fn mark_updated(&mut self, id: ConversationId, ctx: &mut Context<Self>) {
        if self.watchers.subscribers.is_empty() {
            return;
        }
        self.watchers.dirty.insert(id);
        if !self.watchers.flush_armed {
            self.watchers.flush_armed = true;
            ctx.run_later(UPDATE_INTERVAL, |act, _| {
                act.watchers.flush_armed = false;
                let dirty = std::mem::take(&mut act.watchers.dirty);
                for id in dirty {
                    act.publish(ChangeKind::Updated, id);
                }
            });
        }
    }
}
