//! The agent loop of one turn: send history + tools to the provider, run the tool calls it
//! returns, append the results, repeat until the provider answers without tool calls or the
//! iteration limit is hit. Output goes to a [`TurnSink`] (the conversation, which logs and
//! routes it); the new chat messages come back in the [`TurnOutcome`] and are committed by the
//! conversation only when the turn finishes.
//!
//! Tool calls are routed by name: built-in tools ([`super::tools`]), the interactive `ask_user`
//! tool (answered by a client through the sink), and `server__tool` names, routed by the
//! `server` prefix to a registered [`ToolServer`]. A failing or unknown tool becomes an
//! `is_error` tool result the model sees, never a crashed turn.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    attachments, tools, valid_tool_name, ChatMessage, ContentBlock, LocalBoxFuture, Provider,
    ProviderRequest, Role, ToolSpec,
};

/// Separator between an external tool server's name and its tool's name.
pub const SERVER_SEPARATOR: &str = "__";
/// The interactive tool.
pub const ASK_USER: &str = "ask_user";

/// An external source of tools (exposed to the model as `<server>__<tool>`).
pub trait ToolServer: Send + Sync {
    /// The server's tools (unprefixed names).
    fn tools(&self) -> Vec<ToolSpec>;
    /// Runs one of them.
    fn call(&self, tool: &str, input: Value) -> LocalBoxFuture<'static, Result<String, String>>;
    /// Where it is, for `@system config` (`None` when it has no address to show).
    fn url(&self) -> Option<&str> {
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
    /// A step of the turn (timing, the action running); ignored unless the sink cares.
    fn step(&self, _step: TurnStep) {}
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
    /// Messages to append to the chat history (starting with the user's).
    pub messages: Vec<ChatMessage>,
    /// Set when the turn failed (shown as `lastError`).
    pub error: Option<String>,
}

impl TurnOutcome {
    /// The outcome of a turn whose messages are `messages`: the user's message (the first)
    /// loses its images, which the history does not keep ([`attachments::for_history`]).
    fn new(mut messages: Vec<ChatMessage>, error: Option<String>) -> TurnOutcome {
        if let Some(first) = messages.first_mut() {
            *first = attachments::for_history(std::mem::replace(
                first,
                ChatMessage::text(Role::User, ""),
            ));
        }
        TurnOutcome { messages, error }
    }
}

/// The tools offered to the model: built-ins, `ask_user`, and every server's tools, prefixed.
pub fn offered_tools(servers: &HashMap<String, Arc<dyn ToolServer>>) -> Vec<ToolSpec> {
    let mut specs = tools::builtin_tool_specs();
    specs.push(ToolSpec {
        name: ASK_USER.into(),
        description: "Ask the people in this conversation a question and wait for their answer. \
                      Use for confirmations and choices."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "choices": {"type": "array", "items": {"type": "string"}, "description": "Default: Yes, No"},
                "private": {"type": "boolean", "description": "Ask only the person who sent the request"}
            },
            "required": ["question"]
        }),
    });
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
    let tools = offered_tools(&input.tool_servers);
    // Only this turn's messages are copied per model call; the history is shared.
    let mut messages = vec![attachments::user_message(
        &input.command,
        &input.attachments,
    )];
    let mut action_index = 0;
    for _ in 0..input.max_iterations.max(1) {
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
                return TurnOutcome::new(messages, Some(text));
            }
        };
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
        messages.push(ChatMessage {
            role: Role::Assistant,
            content: response.content,
        });
        if calls.is_empty() {
            return TurnOutcome::new(messages, None);
        }
        let mut results = Vec::new();
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
            let outcome = call_tool(&name, tool_input, &input.tool_servers, sink).await;
            let (content, is_error) = match outcome {
                Ok(c) => (c, false),
                Err(e) => (e, true),
            };
            sink.step(TurnStep::ActionFinished {
                index,
                tool: name.clone(),
                result: content.clone(),
                is_error,
                duration: started.elapsed(),
            });
            sink.display(
                json!({"type": "text", "content": content, "kind": if is_error { "error" } else { "success" }}),
                Some(json!({"toolResult": {"id": id, "name": name, "content": content, "isError": is_error}})),
            );
            results.push(ContentBlock::ToolResult {
                tool_use_id: id,
                content,
                is_error,
            });
        }
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
    TurnOutcome::new(messages, Some(note))
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

async fn call_tool(
    name: &str,
    input: Value,
    servers: &HashMap<String, Arc<dyn ToolServer>>,
    sink: &dyn TurnSink,
) -> Result<String, String> {
    if !valid_tool_name(name) {
        return Err(format!(
            "invalid tool name {name:?}: must match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    if name == ASK_USER {
        let question = input
            .get("question")
            .and_then(Value::as_str)
            .ok_or("ask_user needs a \"question\" string")?
            .to_string();
        let choices: Vec<String> = match input.get("choices") {
            None | Some(Value::Null) => vec!["Yes".into(), "No".into()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|c| {
                    c.as_str()
                        .map(str::to_string)
                        .ok_or("choices must be strings")
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("choices must be an array of strings".into()),
        };
        if choices.is_empty() {
            return Err("choices must not be empty".into());
        }
        let private = input
            .get("private")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let index = sink.ask(question, choices.clone(), private).await?;
        return choices
            .get(index)
            .map(|c| format!("answer: {c}"))
            .ok_or_else(|| format!("answer {index} is not one of the choices"));
    }
    if let Some(result) = tools::run_builtin_tool(name, &input) {
        return result;
    }
    if let Some((server, tool)) = name.split_once(SERVER_SEPARATOR) {
        if let Some(s) = servers.get(server) {
            return s.call(tool, input).await;
        }
        return Err(format!("no tool server named {server:?}"));
    }
    Err(format!("unknown tool {name:?}"))
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
        assert_eq!(out.messages.len(), 4); // user, assistant tool_use, tool result, assistant text
        assert_eq!(out.messages[3].joined_text(), "5");
        let shown = sink.shown.borrow();
        assert_eq!(shown[0]["extra"]["toolCall"]["name"], "calculate");
        assert_eq!(shown[1]["extra"]["toolResult"]["content"], "5");
        assert_eq!(shown[2]["content"]["content"], "5");
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
        fn call(
            &self,
            tool: &str,
            input: Value,
        ) -> LocalBoxFuture<'static, Result<String, String>> {
            let out = format!("{tool}:{input}");
            Box::pin(async move { Ok(out) })
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
        let r = block_on(call_tool("echo__say", json!({"x": 1}), &servers, &sink));
        assert_eq!(r.unwrap(), "say:{\"x\":1}");
        let sink = Recorder {
            answer: Some(1),
            ..Default::default()
        };
        let r = block_on(call_tool(
            ASK_USER,
            json!({"question": "ok?"}),
            &servers,
            &sink,
        ));
        assert_eq!(r.unwrap(), "answer: No");
    }
}
