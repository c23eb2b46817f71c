//! Registering a client agent and letting it go: the checks a registration passes (exact
//! texts of the reference), the starting agent activated or abandoned, `unregisterClientAgent`,
//! a leaving client's agents dropped with their questions and choices, and the list
//! `getStatus` and `@system config agents` show.
//!
//! Who talks to it: the transport's connections (`RegisterClientAgent`,
//! `ActivateClientAgent`, `AbandonClientAgent`, `UnregisterClientAgent`); the conversation
//! (`drop_client_agents` when a client leaves, `holds_client_agent` for the agent's thread
//! calls, the statuses for `getStatus`).

use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};

use super::messages::{
    AbandonClientAgent, ActivateClientAgent, ClientActionInfo, ClientAgentInfo, ClientAgentRemoved,
    RegisterClientAgent, UnregisterClientAgent,
};
use super::Registered;
use crate::agent::client_agent::{
    SessionContext, MAX_AGENTS_PER_CONVERSATION, RESERVED_AGENT_NAMES,
};
use crate::agent::tools;
use crate::agent::turn::ASK_USER;
use crate::conversation::agent_context::AgentThreads;
use crate::conversation::Conversation;
use crate::ids::ConnectionId;
use crate::protocol::{RpcError, RpcResult};

impl Conversation {
    /// This conversation's client agents, by name: for `@system config agents` (each with
    /// its actions) and `getStatus`.
    pub fn client_agents(&self) -> Vec<ClientAgentInfo> {
        self.client_agents
            .agents
            .values()
            .map(|r| ClientAgentInfo {
                name: r.spec.name.clone(),
                connection_id: r.connection_id.to_string(),
                emoji: r.spec.emoji.clone(),
                description: r.spec.description.clone(),
                executes_actions: r.spec.executes_actions,
                actions: r
                    .spec
                    .actions
                    .iter()
                    .map(|a| ClientActionInfo {
                        name: a.name.clone(),
                        schema_name: a.schema_name.clone(),
                        description: a.description.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The `AppAgentStatus` entries of the client agents (`getStatus`).
    pub(in crate::conversation) fn client_agent_statuses(&self) -> Vec<Value> {
        self.client_agents
            .agents
            .values()
            .map(|r| {
                json!({"emoji": r.spec.emoji, "name": r.spec.name, "lastUsed": false,
                    "priority": false, "request": false, "active": r.spec.executes_actions})
            })
            .collect()
    }

    /// Whether `name` is registered by `connection_id` with registration `token`.
    pub(in crate::conversation) fn holds_client_agent(
        &self,
        name: &str,
        token: u64,
        connection_id: ConnectionId,
    ) -> bool {
        self.client_agents
            .agents
            .get(name)
            .is_some_and(|r| r.host.token == token && r.connection_id == connection_id)
    }

    /// A client left: its agents go (its connection forgets them itself), and with them
    /// their questions, the choices they asked and the choices asked of it.
    pub(in crate::conversation) fn drop_client_agents(&mut self, connection_id: ConnectionId) {
        let id = self.setup.id;
        let mut gone = Vec::new();
        let mut leaves = |name: &String, r: &mut Registered| {
            let keep = r.connection_id != connection_id;
            if !keep {
                log::info!("conversation {id} connection {connection_id}: client agent {name} unregistered (client left)");
                gone.push((name.clone(), r.host.token));
            }
            keep
        };
        self.client_agents.agents.retain(&mut leaves);
        self.client_agents.starting.retain(leaves);
        for (name, _) in &gone {
            self.cancel_agent_questions(name);
        }
        self.forget_agent_choices(|c, asked| {
            asked == connection_id || gone.iter().any(|(n, t)| *n == c.agent && *t == c.token)
        });
    }

    /// Whether `name` is taken by something that is not a client agent: a built-in agent or
    /// tool, or a `--tool-server` prefix.
    fn reserved_agent_name(&self, name: &str) -> bool {
        RESERVED_AGENT_NAMES.contains(&name)
            || name == ASK_USER
            || name == tools::MANAGE_CONVERSATION
            || tools::builtin_tool_specs().iter().any(|t| t.name == name)
            || self.setup.runtime.tool_servers.contains_key(name)
    }
}

impl Handler<RegisterClientAgent> for Conversation {
    type Result = RpcResult<String>;

    /// Checks, in TypeAgent's order: the client is joined; the name is not its own agent
    /// already (`Client agent '<n>' is already registered…`), nor built in, nor another
    /// client's (`App agent '<n>' already exists`); the conversation has room.
    fn handle(&mut self, msg: RegisterClientAgent, ctx: &mut Self::Context) -> RpcResult<String> {
        let id = self.setup.id;
        if !self.clients.contains_key(&msg.connection_id) {
            return Err(RpcError::NotJoined(id.to_string()));
        }
        let name = msg.spec.name.clone();
        let taken = (self.client_agents.agents.get(&name))
            .or_else(|| self.client_agents.starting.get(&name));
        if let Some(r) = taken {
            return Err(if r.connection_id == msg.connection_id {
                RpcError::ClientAgentAlreadyRegistered {
                    name,
                    conversation: id.to_string(),
                }
            } else {
                RpcError::AppAgentExists(name)
            });
        }
        if self.reserved_agent_name(&name) {
            return Err(RpcError::AppAgentExists(name));
        }
        if self.client_agents.agents.len() + self.client_agents.starting.len()
            >= MAX_AGENTS_PER_CONVERSATION
        {
            return Err(RpcError::TooManyClientAgentsInConversation {
                conversation: id.to_string(),
                limit: MAX_AGENTS_PER_CONVERSATION,
            });
        }
        log::info!(
            "conversation {id} connection {}: client agent {name} accepted ({} actions), starting",
            msg.connection_id,
            msg.spec.actions.len()
        );
        if self.client_agents.conversation.is_none() {
            self.client_agents.conversation = Some(ctx.address().downgrade());
        }
        let session_context_id = uuid::Uuid::new_v4().to_string();
        self.client_agents.starting.insert(
            name,
            Registered {
                connection_id: msg.connection_id,
                spec: Arc::new(msg.spec),
                host: msg.host,
                next_action_context: Arc::default(),
                session: Arc::new(SessionContext::new(session_context_id.clone())),
                threads: AgentThreads::default(),
            },
        );
        Ok(session_context_id)
    }
}

impl Handler<ActivateClientAgent> for Conversation {
    type Result = RpcResult<()>;

    /// Moves the starting agent to the registered ones, with its `agentContextId`.
    fn handle(&mut self, msg: ActivateClientAgent, _ctx: &mut Self::Context) -> RpcResult<()> {
        let id = self.setup.id;
        if self.stopping {
            return Err(RpcError::ConversationNotFound(id.to_string()));
        }
        if !self.clients.contains_key(&msg.connection_id) {
            return Err(RpcError::NotJoined(id.to_string()));
        }
        let starting = &mut self.client_agents.starting;
        let ours = starting
            .get(&msg.name)
            .is_some_and(|r| r.host.token == msg.token && r.connection_id == msg.connection_id);
        let Some(mut r) = ours.then(|| starting.remove(&msg.name)).flatten() else {
            return Err(RpcError::Message(format!(
                "Client agent '{}' was unregistered before its registration completed",
                msg.name
            )));
        };
        r.session = Arc::new(SessionContext {
            id: r.session.id.clone(),
            agent_context_id: msg.agent_context_id,
        });
        log::info!(
            "conversation {id} connection {}: client agent {} registered",
            msg.connection_id,
            msg.name
        );
        self.client_agents.agents.insert(msg.name, r);
        Ok(())
    }
}

impl Handler<AbandonClientAgent> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: AbandonClientAgent, _ctx: &mut Self::Context) {
        let starting = &mut self.client_agents.starting;
        if starting
            .get(&msg.name)
            .is_some_and(|r| r.host.token == msg.token)
        {
            starting.remove(&msg.name);
            log::info!(
                "conversation {}: client agent {} not registered (it failed to start)",
                self.setup.id,
                msg.name
            );
        }
    }
}

impl Handler<UnregisterClientAgent> for Conversation {
    type Result = RpcResult<()>;

    /// Removes the agent whoever registered it; another client's connection is told
    /// ([`ClientAgentRemoved`]), the asker's own forgets it when this answers.
    fn handle(&mut self, msg: UnregisterClientAgent, _ctx: &mut Self::Context) -> RpcResult<()> {
        let id = self.setup.id;
        if !self.clients.contains_key(&msg.connection_id) {
            return Err(RpcError::NotJoined(id.to_string()));
        }
        let removed = (self.client_agents.agents.remove(&msg.name))
            .or_else(|| self.client_agents.starting.remove(&msg.name));
        let Some(r) = removed else {
            log::debug!(
                "conversation {id} connection {}: unregister of {}: not registered",
                msg.connection_id,
                msg.name
            );
            return Ok(());
        };
        log::info!(
            "conversation {id} connection {}: client agent {} of connection {} unregistered",
            msg.connection_id,
            msg.name,
            r.connection_id
        );
        self.cancel_agent_questions(&msg.name);
        let token = r.host.token;
        self.forget_agent_choices(|c, _| c.agent == msg.name && c.token == token);
        if r.connection_id != msg.connection_id {
            r.host.removed.do_send(ClientAgentRemoved {
                conversation_id: id,
                name: msg.name,
                token: r.host.token,
            });
        }
        Ok(())
    }
}
