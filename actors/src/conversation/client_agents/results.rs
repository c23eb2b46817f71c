//! What a client agent's result asks beyond its display (TypeAgent's `emitActionResult`):
//! its error or `displayContent` shown, a `dynamicDisplayId` sent as `setDynamicDisplay`, a
//! `pendingChoice` asked of the request's originator (`AgentChoice`); the answered choice's
//! `handleChoice` run in a fresh action context and its result shown under the choice's
//! request.
//!
//! Who talks to it: a turn's tool call (`ClientActionDone`, `tools.rs`), a finished command
//! (`commands.rs`), the choices (`choices.rs` keeps the `AgentChoice`s and hands an answer to
//! `answer_agent_choice`), the agent's calls (`calls.rs` notes the errors a `handleChoice`
//! shows).

use std::sync::atomic::Ordering;

use actix::prelude::*;
use serde_json::{json, Value};

use super::invoke::{call_error_text, invoke_in_action_context};
use super::messages::{AgentCall, OpenAction};
use crate::agent::client_agent::choice::{
    dynamic_display_args, handle_choice_args, AskedChoice, ExpectedAnswer,
};
use crate::agent::client_agent::{CallError, HANDLE_CHOICE};
use crate::agent::LocalBoxFuture;
use crate::conversation::request_queue::Request;
use crate::conversation::routing::DisplayMode;
use crate::conversation::Conversation;
use crate::protocol::{RpcError, RpcResult};

/// A client agent's choice waiting for `respondToChoice` (TypeAgent's `pendingChoiceRoutes`
/// entry: the agent, the request, the action's index), with the registration it was asked
/// for and what its answer must be.
pub(in crate::conversation) struct AgentChoice {
    /// The agent.
    pub(super) agent: String,
    /// Its registration (a later registration of the name is another agent).
    pub(super) token: u64,
    /// The request whose result asked it, without its text, attachments and options: the
    /// agent's `handleChoice` shows under it.
    request: Request,
    /// The index of the action whose result asked it (0 for a command, as TypeAgent).
    action_index: usize,
    /// What the answer must be.
    expects: ExpectedAnswer,
    /// Its number among the conversation's agent choices: the oldest goes first past the
    /// bound, and the time-out of an earlier choice of the same id does not touch it.
    pub(in crate::conversation) asked: u64,
}

impl AgentChoice {
    /// Checks a `respondToChoice` response against what was asked.
    pub(in crate::conversation) fn check(&self, response: &Value) -> Result<(), String> {
        self.expects.check(response)
    }
}

/// A `handleChoice` waiting for its agent.
pub(super) struct ChoiceCall {
    /// The agent.
    agent: String,
    /// Its registration.
    token: u64,
    /// The choice's request: what the agent shows goes under it.
    pub(super) request: Request,
    /// The choice's action index (a chained choice or dynamic display names it).
    action_index: usize,
    /// The text of the last error shown meanwhile (TypeAgent's `CommandResult.lastError`).
    last_error: Option<String>,
}

impl Conversation {
    /// TypeAgent's `emitActionResult` for a client agent's command or choice `result` under
    /// `request`: an `error` is shown as an error (its `errorDisplayContent` if given) and is
    /// the `Err` text; else its `displayContent` is shown as a block, then what it asks
    /// beyond ([`Self::result_requests`]; `token`: the agent's registration, if it still
    /// has one; `at`: the action index and schema name).
    pub(super) fn show_agent_result(
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
    pub(in crate::conversation) fn answer_agent_choice(
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
        let turn = self.queue.next_turn();
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
    pub(super) fn note_choice_error(&mut self, turn: Option<u64>, call: &AgentCall) {
        let (AgentCall::SetDisplay { content } | AgentCall::AppendDisplay { content, .. }) = call
        else {
            return;
        };
        let choice_call = turn.and_then(|t| self.client_agents.choice_calls.get_mut(&t));
        if let (Some(c), Some(text)) = (choice_call, error_text(content)) {
            c.last_error = Some(text);
        }
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
pub(super) struct ClientActionDone {
    /// The turn that ran it.
    pub(super) turn: u64,
    /// The agent.
    pub(super) agent: String,
    /// The registration the call was made for.
    pub(super) token: u64,
    /// The call's index among the request's actions.
    pub(super) action_index: usize,
    /// The action's schema (`<agent>` or `<agent>.<sub>`).
    pub(super) schema_name: String,
    /// The `ActionResult`.
    pub(super) result: Value,
}

impl Handler<ClientActionDone> for Conversation {
    type Result = ();

    /// For the running request only (a cancelled turn's result asks nothing).
    fn handle(&mut self, msg: ClientActionDone, ctx: &mut Self::Context) {
        let Some(request) = self.queue.current(msg.turn).map(|r| r.request.clone()) else {
            return;
        };
        let at = (msg.action_index, msg.schema_name.as_str());
        let token = Some(msg.token);
        self.result_requests(&request, &msg.agent, token, at, &msg.result, ctx);
        self.throttle(ctx);
    }
}
