//! The conversation's client agents: who registered which agent, the checks a registration
//! passes (exact texts of the reference), the tools each agent adds to the conversation's
//! turns, its `@<agent> …` commands, the calls it makes on its channel while it runs, and the
//! list `getStatus` and `@system config agents` show.
//!
//! Who talks to it: the transport's connections ([`RegisterClientAgent`],
//! [`UnregisterClientAgent`], and [`ClientAgentOutput`] for the agent's calls: `notify`,
//! `setDisplay`, `appendDisplay`, `takeAction`, `appendDiagnosticData` and the `agentThread*`
//! calls, whose threads live in `agent_context.rs`); the conversation
//! itself drops a client's agents when the client leaves (leave, `close`, socket close, slow
//! consumer). An invoke does not come back here: the turn's [`ClientAgentTools`] (or a
//! command, or a completion) sends [`InvokeClientAgent`] straight to the hosting connection,
//! which sends the invoke and matches its answer. Each registration carries a token, so a
//! notice or call meant for an earlier registration of the same name is recognised and
//! refused by the connection.
//!
//! Session context: each registration is one TypeAgent session context, with its own
//! `sessionContextId` (a UUID minted at registration, sent with every invoke; a new
//! registration of the same name gets a new one), `contextId` 0 and, when the agent lists
//! `initializeAgentContext`, the `agentContextId` it answered. A registration is *starting*
//! (its name taken, its calls shown, but no turn, command or query sees it) while its
//! connection runs the lifecycle's startup invokes, until [`ActivateClientAgent`]; the
//! connection also runs the teardown invokes when the agent goes. Action contexts
//! (`actionContextId`) are numbered per registration; one is open while its `executeAction` /
//! `executeCommand` waits, and the agent's calls naming it reach the turn that made it.
//!
//! Cancellation: a call's waiting side holds a [`CallGuard`]; when the turn is cancelled
//! (`cancelCommand`, `interrupt`, a superseding submit, no clients) its future is dropped,
//! the guard tells the connection ([`CloseClientAgentCall`]), which stops waiting at once,
//! sends `cancelAction {actionContextId}` for an `executeAction` (TypeAgent sends it only for
//! actions) and drops the late answer.
//!
//! A registration changes the tools of the *next* turn: a running turn keeps the tools it
//! started with (a call to an agent unregistered meanwhile fails with a clear error).
//!
//! What a result asks beyond its display (TypeAgent's `emitActionResult`, for an action's
//! `executeAction`, a command's `executeCommand` and a choice's `handleChoice`): its
//! `dynamicDisplayId` becomes `setDynamicDisplay` to every client, its `pendingChoice` a
//! `requestChoice` / `requestForm` to the request's originator ([`AgentChoice`], kept with
//! the conversation's other choices, `interactions.rs`). The originator's
//! `respondToChoice` then runs the agent's `handleChoice` in a fresh action context: the
//! agent's calls naming it, and its result, show under the choice's request (which has long
//! completed), and `respondToChoice` answers `{lastError}` when something shown was an error,
//! else void. Unlike TypeAgent, which runs it under its command lock, the `handleChoice` runs
//! beside the queue (the request running meanwhile goes on). The dispatcher's
//! `getDynamicDisplay`, `getTemplateSchema` and `getTemplateCompletion` are forwarded to the
//! agent they name when it implements them ([`AgentQuery`]).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::agent_context::{AgentThreadCall, AgentThreads};
use super::queue::Request;
use super::routing::{Audience, DisplayMode};
use super::Conversation;
use crate::agent::client_agent::choice::{
    dynamic_display_args, handle_choice_args, AskedChoice, ExpectedAnswer,
};
use crate::agent::client_agent::command::{
    command_usage, next_word, parse_descriptors, parse_params, resolve, table_usage, trim_start_js,
    Descriptors,
};
use crate::agent::client_agent::{
    action_result_text, execute_action_args, execute_command_args, forwarded_args, CallError,
    ClientAgentSpec, SessionContext, EXECUTE_ACTION, EXECUTE_COMMAND, GET_COMMANDS,
    GET_COMMAND_COMPLETION, GET_DYNAMIC_DISPLAY, GET_TEMPLATE_COMPLETION, GET_TEMPLATE_SCHEMA,
    HANDLE_CHOICE, MAX_AGENTS_PER_CONVERSATION, RESERVED_AGENT_NAMES,
};
use crate::agent::turn::{ToolCallContext, ToolOutput, ToolServer, ASK_USER};
use crate::agent::{tools, LocalBoxFuture, ToolSpec};
use crate::client::OutboundCall;
use crate::ids::{ConnectionId, ConversationId};
use crate::protocol::{Args, RpcError, RpcResult};

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
    /// Its session context: the `sessionContextId` minted at registration and the
    /// `agentContextId` its `initializeAgentContext` answered.
    session: Arc<SessionContext>,
    /// Its open agent threads (bounded).
    threads: AgentThreads,
}

impl Registered {
    /// Its `@` commands' side.
    fn command_host(&self) -> ClientCommandHost {
        ClientCommandHost {
            spec: self.spec.clone(),
            host: self.host.clone(),
            next_action_context: self.next_action_context.clone(),
            session: self.session.clone(),
        }
    }
}

/// The conversation's client agents by name.
#[derive(Default)]
pub(super) struct ClientAgents {
    /// Registered agents by name (names are unique in a conversation).
    agents: BTreeMap<String, Registered>,
    /// Agents accepted but still starting (their connection runs `initializeAgentContext`,
    /// the `updateAgentContext`s and `startBackgroundTasks` before [`ActivateClientAgent`]):
    /// their names are taken and count toward the bound, their calls (`notify`) are shown,
    /// but no turn, command or query sees them yet.
    starting: BTreeMap<String, Registered>,
    /// The conversation itself, set at the first registration: a turn's client agent tools
    /// report what an action's result asks beyond its text ([`ClientActionDone`]). Weak, so
    /// the actor holds no address of its own.
    conversation: Option<WeakAddr<Conversation>>,
    /// The `handleChoice` invokes waiting for their agents, by the turn number each was
    /// given: the agent's calls naming its action context show under its request. One per
    /// answered choice; each ends within `--client-agent-timeout` (or when its agent goes).
    choice_calls: HashMap<u64, ChoiceCall>,
    /// Agent choices asked so far ([`AgentChoice::asked`]).
    choices_asked: u64,
}

/// A client agent's choice waiting for `respondToChoice` (TypeAgent's `pendingChoiceRoutes`
/// entry: the agent, the request, the action's index), with the registration it was asked
/// for and what its answer must be.
pub(super) struct AgentChoice {
    /// The agent.
    agent: String,
    /// Its registration (a later registration of the name is another agent).
    token: u64,
    /// The request whose result asked it, without its text, attachments and options: the
    /// agent's `handleChoice` shows under it.
    request: Request,
    /// The index of the action whose result asked it (0 for a command, as TypeAgent).
    action_index: usize,
    /// What the answer must be.
    expects: ExpectedAnswer,
    /// Its number among the conversation's agent choices: the oldest goes first past the
    /// bound, and the time-out of an earlier choice of the same id does not touch it.
    pub(super) asked: u64,
}

impl AgentChoice {
    /// Checks a `respondToChoice` response against what was asked.
    pub(super) fn check(&self, response: &Value) -> Result<(), String> {
        self.expects.check(response)
    }
}

/// A `handleChoice` waiting for its agent.
struct ChoiceCall {
    /// The agent.
    agent: String,
    /// Its registration.
    token: u64,
    /// The choice's request: what the agent shows goes under it.
    request: Request,
    /// The choice's action index (a chained choice or dynamic display names it).
    action_index: usize,
    /// The text of the last error shown meanwhile (TypeAgent's `CommandResult.lastError`).
    last_error: Option<String>,
}

/// A `dispatcher:<id>` method TypeAgent forwards to the app agent it names (its
/// `dispatcher.ts`), with its arguments.
pub(super) enum AgentQuery {
    /// `getDynamicDisplay` → the agent's `getDynamicDisplay({…, type, displayId})`.
    DynamicDisplay {
        /// `DisplayType` (`html`, `markdown`, …).
        display_type: String,
        /// The `dynamicDisplayId` of an earlier result.
        display_id: String,
    },
    /// `getTemplateSchema` → the agent's `getTemplateSchema({…, templateName, data})`.
    TemplateSchema {
        /// The template.
        template_name: String,
        /// The client's data (left out when it sent none).
        data: Option<Value>,
    },
    /// `getTemplateCompletion` → `getTemplateCompletion({…, templateName, data,
    /// propertyName})`.
    TemplateCompletion {
        /// The template.
        template_name: String,
        /// The client's data (left out when it sent none).
        data: Option<Value>,
        /// The property completed.
        property_name: String,
    },
}

impl AgentQuery {
    /// The agent-rpc method, whether `spec` implements it, and TypeAgent's text when not.
    fn method(&self, spec: &ClientAgentSpec) -> (&'static str, bool) {
        match self {
            AgentQuery::DynamicDisplay { .. } => (GET_DYNAMIC_DISPLAY, spec.dynamic_display),
            AgentQuery::TemplateSchema { .. } => (GET_TEMPLATE_SCHEMA, spec.template_schema),
            AgentQuery::TemplateCompletion { .. } => {
                (GET_TEMPLATE_COMPLETION, spec.template_completion)
            }
        }
    }

    /// TypeAgent's error when `agent` does not implement the method.
    fn unsupported(&self, agent: &str) -> RpcError {
        RpcError::Message(match self {
            AgentQuery::DynamicDisplay { .. } => {
                format!("Dynamic display not supported by '{agent}'")
            }
            _ => format!("Template schema not supported by '{agent}'"),
        })
    }

    /// The invoke's own fields (beside the session context's).
    fn fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        let mut template = |name: String, data: Option<Value>| {
            fields.insert("templateName".into(), name.into());
            if let Some(data) = data {
                fields.insert("data".into(), data);
            }
        };
        match self {
            AgentQuery::DynamicDisplay {
                display_type,
                display_id,
            } => {
                fields.insert("type".into(), display_type.into());
                fields.insert("displayId".into(), display_id.into());
            }
            AgentQuery::TemplateSchema {
                template_name,
                data,
            } => template(template_name, data),
            AgentQuery::TemplateCompletion {
                template_name,
                data,
                property_name,
            } => {
                template(template_name, data);
                fields.insert("propertyName".into(), property_name.into());
            }
        }
        fields
    }
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

    /// The tool servers of the running turn: the `--tool-server`s and every client agent.
    pub(super) fn tool_servers(&self) -> HashMap<String, Arc<dyn ToolServer>> {
        let mut servers = self.setup.runtime.tool_servers.clone();
        let turn = self.running.as_ref().map_or(0, |r| r.turn);
        for (name, r) in &self.client_agents.agents {
            let tools = ClientAgentTools {
                spec: r.spec.clone(),
                host: r.host.clone(),
                next_action_context: r.next_action_context.clone(),
                session: r.session.clone(),
                turn,
                conversation: self.client_agents.conversation.clone(),
            };
            servers.insert(name.clone(), Arc::new(tools));
        }
        servers
    }

    /// Every client agent as `@` commands see it (completion lists them under `Agent
    /// Names` when they run commands).
    pub(super) fn command_hosts(&self) -> Vec<ClientCommandHost> {
        self.client_agents
            .agents
            .values()
            .map(Registered::command_host)
            .collect()
    }

    /// The command-running client agent `text` names (`@<agent> …`), if any.
    pub(super) fn client_command_host(&self, text: &str) -> Option<ClientCommandHost> {
        let rest = trim_start_js(text).strip_prefix('@')?;
        let (start, end) = next_word(rest, 0).filter(|(start, _)| *start == 0)?;
        let r = self.client_agents.agents.get(&rest[start..end])?;
        r.spec.executes_commands.then(|| r.command_host())
    }

    /// Runs `@<agent> <sub…> <params>` (`text`) for the running request, as TypeAgent's
    /// `processCommandNoLock` does: the agent's command tree (`getCommands`), the command and
    /// its parameters resolved and parsed (errors shown as `ERROR: <message>`), then
    /// `setDisplayInfo` and the `executeCommand` invoke; its `ActionResult` is shown and the
    /// request completes. Cancelling the request stops the wait (no `cancelAction`: TypeAgent
    /// sends it for actions only).
    pub(super) fn start_client_command(
        &mut self,
        turn: u64,
        host: ClientCommandHost,
        text: String,
        ctx: &mut Context<Self>,
    ) {
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let outcome = run_client_command(&host, &text, turn, &addr).await;
                let agent = host.name().to_string();
                addr.do_send(ClientCommandEvent::Done {
                    turn,
                    agent,
                    outcome,
                });
            },
            ctx,
        );
    }

    /// The `IAgentMessage` extra fields of a client agent's output: its name as the source,
    /// its emoji as the icon.
    fn agent_source(name: &str, emoji: &str) -> Value {
        let mut extra = json!({"source": name});
        if !emoji.is_empty() {
            extra["sourceIcon"] = json!(emoji);
        }
        extra
    }

    /// The running request, if it is `turn`'s; or the request of the choice whose
    /// `handleChoice` was given `turn`.
    fn request_of(&self, turn: u64) -> Option<Rc<Request>> {
        self.running
            .as_ref()
            .filter(|r| r.turn == turn)
            .map(|r| r.request.clone())
            .or_else(|| {
                let call = self.client_agents.choice_calls.get(&turn)?;
                Some(Rc::new(call.request.clone()))
            })
    }

    /// A client agent's call, for the running request it names (see [`AgentCall`]).
    fn agent_call(&mut self, name: &str, emoji: &str, turn: Option<u64>, call: AgentCall) {
        let id = self.setup.id;
        if let AgentCall::Notify {
            event,
            message,
            notification_id,
        } = call
        {
            log::debug!("conversation {id}: client agent {name} notifies ({event})");
            let args = json!([notification_id, event, message, name, null, null]);
            return self.broadcast("notify", args, None);
        }
        if let AgentCall::Thread(call) = call {
            let shown = self
                .client_agents
                .agents
                .get_mut(name)
                .and_then(|r| r.threads.apply(name, emoji, call));
            if let Some(shown) = shown {
                self.show_agent_thread(shown);
            }
            return;
        }
        let Some(request) = turn.and_then(|t| self.request_of(t)) else {
            log::debug!(
                "conversation {id}: {call:?} of client agent {name} for a finished turn ignored"
            );
            return;
        };
        let extra = Self::agent_source(name, emoji);
        self.note_choice_error(turn, &call);
        match call {
            AgentCall::Notify { .. } | AgentCall::Thread(_) => unreachable!("handled above"),
            AgentCall::SetDisplay { content } => {
                let mut message = json!({"message": content, "requestId": request.id_obj()});
                if let (Some(m), Value::Object(extra)) = (message.as_object_mut(), extra) {
                    m.extend(extra);
                }
                self.log_entry(json!({"type": "set-display", "message": message}));
                self.broadcast("setDisplay", json!([message]), Some(request.origin));
            }
            AgentCall::AppendDisplay { content, mode } => {
                self.display(&request, content, Some(extra), mode);
            }
            AgentCall::TakeAction { action, data } => {
                let call =
                    OutboundCall::new("takeAction", &json!([request.id_obj(), action, data]));
                self.emit(call, &Audience::Only(request.origin));
            }
            AgentCall::AppendDiagnosticData { data } => {
                let args = json!([request.id_obj(), data]);
                self.broadcast("appendDiagnosticData", args, Some(request.origin));
            }
        }
    }

    /// Whether `name` is registered by `connection_id` with registration `token`.
    pub(super) fn holds_client_agent(
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
    pub(super) fn drop_client_agents(&mut self, connection_id: ConnectionId) {
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

impl Handler<ClientAgentOutput> for Conversation {
    type Result = ();

    /// A call of a registered agent (the registration it names, from the client that holds
    /// it); anything else is ignored with a debug log.
    fn handle(&mut self, msg: ClientAgentOutput, ctx: &mut Self::Context) {
        let agents = &self.client_agents;
        let registered = (agents.agents.get(&msg.name))
            .or_else(|| agents.starting.get(&msg.name))
            .filter(|r| r.host.token == msg.token && r.connection_id == msg.connection_id);
        let Some(r) = registered else {
            log::debug!(
                "conversation {}: call of client agent {} (no longer registered) ignored",
                self.setup.id,
                msg.name
            );
            return;
        };
        let emoji = r.spec.emoji.clone();
        self.agent_call(&msg.name, &emoji, msg.turn, msg.call);
        self.throttle(ctx);
    }
}

/// What a running `@<agent> …` command reports to its conversation.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ClientCommandEvent {
    /// The command is resolved: `setDisplayInfo` goes out before `executeCommand`.
    Resolved {
        /// The turn.
        turn: u64,
        /// The agent.
        agent: String,
        /// The sub-command path.
        commands: Vec<String>,
    },
    /// The command finished: the `ActionResult` (or none), or the error to show.
    Done {
        /// The turn.
        turn: u64,
        /// The agent.
        agent: String,
        /// The answer, or the error text (shown as `ERROR: <text>`).
        outcome: Result<Option<Value>, String>,
    },
}

impl Handler<ClientCommandEvent> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: ClientCommandEvent, ctx: &mut Self::Context) {
        match msg {
            ClientCommandEvent::Resolved {
                turn,
                agent,
                commands,
            } => {
                let Some(request) = self.request_of(turn) else {
                    return;
                };
                self.log_entry(
                    json!({"type": "set-display-info", "requestId": request.id_obj(),
                    "source": agent, "action": commands}),
                );
                let args = json!([request.id_obj(), agent, null, commands]);
                self.broadcast("setDisplayInfo", args, Some(request.origin));
            }
            ClientCommandEvent::Done {
                turn,
                agent,
                outcome,
            } => self.client_command_done(turn, &agent, outcome, ctx),
        }
        self.throttle(ctx);
    }
}

impl Conversation {
    /// Shows a finished `@<agent>` command's result (TypeAgent's `emitActionResult` for a
    /// command: `displayContent` as a block; an `error` as an error, with its
    /// `errorDisplayContent` if given) or its error, and completes the request.
    fn client_command_done(
        &mut self,
        turn: u64,
        agent: &str,
        outcome: Result<Option<Value>, String>,
        ctx: &mut Context<Self>,
    ) {
        let Some(request) = self.request_of(turn) else {
            return;
        };
        let result = match outcome {
            Err(e) => {
                let text = format!("ERROR: {e}");
                let error = json!({"type": "text", "content": text, "kind": "error"});
                let extra = Some(self.source_of(agent));
                self.display(&request, error, extra, DisplayMode::Block);
                return self.finish(turn, Some(text), ctx);
            }
            Ok(result) => result.unwrap_or(Value::Null),
        };
        // A command's result: action index 0 and the agent's name as its schema (TypeAgent).
        let token = self.client_agents.agents.get(agent).map(|r| r.host.token);
        let shown = self.show_agent_result(&request, agent, token, (0, agent), &result, ctx);
        self.finish(turn, shown.err(), ctx);
    }

    /// The `IAgentMessage` extra fields of `agent`'s output (see [`Self::agent_source`]).
    fn source_of(&self, agent: &str) -> Value {
        let emoji = self
            .client_agents
            .agents
            .get(agent)
            .map(|r| r.spec.emoji.as_str())
            .unwrap_or_default();
        Self::agent_source(agent, emoji)
    }

    /// TypeAgent's `emitActionResult` for a client agent's command or choice `result` under
    /// `request`: an `error` is shown as an error (its `errorDisplayContent` if given) and is
    /// the `Err` text; else its `displayContent` is shown as a block, then what it asks
    /// beyond ([`Self::result_requests`]; `token`: the agent's registration, if it still
    /// has one; `at`: the action index and schema name).
    fn show_agent_result(
        &mut self,
        request: &Request,
        agent: &str,
        token: Option<u64>,
        at: (usize, &str),
        result: &Value,
        ctx: &mut Context<Self>,
    ) -> Result<(), String> {
        let extra = Some(self.source_of(agent));
        if let Some(error) = result.get("error").filter(|e| !e.is_null()) {
            let text = error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_string);
            let shown = match result.get("errorDisplayContent").filter(|c| !c.is_null()) {
                Some(content) => content.clone(),
                None => json!({"type": "text", "content": text, "kind": "error"}),
            };
            self.display(request, shown, extra, DisplayMode::Block);
            return Err(text);
        }
        if let Some(content) = result.get("displayContent").filter(|c| !c.is_null()) {
            self.display(request, content.clone(), extra, DisplayMode::Block);
        }
        self.result_requests(request, agent, token, at, result, ctx);
        Ok(())
    }

    /// What a client agent's successful `result` under `request` asks beyond its display, in
    /// TypeAgent's order: `setDynamicDisplay(requestId, schemaName, actionIndex, id,
    /// nextRefreshMs)` to every client for its `dynamicDisplayId`, then its `pendingChoice`
    /// to the request's originator (only for the registration `token`, the agent's current
    /// one; an unreadable one is shown as a warning). `at`: the action index and schema name.
    fn result_requests(
        &mut self,
        request: &Request,
        agent: &str,
        token: Option<u64>,
        (action_index, schema_name): (usize, &str),
        result: &Value,
        ctx: &mut Context<Self>,
    ) {
        if let Some(args) =
            dynamic_display_args(result, request.id_obj(), schema_name, action_index)
        {
            self.broadcast("setDynamicDisplay", args, Some(request.origin));
        }
        let Some(pending) = result.get("pendingChoice").filter(|c| !c.is_null()) else {
            return;
        };
        let current = self.client_agents.agents.get(agent).map(|r| r.host.token);
        let Some(token) = token.filter(|t| current == Some(*t)) else {
            log::debug!(
                "conversation {}: choice of client agent {agent} (no longer registered) not asked",
                self.setup.id
            );
            return;
        };
        let asked = match AskedChoice::read(pending, request.id_obj(), schema_name) {
            Ok(asked) => asked,
            Err(why) => {
                let text =
                    format!("The choice client agent '{agent}' asked cannot be shown: {why}");
                let warning = json!({"type": "text", "content": text, "kind": "warning"});
                let extra = Some(self.source_of(agent));
                return self.display(request, warning, extra, DisplayMode::Block);
            }
        };
        if !self.clients.contains_key(&request.origin) {
            log::debug!(
                "conversation {}: choice {} of client agent {agent}: its originator left; not asked",
                self.setup.id,
                asked.choice_id
            );
            return;
        }
        self.client_agents.choices_asked += 1;
        let choice = AgentChoice {
            agent: agent.to_string(),
            token,
            request: Request {
                text: String::new(),
                attachments: Vec::new(),
                options: None,
                ..request.clone()
            },
            action_index,
            expects: asked.expects,
            asked: self.client_agents.choices_asked,
        };
        let origin = request.origin;
        self.open_agent_choice(
            asked.choice_id,
            asked.method,
            asked.args,
            origin,
            choice,
            ctx,
        );
    }

    /// TypeAgent's `respondToChoice` for a client agent's choice (already taken from the
    /// table): `Agent '<n>' does not support choices` when its interface lacks
    /// `handleChoice`, else the invoke `handleChoice({…ActionContextParams, choiceId,
    /// response})` in a fresh action context; its answer comes back as [`ChoiceHandled`].
    pub(super) fn answer_agent_choice(
        &mut self,
        choice_id: String,
        choice: AgentChoice,
        response: Value,
        ctx: &mut Context<Self>,
    ) -> RpcResult<LocalBoxFuture<'static, RpcResult<Option<Value>>>> {
        let Some(r) = self
            .client_agents
            .agents
            .get(&choice.agent)
            .filter(|r| r.host.token == choice.token)
        else {
            return Err(RpcError::Message("Choice not found or expired".into()));
        };
        if !r.spec.handles_choices {
            return Err(RpcError::Message(format!(
                "Agent '{}' does not support choices",
                choice.agent
            )));
        }
        self.turns += 1;
        let turn = self.turns;
        let context = r.next_action_context.fetch_add(1, Ordering::Relaxed);
        let args = handle_choice_args(&choice_id, response, context, &r.session);
        let action = OpenAction {
            action_context_id: context,
            turn,
        };
        let call = invoke_in_action_context(
            choice.agent.clone(),
            r.host.clone(),
            HANDLE_CHOICE,
            args,
            action,
            false,
        );
        log::debug!(
            "conversation {}: choice {choice_id} answered; handleChoice of client agent {}",
            self.setup.id,
            choice.agent
        );
        self.client_agents.choice_calls.insert(
            turn,
            ChoiceCall {
                agent: choice.agent,
                token: choice.token,
                request: choice.request,
                action_index: choice.action_index,
                last_error: None,
            },
        );
        let conversation = ctx.address();
        let id = self.setup.id;
        Ok(Box::pin(async move {
            let outcome = call.await;
            conversation
                .send(ChoiceHandled { turn, outcome })
                .await
                .map_err(|_| RpcError::ConversationNotFound(id.to_string()))?
        }))
    }

    /// Remembers an error the agent shows while its `handleChoice` (of `turn`) runs: it is
    /// the `lastError` of `respondToChoice` (TypeAgent's `makeClientIOMessage`).
    fn note_choice_error(&mut self, turn: Option<u64>, call: &AgentCall) {
        let (AgentCall::SetDisplay { content } | AgentCall::AppendDisplay { content, .. }) = call
        else {
            return;
        };
        let choice_call = turn.and_then(|t| self.client_agents.choice_calls.get_mut(&t));
        if let (Some(c), Some(text)) = (choice_call, error_text(content)) {
            c.last_error = Some(text);
        }
    }

    /// `dispatcher` `getDynamicDisplay` / `getTemplateSchema` / `getTemplateCompletion`
    /// for `agent`: TypeAgent's `Unknown app agent: <n>` or `… not supported by '<n>'`, else
    /// the invoke on the client agent's channel (bounded by `--client-agent-timeout`); its
    /// result, or its error text.
    pub(super) fn ask_agent(
        &self,
        agent: &str,
        query: AgentQuery,
    ) -> RpcResult<LocalBoxFuture<'static, RpcResult<Option<Value>>>> {
        self.known_agent(agent)?;
        let registered = self.client_agents.agents.get(agent);
        let Some((r, method)) = registered.and_then(|r| {
            let (method, implemented) = query.method(&r.spec);
            implemented.then_some((r, method))
        }) else {
            return Err(query.unsupported(agent));
        };
        let args = forwarded_args(&r.session, query.fields());
        let host = r.command_host();
        Ok(Box::pin(async move {
            let answer = host.invoke(method, args, false).await;
            answer.map(|a| a.result).map_err(RpcError::Message)
        }))
    }
}

/// The text an error-kind display stands for (TypeAgent's `makeClientIOMessage` sets
/// `lastError` from it): `{type, content, kind: "error"}` (not `structured`), its content a
/// string, lines, or a table's rows of cells.
fn error_text(content: &Value) -> Option<String> {
    if content.get("kind")? != "error" || content.get("type")? == "structured" {
        return None;
    }
    let line = |v: &Value| match v {
        Value::Array(cells) => cells
            .iter()
            .map(|c| c.as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" | "),
        other => other.as_str().unwrap_or_default().to_string(),
    };
    Some(match content.get("content")? {
        Value::Array(lines) => lines.iter().map(line).collect::<Vec<_>>().join("\n"),
        other => line(other),
    })
}

/// A client agent's `handleChoice` answered (or failed): sent by the `respondToChoice` that
/// ran it; the conversation shows its `ActionResult` and answers the `CommandResult`.
#[derive(Message)]
#[rtype(result = "RpcResult<Option<Value>>")]
struct ChoiceHandled {
    /// The turn number the call was given.
    turn: u64,
    /// The `ActionResult` (or none), or why there is none.
    outcome: Result<Option<Value>, CallError>,
}

impl Handler<ChoiceHandled> for Conversation {
    type Result = RpcResult<Option<Value>>;

    /// TypeAgent's end of `respondToChoice`: a failed invoke fails it with the agent's
    /// text; a result is shown like an action's (a chained `pendingChoice` asked again,
    /// under the same request and action index, the agent's name as schema); the answer is
    /// `{lastError}` when an error was shown, else void.
    fn handle(&mut self, msg: ChoiceHandled, ctx: &mut Self::Context) -> Self::Result {
        let call = self.client_agents.choice_calls.remove(&msg.turn);
        let Some(call) = call.filter(|_| !self.deleted) else {
            return Err(RpcError::ConversationNotFound(self.setup.id.to_string()));
        };
        let result = msg
            .outcome
            .map_err(|e| RpcError::Message(call_error_text(e)))?;
        let mut last_error = call.last_error;
        if let Some(result) = result.filter(|r| !r.is_null()) {
            let at = (call.action_index, call.agent.as_str());
            let token = Some(call.token);
            if let Err(text) =
                self.show_agent_result(&call.request, &call.agent, token, at, &result, ctx)
            {
                last_error = Some(text);
            } else if let Some(text) = result.get("displayContent").and_then(error_text) {
                last_error = Some(text);
            }
        }
        self.throttle(ctx);
        Ok(last_error.map(|e| json!({"lastError": e})))
    }
}

/// A client agent's action returned a result that asks something beyond its text (a
/// `pendingChoice`, a `dynamicDisplayId`): sent by the turn's tool call, after the invoke.
#[derive(Message)]
#[rtype(result = "()")]
struct ClientActionDone {
    /// The turn that ran it.
    turn: u64,
    /// The agent.
    agent: String,
    /// The registration the call was made for.
    token: u64,
    /// The call's index among the request's actions.
    action_index: usize,
    /// The action's schema (`<agent>` or `<agent>.<sub>`).
    schema_name: String,
    /// The `ActionResult`.
    result: Value,
}

impl Handler<ClientActionDone> for Conversation {
    type Result = ();

    /// For the running request only (a cancelled turn's result asks nothing).
    fn handle(&mut self, msg: ClientActionDone, ctx: &mut Self::Context) {
        let Some(request) = self
            .running
            .as_ref()
            .filter(|r| r.turn == msg.turn)
            .map(|r| r.request.clone())
        else {
            return;
        };
        let at = (msg.action_index, msg.schema_name.as_str());
        let token = Some(msg.token);
        self.result_requests(&request, &msg.agent, token, at, &msg.result, ctx);
        self.throttle(ctx);
    }
}

/// The body of a running `@<agent> …` command (`text`, as typed): its tree, the command
/// parsed (`setDisplayInfo` once it is resolved), `executeCommand`; the `ActionResult` or the
/// error text.
async fn run_client_command(
    host: &ClientCommandHost,
    text: &str,
    turn: u64,
    conversation: &Addr<Conversation>,
) -> Result<Option<Value>, String> {
    let input = &trim_start_js(text)[1..];
    let descriptors = host.commands().await?;
    let (commands, params) = parse_agent_command(host.name(), input, descriptors.as_ref())?;
    conversation.do_send(ClientCommandEvent::Resolved {
        turn,
        agent: host.name().to_string(),
        commands: commands.clone(),
    });
    host.execute(commands, params, turn).await
}

/// The text an error of a call to the agent shows: the agent's own message when it answered
/// `invokeError` (TypeAgent shows `e.message`), else what went wrong on the way.
fn call_error_text(e: CallError) -> String {
    match e {
        CallError::Failed { error, .. } => error,
        other => other.to_string(),
    }
}

/// TypeAgent's `parseCommand` for `<agent> <sub…> <params>` (`input`, the text after `@`):
/// the sub-command path and the parsed parameters (`ParseParamsResult`, absent when the
/// command declares none), or the error text (usage texts are plainer than TypeAgent's).
pub fn parse_agent_command(
    agent: &str,
    input: &str,
    descriptors: Option<&Descriptors>,
) -> Result<(Vec<String>, Option<Value>), String> {
    let agent_end = next_word(input, 0).map_or(input.len(), |(_, end)| end);
    let resolved = resolve(descriptors, input, agent_end);
    let suffix = &input[resolved.suffix_start..];
    let command = std::iter::once(agent.to_string())
        .chain(resolved.commands.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(descriptor) = resolved.descriptor {
        let parsed = match &descriptor.parameters {
            None if !suffix.is_empty() => {
                Err(format!("Command '@{command}' does not accept parameters."))
            }
            None => Ok(None),
            Some(defs) => parse_params(suffix, defs, false).map(|p| Some(p.to_json())),
        };
        match parsed {
            Ok(params) => return Ok((resolved.commands, params)),
            Err(e) if resolved.matched || suffix.is_empty() || suffix.starts_with('-') => {
                return Err(format!("{e}\n\n{}", command_usage(&command, descriptor)));
            }
            // Only the default matched: the error is about the table (below).
            Err(_) => {}
        }
    }
    let Some(table) = resolved.table else {
        return Err(format!("Unknown command '{input}'"));
    };
    let message = if suffix.is_empty() {
        format!("'@{command}' requires a subcommand.")
    } else {
        format!("'{suffix}' is not a subcommand for '@{command}'.")
    };
    Err(format!("{message}\n\n{}", table_usage(&command, table)))
}

/// A call's waiting side: when it is dropped before the answer (the turn's future was
/// cancelled), the hosting connection is told to stop waiting ([`CloseClientAgentCall`]).
struct CallGuard {
    /// The close message, sent once on drop unless disarmed.
    close: Option<(Recipient<CloseClientAgentCall>, CloseClientAgentCall)>,
}

impl CallGuard {
    /// The answer came (or the connection went): nothing to close.
    fn disarm(&mut self) {
        self.close = None;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some((to, msg)) = self.close.take() {
            log::debug!(
                "client agent {}: call with actionContextId {} dropped by its turn",
                msg.name,
                msg.action_context_id
            );
            to.do_send(msg);
        }
    }
}

/// Sends one invoke to the agent's connection; the answer (or why there is none) arrives on
/// the receiver.
fn send_invoke(
    name: &str,
    host: &ClientAgentHost,
    method: &'static str,
    args: Value,
    action: Option<OpenAction>,
    keep_text: bool,
) -> oneshot::Receiver<Result<AgentAnswer, CallError>> {
    let (reply, answer) = oneshot::channel();
    host.invoke.do_send(InvokeClientAgent {
        name: name.to_string(),
        token: host.token,
        method,
        args,
        action,
        keep_text,
        reply,
    });
    answer
}

/// Runs an invoke that opens an action context, with a [`CallGuard`]: dropping the future
/// before the answer closes the call on the connection (with `cancelAction` when asked).
async fn invoke_in_action_context(
    name: String,
    host: ClientAgentHost,
    method: &'static str,
    args: Value,
    action: OpenAction,
    cancel_action: bool,
) -> Result<Option<Value>, CallError> {
    let answer = send_invoke(&name, &host, method, args, Some(action), false);
    let mut guard = CallGuard {
        close: Some((
            host.close.clone(),
            CloseClientAgentCall {
                name: name.clone(),
                token: host.token,
                action_context_id: action.action_context_id,
                cancel_action,
            },
        )),
    };
    let answer = answer.await;
    guard.disarm();
    match answer {
        Ok(answer) => answer.map(|a| a.result),
        // The connection stopped before it took or answered the call.
        Err(_) => Err(CallError::Disconnected(name)),
    }
}

/// A client agent's `@` commands: its command tree, its parameter completion and running a
/// command, each an invoke on its channel with its session context's params.
#[derive(Clone)]
pub struct ClientCommandHost {
    /// What the agent offers (name, emoji, which methods it implements).
    pub spec: Arc<ClientAgentSpec>,
    /// Where its invokes go.
    host: ClientAgentHost,
    /// The registration's `actionContextId` counter.
    next_action_context: Arc<AtomicU64>,
    /// The registration's session context.
    session: Arc<SessionContext>,
}

impl ClientCommandHost {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// An invoke that opens no action context; its answer, or the error text.
    async fn invoke(
        &self,
        method: &'static str,
        args: Value,
        keep_text: bool,
    ) -> Result<AgentAnswer, String> {
        let answer = send_invoke(self.name(), &self.host, method, args, None, keep_text);
        match answer.await {
            Ok(answer) => answer.map_err(call_error_text),
            Err(_) => Err(CallError::Disconnected(self.name().to_string()).to_string()),
        }
    }

    /// `getCommands`: its command tree (`None` when it has none or does not list commands).
    pub async fn commands(&self) -> Result<Option<Descriptors>, String> {
        if !self.spec.lists_commands {
            return Ok(None);
        }
        let args = json!([self.session.params()]);
        let answer = self.invoke(GET_COMMANDS, args, true).await?;
        match answer.text {
            None => Ok(None),
            Some(text) => parse_descriptors(&text).map_err(|e| {
                format!(
                    "the commands of client agent '{}' are invalid: {e}",
                    self.name()
                )
            }),
        }
    }

    /// `getCommandCompletion`: `CompletionGroups` for the parameters `names` of `commands`
    /// (`None` when the agent does not complete).
    pub async fn complete(
        &self,
        commands: &[String],
        params: Value,
        names: &[String],
        direction: &str,
    ) -> Option<Result<Value, String>> {
        if !self.spec.completes_commands {
            return None;
        }
        let mut args: Map<String, Value> = self.session.params();
        args.insert("commands".into(), json!(commands));
        args.insert("params".into(), params);
        args.insert("names".into(), json!(names));
        args.insert("direction".into(), json!(direction));
        let answer = self
            .invoke(GET_COMMAND_COMPLETION, json!([args]), false)
            .await;
        Some(answer.map(|a| a.result.unwrap_or(Value::Null)))
    }

    /// `executeCommand` for `turn`: the `ActionResult` (or none), or the error text.
    async fn execute(
        &self,
        commands: Vec<String>,
        params: Option<Value>,
        turn: u64,
    ) -> Result<Option<Value>, String> {
        let context = self.next_action_context.fetch_add(1, Ordering::Relaxed);
        let args = execute_command_args(&commands, params, context, &self.session);
        let action = OpenAction {
            action_context_id: context,
            turn,
        };
        let name = self.name().to_string();
        invoke_in_action_context(
            name,
            self.host.clone(),
            EXECUTE_COMMAND,
            args,
            action,
            false,
        )
        .await
        .map_err(call_error_text)
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
    /// The registration's session context.
    session: Arc<SessionContext>,
    /// The turn the tools were made for (the agent's calls during an action reach it).
    turn: u64,
    /// The conversation, told what a result asks beyond its text ([`ClientActionDone`]).
    conversation: Option<WeakAddr<Conversation>>,
}

impl ToolServer for ClientAgentTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.spec.tool_specs()
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        call_context: ToolCallContext<'a>,
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
        let args = execute_action_args(action, input, context, &self.session);
        let open = OpenAction {
            action_context_id: context,
            turn: self.turn,
        };
        let call = invoke_in_action_context(
            name.clone(),
            self.host.clone(),
            EXECUTE_ACTION,
            args,
            open,
            true,
        );
        let done = ClientActionDone {
            turn: self.turn,
            agent: name,
            token: self.host.token,
            action_index: call_context.action_index,
            schema_name: action.schema_name.clone(),
            result: Value::Null,
        };
        Box::pin(async move {
            let result = match call.await {
                Ok(result) => {
                    let asks = |key| {
                        result
                            .as_ref()
                            .and_then(|r| r.get(key))
                            .is_some_and(|v| !v.is_null())
                    };
                    let conversation = self.conversation.as_ref().and_then(WeakAddr::upgrade);
                    // A failed result asks nothing more (TypeAgent returns before).
                    let asking =
                        !asks("error") && (asks("pendingChoice") || asks("dynamicDisplayId"));
                    if let (true, Some(conversation)) = (asking, conversation) {
                        let result = result.clone().unwrap_or_default();
                        conversation.do_send(ClientActionDone { result, ..done });
                    }
                    action_result_text(result.as_ref())
                }
                Err(e) => Err(e.to_string()),
            };
            result.into()
        })
    }
}
