//! One MCP server: its supervisor ([`supervise`]: start it, list its tools, follow its list
//! changes, restart it with backoff), the state its parts share ([`Shared`]) and its
//! [`ToolServer`] face for the agent loop ([`McpServer`]). Its parts: the process of a stdio
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
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use roundtable_actors::agent::turn::{
    ToolCallContext, ToolOutput, ToolServer, ToolServerStatus, SERVER_SEPARATOR,
};
use roundtable_actors::agent::{LocalBoxFuture, ToolSpec};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::call::{self, InFlight};
use super::config::{McpServerConfig, McpTransport};
use super::handler::Handler;
use super::http::BoundedClient;
use super::listing;
use super::stdio::{self, ServerProcess};

/// First restart delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the delay to [`INITIAL_BACKOFF`].
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// How long `initialize` may take, and the first `tools/list` (at most: a server's `timeout`
/// shortens it, see [`Shared::list_timeout`]).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest Streamable HTTP answer read (one JSON body or SSE event); a stdio line has the
/// same bound ([`stdio::MAX_LINE_BYTES`]).
pub const MAX_HTTP_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Longest failure reason in the status (the log has it whole).
const MAX_REASON_CHARS: usize = 300;

/// Where a server is.
#[derive(Debug, Clone)]
enum State {
    /// Being started (spawned or connecting, `initialize`, first `tools/list`).
    Starting,
    /// Serving; `pid` of a stdio server's process.
    Connected {
        /// The child's process id.
        pid: Option<u32>,
    },
    /// Gone or never came up; started again at `at`.
    Restarting {
        /// When the next start begins.
        at: Instant,
        /// Why it went (shown in the status).
        reason: String,
    },
    /// The hub stopped it (server shutting down).
    Stopped,
}

/// What the supervisor, the handler and the calls share.
pub struct Shared {
    /// The configuration.
    pub config: McpServerConfig,
    /// The MCP thread's runtime, where calls run.
    pub runtime: tokio::runtime::Handle,
    /// Tools offered now (swapped whole by each listing).
    tools: RwLock<Arc<Vec<ToolSpec>>>,
    /// Where the server is.
    state: Mutex<State>,
    /// Why the last refresh of the tool list failed, until one succeeds (the status says it).
    refresh_error: Mutex<Option<String>>,
    /// Woken by `notifications/tools/list_changed`; the refresher waits on it (a wake-up
    /// while it runs is kept, once).
    pub refresh: tokio::sync::Notify,
    /// The connection, while connected.
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// Calls in flight.
    pub calls: Mutex<Vec<InFlight>>,
    /// Numbers calls.
    pub next_call: AtomicU64,
    /// The last line a stdio server wrote on stderr (its reason, when it exits).
    last_stderr: Arc<Mutex<String>>,
    /// The roots last answered to `roots/list` (a call whose directory is not among them
    /// announces `notifications/roots/list_changed` first).
    pub roots: Mutex<Vec<PathBuf>>,
    /// The server has asked `roots/list` on some connection: it reads its roots, so a call
    /// that changes them waits for it to ask again.
    pub reads_roots: std::sync::atomic::AtomicBool,
    /// Woken at each `roots/list`.
    pub roots_asked: tokio::sync::Notify,
    /// Elicitations that came with no single call to ask for (the first is warned of).
    pub unowned_elicitations: std::sync::atomic::AtomicUsize,
}

/// Locks, ignoring poison (a panicking holder leaves plain data behind).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `text` cut at [`MAX_REASON_CHARS`], with `…` when cut.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

impl Shared {
    /// A server not yet started.
    pub fn new(config: McpServerConfig, runtime: tokio::runtime::Handle) -> Arc<Shared> {
        Arc::new(Shared {
            config,
            runtime,
            tools: RwLock::default(),
            state: Mutex::new(State::Starting),
            refresh_error: Mutex::default(),
            refresh: tokio::sync::Notify::new(),
            peer: Mutex::default(),
            calls: Mutex::default(),
            next_call: AtomicU64::new(1),
            last_stderr: Arc::default(),
            roots: Mutex::default(),
            reads_roots: Default::default(),
            roots_asked: tokio::sync::Notify::new(),
            unowned_elicitations: Default::default(),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How long a listing (all its pages) may take: the server's call `timeout`, at most
    /// [`CONNECT_TIMEOUT`] (a listing is quick work for a server).
    pub fn list_timeout(&self) -> Duration {
        self.config.timeout.min(CONNECT_TIMEOUT)
    }

    /// The state as the status shows it.
    fn state_text(&self) -> String {
        match &*lock(&self.state) {
            State::Starting => "starting".into(),
            State::Connected { pid } => {
                let mut text = match pid {
                    Some(pid) => format!("connected (pid {pid})"),
                    None => "connected".into(),
                };
                if let Some(why) = &*lock(&self.refresh_error) {
                    text.push_str(&format!("; the tool list was not refreshed: {}", clip(why)));
                }
                text
            }
            State::Restarting { at, reason } => {
                let left = at.saturating_duration_since(Instant::now());
                format!(
                    "failed: {}; restarting in {:.1} s",
                    clip(reason),
                    left.as_secs_f64()
                )
            }
            State::Stopped => "stopped".into(),
        }
    }

    /// Offers `tools` (a listing's) from the next model call on.
    pub fn offer(&self, tools: Vec<ToolSpec>) {
        *self.tools.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tools);
    }

    /// Records how the last refresh went (`None`: it succeeded).
    pub fn set_refresh_error(&self, why: Option<String>) {
        *lock(&self.refresh_error) = why;
    }

    /// The connection, or why there is none.
    pub fn peer(&self) -> Result<Peer<RoleClient>, String> {
        lock(&self.peer).clone().ok_or_else(|| {
            format!(
                "MCP server `{}` is not connected ({})",
                self.name(),
                self.state_text()
            )
        })
    }
}

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
