//! The `dispatcher:<id>` channel: what a joined client asks of its conversation. An invoke
//! ([`DispatcherInvoke`]) is parsed once into a [`DispatcherRequest`] (every argument checked,
//! with the error texts of [`protocol`](crate::protocol)), then runs one function per method;
//! a `call` ([`DispatcherCall`]) is parsed into a [`DispatcherNotice`] and never answered.
//!
//! Who talks to it: the transport's connections, one message per frame, in socket order.

use actix::prelude::*;
use serde_json::{json, Value};

use super::choices::ChoiceReply;
use super::client_agents::AgentQuery;
use super::completion;
use super::feedback::{self, Feedback, HideOp};
use super::request_queue::{CancelReason, Request};
use super::{Conversation, AGENT_SOURCE};
use crate::agent::attachments;
use crate::ids::{ConnectionId, RequestId};
use crate::protocol::trace::{new_trace_id, TraceParent};
use crate::protocol::{invalid, Args, RpcError, RpcResult};
use crate::storage::display_log::{self, HistoryRead};

/// A `dispatcher:<id>` answer: a JSON value (`None` = void) or ready-made JSON text (history).
pub enum DispatcherReply {
    /// A value, or void.
    Value(Option<Value>),
    /// Raw JSON text for the `result` key.
    Raw(String),
    /// The conversation queued the whole `invokeResult` frame on the caller's socket itself,
    /// in line with the calls it sends that client (a submit's answer goes out before any
    /// call of its request, as TypeAgent's server sends it): the connection sends nothing.
    Sent,
}

/// An invoke on `dispatcher:<id>` from one client.
#[derive(Message)]
#[rtype(result = "RpcResult<DispatcherReply>")]
pub struct DispatcherInvoke {
    /// The caller's connection id in this conversation.
    pub connection_id: ConnectionId,
    /// Method.
    pub method: String,
    /// Arguments.
    pub args: Args,
    /// The client's trace context (`metadata.traceparent`, valid): a submitted request
    /// carries its trace id; `None` gives it a fresh one.
    pub trace: Option<TraceParent>,
    /// Where the invoke came from, when the caller lets the conversation answer a submit in
    /// line ([`DispatcherReply::Sent`]); `None`: every answer comes back as the message's
    /// result.
    pub in_line: Option<InvokeOrigin>,
}

/// An invoke's channel (as the client spelled it) and callId: what its answer frame names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokeOrigin {
    /// `dispatcher:<id>`, exactly as the invoke named it.
    pub channel: String,
    /// The invoke's callId.
    pub call_id: u64,
}

/// What a [`DispatcherInvoke`] answers with; an `async` answer waits for a write barrier or
/// a disk read without holding the actor (later messages are handled meanwhile).
type Answer = ResponseFuture<RpcResult<DispatcherReply>>;

/// A `dispatcher:<id>` invoke with its arguments checked: one variant per method.
enum DispatcherRequest {
    /// `submitCommand(command, attachments?, options?, clientRequestId?, requestId?)`.
    Submit(Request),
    /// `interrupt(command, attachments?, options?, clientRequestId?)`: the running request is
    /// cancelled and this one goes first.
    Interrupt(Request),
    /// `getDisplayHistory(afterSeq?, page?)`.
    GetDisplayHistory {
        /// Entries after this seq; all when absent.
        after_seq: Option<i64>,
        /// Roundtable extension: only the newest entries of those (before a seq); TypeAgent's
        /// clients never send it.
        page: Option<HistoryPage>,
    },
    /// `getQueueSnapshot()`.
    GetQueueSnapshot,
    /// `cancelCommand(requestId)`.
    CancelCommand {
        /// The server-side request id.
        request_id: RequestId,
    },
    /// `promoteCommand(requestId)`.
    PromoteCommand {
        /// The server-side request id.
        request_id: RequestId,
    },
    /// `respondToInteraction({interactionId, value})`.
    RespondToInteraction {
        /// `(interactionId, value)`, the value `None` when the response has no `value` key
        /// (a proposed action run as proposed); `None` when the response names no
        /// interaction.
        answer: Option<(String, Option<Value>)>,
    },
    /// `respondToChoice(choiceId, response)`.
    RespondToChoice {
        /// The choice asked.
        choice_id: String,
        /// The answer as sent (`null` when absent).
        response: Value,
    },
    /// `getStatus()`.
    GetStatus,
    /// `getCommandCompletion(input, direction)`.
    GetCommandCompletion {
        /// The typed text (`None` when not a string: the empty result, as TypeAgent's).
        prefix: Option<String>,
        /// `"forward"` / `"backward"`.
        direction: completion::Direction,
    },
    /// `getDeveloperMode()`.
    GetDeveloperMode,
    /// `close()`: the client leaves and its connection is told.
    Close,
    /// `getDynamicDisplay(appAgentName, type, displayId)`, `getTemplateSchema(
    /// templateAgentName, templateName, data)` and `getTemplateCompletion(templateAgentName,
    /// templateName, data, propertyName)`: forwarded to a client agent that implements the
    /// method; no built-in agent has one.
    AskAgent {
        /// The agent asked.
        agent: String,
        /// What it is asked.
        query: AgentQuery,
    },
    /// `checkCache(request)`: Roundtable has no construction cache.
    CheckCache,
    /// `getAgentSchemas(agentName?)`.
    GetAgentSchemas {
        /// Only this agent's (an unknown name gives `[]`).
        agent: Option<String>,
    },
    /// `recordUserFeedback(requestId, rating, category?, comment?, includeContext?)`.
    RecordUserFeedback(Feedback),
    /// `recordUserHide(…)`, `restoreAllHidden()`, `flushHidden()`.
    Hide(HideOp),
}

impl DispatcherRequest {
    /// Checks `method`'s arguments; `connection_id` is the caller (the originator of a
    /// submitted request).
    fn parse(
        method: &str,
        args: &Args,
        connection_id: ConnectionId,
    ) -> RpcResult<DispatcherRequest> {
        let m = method;
        Ok(match m {
            "submitCommand" => Self::Submit(parse_request(m, args, connection_id, true)?),
            "interrupt" => Self::Interrupt(parse_request(m, args, connection_id, false)?),
            "getDisplayHistory" => Self::GetDisplayHistory {
                after_seq: args.opt_int(m, 0, "afterSeq")?,
                page: HistoryPage::parse(m, args)?,
            },
            "getQueueSnapshot" => Self::GetQueueSnapshot,
            "cancelCommand" => Self::CancelCommand {
                request_id: args.req_str(m, 0, "requestId")?.into(),
            },
            "promoteCommand" => Self::PromoteCommand {
                request_id: args.req_str(m, 0, "requestId")?.into(),
            },
            "respondToInteraction" => {
                let response = args
                    .opt_object(m, 0, "response")?
                    .ok_or_else(|| invalid(m, 0, "response", "an object"))?;
                let answer = response
                    .get("interactionId")
                    .and_then(Value::as_str)
                    .map(|id| (id.to_string(), response.get("value").cloned()));
                Self::RespondToInteraction { answer }
            }
            "respondToChoice" => Self::RespondToChoice {
                choice_id: args.req_str(m, 0, "choiceId")?.to_string(),
                response: args.get(1).cloned().unwrap_or(Value::Null),
            },
            "getStatus" => Self::GetStatus,
            "getCommandCompletion" => Self::GetCommandCompletion {
                prefix: args.get(0).and_then(Value::as_str).map(str::to_string),
                direction: completion::Direction::parse(args.get(1).and_then(Value::as_str)),
            },
            "getDeveloperMode" => Self::GetDeveloperMode,
            "close" => Self::Close,
            "getDynamicDisplay" => Self::AskAgent {
                agent: args.req_str(m, 0, "appAgentName")?.to_string(),
                query: AgentQuery::DynamicDisplay {
                    display_type: args.req_str(m, 1, "type")?.to_string(),
                    display_id: args.req_str(m, 2, "displayId")?.to_string(),
                },
            },
            "getTemplateSchema" | "getTemplateCompletion" => {
                let agent = args.req_str(m, 0, "templateAgentName")?.to_string();
                let template_name = args.req_str(m, 1, "templateName")?.to_string();
                let data = args.get(2).cloned();
                let query = if m == "getTemplateCompletion" {
                    AgentQuery::TemplateCompletion {
                        template_name,
                        data,
                        property_name: args.req_str(m, 3, "propertyName")?.to_string(),
                    }
                } else {
                    AgentQuery::TemplateSchema {
                        template_name,
                        data,
                    }
                };
                Self::AskAgent { agent, query }
            }
            "checkCache" => {
                args.req_str(m, 0, "request")?;
                Self::CheckCache
            }
            "getAgentSchemas" => Self::GetAgentSchemas {
                agent: args.opt_str(m, 0, "agentName")?.map(str::to_string),
            },
            "recordUserFeedback" => Self::RecordUserFeedback(Feedback::parse(m, args)?),
            "recordUserHide" | "restoreAllHidden" | "flushHidden" => {
                Self::Hide(HideOp::parse(m, args)?)
            }
            _ => return Err(RpcError::NoHandler(method.to_string())),
        })
    }

    /// A submitted request takes the trace id of the client's `traceparent`, if it sent one.
    fn traced(mut self, trace: Option<TraceParent>) -> DispatcherRequest {
        if let (Self::Submit(r) | Self::Interrupt(r), Some(t)) = (&mut self, trace) {
            r.trace_id = t.trace_id;
        }
        self
    }
}

/// Most entries one `getDisplayHistory` page holds.
pub const MAX_PAGE: u64 = 1000;

/// `getDisplayHistory`'s optional second argument `{limit, beforeSeq?}` (a Roundtable
/// extension): the newest `limit` entries (1 to [`MAX_PAGE`]) of those the call would return,
/// counting only entries with `seq < beforeSeq` when given, in seq order.
struct HistoryPage {
    /// Entries at most.
    limit: u64,
    /// Only entries before this seq.
    before_seq: Option<i64>,
}

impl HistoryPage {
    /// Argument 1 of `m`, `None` when absent or `null`.
    fn parse(m: &str, args: &Args) -> RpcResult<Option<HistoryPage>> {
        let Some(page) = args.opt_object(m, 1, "page")? else {
            return Ok(None);
        };
        let limit = crate::protocol::opt_field_count(Some(page), m, 1, "limit")
            .ok()
            .flatten()
            .filter(|l| (1..=MAX_PAGE).contains(l))
            .ok_or_else(|| invalid(m, 1, "limit", "an integer from 1 to 1000"))?;
        let before_seq = crate::protocol::opt_field_int(Some(page), m, 1, "beforeSeq")?;
        Ok(Some(HistoryPage { limit, before_seq }))
    }
}

/// The request of a `submitCommand` (`with_id`: it may name its own `requestId`) or an
/// `interrupt`. Attachments past their bounds ([`attachments::check_bounds`]) refuse it here,
/// before anything is queued, written or broadcast. `options` (TypeAgent's
/// `ProcessCommandOptions`: `workingDirectory`, `activeSchemas`, `activeSchemaFamilies`,
/// `reasoningProfile`, `noReasoning`, `userContext`, and any other key) is kept as sent, for
/// the queue entry; its `workingDirectory` is resolved when the request is queued.
fn parse_request(m: &str, args: &Args, origin: ConnectionId, with_id: bool) -> RpcResult<Request> {
    let text = args.req_str(m, 0, "command")?.to_string();
    let attachments = match args.get(1) {
        None => Vec::new(),
        Some(Value::Array(a)) => {
            attachments::check_bounds(a)?;
            a.clone()
        }
        Some(_) => return Err(invalid(m, 1, "attachments", "an array")),
    };
    let options = args
        .opt_object(m, 2, "options")?
        .map(|o| Value::Object(o.clone()));
    let client_request_id = args.get(3).cloned();
    let request_id = if with_id {
        args.opt_str(m, 4, "requestId")?.map(RequestId::from)
    } else {
        None
    };
    Ok(Request {
        request_id: request_id.unwrap_or_else(RequestId::new_random),
        origin,
        client_request_id,
        size: text.len()
            + attachments.iter().map(attachments::size).sum::<usize>()
            + options.as_ref().map_or(0, |o| o.to_string().len()),
        text,
        attachments,
        options,
        submitted_at: crate::clock::now_millis(),
        started_at: None,
        trace_id: new_trace_id(),
        working_directory: None,
    })
}

/// An answer ready now.
fn value(v: Value) -> Answer {
    Box::pin(async move { Ok(DispatcherReply::Value(Some(v))) })
}

/// The void answer.
fn void() -> Answer {
    Box::pin(async { Ok(DispatcherReply::Value(None)) })
}

/// An error answer.
fn fail(e: RpcError) -> Answer {
    Box::pin(async move { Err(e) })
}

impl Handler<DispatcherInvoke> for Conversation {
    type Result = Answer;

    fn handle(&mut self, msg: DispatcherInvoke, ctx: &mut Self::Context) -> Self::Result {
        if self.deleted {
            if msg.method == "getStatus" {
                return value(deleted_status(&self.setup.id.to_string()));
            }
            return fail(RpcError::ConversationNotFound(self.setup.id.to_string()));
        }
        let answer = match DispatcherRequest::parse(&msg.method, &msg.args, msg.connection_id) {
            Ok(request) => self.dispatch(
                request.traced(msg.trace),
                msg.connection_id,
                msg.in_line,
                ctx,
            ),
            Err(e) => fail(e),
        };
        self.throttle(ctx);
        answer
    }
}

impl Conversation {
    /// Runs one checked `dispatcher:<id>` request for `connection_id`.
    fn dispatch(
        &mut self,
        request: DispatcherRequest,
        connection_id: ConnectionId,
        in_line: Option<InvokeOrigin>,
        ctx: &mut Context<Self>,
    ) -> Answer {
        match request {
            DispatcherRequest::Submit(request) => self.submit_command(request, false, in_line, ctx),
            // Queued first; the running request is cancelled once it is (queue.rs).
            DispatcherRequest::Interrupt(request) => {
                self.submit_command(request, true, in_line, ctx)
            }
            DispatcherRequest::GetDisplayHistory { after_seq, page } => {
                self.display_history(after_seq, page)
            }
            DispatcherRequest::GetQueueSnapshot => value(self.queue.snapshot()),
            DispatcherRequest::CancelCommand { request_id } => {
                let kind = self.cancel_by_id(&request_id, CancelReason::Cancelled, ctx);
                value(json!({"kind": kind.as_str(), "requestId": request_id}))
            }
            DispatcherRequest::PromoteCommand { request_id } => {
                value(json!(self.promote(&request_id, ctx)))
            }
            DispatcherRequest::RespondToInteraction { answer } => {
                let resolved = match answer {
                    Some((id, value)) => self.resolve_interaction(&id, value, ctx),
                    None => Ok(()),
                };
                match resolved {
                    Ok(()) => void(),
                    Err(e) => fail(e),
                }
            }
            DispatcherRequest::RespondToChoice {
                choice_id,
                response,
            } => match self.respond_to_choice(choice_id, connection_id, response, ctx) {
                Ok(ChoiceReply::Now(None)) => void(),
                Ok(ChoiceReply::Now(Some(result))) => value(result),
                Ok(ChoiceReply::Later(handled)) => {
                    Box::pin(async move { handled.await.map(DispatcherReply::Value) })
                }
                Err(e) => fail(e),
            },
            DispatcherRequest::GetStatus => value(self.status()),
            DispatcherRequest::GetCommandCompletion { prefix, direction } => {
                let view = completion::CompletionView {
                    clients: self.command_hosts(),
                };
                Box::pin(async move {
                    let result = completion::command_completion(view, prefix, direction).await;
                    Ok(DispatcherReply::Value(Some(result)))
                })
            }
            DispatcherRequest::GetDeveloperMode => value(json!(false)),
            DispatcherRequest::Close => {
                self.close_connection(connection_id, ctx);
                void()
            }
            DispatcherRequest::AskAgent { agent, query } => match self.ask_agent(&agent, query) {
                Ok(answer) => Box::pin(async move { answer.await.map(DispatcherReply::Value) }),
                Err(e) => fail(e),
            },
            // TypeAgent's answer when its cache is off.
            DispatcherRequest::CheckCache => value(json!({"lastError": "Cache is not enabled"})),
            DispatcherRequest::GetAgentSchemas { agent } => {
                value(self.agent_schemas(agent.as_deref()))
            }
            DispatcherRequest::RecordUserFeedback(feedback) => {
                if self.stopping {
                    return fail(RpcError::ServerStopping);
                }
                let answer = self.record_feedback(feedback, ctx);
                Box::pin(
                    async move { feedback::reply_of(answer).await.map(DispatcherReply::Value) },
                )
            }
            DispatcherRequest::Hide(op) => {
                if self.stopping {
                    return fail(RpcError::ServerStopping);
                }
                let answer = self.hide(op, ctx);
                Box::pin(
                    async move { feedback::reply_of(answer).await.map(DispatcherReply::Value) },
                )
            }
        }
    }

    /// `submitCommand` / `interrupt` (`front`): a refusal at once, or `{ok:true}` once the
    /// acceptance is durable (`storage_error` when it could not be written). With `in_line`
    /// the accepted request's answer is queued on the requester's socket at the acceptance
    /// barrier's place ([`DispatcherReply::Sent`]), so it reaches the client before any call
    /// of its request (`setUserRequest`, a question, `commandComplete`), as TypeAgent's
    /// server sends it; TypeAgent's CLI records its prompt's state at that reply.
    fn submit_command(
        &mut self,
        request: Request,
        front: bool,
        in_line: Option<InvokeOrigin>,
        ctx: &mut Context<Self>,
    ) -> Answer {
        match self.submit(request, front, in_line, ctx) {
            Err(refusal) => value(refusal),
            Ok(accepted) => Box::pin(async move {
                Ok(match accepted.await {
                    Ok(Some(answer)) => DispatcherReply::Value(Some(answer)),
                    Ok(None) => DispatcherReply::Sent,
                    Err(_) => DispatcherReply::Value(Some(
                        json!({"ok": false, "error": "server_stopping"}),
                    )),
                })
            }),
        }
    }

    /// `getDisplayHistory`: from memory when the tail holds it, else older entries are read
    /// from disk on a blocking thread (the actor goes on meanwhile), once the writer has
    /// written every entry logged so far. A `page` reads only its own seq range.
    fn display_history(&self, after_seq: Option<i64>, page: Option<HistoryPage>) -> Answer {
        let log = match &self.log {
            Ok(l) => l,
            Err(e) => return fail(RpcError::Internal(e.clone())),
        };
        let read = match page {
            None => log.read_after(after_seq),
            Some(p) => log.read_page(after_seq, p.before_seq, p.limit),
        };
        match read {
            HistoryRead::Ready(entries) => {
                let json = display_log::history_json(entries);
                Box::pin(async move { Ok(DispatcherReply::Raw(json)) })
            }
            HistoryRead::Disk {
                path,
                from,
                below,
                from_memory,
            } => {
                let written = self.setup.runtime.log_writer.written();
                Box::pin(async move {
                    // Entries let go of from memory may still be queued for the file.
                    written
                        .await
                        .map_err(|_| RpcError::Internal("the log writer has stopped".into()))?;
                    let older = tokio::task::spawn_blocking(move || {
                        display_log::read_range(&path, from, below)
                    })
                    .await
                    .map_err(|e| RpcError::Internal(e.to_string()))?
                    .map_err(|e| RpcError::Internal(format!("reading the display log: {e}")))?;
                    let all = older
                        .iter()
                        .map(String::as_str)
                        .chain(from_memory.iter().map(|e| &e[..]));
                    Ok(DispatcherReply::Raw(display_log::history_json(all)))
                })
            }
        }
    }

    /// `getStatus`: the client agents, and the provider and the queue in one line; and the
    /// Roundtable extensions `mcpServers` and `contextMeter` (the meter object, or `null`:
    /// `meter.rs`), which TypeAgent's clients ignore.
    fn status(&self) -> Value {
        let details = format!(
            "provider: {}; queue: {}",
            self.provider().name(),
            self.queue.status()
        );
        let mcp = self.mcp_statuses();
        json!({"agents": self.agent_statuses(&mcp), "details": details,
               "mcpServers": mcp, "contextMeter": self.meter_json(),
               "model": self.model_json()})
    }

    /// `getStatus`'s `agents`, as TypeAgent lists its agents (`{name, emoji, active,
    /// lastUsed, priority, request}`): the assistant with its built-in tools (`chat`, the
    /// schema `getAgentSchemas` names), the `@` command families (`system`), each MCP server
    /// (active while connected; `mcp` is [`Conversation::mcp_statuses`]), then the
    /// client-hosted agents.
    fn agent_statuses(&self, mcp: &[Value]) -> Vec<Value> {
        let entry = |name: &str, emoji: &str, active: bool| {
            json!({"emoji": emoji, "name": name, "lastUsed": false, "priority": false,
                   "request": false, "active": active})
        };
        let mut agents = vec![entry(AGENT_SOURCE, "🤖", true), entry("system", "🔧", true)];
        agents.extend(mcp.iter().map(|s| {
            entry(
                s["name"].as_str().unwrap_or_default(),
                "🔌",
                s["state"]
                    .as_str()
                    .is_some_and(|state| state.starts_with("connected")),
            )
        }));
        agents.extend(self.client_agent_statuses());
        agents
    }

    /// Roundtable extension of `getStatus`: each MCP server's name, state, transport and
    /// tool count (the web client's conversation header shows them).
    fn mcp_statuses(&self) -> Vec<Value> {
        let mut servers: Vec<Value> = self
            .setup
            .runtime
            .tool_servers
            .iter()
            .filter_map(|(name, server)| {
                server.status().map(|s| {
                    json!({"name": name, "state": s.state, "transport": s.transport,
                           "tools": s.tools})
                })
            })
            .collect();
        servers.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        servers
    }

    /// `close`: the client leaves; its connection is told its conversation went away.
    fn close_connection(&mut self, connection_id: ConnectionId, ctx: &mut Context<Self>) {
        if self.drop_client(connection_id, true) {
            self.after_leave(ctx);
        }
    }
}

/// `getStatus` on the channel of a conversation that was deleted: a `DispatcherStatus` with
/// no agents, so a client that asks before every prompt (`agent-cli`, reference K.5) goes on
/// to its prompt instead of failing; every other method answers `Conversation not found`.
pub fn deleted_status(conversation_id: &str) -> Value {
    json!({"agents": [], "details": format!("Conversation not found: {conversation_id}")})
}

/// A `call` on `dispatcher:<id>` (never answered).
#[derive(Message)]
#[rtype(result = "()")]
pub struct DispatcherCall {
    /// The caller's connection id in this conversation.
    pub connection_id: ConnectionId,
    /// Method.
    pub method: String,
    /// Arguments.
    pub args: Args,
}

/// A `dispatcher:<id>` call this conversation acts on; anything else is ignored (logged).
enum DispatcherNotice {
    /// `cancelCommandByClientId(clientRequestId)`.
    CancelByClientId {
        /// The client's own id of the request.
        client_request_id: Value,
    },
    /// `cancelInteraction(interactionId)`.
    CancelInteraction {
        /// The interaction.
        interaction_id: String,
    },
}

impl DispatcherNotice {
    /// `None` for an unknown method or missing arguments (calls are never answered).
    fn parse(method: &str, args: &Args) -> Option<DispatcherNotice> {
        match method {
            "cancelCommandByClientId" => Some(Self::CancelByClientId {
                client_request_id: args.get(0)?.clone(),
            }),
            "cancelInteraction" => Some(Self::CancelInteraction {
                interaction_id: args.get(0)?.as_str()?.to_string(),
            }),
            _ => None,
        }
    }
}

impl Handler<DispatcherCall> for Conversation {
    type Result = ();

    fn handle(&mut self, msg: DispatcherCall, ctx: &mut Self::Context) {
        match DispatcherNotice::parse(&msg.method, &msg.args) {
            Some(DispatcherNotice::CancelByClientId { client_request_id }) => {
                if let Some(id) = self.queue.find_by_client_id(&client_request_id) {
                    self.cancel_by_id(&id, CancelReason::Cancelled, ctx);
                }
            }
            Some(DispatcherNotice::CancelInteraction { interaction_id }) => {
                self.cancel_interaction(&interaction_id, true, ctx);
            }
            None => log::debug!(
                "conversation {}: call {} ignored",
                self.setup.id,
                msg.method
            ),
        }
    }
}
