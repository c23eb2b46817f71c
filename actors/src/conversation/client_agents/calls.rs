//! A client agent's calls while it runs (`notify`, `setDisplay`, `appendDisplay`,
//! `takeAction`, `appendDiagnosticData`, the `agentThread*` calls): each shown to the clients,
//! under the request whose action context it names.
//!
//! Who talks to it: the hosting connection (`src/transport/hosted_agents.rs`) reads the calls
//! on the agent's channel and sends them here (`ClientAgentOutput`); `commands.rs` and
//! `results.rs` find a turn's request and an agent's source fields here.

use std::rc::Rc;

use actix::prelude::*;
use serde_json::{json, Value};

use super::messages::{AgentCall, ClientAgentOutput};
use crate::client::OutboundCall;
use crate::conversation::audience::Audience;
use crate::conversation::request_queue::Request;
use crate::conversation::Conversation;

impl Conversation {
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
    pub(super) fn request_of(&self, turn: u64) -> Option<Rc<Request>> {
        self.queue
            .current(turn)
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

    /// The `IAgentMessage` extra fields of `agent`'s output (see [`Self::agent_source`]).
    pub(super) fn source_of(&self, agent: &str) -> Value {
        let emoji = self
            .client_agents
            .agents
            .get(agent)
            .map(|r| r.spec.emoji.as_str())
            .unwrap_or_default();
        Self::agent_source(agent, emoji)
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
