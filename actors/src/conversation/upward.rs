//! What a conversation asks of whoever loaded it (the registry): the messages it sends up and
//! the [`RegistryHandle`] it sends them through. They are defined here, on the conversation's
//! side, so the dependency points one way: the registry imports the conversation (and handles
//! these), the conversation never names the registry.

use actix::prelude::*;

use super::{HandoffError, SourceHistory};
use crate::ids::ConversationId;
use crate::protocol::ConversationInfo;

/// What a conversation sends up to the registry that loaded it, one [`Recipient`] per message:
/// the conversation holds this rather than the registry's address, so it does not name the
/// registry actor (the registry holds the conversations' addresses; the dependency points one
/// way). Cheap to clone.
#[derive(Clone)]
pub struct RegistryHandle {
    /// Idle timeouts, client and message counts ([`ConversationEvent`], `do_send`: they keep
    /// their order and never wait for room).
    pub events: Recipient<ConversationEvent>,
    /// A handoff's source, found by id or name and read ([`ReadHandoffSource`]).
    pub handoff_source: Recipient<ReadHandoffSource>,
    /// The conversation's record for `@system session` ([`GetConversationInfo`]).
    pub info: Recipient<GetConversationInfo>,
}

impl RegistryHandle {
    /// The handle on `registry`, any actor that answers the three messages (the registry, or
    /// a test's stand-in).
    pub fn new<A>(registry: &Addr<A>) -> RegistryHandle
    where
        A: Actor
            + Handler<ConversationEvent>
            + Handler<ReadHandoffSource>
            + Handler<GetConversationInfo>,
        A::Context: actix::dev::ToEnvelope<A, ConversationEvent>
            + actix::dev::ToEnvelope<A, ReadHandoffSource>
            + actix::dev::ToEnvelope<A, GetConversationInfo>,
    {
        RegistryHandle {
            events: registry.clone().recipient(),
            handoff_source: registry.clone().recipient(),
            info: registry.clone().recipient(),
        }
    }
}

/// Reports from conversations.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ConversationEvent {
    /// The idle timer fired with no clients.
    IdleExpired {
        /// Conversation.
        id: ConversationId,
        /// Generation of the reporting actor.
        generation: u64,
        /// Attaches it had handled when the timer fired.
        attaches_seen: u64,
    },
    /// The message count changed.
    MessageCount {
        /// Conversation.
        id: ConversationId,
        /// `user-request` entries now.
        count: u64,
    },
    /// The client count changed (its value is in the shared counter); sent only while
    /// someone subscribes to the conversation list.
    ClientCount {
        /// Conversation.
        id: ConversationId,
    },
}

/// The source of a handoff into `destination`: the conversation `named` (an id, else a name
/// compared trimmed and without case) and the newest part of its chat history, within the
/// agent loop's bounds. Answers the exact error when there is no such conversation, it is the
/// destination, its history is empty or cannot be read.
#[derive(Message)]
#[rtype(result = "Result<SourceHistory, HandoffError>")]
pub struct ReadHandoffSource {
    /// The source as the person named it.
    pub named: String,
    /// The conversation the packet goes to.
    pub destination: ConversationId,
}

/// The registry's record of one conversation, for `@system session`: its name and creation
/// time live only here, so the conversation asks at command time (one message, and always
/// true, after a rename too) rather than keeping a copy the registry would have to update.
/// `None` once the conversation is gone or being deleted.
#[derive(Message)]
#[rtype(result = "Option<ConversationInfo>")]
pub struct GetConversationInfo {
    /// The conversation asking about itself.
    pub id: ConversationId,
}
