//! One MCP server: its supervisor (connect, list the tools, wait, restart with backoff), its
//! client handler (progress, `tools/list_changed`, elicitation, roots) and its [`ToolServer`]
//! face for the agent loop ([`McpServer`]).
//!
//! Roots: `roots/list` answers the working directories of the requests whose calls are in
//! flight (each already passed the server's working-directory policy), or, with none in
//! flight, the last answered. A call whose directory is not among the roots last answered
//! sends `notifications/roots/list_changed` before it starts, so a server that reads its
//! roots sees the caller's directory.
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
//! lasted 60 s. Calls in flight when it goes become `is_error` results naming the server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ErrorData, Implementation, ProgressNotificationParam,
    ProgressToken,
};
// Roots are deprecated by SEP-2577 (a future MCP revision) but are what servers of the
// current revisions (2025-06-18, 2025-11-25) read: kept until rmcp removes them.
#[allow(deprecated)]
use rmcp::model::{ListRootsResult, Root};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use roundtable_actors::agent::client_agent::schema::json_nodes;
use roundtable_actors::agent::client_agent::{MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_NODES};
use roundtable_actors::agent::turn::{
    ToolCallContext, ToolOutput, ToolServer, ToolServerStatus, SERVER_SEPARATOR,
};
use roundtable_actors::agent::{valid_tool_name, LocalBoxFuture, ToolSpec};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, oneshot, watch};

use super::config::{McpServerConfig, McpTransport};
use super::{content, elicit};

/// First restart delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the delay to [`INITIAL_BACKOFF`].
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// How long `initialize` and the first `tools/list` may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Tools one server may offer (the first ones listed are kept, with a warning).
pub const MAX_TOOLS_PER_SERVER: usize = 256;
/// Largest description of a tool passed to the model, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4096;
/// Calls one server may have in flight; past it a call is refused at once (`is_error`).
pub const MAX_CALLS_IN_FLIGHT: usize = 64;
/// Largest Streamable HTTP answer read (one JSON body or SSE event).
pub const MAX_HTTP_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Longest failure reason in the status (the log has it whole).
const MAX_REASON_CHARS: usize = 300;
/// Longest stderr line of a stdio server that is logged.
const MAX_STDERR_LINE: usize = 1000;
/// Events (progress lines, questions) queued per call before further progress is dropped.
const CALL_EVENTS: usize = 16;
/// Longest a call that changes the roots waits for a server that reads them to ask again.
const ROOTS_WAIT: Duration = Duration::from_secs(2);

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

/// A question or progress line for the turn whose call caused it.
enum CallEvent {
    /// A progress notification, as text.
    Progress(String),
    /// An elicitation: ask, then answer on `reply`.
    Elicit {
        /// The server's message.
        message: String,
        /// The requested schema.
        schema: Value,
        /// The answer to send back.
        reply: oneshot::Sender<elicit::Answer>,
    },
}

/// A call in flight.
struct InFlight {
    /// Its number (for removal).
    id: u64,
    /// `NAME__tool`, for progress lines.
    tool: String,
    /// The progress token of its request, once sent.
    progress_token: Option<ProgressToken>,
    /// To its turn.
    events: mpsc::Sender<CallEvent>,
    /// The directory its request works in (offered as a root while it runs).
    root: Option<PathBuf>,
}

/// What the supervisor, the handler and the calls share.
pub(super) struct Shared {
    /// The configuration.
    config: McpServerConfig,
    /// The MCP thread's runtime, where calls run.
    runtime: tokio::runtime::Handle,
    /// Tools offered now (swapped whole on `list_changed`).
    tools: RwLock<Arc<Vec<ToolSpec>>>,
    /// Where the server is.
    state: Mutex<State>,
    /// The connection, while connected.
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// Calls in flight.
    calls: Mutex<Vec<InFlight>>,
    /// Numbers calls.
    next_call: AtomicU64,
    /// The last line a stdio server wrote on stderr (its reason, when it exits).
    last_stderr: Mutex<String>,
    /// The roots last answered to `roots/list` (a call whose directory is not among them
    /// announces `notifications/roots/list_changed` first).
    roots: Mutex<Vec<PathBuf>>,
    /// The server has asked `roots/list` on some connection: it reads its roots, so a call
    /// that changes them waits (at most [`ROOTS_WAIT`]) for it to ask again.
    reads_roots: std::sync::atomic::AtomicBool,
    /// Woken at each `roots/list`.
    roots_asked: tokio::sync::Notify,
}

/// Locks, ignoring poison (a panicking holder leaves plain data behind).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// A server not yet started.
    pub(super) fn new(config: McpServerConfig, runtime: tokio::runtime::Handle) -> Arc<Shared> {
        Arc::new(Shared {
            config,
            runtime,
            tools: RwLock::default(),
            state: Mutex::new(State::Starting),
            peer: Mutex::default(),
            calls: Mutex::default(),
            next_call: AtomicU64::new(1),
            last_stderr: Mutex::default(),
            roots: Mutex::default(),
            reads_roots: Default::default(),
            roots_asked: tokio::sync::Notify::new(),
        })
    }

    /// Its name.
    fn name(&self) -> &str {
        &self.config.name
    }

    /// The state as the status shows it.
    fn state_text(&self) -> String {
        match &*lock(&self.state) {
            State::Starting => "starting".into(),
            State::Connected { pid: Some(pid) } => format!("connected (pid {pid})"),
            State::Connected { pid: None } => "connected".into(),
            State::Restarting { at, reason } => {
                let left = at.saturating_duration_since(Instant::now());
                let reason = match reason.char_indices().nth(MAX_REASON_CHARS) {
                    Some((cut, _)) => format!("{}…", &reason[..cut]),
                    None => reason.clone(),
                };
                format!(
                    "failed: {reason}; restarting in {:.1} s",
                    left.as_secs_f64()
                )
            }
            State::Stopped => "stopped".into(),
        }
    }

    /// Replaces the tools with `listed` (the server's `tools/list`): each checked against the
    /// name rule and the schema bounds, the rest skipped with a warning naming it.
    fn set_tools(&self, listed: Vec<Value>) -> usize {
        let name = self.name();
        let mut tools = Vec::new();
        for tool in listed {
            let Some(tool_name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let full = format!("{name}{SERVER_SEPARATOR}{tool_name}");
            if !valid_tool_name(&full) {
                log::warn!(
                    "MCP server {name}: tool {tool_name:?} skipped: {full:?} is not a valid tool \
                     name (^[a-zA-Z0-9_-]{{1,64}}$)"
                );
                continue;
            }
            let schema = tool
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"}));
            let (nodes, bytes) = (json_nodes(&schema), schema.to_string().len());
            if nodes > MAX_TOOL_SCHEMA_NODES || bytes > MAX_TOOL_SCHEMA_BYTES {
                log::warn!(
                    "MCP server {name}: tool {full} skipped: its input schema has {nodes} JSON \
                     values and {bytes} bytes; at most {MAX_TOOL_SCHEMA_NODES} and \
                     {MAX_TOOL_SCHEMA_BYTES}"
                );
                continue;
            }
            if tools.len() == MAX_TOOLS_PER_SERVER {
                log::warn!(
                    "MCP server {name}: tool {full} and later ones skipped: at most \
                     {MAX_TOOLS_PER_SERVER} tools per server"
                );
                break;
            }
            let description: String = tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .chars()
                .take(MAX_DESCRIPTION_CHARS)
                .collect();
            tools.push(ToolSpec {
                name: tool_name.to_string(),
                description,
                input_schema: schema,
            });
        }
        let count = tools.len();
        *self.tools.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tools);
        count
    }

    /// The connection, or why there is none.
    fn peer(&self) -> Result<Peer<RoleClient>, String> {
        lock(&self.peer).clone().ok_or_else(|| {
            format!(
                "MCP server `{}` is not connected ({})",
                self.name(),
                self.state_text()
            )
        })
    }
}

/// Reads the server's tools (every page) and offers them; the count.
async fn refresh_tools(shared: &Shared, peer: &Peer<RoleClient>) -> Result<usize, String> {
    let tools = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let listed: Vec<Value> = tools
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    Ok(shared.set_tools(listed))
}

/// The client side of one connection: answers the server's requests and notifications.
#[derive(Clone)]
struct Handler {
    /// The server's shared state.
    shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let calls = lock(&self.shared.calls);
        let Some(call) = calls
            .iter()
            .find(|c| c.progress_token.as_ref() == Some(&params.progress_token))
        else {
            return;
        };
        let mut text = format!("{}: ", call.tool);
        match params.total {
            Some(total) => text.push_str(&format!("{}/{total}", params.progress)),
            None => text.push_str(&params.progress.to_string()),
        }
        if let Some(message) = params.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(" – ");
            text.extend(message.chars().take(200));
        }
        // A turn that is not keeping up loses progress lines, never the call.
        let _ = call.events.try_send(CallEvent::Progress(text));
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let shared = self.shared.clone();
        // Not awaited here: the answer to tools/list comes through the same connection.
        tokio::spawn(async move {
            match refresh_tools(&shared, &context.peer).await {
                Ok(n) => log::info!(
                    "MCP server {}: tool list changed: {n} tools offered from the next model call",
                    shared.name()
                ),
                Err(e) => log::warn!("MCP server {}: tool list changed, but {e}", shared.name()),
            }
        });
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let name = self.shared.name().to_string();
        let answer = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
                self.ask(&name, message, schema).await
            }
            _ => {
                log::info!("MCP server {name}: URL elicitation declined (not supported)");
                elicit::Answer::Decline
            }
        };
        serde_json::from_value(answer.to_json())
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let mut in_flight: Vec<PathBuf> = Vec::new();
        for root in lock(&self.shared.calls)
            .iter()
            .filter_map(|c| c.root.clone())
        {
            if !in_flight.contains(&root) {
                in_flight.push(root);
            }
        }
        let roots = {
            let mut last = lock(&self.shared.roots);
            if !in_flight.is_empty() {
                *last = in_flight;
            }
            last.clone()
        };
        log::info!(
            "MCP server {}: roots/list answered {} roots",
            self.shared.name(),
            roots.len()
        );
        self.shared.reads_roots.store(true, Ordering::Relaxed);
        self.shared.roots_asked.notify_waiters();
        Ok(ListRootsResult::new(
            roots.iter().map(|r| root_of(r)).collect(),
        ))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}},
            "roots": {"listChanged": true}
        }))
        .expect("a valid capabilities object");
        ClientConfig::new(
            capabilities,
            Implementation::new("roundtable", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A directory as an MCP root: a `file://` URI (bytes other than unreserved characters and
/// `/` percent-encoded) named by its last component.
#[allow(deprecated)]
fn root_of(dir: &Path) -> Root {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in dir.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    let root = Root::new(uri);
    match dir.file_name() {
        Some(name) => root.with_name(name.to_string_lossy()),
        None => root,
    }
}

impl Handler {
    /// Asks the conversation whose call is in flight. MCP does not say which call an
    /// elicitation belongs to: with exactly one call in flight it is that call's; with none,
    /// or several (from different turns), nobody can be asked and the answer is `cancel`.
    async fn ask(&self, name: &str, message: String, schema: Value) -> elicit::Answer {
        let events = {
            let calls = lock(&self.shared.calls);
            match calls.as_slice() {
                [one] => one.events.clone(),
                calls => {
                    log::warn!(
                        "MCP server {name}: elicitation with {} calls in flight: cannot tell \
                         whose it is; cancelled",
                        calls.len()
                    );
                    return elicit::Answer::Cancel;
                }
            }
        };
        let (reply, answer) = oneshot::channel();
        if events
            .send(CallEvent::Elicit {
                message,
                schema,
                reply,
            })
            .await
            .is_err()
        {
            return elicit::Answer::Cancel;
        }
        answer.await.unwrap_or(elicit::Answer::Cancel)
    }
}

/// A connection and the stdio process's id.
type Connection = (RunningService<RoleClient, Handler>, Option<u32>);

/// Starts (stdio) or reaches (HTTP) the server and runs `initialize`.
async fn connect(shared: &Arc<Shared>) -> Result<Connection, String> {
    let handler = Handler {
        shared: shared.clone(),
    };
    let init = |e: rmcp::service::ClientInitializeError| format!("initialize failed: {e}");
    match &shared.config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            let pid = transport.id();
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(shared.clone(), stderr));
            }
            let running = tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| {
                    format!(
                        "no answer to `initialize` within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )
                })?
                .map_err(init)?;
            Ok((running, pid))
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
            let transport = StreamableHttpClientTransport::from_config(config);
            let running = tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| {
                    format!(
                        "no answer to `initialize` within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )
                })?
                .map_err(|e| roundtable_actors::redact::redact_url_credentials(&init(e)))?;
            Ok((running, None))
        }
    }
}

/// Logs a stdio server's stderr, line by line (each cut at [`MAX_STDERR_LINE`]), keeping the
/// last one for the status.
async fn log_stderr(shared: Arc<Shared>, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(MAX_STDERR_LINE).collect();
        if line.trim().is_empty() {
            continue;
        }
        log::info!("MCP server {} stderr: {line}", shared.name());
        *lock(&shared.last_stderr) = line;
    }
}

/// Runs the server until the hub stops: connect, serve, and after each end restart with
/// backoff (see the module docs).
pub(super) async fn supervise(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let name = shared.name().to_string();
    let mut backoff = INITIAL_BACKOFF;
    loop {
        *lock(&shared.state) = State::Starting;
        lock(&shared.last_stderr).clear();
        let started = Instant::now();
        let connected = tokio::select! {
            c = connect(&shared) => c,
            _ = stop.changed() => break,
        };
        let reason = match connected {
            Err(e) => e,
            Ok((running, pid)) => {
                let peer = running.peer().clone();
                match tokio::time::timeout(CONNECT_TIMEOUT, refresh_tools(&shared, &peer)).await {
                    Err(_) => "no answer to tools/list".to_string(),
                    Ok(Err(e)) => e,
                    Ok(Ok(count)) => {
                        *lock(&shared.peer) = Some(peer);
                        *lock(&shared.state) = State::Connected { pid };
                        let pid = pid.map(|p| format!("pid {p}, ")).unwrap_or_default();
                        log::info!(
                            "MCP server {name}: connected ({pid}{count} tools; {})",
                            shared.config.transport_text()
                        );
                        let quit = tokio::select! {
                            q = running.waiting() => q,
                            _ = stop.changed() => {
                                lock(&shared.peer).take();
                                break;
                            }
                        };
                        lock(&shared.peer).take();
                        let last = lock(&shared.last_stderr).clone();
                        match quit {
                            Ok(rmcp::service::QuitReason::Closed) if !last.is_empty() => {
                                format!("the connection closed (last stderr line: {last})")
                            }
                            Ok(rmcp::service::QuitReason::Closed) => {
                                "the connection closed".to_string()
                            }
                            Ok(other) => format!("the connection ended: {other:?}"),
                            Err(e) => format!("the connection failed: {e}"),
                        }
                    }
                }
            }
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
}

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

/// One `tools/call` on the MCP runtime. Answers on `done`, or, when the turn dropped its end
/// (cancelled), sends `notifications/cancelled` and answers nothing.
async fn run_call(
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
        });
    }
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
    let _guard = InFlightGuard {
        shared: &shared,
        id,
    };
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
                "MCP server `{name}` could not take the call: {e}"
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
            Ok(Err(rmcp::ServiceError::McpError(e))) => ToolOutput::error(format!(
                "MCP server `{name}` answered an error: {}",
                e.message
            )),
            Ok(Err(e)) => ToolOutput::error(format!(
                "MCP server `{name}` stopped during the call ({e}); it is being restarted"
            )),
            Err(_) => ToolOutput::error(format!(
                "MCP server `{name}` stopped during the call; it is being restarted"
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
        let (events_tx, mut events) = mpsc::channel(CALL_EVENTS);
        let (done_tx, mut done) = oneshot::channel();
        self.shared.runtime.spawn(run_call(
            self.shared.clone(),
            tool.to_string(),
            arguments,
            context.working_directory.map(Path::to_path_buf),
            events_tx,
            done_tx,
        ));
        Box::pin(async move {
            loop {
                tokio::select! {
                    output = &mut done => {
                        return output.unwrap_or_else(|_| {
                            ToolOutput::error(format!("MCP server `{name}`: the call was dropped"))
                        });
                    }
                    Some(event) = events.recv() => match event {
                        CallEvent::Progress(text) => context.sink.status(text),
                        CallEvent::Elicit { message, schema, mut reply } => {
                            tokio::select! {
                                answer = elicit::ask(context.sink, &name, &message, &schema) => {
                                    let _ = reply.send(answer);
                                }
                                // The call ended (the server went) while the question was open.
                                _ = reply.closed() => {}
                            }
                        }
                    },
                }
            }
        })
    }
}
