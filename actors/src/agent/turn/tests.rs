use std::cell::RefCell;

use super::*;
use crate::agent::builtin::BuiltinProvider;
use crate::agent::routing::call_tool;
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
    let offered = OfferedTools::of(&servers);
    let r = block_on(call_tool(
        "echo__say",
        json!({"x": 1}),
        &servers,
        ToolCallContext {
            sink: &sink,
            working_directory: None,
            action_index: 0,
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
        },
        &offered,
    ));
    assert_eq!(r.text, "answer: No");
}

/// A tool server whose tools are named as given.
struct Named(Vec<&'static str>);
impl ToolServer for Named {
    fn tools(&self) -> Vec<ToolSpec> {
        self.0
            .iter()
            .map(|name| ToolSpec {
                name: name.to_string(),
                description: String::new(),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }
    fn call<'a>(
        &'a self,
        tool: &'a str,
        _input: Value,
        _context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput> {
        Box::pin(async move { ToolOutput::text(format!("{tool} ran")) })
    }
}

/// Calls go through the names as offered, not by splitting at the first `__`: server `h_`'s
/// tool `dup` (`h___dup`) reaches `h_`, not server `h` as a tool `_dup`; a name another tool
/// already took (`h_`'s `say` after `h`'s `_say`: both `h___say`), a nameless tool and a tool
/// listed twice are offered once, or not at all.
#[test]
fn calls_are_routed_by_the_offered_names() {
    let mut servers: HashMap<String, Arc<dyn ToolServer>> = HashMap::new();
    servers.insert("h_".into(), Arc::new(Named(vec!["say", "", "dup", "dup"])));
    servers.insert("h".into(), Arc::new(Named(vec!["_say", "other"])));
    let offered = OfferedTools::of(&servers);
    let names: Vec<&str> = offered
        .specs
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| n.starts_with('h'))
        .collect();
    assert_eq!(names, ["h___say", "h__other", "h___dup"]);
    let sink = Recorder::default();
    let context = ToolCallContext {
        sink: &sink,
        working_directory: None,
        action_index: 0,
    };
    let run = |name| block_on(call_tool(name, json!({}), &servers, context, &offered)).text;
    assert_eq!(run("h___dup"), "dup ran");
    assert_eq!(run("h___say"), "_say ran");
    assert_eq!(run("h__other"), "other ran");
    assert_eq!(run("h___nothing"), "unknown tool \"h___nothing\"");
}
