//! What a turn needs of the world around it, as traits and their data: [`TurnSink`] (where
//! its output, questions and bookings go: the conversation, or a test), [`ToolServer`] (an
//! external tool server: MCP) with [`ToolCallContext`] and [`ToolOutput`], and the
//! [`TurnStep`]s it reports. The turn (`turn.rs`), the tool routing (`routing.rs`) and the
//! tools (`tools/`) all use them; none of them is needed to name them.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::questions::{
    ActionProposal, Picked, ProposalAnswer, QuestionForm, QuestionFormResponse,
};
use super::{AnswerDelta, LocalBoxFuture, ToolSpec};

/// What a tool call gives back: text for the model, images it should look at, and whether
/// the call failed. A failure is a result the model sees, never a failed turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// The result as text (the tool message the model reads), or the error.
    pub text: String,
    /// Images the tool returned (`data:image/…;base64,…` URLs). The model gets them after the
    /// turn's tool results, as it gets a request's attachments; the history keeps a note.
    pub images: Vec<String>,
    /// True when the call failed.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            ..ToolOutput::default()
        }
    }

    /// A failed call: `text` says why.
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ..ToolOutput::default()
        }
    }
}

impl From<Result<String, String>> for ToolOutput {
    fn from(result: Result<String, String>) -> ToolOutput {
        match result {
            Ok(text) => ToolOutput::text(text),
            Err(e) => ToolOutput::error(e),
        }
    }
}

/// What a tool server can reach of the running turn while one of its calls runs.
#[derive(Clone, Copy)]
pub struct ToolCallContext<'a> {
    /// The turn's output: progress goes to [`TurnSink::status`], questions a tool needs
    /// answered (MCP elicitation) to [`TurnSink::ask_form`].
    pub sink: &'a dyn TurnSink,
    /// The directory the request works in ([`TurnInput::working_directory`](super::turn::TurnInput::working_directory), already
    /// checked against the server's working-directory policy): offered to tools that take a
    /// path (an MCP server's roots).
    pub working_directory: Option<&'a Path>,
    /// The call's index among the request's actions (`actionIndex` of its `setDisplayInfo`):
    /// what a client agent's `setDynamicDisplay` names.
    pub action_index: usize,
    /// Conversation moves and handoffs the model asks for (`manage_conversation`) are first
    /// put to the requester as a yes/no question: false only for a provider whose calls come
    /// from the requester's typed words alone ([`Provider::acts_on_typed_words_only`](super::Provider::acts_on_typed_words_only)).
    pub ask_before_conversation_actions: bool,
}

/// How a tool server is doing, for `@system config` / `@system config agents`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolServerStatus {
    /// How it is reached, without secrets: `stdio: mcp-server-time --local-timezone UTC`,
    /// `Streamable HTTP: http://127.0.0.1:3001/mcp`.
    pub transport: String,
    /// `connected`, `starting`, `failed: <reason>`, `restarting in 2 s (<reason>)`.
    pub state: String,
    /// Tools offered now.
    pub tools: usize,
}

/// An external source of tools (exposed to the model as `<server>__<tool>`).
pub trait ToolServer: Send + Sync {
    /// The server's tools now (unprefixed names). Read before every model call, so a
    /// server whose list changed is offered its new tools from the next model call on.
    fn tools(&self) -> Vec<ToolSpec>;
    /// Runs one of them. The future may borrow the context (it runs inside the turn).
    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput>;
    /// Its state, for `@system config`; `None` for sources that have none to show (the
    /// agents clients host).
    fn status(&self) -> Option<ToolServerStatus> {
        None
    }
}

/// A step of the turn, reported as it happens: the conversation times the request with them
/// (`CommandResult.metrics`) and tells clients which action runs (`setDisplayInfo`) and what
/// it gave (`appendDiagnosticData`).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnStep {
    /// A model call ended after `duration` (TypeAgent's "parse": translating the request).
    ModelCall {
        /// How long the provider took.
        duration: Duration,
    },
    /// Tool call number `index` (from 0, across the turn's model calls) starts.
    ActionStarted {
        /// Its index in the turn.
        index: usize,
        /// The tool's name as offered (`calculate`, `server__tool`, `agent__action`).
        tool: String,
        /// Its input.
        input: Value,
    },
    /// Tool call `index` ended after `duration`.
    ActionFinished {
        /// Its index in the turn.
        index: usize,
        /// The tool's name as offered.
        tool: String,
        /// What the model is told: the result, or the error.
        result: String,
        /// The call failed.
        is_error: bool,
        /// How long it took.
        duration: Duration,
    },
}

/// Where a turn's output goes.
pub trait TurnSink {
    /// Shows something to the clients (`appendDisplay`). `extra` holds fields merged into the
    /// `IAgentMessage` (`toolCall`, `toolResult`) so rich clients can render blocks. The
    /// whole text of an answer that was streamed ([`TurnSink::stream`]) comes here too, once
    /// its model call has ended, with `"streamed": true` in `extra` (and `"thinking": true`
    /// for the model's thinking): what the log keeps and a later client replays.
    fn display(&self, content: Value, extra: Option<Value>);
    /// A piece of the model's answer as it is written ([`AnswerDelta`]): shown to the people
    /// as it grows. Its whole text follows as a [`TurnSink::display`] once the model call has
    /// ended. The default shows nothing.
    fn stream(&self, delta: AnswerDelta) {
        let _ = delta;
    }
    /// Asks the user to pick one of `choices`; resolves to the chosen index. `private`: only
    /// the originating client is asked (`requestChoice`), otherwise everyone in the
    /// conversation (`requestInteraction`).
    fn ask(
        &self,
        question: String,
        choices: Vec<String>,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<usize, String>>;
    /// Asks the originating client only to pick one of `choices`, with a checkbox labelled
    /// `checkbox_label` (TypeAgent's `pickRemember` choice); resolves to the pick and the
    /// checkbox. The default refuses (a sink with no one to ask).
    fn ask_remember(
        &self,
        question: String,
        choices: Vec<String>,
        checkbox_label: String,
    ) -> LocalBoxFuture<'static, Result<Picked, String>> {
        let _ = (question, choices, checkbox_label);
        Box::pin(async { Err("nobody here can answer a choice".to_string()) })
    }
    /// Asks a form of several questions (see [`QuestionForm`]); resolves to the answers, or
    /// to [`QuestionFormResponse::cancelled`] when it is dismissed, cancelled or times out.
    /// `private`: only the originating client is asked (`requestForm`), otherwise everyone
    /// (`requestInteraction` of type `form`). The form must pass [`QuestionForm::check`].
    ///
    /// For any source of structured questions, not only the `ask_user_form` tool: an MCP
    /// server's elicitation request (a message and a flat schema of enum, boolean and string
    /// properties) maps onto a form (enum → pick, boolean → yesNo, string → pick with free
    /// text) whose answers, keyed by field id, become the elicitation result (`cancelled` →
    /// `decline`). The default refuses (a sink with no one to ask).
    fn ask_form(
        &self,
        form: QuestionForm,
        private: bool,
    ) -> LocalBoxFuture<'static, Result<QuestionFormResponse, String>> {
        let _ = (form, private);
        Box::pin(async { Err("nobody here can answer a form".to_string()) })
    }
    /// Shows a tool call to everyone before it runs (`requestInteraction` of type
    /// `proposeAction`); resolves to what they decided. A cancel or time-out by a client is an
    /// `Err`. The default refuses (a sink with no one to ask).
    fn propose_action(
        &self,
        proposal: ActionProposal,
    ) -> LocalBoxFuture<'static, Result<ProposalAnswer, String>> {
        let _ = proposal;
        Box::pin(async { Err("nobody here can confirm an action".to_string()) })
    }
    /// Shows a passing status while a tool call runs (an MCP server's progress): a
    /// `temporary` display that the next one replaces, never logged.
    fn status(&self, _text: String) {}
    /// A step of the turn (timing, the action running); ignored unless the sink cares.
    fn step(&self, _step: TurnStep) {}
    /// Asks the client that sent the request to carry out `action` with `data`
    /// (`takeAction(requestId, action, data)`, which clients do not answer), once the turn
    /// has ended: just before the request completes, where `@conversation` sends it. `Err`
    /// says why not (the turn asked for too many). The default refuses (no client here).
    fn client_action(&self, action: &str, data: Value) -> Result<(), String> {
        let _ = data;
        Err(format!("no client here can carry out \"{action}\""))
    }
    /// Asks for a handoff of the conversation `source` (a name or an id) into this one once
    /// the turn has ended; the request then completes with its outcome. `Err` says why not
    /// (one handoff per turn). The default refuses (no conversation here).
    fn handoff(&self, source: &str) -> Result<(), String> {
        let _ = source;
        Err("there is no conversation here to hand off into".to_string())
    }
    /// Whether [`TurnSink::handoff`] would take `source` now, without booking it: a handoff
    /// the requester is asked to allow first is checked here, so nobody is asked about one
    /// that would be refused anyway. The default refuses as `handoff` does.
    fn check_handoff(&self, source: &str) -> Result<(), String> {
        let _ = source;
        Err("there is no conversation here to hand off into".to_string())
    }
}
