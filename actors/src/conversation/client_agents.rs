//! The conversation's client agents: who registered which agent, the checks a registration
//! passes (exact texts of the reference), the tools each agent adds to the conversation's
//! turns, and the list `getStatus` and `@system config agents` show.
//!
//! Who talks to it: the transport's connections ([`RegisterClientAgent`],
//! [`UnregisterClientAgent`]); the conversation itself drops a client's agents when the
//! client leaves (leave, `close`, socket close, slow consumer). A tool call does not come
//! back here: the turn's [`ClientAgentTools`] sends [`InvokeClientAgent`] straight to the
//! hosting connection, which sends the `executeAction` invoke and matches its answer. Each
//! registration carries a token, so a notice or call meant for an earlier registration of
//! the same name is recognised and refused by the connection.
//!
//! A registration changes the tools of the *next* turn: a running turn keeps the tools it
//! started with (a call to an agent unregistered meanwhile fails with a clear error).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::Conversation;
use crate::agent::client_agent::{
    action_result_text, execute_action_args, CallError, ClientAgentSpec, EXECUTE_ACTION,
    MAX_AGENTS_PER_CONVERSATION, RESERVED_AGENT_NAMES,
};
use crate::agent::turn::{ToolCallContext, ToolOutput, ToolServer, ASK_USER};
use crate::agent::{tools, LocalBoxFuture, ToolSpec};
use crate::ids::{ConnectionId, ConversationId};
use crate::protocol::{RpcError, RpcResult};

/// Where a client agent's calls go: its socket's connection, and the registration's token.
#[derive(Clone)]
pub struct ClientAgentHost {
    /// Set by the connection for this registration; calls and notices carry it back.
    pub token: u64,
    /// The hosting connection, which sends the `executeAction` invoke.
    pub invoke: Recipient<InvokeClientAgent>,
    /// The hosting connection, told when another client unregisters its agent.
    pub removed: Recipient<ClientAgentRemoved>,
}

/// Run an action on a client agent: sent by a turn's tool call to the hosting connection,
/// which answers on `reply` (the `ActionResult`, or why there is none). Bounded: a turn
/// awaits each tool call, so one is outstanding per conversation at a time.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InvokeClientAgent {
    /// The agent (its channel is `agent:<name>`).
    pub name: String,
    /// The registration the call was made for.
    pub token: u64,
    /// The agent-rpc method (`executeAction`).
    pub method: &'static str,
    /// The invoke's arguments.
    pub args: Value,
    /// The answer: `invokeResult.result`, or why there is none.
    pub reply: oneshot::Sender<Result<Option<Value>, CallError>>,
}

/// Another client unregistered this connection's agent (TypeAgent lets any client of the
/// conversation do so: that is how Android reclaims a name its dead socket still holds).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClientAgentRemoved {
    /// The conversation it was registered in.
    pub conversation_id: ConversationId,
    /// The agent.
    pub name: String,
    /// The registration removed (an earlier or later one of the same name is not touched).
    pub token: u64,
}

/// `registerClientAgent`, after the connection resolved the conversation and read the
/// manifest.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct RegisterClientAgent {
    /// The registering client.
    pub connection_id: ConnectionId,
    /// What the agent offers.
    pub spec: ClientAgentSpec,
    /// Where its calls go.
    pub host: ClientAgentHost,
}

/// `unregisterClientAgent`: removes the agent of that name, whichever client registered it
/// (as TypeAgent does); nothing when there is none.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct UnregisterClientAgent {
    /// The asking client.
    pub connection_id: ConnectionId,
    /// The agent.
    pub name: String,
}

/// One registered agent.
struct Registered {
    /// The client that registered it; it goes when that client leaves.
    connection_id: ConnectionId,
    /// What it offers.
    spec: Arc<ClientAgentSpec>,
    /// Where its calls go.
    host: ClientAgentHost,
    /// `actionContextId`s of its calls: distinct for the registration's lifetime.
    next_action_context: Arc<AtomicU64>,
}

/// The conversation's client agents by name.
#[derive(Default)]
pub(super) struct ClientAgents {
    /// Registered agents by name (names are unique in a conversation).
    agents: BTreeMap<String, Registered>,
}

/// A client agent as `getStatus` and `@system config agents` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientAgentInfo {
    /// The agent's name.
    pub name: String,
    /// The registering client's connection id.
    pub connection_id: String,
    /// The manifest's `emojiChar`.
    pub emoji: String,
    /// The manifest's `description`.
    pub description: String,
    /// False when its `agentInterface` lacks `executeAction` (its actions are not offered).
    pub executes_actions: bool,
    /// Its actions, as offered (tool `<name>__<action>`).
    pub actions: Vec<ClientActionInfo>,
}

/// One action of a [`ClientAgentInfo`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientActionInfo {
    /// `actionName`.
    pub name: String,
    /// The comment above its type.
    pub description: String,
}

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
                        description: a.description.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The `AppAgentStatus` entries of the client agents (`getStatus`).
    pub(super) fn client_agent_statuses(&self) -> Vec<Value> {
        self.client_agents
            .agents
            .values()
            .map(|r| {
                json!({"emoji": r.spec.emoji, "name": r.spec.name, "lastUsed": false,
                    "priority": false, "request": false, "active": r.spec.executes_actions})
            })
            .collect()
    }

    /// The tool servers of a turn: the `--tool-server`s and every client agent.
    pub(super) fn tool_servers(&self) -> HashMap<String, Arc<dyn ToolServer>> {
        let mut servers = self.setup.runtime.tool_servers.clone();
        for (name, r) in &self.client_agents.agents {
            let tools = ClientAgentTools {
                spec: r.spec.clone(),
                host: r.host.clone(),
                next_action_context: r.next_action_context.clone(),
            };
            servers.insert(name.clone(), Arc::new(tools));
        }
        servers
    }

    /// A client left: its agents go (its connection forgets them itself).
    pub(super) fn drop_client_agents(&mut self, connection_id: ConnectionId) {
        let id = self.setup.id;
        self.client_agents.agents.retain(|name, r| {
            let keep = r.connection_id != connection_id;
            if !keep {
                log::info!("conversation {id} connection {connection_id}: client agent {name} unregistered (client left)");
            }
            keep
        });
    }

    /// Whether `name` is taken by something that is not a client agent: a built-in agent or
    /// tool, or a `--tool-server` prefix.
    fn reserved_agent_name(&self, name: &str) -> bool {
        RESERVED_AGENT_NAMES.contains(&name)
            || name == ASK_USER
            || tools::builtin_tool_specs().iter().any(|t| t.name == name)
            || self.setup.runtime.tool_servers.contains_key(name)
    }
}

impl Handler<RegisterClientAgent> for Conversation {
    type Result = RpcResult<()>;

    /// Checks, in TypeAgent's order: the client is joined; the name is not its own agent
    /// already (`Client agent '<n>' is already registered…`), nor built in, nor another
    /// client's (`App agent '<n>' already exists`); the conversation has room.
    fn handle(&mut self, msg: RegisterClientAgent, _ctx: &mut Self::Context) -> RpcResult<()> {
        let id = self.setup.id;
        if !self.clients.contains_key(&msg.connection_id) {
            return Err(RpcError::NotJoined(id.to_string()));
        }
        let name = msg.spec.name.clone();
        if let Some(r) = self.client_agents.agents.get(&name) {
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
        if self.client_agents.agents.len() >= MAX_AGENTS_PER_CONVERSATION {
            return Err(RpcError::TooManyClientAgentsInConversation {
                conversation: id.to_string(),
                limit: MAX_AGENTS_PER_CONVERSATION,
            });
        }
        log::info!(
            "conversation {id} connection {}: client agent {name} registered ({} actions)",
            msg.connection_id,
            msg.spec.actions.len()
        );
        self.client_agents.agents.insert(
            name,
            Registered {
                connection_id: msg.connection_id,
                spec: Arc::new(msg.spec),
                host: msg.host,
                next_action_context: Arc::default(),
            },
        );
        Ok(())
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
        let Some(r) = self.client_agents.agents.remove(&msg.name) else {
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

/// A client agent's actions as a turn's tool server: a call becomes an `executeAction`
/// invoke through the hosting connection, its `ActionResult` the tool result.
struct ClientAgentTools {
    /// What the agent offers.
    spec: Arc<ClientAgentSpec>,
    /// Where calls go.
    host: ClientAgentHost,
    /// The registration's `actionContextId` counter.
    next_action_context: Arc<AtomicU64>,
}

impl ToolServer for ClientAgentTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.spec.tool_specs()
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        _context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput> {
        let name = self.spec.name.clone();
        let Some(action) = self.spec.actions.iter().find(|a| a.name == tool) else {
            let e = format!("client agent '{name}' has no action '{tool}'");
            return Box::pin(async move { ToolOutput::error(e) });
        };
        if !input.is_object() {
            let e = format!("the input of {name}__{tool} must be a JSON object");
            return Box::pin(async move { ToolOutput::error(e) });
        }
        let context = self.next_action_context.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.host.invoke.do_send(InvokeClientAgent {
            name: name.clone(),
            token: self.host.token,
            method: EXECUTE_ACTION,
            args: execute_action_args(action, input, context),
            reply,
        });
        Box::pin(async move {
            let result = match answer.await {
                Ok(Ok(result)) => action_result_text(result.as_ref()),
                Ok(Err(e)) => Err(e.to_string()),
                // The connection stopped before it took or answered the call.
                Err(_) => Err(CallError::Disconnected(name).to_string()),
            };
            result.into()
        })
    }
}
