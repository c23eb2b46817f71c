//! The agent loop of one turn: send history + tools to the provider, run the tool calls it
//! returns, append the results, repeat until the provider answers without tool calls or the
//! iteration limit is hit. Output goes to a [`TurnSink`] (the conversation, which logs and
//! routes it); the new chat messages come back in the [`TurnOutcome`] and are committed by the
//! conversation only when the turn finishes.
//!
//! Each model call offers the tools of that moment and routes the calls it returns through
//! them ([`super::routing`]: built-ins, the asking tools, `manage_conversation`, and every
//! registered [`ToolServer`]'s tools as `server__tool`). A failing or unknown tool becomes an
//! `is_error` tool result the model sees, never a crashed turn. The images tools return are
//! sent with the later model calls of the turn within a budget ([`super::images`]); the
//! older ones past it are not sent again, and the clients are told.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::questions::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use super::routing::{call_tool, OfferedTools};
use super::usage::{self, Usage};
use super::{
    attachments, AnswerDelta, ChatMessage, ContentBlock, DeltaSink, LocalBoxFuture, Provider,
    ProviderError, ProviderRequest, ProviderResponse, Role, ToolSpec,
};

pub use super::routing::offered_tools;
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
    /// `IAgentMessage` (`toolCall`, `toolResult`) so rich clients can render blocks. The
    /// whole text of an answer that was streamed ([`TurnSink::stream`]) comes here too, once
    /// its model call has ended, with `"streamed": true` in `extra` (and `"thinking": true`
    /// for the model's thinking): what the log keeps and a later client replays.
    fn display(&self, content: Value, extra: Option<Value>);
    /// A piece of the model's answer as it is written ([`AnswerDelta`]): shown to the people
    /// as it grows. Its whole text follows as a [`TurnSink::display`] once the model call has
    /// ended. The default shows nothing.
    fn stream(&self, delta: AnswerDelta) {
        let _ = delta;
    }
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
    /// A first model call refused as longer than the model's context window ends the turn
    /// quietly with [`TurnOutcome::overflow`] set, so its conversation can compact and run it
    /// again; false (the run after that compaction, or a call after tool calls): the exact
    /// error is shown.
    pub compact_on_overflow: bool,
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
    /// The turn's first model call was refused as longer than the model's context window,
    /// and nothing was shown ([`TurnInput::compact_on_overflow`]).
    pub overflow: bool,
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
            overflow: false,
        }
    }
}

/// What a model call streamed before it ended.
#[derive(Debug, Clone, Copy, Default)]
struct Streamed {
    /// Pieces of its text went to the sink.
    text: bool,
    /// Pieces of its thinking went to the sink.
    thinking: bool,
}

/// One model call, its answer streamed to `sink` as it is written
/// ([`Provider::complete_streaming`]). The provider hands pieces to a channel the loop drains
/// while the call runs, so the sink (which the turn only borrows) never leaves this future;
/// the channel holds at most what the provider has read of one answer, which it bounds.
async fn call_streaming(
    provider: &dyn Provider,
    request: ProviderRequest,
    sink: &dyn TurnSink,
) -> (Result<ProviderResponse, ProviderError>, Streamed) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let deltas: DeltaSink = Box::new(move |delta| {
        let _ = tx.send(delta);
    });
    let mut streamed = Streamed::default();
    let mut show = |delta: AnswerDelta| {
        match &delta {
            AnswerDelta::Text(_) => streamed.text = true,
            AnswerDelta::Thinking(_) => streamed.thinking = true,
        }
        sink.stream(delta);
    };
    let call = provider.complete_streaming(request, deltas);
    tokio::pin!(call);
    let response = loop {
        tokio::select! {
            biased;
            Some(delta) = rx.recv() => show(delta),
            response = &mut call => {
                while let Ok(delta) = rx.try_recv() {
                    show(delta);
                }
                break response;
            }
        }
    };
    (response, streamed)
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
        let tools = OfferedTools::of(&input.tool_servers, input.provider.offers_demo_tools());
        let request = ProviderRequest {
            system: input.system.clone(),
            history: input.history.clone(),
            messages: messages.clone(),
            tools: tools.specs.clone(),
        };
        let asked = Instant::now();
        let (response, streamed) = call_streaming(input.provider.as_ref(), request, sink).await;
        sink.step(TurnStep::ModelCall {
            duration: asked.elapsed(),
        });
        let response = match response {
            Ok(r) => r,
            Err(ProviderError::ContextOverflow { .. })
                if input.compact_on_overflow && messages.len() == 1 && !streamed.text =>
            {
                // Its conversation compacts and runs the turn again; nothing to show yet.
                let mut outcome = TurnOutcome::new(messages, None, usage);
                outcome.overflow = true;
                return outcome;
            }
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
                ContentBlock::Thinking { text, .. } if !text.trim().is_empty() => sink.display(
                    json!({"type": "text", "content": text, "kind": "info"}),
                    Some(json!({"thinking": true, "streamed": streamed.thinking})),
                ),
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    sink.display(
                        json!({"type": "markdown", "content": text}),
                        streamed.text.then(|| json!({"streamed": true})),
                    );
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
        // The next model call carries the newest images within the budget.
        let dropped = super::images::keep_within_budget(&mut messages);
        if dropped > 0 {
            let text = format!(
                "{dropped} older images of this turn are not sent to the model again (the \
                 turn's tool images passed {} MiB; the newest are sent)",
                super::images::MAX_TOOL_IMAGE_BYTES >> 20
            );
            sink.display(
                json!({"type": "text", "content": text, "kind": "warning"}),
                None,
            );
        }
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
        tools: offered_tools(&input.tool_servers, input.provider.offers_demo_tools()),
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

#[cfg(test)]
mod tests;
