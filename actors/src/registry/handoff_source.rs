//! The registry's part of a handoff (`conversation/handoff.rs`): finding the source
//! conversation a person named and reading the newest part of its chat history, loaded or
//! not, without a lock: a loaded source is asked ([`ReadChatWindow`]), an unloaded one is read
//! from disk off the actor.
//!
//! Talks to: the destination conversation (the message below, from its running request) and,
//! for a loaded source, that conversation.

use actix::prelude::*;

use super::{ConversationRegistry, LoadState};
use crate::conversation::{
    read_chat_tail, HandoffError, ReadChatWindow, ReadHandoffSource, SourceHistory,
};
use crate::ids::ConversationId;
use crate::naming;

impl Handler<ReadHandoffSource> for ConversationRegistry {
    type Result = ResponseFuture<Result<SourceHistory, HandoffError>>;

    fn handle(&mut self, msg: ReadHandoffSource, _ctx: &mut Self::Context) -> Self::Result {
        let found = ConversationId::parse(msg.named.trim())
            .filter(|id| self.entries.get(id).is_some_and(|e| !e.deleting))
            .or_else(|| {
                let key = naming::normalize(&msg.named);
                self.named(&key).find(|id| {
                    self.entries
                        .get(id)
                        .is_some_and(|e| !e.deleting && naming::normalize(&e.name) == key)
                })
            });
        let Some(id) = found else {
            let named = msg.named.trim().to_string();
            return Box::pin(async move { Err(HandoffError::UnknownSource(named)) });
        };
        let entry = &self.entries[&id];
        let name = entry.name.to_string();
        if id == msg.destination {
            return Box::pin(async move { Err(HandoffError::SameConversation(name)) });
        }
        let source_name = name.clone();
        let found = move |(messages, total): (std::sync::Arc<Vec<_>>, usize)| {
            if messages.is_empty() {
                return Err(HandoffError::EmptySource(source_name));
            }
            Ok(SourceHistory {
                id,
                name: source_name,
                messages,
                total,
            })
        };
        match &entry.state {
            LoadState::Live(addr) => {
                let asked = addr.send(ReadChatWindow);
                Box::pin(async move {
                    match asked.await {
                        Ok(window) => found(window),
                        Err(_) => Err(HandoffError::Unreadable {
                            name,
                            reason: "the conversation stopped".into(),
                        }),
                    }
                })
            }
            // Another node may serve it: this node's copy of its files may be behind.
            _ if self.config.cluster.is_some() => {
                Box::pin(async move { Err(HandoffError::NotOnThisNode(name)) })
            }
            _ => {
                // What an evicted source queued last may still be in the writer's queue.
                let written = self.config.runtime.log_writer.written();
                let dir = self.config.layout.conversation_dir(&id);
                Box::pin(async move {
                    let _ = written.await;
                    let read = tokio::task::spawn_blocking(move || read_chat_tail(&dir)).await;
                    match read {
                        Ok(Ok((messages, total))) => found((messages.into(), total)),
                        Ok(Err(e)) => Err(HandoffError::Unreadable {
                            name,
                            reason: e.to_string(),
                        }),
                        Err(e) => Err(HandoffError::Unreadable {
                            name,
                            reason: e.to_string(),
                        }),
                    }
                })
            }
        }
    }
}
