//! Questions a running turn asks: an *interaction* goes to everyone (`requestInteraction`,
//! logged, answered by any client with `respondToInteraction`), a *choice* goes privately to
//! the request's originator (`requestChoice`, not logged, answered with `respondToChoice`).
//! Both time out after `interaction_timeout`; an interaction then takes its `defaultId`.
//!
//! Who talks to it: the turn (`TurnEvent::Ask`), the dispatcher (answers, cancels) and the
//! queue (a cancelled turn's questions are cancelled with it).

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::queue::Request;
use super::routing::Audience;
use super::{Conversation, AGENT_SOURCE};
use crate::client::OutboundCall;
use crate::ids::{ConnectionId, RequestId};
use crate::protocol::{RpcError, RpcResult};

/// Where a turn's question gets its answer (a choice index, or why there is none).
pub(super) type AnswerSender = oneshot::Sender<Result<usize, String>>;

/// A question waiting for an answer.
pub(super) struct Interaction {
    /// The `PendingInteractionRequest` sent to clients.
    request: Value,
    /// Originating connection (filtered clients only see their own).
    connection_id: Option<ConnectionId>,
    /// `defaultId`, used when the interaction is cancelled or times out.
    default_id: Option<usize>,
    /// Resolves the waiting tool call.
    reply: AnswerSender,
    /// The time-out timer.
    timer: SpawnHandle,
}

/// A private `requestChoice` waiting for `respondToChoice`.
pub(super) struct Choice {
    /// Connection asked.
    connection_id: ConnectionId,
    /// Resolves the waiting tool call.
    reply: AnswerSender,
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
    /// Asks everyone (`requestInteraction`) on behalf of the running `request`; its turn is
    /// blocked on it until an answer, a cancel or the time-out.
    pub(super) fn open_interaction(
        &mut self,
        request: Request,
        question: String,
        choices: Vec<String>,
        reply: AnswerSender,
        ctx: &mut Context<Self>,
    ) {
        let id = Uuid::new_v4().to_string();
        if let Some(running) = self.running.as_mut() {
            running.blocked_on = Some(id.clone());
        }
        let created = crate::clock::now_millis();
        let default_id =
            (choices.len() == 2 && choices[1].eq_ignore_ascii_case("no")).then_some(1usize);
        let mut pending = json!({
            "interactionId": id,
            "type": "question",
            "requestId": request.id_obj(),
            "source": AGENT_SOURCE,
            "timestamp": created,
            "message": question,
            "choices": choices,
        });
        if let Some(d) = default_id {
            pending["defaultId"] = d.into();
        }
        let mut entry = json!({
            "type": "pending-interaction",
            "timestamp": created,
            "interactionId": id,
            "interactionType": "question",
            "source": AGENT_SOURCE,
            "requestId": request.id_obj(),
            "message": pending["message"],
            "choices": pending["choices"],
        });
        if let Some(d) = default_id {
            entry["defaultId"] = d.into();
        }
        self.log_entry(entry);
        self.broadcast("requestInteraction", json!([pending]), Some(request.origin));
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
                connection_id: Some(request.origin),
                default_id,
                reply,
                timer,
            },
        );
    }

    /// A client's `respondToInteraction`: the turn gets the answer, everyone learns it.
    pub(super) fn resolve_interaction(&mut self, id: &str, value: Value, ctx: &mut Context<Self>) {
        let Some(i) = self.interactions.remove(id) else {
            return; // unknown or expired: silently OK, as TypeAgent does
        };
        ctx.cancel_future(i.timer);
        let index = value.as_u64().map(|n| n as usize);
        let _ = i
            .reply
            .send(index.ok_or_else(|| format!("answer {value} is not a choice index")));
        self.unblock(id);
        self.log_entry(
            json!({"type": "interaction-resolved", "interactionId": id, "response": value}),
        );
        self.broadcast("interactionResolved", json!([id, value]), None);
    }

    /// Cancel (`announce`: a client's `cancelInteraction`) or time out (no broadcast).
    pub(super) fn cancel_interaction(&mut self, id: &str, announce: bool, ctx: &mut Context<Self>) {
        let Some(i) = self.interactions.remove(id) else {
            return;
        };
        ctx.cancel_future(i.timer);
        let _ = i.reply.send(
            i.default_id
                .ok_or_else(|| "the question was cancelled".to_string()),
        );
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
    /// announced), every pending choice fails.
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
        for (_, c) in self.choices.drain() {
            ctx.cancel_future(c.timer);
            let _ = c.reply.send(Err("cancelled".into()));
        }
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
        let id = Uuid::new_v4().to_string();
        let kind = if choices.len() == 2 && choices[0] == "Yes" && choices[1] == "No" {
            "yesNo"
        } else {
            "multiChoice"
        };
        let call = OutboundCall::new(
            "requestChoice",
            &json!([request.id_obj(), id, kind, question, choices, AGENT_SOURCE]),
        );
        self.emit(call, &Audience::Only(request.origin));
        let timer_id = id.clone();
        let timer = ctx.run_later(self.setup.runtime.interaction_timeout, move |act, _| {
            if let Some(c) = act.choices.remove(&timer_id) {
                let _ = c.reply.send(Err("no answer in time".into()));
            }
        });
        self.choices.insert(
            id,
            Choice {
                connection_id: request.origin,
                reply,
                timer,
            },
        );
    }

    /// A client's `respondToChoice`; only the connection that was asked may answer.
    pub(super) fn respond_to_choice(
        &mut self,
        id: String,
        connection_id: ConnectionId,
        response: &Value,
        ctx: &mut Context<Self>,
    ) -> RpcResult<()> {
        let not_found = || RpcError::Message("Choice not found or expired".into());
        let Some(choice) = self.choices.remove(&id) else {
            return Err(not_found());
        };
        if choice.connection_id != connection_id {
            self.choices.insert(id, choice);
            return Err(not_found());
        }
        ctx.cancel_future(choice.timer);
        let _ = choice.reply.send(choice_index(response));
        Ok(())
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
