//! Sending an invoke to a client agent's hosting connection (`InvokeClientAgent`) and
//! waiting for its answer; a call that opens an action context is guarded (`CallGuard`), so
//! a cancelled turn closes it on the connection (`CloseClientAgentCall`).
//!
//! Who talks to it: the rest of this module (tools, commands, choices, queries); the hosting
//! connection (`src/transport/hosted_agents.rs`) answers.

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;

use super::messages::{
    AgentAnswer, ClientAgentHost, CloseClientAgentCall, InvokeClientAgent, OpenAction,
};
use crate::agent::client_agent::CallError;

/// The text an error of a call to the agent shows: the agent's own message when it answered
/// `invokeError` (TypeAgent shows `e.message`), else what went wrong on the way.
pub(super) fn call_error_text(e: CallError) -> String {
    match e {
        CallError::Failed { error, .. } => error,
        other => other.to_string(),
    }
}

/// A call's waiting side: when it is dropped before the answer (the turn's future was
/// cancelled), the hosting connection is told to stop waiting ([`CloseClientAgentCall`]).
struct CallGuard {
    /// The close message, sent once on drop unless disarmed.
    close: Option<(Recipient<CloseClientAgentCall>, CloseClientAgentCall)>,
}

impl CallGuard {
    /// The answer came (or the connection went): nothing to close.
    fn disarm(&mut self) {
        self.close = None;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some((to, msg)) = self.close.take() {
            log::debug!(
                "client agent {}: call with actionContextId {} dropped by its turn",
                msg.name,
                msg.action_context_id
            );
            to.do_send(msg);
        }
    }
}

/// Sends one invoke to the agent's connection; the answer (or why there is none) arrives on
/// the receiver.
pub(super) fn send_invoke(
    name: &str,
    host: &ClientAgentHost,
    method: &'static str,
    args: Value,
    action: Option<OpenAction>,
    keep_text: bool,
) -> oneshot::Receiver<Result<AgentAnswer, CallError>> {
    let (reply, answer) = oneshot::channel();
    host.invoke.do_send(InvokeClientAgent {
        name: name.to_string(),
        token: host.token,
        method,
        args,
        action,
        keep_text,
        reply,
    });
    answer
}

/// Runs an invoke that opens an action context, with a [`CallGuard`]: dropping the future
/// before the answer closes the call on the connection (with `cancelAction` when asked).
pub(super) async fn invoke_in_action_context(
    name: String,
    host: ClientAgentHost,
    method: &'static str,
    args: Value,
    action: OpenAction,
    cancel_action: bool,
) -> Result<Option<Value>, CallError> {
    let answer = send_invoke(&name, &host, method, args, Some(action), false);
    let mut guard = CallGuard {
        close: Some((
            host.close.clone(),
            CloseClientAgentCall {
                name: name.clone(),
                token: host.token,
                action_context_id: action.action_context_id,
                cancel_action,
            },
        )),
    };
    let answer = answer.await;
    guard.disarm();
    match answer {
        Ok(answer) => answer.map(|a| a.result),
        // The connection stopped before it took or answered the call.
        Err(_) => Err(CallError::Disconnected(name)),
    }
}
