//! Starting the work of a running request (an agent turn, `@explain` / `@translate`'s plan,
//! `@compact`'s summary) as a future spawned on the actor, and taking its output back as
//! [`TurnEvent`]s, each tagged with its turn number so a cancelled turn's late output is
//! dropped. The agent loop's view of the conversation is [`ConversationSink`] (`sink.rs`).
//!
//! A turn may book work for its end (`AfterTurn`): the `takeAction` calls of the
//! `manage_conversation` tool, sent to the requester just before the request completes (where
//! `@conversation` sends its own), and a handoff (`handoff.rs`), run once the agent loop has
//! ended; the request completes after both.
//!
//! Who talks to it: the queue starts turns; the spawned futures send [`TurnEvent`]s.
//!
//! What clients are told runs (`grammar::display_info`, [`tool_display_info`]): a request
//! is `setDisplayInfo(requestId, "dispatcher", null, ["request"])` when it is an agent turn (it
//! runs as TypeAgent's `dispatcher request <text>`), `(requestId, <agent>, null, [<command
//! words>])` for an `@` command; then each tool call the model makes is `(requestId, <schema>,
//! <index>, {schemaName, actionName, parameters})`, where the schema is the agent the tool
//! belongs to: `chat` for the built-in tools and `ask_user`, the server name of a
//! `--tool-server`'s `server__tool`, the agent name of a client agent's `agent__action`. Its
//! result goes out as `appendDiagnosticData(requestId, {type: "actionResult", …})` (not logged).

use std::future::Future;
use std::time::Duration;

use actix::prelude::*;
use serde_json::json;

use super::replies::AnswerSender;
use super::routing::DisplayMode;
use super::sink::ConversationSink;
use super::turn_messages::{AfterCompact, TurnBooking, TurnEvent};
use super::{Conversation, AGENT_SOURCE};
use crate::agent::turn::{run_turn, TurnInput, TurnStep, SERVER_SEPARATOR};

/// The agent (schema) and action of a tool call as the model names it: `server__tool` is
/// `(server, tool)`, a client agent's `agent__action` is `(agent, action)`, a built-in tool
/// belongs to the chat agent.
pub(super) fn tool_display_info(tool: &str) -> (&str, &str) {
    tool.split_once(SERVER_SEPARATOR)
        .unwrap_or((AGENT_SOURCE, tool))
}

impl Handler<TurnEvent> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: TurnEvent, ctx: &mut Self::Context) {
        self.turn_event(msg, ctx);
        // A question opened (or answered) since: the snapshot's `blockedOn` changed.
        self.announce_blocked_change(ctx);
        self.throttle(ctx);
    }
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
             Answer concisely. Use the tools you are offered when they help: ask_user to ask \
             the people in the conversation, manage_conversation when they ask to create, list, \
             switch, rename, delete, find or hand off conversations."
                .to_string()
        })
    }

    /// What the agent loop needs for `command`, with the running request's attachments and
    /// working directory.
    fn turn_input(&mut self, command: String, max_iterations: usize) -> TurnInput {
        // Once per request: a retry after an overflow shows the error if it overflows again.
        let compact_on_overflow = self.queue.running().is_some_and(|r| !r.overflowed);
        let (attachments, working_directory) = self
            .queue
            .running()
            .map(|r| {
                (
                    r.request.attachments.clone(),
                    r.request.working_directory.clone(),
                )
            })
            .unwrap_or_default();
        TurnInput {
            provider: self.provider(),
            system: self.system_prompt(),
            history: self.chat_history(),
            command,
            attachments,
            max_iterations,
            tool_servers: self.tool_servers(),
            working_directory,
            compact_on_overflow,
        }
    }

    /// Spawns the running request's work; cancelling the request cancels it.
    pub(super) fn spawn_for_running(
        &mut self,
        work: impl Future<Output = ()> + 'static,
        ctx: &mut Context<Self>,
    ) {
        let handle = ctx.spawn(work.into_actor(self));
        if let Some(r) = self.queue.running_mut() {
            r.handle = Some(handle);
        }
    }

    /// Whether `turn` is the running request's (events of other turns are stale).
    pub(super) fn is_current(&self, turn: u64) -> bool {
        self.queue.current(turn).is_some()
    }

    /// Runs the agent loop on `text` (the running request's, or what its `@dispatcher
    /// request` wraps); it reports through [`ConversationSink`].
    pub(super) fn start_agent_turn(&mut self, turn: u64, text: String, ctx: &mut Context<Self>) {
        if self.context_nearly_full() {
            // The model's window is nearly full: the history is summarized first.
            self.start_compact(turn, AfterCompact::RunTurn(text), ctx);
            return;
        }
        self.run_agent_turn(turn, text, ctx);
    }

    /// Runs the agent loop on `text` now (see [`Conversation::start_agent_turn`]).
    pub(super) fn run_agent_turn(&mut self, turn: u64, text: String, ctx: &mut Context<Self>) {
        if let Some(r) = self.queue.running_mut() {
            r.timing.agent_turn();
            r.agent_text = Some(text.clone());
        }
        let input = self.turn_input(text, self.setup.runtime.max_iterations);
        if !input.provider.answers_in_process() {
            // The acceptance's fsync runs beside the model call, not after its first words.
            self.setup.runtime.log_writer.hurry();
        }
        let sink = ConversationSink::new(ctx.address(), turn);
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
        // TypeAgent's `@dispatcher explain` flags (`--repeat 3` …) are not words of the
        // request.
        let (text, flags) = if explain {
            match crate::agent::explain::take_flags(&text) {
                Ok(taken) => taken,
                Err(e) => {
                    let running = self.queue.running().expect("running").request.clone();
                    let error = json!({"type": "text", "content": e, "kind": "error"});
                    self.finish_showing(turn, &running, error, Some(e), ctx);
                    return;
                }
            }
        } else {
            (text, Default::default())
        };
        if text.trim().is_empty() {
            let running = self.queue.running().expect("running").request.clone();
            let msg = format!(
                "Give a request: @{} <request>",
                if explain { "explain" } else { "translate" }
            );
            let warning = json!({"type": "text", "content": msg, "kind": "warning"});
            self.finish_showing(turn, &running, warning, Some(msg), ctx);
            return;
        }
        if explain && text.contains(crate::agent::explain::SEPARATOR) {
            // TypeAgent's form, `<request> => <action>`: the translation is given; it is
            // explained without a model.
            let running = self.queue.running().expect("running").request.clone();
            let offered: Vec<String> = crate::agent::turn::offered_tools(
                &self.tool_servers(),
                self.provider().offers_demo_tools(),
            )
            .into_iter()
            .map(|t| t.name)
            .collect();
            match crate::agent::explain::parse_request_action(&text) {
                Ok((request, actions)) => {
                    let mut shown =
                        crate::agent::explain::explain(&request, &actions, &offered, AGENT_SOURCE);
                    if flags.repeat > 1 {
                        // Read off the text: every repetition gives the same explanation.
                        shown =
                            crate::agent::explain::repeated_header(&flags, flags.repeat) + &shown;
                    }
                    let block = json!({"type": "markdown", "content": shown});
                    self.finish_showing(turn, &running, block, None, ctx);
                }
                Err(e) => {
                    let warning = json!({"type": "text", "content": e, "kind": "error"});
                    self.finish_showing(turn, &running, warning, Some(e), ctx);
                }
            }
            return;
        }
        let inputs = (0..flags.repeat)
            .map(|_| self.turn_input(text.clone(), 1))
            .collect();
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let result =
                    crate::agent::explain::plan_repeated(&text, inputs, &flags, explain).await;
                addr.do_send(TurnEvent::Planned { turn, result });
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
                    let request = self.queue.running().expect("current").request.clone();
                    let streamed = extra.as_ref().is_some_and(|e| e["streamed"] == true);
                    if streamed
                        && self.stream_finished(
                            &request,
                            content.clone(),
                            extra.clone().unwrap_or_default(),
                            ctx,
                        )
                    {
                        return;
                    }
                    // Anything else ends an answer still being written (an error after it).
                    self.stream_cut_short(super::answer_stream::CutShort::Incomplete, ctx);
                    self.display(&request, content, extra, DisplayMode::Block);
                }
            }
            TurnEvent::Stream { turn, delta } => self.stream_piece(turn, delta, ctx),
            TurnEvent::Status { turn, text } => {
                if self.is_current(turn) {
                    let request = self.queue.running().expect("current").request.clone();
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
            TurnEvent::Step { turn, step } => {
                if self.is_current(turn) {
                    self.turn_step(step);
                }
            }
            TurnEvent::Done { turn, outcome } => {
                if self.is_current(turn) && outcome.overflow {
                    // The model said the history is too long: compact, then run it again
                    // (once: a second overflow is shown as the error it is).
                    let running = self.queue.running_mut().expect("current");
                    running.overflowed = true;
                    let text = running.agent_text.clone().unwrap_or_default();
                    self.start_compact(turn, AfterCompact::AfterOverflow(text), ctx);
                } else if self.is_current(turn) {
                    self.commit_chat(outcome.messages);
                    if let Some(usage) = &outcome.usage {
                        self.record_usage(usage);
                    }
                    self.end_turn(turn, outcome.error, ctx);
                }
            }
            TurnEvent::Booked { turn, booking } => {
                if let Some(running) = self.queue.current_mut(turn) {
                    let after = &mut running.after_turn;
                    match booking {
                        TurnBooking::ClientAction { action, data } => {
                            after.client_actions.push((action, data))
                        }
                        TurnBooking::Handoff(source) => after.handoff = Some(source),
                    }
                }
            }
            TurnEvent::HandedOff {
                turn,
                result,
                earlier,
            } => self.handed_off(turn, result, earlier, ctx),
            TurnEvent::Planned { turn, result } => self.planned(turn, result, ctx),
            TurnEvent::Answered { turn, result } => {
                if self.is_current(turn) {
                    let request = self.queue.running().expect("current").request.clone();
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
                then,
            } => self.compacted(turn, summary, (replaced, total_before), then, ctx),
        }
    }

    /// The agent loop of the running request `turn` has ended (its messages committed): the
    /// handoff it booked runs, else the request completes (after the client actions it
    /// booked).
    fn end_turn(&mut self, turn: u64, error: Option<String>, ctx: &mut Context<Self>) {
        let handoff = self
            .queue
            .current_mut(turn)
            .and_then(|r| r.after_turn.handoff.take());
        match handoff {
            Some(source) => self.start_handoff(turn, source, error, ctx),
            None => self.finish_turn(turn, error, ctx),
        }
    }

    /// A step of the running turn: timed; a tool call is told to every client as it starts
    /// (`setDisplayInfo`, logged) and as it ends (`appendDiagnosticData`, not logged).
    fn turn_step(&mut self, step: TurnStep) {
        let Some(running) = self.queue.running_mut() else {
            return;
        };
        let request = running.request.clone();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        match step {
            TurnStep::ModelCall { duration } => running.timing.model_call(duration),
            TurnStep::ActionStarted { index, tool, input } => {
                running.timing.action_started(index);
                let (schema, action) = tool_display_info(&tool);
                log::debug!(
                    "conversation {}: request {} trace={}: action {index} {schema}.{action} started",
                    self.setup.id,
                    request.request_id,
                    request.trace_id
                );
                let action_json =
                    json!({"schemaName": schema, "actionName": action, "parameters": input});
                self.set_display_info(&request, schema, Some(index), action_json);
            }
            TurnStep::ActionFinished {
                index,
                tool,
                result,
                is_error,
                duration,
            } => {
                running.timing.action_finished(index, duration);
                let (schema, action) = tool_display_info(&tool);
                log::debug!(
                    "conversation {}: request {} trace={}: action {index} {schema}.{action} {} in {:.1} ms",
                    self.setup.id,
                    request.request_id,
                    request.trace_id,
                    if is_error { "failed" } else { "succeeded" },
                    ms(duration)
                );
                let result = if is_error {
                    json!({"error": result})
                } else {
                    json!({"historyText": result, "entities": []})
                };
                let data = json!({"type": "actionResult", "source": schema, "schemaName": schema,
                                  "actionIndex": index, "result": result});
                self.broadcast(
                    "appendDiagnosticData",
                    json!([request.id_obj(), data]),
                    Some(request.origin),
                );
            }
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
        let Some(request) = self.queue.current(turn).map(|r| r.request.clone()) else {
            let _ = reply.send(Err("the request is no longer running".into()));
            return;
        };
        if private {
            self.open_choice((*request).clone(), question, choices, reply, ctx);
        } else {
            self.open_interaction((*request).clone(), question, choices, reply, ctx);
        }
    }

    /// `@explain` / `@translate` answered: show the plan (or the error) and finish.
    fn planned(&mut self, turn: u64, result: Result<String, String>, ctx: &mut Context<Self>) {
        if !self.is_current(turn) {
            return;
        }
        let request = self.queue.running().expect("current").request.clone();
        let (content, error) = match result {
            Ok(text) => (json!({"type": "markdown", "content": text}), None),
            Err(e) => (
                json!({"type": "text", "content": e, "kind": "error"}),
                Some(e),
            ),
        };
        self.finish_showing(turn, &request, content, error, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_belong_to_their_agent() {
        assert_eq!(tool_display_info("calculate"), ("chat", "calculate"));
        assert_eq!(tool_display_info("ask_user"), ("chat", "ask_user"));
        assert_eq!(tool_display_info("phone__setAlarm"), ("phone", "setAlarm"));
        assert_eq!(tool_display_info("mcp__read__file"), ("mcp", "read__file"));
    }
}
