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
//! The agent's invokes to its host (storage, ports, `popupQuestion`, …: [`HostInvoke`]) are
//! answered by [`Connection::agent_context_invoke`]; only `popupQuestion` waits, for the
//! conversation's clients. They count against the socket's `MAX_IN_FLIGHT` like any invoke.

use actix::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use roundtable_actors::agent::client_agent::{
    agent_context_id, initialize_args, parse_registration, CallError, Lifecycle, SessionContext,
    CANCEL_ACTION, INITIALIZE_AGENT_CONTEXT, MAX_AGENTS_PER_CONNECTION,
    MAX_PENDING_INVOKES_PER_CONNECTION,
};
use roundtable_actors::conversation::{
    transient_agent_error, AbandonClientAgent, ActivateClientAgent, AgentAnswer, AgentCall,
    AgentPopupQuestion, AgentReply, ClientAgentHost, ClientAgentOutput, ClientAgentRemoved,
    CloseClientAgentCall, HostInvoke, InvokeClientAgent, OpenAction, RegisterClientAgent,
    UnregisterClientAgent,
};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::protocol::{
    self, agent_channel, Args, RpcError, RpcResult, AGENT_PREFIX, AGENT_SERVER_CHANNEL,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::Connection;

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

impl Connection {
    /// The relayed conversation a registration means, when it is one: the one named, or the
    /// only one this socket joined.
    fn relayed_agent_target(
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
    pub(super) fn register_relayed_agent(
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
            super::relay::RelayedAgent {
                conversation: id,
                registration: request,
            },
        );
    }

    /// The conversation a client agent request means: the given one (`Not joined to
    /// conversation: <id>` unless this socket joined it), else the only one joined.
    fn agent_conversation(
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
    pub(super) fn register_client_agent(
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
    fn start_client_agent(
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

    /// The startup invokes of a started agent (`updateAgentContext(enable: true)` per schema,
    /// `startBackgroundTasks`; a failure is logged, as TypeAgent goes on without that schema),
    /// then the conversation makes it visible ([`ActivateClientAgent`]) and the registration
    /// is answered.
    fn enable_client_agent(
        &mut self,
        name: String,
        token: u64,
        conversation_id: ConversationId,
        call_id: u64,
        ctx: &mut Context<Self>,
    ) {
        let steps = self
            .agents
            .get(&name)
            .and_then(|h| Some(h.lifecycle.startup(h.session.as_ref()?)))
            .unwrap_or_default();
        let agent = name.clone();
        let then: AfterLifecycle = Box::new(move |act, ctx| {
            act.activate_client_agent(name, token, conversation_id, call_id, ctx);
        });
        self.run_lifecycle(agent, token, steps.into(), false, then, ctx);
    }

    /// The startup invokes ended: the conversation makes the agent visible, and the
    /// registration is answered (an agent gone meanwhile fails it; an agent the conversation
    /// no longer has is closed).
    fn activate_client_agent(
        &mut self,
        name: String,
        token: u64,
        conversation_id: ConversationId,
        call_id: u64,
        ctx: &mut Context<Self>,
    ) {
        let (ch, m) = (AGENT_SERVER_CHANNEL, "registerClientAgent");
        let hosted = self
            .agents
            .get(&name)
            .filter(|h| h.token == token && !h.closing);
        let (Some(hosted), Some(joined)) = (hosted, self.joined.get(&conversation_id)) else {
            return self.reply(ch, call_id, m, Err(interrupted(&name)));
        };
        let agent_context_id = hosted
            .session
            .as_ref()
            .and_then(|s| s.agent_context_id.clone());
        let req = joined.conversation.send(ActivateClientAgent {
            connection_id: joined.connection_id,
            name: name.clone(),
            token,
            agent_context_id,
        });
        ctx.spawn(req.into_actor(self).map(move |res, act, ctx| {
            let res = res.unwrap_or_else(|_| {
                Err(RpcError::ConversationNotFound(conversation_id.to_string()))
            });
            match res {
                Ok(()) => log::info!(
                    "socket {}: hosts client agent {name} in conversation {conversation_id}",
                    act.socket_id
                ),
                Err(_) => {
                    let ours = act.agents.get(&name).is_some_and(|h| h.token == token);
                    if ours {
                        act.retire_hosted_agent(&name, None, ctx);
                    }
                }
            }
            act.reply(ch, call_id, m, res.map(|()| None));
        }));
    }

    /// Sends `name`'s lifecycle invokes `steps` one after the other, each once the previous
    /// one answered (or failed: logged), then runs `then`. Stops early, still running
    /// `then`, when the socket closes or the registration `token` is gone (or, unless
    /// `teardown`, is closing).
    fn run_lifecycle(
        &mut self,
        name: String,
        token: u64,
        mut steps: VecDeque<(&'static str, Value)>,
        teardown: bool,
        then: AfterLifecycle,
        ctx: &mut Context<Self>,
    ) {
        let live = self
            .agents
            .get(&name)
            .is_some_and(|h| h.token == token && (teardown || !h.closing));
        let next = steps.pop_front().filter(|_| live && !self.closing);
        let Some((method, args)) = next else {
            return then(self, ctx);
        };
        let answer = self.lifecycle_invoke(&name, token, method, args, ctx);
        ctx.spawn(answer.into_actor(self).map(move |answer, act, ctx| {
            match answer {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => log::warn!(
                    "socket {}: {method} of client agent {name}: {e}",
                    act.socket_id
                ),
                Err(_) => log::debug!(
                    "socket {}: {method} of client agent {name}: no answer",
                    act.socket_id
                ),
            }
            act.run_lifecycle(name, token, steps, teardown, then, ctx);
        }));
    }

    /// Sends a lifecycle invoke to `name` (registration `token`), even while it starts or
    /// closes; the answer (or why there is none) arrives on the receiver.
    fn lifecycle_invoke(
        &mut self,
        name: &str,
        token: u64,
        method: &'static str,
        args: Value,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<Result<AgentAnswer, CallError>> {
        let (reply, answer) = oneshot::channel();
        let invoke = InvokeClientAgent {
            name: name.to_string(),
            token,
            method,
            args,
            action: None,
            keep_text: false,
            reply,
        };
        self.send_agent_invoke(invoke, true, ctx);
        answer
    }

    /// `unregisterClientAgent`: the conversation removes the agent whoever registered it;
    /// when it was this socket's, its waiting calls fail, its teardown invokes run
    /// ([`Connection::retire_hosted_agent`]), then its channel goes and the answer goes out.
    pub(super) fn unregister_client_agent(
        &mut self,
        call_id: u64,
        name: String,
        conversation: Option<ConversationRef>,
        ctx: &mut Context<Self>,
    ) {
        let (ch, m) = (AGENT_SERVER_CHANNEL, "unregisterClientAgent");
        if let Some(id) = self.remote_agents.get(&name).map(|a| a.conversation) {
            // The serving node's virtual connection answers (the client's callId).
            if self.relay_invoke(
                id,
                call_id,
                m,
                json!([{"name": name, "conversationId": id}]),
            ) {
                self.remote_agents.remove(&name);
                return;
            }
        }
        let conversation_id = match self.agent_conversation(conversation.as_ref()) {
            Ok(id) => id,
            Err(e) => return self.reply(ch, call_id, m, Err(e)),
        };
        let joined = &self.joined[&conversation_id];
        let req = joined.conversation.send(UnregisterClientAgent {
            connection_id: joined.connection_id,
            name: name.clone(),
        });
        ctx.spawn(req.into_actor(self).map(move |res, act, ctx| {
            let res = res.unwrap_or_else(|_| {
                Err(RpcError::ConversationNotFound(conversation_id.to_string()))
            });
            let ours = act
                .agents
                .get(&name)
                .is_some_and(|h| h.conversation_id == conversation_id && !h.closing);
            if res.is_ok() && ours {
                // Answered once the agent is closed, as TypeAgent awaits `removeClientAgent`.
                let then: AfterLifecycle = Box::new(move |act, _| {
                    act.reply(ch, call_id, m, Ok(None));
                });
                return act.retire_hosted_agent(&name, Some(then), ctx);
            }
            act.reply(ch, call_id, m, res.map(|()| None));
        }));
    }

    /// A hosted agent goes (unregistered, this socket left its conversation, the
    /// conversation gone): its waiting calls fail (`unregistered`), its teardown invokes run
    /// one after the other when its context was started (`stopBackgroundTasks`,
    /// `updateAgentContext(enable: false)` per schema, `closeAgentContext`, as it lists
    /// them; none once the socket closes), then its channel goes and `then` runs.
    fn retire_hosted_agent(
        &mut self,
        name: &str,
        then: Option<AfterLifecycle>,
        ctx: &mut Context<Self>,
    ) {
        let Some(hosted) = self.agents.get_mut(name).filter(|h| !h.closing) else {
            if let Some(then) = then {
                then(self, ctx);
            }
            return;
        };
        hosted.closing = true;
        let token = hosted.token;
        let steps = match &hosted.session {
            Some(session) if hosted.started => hosted.lifecycle.teardown(session),
            _ => Vec::new(),
        };
        self.fail_calls_of(name, ctx);
        let agent = name.to_string();
        let done: AfterLifecycle = Box::new(move |act, ctx| {
            if act.agents.get(&agent).is_some_and(|h| h.token == token) {
                act.agents.remove(&agent);
                log::info!(
                    "socket {}: no longer hosts client agent {agent}",
                    act.socket_id
                );
            }
            if let Some(then) = then {
                then(act, ctx);
            }
        });
        self.run_lifecycle(name.to_string(), token, steps.into(), true, done, ctx);
    }

    /// Fails the waiting calls to a hosted agent (`unregistered`).
    fn fail_calls_of(&mut self, name: &str, ctx: &mut Context<Self>) {
        let channel = agent_channel(name);
        let waiting: Vec<(String, u64)> = self
            .pending
            .keys()
            .filter(|(c, _)| *c == channel)
            .cloned()
            .collect();
        for key in waiting {
            if let Some(p) = self.pending.remove(&key) {
                ctx.cancel_future(p.timer);
                let _ = p.reply.send(Err(CallError::Unregistered(p.name)));
            }
        }
    }

    /// This socket left `conversation_id` (or it went away): its agents there go.
    pub(super) fn drop_agents_of(
        &mut self,
        conversation_id: ConversationId,
        ctx: &mut Context<Self>,
    ) {
        for name in self.agent_names_in(conversation_id) {
            self.retire_hosted_agent(&name, None, ctx);
        }
    }

    /// The names of this socket's agents in `conversation_id` (going ones too).
    fn agent_names_in(&self, conversation_id: ConversationId) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(_, h)| h.conversation_id == conversation_id)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The registrations of this socket's agents in `conversation_id` that are not already
    /// going, as the client sent them.
    pub(super) fn registrations_in(
        &self,
        conversation_id: ConversationId,
    ) -> Vec<ClientAgentRequest> {
        self.agents
            .values()
            .filter(|h| h.conversation_id == conversation_id && !h.closing)
            .map(|h| h.registration.clone())
            .collect()
    }

    /// The conversation moved to another node: this socket's agents there go as for
    /// [`drop_agents_of`](Self::drop_agents_of) (their teardown runs), and `then` runs once
    /// the last one has gone, so that registering them again cannot meet their names still
    /// taken.
    pub(super) fn retire_agents_then(
        &mut self,
        conversation_id: ConversationId,
        then: AfterLifecycle,
        ctx: &mut Context<Self>,
    ) {
        let names = self.agent_names_in(conversation_id);
        if names.is_empty() {
            return then(self, ctx);
        }
        let remaining = Rc::new(Cell::new(names.len()));
        let then = Rc::new(RefCell::new(Some(then)));
        for name in names {
            let (remaining, then) = (remaining.clone(), then.clone());
            let one_gone: AfterLifecycle = Box::new(move |act, ctx| {
                remaining.set(remaining.get() - 1);
                if remaining.get() == 0 {
                    if let Some(then) = then.borrow_mut().take() {
                        then(act, ctx);
                    }
                }
            });
            self.retire_hosted_agent(&name, Some(one_gone), ctx);
        }
    }

    /// Whether `channel` is the `agent:<name>` channel of an agent this socket hosts.
    pub(super) fn hosts_channel(&self, channel: &str) -> bool {
        channel
            .strip_prefix(AGENT_PREFIX)
            .and_then(|name| self.agents.get(name))
            .is_some_and(|h| h.registered)
    }

    /// An `invokeResult` / `invokeError` from the client (`frame`: its text): the answer of
    /// a pending invoke, or dropped (late, after a time-out, a cancelled turn or unregister;
    /// or never asked).
    pub(super) fn on_response(
        &mut self,
        channel: String,
        call_id: u64,
        outcome: Result<Option<Value>, String>,
        frame: &str,
        ctx: &mut Context<Self>,
    ) {
        let Some(p) = self.pending.remove(&(channel, call_id)) else {
            log::debug!(
                "socket {}: answer #{call_id} to no pending invoke, dropped",
                self.socket_id
            );
            return;
        };
        ctx.cancel_future(p.timer);
        let name = p.name;
        let keep_text = p.keep_text;
        let answer = outcome
            .map(|result| AgentAnswer {
                text: if keep_text { raw_result(frame) } else { None },
                result,
            })
            .map_err(|error| CallError::Failed { name, error });
        let _ = p.reply.send(answer);
    }

    /// A `call` on the channel of an agent this socket hosts: routed to its conversation
    /// (see the module docs), or ignored with a debug log.
    pub(super) fn on_agent_call(&mut self, channel: &str, method: &str, args: &Args) {
        let Some(name) = channel.strip_prefix(AGENT_PREFIX) else {
            return;
        };
        let Some(hosted) = self.agents.get(name).filter(|h| h.registered) else {
            return;
        };
        let (call, context) = match AgentCall::parse(method, args) {
            Ok(parsed) => parsed,
            Err(e) => {
                log::debug!("socket {}: {channel}: call ignored: {e}", self.socket_id);
                return;
            }
        };
        let turn = match context {
            None => None,
            Some(id) => {
                let open = self.pending.iter().find_map(|((c, _), p)| {
                    p.action
                        .filter(|a| c == channel && a.action_context_id == id)
                        .map(|a| a.turn)
                });
                let Some(turn) = open else {
                    log::debug!(
                        "socket {}: {channel}: {method} names actionContextId {id}, which is not open; ignored",
                        self.socket_id
                    );
                    return;
                };
                Some(turn)
            }
        };
        let Some(joined) = self.joined.get(&hosted.conversation_id) else {
            return;
        };
        let output = ClientAgentOutput {
            connection_id: joined.connection_id,
            name: name.to_string(),
            token: hosted.token,
            turn,
            call,
        };
        if joined.conversation.try_send(output).is_err() {
            log::warn!(
                "socket {}: conversation busy, {method} of client agent {name} dropped",
                self.socket_id
            );
        }
    }

    /// An invoke the agent sends its host on its channel (TypeAgent's
    /// `AgentContextInvokeFunctions`; each answer is explained in the conversation's
    /// `agent_context.rs`): answered here at once, except `popupQuestion`, which its
    /// conversation asks of its clients. What the agent tells its host is logged with the
    /// conversation and connection.
    pub(super) fn agent_context_invoke(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        args: Args,
        ctx: &mut Context<Self>,
    ) {
        let name = channel[AGENT_PREFIX.len()..].to_string();
        let Some(hosted) = self.agents.get(&name).filter(|h| h.registered) else {
            return self.reply(
                &channel,
                call_id,
                &method,
                Err(RpcError::NoHandler(method.clone())),
            );
        };
        let Some(joined) = self.joined.get(&hosted.conversation_id) else {
            let error = RpcError::ConversationNotFound(hosted.conversation_id.to_string());
            return self.reply(&channel, call_id, &method, Err(error));
        };
        let parsed = match HostInvoke::parse(&name, &method, &args) {
            Ok(parsed) => parsed,
            Err(e) => return self.reply(&channel, call_id, &method, Err(e)),
        };
        match parsed {
            HostInvoke::Now { result, note } => {
                if let Some(note) = note {
                    log::info!(
                        "socket {}: client agent {name} (conversation {}, connection {}): {note}",
                        self.socket_id,
                        hosted.conversation_id,
                        joined.connection_id
                    );
                }
                self.reply(&channel, call_id, &method, Ok(result));
            }
            HostInvoke::QueueToggle {
                action_context_id,
                name: sub_agent,
            } => {
                let open = self.pending.iter().any(|((c, _), p)| {
                    *c == channel
                        && p.action
                            .is_some_and(|a| a.action_context_id == action_context_id)
                });
                let error = if open {
                    transient_agent_error(&name, &sub_agent)
                } else {
                    RpcError::InvalidContextId {
                        id: action_context_id,
                        out_of_scope: action_context_id < hosted.action_contexts_sent,
                    }
                };
                self.reply(&channel, call_id, &method, Err(error));
            }
            HostInvoke::Popup(question) => {
                let ask = joined.conversation.send(AgentPopupQuestion {
                    connection_id: joined.connection_id,
                    name: name.clone(),
                    token: hosted.token,
                    question,
                });
                let conversation_id = hosted.conversation_id;
                self.answer(ctx, channel, call_id, method, async move {
                    match ask.await {
                        Ok(answer) => answer.map(|index| Some(json!(index))),
                        Err(_) => Err(RpcError::ConversationNotFound(conversation_id.to_string())),
                    }
                });
            }
        }
    }

    /// The socket is closing: every waiting call fails (`disconnected`).
    pub(super) fn fail_pending_invokes(&mut self) {
        for (_, p) in self.pending.drain() {
            let _ = p.reply.send(Err(CallError::Disconnected(p.name)));
        }
    }
}

impl Handler<InvokeClientAgent> for Connection {
    type Result = ();

    /// Sends the invoke on the agent's channel and waits (bounded in number and time).
    fn handle(&mut self, msg: InvokeClientAgent, ctx: &mut Self::Context) {
        self.send_agent_invoke(msg, false, ctx);
    }
}

impl Connection {
    /// Sends an invoke on a hosted agent's channel and waits (bounded in number and time);
    /// a `lifecycle` invoke goes out while the agent closes too (nothing else does).
    fn send_agent_invoke(
        &mut self,
        msg: InvokeClientAgent,
        lifecycle: bool,
        ctx: &mut Context<Self>,
    ) {
        let InvokeClientAgent {
            name,
            token,
            method,
            args,
            action,
            keep_text,
            reply,
        } = msg;
        let hosted = self
            .agents
            .get_mut(&name)
            .filter(|h| h.token == token && h.registered && (lifecycle || !h.closing));
        let Some(hosted) = hosted else {
            let _ = reply.send(Err(CallError::NotRegistered(name)));
            return;
        };
        if self.closing {
            let _ = reply.send(Err(CallError::Disconnected(name)));
            return;
        }
        if self.pending.len() >= MAX_PENDING_INVOKES_PER_CONNECTION {
            let limit = MAX_PENDING_INVOKES_PER_CONNECTION;
            let _ = reply.send(Err(CallError::Busy { name, limit }));
            return;
        }
        let call_id = hosted.next_call_id;
        hosted.next_call_id += 1;
        if let Some(open) = action {
            hosted.action_contexts_sent =
                hosted.action_contexts_sent.max(open.action_context_id + 1);
        }
        let channel = agent_channel(&name);
        log::debug!(
            "socket {}: {method} #{call_id} on {channel} (conversation {})",
            self.socket_id,
            hosted.conversation_id
        );
        self.send(protocol::invoke_frame(&channel, call_id, method, &args));
        let timeout = self.state.config.client_agent_timeout;
        let key = (channel, call_id);
        let timer = ctx.run_later(timeout, {
            let key = key.clone();
            move |act, _| {
                if let Some(p) = act.pending.remove(&key) {
                    log::info!(
                        "socket {}: {} #{} on {} timed out",
                        act.socket_id,
                        method,
                        key.1,
                        key.0
                    );
                    let seconds = timeout.as_secs_f64();
                    let _ = p.reply.send(Err(CallError::Timeout {
                        name: p.name,
                        seconds,
                    }));
                }
            }
        });
        let pending = PendingInvoke {
            name,
            method,
            action,
            keep_text,
            reply,
            timer,
        };
        self.pending.insert(key, pending);
    }
}

impl Handler<CloseClientAgentCall> for Connection {
    type Result = ();

    /// The waiting side of a call went away (its turn was cancelled): stop waiting, and send
    /// `cancelAction` when asked; the late answer finds nothing pending and is dropped.
    fn handle(&mut self, msg: CloseClientAgentCall, ctx: &mut Self::Context) {
        let channel = agent_channel(&msg.name);
        let Some(hosted) = self
            .agents
            .get_mut(&msg.name)
            .filter(|h| h.token == msg.token && h.registered)
        else {
            return;
        };
        let key = self.pending.iter().find_map(|(key, p)| {
            (key.0 == channel
                && p.action
                    .is_some_and(|a| a.action_context_id == msg.action_context_id))
            .then(|| key.clone())
        });
        let Some(p) = key.and_then(|key| self.pending.remove(&key)) else {
            return;
        };
        ctx.cancel_future(p.timer);
        log::info!(
            "socket {}: {} with actionContextId {} on {channel} cancelled by its turn",
            self.socket_id,
            p.method,
            msg.action_context_id
        );
        if msg.cancel_action && !self.closing {
            let call_id = hosted.next_call_id;
            hosted.next_call_id += 1;
            let args = json!([{"actionContextId": msg.action_context_id}]).to_string();
            self.send(protocol::call_frame(
                &channel,
                call_id,
                CANCEL_ACTION,
                &args,
            ));
        }
    }
}

impl Handler<ClientAgentRemoved> for Connection {
    type Result = ();

    /// Another client unregistered this socket's agent: forget it, if it is still that
    /// registration.
    fn handle(&mut self, msg: ClientAgentRemoved, ctx: &mut Self::Context) {
        let same = self
            .agents
            .get(&msg.name)
            .is_some_and(|h| h.token == msg.token && h.conversation_id == msg.conversation_id);
        if same {
            log::info!(
                "socket {}: client agent {} unregistered by another client of conversation {}",
                self.socket_id,
                msg.name,
                msg.conversation_id
            );
            self.retire_hosted_agent(&msg.name, None, ctx);
        }
    }
}
