//! The running turn's view of its conversation ([`ConversationSink`], the agent loop's
//! [`TurnSink`]): what the turn shows, asks and books goes to the conversation actor as
//! [`TurnEvent`]s and [`TurnAsk`]s stamped with the turn's number.
//!
//! Two things are decided here, on the turn's side. Status lines (an MCP server's progress)
//! are coalesced: at most one per [`STATUS_COALESCE`] reaches the conversation, the newest,
//! as `queueStateChanged` is (a server sending 100,000 progress notifications otherwise sent
//! every client thousands of frames a second, and a client reading slowly was closed as a
//! slow consumer). And a question the turn stops waiting for (its future dropped: the MCP
//! call that asked it ended) is withdrawn: the future holds a sender whose drop the
//! conversation watches (`interactions.rs`).
//!
//! Who talks to it: the agent loop (through [`TurnSink`]); `turn_events.rs` makes one per turn.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;

use super::handoff_packet::HandoffError;
use super::interactions::{Asked, TurnAsk};
use super::turn_messages::{TurnBooking, TurnEvent, MAX_CLIENT_ACTIONS_PER_TURN};
use super::Conversation;
use crate::agent::questions::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use crate::agent::turn::{TurnSink, TurnStep};
use crate::agent::{AnswerDelta, LocalBoxFuture};

/// At most one status line of a turn reaches the conversation (and its clients) per this
/// long, the newest: a progress bar stays live (ten updates a second) while a server that
/// floods progress costs each client ten small frames a second, as `queueStateChanged`'s
/// coalescing does.
pub const STATUS_COALESCE: Duration = Duration::from_millis(100);

/// The running turn's view of its conversation.
pub(super) struct ConversationSink {
    /// The conversation running the turn.
    addr: Addr<Conversation>,
    /// The turn's number, stamped on every event.
    turn: u64,
    /// `takeAction` calls booked so far (at most [`MAX_CLIENT_ACTIONS_PER_TURN`]).
    client_actions: Cell<usize>,
    /// The handoff booked, if any (one per turn).
    handoff: RefCell<Option<String>>,
    /// The newest status not yet sent, and whether its timer is armed (see
    /// [`STATUS_COALESCE`]); shared with that timer.
    status: Rc<RefCell<(Option<String>, bool)>>,
}

impl ConversationSink {
    /// The sink of turn `turn` of the conversation at `addr`, nothing booked yet.
    pub(super) fn new(addr: Addr<Conversation>, turn: u64) -> ConversationSink {
        ConversationSink {
            addr,
            turn,
            client_actions: Cell::new(0),
            handoff: RefCell::new(None),
            status: Rc::default(),
        }
    }
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

    fn step(&self, step: TurnStep) {
        self.addr.do_send(TurnEvent::Step {
            turn: self.turn,
            step,
        });
    }

    /// Coalesced: the first status arms a timer of [`STATUS_COALESCE`]; when it fires, the
    /// newest status goes to the conversation (one `temporary` display to every client).
    fn stream(&self, delta: AnswerDelta) {
        self.addr.do_send(TurnEvent::Stream {
            turn: self.turn,
            delta,
        });
    }

    fn status(&self, text: String) {
        let mut slot = self.status.borrow_mut();
        slot.0 = Some(text);
        if slot.1 {
            return;
        }
        slot.1 = true;
        let (status, addr, turn) = (self.status.clone(), self.addr.clone(), self.turn);
        actix::spawn(async move {
            actix::clock::sleep(STATUS_COALESCE).await;
            let newest = {
                let mut slot = status.borrow_mut();
                slot.1 = false;
                slot.0.take()
            };
            if let Some(text) = newest {
                addr.do_send(TurnEvent::Status { turn, text });
            }
        });
    }

    fn ask_remember(
        &self,
        question: String,
        choices: Vec<String>,
        checkbox_label: String,
    ) -> LocalBoxFuture<'static, Result<Picked, String>> {
        let (reply, rx) = oneshot::channel();
        let asking = self.ask_more(Asked::Remember {
            question,
            choices,
            checkbox_label,
            reply,
        });
        Box::pin(answered(rx, asking))
    }

    fn ask_form(
        &self,
        form: QuestionForm,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<QuestionFormResponse, String>> {
        let (reply, rx) = oneshot::channel();
        let asking = self.ask_more(Asked::Form {
            form,
            private,
            reply,
        });
        Box::pin(answered(rx, asking))
    }

    fn propose_action(
        &self,
        proposal: ActionProposal,
    ) -> LocalBoxFuture<'static, Result<ProposalAnswer, String>> {
        let (reply, rx) = oneshot::channel();
        let asking = self.ask_more(Asked::Proposal { proposal, reply });
        Box::pin(answered(rx, asking))
    }

    fn client_action(&self, action: &str, data: Value) -> Result<(), String> {
        let booked = self.client_actions.get();
        if booked >= MAX_CLIENT_ACTIONS_PER_TURN {
            return Err(format!(
                "this reply already sent {MAX_CLIENT_ACTIONS_PER_TURN} actions to the client, \
                 the most one reply may send"
            ));
        }
        self.client_actions.set(booked + 1);
        self.addr.do_send(TurnEvent::Booked {
            turn: self.turn,
            booking: TurnBooking::ClientAction {
                action: action.to_string(),
                data,
            },
        });
        Ok(())
    }

    fn handoff(&self, source: &str) -> Result<(), String> {
        self.check_handoff(source)?;
        *self.handoff.borrow_mut() = Some(source.to_string());
        self.addr.do_send(TurnEvent::Booked {
            turn: self.turn,
            booking: TurnBooking::Handoff(source.to_string()),
        });
        Ok(())
    }

    fn check_handoff(&self, _source: &str) -> Result<(), String> {
        match self.handoff.borrow().as_ref() {
            Some(booked) => Err(HandoffError::AlreadyBooked(booked.clone()).to_string()),
            None => Ok(()),
        }
    }
}

impl ConversationSink {
    /// Sends a form, a pick-and-remember or a proposal to the conversation
    /// (`interactions.rs`); the question stays asked while the returned sender lives (the
    /// conversation withdraws it when it is dropped unanswered).
    fn ask_more(&self, asked: Asked) -> oneshot::Sender<()> {
        let (asking, withdrawn) = oneshot::channel();
        self.addr.do_send(TurnAsk {
            turn: self.turn,
            asked,
            withdrawn,
        });
        asking
    }
}

/// The answer on `rx`, or why none came; `asking` is held until then, so dropping this
/// future (the turn stopped waiting) withdraws the question.
async fn answered<T>(
    rx: oneshot::Receiver<Result<T, String>>,
    asking: oneshot::Sender<()>,
) -> Result<T, String> {
    let answer = rx
        .await
        .unwrap_or_else(|_| Err("the question was dropped".into()));
    drop(asking);
    answer
}
