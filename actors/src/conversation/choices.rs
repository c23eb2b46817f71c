//! Private questions (*choices*): asked of one connection only (`requestChoice` of type
//! `yesNo`, `multiChoice`, `pickRemember`, or `requestForm`), not logged, answered with
//! `respondToChoice`, timed out after `interaction_timeout`. The questions everyone is asked
//! (interactions) are `interactions.rs`.
//!
//! A choice is asked either by the running turn (it waits for the answer) or by a client
//! agent's `ActionResult.pendingChoice` ([`AgentChoice`], TypeAgent's `pendingChoiceRoutes`):
//! that card does not hold its request, which completes; it waits in the same table, keyed by
//! the agent's `choiceId`, until it is answered (the agent's `handleChoice` runs and
//! `respondToChoice` returns its `CommandResult`), forgotten (its agent or its originator
//! left, the agent was unregistered, [`MAX_PENDING_AGENT_CHOICES`] newer ones came) or
//! expired (`interaction_timeout`). Cancelling a request fails the turn's choices only.
//!
//! Who talks to it: the turn (through `interactions.rs`'s `TurnAsk`), the client agents'
//! results (`client_agents.rs`), the dispatcher (answers).

use actix::prelude::*;
use serde_json::{json, Value};
use uuid::Uuid;

use super::audience::Audience;
use super::client_agents::AgentChoice;
use super::replies::{in_range, AnswerSender, FormSender, PickedSender};
use super::request_queue::Request;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::client_agent::MAX_PENDING_AGENT_CHOICES;
use crate::agent::questions::{Picked, QuestionForm, QuestionFormResponse};
use crate::agent::LocalBoxFuture;
use crate::client::OutboundCall;
use crate::ids::ConnectionId;
use crate::protocol::{RpcError, RpcResult};

/// What a pending choice waits for.
pub(super) enum ChoiceWaiting {
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

impl Conversation {
    /// Every choice a turn waits for fails (its request was cancelled). A client agent's
    /// choice stays: it never held its request.
    pub(super) fn fail_turn_choices(&mut self, ctx: &mut Context<Self>) {
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

    /// A turn's choice `id` is no longer waited for (see `withdraw_when_dropped`): forgotten,
    /// if still open (an answer then gets `Choice not found or expired`).
    pub(super) fn forget_turn_choice(&mut self, id: &str, ctx: &mut Context<Self>) {
        if self
            .choices
            .get(id)
            .is_some_and(|c| !matches!(c.waiting, ChoiceWaiting::Agent(_)))
        {
            let choice = self.choices.remove(id).expect("found above");
            ctx.cancel_future(choice.timer);
            choice.waiting.fail("the turn stopped waiting for it");
        }
    }

    /// Sends `method(args)` (the choice id, argument 1, is filled in here) to the request's
    /// originator and waits for its `respondToChoice` until the time-out; the choice's id.
    pub(super) fn send_choice(
        &mut self,
        request: &Request,
        method: &'static str,
        mut args: Value,
        waiting: ChoiceWaiting,
        ctx: &mut Context<Self>,
    ) -> String {
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
            id.clone(),
            Choice {
                connection_id: request.origin,
                waiting,
                timer,
            },
        );
        id
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
    pub(super) fn fail(self, why: &str) {
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
