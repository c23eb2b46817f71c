use std::cell::RefCell;

use super::*;
use crate::agent::builtin::BuiltinProvider;
use crate::agent::routing::call_tool;
use crate::agent::{LocalBoxFuture, ProviderError, ProviderResponse, ToolSpec};

#[derive(Default)]
struct Recorder {
    shown: RefCell<Vec<Value>>,
    steps: RefCell<Vec<TurnStep>>,
    answer: Option<usize>,
    /// Pieces streamed, with how many displays came before each.
    pieces: RefCell<Vec<(usize, AnswerDelta)>>,
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
    fn stream(&self, delta: AnswerDelta) {
        let shown = self.shown.borrow().len();
        self.pieces.borrow_mut().push((shown, delta));
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
        compact_on_overflow: true,
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
    assert!(offered_tools(&servers, true)
        .iter()
        .any(|t| t.name == "echo__say"));
    let sink = Recorder::default();
    let offered = OfferedTools::of(&servers, true);
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
    let offered = OfferedTools::of(&servers, true);
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
        ask_before_conversation_actions: true,
    };
    let run = |name| block_on(call_tool(name, json!({}), &servers, context, &offered)).text;
    assert_eq!(run("h___dup"), "dup ran");
    assert_eq!(run("h___say"), "_say ran");
    assert_eq!(run("h__other"), "other ran");
    assert_eq!(run("h___nothing"), "unknown tool \"h___nothing\"");
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

/// A provider that streams its thinking and its answer in pieces, each piece handed over
/// before the call resolves (on another task, as a network read would).
struct Streams;
impl Provider for Streams {
    fn name(&self) -> &str {
        "streams"
    }
    fn complete(
        &self,
        _r: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        unreachable!("the loop streams")
    }
    fn complete_streaming(
        &self,
        _r: ProviderRequest,
        mut deltas: DeltaSink,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        Box::pin(async move {
            for piece in ["hm", "m"] {
                deltas(AnswerDelta::Thinking(piece.into()));
                tokio::task::yield_now().await;
            }
            for piece in ["It is ", "**5**."] {
                deltas(AnswerDelta::Text(piece.into()));
                tokio::task::yield_now().await;
            }
            Ok(ProviderResponse {
                content: vec![
                    ContentBlock::Thinking {
                        text: "hmm".into(),
                        signature: None,
                    },
                    ContentBlock::Text {
                        text: "It is **5**.".into(),
                    },
                ],
                usage: None,
            })
        })
    }
}

/// Issue 50: the pieces reach the sink as they come, before the whole answer; then the
/// thinking and the text are displayed whole, marked streamed, for the log.
#[test]
fn a_streamed_answer_reaches_the_sink_in_pieces_then_whole() {
    let sink = Recorder::default();
    let out = block_on(run_turn(input(Arc::new(Streams), "go"), &sink));
    assert_eq!(out.error, None);
    assert_eq!(
        *sink.pieces.borrow(),
        [
            (0, AnswerDelta::Thinking("hm".into())),
            (0, AnswerDelta::Thinking("m".into())),
            (0, AnswerDelta::Text("It is ".into())),
            (0, AnswerDelta::Text("**5**.".into())),
        ]
    );
    let shown = sink.shown.borrow();
    assert_eq!(
        *shown,
        [
            json!({"content": {"type": "text", "content": "hmm", "kind": "info"},
                   "extra": {"thinking": true, "streamed": true}}),
            json!({"content": {"type": "markdown", "content": "It is **5**."},
                   "extra": {"streamed": true}}),
        ]
    );
    assert_eq!(out.messages[1].joined_text(), "It is **5**.");
}

/// A tool server offering its own `get_current_time` (as an MCP time server does).
struct TimeServer;
impl ToolServer for TimeServer {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "get_current_time".into(),
            description: "the time".into(),
            input_schema: json!({"type": "object"}),
        }]
    }
    fn call<'a>(
        &'a self,
        _tool: &'a str,
        _input: Value,
        _context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::error("not called here".to_string()) })
    }
}

/// Issue 50: a real model is offered real tools only — never get_weather's sample data, and
/// no second get_current_time beside a server's; the builtin provider keeps them all; a tool
/// not offered does not run.
#[test]
fn a_real_model_is_offered_real_tools_only() {
    let names = |servers: &HashMap<String, Arc<dyn ToolServer>>, demo| -> Vec<String> {
        offered_tools(servers, demo)
            .into_iter()
            .map(|t| t.name)
            .filter(|n| !n.contains("__") && n.starts_with(|c: char| c.is_lowercase()))
            .filter(|n| ["calculate", "get_current_time", "get_weather"].contains(&n.as_str()))
            .collect()
    };
    let mut servers: HashMap<String, Arc<dyn ToolServer>> = HashMap::new();
    assert_eq!(
        names(&servers, true),
        ["calculate", "get_current_time", "get_weather"]
    );
    assert_eq!(names(&servers, false), ["calculate", "get_current_time"]);
    servers.insert("time".into(), Arc::new(TimeServer));
    assert_eq!(names(&servers, false), ["calculate"]);
    assert!(offered_tools(&servers, false)
        .iter()
        .any(|t| t.name == "time__get_current_time"));
    let sink = Recorder::default();
    let offered = OfferedTools::of(&servers, false);
    let r = block_on(call_tool(
        "get_weather",
        json!({"location": "Lisbon"}),
        &servers,
        ToolCallContext {
            sink: &sink,
            working_directory: None,
            action_index: 0,
            ask_before_conversation_actions: true,
        },
        &offered,
    ));
    assert!(r.is_error, "{}", r.text);
}
