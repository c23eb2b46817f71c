//! The calls on a hosted agent's channel: the server's invokes and their answers, the
//! agent's own calls to its conversation, and its invokes to its host.

use actix::prelude::*;

use roundtable_actors::agent::client_agent::{
    CallError, CANCEL_ACTION, MAX_PENDING_INVOKES_PER_CONNECTION,
};
use roundtable_actors::conversation::{
    transient_agent_error, AgentAnswer, AgentCall, AgentPopupQuestion, ClientAgentOutput,
    CloseClientAgentCall, HostInvoke, InvokeClientAgent,
};
use roundtable_actors::protocol::{self, agent_channel, Args, RpcError, AGENT_PREFIX};
use serde_json::{json, Value};

use super::*;
use crate::transport::Connection;

impl Connection {
    /// Whether `channel` is the `agent:<name>` channel of an agent this socket hosts.
    pub(in crate::transport) fn hosts_channel(&self, channel: &str) -> bool {
        channel
            .strip_prefix(AGENT_PREFIX)
            .and_then(|name| self.agents.get(name))
            .is_some_and(|h| h.registered)
    }

    /// An `invokeResult` / `invokeError` from the client (`frame`: its text): the answer of
    /// a pending invoke, or dropped (late, after a time-out, a cancelled turn or unregister;
    /// or never asked).
    pub(in crate::transport) fn on_response(
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
    pub(in crate::transport) fn on_agent_call(&mut self, channel: &str, method: &str, args: &Args) {
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
    pub(in crate::transport) fn agent_context_invoke(
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
    pub(in crate::transport) fn fail_pending_invokes(&mut self) {
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
    pub(super) fn send_agent_invoke(
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
