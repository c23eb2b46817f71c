//! The prompt's async side once joined: [`Prompt`] holds everything a session works with
//! (connection, session, the UI thread's channels, events, Ctrl-C, what waits at the prompt),
//! runs each typed line ([`Prompt::handle_line`]: local command, or a command submitted and
//! followed through its output, questions and choices until it completes) and renders what
//! other clients do meanwhile ([`Prompt::render_live`]). Every server call arrives typed
//! ([`ClientIo`], decoded once by the client library); nothing here indexes raw arguments.
//!
//! Who talks to it: `connect` in the parent module builds one and feeds it the lines and
//! events of its loop; `asking.rs` reads forms, proposals and pick-and-remember choices for it.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use roundtable_actors::agent::questions::QuestionForm;
use roundtable_actors::conversation::METER_EVENT;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::line::{self, Line};
use super::{asking, page_back, pick, refresh_meter, replay, Input, Session, Ui};
use crate::cli::render::{dim, stream_piece, StreamLines};
use crate::cli::{render_action, render_message, terminal_safe};
use crate::client::clientio::{
    Action, Choice, ChoiceKind, FormChoice, Interaction, InteractionKind, ManageConversation,
};
use crate::client::conversation::{manage_conversation, ActionResult};
use crate::client::{ClientIo, Connection, Event};

/// Something waiting at the prompt for `/answer`: another client's question, or a private
/// choice that arrived while no command of ours waited (a client agent's choice asked again,
/// or one whose command completed first).
#[derive(Debug, Clone)]
pub(super) enum Waiting {
    /// A `requestInteraction` question, answered with `respondToInteraction`.
    Question(Interaction),
    /// A `requestChoice`, answered with `respondToChoice`.
    Choice(Choice),
    /// A `requestForm`, answered with `respondToChoice`.
    Form(FormChoice),
}

impl Waiting {
    /// The id its answer names.
    fn id(&self) -> &str {
        match self {
            Waiting::Question(i) => &i.interaction_id,
            Waiting::Choice(c) => &c.choice_id,
            Waiting::Form(f) => &f.choice_id,
        }
    }
}

/// The prompt session's state, grouped so its steps are methods rather than functions of
/// many arguments.
pub(super) struct Prompt {
    /// The server.
    pub conn: Arc<Connection>,
    /// The joined conversation and what the prompt shows of it.
    pub session: Session,
    /// To the UI thread (print, ask, prompt).
    pub ui: std_mpsc::Sender<Ui>,
    /// From the UI thread (lines, answers, Ctrl-C at a question, Ctrl-D).
    pub input: mpsc::UnboundedReceiver<Input>,
    /// Server → client calls and the close.
    pub events: mpsc::UnboundedReceiver<Event>,
    /// Ctrl-C while no question is asked.
    pub interrupts: mpsc::UnboundedReceiver<()>,
    /// What waits for `/answer`, oldest first.
    pub waiting: Vec<Waiting>,
    /// Pieces of answers being written by others' requests, printed a line at a time above
    /// the prompt.
    pub lines: StreamLines,
    /// A piece of our own request's answer was printed without ending its line.
    pub streaming: bool,
}

impl Prompt {
    /// Prints a block of text above the prompt.
    fn print(&self, text: String) {
        let _ = self.ui.send(Ui::Print(text));
    }

    /// One line typed at the prompt (trimmed, not empty); see `line.rs` for what each means.
    pub async fn handle_line(&mut self, typed: &str) {
        match line::parse(typed) {
            Line::History => {
                let ui = self.ui.clone();
                page_back(&self.conn, &mut self.session, &move |t| {
                    let _ = ui.send(Ui::Print(t));
                })
                .await;
            }
            Line::Manage(command) => self.manage_locally(&command).await,
            Line::Answer(typed) => self.answer_waiting(&typed).await,
            Line::Help => {
                self.print(line::SLASH_HELP.into());
                self.run_command("@system help").await;
            }
            Line::UnknownSlash(name) => self.print(format!(
                "Unknown command: {name}. Type /help to see the slash commands."
            )),
            Line::Submit(text) => self.run_command(&text).await,
        }
    }

    /// Submits `text` and follows it until it completes: its output, its questions and
    /// choices, Ctrl-C (cancel). `manage-conversation` actions it asks for are carried out
    /// once the completion is in: a switch leaves this conversation, and a completion sent
    /// after the leave would never reach us.
    async fn run_command(&mut self, text: &str) {
        let conn = self.conn.clone();
        let client_request = uuid::Uuid::new_v4().to_string();
        let request_id = match conn
            .submit_command(&self.session.conversation_id, text, &client_request)
            .await
        {
            Ok(id) => id,
            Err(e) => return self.print(format!("error: {e}")),
        };
        let wait = conn.wait_command(&request_id);
        tokio::pin!(wait);
        let mut actions: Vec<ManageConversation> = Vec::new();
        loop {
            tokio::select! {
                outcome = &mut wait => {
                    // Output that arrived with the completion is still in the queue: show it.
                    while let Ok(event) = self.events.try_recv() {
                        self.after_completion(event, &request_id, &mut actions);
                    }
                    if let Err(e) = outcome {
                        self.print(format!("error: {e}"));
                    }
                    for command in actions {
                        self.manage_locally(&command).await;
                    }
                    return;
                }
                _ = self.interrupts.recv() => self.cancel(&request_id).await,
                Some(event) = self.events.recv() => {
                    if !self.while_running(event, &request_id, &mut actions).await {
                        return;
                    }
                }
            }
        }
    }

    /// The call of an event for the session's conversation (the meter noted); `None` for the
    /// close and other conversations' calls.
    fn current_call(&mut self, event: Event) -> Option<ClientIo> {
        let Event::Call {
            conversation_id,
            call,
        } = event
        else {
            return None;
        };
        if conversation_id != self.session.conversation_id {
            return None;
        }
        self.session.note_meter(&call);
        Some(call)
    }

    /// An event still queued when the completion was seen: shown, or kept as an action.
    fn after_completion(
        &mut self,
        event: Event,
        request_id: &str,
        actions: &mut Vec<ManageConversation>,
    ) {
        let Some(call) = self.current_call(event) else {
            return;
        };
        if let ClientIo::TakeAction {
            action: Action::ManageConversation(command),
            ..
        } = call
        {
            actions.push(command);
            return;
        }
        if self.own_control(&call, request_id) {
            return;
        }
        if let Some(text) = self.render_live(call, false) {
            self.end_stream();
            self.print(text);
        }
    }

    /// An event while our command runs: its questions are asked, its output shown. False
    /// when the connection closed (stop following).
    async fn while_running(
        &mut self,
        event: Event,
        request_id: &str,
        actions: &mut Vec<ManageConversation>,
    ) -> bool {
        if let Event::Closed { .. } = event {
            self.print("the server closed the connection".into());
            return false;
        }
        let Some(call) = self.current_call(event) else {
            return true;
        };
        if !matches!(call, ClientIo::Display { inline: true, .. }) {
            // A question or anything else starts on a line of its own.
            self.end_stream();
        }
        match call {
            ClientIo::RequestInteraction(i) if i.asked_by(request_id) => {
                self.ask_interaction(*i, request_id).await;
            }
            ClientIo::RequestForm(form) => {
                let response = asking::fill_form(&form.form, &self.ui, &mut self.input).await;
                self.respond_or_cancel(&form.choice_id, response.map(|r| json!(r)), request_id)
                    .await;
            }
            ClientIo::RequestChoice(choice) => self.ask_choice(choice, request_id).await,
            ClientIo::TakeAction {
                action: Action::ManageConversation(command),
                ..
            } => actions.push(command),
            call if self.own_control(&call, request_id) => {}
            ClientIo::Display {
                message,
                inline: true,
                ..
            } => {
                // Our answer as it is written, as it comes.
                let (piece, thinking) = stream_piece(&message);
                let safe = terminal_safe(&piece).into_owned();
                let shown = if thinking { dim(&safe) } else { safe };
                self.streaming = !shown.ends_with('\n');
                let _ = self.ui.send(Ui::Stream(shown));
            }
            call => {
                if let Some(text) = self.render_live(call, false) {
                    self.end_stream();
                    self.print(text);
                }
            }
        }
        true
    }

    /// Ends the line our answer's pieces left open, before anything else is printed.
    pub fn end_stream(&mut self) {
        if std::mem::take(&mut self.streaming) {
            let _ = self.ui.send(Ui::Stream("\n".into()));
        }
    }

    /// What to print above the prompt for a live call: a piece of an answer being written
    /// gives the lines it completes, anything else (the unfinished line first) its text;
    /// every line terminal-safe.
    pub fn lines_live(&mut self, call: ClientIo, at_prompt: bool) -> Vec<String> {
        if let ClientIo::Display {
            message,
            inline: true,
            ..
        } = &call
        {
            let (piece, thinking) = stream_piece(message);
            return self.lines.piece(&piece, thinking);
        }
        let Some(text) = self.render_live(call, at_prompt) else {
            return Vec::new();
        };
        let mut out: Vec<String> = self.lines.flush().into_iter().collect();
        out.push(terminal_safe(&text).into_owned());
        out
    }

    /// Our request's `requestInteraction`: a question asked at the prompt, a form field by
    /// field, a proposed action run or cancelled; answered with `respondToInteraction`.
    async fn ask_interaction(&mut self, asked: Interaction, request_id: &str) {
        let conversation = self.session.conversation_id.clone();
        let response = match asked.kind {
            InteractionKind::Question => {
                let question = asked.message.clone().unwrap_or_default();
                let _ = self.ui.send(Ui::Ask(question, asked.choices.clone()));
                match self.input.recv().await {
                    Some(Input::Answer(Some(i))) => Some(
                        json!({"interactionId": asked.interaction_id, "type": "question", "value": i}),
                    ),
                    Some(Input::Interrupt) => None,
                    _ => return,
                }
            }
            InteractionKind::Form => {
                let form = asked.form.clone().unwrap_or(QuestionForm {
                    message: None,
                    fields: Vec::new(),
                    paged: None,
                });
                asking::fill_form(&form, &self.ui, &mut self.input)
                    .await
                    .map(|value| {
                        json!({"interactionId": asked.interaction_id, "type": "form", "value": value})
                    })
            }
            _ => asking::decide_proposal(&asked, &self.ui, &mut self.input).await,
        };
        let Some(response) = response else {
            return self.cancel(request_id).await;
        };
        if let Err(e) = self
            .conn
            .respond_to_interaction_with(&conversation, response)
            .await
        {
            self.print(format!("error: {e}"));
        }
    }

    /// Our request's private `requestChoice`: asked at the prompt (a pick-and-remember as a
    /// pick and a yes / no), answered with `respondToChoice`.
    async fn ask_choice(&mut self, choice: Choice, request_id: &str) {
        let response = if choice.kind == ChoiceKind::PickRemember {
            asking::pick_remember(&choice, &self.ui, &mut self.input).await
        } else {
            let _ = self
                .ui
                .send(Ui::Ask(choice.message.clone(), choice.labels()));
            match self.input.recv().await {
                Some(Input::Answer(Some(i))) => Some(choice_response(&choice, i)),
                Some(Input::Interrupt) => None,
                _ => return,
            }
        };
        self.respond_or_cancel(&choice.choice_id, response, request_id)
            .await;
    }

    /// Sends a private choice's answer, or cancels the request when there is none (Ctrl-C).
    async fn respond_or_cancel(&self, choice_id: &str, response: Option<Value>, request_id: &str) {
        let Some(response) = response else {
            return self.cancel(request_id).await;
        };
        if let Err(e) = self
            .conn
            .respond_to_choice(&self.session.conversation_id, choice_id, response)
            .await
        {
            self.print(format!("error: {e}"));
        }
    }

    /// `@system clear` / `@system exit`, sent to us alone with our request's id: clears the
    /// screen, or ends the session once the request completes. Checked both while the request
    /// runs and on the events still queued when its completion is seen first (both may be
    /// ready at once: a busy machine delivers the `exit` and the completion together).
    fn own_control(&mut self, call: &ClientIo, request_id: &str) -> bool {
        match call {
            ClientIo::Clear { request_id: r } if r.is(request_id) => {
                let _ = self.ui.send(Ui::Clear);
                true
            }
            ClientIo::Exit { request_id: r } if r.is(request_id) => {
                self.session.exit_requested = true;
                true
            }
            _ => false,
        }
    }

    /// Ctrl-C: cancel the running command (its `requestCancelled` then ends the wait).
    async fn cancel(&self, request_id: &str) {
        match self
            .conn
            .cancel_command(&self.session.conversation_id, request_id)
            .await
        {
            Ok(kind) => log::debug!("cancel: {kind}"),
            Err(e) => self.print(format!("error: {e}")),
        }
    }

    /// Runs a `manage-conversation` subcommand here and prints its result; after a switch,
    /// replays the new conversation.
    async fn manage_locally(&mut self, command: &ManageConversation) {
        let conn = self.conn.clone();
        let result = manage_conversation(&conn, &mut self.session, command).await;
        self.print(render_action(&result));
        if let ActionResult::Ok {
            switched: Some(_), ..
        } = result
        {
            refresh_meter(&conn, &mut self.session).await;
            // Joined the new one and left the old: replay the new conversation's history.
            let ui = self.ui.clone();
            replay(&conn, &mut self.session, &move |t| {
                let _ = ui.send(Ui::Print(t));
            })
            .await;
        }
    }

    /// `/answer` for what waits at the prompt (the oldest first): read the answer, send it.
    /// Unanswered (Ctrl-C, or a text that names no choice), it stays waiting.
    async fn answer_waiting(&mut self, typed: &str) {
        let Some(waiting) = self.waiting.first().cloned() else {
            return self.print("There is no question waiting.".into());
        };
        let conversation = self.session.conversation_id.clone();
        let conn = self.conn.clone();
        let (answered, sent) = match &waiting {
            Waiting::Question(q) => match pick(typed, &q.choices) {
                Some(i) => (
                    true,
                    conn.respond_to_interaction(&conversation, &q.interaction_id, i)
                        .await,
                ),
                None => return self.how_to_answer(q.choices.len()),
            },
            Waiting::Choice(c) => {
                let response = if c.kind == ChoiceKind::PickRemember {
                    asking::pick_remember(c, &self.ui, &mut self.input).await
                } else {
                    match pick(typed, &c.labels()) {
                        Some(i) => Some(choice_response(c, i)),
                        None => return self.how_to_answer(c.labels().len()),
                    }
                };
                self.respond_waiting(c.choice_id.as_str(), response).await
            }
            Waiting::Form(f) => {
                let response = asking::fill_form(&f.form, &self.ui, &mut self.input).await;
                self.respond_waiting(f.choice_id.as_str(), response.map(|r| json!(r)))
                    .await
            }
        };
        if let Err(e) = sent {
            self.print(format!("error: {e}"));
        }
        if answered {
            self.waiting.retain(|w| w.id() != waiting.id());
        }
    }

    /// Sends a waiting choice's answer: (answered, what sending it did); nothing is sent for
    /// no answer (Ctrl-C: it keeps waiting).
    async fn respond_waiting(
        &self,
        choice_id: &str,
        response: Option<Value>,
    ) -> (bool, crate::client::ClientResult<()>) {
        match response {
            Some(response) => (
                true,
                self.conn
                    .respond_to_choice(&self.session.conversation_id, choice_id, response)
                    .await,
            ),
            None => (false, Ok(())),
        }
    }

    /// Says how to answer a question of `count` choices.
    fn how_to_answer(&self, count: usize) {
        self.print(format!("Answer with a number from 1 to {count}."));
    }

    /// The text of a live call for the current conversation, if worth showing. `at_prompt`:
    /// no command of ours runs (questions of others wait for `/answer`).
    pub fn render_live(&mut self, call: ClientIo, at_prompt: bool) -> Option<String> {
        match call {
            ClientIo::SetUserRequest {
                request_id,
                command,
            } => {
                let who = request_id.connection_id.unwrap_or_default();
                (who != self.session.connection_id).then(|| format!("> [client {who}] {command}"))
            }
            ClientIo::Display {
                message, temporary, ..
            } => (!temporary).then(|| render_message(&message)),
            ClientIo::Notify(n) if n.event == "commandComplete" => n.data["result"]["lastError"]
                .as_str()
                .map(|e| format!("error: {e}")),
            ClientIo::RequestCancelled { reason, .. } => Some(format!(
                "(request {})",
                crate::cli::render::cancelled_text(&reason)
            )),
            ClientIo::RequestInteraction(i) if at_prompt => Some(self.waiting_question(*i)),
            ClientIo::InteractionEnded { interaction_id } => {
                self.waiting.retain(|w| w.id() != interaction_id);
                None
            }
            ClientIo::RequestChoice(c) => Some(self.wait(Waiting::Choice(c))),
            ClientIo::RequestForm(f) => Some(self.wait(Waiting::Form(f))),
            _ => None,
        }
    }

    /// Another client's interaction seen at the prompt: a question waits for `/answer`; a
    /// form or a proposal is answered in the client that asked.
    fn waiting_question(&mut self, asked: Interaction) -> String {
        match asked.kind {
            InteractionKind::Question => self.wait(Waiting::Question(asked)),
            InteractionKind::Form => {
                let heading = asked
                    .form
                    .as_ref()
                    .and_then(|f| f.message.as_deref())
                    .map_or(String::new(), |m| format!(": {m}"));
                format!(
                    "? [client {}] asks a form{heading} (answer it in that client)",
                    asked.asker()
                )
            }
            _ => format!(
                "? [client {}] asks to confirm an action (answer it in that client)",
                asked.asker()
            ),
        }
    }

    /// Keeps `waiting` for `/answer` (replacing an earlier one with its id) and says so.
    fn wait(&mut self, waiting: Waiting) -> String {
        let line = waiting_line(&waiting);
        self.waiting.retain(|w| w.id() != waiting.id());
        self.waiting.push(waiting);
        line
    }
}

/// `respondToChoice`'s response for choice `i`: `yesNo` is a boolean, others the indexes.
fn choice_response(choice: &Choice, i: usize) -> Value {
    if choice.kind == ChoiceKind::YesNo {
        json!(i == 0)
    } else {
        json!([i])
    }
}

/// The line announcing something that waits for `/answer`.
fn waiting_line(waiting: &Waiting) -> String {
    match waiting {
        Waiting::Question(q) => format!(
            "? {} {} (answer with /answer <n>)",
            q.message.as_deref().unwrap_or(""),
            asking::listed(&q.choices)
        ),
        Waiting::Form(f) => {
            let heading = f
                .form
                .message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"));
            format!("? {} asks a form{heading} (answer with /answer)", f.source)
        }
        Waiting::Choice(c) if c.kind == ChoiceKind::PickRemember => {
            format!("? {} (answer with /answer)", c.message)
        }
        Waiting::Choice(c) => format!(
            "? {} {} (answer with /answer <n>)",
            c.message,
            asking::listed(&c.labels())
        ),
    }
}

/// The context meter a `contextMeter` notification carries, if `call` is one.
pub(super) fn meter_of(
    call: &ClientIo,
) -> Option<Option<roundtable_actors::agent::usage::ContextMeter>> {
    match call {
        ClientIo::Notify(n) if n.event == METER_EVENT => {
            Some(serde_json::from_value(n.data.clone()).unwrap_or(None))
        }
        _ => None,
    }
}
