//! Questions a running turn asks: an *interaction* goes to everyone (`requestInteraction`,
//! logged, answered by any client with `respondToInteraction`), a *choice* goes privately to
//! the request's originator (`requestChoice` / `requestForm`, not logged, answered with
//! `respondToChoice`; `choices.rs`). Both time out after `interaction_timeout`.
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
//! A question the turn stops waiting for (the turn dropped it: the MCP call that asked it
//! ended) is withdrawn: an interaction is cancelled for every client (`interactionCancelled`),
//! a choice is forgotten, and a running request is no longer `blockedOn` it.
//!
//! Who talks to it: the turn (`TurnEvent::Ask`, [`TurnAsk`]), the client agents' results
//! (`client_agents.rs`) and `popupQuestion`s (`agent_context.rs`), the dispatcher (answers,
//! cancels) and the queue (a cancelled turn's questions are cancelled with it).

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::agent_context::PopupQuestion;
use super::choices::ChoiceWaiting;
use super::replies::{in_range, AnswerSender, FormSender, PickedSender};
use super::request_queue::Request;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::questions::{ActionProposal, ProposalAnswer, QuestionForm, QuestionFormResponse};
use crate::ids::{ConnectionId, RequestId};
use crate::protocol::{RpcError, RpcResult};

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
    /// Resolves (its sender dropped) once the turn stops waiting: answered, or dropped
    /// unanswered, when the question is withdrawn.
    pub(super) withdrawn: oneshot::Receiver<()>,
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
        let running = self.queue.current(msg.turn).map(|r| r.request.clone());
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
                let id = self.send_choice(&request, "requestChoice", args, waiting, ctx);
                self.withdraw_when_dropped(id, msg.withdrawn, ctx);
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
                let id = self.send_choice(&request, "requestForm", args, waiting, ctx);
                self.withdraw_when_dropped(id, msg.withdrawn, ctx);
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
                let id =
                    self.ask_everyone(Some(&request), AGENT_SOURCE, "form", body, waiting, ctx);
                self.withdraw_when_dropped(id, msg.withdrawn, ctx);
            }
            (Some(request), Asked::Proposal { proposal, reply }) => {
                let body = json!({"actionTemplates": proposal.template_config()});
                let waiting = Waiting::Proposal { proposal, reply };
                let id = self.ask_everyone(
                    Some(&request),
                    AGENT_SOURCE,
                    "proposeAction",
                    body,
                    waiting,
                    ctx,
                );
                self.withdraw_when_dropped(id, msg.withdrawn, ctx);
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

    /// Withdraws question `id` (an interaction or a choice) once `withdrawn` resolves, if it
    /// is still open then: the turn that asked stopped waiting for it (see `sink.rs`). An
    /// interaction is cancelled for every client (`interactionCancelled`) and no longer
    /// blocks the request; a choice is forgotten.
    fn withdraw_when_dropped(
        &mut self,
        id: String,
        withdrawn: oneshot::Receiver<()>,
        ctx: &mut Context<Self>,
    ) {
        ctx.spawn(async move { drop(withdrawn.await) }.into_actor(self).map(
            move |(), act, ctx| {
                if act.interactions.contains_key(&id) {
                    log::info!(
                        "conversation {}: interaction {id} withdrawn (the turn stopped waiting \
                         for it)",
                        act.setup.id
                    );
                    act.cancel_interaction(&id, true, ctx);
                    act.announce_blocked_change(ctx);
                } else {
                    act.forget_turn_choice(&id, ctx);
                }
            },
        ));
    }

    /// Sends a `requestInteraction` of `kind` (its own fields in `body`) from `source` to
    /// every client, logs it as `pending-interaction`, marks the running turn blocked on it
    /// (when it is `request`'s) and arms its time-out; its id.
    fn ask_everyone(
        &mut self,
        request: Option<&Request>,
        source: &str,
        kind: &str,
        body: Value,
        waiting: Waiting,
        ctx: &mut Context<Self>,
    ) -> String {
        let id = Uuid::new_v4().to_string();
        if let (Some(running), Some(_)) = (self.queue.running_mut(), request) {
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
            id.clone(),
            Interaction {
                request: pending,
                connection_id: origin,
                waiting,
                timer,
            },
        );
        id
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
            .queue
            .running_mut()
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
        self.fail_turn_choices(ctx);
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
