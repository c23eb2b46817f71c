//! One `tools/call`: [`run_call`] sends it on the MCP thread's runtime and answers the turn;
//! [`call`] is its turn side, on the conversation's thread, which hands the call's progress
//! lines and elicitations to the turn's sink while it waits.
//!
//! The call's end (its result, its time-out, the turn's cancel) ends its questions: the form
//! being asked is dropped, which withdraws it from every client (`interactionCancelled`, see
//! the conversation's `TurnSink::ask_form`), and the elicitations waiting behind it are
//! answered `cancel`. A call has at most [`MAX_ELICITATIONS_PER_CALL`] elicitations waiting
//! (the handler cancels the rest at once, [`super::handler`]).
//!
//! Who talks to it: [`McpServer`](super::server::McpServer)'s `call` (the turn) and the handler (progress,
//! elicitation), through [`InFlight`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::ServiceError;
use roundtable_actors::agent::turn::{ToolCallContext, ToolOutput, SERVER_SEPARATOR};
use roundtable_actors::agent::LocalBoxFuture;
use roundtable_actors::redact::redact_url_credentials;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

pub use super::in_flight::{CallEvent, InFlight, MAX_ELICITATIONS_PER_CALL};
use super::shared::{lock, Shared};
use super::{content, elicit, wire};

/// Calls one server may have in flight; past it a call is refused at once (`is_error`).
pub const MAX_CALLS_IN_FLIGHT: usize = 64;
/// Events (progress lines, questions) queued per call before further progress is dropped;
/// more than [`MAX_ELICITATIONS_PER_CALL`], so questions always fit.
const CALL_EVENTS: usize = 16;
/// Longest a call that changes the roots waits for a server that reads them to ask again.
const ROOTS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Removes a call from the in-flight list when it ends, however it ends.
struct InFlightGuard<'a> {
    /// The server.
    shared: &'a Shared,
    /// The call.
    id: u64,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.calls).retain(|c| c.id != self.id);
    }
}

/// An rmcp error as the call's or the listing's error says it: Roundtable's own refusal of
/// an answer (too large, too deep) as it was written, anything else with the credentials of
/// any URL in it hidden.
pub fn service_error(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) if e.code.0 == wire::REFUSED_CODE => e.message.to_string(),
        e => redact_url_credentials(&e.to_string()),
    }
}

/// One `tools/call` on the MCP runtime. Answers on `done`, or, when the turn dropped its end
/// (cancelled), sends `notifications/cancelled` and answers nothing.
pub async fn run_call(
    shared: Arc<Shared>,
    tool: String,
    arguments: Map<String, Value>,
    root: Option<PathBuf>,
    events: mpsc::Sender<CallEvent>,
    mut done: oneshot::Sender<ToolOutput>,
) {
    let name = shared.name().to_string();
    let full = format!("{name}{SERVER_SEPARATOR}{tool}");
    let peer = match shared.peer() {
        Ok(p) => p,
        Err(e) => {
            let _ = done.send(ToolOutput::error(e));
            return;
        }
    };
    let id = shared.next_call.fetch_add(1, Ordering::Relaxed);
    {
        let mut calls = lock(&shared.calls);
        if calls.len() >= MAX_CALLS_IN_FLIGHT {
            drop(calls);
            let _ = done.send(ToolOutput::error(format!(
                "MCP server `{name}` has {MAX_CALLS_IN_FLIGHT} calls in flight; try again later"
            )));
            return;
        }
        calls.push(InFlight {
            id,
            tool: full.clone(),
            progress_token: None,
            events,
            root: root.clone(),
            elicitations: Arc::default(),
            refused: Arc::default(),
        });
    }
    let _guard = InFlightGuard {
        shared: &shared,
        id,
    };
    // A directory the server has not been told of: say the roots changed, so a server that
    // reads them asks again (and gets this call's directory among them).
    if let Some(root) = &root {
        if !lock(&shared.roots).contains(root) {
            let asked = shared.roots_asked.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            match peer.notify_roots_list_changed().await {
                Err(e) => log::debug!("MCP server {name}: roots/list_changed not sent: {e}"),
                // A server that reads its roots gets to read them before the call.
                Ok(()) if shared.reads_roots.load(Ordering::Relaxed) => {
                    if tokio::time::timeout(ROOTS_WAIT, asked).await.is_err() {
                        log::debug!("MCP server {name}: did not ask roots/list again");
                    } else {
                        // rmcp writes our answer from a task of its own: a ping's round
                        // trip lets it reach the server before the call does.
                        let ping = ClientRequest::PingRequest(Default::default());
                        let _ = tokio::time::timeout(ROOTS_WAIT, peer.send_request(ping)).await;
                    }
                }
                Ok(()) => {}
            }
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(tool.clone()).with_arguments(arguments),
    ));
    let mut handle = match peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            let _ = done.send(ToolOutput::error(format!(
                "MCP server `{name}` could not take the call: {}",
                service_error(&e)
            )));
            return;
        }
    };
    if let Some(call) = lock(&shared.calls).iter_mut().find(|c| c.id == id) {
        call.progress_token = Some(handle.progress_token.clone());
    }
    let limit = shared.config.timeout;
    let output = tokio::select! {
        answer = &mut handle.rx => match answer {
            Ok(Ok(result)) => content::to_output(&serde_json::to_value(&result).unwrap_or(Value::Null)),
            Ok(Err(ServiceError::McpError(e))) if e.code.0 == wire::REFUSED_CODE => {
                ToolOutput::error(format!("MCP server `{name}` {}", e.message))
            }
            Ok(Err(ServiceError::McpError(e))) => ToolOutput::error(format!(
                "MCP server `{name}` answered an error: {}",
                e.message
            )),
            Ok(Err(ServiceError::TransportClosed)) | Err(_) => ToolOutput::error(format!(
                "MCP server `{name}` stopped during the call; it is being restarted"
            )),
            Ok(Err(e)) => ToolOutput::error(format!(
                "MCP server `{name}`: the call failed ({})",
                service_error(&e)
            )),
        },
        _ = tokio::time::sleep(limit) => {
            let _ = handle.cancel(Some(format!("timed out after {} s", limit.as_secs_f64()))).await;
            log::info!("MCP server {name}: {full} timed out after {} s; cancelled", limit.as_secs_f64());
            ToolOutput::error(format!(
                "{full} did not answer within {} s (the server's `timeout`); the call was cancelled",
                limit.as_secs_f64()
            ))
        },
        _ = done.closed() => {
            log::info!("MCP server {name}: {full} cancelled (the request was cancelled)");
            let _ = handle.cancel(Some("the request was cancelled".into())).await;
            return;
        }
    };
    let _ = done.send(output);
}

/// An elicitation waiting to be asked.
struct Waiting {
    /// The server's message.
    message: String,
    /// The requested schema.
    schema: Value,
    /// Where the answer goes.
    reply: oneshot::Sender<elicit::Answer>,
}

/// The elicitation being asked: the form's future and where its answer goes.
type Asking<'a> = (
    LocalBoxFuture<'a, elicit::Answer>,
    oneshot::Sender<elicit::Answer>,
);

/// The turn side of a call of `tool` on the server of `shared`: spawns [`run_call`] on the
/// MCP runtime, then shows its progress and asks its elicitations, one at a time, until its
/// output comes; the call's end drops the form being asked (withdrawing it) and the ones
/// waiting (answered `cancel`).
pub fn call<'a>(
    shared: &Arc<Shared>,
    tool: &'a str,
    arguments: Map<String, Value>,
    context: ToolCallContext<'a>,
) -> LocalBoxFuture<'a, ToolOutput> {
    let name = shared.name().to_string();
    let (events_tx, mut events) = mpsc::channel(CALL_EVENTS);
    let (done_tx, mut done) = oneshot::channel();
    shared.runtime.spawn(run_call(
        shared.clone(),
        tool.to_string(),
        arguments,
        context.working_directory.map(std::path::Path::to_path_buf),
        events_tx,
        done_tx,
    ));
    let sink = context.sink;
    Box::pin(async move {
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        let mut asking: Option<Asking<'a>> = None;
        loop {
            while asking.is_none() {
                let Some(next) = waiting.pop_front() else {
                    break;
                };
                // The server gave up on it (its request was cancelled) before it was asked.
                if next.reply.is_closed() {
                    continue;
                }
                let server = name.clone();
                let form = Box::pin(async move {
                    elicit::ask(sink, &server, &next.message, &next.schema).await
                });
                asking = Some((form, next.reply));
            }
            tokio::select! {
                output = &mut done => {
                    return output.unwrap_or_else(|_| {
                        ToolOutput::error(format!("MCP server `{name}`: the call was dropped"))
                    });
                }
                Some(event) = events.recv() => match event {
                    CallEvent::Progress(text) => sink.status(text),
                    CallEvent::Elicit { message, schema, reply } => {
                        waiting.push_back(Waiting { message, schema, reply });
                    }
                },
                answer = async {
                    let (form, reply) = asking.as_mut().expect("checked");
                    tokio::select! {
                        answer = form => Some(answer),
                        // The server stopped waiting (the call or its connection ended).
                        _ = reply.closed() => None,
                    }
                }, if asking.is_some() => {
                    let (_, reply) = asking.take().expect("checked");
                    if let Some(answer) = answer {
                        let _ = reply.send(answer);
                    }
                }
            }
        }
    })
}
