//! `@<agent> …` commands of a client agent: its command tree (`getCommands`), the command
//! and its parameters resolved and parsed as TypeAgent's `parseCommand` does, the
//! `executeCommand` invoke, and its result shown before the request completes.
//!
//! Who talks to it: the conversation's commands (`commands.rs` runs `@<agent> …`), completion
//! (`completion.rs` lists and completes the agents' commands through `ClientCommandHost`), the
//! running command itself (`ClientCommandEvent`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Map, Value};

use super::invoke::{call_error_text, invoke_in_action_context, send_invoke};
use super::messages::{AgentAnswer, ClientAgentHost, OpenAction};
use super::Registered;
use crate::agent::client_agent::command::{
    command_usage, next_word, parse_descriptors, parse_params, resolve, table_usage, trim_start_js,
    Descriptors,
};
use crate::agent::client_agent::{
    execute_command_args, CallError, ClientAgentSpec, SessionContext, EXECUTE_COMMAND,
    GET_COMMANDS, GET_COMMAND_COMPLETION,
};
use crate::conversation::routing::DisplayMode;
use crate::conversation::Conversation;

impl Conversation {
    /// Every client agent as `@` commands see it (completion lists them under `Agent
    /// Names` when they run commands).
    pub(in crate::conversation) fn command_hosts(&self) -> Vec<ClientCommandHost> {
        self.client_agents
            .agents
            .values()
            .map(Registered::command_host)
            .collect()
    }

    /// The command-running client agent `text` names (`@<agent> …`), if any.
    pub(in crate::conversation) fn client_command_host(
        &self,
        text: &str,
    ) -> Option<ClientCommandHost> {
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
    pub(in crate::conversation) fn start_client_command(
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

/// A client agent's `@` commands: its command tree, its parameter completion and running a
/// command, each an invoke on its channel with its session context's params.
#[derive(Clone)]
pub struct ClientCommandHost {
    /// What the agent offers (name, emoji, which methods it implements).
    pub spec: Arc<ClientAgentSpec>,
    /// Where its invokes go.
    pub(super) host: ClientAgentHost,
    /// The registration's `actionContextId` counter.
    pub(super) next_action_context: Arc<AtomicU64>,
    /// The registration's session context.
    pub(super) session: Arc<SessionContext>,
}

impl ClientCommandHost {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// An invoke that opens no action context; its answer, or the error text.
    pub(super) async fn invoke(
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
