//! A hosted agent's lifecycle after it was accepted: enabling its schemas, activating it,
//! the lifecycle invokes in order, and its retirement (unregister, leave, conversation gone).

use actix::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use roundtable_actors::agent::client_agent::CallError;
use roundtable_actors::conversation::{
    ActivateClientAgent, AgentAnswer, ClientAgentRemoved, InvokeClientAgent, UnregisterClientAgent,
};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::protocol::{agent_channel, RpcError, AGENT_SERVER_CHANNEL};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::*;
use crate::transport::Connection;

impl Connection {
    /// The startup invokes of a started agent (`updateAgentContext(enable: true)` per schema,
    /// `startBackgroundTasks`; a failure is logged, as TypeAgent goes on without that schema),
    /// then the conversation makes it visible ([`ActivateClientAgent`]) and the registration
    /// is answered.
    pub(super) fn enable_client_agent(
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
    pub(super) fn activate_client_agent(
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
    pub(super) fn run_lifecycle(
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
    pub(super) fn lifecycle_invoke(
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
    pub(in crate::transport) fn unregister_client_agent(
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
    pub(super) fn retire_hosted_agent(
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
    pub(super) fn fail_calls_of(&mut self, name: &str, ctx: &mut Context<Self>) {
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
    pub(in crate::transport) fn drop_agents_of(
        &mut self,
        conversation_id: ConversationId,
        ctx: &mut Context<Self>,
    ) {
        for name in self.agent_names_in(conversation_id) {
            self.retire_hosted_agent(&name, None, ctx);
        }
    }

    /// The names of this socket's agents in `conversation_id` (going ones too).
    pub(super) fn agent_names_in(&self, conversation_id: ConversationId) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(_, h)| h.conversation_id == conversation_id)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The registrations of this socket's agents in `conversation_id` that are not already
    /// going, as the client sent them.
    pub(in crate::transport) fn registrations_in(
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
    pub(in crate::transport) fn retire_agents_then(
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
