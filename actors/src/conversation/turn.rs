//! Starting the work of a running request (an agent turn, `@explain` / `@translate`'s plan,
//! `@compact`'s summary) as a future spawned on the actor, and taking its output back as
//! [`TurnEvent`]s, each tagged with its turn number so a cancelled turn's late output is
//! dropped. [`ConversationSink`] is the agent loop's view of the conversation.
//!
//! Who talks to it: the queue starts turns; the spawned futures send [`TurnEvent`]s.

use std::future::Future;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::interactions::{AnswerSender, Asked, TurnAsk};
use super::routing::DisplayMode;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::interaction::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use crate::agent::turn::{describe_plan, plan, run_turn, TurnInput, TurnOutcome, TurnSink};
use crate::agent::{ChatMessage, LocalBoxFuture, Provider, ProviderRequest, Role};

/// Longest local (provider-less) compact summary, in characters.
const LOCAL_SUMMARY_CHARS: usize = 4000;

/// Output of the running turn, tagged with its turn number.
#[derive(Message)]
#[rtype(result = "()")]
pub enum TurnEvent {
    /// Show something.
    Display {
        /// Turn.
        turn: u64,
        /// `DisplayContent`.
        content: Value,
        /// Extra `IAgentMessage` fields.
        extra: Option<Value>,
    },
    /// Ask the user.
    Ask {
        /// Turn.
        turn: u64,
        /// The question.
        question: String,
        /// Choices.
        choices: Vec<String>,
        /// Only the originator (`requestChoice`) or everyone (`requestInteraction`).
        private: bool,
        /// The answer (choice index).
        reply: oneshot::Sender<Result<usize, String>>,
    },
    /// A passing status while a tool call runs (an MCP server's progress): shown as a
    /// `temporary` display, never logged.
    Status {
        /// Turn.
        turn: u64,
        /// The status text.
        text: String,
    },
    /// The agent loop finished.
    Done {
        /// Turn.
        turn: u64,
        /// Messages and error.
        outcome: TurnOutcome,
    },
    /// `@explain` / `@translate` produced their text.
    Planned {
        /// Turn.
        turn: u64,
        /// The rendered plan, or the provider error.
        result: Result<String, String>,
    },
    /// A command that needed an answer from elsewhere (`@system session` asks the registry)
    /// has its content to show.
    Answered {
        /// Turn.
        turn: u64,
        /// The `DisplayContent` to show before the request finishes, or the error it ends
        /// with.
        result: Result<Value, String>,
    },
    /// `@compact` produced its summary.
    Compacted {
        /// Turn.
        turn: u64,
        /// The summary text.
        summary: String,
        /// History messages it summarizes (those the assistant held).
        replaced: usize,
        /// Messages in the history file when the summary's history was taken: those older
        /// than the ones summarized go with them.
        total_before: usize,
    },
}

impl Handler<TurnEvent> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: TurnEvent, ctx: &mut Self::Context) {
        self.turn_event(msg, ctx);
        self.throttle(ctx);
    }
}

/// The running turn's view of its conversation.
struct ConversationSink {
    /// The conversation running the turn.
    addr: Addr<Conversation>,
    /// The turn's number, stamped on every event.
    turn: u64,
}

impl TurnSink for ConversationSink {
    fn display(&self, content: Value, extra: Option<Value>) {
        self.addr.do_send(TurnEvent::Display {
            turn: self.turn,
            content,
            extra,
        });
    }

    fn ask(
        &self,
        question: String,
        choices: Vec<String>,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<usize, String>> {
        let (tx, rx) = oneshot::channel();
        self.addr.do_send(TurnEvent::Ask {
            turn: self.turn,
            question,
            choices,
            private,
            reply: tx,
        });
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err("the question was dropped".into()))
        })
    }

    fn status(&self, text: String) {
        self.addr.do_send(TurnEvent::Status {
            turn: self.turn,
            text,
        });
    }

    fn ask_remember(
        &self,
        question: String,
        choices: Vec<String>,
        checkbox_label: String,
    ) -> LocalBoxFuture<'static, Result<Picked, String>> {
        let (reply, rx) = oneshot::channel();
        self.ask_more(Asked::Remember {
            question,
            choices,
            checkbox_label,
            reply,
        });
        Box::pin(answered(rx))
    }

    fn ask_form(
        &self,
        form: QuestionForm,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<QuestionFormResponse, String>> {
        let (reply, rx) = oneshot::channel();
        self.ask_more(Asked::Form {
            form,
            private,
            reply,
        });
        Box::pin(answered(rx))
    }

    fn propose_action(
        &self,
        proposal: ActionProposal,
    ) -> LocalBoxFuture<'static, Result<ProposalAnswer, String>> {
        let (reply, rx) = oneshot::channel();
        self.ask_more(Asked::Proposal { proposal, reply });
        Box::pin(answered(rx))
    }
}

impl ConversationSink {
    /// Sends a form, a pick-and-remember or a proposal to the conversation
    /// (`interactions.rs`).
    fn ask_more(&self, asked: Asked) {
        self.addr.do_send(TurnAsk {
            turn: self.turn,
            asked,
        });
    }
}

/// The answer on `rx`, or why none came.
async fn answered<T>(rx: oneshot::Receiver<Result<T, String>>) -> Result<T, String> {
    rx.await
        .unwrap_or_else(|_| Err("the question was dropped".into()))
}

/// The `@compact` summary: the provider's, when it gives a real one, else a bounded local one.
async fn summarize(provider: &dyn Provider, history: Arc<Vec<ChatMessage>>) -> String {
    if history.is_empty() {
        return "(nothing to summarize)".to_string();
    }
    if provider.name() != "builtin" {
        let request = ProviderRequest {
            system: "You write faithful, compact summaries.".into(),
            history: history.clone(),
            messages: vec![ChatMessage::text(
                Role::User,
                "Summarize our conversation so far in a short paragraph, keeping names, numbers and decisions.",
            )],
            tools: Vec::new(),
        };
        if let Ok(r) = provider.complete(request).await {
            let text = ChatMessage {
                role: Role::Assistant,
                content: r.content,
            }
            .joined_text();
            if !text.trim().is_empty() {
                return text;
            }
        }
    }
    let mut out = format!(
        "Summary of {} earlier messages. The user asked:",
        history.len()
    );
    for m in history.iter().filter(|m| m.role == Role::User) {
        let t = m.joined_text();
        if t.is_empty() {
            continue;
        }
        let line: String = t.chars().take(200).collect();
        if out.chars().count() + line.chars().count() + 4 > LOCAL_SUMMARY_CHARS {
            out.push_str("\n- …");
            break;
        }
        out.push_str("\n- ");
        out.push_str(&line);
    }
    out
}

impl Conversation {
    /// The chat agent's system prompt: `<instance>/chat/system-prompt.md` (the agent's
    /// `instanceStorage`, shared by every conversation), else the built-in one.
    fn system_prompt(&self) -> String {
        let custom = self
            .setup
            .runtime
            .instance_root
            .join(AGENT_SOURCE)
            .join("system-prompt.md");
        std::fs::read_to_string(custom).unwrap_or_else(|_| {
            "You are the assistant of a Roundtable conversation that several people may share. \
             Answer concisely. Use the tools when they help: calculate for arithmetic, \
             get_current_time for the time, get_weather for (sample) weather, ask_user to ask \
             the people in the conversation."
                .to_string()
        })
    }

    /// What the agent loop needs for `command`, with the running request's attachments.
    fn turn_input(&mut self, command: String, max_iterations: usize) -> TurnInput {
        let attachments = self
            .running
            .as_ref()
            .map(|r| r.request.attachments.clone())
            .unwrap_or_default();
        TurnInput {
            provider: self.setup.runtime.provider.clone(),
            system: self.system_prompt(),
            history: self.chat_history(),
            command,
            attachments,
            max_iterations,
            tool_servers: self.tool_servers(),
        }
    }

    /// Spawns the running request's work; cancelling the request cancels it.
    pub(super) fn spawn_for_running(
        &mut self,
        work: impl Future<Output = ()> + 'static,
        ctx: &mut Context<Self>,
    ) {
        let handle = ctx.spawn(work.into_actor(self));
        if let Some(r) = self.running.as_mut() {
            r.handle = Some(handle);
        }
    }

    /// Whether `turn` is the running request's (events of other turns are stale).
    fn is_current(&self, turn: u64) -> bool {
        self.running.as_ref().is_some_and(|r| r.turn == turn)
    }

    /// Runs the agent loop on `text` (the running request's, or what its `@dispatcher
    /// request` wraps); it reports through [`ConversationSink`].
    pub(super) fn start_agent_turn(&mut self, turn: u64, text: String, ctx: &mut Context<Self>) {
        let input = self.turn_input(text, self.setup.runtime.max_iterations);
        let sink = ConversationSink {
            addr: ctx.address(),
            turn,
        };
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let outcome = run_turn(input, &sink).await;
                addr.do_send(TurnEvent::Done { turn, outcome });
            },
            ctx,
        );
    }

    /// `@explain` (`explain`) / `@translate`: one provider call, described, never run.
    pub(super) fn start_plan(
        &mut self,
        turn: u64,
        text: String,
        explain: bool,
        ctx: &mut Context<Self>,
    ) {
        if text.trim().is_empty() {
            let running = self.running.as_ref().expect("running").request.clone();
            let msg = format!(
                "Give a request: @{} <request>",
                if explain { "explain" } else { "translate" }
            );
            let warning = json!({"type": "text", "content": msg, "kind": "warning"});
            self.finish_showing(turn, &running, warning, Some(msg), ctx);
            return;
        }
        let input = self.turn_input(text.clone(), 1);
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let result = plan(input)
                    .await
                    .map(|blocks| describe_plan(&text, &blocks, explain));
                addr.do_send(TurnEvent::Planned {
                    turn,
                    result: result.map_err(|e| e.to_string()),
                });
            },
            ctx,
        );
    }

    /// `@compact`: summarizes the history the assistant holds (see [`summarize`]). Not the
    /// whole file: the summary is what a model reads in place of the history, and a model
    /// cannot take more than the window (reading all of a long file into memory to summarize
    /// it would undo the window's bound). Messages older than the window, which the
    /// assistant no longer saw, are dropped with the rest, and the result says how many.
    pub(super) fn start_compact(&mut self, turn: u64, ctx: &mut Context<Self>) {
        let history = self.chat_history();
        let total_before = self.chat_message_count();
        let provider = self.setup.runtime.provider.clone();
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let replaced = history.len();
                let summary = summarize(provider.as_ref(), history).await;
                addr.do_send(TurnEvent::Compacted {
                    turn,
                    summary,
                    replaced,
                    total_before,
                });
            },
            ctx,
        );
    }

    /// Output of the running turn (see [`TurnEvent`]).
    fn turn_event(&mut self, msg: TurnEvent, ctx: &mut Context<Self>) {
        match msg {
            TurnEvent::Display {
                turn,
                content,
                extra,
            } => {
                if self.is_current(turn) {
                    let request = self.running.as_ref().expect("current").request.clone();
                    self.display(&request, content, extra, DisplayMode::Block);
                }
            }
            TurnEvent::Status { turn, text } => {
                if self.is_current(turn) {
                    let request = self.running.as_ref().expect("current").request.clone();
                    self.display(
                        &request,
                        json!({"type": "text", "content": text, "kind": "status"}),
                        None,
                        DisplayMode::Temporary,
                    );
                }
            }
            TurnEvent::Ask {
                turn,
                question,
                choices,
                private,
                reply,
            } => self.ask(turn, question, choices, private, reply, ctx),
            TurnEvent::Done { turn, outcome } => {
                if self.is_current(turn) {
                    self.commit_chat(outcome.messages);
                    self.finish(turn, outcome.error, ctx);
                }
            }
            TurnEvent::Planned { turn, result } => self.planned(turn, result, ctx),
            TurnEvent::Answered { turn, result } => {
                if self.is_current(turn) {
                    let request = self.running.as_ref().expect("current").request.clone();
                    match result {
                        Ok(content) => self.finish_showing(turn, &request, content, None, ctx),
                        Err(e) => self.finish_error(turn, &request, e, ctx),
                    }
                }
            }
            TurnEvent::Compacted {
                turn,
                summary,
                replaced,
                total_before,
            } => self.compacted(turn, summary, (replaced, total_before), ctx),
        }
    }

    /// A question from the turn: private (`requestChoice`) or to everyone. A turn that is no
    /// longer running (cancelled meanwhile) gets an error instead.
    fn ask(
        &mut self,
        turn: u64,
        question: String,
        choices: Vec<String>,
        private: bool,
        reply: AnswerSender,
        ctx: &mut Context<Self>,
    ) {
        let Some(request) = self
            .running
            .as_ref()
            .filter(|r| r.turn == turn)
            .map(|r| r.request.clone())
        else {
            let _ = reply.send(Err("the request is no longer running".into()));
            return;
        };
        if private {
            self.open_choice(request, question, choices, reply, ctx);
        } else {
            self.open_interaction(request, question, choices, reply, ctx);
        }
    }

    /// `@explain` / `@translate` answered: show the plan (or the error) and finish.
    fn planned(&mut self, turn: u64, result: Result<String, String>, ctx: &mut Context<Self>) {
        if !self.is_current(turn) {
            return;
        }
        let request = self.running.as_ref().expect("current").request.clone();
        let (content, error) = match result {
            Ok(text) => (json!({"type": "markdown", "content": text}), None),
            Err(e) => (
                json!({"type": "text", "content": e, "kind": "error"}),
                Some(e),
            ),
        };
        self.finish_showing(turn, &request, content, error, ctx);
    }

    /// `@compact` has its summary of `replaced` messages (of `total_before` in the file):
    /// the history file is replaced, then the result is shown and the request finishes.
    fn compacted(
        &mut self,
        turn: u64,
        summary: String,
        (replaced, total_before): (usize, usize),
        ctx: &mut Context<Self>,
    ) {
        if !self.is_current(turn) {
            return;
        }
        let compacted = self.compacted_chat(&summary, total_before);
        let total_replaced = self.chat_message_count();
        let older = total_before.saturating_sub(replaced);
        let written = self.replace_chat(&compacted);
        ctx.spawn(
            async move {
                written
                    .await
                    .unwrap_or_else(|_| Err("log writer stopped".into()))
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                // The file is compacted even if the request was cancelled meanwhile: the
                // window follows it.
                let error = match result {
                    Ok(()) => {
                        act.chat_compacted(compacted, total_replaced);
                        None
                    }
                    Err(e) => Some(format!("could not compact the history: {e}")),
                };
                if !act.is_current(turn) {
                    return;
                }
                let request = act.running.as_ref().expect("current").request.clone();
                let dropped = if older > 0 {
                    format!("; {older} older messages, past what the assistant held, dropped")
                } else {
                    String::new()
                };
                let text = match &error {
                    None => format!(
                        "**Conversation compacted** ({replaced} messages → 1 summary{dropped})\n\n{summary}"
                    ),
                    Some(e) => e.clone(),
                };
                let kind = if error.is_some() { "error" } else { "info" };
                act.display(
                    &request,
                    json!({"type": "markdown", "content": text, "kind": kind}),
                    Some(json!({"compactSummary": error.is_none()})),
                    DisplayMode::Block,
                );
                act.finish(turn, error, ctx);
            }),
        );
    }
}
