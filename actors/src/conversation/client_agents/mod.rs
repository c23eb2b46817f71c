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
//! consumer). An invoke does not come back here: the turn's `ClientAgentTools` (or a
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
//! Cancellation: a call's waiting side holds a `CallGuard`; when the turn is cancelled
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
//!
//! Files: `messages.rs` (the messages the connections and the conversation exchange, and what
//! they carry), `registration.rs` (registering, starting, unregistering and dropping agents;
//! the list), `tools.rs` (an agent's actions as a turn's tools), `commands.rs` (`@<agent> …`
//! commands), `calls.rs` (the agent's calls while it runs), `results.rs` (what a result asks
//! beyond its display: dynamic displays and choices), `queries.rs` (the dispatcher's queries
//! forwarded to an agent), `invoke.rs` (sending an invoke and closing it when its waiting side
//! goes).

mod calls;
mod commands;
mod invoke;
mod messages;
mod queries;
mod registration;
mod results;
mod tools;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use actix::WeakAddr;

use super::agent_context::AgentThreads;
use super::Conversation;
use crate::agent::client_agent::{ClientAgentSpec, SessionContext};
use crate::ids::ConnectionId;
use results::ChoiceCall;

pub use commands::{parse_agent_command, ClientCommandHost};
pub use messages::{
    AbandonClientAgent, ActivateClientAgent, AgentAnswer, AgentCall, AgentReply, ClientActionInfo,
    ClientAgentHost, ClientAgentInfo, ClientAgentOutput, ClientAgentRemoved, CloseClientAgentCall,
    InvokeClientAgent, OpenAction, RegisterClientAgent, UnregisterClientAgent,
};
pub(super) use queries::AgentQuery;
pub(super) use results::AgentChoice;

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
    /// report what an action's result asks beyond its text (`ClientActionDone`). Weak, so
    /// the actor holds no address of its own.
    conversation: Option<WeakAddr<Conversation>>,
    /// The `handleChoice` invokes waiting for their agents, by the turn number each was
    /// given: the agent's calls naming its action context show under its request. One per
    /// answered choice; each ends within `--client-agent-timeout` (or when its agent goes).
    choice_calls: HashMap<u64, ChoiceCall>,
    /// Agent choices asked so far ([`AgentChoice::asked`]).
    choices_asked: u64,
}
