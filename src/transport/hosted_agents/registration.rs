//! Registering a client agent: the conversation it is for (joined here or relayed), the
//! name reserved on this socket, the manifest read, the conversation's decision, then its
//! `initializeAgentContext`.

use actix::prelude::*;

use roundtable_actors::agent::client_agent::{
    agent_context_id, initialize_args, parse_registration, CallError, SessionContext,
    INITIALIZE_AGENT_CONTEXT, MAX_AGENTS_PER_CONNECTION,
};
use roundtable_actors::conversation::{AbandonClientAgent, ClientAgentHost, RegisterClientAgent};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::protocol::{agent_channel, RpcError, RpcResult, AGENT_SERVER_CHANNEL};
use serde_json::json;

use super::*;
use crate::transport::Connection;

impl Connection {
    /// The relayed conversation a registration means, when it is one: the one named, or the
    /// only one this socket joined.
    pub(super) fn relayed_agent_target(
        &self,
        conversation: Option<&ConversationRef>,
    ) -> Option<ConversationId> {
        match conversation {
            Some(c) => c.id().filter(|id| self.remote.contains_key(id)),
            None if self.joined.is_empty() && self.remote.len() == 1 => {
                self.remote.keys().next().copied()
            }
            None => None,
        }
    }

    /// `registerClientAgent` for a conversation another node serves: the registration goes to
    /// this socket's virtual connection there (which hosts the agent and answers with the
    /// client's callId); `agent:<name>` frames are relayed from then on (`relay/`).
    pub(in crate::transport) fn register_relayed_agent(
        &mut self,
        call_id: u64,
        id: ConversationId,
        request: ClientAgentRequest,
    ) {
        let (ch, m) = (AGENT_SERVER_CHANNEL, "registerClientAgent");
        let taken = self.agents.contains_key(&request.name)
            || self
                .remote_agents
                .get(&request.name)
                .is_some_and(|other| other.conversation != id);
        if taken {
            let error = RpcError::ChannelExists(agent_channel(&request.name));
            return self.reply(ch, call_id, m, Err(error));
        }
        if !self.remote_agents.contains_key(&request.name)
            && self.agents.len() + self.remote_agents.len() >= MAX_AGENTS_PER_CONNECTION
        {
            let error = RpcError::TooManyClientAgentsOnConnection(MAX_AGENTS_PER_CONNECTION);
            return self.reply(ch, call_id, m, Err(error));
        }
        let registration = json!([{
            "name": request.name,
            "manifest": request.manifest,
            "agentInterface": request.agent_interface,
            "conversationId": id,
        }]);
        if !self.relay_invoke(id, call_id, m, registration) {
            return;
        }
        self.remote_agents.insert(
            request.name.clone(),
            crate::transport::relay::RelayedAgent {
                conversation: id,
                registration: request,
            },
        );
    }

    /// The conversation a client agent request means: the given one (`Not joined to
    /// conversation: <id>` unless this socket joined it), else the only one joined.
    pub(super) fn agent_conversation(
        &self,
        conversation: Option<&ConversationRef>,
    ) -> RpcResult<ConversationId> {
        match conversation {
            Some(c) => match c.id().filter(|id| self.joined.contains_key(id)) {
                Some(id) => Ok(id),
                None => Err(RpcError::NotJoined(
                    c.id()
                        .map_or_else(|| c.raw().to_string(), |id| id.to_string()),
                )),
            },
            None => match self.joined.len() {
                0 => Err(RpcError::ClientAgentNoConversation),
                1 => Ok(*self.joined.keys().next().expect("one")),
                _ => Err(RpcError::ClientAgentAmbiguousConversation),
            },
        }
    }

    /// `registerClientAgent`: resolve, check this socket's own agents and bound, read the
    /// manifest, reserve the name, let the conversation decide, answer.
    pub(in crate::transport) fn register_client_agent(
        &mut self,
        call_id: u64,
        request: ClientAgentRequest,
        ctx: &mut Context<Self>,
    ) {
        let (ch, m) = (AGENT_SERVER_CHANNEL, "registerClientAgent");
        if let Some(id) = self.relayed_agent_target(request.conversation.as_ref()) {
            return self.register_relayed_agent(call_id, id, request);
        }
        if self.remote_agents.contains_key(&request.name) {
            let error = RpcError::ChannelExists(agent_channel(&request.name));
            return self.reply(ch, call_id, m, Err(error));
        }
        let checked = self
            .agent_conversation(request.conversation.as_ref())
            .and_then(|id| match self.agents.get(&request.name) {
                Some(h) if h.conversation_id == id => Err(RpcError::ClientAgentAlreadyRegistered {
                    name: request.name.clone(),
                    conversation: id.to_string(),
                }),
                Some(_) => Err(RpcError::ChannelExists(agent_channel(&request.name))),
                None if self.agents.len() >= MAX_AGENTS_PER_CONNECTION => Err(
                    RpcError::TooManyClientAgentsOnConnection(MAX_AGENTS_PER_CONNECTION),
                ),
                None => Ok(id),
            });
        let checked = checked.and_then(|id| {
            parse_registration(&request.name, &request.manifest, &request.agent_interface)
                .map(|spec| (id, spec))
        });
        let (conversation_id, spec) = match checked {
            Ok(ok) => ok,
            Err(e) => return self.reply(ch, call_id, m, Err(e)),
        };
        let name = request.name.clone();
        let token = self.next_agent_token;
        self.next_agent_token += 1;
        self.agents.insert(
            name.clone(),
            HostedAgent {
                conversation_id,
                registration: request,
                token,
                registered: false,
                next_call_id: 0,
                action_contexts_sent: 0,
                lifecycle: spec.lifecycle.clone(),
                session: None,
                started: false,
                closing: false,
            },
        );
        let joined = &self.joined[&conversation_id];
        let addr = ctx.address();
        let req = joined.conversation.send(RegisterClientAgent {
            connection_id: joined.connection_id,
            spec,
            host: ClientAgentHost {
                token,
                invoke: addr.clone().recipient(),
                removed: addr.clone().recipient(),
                close: addr.recipient(),
            },
        });
        ctx.spawn(req.into_actor(self).map(move |res, act, ctx| {
            let res = res.unwrap_or_else(|_| {
                Err(RpcError::ConversationNotFound(conversation_id.to_string()))
            });
            let ours = act.agents.get_mut(&name).filter(|h| h.token == token);
            match (res, ours) {
                (Ok(session_context_id), Some(hosted)) => {
                    hosted.registered = true;
                    hosted.session = Some(SessionContext::new(session_context_id));
                    act.start_client_agent(name, token, conversation_id, call_id, ctx);
                }
                (Err(e), Some(_)) => {
                    act.agents.remove(&name);
                    act.reply(ch, call_id, m, Err(e));
                }
                // Left the conversation meanwhile: the conversation dropped the agent too.
                (Ok(_), None) => act.reply(ch, call_id, m, Err(interrupted(&name))),
                (Err(e), None) => act.reply(ch, call_id, m, Err(e)),
            }
        }));
    }

    /// The registration of `name` was accepted by its conversation: `initializeAgentContext`
    /// when listed (its failure fails the registration, and the conversation forgets the
    /// agent), then the startup invokes ([`Connection::enable_client_agent`]).
    pub(super) fn start_client_agent(
        &mut self,
        name: String,
        token: u64,
        conversation_id: ConversationId,
        call_id: u64,
        ctx: &mut Context<Self>,
    ) {
        let initializes = self
            .agents
            .get(&name)
            .is_some_and(|h| h.lifecycle.initializes);
        if !initializes {
            if let Some(hosted) = self.agents.get_mut(&name) {
                hosted.started = true;
            }
            return self.enable_client_agent(name, token, conversation_id, call_id, ctx);
        }
        let answer = self.lifecycle_invoke(
            &name,
            token,
            INITIALIZE_AGENT_CONTEXT,
            initialize_args(),
            ctx,
        );
        ctx.spawn(answer.into_actor(self).map(move |answer, act, ctx| {
            let answer = answer.unwrap_or_else(|_| Err(CallError::Disconnected(name.clone())));
            let ours = act
                .agents
                .get_mut(&name)
                .filter(|h| h.token == token && !h.closing);
            let (ch, m) = (AGENT_SERVER_CHANNEL, "registerClientAgent");
            match (answer, ours) {
                (Ok(answer), Some(hosted)) => {
                    hosted.started = true;
                    if let Some(session) = &mut hosted.session {
                        session.agent_context_id = agent_context_id(answer.result.as_ref());
                    }
                    act.enable_client_agent(name, token, conversation_id, call_id, ctx);
                }
                (Err(e), ours) => {
                    log::info!(
                        "socket {}: client agent {name} failed to initialize: {e}",
                        act.socket_id
                    );
                    if ours.is_some() {
                        act.agents.remove(&name);
                    }
                    if let Some(joined) = act.joined.get(&conversation_id) {
                        joined.conversation.do_send(AbandonClientAgent {
                            name: name.clone(),
                            token,
                        });
                    }
                    let error = match e {
                        CallError::Failed { error, .. } => error,
                        other => other.to_string(),
                    };
                    act.reply(
                        ch,
                        call_id,
                        m,
                        Err(RpcError::ClientAgentInitialize { name, error }),
                    );
                }
                // Unregistered, or this socket left, while it initialized: it is closing.
                (Ok(_), None) => act.reply(ch, call_id, m, Err(interrupted(&name))),
            }
        }));
    }
}
