//! A client agent's actions as a turn's tools: each registered agent is one tool server of
//! the turns that start after it registered; a tool call is an `executeAction` invoke in a
//! fresh action context, its `ActionResult` the tool result.
//!
//! Who talks to it: the turn (`turn_events.rs`) takes the tool servers when it starts and calls the
//! tools; a result that asks more than its text goes back to the conversation
//! (`ClientActionDone`, `results.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::WeakAddr;
use serde_json::Value;

use super::invoke::invoke_in_action_context;
use super::messages::{ClientAgentHost, OpenAction};
use super::results::ClientActionDone;
use crate::agent::client_agent::{
    action_result_text, execute_action_args, ClientAgentSpec, SessionContext, EXECUTE_ACTION,
};
use crate::agent::turn::{ToolCallContext, ToolOutput, ToolServer};
use crate::agent::{LocalBoxFuture, ToolSpec};
use crate::conversation::Conversation;

impl Conversation {
    /// The tool servers of the running turn: the `--tool-server`s and every client agent.
    pub(in crate::conversation) fn tool_servers(&self) -> HashMap<String, Arc<dyn ToolServer>> {
        let mut servers = self.setup.runtime.tool_servers.clone();
        let turn = self.queue.running().map_or(0, |r| r.turn);
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
