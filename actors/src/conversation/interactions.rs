//! Questions a running turn asks: an *interaction* goes to everyone (`requestInteraction`,
//! logged, answered by any client with `respondToInteraction`), a *choice* goes privately to
//! the request's originator (`requestChoice` / `requestForm`, not logged, answered with
//! `respondToChoice`). Both time out after `interaction_timeout`.
//!
//! Interactions are of TypeAgent's three types: a `question` (its choices; a cancel or
//! time-out takes its `defaultId`, else fails), a `form` ([`QuestionForm`]; a cancel or
//! time-out answers `{answers: {}, cancelled: true}`) and a `proposeAction` (a tool call's
//! [`ActionProposal`]; a cancel or time-out fails it). Choices are `yesNo`, `multiChoice`,
//! `pickRemember` (with its checkbox label) and forms (`requestForm`). A client's answer is
//! checked against what was asked: a bad one is refused with an exact error and the question
//! stays open.
//!
//! A client agent's `popupQuestion` is a `question` interaction of no request
//! (`agent_context.rs`): its `source` is the agent, filtered clients do not get it, a cancel
//! or time-out without `defaultId` fails it with TypeAgent's texts, and it goes when the
//! agent's registration does.
//!
//! A choice is asked either by the running turn (it waits for the answer) or by a client
//! agent's `ActionResult.pendingChoice` ([`AgentChoice`], TypeAgent's `pendingChoiceRoutes`):
//! that card does not hold its request, which completes; it waits in the same table, keyed by
//! the agent's `choiceId`, until it is answered (the agent's `handleChoice` runs and
//! `respondToChoice` returns its `CommandResult`), forgotten (its agent or its originator
//! left, the agent was unregistered, [`MAX_PENDING_AGENT_CHOICES`] newer ones came) or
//! expired (`interaction_timeout`). Cancelling a request fails the turn's choices only.
//!
//! Who talks to it: the turn (`TurnEvent::Ask`, [`TurnAsk`]), the client agents' results
//! (`client_agents.rs`) and `popupQuestion`s (`agent_context.rs`), the dispatcher (answers,
//! cancels) and the queue (a cancelled turn's questions are cancelled with it).

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::agent_context::PopupQuestion;
use super::client_agents::AgentChoice;
use super::queue::Request;
use super::routing::Audience;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::client_agent::MAX_PENDING_AGENT_CHOICES;
use crate::agent::interaction::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use crate::agent::LocalBoxFuture;
use crate::client::OutboundCall;
use crate::ids::{ConnectionId, RequestId};
use crate::protocol::{RpcError, RpcResult};

/// Where a turn's question gets its answer (a choice index, or why there is none).
pub(super) type AnswerSender = oneshot::Sender<Result<usize, String>>;
/// Where a pick-and-remember gets its answer.
type PickedSender = oneshot::Sender<Result<Picked, String>>;
/// Where a form gets its answers.
type FormSender = oneshot::Sender<Result<QuestionFormResponse, String>>;
/// Where a proposed action gets its decision.
type ProposalSender = oneshot::Sender<Result<ProposalAnswer, String>>;

/// What a turn asks beyond [`TurnEvent::Ask`](super::TurnEvent::Ask)'s plain question: sent
/// by the turn's sink, tagged with its turn number (a stale turn's question is refused).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct TurnAsk {
    /// The asking turn.
    pub(super) turn: u64,
    /// The question and where its answer goes.
    pub(super) asked: Asked,
}

/// A question of [`TurnAsk`].
pub(super) enum Asked {
    /// A private pick with a checkbox (`requestChoice` of type `pickRemember`).
    Remember {
        /// The question.
        question: String,
        /// The options.
        choices: Vec<String>,
        /// The checkbox's label.
        checkbox_label: String,
        /// The answer.
        reply: PickedSender,
    },
    /// A form, to everyone (`requestInteraction`) or `private`ly (`requestForm`).
    Form {
        /// The questions (checked by the asker).
        form: QuestionForm,
        /// Only the originator is asked.
        private: bool,
        /// The answers.
        reply: FormSender,
    },
    /// A tool call shown to everyone before it runs (`requestInteraction` of type
    /// `proposeAction`).
    Proposal {
        /// The call.
        proposal: ActionProposal,
        /// The decision.
        reply: ProposalSender,
    },
}

/// What a pending interaction waits for.
enum Waiting {
    /// A choice index among `choices` options.
    Question {
        /// How many options there are.
        choices: usize,
        /// The option a cancel or time-out takes.
        default_id: Option<usize>,
        /// The turn's tool call.
        reply: AnswerSender,
    },
    /// A form's answers.
    Form {
        /// The form asked.
        form: QuestionForm,
        /// The turn's tool call.
        reply: FormSender,
    },
    /// A decision on a proposed action.
    Proposal {
        /// The action proposed.
        proposal: ActionProposal,
        /// The turn's tool call.
        reply: ProposalSender,
    },
    /// A client agent's `popupQuestion`: a choice index, as a question.
    Popup {
        /// The asking agent (its questions go when it does).
        agent: String,
        /// How many options there are.
        choices: usize,
        /// The option a cancel or time-out takes (the agent's `defaultId`).
        default_id: Option<usize>,
        /// The agent's invoke.
        reply: AnswerSender,
    },
}

/// A question waiting for an answer.
pub(super) struct Interaction {
    /// The `PendingInteractionRequest` sent to clients.
    request: Value,
    /// Originating connection (filtered clients only see their own).
    connection_id: Option<ConnectionId>,
    /// What it waits for, and where the answer goes.
    waiting: Waiting,
    /// The time-out timer.
    timer: SpawnHandle,
}

/// What a pending choice waits for.
enum ChoiceWaiting {
    /// `yesNo` / `multiChoice`: an index among `choices` options.
    Index {
        /// How many options there are.
        choices: usize,
        /// The turn's tool call.
        reply: AnswerSender,
    },
    /// `pickRemember`: `{selected, remember}`.
    Remember {
        /// How many options there are.
        choices: usize,
        /// The turn's tool call.
        reply: PickedSender,
    },
    /// `requestForm`: a `QuestionFormResponse`.
    Form {
        /// The form asked.
        form: QuestionForm,
        /// The turn's tool call.
        reply: FormSender,
    },
    /// A client agent's `pendingChoice`: its answer goes to the agent's `handleChoice`
    /// (boxed: it is the largest, and the rarest).
    Agent(Box<AgentChoice>),
}

/// What `respondToChoice` answers: TypeAgent's `CommandResult` (void: `None`) now, or once
/// a client agent's `handleChoice` has run.
pub(super) enum ChoiceReply {
    /// The answer now.
    Now(Option<Value>),
    /// The answer of the agent's `handleChoice`, shown and turned into a `CommandResult`.
    Later(LocalBoxFuture<'static, RpcResult<Option<Value>>>),
}

/// A private `requestChoice` / `requestForm` waiting for `respondToChoice`.
pub(super) struct Choice {
    /// Connection asked.
    connection_id: ConnectionId,
    /// What it waits for, and where the answer goes.
    waiting: ChoiceWaiting,
    /// The time-out timer.
    timer: SpawnHandle,
}

/// The choice index a `respondToChoice` response stands for: `true` / `false` (yes / no), a
/// number, an array's first number, or an object's `selected` (number or array).
fn choice_index(response: &Value) -> Result<usize, String> {
    match response {
        Value::Bool(true) => Ok(0),
        Value::Bool(false) => Ok(1),
        Value::Array(a) => a
            .first()
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .ok_or_else(|| "no choice".into()),
        Value::Number(n) => n
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| "bad choice".into()),
        other => other
            .get("selected")
            .and_then(|s| s.as_u64().or_else(|| s.as_array()?.first()?.as_u64()))
            .map(|n| n as usize)
            .ok_or_else(|| format!("cannot read the response {other}")),
    }
}

/// An index among `choices` options, or why not.
fn in_range(index: usize, choices: usize) -> Result<usize, String> {
    if index < choices {
        Ok(index)
    } else {
        Err(format!(
            "expected a choice from 0 to {}, got {index}",
            choices.saturating_sub(1)
        ))
    }
}

impl Waiting {
    /// Reads a client's answer (`None`: the response had no `value`); `Err` says why it is
    /// refused (the interaction stays open).
    fn check(&self, value: Option<&Value>) -> Result<Answer, String> {
        match self {
            Waiting::Question { choices, .. } | Waiting::Popup { choices, .. } => {
                let index = value
                    .and_then(Value::as_u64)
                    .ok_or_else(|| "a question's value must be a choice index".to_string())?;
                Ok(Answer::Index(in_range(index as usize, *choices)?))
            }
            Waiting::Form { form, .. } => value
                .ok_or_else(|| "a form's value must be a QuestionFormResponse".to_string())
                .and_then(|v| form.read_response(v))
                .map(Answer::Form),
            Waiting::Proposal { proposal, .. } => proposal.read_answer(value).map(Answer::Proposal),
        }
    }

    /// Hands `answer` (checked by [`check`](Self::check)) to the turn.
    fn resolve(self, answer: Answer) {
        match (self, answer) {
            (Waiting::Question { reply, .. } | Waiting::Popup { reply, .. }, Answer::Index(i)) => {
                drop(reply.send(Ok(i)))
            }
            (Waiting::Form { reply, .. }, Answer::Form(r)) => drop(reply.send(Ok(r))),
            (Waiting::Proposal { reply, .. }, Answer::Proposal(p)) => drop(reply.send(Ok(p))),
            _ => unreachable!("checked against the same kind"),
        }
    }

    /// A cancel (`cancelled`) or time-out: a question takes its default, a form is answered
    /// as dismissed, anything else fails saying which (an agent's question with TypeAgent's
    /// texts, which its SDK passes on to the agent's code).
    fn cancel(self, cancelled: bool) {
        let why = if cancelled {
            "the question was cancelled"
        } else {
            "no answer in time"
        };
        match self {
            Waiting::Question {
                default_id, reply, ..
            } => drop(reply.send(default_id.ok_or_else(|| why.to_string()))),
            Waiting::Popup {
                default_id, reply, ..
            } => {
                let why = if cancelled {
                    "Cancelled by client"
                } else {
                    "Interaction timed out"
                };
                drop(reply.send(default_id.ok_or_else(|| why.to_string())))
            }
            Waiting::Form { reply, .. } => drop(reply.send(Ok(QuestionFormResponse::cancelled()))),
            Waiting::Proposal { reply, .. } => drop(reply.send(Err(why.to_string()))),
        }
    }
}

/// A checked answer.
enum Answer {
    /// A question's index.
    Index(usize),
    /// A form's answers.
    Form(QuestionFormResponse),
    /// A proposal's decision.
    Proposal(ProposalAnswer),
}

impl Handler<TurnAsk> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: TurnAsk, ctx: &mut Self::Context) {
        let running = self
            .running
            .as_ref()
            .filter(|r| r.turn == msg.turn)
            .map(|r| r.request.clone());
        let stale = "the request is no longer running".to_string();
        match (running, msg.asked) {
            (None, Asked::Remember { reply, .. }) => drop(reply.send(Err(stale))),
            (None, Asked::Form { reply, .. }) => drop(reply.send(Err(stale))),
            (None, Asked::Proposal { reply, .. }) => drop(reply.send(Err(stale))),
            (
                Some(request),
                Asked::Remember {
                    question,
                    choices,
                    checkbox_label,
                    reply,
                },
            ) => {
                let args = json!([
                    request.id_obj(),
                    null,
                    "pickRemember",
                    question,
                    choices,
                    AGENT_SOURCE,
                    checkbox_label
                ]);
                let waiting = ChoiceWaiting::Remember {
                    choices: choices.len(),
                    reply,
                };
                self.send_choice(&request, "requestChoice", args, waiting, ctx);
            }
            (
                Some(request),
                Asked::Form {
                    form,
                    private: true,
                    reply,
                },
            ) => {
                let args = json!([request.id_obj(), null, form, AGENT_SOURCE]);
                let waiting = ChoiceWaiting::Form { form, reply };
                self.send_choice(&request, "requestForm", args, waiting, ctx);
            }
            (
                Some(request),
                Asked::Form {
                    form,
                    private: false,
                    reply,
                },
            ) => {
                let body = json!({"form": form});
                let waiting = Waiting::Form { form, reply };
                self.ask_everyone(Some(&request), AGENT_SOURCE, "form", body, waiting, ctx);
            }
            (Some(request), Asked::Proposal { proposal, reply }) => {
                let body = json!({"actionTemplates": proposal.template_config()});
                let waiting = Waiting::Proposal { proposal, reply };
                self.ask_everyone(
                    Some(&request),
                    AGENT_SOURCE,
                    "proposeAction",
                    body,
                    waiting,
                    ctx,
                );
            }
        }
        self.throttle(ctx);
    }
}

impl Conversation {
    /// Asks everyone a question (`requestInteraction`) on behalf of the running `request`;
    /// its turn is blocked on it until an answer, a cancel or the time-out.
    pub(super) fn open_interaction(
        &mut self,
        request: Request,
        question: String,
        choices: Vec<String>,
        reply: AnswerSender,
        ctx: &mut Context<Self>,
    ) {
        let default_id =
            (choices.len() == 2 && choices[1].eq_ignore_ascii_case("no")).then_some(1usize);
        let mut body = json!({"message": question, "choices": choices});
        if let Some(d) = default_id {
            body["defaultId"] = d.into();
        }
        let waiting = Waiting::Question {
            choices: choices.len(),
            default_id,
            reply,
        };
        self.ask_everyone(Some(&request), AGENT_SOURCE, "question", body, waiting, ctx);
    }

    /// Asks everyone client agent `agent`'s `popupQuestion` (no request: filtered clients
    /// are not asked, no turn is blocked); `reply` gets the index, or why there is none.
    pub(super) fn open_agent_question(
        &mut self,
        agent: &str,
        question: PopupQuestion,
        reply: AnswerSender,
        ctx: &mut Context<Self>,
    ) {
        let mut body = json!({"message": question.message, "choices": question.choices});
        if let Some(d) = question.default_id {
            body["defaultId"] = d.into();
        }
        let waiting = Waiting::Popup {
            agent: agent.to_string(),
            choices: question.choices.len(),
            default_id: question.default_id,
            reply,
        };
        self.ask_everyone(None, agent, "question", body, waiting, ctx);
    }

    /// How many of client agent `agent`'s questions wait for an answer.
    pub(super) fn agent_questions(&self, agent: &str) -> usize {
        self.interactions
            .values()
            .filter(|i| matches!(&i.waiting, Waiting::Popup { agent: a, .. } if a == agent))
            .count()
    }

    /// Client agent `agent` went away: its questions are cancelled and announced (their
    /// timers, still armed, find nothing when they fire).
    pub(super) fn cancel_agent_questions(&mut self, agent: &str) {
        let ids: Vec<String> = self
            .interactions
            .iter()
            .filter(|(_, i)| matches!(&i.waiting, Waiting::Popup { agent: a, .. } if a == agent))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let i = self.interactions.remove(&id).expect("listed above");
            i.waiting.cancel(true);
            self.log_entry(json!({"type": "interaction-cancelled", "interactionId": id}));
            self.broadcast("interactionCancelled", json!([id]), None);
        }
    }

    /// Sends a `requestInteraction` of `kind` (its own fields in `body`) from `source` to
    /// every client, logs it as `pending-interaction`, marks the running turn blocked on it
    /// (when it is `request`'s) and arms its time-out.
    fn ask_everyone(
        &mut self,
        request: Option<&Request>,
        source: &str,
        kind: &str,
        body: Value,
        waiting: Waiting,
        ctx: &mut Context<Self>,
    ) {
        let id = Uuid::new_v4().to_string();
        if let (Some(running), Some(_)) = (self.running.as_mut(), request) {
            running.blocked_on = Some(id.clone());
        }
        let created = crate::clock::now_millis();
        let mut pending = json!({
            "interactionId": id,
            "type": kind,
            "source": source,
            "timestamp": created,
        });
        let mut entry = json!({
            "type": "pending-interaction",
            "timestamp": created,
            "interactionId": id,
            "interactionType": kind,
            "source": source,
        });
        if let Some(request) = request {
            pending["requestId"] = request.id_obj();
            entry["requestId"] = request.id_obj();
        }
        if let Value::Object(fields) = body {
            for (k, v) in fields {
                entry[&k] = v.clone();
                pending[&k] = v;
            }
        }
        self.log_entry(entry);
        let origin = request.map(|r| r.origin);
        self.broadcast("requestInteraction", json!([pending]), origin);
        let timer_id = id.clone();
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, ctx| {
            log::info!(
                "conversation {}: interaction {timer_id} timed out",
                act.setup.id
            );
            act.cancel_interaction(&timer_id, false, ctx);
        });
        self.interactions.insert(
            id,
            Interaction {
                request: pending,
                connection_id: origin,
                waiting,
                timer,
            },
        );
    }

    /// A client's `respondToInteraction` (`value`: `None` when the response has none): the
    /// turn gets the answer, everyone learns it. An unknown id is silently fine (TypeAgent);
    /// an answer that does not fit the question is refused and the question stays open.
    pub(super) fn resolve_interaction(
        &mut self,
        id: &str,
        value: Option<Value>,
        ctx: &mut Context<Self>,
    ) -> RpcResult<()> {
        let Some(i) = self.interactions.get(id) else {
            return Ok(()); // unknown or expired: silently OK, as TypeAgent does
        };
        let answer = i.waiting.check(value.as_ref()).map_err(|why| {
            RpcError::Message(format!(
                "Invalid argument 0 (response) of respondToInteraction: {why}"
            ))
        })?;
        let i = self.interactions.remove(id).expect("found above");
        ctx.cancel_future(i.timer);
        i.waiting.resolve(answer);
        self.unblock(id);
        let mut entry = json!({"type": "interaction-resolved", "interactionId": id});
        if let Some(v) = &value {
            entry["response"] = v.clone();
        }
        self.log_entry(entry);
        // A proposal run as proposed has no value: the call has no second argument either.
        let args = match value {
            Some(v) => json!([id, v]),
            None => json!([id]),
        };
        self.broadcast("interactionResolved", args, None);
        Ok(())
    }

    /// Cancel (`announce`: a client's `cancelInteraction`) or time out (no broadcast).
    pub(super) fn cancel_interaction(&mut self, id: &str, announce: bool, ctx: &mut Context<Self>) {
        let Some(i) = self.interactions.remove(id) else {
            return;
        };
        ctx.cancel_future(i.timer);
        i.waiting.cancel(announce);
        self.unblock(id);
        self.log_entry(json!({"type": "interaction-cancelled", "interactionId": id}));
        if announce {
            self.broadcast("interactionCancelled", json!([id]), None);
        }
    }

    /// The running turn no longer waits on interaction `id`.
    fn unblock(&mut self, id: &str) {
        if let Some(r) = self
            .running
            .as_mut()
            .filter(|r| r.blocked_on.as_deref() == Some(id))
        {
            r.blocked_on = None;
        }
    }

    /// A cancelled request's questions go with it: its interactions are cancelled (and
    /// announced), every choice a turn waits for fails. A client agent's choice stays: it
    /// never held its request.
    pub(super) fn cancel_questions_of(&mut self, request_id: &RequestId, ctx: &mut Context<Self>) {
        let stale: Vec<String> = self
            .interactions
            .iter()
            .filter(|(_, i)| i.request["requestId"]["requestId"] == request_id.as_str())
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            self.cancel_interaction(&id, true, ctx);
        }
        let waited_for: Vec<String> = self
            .choices
            .iter()
            .filter(|(_, c)| !matches!(c.waiting, ChoiceWaiting::Agent(_)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in waited_for {
            if let Some(c) = self.choices.remove(&id) {
                ctx.cancel_future(c.timer);
                c.waiting.fail("cancelled");
            }
        }
    }

    /// Asks a client agent's choice (`method(args)`, keyed by the agent's `id`) of
    /// `connection_id`, the originator of its request, until `interaction_timeout`, as
    /// TypeAgent's `emitActionResult` does. A client agent's choice with the same id is
    /// replaced (TypeAgent's route map keeps the newest); an id a turn's own choice holds is
    /// refused. Past [`MAX_PENDING_AGENT_CHOICES`] the oldest agent choice is forgotten.
    pub(super) fn open_agent_choice(
        &mut self,
        id: String,
        method: &'static str,
        args: Value,
        connection_id: ConnectionId,
        choice: AgentChoice,
        ctx: &mut Context<Self>,
    ) {
        match self.choices.get(&id).map(|c| &c.waiting) {
            None => {}
            Some(ChoiceWaiting::Agent(_)) => {
                let old = self.choices.remove(&id).expect("found above");
                ctx.cancel_future(old.timer);
            }
            Some(_) => {
                log::warn!(
                    "conversation {}: a client agent's choice {id} names a pending choice of a \
                     turn; not asked",
                    self.setup.id
                );
                return;
            }
        }
        let agent_choices = || {
            self.choices.iter().filter_map(|(id, c)| match &c.waiting {
                ChoiceWaiting::Agent(a) => Some((a.asked, id)),
                _ => None,
            })
        };
        if agent_choices().count() >= MAX_PENDING_AGENT_CHOICES {
            if let Some((_, oldest)) = agent_choices().min() {
                let oldest = oldest.clone();
                log::info!(
                    "conversation {}: more than {MAX_PENDING_AGENT_CHOICES} client agents' \
                     choices waiting; choice {oldest} forgotten",
                    self.setup.id
                );
                let old = self.choices.remove(&oldest).expect("listed above");
                ctx.cancel_future(old.timer);
            }
        }
        self.emit(
            OutboundCall::new(method, &args),
            &Audience::Only(connection_id),
        );
        let (timer_id, asked) = (id.clone(), choice.asked);
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, _| {
            // Only this choice: a later one with the same id has its own time-out.
            let this = act
                .choices
                .get(&timer_id)
                .is_some_and(|c| matches!(&c.waiting, ChoiceWaiting::Agent(a) if a.asked == asked));
            if this {
                log::info!(
                    "conversation {}: client agent's choice {timer_id} expired",
                    act.setup.id
                );
                act.choices.remove(&timer_id);
            }
        });
        self.choices.insert(
            id,
            Choice {
                connection_id,
                waiting: ChoiceWaiting::Agent(Box::new(choice)),
                timer,
            },
        );
    }

    /// Forgets the client agents' choices for which `gone(choice, originator)` holds (their
    /// agent or their originator left); answering one then says `Choice not found or
    /// expired`. Their time-outs find nothing when they fire.
    pub(super) fn forget_agent_choices(
        &mut self,
        gone: impl Fn(&AgentChoice, ConnectionId) -> bool,
    ) {
        let id = self.setup.id;
        self.choices.retain(|choice_id, c| match &c.waiting {
            ChoiceWaiting::Agent(a) if gone(a, c.connection_id) => {
                log::debug!("conversation {id}: client agent's choice {choice_id} forgotten");
                false
            }
            _ => true,
        });
    }

    /// Asks the running `request`'s originator only (`requestChoice`: `yesNo` or
    /// `multiChoice`).
    pub(super) fn open_choice(
        &mut self,
        request: Request,
        question: String,
        choices: Vec<String>,
        reply: AnswerSender,
        ctx: &mut Context<Self>,
    ) {
        let kind = if choices.len() == 2 && choices[0] == "Yes" && choices[1] == "No" {
            "yesNo"
        } else {
            "multiChoice"
        };
        let args = json!([
            request.id_obj(),
            null,
            kind,
            question,
            choices,
            AGENT_SOURCE,
            null
        ]);
        let waiting = ChoiceWaiting::Index {
            choices: choices.len(),
            reply,
        };
        self.send_choice(&request, "requestChoice", args, waiting, ctx);
    }

    /// Sends `method(args)` (the choice id, argument 1, is filled in here) to the request's
    /// originator and waits for its `respondToChoice` until the time-out.
    fn send_choice(
        &mut self,
        request: &Request,
        method: &'static str,
        mut args: Value,
        waiting: ChoiceWaiting,
        ctx: &mut Context<Self>,
    ) {
        let id = Uuid::new_v4().to_string();
        args[1] = id.clone().into();
        self.emit(
            OutboundCall::new(method, &args),
            &Audience::Only(request.origin),
        );
        let timer_id = id.clone();
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, _| {
            if let Some(c) = act.choices.remove(&timer_id) {
                c.waiting.fail("no answer in time");
            }
        });
        self.choices.insert(
            id,
            Choice {
                connection_id: request.origin,
                waiting,
                timer,
            },
        );
    }

    /// A client's `respondToChoice`; only the connection that was asked may answer. The
    /// answer is TypeAgent's `CommandResult` of the continuation: for a turn's choice, void
    /// once the turn has the answer, `{lastError}` when the turn no longer waits for it; for a
    /// client agent's, what its `handleChoice` made of it ([`Conversation::answer_agent_choice`]).
    /// A response that does not fit the choice is refused and the choice stays open.
    pub(super) fn respond_to_choice(
        &mut self,
        id: String,
        connection_id: ConnectionId,
        response: Value,
        ctx: &mut Context<Self>,
    ) -> RpcResult<ChoiceReply> {
        let not_found = || RpcError::Message("Choice not found or expired".into());
        let Some(choice) = self
            .choices
            .get(&id)
            .filter(|c| c.connection_id == connection_id)
        else {
            return Err(not_found());
        };
        let refused = |why| {
            RpcError::Message(format!(
                "Invalid argument 1 (response) of respondToChoice: {why}"
            ))
        };
        if let ChoiceWaiting::Agent(agent) = &choice.waiting {
            agent.check(&response).map_err(refused)?;
            let choice = self.choices.remove(&id).expect("found above");
            ctx.cancel_future(choice.timer);
            let ChoiceWaiting::Agent(agent) = choice.waiting else {
                unreachable!("matched above")
            };
            return self
                .answer_agent_choice(id, *agent, response, ctx)
                .map(ChoiceReply::Later);
        }
        let answer = choice.waiting.check(&response).map_err(refused)?;
        let choice = self.choices.remove(&id).expect("found above");
        ctx.cancel_future(choice.timer);
        if choice.waiting.resolve(answer) {
            Ok(ChoiceReply::Now(None))
        } else {
            Ok(ChoiceReply::Now(Some(
                json!({"lastError": "The request no longer waits for this answer."}),
            )))
        }
    }

    /// Pending interactions a joining client sees (a filtered client: only its own).
    pub(super) fn pending_for(&self, connection: ConnectionId, filter: bool) -> Vec<Value> {
        self.interactions
            .values()
            .filter(|i| !filter || i.connection_id == Some(connection))
            .map(|i| i.request.clone())
            .collect()
    }
}

/// A checked choice answer.
enum ChoiceAnswer {
    /// `yesNo` / `multiChoice`.
    Index(usize),
    /// `pickRemember`.
    Picked(Picked),
    /// A form.
    Form(QuestionFormResponse),
}

impl ChoiceWaiting {
    /// Reads a `respondToChoice` response: `yesNo` a boolean (or an index), `multiChoice` an
    /// index array (leniently, its first index), `pickRemember` `{selected, remember}`, a form
    /// a `QuestionFormResponse`.
    fn check(&self, response: &Value) -> Result<ChoiceAnswer, String> {
        match self {
            ChoiceWaiting::Index { choices, .. } => Ok(ChoiceAnswer::Index(in_range(
                choice_index(response)?,
                *choices,
            )?)),
            ChoiceWaiting::Remember { choices, .. } => {
                Picked::read(response, *choices).map(ChoiceAnswer::Picked)
            }
            ChoiceWaiting::Form { form, .. } => {
                form.read_response(response).map(ChoiceAnswer::Form)
            }
            ChoiceWaiting::Agent(_) => unreachable!("an agent's choice is checked by its agent"),
        }
    }

    /// Hands a checked answer to the turn; false when the turn no longer waits for it.
    fn resolve(self, answer: ChoiceAnswer) -> bool {
        match (self, answer) {
            (ChoiceWaiting::Index { reply, .. }, ChoiceAnswer::Index(i)) => {
                reply.send(Ok(i)).is_ok()
            }
            (ChoiceWaiting::Remember { reply, .. }, ChoiceAnswer::Picked(p)) => {
                reply.send(Ok(p)).is_ok()
            }
            (ChoiceWaiting::Form { reply, .. }, ChoiceAnswer::Form(r)) => reply.send(Ok(r)).is_ok(),
            _ => unreachable!("checked against the same kind; an agent's is answered apart"),
        }
    }

    /// No answer will come (`why`); a form counts as dismissed.
    fn fail(self, why: &str) {
        match self {
            ChoiceWaiting::Index { reply, .. } => drop(reply.send(Err(why.to_string()))),
            ChoiceWaiting::Remember { reply, .. } => drop(reply.send(Err(why.to_string()))),
            ChoiceWaiting::Form { reply, .. } => {
                drop(reply.send(Ok(QuestionFormResponse::cancelled())))
            }
            // Nobody waits for it.
            ChoiceWaiting::Agent(_) => {}
        }
    }
}
