//! The agent loop of one turn: send history + tools to the provider, run the tool calls it
//! returns, append the results, repeat until the provider answers without tool calls or the
//! iteration limit is hit. Output goes to a [`TurnSink`] (the conversation, which logs and
//! routes it); the new chat messages come back in the [`TurnOutcome`] and are committed by the
//! conversation only when the turn finishes.
//!
//! Tool calls are routed by name: built-in tools ([`super::tools`]), the interactive tools
//! (`ask_user`, `ask_user_form`, `propose_action`: [`super::tools::interactive`], answered by
//! clients through the sink), `manage_conversation` ([`super::tools::manage_conversation`],
//! booked with the sink for the turn's end), and `server__tool` names, routed by the `server` prefix to a
//! registered [`ToolServer`]. A failing or unknown tool becomes an `is_error` tool result
//! the model sees, never a crashed turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::interaction::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use super::tools::interactive::{self, ASK_USER_FORM, PROPOSE_ACTION};
use super::tools::{manage_conversation, MANAGE_CONVERSATION};
use super::usage::{self, Usage};
use super::{
    attachments, tools, valid_tool_name, ChatMessage, ContentBlock, LocalBoxFuture, Provider,
    ProviderRequest, Role, ToolSpec,
};

pub use super::tools::interactive::ASK_USER;

/// Separator between an external tool server's name and its tool's name.
pub const SERVER_SEPARATOR: &str = "__";

/// What a tool call gives back: text for the model, images it should look at, and whether
/// the call failed. A failure is a result the model sees, never a failed turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// The result as text (the tool message the model reads), or the error.
    pub text: String,
    /// Images the tool returned (`data:image/…;base64,…` URLs). The model gets them after the
    /// turn's tool results, as it gets a request's attachments; the history keeps a note.
    pub images: Vec<String>,
    /// True when the call failed.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            ..ToolOutput::default()
        }
    }

    /// A failed call: `text` says why.
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ..ToolOutput::default()
        }
    }
}

impl From<Result<String, String>> for ToolOutput {
    fn from(result: Result<String, String>) -> ToolOutput {
        match result {
            Ok(text) => ToolOutput::text(text),
            Err(e) => ToolOutput::error(e),
        }
    }
}

/// What a tool server can reach of the running turn while one of its calls runs.
#[derive(Clone, Copy)]
pub struct ToolCallContext<'a> {
    /// The turn's output: progress goes to [`TurnSink::status`], questions a tool needs
    /// answered (MCP elicitation) to [`TurnSink::ask_form`].
    pub sink: &'a dyn TurnSink,
    /// The directory the request works in ([`TurnInput::working_directory`], already
    /// checked against the server's working-directory policy): offered to tools that take a
    /// path (an MCP server's roots).
    pub working_directory: Option<&'a Path>,
    /// The call's index among the request's actions (`actionIndex` of its `setDisplayInfo`):
    /// what a client agent's `setDynamicDisplay` names.
    pub action_index: usize,
    /// Conversation moves and handoffs the model asks for (`manage_conversation`) are first
    /// put to the requester as a yes/no question: false only for a provider whose calls come
    /// from the requester's typed words alone ([`Provider::acts_on_typed_words_only`]).
    pub ask_before_conversation_actions: bool,
}

/// How a tool server is doing, for `@system config` / `@system config agents`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolServerStatus {
    /// How it is reached, without secrets: `stdio: mcp-server-time --local-timezone UTC`,
    /// `Streamable HTTP: http://127.0.0.1:3001/mcp`.
    pub transport: String,
    /// `connected`, `starting`, `failed: <reason>`, `restarting in 2 s (<reason>)`.
    pub state: String,
    /// Tools offered now.
    pub tools: usize,
}

/// An external source of tools (exposed to the model as `<server>__<tool>`).
pub trait ToolServer: Send + Sync {
    /// The server's tools now (unprefixed names). Read before every model call, so a
    /// server whose list changed is offered its new tools from the next model call on.
    fn tools(&self) -> Vec<ToolSpec>;
    /// Runs one of them. The future may borrow the context (it runs inside the turn).
    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput>;
    /// Its state, for `@system config`; `None` for sources that have none to show (the
    /// agents clients host).
    fn status(&self) -> Option<ToolServerStatus> {
        None
    }
}

/// A step of the turn, reported as it happens: the conversation times the request with them
/// (`CommandResult.metrics`) and tells clients which action runs (`setDisplayInfo`) and what
/// it gave (`appendDiagnosticData`).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnStep {
    /// A model call ended after `duration` (TypeAgent's "parse": translating the request).
    ModelCall {
        /// How long the provider took.
        duration: Duration,
    },
    /// Tool call number `index` (from 0, across the turn's model calls) starts.
    ActionStarted {
        /// Its index in the turn.
        index: usize,
        /// The tool's name as offered (`calculate`, `server__tool`, `agent__action`).
        tool: String,
        /// Its input.
        input: Value,
    },
    /// Tool call `index` ended after `duration`.
    ActionFinished {
        /// Its index in the turn.
        index: usize,
        /// The tool's name as offered.
        tool: String,
        /// What the model is told: the result, or the error.
        result: String,
        /// The call failed.
        is_error: bool,
        /// How long it took.
        duration: Duration,
    },
}

/// Where a turn's output goes.
pub trait TurnSink {
    /// Shows something to the clients (`appendDisplay`). `extra` holds fields merged into the
    /// `IAgentMessage` (`toolCall`, `toolResult`) so rich clients can render blocks.
    fn display(&self, content: Value, extra: Option<Value>);
    /// Asks the user to pick one of `choices`; resolves to the chosen index. `private`: only
    /// the originating client is asked (`requestChoice`), otherwise everyone in the
    /// conversation (`requestInteraction`).
    fn ask(
        &self,
        question: String,
        choices: Vec<String>,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<usize, String>>;
    /// Asks the originating client only to pick one of `choices`, with a checkbox labelled
    /// `checkbox_label` (TypeAgent's `pickRemember` choice); resolves to the pick and the
    /// checkbox. The default refuses (a sink with no one to ask).
    fn ask_remember(
        &self,
        question: String,
        choices: Vec<String>,
        checkbox_label: String,
    ) -> LocalBoxFuture<'static, Result<Picked, String>> {
        let _ = (question, choices, checkbox_label);
        Box::pin(async { Err("nobody here can answer a choice".to_string()) })
    }
    /// Asks a form of several questions (see [`QuestionForm`]); resolves to the answers, or
    /// to [`QuestionFormResponse::cancelled`] when it is dismissed, cancelled or times out.
    /// `private`: only the originating client is asked (`requestForm`), otherwise everyone
    /// (`requestInteraction` of type `form`). The form must pass [`QuestionForm::check`].
    ///
    /// For any source of structured questions, not only the `ask_user_form` tool: an MCP
    /// server's elicitation request (a message and a flat schema of enum, boolean and string
    /// properties) maps onto a form (enum → pick, boolean → yesNo, string → pick with free
    /// text) whose answers, keyed by field id, become the elicitation result (`cancelled` →
    /// `decline`). The default refuses (a sink with no one to ask).
    fn ask_form(
        &self,
        form: QuestionForm,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<QuestionFormResponse, String>> {
        let _ = (form, private);
        Box::pin(async { Err("nobody here can answer a form".to_string()) })
    }
    /// Shows a tool call to everyone before it runs (`requestInteraction` of type
    /// `proposeAction`); resolves to what they decided. A cancel or time-out by a client is an
    /// `Err`. The default refuses (a sink with no one to ask).
    fn propose_action(
        &self,
        proposal: ActionProposal,
    ) -> LocalBoxFuture<'static, Result<ProposalAnswer, String>> {
        let _ = proposal;
        Box::pin(async { Err("nobody here can confirm an action".to_string()) })
    }
    /// Shows a passing status while a tool call runs (an MCP server's progress): a
    /// `temporary` display that the next one replaces, never logged.
    fn status(&self, _text: String) {}
    /// A step of the turn (timing, the action running); ignored unless the sink cares.
    fn step(&self, _step: TurnStep) {}
    /// Asks the client that sent the request to carry out `action` with `data`
    /// (`takeAction(requestId, action, data)`, which clients do not answer), once the turn
    /// has ended: just before the request completes, where `@conversation` sends it. `Err`
    /// says why not (the turn asked for too many). The default refuses (no client here).
    fn client_action(&self, action: &str, data: Value) -> Result<(), String> {
        let _ = data;
        Err(format!("no client here can carry out \"{action}\""))
    }
    /// Asks for a handoff of the conversation `source` (a name or an id) into this one once
    /// the turn has ended; the request then completes with its outcome. `Err` says why not
    /// (one handoff per turn). The default refuses (no conversation here).
    fn handoff(&self, source: &str) -> Result<(), String> {
        let _ = source;
        Err("there is no conversation here to hand off into".to_string())
    }
    /// Whether [`TurnSink::handoff`] would take `source` now, without booking it: a handoff
    /// the requester is asked to allow first is checked here, so nobody is asked about one
    /// that would be refused anyway. The default refuses as `handoff` does.
    fn check_handoff(&self, source: &str) -> Result<(), String> {
        let _ = source;
        Err("there is no conversation here to hand off into".to_string())
    }
}

/// Everything one turn needs.
pub struct TurnInput {
    /// The model.
    pub provider: Arc<dyn Provider>,
    /// System prompt.
    pub system: String,
    /// Committed chat history before this turn (shared with the conversation, not copied).
    pub history: Arc<Vec<ChatMessage>>,
    /// The user's command.
    pub command: String,
    /// The request's attachments (`submitCommand`'s), shown to the model with the command
    /// (see [`attachments`]).
    pub attachments: Vec<Value>,
    /// Provider calls allowed before the loop gives up.
    pub max_iterations: usize,
    /// External tool servers by prefix.
    pub tool_servers: HashMap<String, Arc<dyn ToolServer>>,
    /// The directory the request works in, as the working-directory policy resolved it
    /// (`options.workingDirectory`); for tools that work on files (an MCP server's roots).
    pub working_directory: Option<PathBuf>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// Messages to append to the chat history (starting with the user's; images already
    /// replaced by notes).
    pub messages: Vec<ChatMessage>,
    /// Set when the turn failed (shown as `lastError`).
    pub error: Option<String>,
    /// The usage the turn's last reporting model call gave: its input re-sends everything
    /// before it, so it and its output are the context the conversation occupies after the
    /// turn (the context meter follows it, see [`super::usage`]). `None` when no call
    /// reported usage.
    pub usage: Option<Usage>,
}

impl TurnOutcome {
    /// The outcome of a turn whose messages are `messages`: the user's message and tool
    /// results lose their images, which the history does not keep
    /// ([`attachments::for_history`]), and the model's answers their thinking, which is never
    /// sent back on a later turn ([`ContentBlock::Thinking`]).
    fn new(messages: Vec<ChatMessage>, error: Option<String>, usage: Option<Usage>) -> TurnOutcome {
        let messages = messages
            .into_iter()
            .map(|m| match m.role {
                Role::User => attachments::for_history(m),
                Role::Assistant => ChatMessage {
                    role: Role::Assistant,
                    content: m
                        .content
                        .into_iter()
                        .filter(|b| !matches!(b, ContentBlock::Thinking { .. }))
                        .collect(),
                },
            })
            .collect();
        TurnOutcome {
            messages,
            error,
            usage,
        }
    }
}

/// The tools offered to the model: built-ins, the asking tools, `manage_conversation`, and
/// every server's tools, prefixed.
pub fn offered_tools(servers: &HashMap<String, Arc<dyn ToolServer>>) -> Vec<ToolSpec> {
    let mut specs = tools::builtin_tool_specs();
    specs.extend(interactive::specs());
    specs.push(tools::manage_conversation_spec());
    let mut names: Vec<_> = servers.keys().collect();
    names.sort();
    for server in names {
        for t in servers[server].tools() {
            let name = format!("{server}{SERVER_SEPARATOR}{}", t.name);
            if valid_tool_name(&name) {
                specs.push(ToolSpec { name, ..t });
            } else {
                log::warn!("tool {name:?} of server {server:?} has an invalid name; not offered");
            }
        }
    }
    specs
}

/// Runs the loop. Cancellation is by dropping the future.
pub async fn run_turn(input: TurnInput, sink: &dyn TurnSink) -> TurnOutcome {
    // Only this turn's messages are copied per model call; the history is shared.
    let mut messages = vec![attachments::user_message(
        &input.command,
        &input.attachments,
    )];
    let mut action_index = 0;
    let mut usage = None;
    for _ in 0..input.max_iterations.max(1) {
        // Read per model call: a server whose tool list changed offers the new one.
        let tools = offered_tools(&input.tool_servers);
        let request = ProviderRequest {
            system: input.system.clone(),
            history: input.history.clone(),
            messages: messages.clone(),
            tools: tools.clone(),
        };
        let asked = Instant::now();
        let response = input.provider.complete(request).await;
        sink.step(TurnStep::ModelCall {
            duration: asked.elapsed(),
        });
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                let text = e.to_string();
                sink.display(
                    json!({"type": "text", "content": text, "kind": "error"}),
                    None,
                );
                return TurnOutcome::new(messages, Some(text), usage);
            }
        };
        match response.usage {
            Some(reported) if !reported.is_plausible() => log::warn!(
                "the model reported usage of {} input and {} output tokens, above the {} a \
                 report may carry: ignored",
                reported.input_tokens,
                reported.output_tokens,
                usage::MAX_USAGE_TOKENS
            ),
            Some(reported) => usage = Some(reported),
            None => {}
        }
        let mut calls = Vec::new();
        for block in &response.content {
            match block {
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    sink.display(json!({"type": "markdown", "content": text}), None);
                }
                ContentBlock::ToolUse { id, name, input } => {
                    calls.push((id.clone(), name.clone(), input.clone()))
                }
                _ => {}
            }
        }
        if calls.is_empty() {
            // An answer with nothing in it (the builtin's after results it does not repeat)
            // leaves no empty message in the history, which some APIs refuse.
            if !response.content.is_empty() {
                messages.push(ChatMessage {
                    role: Role::Assistant,
                    content: response.content,
                });
            }
            return TurnOutcome::new(messages, None, usage);
        }
        messages.push(ChatMessage {
            role: Role::Assistant,
            content: response.content,
        });
        let mut results = Vec::new();
        let mut images = Vec::new();
        for (id, name, tool_input) in calls {
            let index = action_index;
            action_index += 1;
            sink.step(TurnStep::ActionStarted {
                index,
                tool: name.clone(),
                input: tool_input.clone(),
            });
            sink.display(
                json!({"type": "text", "content": format!("{name}({tool_input})"), "kind": "info"}),
                Some(json!({"toolCall": {"id": id, "name": name, "input": tool_input}})),
            );
            let started = Instant::now();
            let context = ToolCallContext {
                sink,
                working_directory: input.working_directory.as_deref(),
                action_index: index,
                ask_before_conversation_actions: !input.provider.acts_on_typed_words_only(),
            };
            let output = call_tool(&name, tool_input, &input.tool_servers, context, &tools).await;
            let (content, is_error) = (output.text, output.is_error);
            sink.step(TurnStep::ActionFinished {
                index,
                tool: name.clone(),
                result: content.clone(),
                is_error,
                duration: started.elapsed(),
            });
            sink.display(
                json!({"type": "text", "content": content, "kind": if is_error { "error" } else { "success" }}),
                Some(json!({"toolResult": {"id": id, "name": name, "content": content, "isError": is_error, "images": output.images.len()}})),
            );
            for url in output.images {
                images.push(ContentBlock::Text {
                    text: format!("[image returned by tool call {id} ({name})]"),
                });
                images.push(ContentBlock::Image { url });
            }
            results.push(ContentBlock::ToolResult {
                tool_use_id: id,
                content,
                is_error,
            });
        }
        // Images follow the results in the same message: the provider sends them as a user
        // message after the tool messages, as it sends attachments.
        results.extend(images);
        messages.push(ChatMessage {
            role: Role::User,
            content: results,
        });
    }
    let note = format!(
        "Stopped after {} model calls without a final answer.",
        input.max_iterations.max(1)
    );
    sink.display(
        json!({"type": "text", "content": note, "kind": "warning"}),
        None,
    );
    messages.push(ChatMessage::text(Role::Assistant, note.clone()));
    TurnOutcome::new(messages, Some(note), usage)
}

/// One model call without running anything: what the model would do with `command`
/// (`@explain` / `@translate`).
pub async fn plan(input: TurnInput) -> Result<Vec<ContentBlock>, super::ProviderError> {
    let request = ProviderRequest {
        system: input.system,
        history: input.history,
        messages: vec![attachments::user_message(
            &input.command,
            &input.attachments,
        )],
        tools: offered_tools(&input.tool_servers),
    };
    Ok(input.provider.complete(request).await?.content)
}

/// Renders a plan: the actions as JSON (`translate`) or as prose (`explain`).
pub fn describe_plan(request: &str, blocks: &[ContentBlock], explain: bool) -> String {
    let actions: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { name, input, .. } => {
                Some(json!({"tool": name, "input": input}))
            }
            _ => None,
        })
        .collect();
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    if !explain {
        let body = serde_json::to_string_pretty(&json!({"request": request, "actions": actions}))
            .expect("serializes");
        return format!("```json\n{body}\n```");
    }
    if actions.is_empty() {
        return format!(
            "\"{request}\" needs no tool: the assistant would answer directly:\n\n{text}"
        );
    }
    let steps: Vec<String> = actions
        .iter()
        .map(|a| {
            format!(
                "- call `{}` with `{}`",
                a["tool"].as_str().unwrap_or("?"),
                a["input"]
            )
        })
        .collect();
    format!(
        "To handle \"{request}\", the assistant would first:\n{}\nthen answer from the results.",
        steps.join("\n")
    )
}

/// `propose_action`: shows the proposed call to everyone, then runs it as proposed, as
/// edited (saying so), or not at all.
async fn propose(
    input: Value,
    servers: &HashMap<String, Arc<dyn ToolServer>>,
    context: ToolCallContext<'_>,
    offered: &[ToolSpec],
) -> ToolOutput {
    let sink = context.sink;
    let proposal = match interactive::proposal(&input, offered) {
        Ok(proposal) => proposal,
        Err(e) => return ToolOutput::error(e),
    };
    let tool = proposal.tool.clone();
    let proposed = proposal.input.clone();
    match sink.propose_action(proposal).await {
        Err(e) => ToolOutput::error(e),
        Ok(ProposalAnswer::Cancelled) => {
            ToolOutput::error(format!("the user cancelled the proposed {tool} call"))
        }
        Ok(ProposalAnswer::Run(input)) if input == proposed => {
            Box::pin(call_tool(&tool, input, servers, context, offered)).await
        }
        Ok(ProposalAnswer::Run(input)) => {
            let shown = input.to_string();
            let mut output = Box::pin(call_tool(&tool, input, servers, context, offered)).await;
            if !output.is_error {
                output.text = format!("(the user changed the input to {shown}) {}", output.text);
            }
            output
        }
    }
}

/// Runs one tool call; `offered` are the turn's tools (what `propose_action` may propose).
async fn call_tool(
    name: &str,
    input: Value,
    servers: &HashMap<String, Arc<dyn ToolServer>>,
    context: ToolCallContext<'_>,
    offered: &[ToolSpec],
) -> ToolOutput {
    let sink = context.sink;
    if !valid_tool_name(name) {
        return ToolOutput::error(format!(
            "invalid tool name {name:?}: must match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    match name {
        ASK_USER => return interactive::ask_user(&input, sink).await.into(),
        ASK_USER_FORM => return interactive::ask_user_form(&input, sink).await.into(),
        PROPOSE_ACTION => return propose(input, servers, context, offered).await,
        MANAGE_CONVERSATION => {
            return manage_conversation::run(&input, sink, context.ask_before_conversation_actions)
                .await
                .into()
        }
        _ => {}
    }
    if let Some(result) = tools::run_builtin_tool(name, &input) {
        return result.into();
    }
    if let Some((server, tool)) = name.split_once(SERVER_SEPARATOR) {
        if let Some(s) = servers.get(server) {
            return s.call(tool, input, context).await;
        }
        return ToolOutput::error(format!("no tool server named {server:?}"));
    }
    ToolOutput::error(format!("unknown tool {name:?}"))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::agent::builtin::BuiltinProvider;
    use crate::agent::{ProviderError, ProviderResponse};

    #[derive(Default)]
    struct Recorder {
        shown: RefCell<Vec<Value>>,
        steps: RefCell<Vec<TurnStep>>,
        answer: Option<usize>,
    }

    impl TurnSink for Recorder {
        fn display(&self, content: Value, extra: Option<Value>) {
            self.shown
                .borrow_mut()
                .push(json!({"content": content, "extra": extra}));
        }
        fn ask(
            &self,
            _q: String,
            _c: Vec<String>,
            _p: bool,
        ) -> LocalBoxFuture<'static, Result<usize, String>> {
            let a = self.answer.ok_or_else(|| "cancelled".to_string());
            Box::pin(async move { a })
        }
        fn step(&self, step: TurnStep) {
            self.steps.borrow_mut().push(step);
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn input(provider: Arc<dyn Provider>, command: &str) -> TurnInput {
        TurnInput {
            provider,
            system: String::new(),
            history: Default::default(),
            command: command.into(),
            attachments: Vec::new(),
            max_iterations: 10,
            tool_servers: HashMap::new(),
            working_directory: None,
        }
    }

    #[test]
    fn builtin_loop_calls_calculate_then_answers() {
        let sink = Recorder::default();
        let out = block_on(run_turn(
            input(Arc::new(BuiltinProvider), "what is 2+3"),
            &sink,
        ));
        assert_eq!(out.error, None);
        // user, assistant tool_use, tool result; the empty answer is not kept
        assert_eq!(out.messages.len(), 3);
        let shown = sink.shown.borrow();
        assert_eq!(shown[0]["extra"]["toolCall"]["name"], "calculate");
        assert_eq!(shown[1]["extra"]["toolResult"]["content"], "5");
        // The result is shown once, not repeated as the answer (issue 50 (b)).
        assert_eq!(shown.len(), 2, "{shown:?}");
        // Two model calls around one action, numbered from 0, its result reported.
        let steps = sink.steps.borrow();
        assert!(matches!(steps[0], TurnStep::ModelCall { .. }), "{steps:?}");
        assert!(
            matches!(&steps[1], TurnStep::ActionStarted { index: 0, tool, input }
                if tool == "calculate" && input["expression"] == "2+3"),
            "{steps:?}"
        );
        assert!(
            matches!(&steps[2], TurnStep::ActionFinished { index: 0, result, is_error: false, .. }
                if result == "5"),
            "{steps:?}"
        );
        assert!(matches!(steps[3], TurnStep::ModelCall { .. }), "{steps:?}");
        assert_eq!(steps.len(), 4);
    }

    /// A provider that always asks for a tool: the loop stops at the limit; bad tools are
    /// errors the model sees.
    struct Stubborn;
    impl Provider for Stubborn {
        fn name(&self) -> &str {
            "stubborn"
        }
        fn complete(
            &self,
            r: ProviderRequest,
        ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
            let n = r.message_count();
            Box::pin(async move {
                Ok(ProviderResponse {
                    content: vec![ContentBlock::ToolUse {
                        id: format!("c{n}"),
                        name: if n.is_multiple_of(2) {
                            "no such tool".into()
                        } else {
                            "missing__tool".into()
                        },
                        input: json!({}),
                    }],
                    usage: None,
                })
            })
        }
    }

    #[test]
    fn iteration_limit_and_tool_errors() {
        let sink = Recorder::default();
        let mut i = input(Arc::new(Stubborn), "go");
        i.max_iterations = 3;
        let out = block_on(run_turn(i, &sink));
        assert!(out.error.unwrap().contains("3 model calls"));
        let errors: Vec<_> = out
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    content,
                    is_error: true,
                    ..
                } => Some(content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(errors.len(), 3);
        assert!(errors[0].contains("invalid tool name") || errors[0].contains("no tool server"));
    }

    struct Echo;
    impl ToolServer for Echo {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "say".into(),
                description: "echo".into(),
                input_schema: json!({"type": "object"}),
            }]
        }
        fn call<'a>(
            &'a self,
            tool: &'a str,
            input: Value,
            _context: ToolCallContext<'a>,
        ) -> LocalBoxFuture<'a, ToolOutput> {
            let out = format!("{tool}:{input}");
            Box::pin(async move {
                ToolOutput {
                    text: out,
                    images: vec!["data:image/png;base64,iVBORw0KGgo".into()],
                    is_error: false,
                }
            })
        }
    }

    #[test]
    fn server_tools_are_prefixed_and_routed() {
        let mut servers: HashMap<String, Arc<dyn ToolServer>> = HashMap::new();
        servers.insert("echo".into(), Arc::new(Echo));
        assert!(offered_tools(&servers)
            .iter()
            .any(|t| t.name == "echo__say"));
        let sink = Recorder::default();
        let offered = offered_tools(&servers);
        let r = block_on(call_tool(
            "echo__say",
            json!({"x": 1}),
            &servers,
            ToolCallContext {
                sink: &sink,
                working_directory: None,
                action_index: 0,
                ask_before_conversation_actions: true,
            },
            &offered,
        ));
        assert_eq!(r.text, "say:{\"x\":1}");
        assert_eq!(r.images.len(), 1);
        let sink = Recorder {
            answer: Some(1),
            ..Default::default()
        };
        let r = block_on(call_tool(
            ASK_USER,
            json!({"question": "ok?"}),
            &servers,
            ToolCallContext {
                sink: &sink,
                working_directory: None,
                action_index: 0,
                ask_before_conversation_actions: true,
            },
            &offered,
        ));
        assert_eq!(r.text, "answer: No");
    }

    /// A provider that calls `echo__say` once, then answers with what it was sent.
    struct CallsEchoOnce;
    impl Provider for CallsEchoOnce {
        fn name(&self) -> &str {
            "calls-echo-once"
        }
        fn complete(
            &self,
            r: ProviderRequest,
        ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
            let first = r.messages.len() == 1;
            let last = r.messages.last().cloned();
            Box::pin(async move {
                Ok(ProviderResponse {
                    content: vec![if first {
                        ContentBlock::ToolUse {
                            id: "c1".into(),
                            name: "echo__say".into(),
                            input: json!({}),
                        }
                    } else {
                        ContentBlock::Text {
                            text: serde_json::to_string(&last).unwrap(),
                        }
                    }],
                    usage: None,
                })
            })
        }
    }

    /// A provider that calls `calculate` once, then answers; each call reports the usage
    /// its `reports` gives for its call number.
    struct Reports(fn(usize) -> Option<Usage>);
    impl Provider for Reports {
        fn name(&self) -> &str {
            "reports"
        }
        fn complete(
            &self,
            r: ProviderRequest,
        ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
            let call = r.messages.len() / 2;
            let content = vec![if call == 0 {
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "calculate".into(),
                    input: json!({"expression": "1+1"}),
                }
            } else {
                ContentBlock::Text { text: "2".into() }
            }];
            let usage = (self.0)(call);
            Box::pin(async move { Ok(ProviderResponse { content, usage }) })
        }
    }

    /// The turn's usage is its last reporting model call's (whose input re-sends all the
    /// turn before it); a turn whose calls report nothing has none.
    #[test]
    fn the_last_reported_usage_is_the_turns() {
        let usage = |input| Usage {
            input_tokens: input,
            output_tokens: 5,
            model: None,
        };
        let both = Reports(|call| {
            Some(Usage {
                input_tokens: 100 + call as u64,
                output_tokens: 5,
                model: None,
            })
        });
        let out = block_on(run_turn(input(Arc::new(both), "go"), &Recorder::default()));
        assert_eq!(out.usage, Some(usage(101)));
        let first_only = Reports(|call| {
            (call == 0).then_some(Usage {
                input_tokens: 100,
                output_tokens: 5,
                model: None,
            })
        });
        let out = block_on(run_turn(
            input(Arc::new(first_only), "go"),
            &Recorder::default(),
        ));
        assert_eq!(out.usage, Some(usage(100)));
        let none = Reports(|_| None);
        let out = block_on(run_turn(input(Arc::new(none), "go"), &Recorder::default()));
        assert_eq!((out.messages.len(), out.usage), (4, None));
        // Finding 8 of the third security review: a figure past the bound is not believed;
        // the call before it still counts.
        let absurd = Reports(|call| {
            Some(Usage {
                input_tokens: if call == 0 { 100 } else { i64::MAX as u64 },
                output_tokens: 5,
                model: None,
            })
        });
        let out = block_on(run_turn(
            input(Arc::new(absurd), "go"),
            &Recorder::default(),
        ));
        assert_eq!(out.usage, Some(usage(100)));
        let edge = Reports(|_| {
            Some(Usage {
                input_tokens: usage::MAX_USAGE_TOKENS,
                output_tokens: usage::MAX_USAGE_TOKENS + 1,
                model: None,
            })
        });
        let out = block_on(run_turn(input(Arc::new(edge), "go"), &Recorder::default()));
        assert_eq!(out.usage, None);
    }

    /// A provider that thinks before it answers, then calls a tool, then answers.
    struct Thinks;
    impl Provider for Thinks {
        fn name(&self) -> &str {
            "thinks"
        }
        fn complete(
            &self,
            r: ProviderRequest,
        ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
            let thought = ContentBlock::Thinking {
                text: "let me see".into(),
                signature: Some("sig".into()),
            };
            let content = if r.messages.len() == 1 {
                vec![
                    thought,
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "calculate".into(),
                        input: json!({"expression": "1+1"}),
                    },
                ]
            } else {
                // The turn's own thinking comes back within the turn (Anthropic needs it).
                assert!(r.messages[1].content.contains(&thought), "{:?}", r.messages);
                vec![thought, ContentBlock::Text { text: "2".into() }]
            };
            Box::pin(async move {
                Ok(ProviderResponse {
                    content,
                    usage: None,
                })
            })
        }
    }

    /// The model's thinking stays within its turn: the committed history never holds it.
    #[test]
    fn thinking_is_not_kept_in_the_history() {
        let out = block_on(run_turn(
            input(Arc::new(Thinks), "go"),
            &Recorder::default(),
        ));
        assert_eq!(out.error, None);
        assert_eq!(out.messages.len(), 4);
        assert!(out.messages.iter().all(|m| m
            .content
            .iter()
            .all(|b| !matches!(b, ContentBlock::Thinking { .. }))));
        assert_eq!(out.messages[3].joined_text(), "2");
    }

    /// A tool's images reach the model after the results, and the history keeps a note.
    #[test]
    fn tool_images_go_to_the_model_not_the_history() {
        let mut i = input(Arc::new(CallsEchoOnce), "go");
        i.tool_servers.insert("echo".into(), Arc::new(Echo));
        let out = block_on(run_turn(i, &Recorder::default()));
        let seen = out.messages.last().unwrap().joined_text();
        assert!(seen.contains("\"type\":\"image\""), "{seen}");
        assert!(
            seen.contains("image returned by tool call c1 (echo__say)"),
            "{seen}"
        );
        let results = &out.messages[2];
        assert!(results
            .content
            .iter()
            .all(|b| !matches!(b, ContentBlock::Image { .. })));
        assert!(results.joined_text().contains("not kept in the history"));
    }
}
