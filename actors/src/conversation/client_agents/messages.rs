//! The client agents' messages and what they carry: what a connection sends the
//! conversation (`RegisterClientAgent`, `ActivateClientAgent`, `AbandonClientAgent`,
//! `UnregisterClientAgent`, `ClientAgentOutput` with its `AgentCall`), what the conversation
//! and its turns send the hosting connection (`InvokeClientAgent`, `CloseClientAgentCall`,
//! `ClientAgentRemoved`, with `OpenAction` and the `AgentAnswer` on its `AgentReply`), where a
//! registration's calls go (`ClientAgentHost`), and the list `getStatus` and `@system config
//! agents` show (`ClientAgentInfo`).
//!
//! Who talks to it: the transport's connections (`src/transport/hosted_agents.rs`) and the
//! rest of this module; all of it is re-exported by `conversation`.

use actix::prelude::*;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::agent::client_agent::{CallError, ClientAgentSpec};
use crate::conversation::agent_context::AgentThreadCall;
use crate::conversation::routing::DisplayMode;
use crate::ids::{ConnectionId, ConversationId};
use crate::protocol::{Args, RpcResult};

/// Where a client agent's calls go: its socket's connection, and the registration's token.
#[derive(Clone)]
pub struct ClientAgentHost {
    /// Set by the connection for this registration; calls and notices carry it back.
    pub token: u64,
    /// The hosting connection, which sends the invokes.
    pub invoke: Recipient<InvokeClientAgent>,
    /// The hosting connection, told when another client unregisters its agent.
    pub removed: Recipient<ClientAgentRemoved>,
    /// The hosting connection, told when a call's waiting side went away (cancelled turn).
    pub close: Recipient<CloseClientAgentCall>,
}

/// The action context an invoke opens (`executeAction`, `executeCommand`): while the invoke
/// waits, the agent's calls naming `action_context_id` are routed to `turn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAction {
    /// Its `actionContextId`.
    pub action_context_id: u64,
    /// The conversation's turn that made the call (its output goes to that request).
    pub turn: u64,
}

/// The client's answer to an invoke.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentAnswer {
    /// `invokeResult.result` (`None` when absent or `null`).
    pub result: Option<Value>,
    /// The `result` as the client wrote it (when the invoke asked for it): `getCommands`
    /// answers are read from it, as the order of an object's keys declares positional
    /// arguments and a parsed `Value` sorts keys.
    pub text: Option<String>,
}

/// Where an invoke's answer goes.
pub type AgentReply = oneshot::Sender<Result<AgentAnswer, CallError>>;

/// Invoke a method on a client agent: sent by a turn's tool call, a command or a completion
/// to the hosting connection, which answers on `reply` (the answer, or why there is none).
/// Bounded by the connection (`MAX_PENDING_INVOKES_PER_CONNECTION`, `--client-agent-timeout`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct InvokeClientAgent {
    /// The agent (its channel is `agent:<name>`).
    pub name: String,
    /// The registration the call was made for.
    pub token: u64,
    /// The agent-rpc method (`executeAction`, `executeCommand`, `getCommands`,
    /// `getCommandCompletion`).
    pub method: &'static str,
    /// The invoke's arguments.
    pub args: Value,
    /// The action context the invoke opens, if any.
    pub action: Option<OpenAction>,
    /// Keep the answer's JSON text ([`AgentAnswer::text`]).
    pub keep_text: bool,
    /// The answer.
    pub reply: AgentReply,
}

/// The waiting side of an invoke went away before its answer (the turn was cancelled): the
/// connection stops waiting, drops the late answer and, for `executeAction`, sends the call
/// `cancelAction {actionContextId}` on the agent's channel.
#[derive(Message, Debug, Clone, PartialEq)]
#[rtype(result = "()")]
pub struct CloseClientAgentCall {
    /// The agent.
    pub name: String,
    /// The registration.
    pub token: u64,
    /// The call's action context.
    pub action_context_id: u64,
    /// Send `cancelAction` (for `executeAction` only, as TypeAgent does).
    pub cancel_action: bool,
}

/// A call a client agent made on its `agent:<name>` channel, read by its connection and
/// routed here: `turn` is the turn whose action context it named (`None` for `notify`, which
/// names the session context).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ClientAgentOutput {
    /// The hosting client's connection id in this conversation.
    pub connection_id: ConnectionId,
    /// The agent.
    pub name: String,
    /// The registration.
    pub token: u64,
    /// The turn of the open action context the call named.
    pub turn: Option<u64>,
    /// What the agent asks for.
    pub call: AgentCall,
}

/// One of the agent's calls (TypeAgent's `AgentContextCallFunctions`).
#[derive(Debug, Clone, PartialEq)]
pub enum AgentCall {
    /// `agentThreadBegin` / `agentThreadSetDisplay` / `agentThreadAppendDisplay` /
    /// `agentThreadComplete`: output of no request (`agent_context.rs`).
    Thread(AgentThreadCall),
    /// `notify(contextId, event, message, notificationId?)`: a notification to every client.
    Notify {
        /// `AppAgentEvent` (`error`, `warning`, `info`, `debug`, `toast`, `inline`).
        event: String,
        /// A string or `DisplayContent`.
        message: Value,
        /// The agent's id for it, if any.
        notification_id: Option<String>,
    },
    /// `setDisplay({actionContextId, content})`: replaces the request's display.
    SetDisplay {
        /// `DisplayContent`.
        content: Value,
    },
    /// `appendDisplay({actionContextId, content, mode})`.
    AppendDisplay {
        /// `DisplayContent`.
        content: Value,
        /// `mode` (absent: `inline`, as TypeAgent's default).
        mode: DisplayMode,
    },
    /// `takeAction({actionContextId, action, data?})`: for the requesting client only.
    TakeAction {
        /// `ClientAction` (`show-camera`, `open-folder`, …).
        action: String,
        /// Its data (`null` when absent).
        data: Value,
    },
    /// `appendDiagnosticData({actionContextId, data})`.
    AppendDiagnosticData {
        /// Anything.
        data: Value,
    },
}

impl AgentCall {
    /// Reads a call on an agent's channel: the call and the `actionContextId` it names
    /// (`None` for `notify` and the thread calls). The error says why it is ignored.
    pub fn parse(method: &str, args: &Args) -> Result<(AgentCall, Option<u64>), String> {
        if let Some(thread) = AgentThreadCall::parse(method, args) {
            return thread.map(|call| (AgentCall::Thread(call), None));
        }
        if method == "notify" {
            let event = args
                .get(1)
                .and_then(Value::as_str)
                .ok_or("notify: event (argument 2) is not a string")?;
            let message = args
                .get(2)
                .cloned()
                .ok_or("notify: message (argument 3) is missing")?;
            let notification_id = match args.get(3) {
                None => None,
                Some(Value::String(id)) => Some(id.clone()),
                Some(_) => return Err("notify: notificationId (argument 4) is not a string".into()),
            };
            let call = AgentCall::Notify {
                event: event.to_string(),
                message,
                notification_id,
            };
            return Ok((call, None));
        }
        let param = args
            .get(0)
            .and_then(Value::as_object)
            .ok_or_else(|| format!("{method}: argument 1 is not an object"))?;
        let context = param
            .get("actionContextId")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{method}: actionContextId is not a number"))?;
        let field = |key: &str| param.get(key).cloned().filter(|v| !v.is_null());
        let content = || field("content").ok_or_else(|| format!("{method}: content is missing"));
        let call = match method {
            "setDisplay" => AgentCall::SetDisplay {
                content: content()?,
            },
            "appendDisplay" => {
                let mode = match param.get("mode").and_then(Value::as_str) {
                    None => DisplayMode::Inline,
                    Some(mode) => DisplayMode::parse(mode).ok_or_else(|| {
                        format!("appendDisplay: mode \"{mode}\" is not a display mode")
                    })?,
                };
                AgentCall::AppendDisplay {
                    content: content()?,
                    mode,
                }
            }
            "takeAction" => AgentCall::TakeAction {
                action: param
                    .get("action")
                    .and_then(Value::as_str)
                    .ok_or("takeAction: action is not a string")?
                    .to_string(),
                data: field("data").unwrap_or(Value::Null),
            },
            "appendDiagnosticData" => AgentCall::AppendDiagnosticData {
                data: field("data").unwrap_or(Value::Null),
            },
            other => return Err(format!("{other}: not supported by Roundtable")),
        };
        Ok((call, Some(context)))
    }
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
/// manifest: the conversation checks it and takes the name; the answer is the
/// registration's `sessionContextId`. The agent is *starting* until the connection sends
/// [`ActivateClientAgent`] (or [`AbandonClientAgent`]).
#[derive(Message)]
#[rtype(result = "RpcResult<String>")]
pub struct RegisterClientAgent {
    /// The registering client.
    pub connection_id: ConnectionId,
    /// What the agent offers.
    pub spec: ClientAgentSpec,
    /// Where its calls go.
    pub host: ClientAgentHost,
}

/// The hosting connection started a registered agent (its `initializeAgentContext`
/// answered `agent_context_id`, its schemas were enabled): turns, commands and queries see
/// it from now on. Fails when it is no longer starting (its client left, another client
/// unregistered it, the conversation stops).
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct ActivateClientAgent {
    /// The registering client.
    pub connection_id: ConnectionId,
    /// The agent.
    pub name: String,
    /// The registration.
    pub token: u64,
    /// `agentContextId` for every later `ContextParams` (`None`: absent).
    pub agent_context_id: Option<Value>,
}

/// The hosting connection gave up a starting agent (its `initializeAgentContext` failed):
/// its name is free again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbandonClientAgent {
    /// The agent.
    pub name: String,
    /// The registration.
    pub token: u64,
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
    /// The schema it belongs to: the agent's name, or `<agent>.<sub>` (`getAgentSchemas`
    /// groups actions by it).
    pub schema_name: String,
    /// The comment above its type.
    pub description: String,
}
