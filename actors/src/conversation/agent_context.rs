//! What a client agent asks of its host on its `agent:<name>` channel besides the calls of a
//! running action: the invokes of TypeAgent's `AgentContextInvokeFunctions`
//! ([`HostInvoke::parse`]), its `popupQuestion` ([`AgentPopupQuestion`]) and its agent
//! threads (the `agentThread*` calls, [`AgentThreadCall`]).
//!
//! Who talks to it: the hosting connection (`src/transport/hosted_agents.rs`) parses each
//! invoke here and answers it at once, except `popupQuestion`, which it sends to the
//! conversation; the agent's thread calls reach the conversation as
//! [`ClientAgentOutput`](super::ClientAgentOutput), like its other calls.
//!
//! Every one of the 22 invokes gets a deliberate answer. TypeAgent's host side is
//! `agentRpc/src/client.ts` (`agentContextInvokeHandlers`) over the dispatcher's session
//! context (`dispatcher/src/execute/sessionContext.ts`); where an answer below differs from
//! what TypeAgent would do, it is because Roundtable lacks the feature, and the choice keeps
//! the agent process alive (TypeAgent's agent SDK, `agentRpc/src/server.ts`, sends some of
//! these without handling a rejection: in Node an unhandled rejection ends the process).
//!
//! | Invoke | Answer | Why |
//! | --- | --- | --- |
//! | `storageRead`, `storageWrite`, `storageList`, `storageExists`, `storageDelete`, `tokenCacheRead`, `tokenCacheWrite`, `tokenCacheDelete` | `Storage not available` | TypeAgent's text for a context without that storage: every invoke tells the agent `hasInstanceStorage` / `hasSessionStorage` false, so the SDK gives it no `Storage` and a well-behaved agent never sends these |
//! | `setLocalHostPort`, `releasePort`, `notifyReadinessChanged`, `notifyClientCountChanged`, `reloadAgentSchema` | void, logged | TypeAgent answers void; the SDK sends `setLocalHostPort` and `releasePort` with `.catch()` and no handler, and agents call the two `notify…` with `void` (an error would end the agent process). Roundtable has no local views, port registry, readiness cache or schema to reload (the schema is read once, at registration) |
//! | `registerPort` | `{regId: <new UUID>}`, logged, nothing kept | An error is swallowed by the SDK, but its `release()` then sends `releasePort` behind a `.catch()` without handler and the rejection ends the process; so it answers like TypeAgent, and `releasePort` of any id is void, as TypeAgent's is for an unknown id |
//! | `indexes` | `[]` | No image or website indexes |
//! | `toggleTransientAgent`, `queueToggleTransientAgent` | `Invalid sub agent name: <n>` unless `<n>` is `<agent>.<sub>`, else `Transient sub agent not found: <n>` | TypeAgent's texts; Roundtable's client agents have no transient sub-agents. The queued form first needs its action context open (else `Internal error: Invalid contextId <id>`, as TypeAgent) |
//! | `addDynamicAgent`, `removeDynamicAgent`, `forceCleanupDynamicAgent`, `getSharedLocalHostPort` | `<method>: not supported by Roundtable` | The agent awaits each and gets the rejection in its own code (TypeAgent's browser agent catches them). TypeAgent's refusals (`Permission denied: …`, `Agent '<a>' is not allowed to access '<b>' local view.`) name a permission the agent could be given; here there is none to give |
//! | `popupQuestion` | the chosen index | A `requestInteraction` of type `question` to every unfiltered client, with no `requestId` and the agent as `source` (TypeAgent's `clientIO.question(undefined, …)` in agent-server mode); answered with `respondToInteraction`; a cancel or time-out takes `defaultId`, else fails with TypeAgent's `Cancelled by client` / `Interaction timed out` |
//! | any other | `No invoke handler <method>` | TypeAgent's generic answer |
//!
//! Every object argument is checked (`Invalid argument 0 (<field>) of <method>: expected …`),
//! and a `contextId` other than the registration's one session context (0) is TypeAgent's
//! `Internal error: Invalid contextId <id>`.
//!
//! Agent threads: `agentThreadBegin(contextId, threadId, kind)` opens a thread with its own
//! request id `{requestId: "", clientRequestId: "agent-<name>-<uuid>"}`;
//! `agentThreadSetDisplay` / `agentThreadAppendDisplay` broadcast `setDisplay` /
//! `appendDisplay` with it (`source` the agent, `sourceIcon` its emoji, `kind`) to every
//! unfiltered client, whether a request runs or not, and log them as TypeAgent's agent server
//! does (not a `toast` or `inline` kind, nor a `temporary` append); `agentThreadComplete`
//! closes the thread and sends nothing. A call for an unknown thread is ignored, as in
//! TypeAgent. Each registration keeps at most [`MAX_AGENT_THREADS`] open threads.

use std::collections::VecDeque;

use actix::prelude::*;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::audience::Audience;
use super::routing::DisplayMode;
use super::Conversation;
use crate::agent::questions::{MAX_FORM_CHOICES, MAX_FORM_TEXT_CHARS};
use crate::client::OutboundCall;
use crate::ids::ConnectionId;
use crate::protocol::{self, invalid, Args, RpcError, RpcResult};

/// Most `popupQuestion`s one client agent may have waiting at once; the next is refused. Each
/// goes to every client and into the display log; a person answers them one at a time.
pub const MAX_QUESTIONS_PER_AGENT: usize = 4;
/// Most agent threads one registration keeps open; beginning one more forgets the oldest
/// (an agent that never completes its threads keeps working, in bounded memory).
pub const MAX_AGENT_THREADS: usize = 32;
/// Longest `threadId`, in characters: the SDK sends a UUID (36); a longer one is ignored.
pub const MAX_THREAD_ID_CHARS: usize = 128;
/// The `kind`s of an agent thread (TypeAgent's `AgentMessageKind`).
const THREAD_KINDS: &[&str] = &["bubble", "toast", "inline"];

/// An agent → host invoke with its arguments checked, and what it comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum HostInvoke {
    /// Answered at once: the result (`None`: void) and, for what the agent told its host, a
    /// line for the log.
    Now {
        /// The `invokeResult` value.
        result: Option<Value>,
        /// What the agent said, when worth a log line.
        note: Option<String>,
    },
    /// `queueToggleTransientAgent(actionContextId, agentName, active)`: the connection
    /// checks that the action context is open (it knows which are), then refuses the name.
    QueueToggle {
        /// The action context named.
        action_context_id: u64,
        /// The sub-agent named.
        name: String,
    },
    /// `popupQuestion`: asked of the conversation's clients.
    Popup(PopupQuestion),
}

/// A client agent's `popupQuestion({contextId, message, choices?, defaultId?})`, bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct PopupQuestion {
    /// The question, at most [`MAX_FORM_TEXT_CHARS`] characters.
    pub message: String,
    /// 1 to [`MAX_FORM_CHOICES`] options of at most [`MAX_FORM_TEXT_CHARS`] characters
    /// (`["Yes", "No"]` when the agent gives none, as TypeAgent).
    pub choices: Vec<String>,
    /// The option a cancel or time-out takes; without one they fail.
    pub default_id: Option<usize>,
}

/// The object argument of an agent → host invoke, its fields checked with the protocol's
/// invalid-argument texts.
struct Param<'a> {
    /// The method, for the texts.
    method: &'a str,
    /// The object.
    obj: &'a Map<String, Value>,
}

impl<'a> Param<'a> {
    /// Argument 0, which must be an object.
    fn of(method: &'a str, args: &'a Args) -> RpcResult<Param<'a>> {
        let obj = args.req_object(method, 0, "param")?;
        Ok(Param { method, obj })
    }

    /// A required non-negative integer field.
    fn count(&self, field: &'static str) -> RpcResult<u64> {
        protocol::opt_field_count(Some(self.obj), self.method, 0, field)?
            .ok_or_else(|| invalid(self.method, 0, field, "a non-negative integer"))
    }

    /// A required string field.
    fn string(&self, field: &'static str) -> RpcResult<&'a str> {
        protocol::opt_field_str(Some(self.obj), self.method, 0, field)?
            .ok_or_else(|| invalid(self.method, 0, field, "a string"))
    }

    /// A required boolean field.
    fn boolean(&self, field: &'static str) -> RpcResult<bool> {
        protocol::opt_field_bool(Some(self.obj), self.method, 0, field)?
            .ok_or_else(|| invalid(self.method, 0, field, "a boolean"))
    }

    /// An optional array-of-strings field.
    fn strings(&self, field: &'static str) -> RpcResult<Option<Vec<String>>> {
        let expected = || invalid(self.method, 0, field, "an array of strings");
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(expected),
            Some(_) => Err(expected()),
        }
    }

    /// `contextId`: the registration's one session context, 0 (TypeAgent's text otherwise).
    fn session_context(&self) -> RpcResult<()> {
        match self.count("contextId")? {
            0 => Ok(()),
            id => Err(RpcError::InvalidContextId {
                id,
                out_of_scope: false,
            }),
        }
    }
}

/// `toggleTransientAgent`'s refusal of `name` for `agent` (TypeAgent's checks, in order):
/// not `<agent>.<sub>`, else not a transient sub-agent (Roundtable's agents have none).
pub fn transient_agent_error(agent: &str, name: &str) -> RpcError {
    match name
        .strip_prefix(agent)
        .and_then(|rest| rest.strip_prefix('.'))
    {
        Some(_) => RpcError::TransientSubAgentNotFound(name.to_string()),
        None => RpcError::InvalidSubAgentName(name.to_string()),
    }
}

impl HostInvoke {
    /// Reads `method(args)` sent by client agent `agent` on its channel (see the module
    /// docs for each answer).
    pub fn parse(agent: &str, method: &str, args: &Args) -> RpcResult<HostInvoke> {
        let now =
            |result: Option<Value>, note: Option<String>| Ok(HostInvoke::Now { result, note });
        match method {
            "storageRead" | "storageWrite" | "storageList" | "storageExists" | "storageDelete" => {
                let p = Param::of(method, args)?;
                p.boolean("session")?;
                p.string("storagePath")?;
                if method == "storageWrite" {
                    p.string("data")?;
                }
                p.session_context()?;
                Err(RpcError::StorageNotAvailable)
            }
            "tokenCacheRead" | "tokenCacheWrite" | "tokenCacheDelete" => {
                let p = Param::of(method, args)?;
                p.boolean("session")?;
                if method == "tokenCacheWrite" {
                    p.string("token")?;
                }
                p.session_context()?;
                Err(RpcError::StorageNotAvailable)
            }
            "toggleTransientAgent" => {
                let p = Param::of(method, args)?;
                let name = p.string("name")?;
                p.boolean("enable")?;
                p.session_context()?;
                Err(transient_agent_error(agent, name))
            }
            "queueToggleTransientAgent" => {
                let action_context_id =
                    args.opt_count(method, 0, "actionContextId")?
                        .ok_or_else(|| {
                            invalid(method, 0, "actionContextId", "a non-negative integer")
                        })?;
                let name = args.req_str(method, 1, "agentName")?.to_string();
                if !args.get(2).is_some_and(Value::is_boolean) {
                    return Err(invalid(method, 2, "active", "a boolean"));
                }
                Ok(HostInvoke::QueueToggle {
                    action_context_id,
                    name,
                })
            }
            "addDynamicAgent" => {
                let p = Param::of(method, args)?;
                p.string("name")?;
                if !p.obj.get("manifest").is_some_and(Value::is_object) {
                    return Err(invalid(method, 0, "manifest", "an object"));
                }
                if p.strings("agentInterface")?.is_none() {
                    return Err(invalid(method, 0, "agentInterface", "an array of strings"));
                }
                p.session_context()?;
                Err(RpcError::NotSupported(method.to_string()))
            }
            "removeDynamicAgent" | "forceCleanupDynamicAgent" => {
                let p = Param::of(method, args)?;
                p.string("name")?;
                p.session_context()?;
                Err(RpcError::NotSupported(method.to_string()))
            }
            "getSharedLocalHostPort" => {
                let p = Param::of(method, args)?;
                p.string("agentName")?;
                p.session_context()?;
                Err(RpcError::NotSupported(method.to_string()))
            }
            "setLocalHostPort" => {
                let p = Param::of(method, args)?;
                let port = p.count("port")?;
                p.session_context()?;
                let note = format!("setLocalHostPort {port}: no local views here, ignored");
                now(None, Some(note))
            }
            "registerPort" => {
                let p = Param::of(method, args)?;
                let role = p.string("role")?;
                let port = p.count("port")?;
                p.session_context()?;
                let reg_id = uuid::Uuid::new_v4().to_string();
                let note = format!(
                    "registerPort {role} {port}: no port registry here, answered regId {reg_id}"
                );
                now(Some(json!({"regId": reg_id})), Some(note))
            }
            "releasePort" => {
                let p = Param::of(method, args)?;
                let reg_id = p.string("regId")?;
                protocol::opt_field_count(Some(p.obj), method, 0, "contextId")?;
                now(
                    None,
                    Some(format!("releasePort {reg_id}: nothing registered")),
                )
            }
            "indexes" => {
                let p = Param::of(method, args)?;
                p.string("type")?;
                p.session_context()?;
                now(Some(json!([])), None)
            }
            "reloadAgentSchema" => {
                let p = Param::of(method, args)?;
                p.session_context()?;
                let note = "reloadAgentSchema: the schema is the registration's, nothing to reload";
                now(None, Some(note.to_string()))
            }
            "notifyReadinessChanged" => {
                let p = Param::of(method, args)?;
                p.session_context()?;
                now(None, Some("notifyReadinessChanged".to_string()))
            }
            "notifyClientCountChanged" => {
                let p = Param::of(method, args)?;
                let role = p.string("role")?;
                let count = p.count("count")?;
                p.session_context()?;
                now(
                    None,
                    Some(format!("notifyClientCountChanged {role} {count}")),
                )
            }
            "popupQuestion" => {
                PopupQuestion::parse(&Param::of(method, args)?).map(HostInvoke::Popup)
            }
            _ => Err(RpcError::NoHandler(method.to_string())),
        }
    }
}

impl PopupQuestion {
    /// Reads and bounds `popupQuestion`'s argument.
    fn parse(p: &Param<'_>) -> RpcResult<PopupQuestion> {
        let m = p.method;
        let message = p.string("message")?.to_string();
        let choices = p
            .strings("choices")?
            .unwrap_or_else(|| vec!["Yes".into(), "No".into()]);
        let default_id = protocol::opt_field_count(Some(p.obj), m, 0, "defaultId")?;
        p.session_context()?;
        let too_long = |s: &str| s.chars().count() > MAX_FORM_TEXT_CHARS;
        if too_long(&message) {
            return Err(RpcError::Message(format!(
                "{m}: message is longer than {MAX_FORM_TEXT_CHARS} characters"
            )));
        }
        if choices.is_empty()
            || choices.len() > MAX_FORM_CHOICES
            || choices.iter().any(|c| too_long(c))
        {
            return Err(RpcError::Message(format!(
                "{m}: choices must hold 1 to {MAX_FORM_CHOICES} strings of at most {MAX_FORM_TEXT_CHARS} characters"
            )));
        }
        let default_id = match default_id {
            Some(d) if d as usize >= choices.len() => {
                return Err(RpcError::Message(format!(
                    "{m}: defaultId {d} is not one of the {} choices",
                    choices.len()
                )))
            }
            d => d.map(|d| d as usize),
        };
        Ok(PopupQuestion {
            message,
            choices,
            default_id,
        })
    }
}

/// A client agent's `popupQuestion`, sent by its hosting connection: asked of every
/// unfiltered client of the conversation (`requestInteraction` of type `question`); the
/// answer is the chosen index, or why there is none.
#[derive(Message)]
#[rtype(result = "RpcResult<usize>")]
pub struct AgentPopupQuestion {
    /// The hosting client's connection id in this conversation.
    pub connection_id: ConnectionId,
    /// The asking agent.
    pub name: String,
    /// Its registration.
    pub token: u64,
    /// The question.
    pub question: PopupQuestion,
}

impl Handler<AgentPopupQuestion> for Conversation {
    type Result = ResponseFuture<RpcResult<usize>>;

    /// Refused when the registration is gone or the agent has
    /// [`MAX_QUESTIONS_PER_AGENT`] questions waiting; else asked, and the future waits for
    /// the answer (the actor goes on meanwhile).
    fn handle(&mut self, msg: AgentPopupQuestion, ctx: &mut Self::Context) -> Self::Result {
        let fail = |e: RpcError| -> Self::Result { Box::pin(async move { Err(e) }) };
        if !self.holds_client_agent(&msg.name, msg.token, msg.connection_id) {
            return fail(RpcError::Message(format!(
                "client agent '{}' is not registered any more",
                msg.name
            )));
        }
        let waiting = self.agent_questions(&msg.name);
        if waiting >= MAX_QUESTIONS_PER_AGENT {
            return fail(RpcError::Message(format!(
                "popupQuestion: client agent '{}' already has {waiting} questions waiting (limit {MAX_QUESTIONS_PER_AGENT})",
                msg.name
            )));
        }
        log::info!(
            "conversation {} connection {}: client agent {} asks a question",
            self.setup.id,
            msg.connection_id,
            msg.name
        );
        let (reply, answer) = oneshot::channel();
        self.open_agent_question(&msg.name, msg.question, reply, ctx);
        self.throttle(ctx);
        Box::pin(async move {
            match answer.await {
                Ok(Ok(index)) => Ok(index),
                Ok(Err(why)) => Err(RpcError::Message(why)),
                Err(_) => Err(RpcError::Message(
                    "The conversation closed before an answer".into(),
                )),
            }
        })
    }
}

/// One of the agent's thread calls (`agentThread*`, positional as TypeAgent sends them).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentThreadCall {
    /// The agent's id for the thread (a UUID from the SDK).
    pub thread_id: String,
    /// What it does.
    pub op: ThreadOp,
}

/// What an [`AgentThreadCall`] does.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadOp {
    /// `agentThreadBegin(contextId, threadId, kind)`.
    Begin {
        /// `AgentMessageKind`: `bubble`, `toast` or `inline`.
        kind: String,
    },
    /// `agentThreadSetDisplay(contextId, threadId, content)`.
    SetDisplay {
        /// `DisplayContent`.
        content: Value,
    },
    /// `agentThreadAppendDisplay(contextId, threadId, content, mode)`.
    AppendDisplay {
        /// `DisplayContent`.
        content: Value,
        /// `mode` (absent: `block`, the SDK's default for threads).
        mode: DisplayMode,
    },
    /// `agentThreadComplete(contextId, threadId)`.
    Complete,
}

impl AgentThreadCall {
    /// Reads a thread call: `None` when `method` is not one; `Some(Err)` says why it is
    /// ignored.
    pub fn parse(method: &str, args: &Args) -> Option<Result<AgentThreadCall, String>> {
        let op = match method {
            "agentThreadBegin"
            | "agentThreadSetDisplay"
            | "agentThreadAppendDisplay"
            | "agentThreadComplete" => method,
            _ => return None,
        };
        Some(Self::read(op, args))
    }

    /// The arguments of thread call `method`.
    fn read(method: &str, args: &Args) -> Result<AgentThreadCall, String> {
        let context = args
            .get(0)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{method}: contextId (argument 1) is not a number"))?;
        let thread_id = args
            .get(1)
            .and_then(Value::as_str)
            .filter(|t| t.chars().count() <= MAX_THREAD_ID_CHARS)
            .ok_or_else(|| {
                format!("{method}: threadId (argument 2) is not a string of at most {MAX_THREAD_ID_CHARS} characters")
            })?
            .to_string();
        let content = || {
            args.get(2)
                .cloned()
                .ok_or_else(|| format!("{method}: content (argument 3) is missing"))
        };
        let op = match method {
            "agentThreadBegin" => {
                // TypeAgent looks the session context up here only.
                if context != 0 {
                    return Err(format!("{method}: no session context {context}"));
                }
                let kind = args
                    .get(2)
                    .and_then(Value::as_str)
                    .filter(|k| THREAD_KINDS.contains(k))
                    .ok_or_else(|| {
                        format!("{method}: kind (argument 3) is not bubble, toast or inline")
                    })?;
                ThreadOp::Begin {
                    kind: kind.to_string(),
                }
            }
            "agentThreadSetDisplay" => ThreadOp::SetDisplay {
                content: content()?,
            },
            "agentThreadAppendDisplay" => {
                let mode = match args.get(3) {
                    None => DisplayMode::Block,
                    Some(m) => m.as_str().and_then(DisplayMode::parse).ok_or_else(|| {
                        format!("{method}: mode (argument 4) is not a display mode")
                    })?,
                };
                ThreadOp::AppendDisplay {
                    content: content()?,
                    mode,
                }
            }
            _ => ThreadOp::Complete,
        };
        Ok(AgentThreadCall { thread_id, op })
    }
}

/// An open agent thread.
struct AgentThread {
    /// The agent's `threadId`.
    thread_id: String,
    /// Its `RequestId`: `{requestId: "", clientRequestId: "agent-<name>-<uuid>"}`.
    request_id: Value,
    /// Its `AgentMessageKind`.
    kind: String,
}

/// The open threads of one registration, oldest first (at most [`MAX_AGENT_THREADS`]).
#[derive(Default)]
pub(super) struct AgentThreads {
    /// Open threads.
    open: VecDeque<AgentThread>,
}

/// What a thread call shows: the `IAgentMessage`, the append mode (`None`: `setDisplay`).
pub(super) struct ThreadDisplay {
    /// `{message, requestId, source, sourceIcon?, kind}`.
    message: Value,
    /// `appendDisplay`'s mode; `None` for `setDisplay`.
    mode: Option<DisplayMode>,
    /// Written to the display log (TypeAgent's agent server skips `toast` and `inline`
    /// kinds and `temporary` appends: they are not replayed).
    logged: bool,
}

impl AgentThreads {
    /// Applies `call` of agent `name` (its `emoji` shown with its messages): what to show,
    /// if anything.
    pub(super) fn apply(
        &mut self,
        name: &str,
        emoji: &str,
        call: AgentThreadCall,
    ) -> Option<ThreadDisplay> {
        let index = self.open.iter().position(|t| t.thread_id == call.thread_id);
        let (content, mode) = match call.op {
            ThreadOp::Begin { kind } => {
                // Begun again: a new thread under the same id, as TypeAgent's map does.
                if let Some(i) = index {
                    self.open.remove(i);
                }
                if self.open.len() >= MAX_AGENT_THREADS {
                    let oldest = self.open.pop_front().expect("full");
                    log::debug!(
                        "client agent {name}: thread {} forgotten ({MAX_AGENT_THREADS} open)",
                        oldest.thread_id
                    );
                }
                let client_request_id = format!("agent-{name}-{}", uuid::Uuid::new_v4());
                self.open.push_back(AgentThread {
                    thread_id: call.thread_id,
                    request_id: json!({"requestId": "", "clientRequestId": client_request_id}),
                    kind,
                });
                return None;
            }
            ThreadOp::Complete => {
                if let Some(i) = index {
                    self.open.remove(i);
                }
                return None;
            }
            ThreadOp::SetDisplay { content } => (content, None),
            ThreadOp::AppendDisplay { content, mode } => (content, Some(mode)),
        };
        let Some(thread) = index.map(|i| &self.open[i]) else {
            log::debug!(
                "client agent {name}: display for unknown thread {} ignored",
                call.thread_id
            );
            return None;
        };
        let mut message = json!({"message": content, "requestId": thread.request_id,
            "source": name, "kind": thread.kind});
        if !emoji.is_empty() {
            message["sourceIcon"] = json!(emoji);
        }
        let ephemeral_kind = thread.kind == "toast" || thread.kind == "inline";
        Some(ThreadDisplay {
            message,
            mode,
            logged: !ephemeral_kind && mode != Some(DisplayMode::Temporary),
        })
    }
}

impl Conversation {
    /// Shows an agent thread's display to every unfiltered client (the thread belongs to no
    /// client's request), logging it when it is to be replayed.
    pub(super) fn show_agent_thread(&mut self, shown: ThreadDisplay) {
        let ThreadDisplay {
            message,
            mode,
            logged,
        } = shown;
        let (method, args) = match mode {
            None => {
                if logged {
                    self.log_entry(json!({"type": "set-display", "message": message}));
                }
                ("setDisplay", json!([message]))
            }
            Some(mode) => {
                if logged {
                    self.log_entry(
                        json!({"type": "append-display", "message": message, "mode": mode.as_str()}),
                    );
                }
                ("appendDisplay", json!([message, mode.as_str()]))
            }
        };
        self.emit(OutboundCall::new(method, &args), &Audience::Broadcast(None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Args {
        Args(v.as_array().cloned().unwrap_or_default())
    }

    fn parse(method: &str, v: Value) -> RpcResult<HostInvoke> {
        HostInvoke::parse("phone", method, &args(v))
    }

    #[test]
    fn storage_is_not_available_and_shapes_are_checked() {
        let ok = json!([{"contextId": 0, "session": true, "storagePath": "a.json"}]);
        assert_eq!(
            parse("storageRead", ok).unwrap_err().to_string(),
            "Storage not available"
        );
        assert_eq!(
            parse(
                "storageWrite",
                json!([{"contextId": 0, "session": false, "storagePath": "a"}])
            )
            .unwrap_err()
            .to_string(),
            "Invalid argument 0 (data) of storageWrite: expected a string"
        );
        assert_eq!(
            parse(
                "tokenCacheRead",
                json!([{"contextId": 3, "session": false}])
            )
            .unwrap_err()
            .to_string(),
            "Internal error: Invalid contextId 3"
        );
        assert_eq!(
            parse("tokenCacheDelete", json!(["x"]))
                .unwrap_err()
                .to_string(),
            "Invalid argument 0 (param) of tokenCacheDelete: expected an object"
        );
    }

    #[test]
    fn transient_agent_names() {
        let toggle = |name: &str| {
            parse(
                "toggleTransientAgent",
                json!([{"contextId": 0, "name": name, "enable": true}]),
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(toggle("other.sub"), "Invalid sub agent name: other.sub");
        assert_eq!(toggle("phone"), "Invalid sub agent name: phone");
        assert_eq!(toggle("phonebook.x"), "Invalid sub agent name: phonebook.x");
        assert_eq!(
            toggle("phone.sub"),
            "Transient sub agent not found: phone.sub"
        );
        assert_eq!(
            parse("queueToggleTransientAgent", json!([2, "phone.sub", false])),
            Ok(HostInvoke::QueueToggle {
                action_context_id: 2,
                name: "phone.sub".into()
            })
        );
        assert_eq!(
            parse("queueToggleTransientAgent", json!([{"contextId": 2}]))
                .unwrap_err()
                .to_string(),
            "Invalid argument 0 (actionContextId) of queueToggleTransientAgent: expected a non-negative integer"
        );
    }

    #[test]
    fn popup_questions_are_bounded() {
        let popup = |v: Value| parse("popupQuestion", json!([v]));
        assert_eq!(
            popup(json!({"contextId": 0, "message": "Allow?"})),
            Ok(HostInvoke::Popup(PopupQuestion {
                message: "Allow?".into(),
                choices: vec!["Yes".into(), "No".into()],
                default_id: None
            }))
        );
        assert_eq!(
            popup(json!({"contextId": 0, "message": "Allow?", "choices": []}))
                .unwrap_err()
                .to_string(),
            format!("popupQuestion: choices must hold 1 to {MAX_FORM_CHOICES} strings of at most {MAX_FORM_TEXT_CHARS} characters")
        );
        let long = "x".repeat(MAX_FORM_TEXT_CHARS + 1);
        assert_eq!(
            popup(json!({"contextId": 0, "message": long}))
                .unwrap_err()
                .to_string(),
            format!("popupQuestion: message is longer than {MAX_FORM_TEXT_CHARS} characters")
        );
        assert_eq!(
            popup(json!({"contextId": 0, "message": "?", "choices": ["a"], "defaultId": 1}))
                .unwrap_err()
                .to_string(),
            "popupQuestion: defaultId 1 is not one of the 1 choices"
        );
    }

    #[test]
    fn threads_are_bounded_and_unknown_ones_ignored() {
        let call = |m: &str, v: Value| AgentThreadCall::parse(m, &args(v)).unwrap().unwrap();
        let mut threads = AgentThreads::default();
        for i in 0..=MAX_AGENT_THREADS {
            let begin = call("agentThreadBegin", json!([0, format!("t{i}"), "bubble"]));
            assert!(threads.apply("phone", "", begin).is_none());
        }
        assert_eq!(threads.open.len(), MAX_AGENT_THREADS);
        let set = |t: &str| call("agentThreadSetDisplay", json!([0, t, "hi"]));
        assert!(
            threads.apply("phone", "", set("t0")).is_none(),
            "the oldest went"
        );
        let shown = threads.apply("phone", "📞", set("t1")).expect("open");
        assert_eq!(shown.message["source"], "phone");
        assert_eq!(shown.message["sourceIcon"], "📞");
        assert_eq!(shown.message["requestId"]["requestId"], "");
        assert!(shown.message["requestId"]["clientRequestId"]
            .as_str()
            .unwrap()
            .starts_with("agent-phone-"));
        assert!(shown.logged && shown.mode.is_none());
        threads.apply("phone", "", call("agentThreadComplete", json!([0, "t1"])));
        assert!(threads.apply("phone", "", set("t1")).is_none());
        assert!(
            AgentThreadCall::parse("agentThreadBegin", &args(json!([0, "t", "loud"])))
                .unwrap()
                .is_err()
        );
        assert!(AgentThreadCall::parse("notify", &args(json!([]))).is_none());
    }
}
