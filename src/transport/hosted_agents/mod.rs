//! The client agents one socket hosts: `registerClientAgent` / `unregisterClientAgent` on
//! `agent-server`, and the server → client invokes on each agent's `agent:<name>` channel.
//!
//! Registration: the conversation is resolved from what this socket joined (TypeAgent's
//! rules and texts), the name checked against this socket's own agents (`already registered`
//! in that conversation; `Channel 'agent:<n>' already exists` in another: one channel per
//! name per socket, as in TypeAgent), the manifest read
//! ([`parse_registration`]), then the joined conversation — which owns the registry of its
//! client agents — decides. The name is reserved here while the conversation decides, so two
//! registrations in flight cannot both pass.
//!
//! Lifecycle (TypeAgent's dispatcher on an agent-rpc agent; only the methods the agent's
//! `agentInterface` lists): once the conversation accepted the agent (it is *starting* there:
//! name taken, not offered to turns), `initializeAgentContext` (its failure fails the
//! registration; its `{contextId}` is the `agentContextId` of every later `ContextParams`),
//! `updateAgentContext(enable: true)` per schema and `startBackgroundTasks`, one after the
//! other; then the conversation activates it ([`ActivateClientAgent`]) and the registration is
//! answered. When it goes (unregister, leave, conversation gone, another client's unregister)
//! its waiting calls fail, then `stopBackgroundTasks`, `updateAgentContext(enable: false)` per
//! schema and `closeAgentContext` go out one after the other (each bounded by
//! `--client-agent-timeout`; none once the socket closes), and only then its channel goes;
//! an own `unregisterClientAgent` is answered after them, as TypeAgent awaits
//! `removeClientAgent`.
//!
//! Invokes: a turn's tool call, a command or a completion arrives as [`InvokeClientAgent`];
//! it gets the channel's next callId (one counter per channel, from 0, shared with the calls
//! the server sends), goes out as an `invoke`, and waits in `pending` (at most
//! [`MAX_PENDING_INVOKES_PER_CONNECTION`]) for the `invokeResult` / `invokeError` with that
//! (channel, callId), or for `--client-agent-timeout`. Removing an agent (unregister, leave,
//! conversation gone, another client's unregister) fails its waiting calls; closing the
//! socket fails them all. Every failure is a [`CallError`] whose text the model sees. When
//! the waiting side goes away first (its turn was cancelled: [`CloseClientAgentCall`]), the
//! call stops waiting at once, an `executeAction` gets the call `cancelAction
//! {actionContextId}` on its channel, and the late answer is dropped.
//!
//! The agent's own calls on its channel ([`AgentCall`]: `notify`, `setDisplay`,
//! `appendDisplay`, `takeAction`, `appendDiagnosticData`, the `agentThread*` calls) go to its
//! conversation as [`ClientAgentOutput`]; those naming an action context (`actionContextId`)
//! only while that context's invoke waits, tagged with the turn that made it. Anything else is
//! ignored (debug log). Each call is one frame (bounded by `--max-frame-bytes`); a
//! conversation whose mailbox is full drops it.
//!
//! Layout: this file holds the state a socket keeps per hosted agent and per waiting invoke;
//! `registration.rs`, `lifecycle.rs` and `invokes.rs` hold what the socket does with them.
//!
//! The agent's invokes to its host (storage, ports, `popupQuestion`, …: [`HostInvoke`]) are
//! answered by [`Connection::agent_context_invoke`]; only `popupQuestion` waits, for the
//! conversation's clients. They count against the socket's `MAX_IN_FLIGHT` like any invoke.

use actix::prelude::*;

use roundtable_actors::agent::client_agent::{Lifecycle, SessionContext};
use roundtable_actors::conversation::{AgentReply, OpenAction};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::protocol::{self, Args, RpcError, RpcResult};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::Connection;

mod invokes;
mod lifecycle;
mod registration;

/// What runs once a sequence of lifecycle invokes ended ([`Connection::run_lifecycle`]).
pub(super) type AfterLifecycle = Box<dyn FnOnce(&mut Connection, &mut Context<Connection>)>;

/// A client agent this socket hosts.
pub(super) struct HostedAgent {
    /// The conversation it is registered in.
    conversation_id: ConversationId,
    /// The registration as the client sent it: when the conversation moves to another node,
    /// the connection registers it again there on the client's behalf.
    registration: ClientAgentRequest,
    /// This registration's token (notices and calls for another one are refused).
    token: u64,
    /// False while the conversation decides; the channel exists only once it is true.
    registered: bool,
    /// Next callId on its `agent:<name>` channel.
    next_call_id: u64,
    /// One past the highest `actionContextId` sent to it: a context below this that is not
    /// open was closed (`used out of scope` in TypeAgent's text).
    action_contexts_sent: u64,
    /// The lifecycle methods it lists and its schemas, from its registration.
    lifecycle: Lifecycle,
    /// Its session context once the conversation accepted it (with the `agentContextId`
    /// its `initializeAgentContext` answered).
    session: Option<SessionContext>,
    /// Its agent context exists (`initializeAgentContext` answered, or is not listed): when
    /// it goes, the teardown invokes are sent.
    started: bool,
    /// It is going (unregistered, this socket left, the conversation gone): its teardown
    /// invokes run, one after the other; nothing else is sent to it, and its name stays taken
    /// on this socket until they end.
    closing: bool,
}

/// A server → client invoke waiting for its answer.
pub(super) struct PendingInvoke {
    /// The agent, for error texts.
    name: String,
    /// The method, for logs.
    method: &'static str,
    /// The action context it opened: the agent's calls naming it go to that turn.
    action: Option<OpenAction>,
    /// Keep the answer's `result` text (`getCommands`).
    keep_text: bool,
    /// Where the answer goes (the turn's tool call, the command, the completion).
    reply: AgentReply,
    /// The time-out, cancelled by the answer.
    timer: SpawnHandle,
}

/// An `invokeResult` frame, read again for its `result` as the client wrote it.
#[derive(Deserialize)]
struct RawAnswer<'a> {
    /// The message.
    #[serde(borrow)]
    message: RawAnswerMessage<'a>,
}

/// The message of a [`RawAnswer`].
#[derive(Deserialize)]
struct RawAnswerMessage<'a> {
    /// `result`, unparsed.
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

/// The error of a registration whose agent went (unregistered, this socket left, the
/// conversation gone) before it was started.
fn interrupted(name: &str) -> RpcError {
    RpcError::Message(format!(
        "Client agent '{name}' was unregistered before its registration completed"
    ))
}

/// The `result` of an `invokeResult` frame as its JSON text.
fn raw_result(frame: &str) -> Option<String> {
    let answer: RawAnswer<'_> = serde_json::from_str(frame).ok()?;
    answer.message.result.map(|r| r.get().to_string())
}

/// `registerClientAgent({name, manifest, agentInterface, conversationId?})`, its argument
/// types checked.
#[derive(Clone)]
pub(super) struct ClientAgentRequest {
    /// The agent's name.
    pub(super) name: String,
    /// Its `AppAgentManifest` (read once the conversation is resolved, as TypeAgent does).
    manifest: Map<String, Value>,
    /// The agent-rpc methods it implements (`executeAction`).
    agent_interface: Vec<String>,
    /// The conversation; `None` means the only one this socket joined.
    pub(super) conversation: Option<ConversationRef>,
}

impl ClientAgentRequest {
    /// Checks the argument types of `registerClientAgent`.
    pub(super) fn parse(m: &str, args: &Args) -> RpcResult<ClientAgentRequest> {
        let param = args.req_object(m, 0, "param")?;
        let name = protocol::opt_field_str(Some(param), m, 0, "name")?
            .ok_or_else(|| protocol::invalid(m, 0, "name", "a string"))?
            .to_string();
        let manifest = match param.get("manifest") {
            Some(Value::Object(o)) => o.clone(),
            _ => return Err(protocol::invalid(m, 0, "manifest", "an object")),
        };
        let agent_interface = match param.get("agentInterface") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| protocol::invalid(m, 0, "agentInterface", "an array of strings"))?,
            Some(_) => {
                return Err(protocol::invalid(
                    m,
                    0,
                    "agentInterface",
                    "an array of strings",
                ))
            }
        };
        let conversation = protocol::opt_field_str(Some(param), m, 0, "conversationId")?
            .map(ConversationRef::parse);
        Ok(ClientAgentRequest {
            name,
            manifest,
            agent_interface,
            conversation,
        })
    }
}
