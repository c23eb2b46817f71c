//! One MCP server: its supervisor ([`supervise`]: start it, list its tools, follow its list
//! changes, restart it with backoff) and its
//! [`ToolServer`] face for the agent loop ([`McpServer`]). Its parts: the state they share
//! (`shared.rs`), the process of a stdio
//! server ([`super::stdio`]), the HTTP client of a Streamable HTTP one ([`super::http`]), the
//! client handler ([`super::handler`]), the listing and its refresher ([`super::listing`]),
//! the calls ([`super::call`]).
//!
//! Threads: the supervisor, the handler and each call's request run on the MCP thread's
//! runtime ([`super::McpHub`]). A conversation's turn calls [`McpServer::call`] on its own
//! arbiter: the call is spawned on the MCP runtime and talks back over two channels: its
//! result (a oneshot) and its events (progress lines, elicitation questions), which the turn
//! hands to its sink. A turn that is cancelled drops its end; the call sees that and sends
//! `notifications/cancelled` for its request.
//!
//! Restarts: a server that exits, closes its connection or fails to start is started again
//! after 0.5 s, doubling to at most 30 s; the delay goes back to 0.5 s once a connection has
//! lasted 60 s. Calls in flight when it goes become `is_error` results naming the server. A
//! stdio server's process is killed and waited for whenever its connection ends, and before
//! the supervisor stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use roundtable_actors::agent::turn::{
    ToolCallContext, ToolOutput, ToolServer, ToolServerStatus, SERVER_SEPARATOR,
};
use roundtable_actors::agent::{LocalBoxFuture, ToolSpec};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::call;
use super::config::McpTransport;
use super::handler::Handler;
use super::http::BoundedClient;
pub use super::http::MAX_HTTP_MESSAGE_BYTES;
use super::listing;
use super::shared::State;
pub use super::shared::{lock, Shared, CONNECT_TIMEOUT};
use super::stdio::{self, ServerProcess};

/// First restart delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the delay to [`INITIAL_BACKOFF`].
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// A started server's transport, before `initialize`.
enum Transport {
    /// A child's pipes.
    Stdio(stdio::Pipes),
    /// A Streamable HTTP session.
    Http(StreamableHttpClientTransport<BoundedClient>),
}

/// Starts a stdio server's process, or prepares the HTTP transport.
fn start(shared: &Shared) -> Result<(Transport, Option<ServerProcess>), String> {
    match &shared.config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let reporter = stdio::Reporter {
                name: shared.name().to_string(),
                last_stderr: shared.last_stderr.clone(),
            };
            let (process, pipes) = stdio::spawn(command, args, env, cwd.as_ref(), reporter)?;
            Ok((Transport::Stdio(pipes), Some(process)))
        }
        McpTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in headers {
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| format!("header {k:?}: {e}"))?;
                let mut value = http::HeaderValue::from_str(v)
                    .map_err(|_| format!("the value of header {k:?} is not valid"))?;
                value.set_sensitive(true);
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .max_json_response_size(MAX_HTTP_MESSAGE_BYTES)
                .max_sse_event_size(MAX_HTTP_MESSAGE_BYTES);
            let client = BoundedClient::new()?;
            Ok((
                Transport::Http(StreamableHttpClientTransport::with_client(client, config)),
                None,
            ))
        }
    }
}

/// Runs `initialize` over `transport`, within [`CONNECT_TIMEOUT`].
async fn initialize(
    shared: &Arc<Shared>,
    transport: Transport,
) -> Result<RunningService<RoleClient, Handler>, String> {
    let handler = Handler {
        shared: shared.clone(),
    };
    let late = || {
        format!(
            "no answer to `initialize` within {} s",
            CONNECT_TIMEOUT.as_secs()
        )
    };
    let failed = |e: rmcp::service::ClientInitializeError| {
        roundtable_actors::redact::redact_url_credentials(&format!("initialize failed: {e}"))
    };
    match transport {
        Transport::Stdio(pipes) => tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(pipes))
            .await
            .map_err(|_| late())?
            .map_err(failed),
        Transport::Http(t) => tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(t))
            .await
            .map_err(|_| late())?
            .map_err(failed),
    }
}

/// Kills and waits for a stdio server's process, if there is one; its exit status when it
/// had exited on its own.
async fn stop_process(process: Option<ServerProcess>) -> Option<std::process::ExitStatus> {
    match process {
        Some(p) => p.stop().await,
        None => None,
    }
}

/// How one connection ended.
enum Ended {
    /// It went (or never came up): why.
    Gone(String),
    /// The hub is stopping.
    Stop,
}

/// One connection, from start to end: start, `initialize`, the first listing, then serving
/// (and refreshing the tools) until it goes or the hub stops. Its process, if any, is killed
/// and waited for before this returns.
async fn connect_and_serve(shared: &Arc<Shared>, stop: &mut watch::Receiver<bool>) -> Ended {
    let name = shared.name().to_string();
    let (transport, process) = match start(shared) {
        Ok(started) => started,
        Err(e) => return Ended::Gone(e),
    };
    let pid = process.as_ref().and_then(|p| p.pid);
    let running = tokio::select! {
        r = initialize(shared, transport) => r,
        _ = stop.changed() => {
            stop_process(process).await;
            return Ended::Stop;
        }
    };
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            stop_process(process).await;
            return Ended::Gone(e);
        }
    };
    let peer = running.peer().clone();
    let listed = tokio::select! {
        l = listing::list_tools(&name, &peer, shared.list_timeout()) => l,
        _ = stop.changed() => {
            drop(running);
            stop_process(process).await;
            return Ended::Stop;
        }
    };
    let tools = match listed {
        Ok(tools) => tools,
        Err(e) => {
            drop(running);
            stop_process(process).await;
            return Ended::Gone(e);
        }
    };
    let count = tools.len();
    shared.offer(tools);
    *lock(&shared.peer) = Some(peer.clone());
    *lock(&shared.state) = State::Connected { pid };
    let shown_pid = pid.map(|p| format!("pid {p}, ")).unwrap_or_default();
    log::info!(
        "MCP server {name}: connected ({shown_pid}{count} tools; {})",
        shared.config.transport_text()
    );
    let quit = tokio::select! {
        q = running.waiting() => Some(q),
        _ = listing::refresher(shared.clone(), peer) => None,
        _ = stop.changed() => None,
    };
    lock(&shared.peer).take();
    let exited = stop_process(process).await;
    let Some(quit) = quit else {
        return Ended::Stop;
    };
    let mut details = Vec::new();
    if let Some(status) = exited {
        details.push(status.to_string());
    }
    let last = lock(&shared.last_stderr).clone();
    if !last.is_empty() {
        details.push(format!("last stderr line: {last}"));
    }
    let details = if details.is_empty() {
        String::new()
    } else {
        format!(" ({})", details.join("; "))
    };
    Ended::Gone(match quit {
        Ok(rmcp::service::QuitReason::Closed) => format!("the connection closed{details}"),
        Ok(other) => format!("the connection ended: {other:?}{details}"),
        Err(e) => format!("the connection failed: {e}{details}"),
    })
}

/// Runs the server until the hub stops: connect, serve, and after each end restart with
/// backoff (see the module docs). `alive` is dropped when it returns (the hub waits for
/// every supervisor's).
pub async fn supervise(
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    alive: tokio::sync::mpsc::Sender<()>,
) {
    let name = shared.name().to_string();
    let mut backoff = INITIAL_BACKOFF;
    loop {
        *lock(&shared.state) = State::Starting;
        lock(&shared.last_stderr).clear();
        shared.set_refresh_error(None);
        let started = Instant::now();
        let reason = match connect_and_serve(&shared, &mut stop).await {
            Ended::Stop => break,
            Ended::Gone(reason) => reason,
        };
        if started.elapsed() >= BACKOFF_RESET_AFTER {
            backoff = INITIAL_BACKOFF;
        }
        log::warn!(
            "MCP server {name}: {reason}; restarting in {:.1} s",
            backoff.as_secs_f64()
        );
        *lock(&shared.state) = State::Restarting {
            at: Instant::now() + backoff,
            reason,
        };
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    *lock(&shared.state) = State::Stopped;
    log::info!("MCP server {name}: stopped");
    drop(alive);
}

/// An MCP server as the agent loop sees it.
pub struct McpServer {
    /// Shared with its supervisor and handler.
    pub(super) shared: Arc<Shared>,
}

impl ToolServer for McpServer {
    fn tools(&self) -> Vec<ToolSpec> {
        let tools = self
            .shared
            .tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tools.as_ref().clone()
    }

    fn status(&self) -> Option<ToolServerStatus> {
        Some(ToolServerStatus {
            transport: self.shared.config.transport_text(),
            state: self.shared.state_text(),
            tools: self
                .shared
                .tools
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        input: Value,
        context: ToolCallContext<'a>,
    ) -> LocalBoxFuture<'a, ToolOutput> {
        let name = self.shared.name().to_string();
        let arguments = match input {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => {
                return Box::pin(async move {
                    ToolOutput::error(format!(
                        "the input of {name}{SERVER_SEPARATOR}{tool} must be a JSON object"
                    ))
                })
            }
        };
        call::call(&self.shared, tool, arguments, context)
    }
}
