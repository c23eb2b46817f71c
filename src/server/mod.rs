//! The HTTP server: instance lock, registry start-up, listeners, routes and shutdown.
//!
//! Routes: `GET /health` (JSON), `GET /metrics` (Prometheus text), and a WebSocket upgrade on
//! every other path (TypeAgent clients connect to `/`; its server upgrades on any path). The
//! conformance echo endpoint, when configured, is an upgrade path served by the same transport.
//! Before any upgrade: the `Host` check (loopback binds only: DNS rebinding), the `Origin`
//! check (web pages other than loopback ones cannot drive the server) and the optional token.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_web::{http::header, App, HttpRequest, HttpResponse, HttpServer};
use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::Provider;
use roundtable_actors::conversation::RuntimeConfig;
use roundtable_actors::logwriter::LogWriter;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::registry::{
    ConversationRegistry, GetRegistryStats, RegistryConfig, ShutdownRegistry,
};
use roundtable_actors::store::{InstanceLock, Layout};
use tokio::sync::watch;

use crate::config::{ProviderChoice, ServerConfig};
use crate::openai::{OpenAiConfig, OpenAiProvider};
use crate::transport;

pub mod peer;
pub mod web;

/// Shared by every request handler and connection.
pub struct AppState {
    /// Settings.
    pub config: ServerConfig,
    /// The registry actor.
    pub registry: Addr<ConversationRegistry>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Process start, for `/health` uptime.
    pub started: Instant,
    /// The port actually bound (answers `lookupPort`).
    pub port: u16,
    /// Set to true to stop the server gracefully (the `shutdown` RPC, SIGINT, SIGTERM).
    pub stop: watch::Sender<bool>,
    /// Becomes true when connections must close with 1001.
    pub closing: watch::Receiver<bool>,
    /// Sequence for connection ids in logs.
    pub next_socket: std::sync::atomic::AtomicU64,
    /// The conversations' append writer (its queue length for `/metrics`).
    pub log_writer: LogWriter,
    /// Bytes of fragmented messages in reassembly, over every connection.
    pub inbound: Arc<roundtable_actors::frames::InboundBudget>,
}

/// Bytes all connections together may hold in messages being reassembled from fragments;
/// past it a connection that adds more is closed with 1013 (try again later).
pub const INBOUND_REASSEMBLY_BUDGET: usize = 256 << 20;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Storage problem (lock held, corrupt registry, I/O): the message names the file.
    #[error(transparent)]
    Store(#[from] roundtable_actors::store::StoreError),
    /// Could not listen.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// A setting is missing or wrong.
    #[error("{0}")]
    Config(String),
    /// Other I/O failure.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Runs the server until it is stopped (the `shutdown` RPC or a signal). Must be called inside
/// an actix `System`. Returns after the registry has been saved and every socket closed.
pub async fn serve(config: ServerConfig) -> Result<(), StartError> {
    let layout = Layout::new(&config.instance_dir);
    let lock = InstanceLock::acquire(&layout.root)?;
    let metrics = Arc::new(Metrics::default());
    let mut tool_servers: HashMap<String, Arc<dyn roundtable_actors::agent::turn::ToolServer>> =
        HashMap::new();
    for (name, url) in &config.tool_servers {
        let server = crate::toolserver::HttpToolServer::connect(name, url, Duration::from_secs(30))
            .await
            .map_err(StartError::Config)?;
        log::info!(
            "tool server {name} at {url}: {} tools",
            server.tools_count()
        );
        tool_servers.insert(name.clone(), Arc::new(server));
    }
    let provider: Arc<dyn Provider> = match config.provider {
        ProviderChoice::Builtin => Arc::new(BuiltinProvider),
        ProviderChoice::Openai => {
            let openai = OpenAiConfig::from_env().map_err(StartError::Config)?;
            log::info!(
                "agent provider: openai ({} at {})",
                openai.model,
                openai.base_url
            );
            Arc::new(OpenAiProvider::new(openai))
        }
    };
    let cores = if config.workers > 0 {
        config.workers
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    };
    let conversation_arbiters: Vec<Arbiter> = (0..cores).map(|_| Arbiter::new()).collect();
    let log_writer = LogWriter::start(metrics.clone(), layout.root.clone());
    let registry = ConversationRegistry::open(RegistryConfig {
        layout: layout.clone(),
        idle_timeout: config.idle_timeout,
        repair: config.repair,
        conversation_arbiters: conversation_arbiters.iter().map(|a| a.handle()).collect(),
        metrics: metrics.clone(),
        runtime: Arc::new(RuntimeConfig {
            provider,
            tool_servers,
            log_writer: log_writer.clone(),
            no_clients_grace: config.no_clients_grace,
            max_iterations: config.max_iterations,
            interaction_timeout: config.interaction_timeout,
            instance_root: layout.root.clone(),
        }),
    })?;
    let registry_arbiter = Arbiter::new();
    let registry =
        actix::Supervisor::start_in_arbiter(&registry_arbiter.handle(), move |_| registry);

    let listeners = bind(&config)?;
    let port = listeners[0].local_addr()?.port();
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let (closing_tx, closing_rx) = watch::channel(false);
    let state = actix_web::web::Data::new(AppState {
        config: config.clone(),
        registry: registry.clone(),
        metrics,
        started: Instant::now(),
        port,
        stop: stop_tx,
        closing: closing_rx,
        next_socket: Default::default(),
        log_writer,
        inbound: roundtable_actors::frames::InboundBudget::new(INBOUND_REASSEMBLY_BUDGET),
    });
    let app_state = state.clone();
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(app_state.clone())
            .wrap_fn(|req, srv| {
                use actix_web::dev::Service as _;
                // DNS rebinding: while bound to loopback, only loopback Host names are served.
                let refused = req
                    .app_data::<actix_web::web::Data<AppState>>()
                    .is_some_and(|s| s.config.loopback_only())
                    && !host_is_loopback(req.request());
                let fut = (!refused).then(|| srv.call(req));
                async move {
                    match fut {
                        Some(f) => f.await,
                        None => Err(actix_web::error::ErrorForbidden("Host not allowed")),
                    }
                }
            })
            .route("/health", actix_web::web::get().to(health))
            .route("/metrics", actix_web::web::get().to(metrics_text))
            .default_service(actix_web::web::to(upgrade))
    })
    .workers(cores)
    // Small frames must not wait ~40 ms for the peer's delayed ACK (Nagle).
    .tcp_nodelay(true)
    // Close TCP as soon as a WebSocket's close handshake is done (Autobahn needs exactly 0).
    .client_disconnect_timeout(Duration::ZERO)
    .shutdown_timeout(5)
    .disable_signals();
    for l in listeners {
        server = server.listen(l)?;
    }
    let server = server.run();
    let handle = server.handle();
    let host = match config.hosts.first() {
        Some(h) if h.is_ipv6() => format!("[{h}]"),
        Some(h) => h.to_string(),
        None => "127.0.0.1".into(),
    };
    log::info!(
        "roundtable {} listening on ws://{host}:{port}/ (instance dir {}, lock {})",
        env!("CARGO_PKG_VERSION"),
        layout.root.display(),
        lock.path().display()
    );

    let running = actix_web::rt::spawn(server);
    let signals = actix_web::rt::spawn(watch_signals(state.stop.clone()));
    // Wait for a stop request.
    while !*stop_rx.borrow_and_update() {
        if stop_rx.changed().await.is_err() {
            break;
        }
    }
    log::info!("shutting down: closing sockets, saving the registry");
    let _ = closing_tx.send(true);
    handle.pause().await;
    // Give connections a moment to queue their 1001 close frames.
    actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    let _ = registry.send(ShutdownRegistry).await;
    handle.stop(true).await;
    let _ = running.await;
    signals.abort();
    for a in conversation_arbiters {
        a.stop();
    }
    registry_arbiter.stop();
    drop(lock);
    log::info!("stopped");
    Ok(())
}

/// Kernel send buffer of every accepted socket (Linux doubles it; accepted sockets inherit it
/// from the listener). Bounds what a peer that stops reading can pin in the kernel before the
/// outbox bound sees it: the default autotunes up to 4 MiB per socket.
const SOCKET_SEND_BUFFER: usize = 128 * 1024;

/// Binds one listener with the socket options accepted connections inherit: a small send
/// buffer, no Nagle delay, and `TCP_USER_TIMEOUT` = `stall`, so a connection whose peer takes
/// no data for that long (a stuck or dead client: its window stays at zero, or nothing is
/// acknowledged) is aborted by the kernel, even while actix-http is blocked writing to it.
fn listen_on(addr: SocketAddr, stall: Duration) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_send_buffer_size(SOCKET_SEND_BUFFER)?;
    socket.set_tcp_nodelay(true)?;
    socket.set_tcp_user_timeout(Some(stall))?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

fn bind(config: &ServerConfig) -> Result<Vec<TcpListener>, StartError> {
    let mut listeners = Vec::new();
    let mut port = config.port;
    for (i, host) in config.hosts.iter().enumerate() {
        let addr = SocketAddr::new(*host, port);
        match listen_on(addr, config.stall_timeout) {
            Ok(l) => {
                // With port 0 every address shares the port the first one got.
                port = l.local_addr()?.port();
                listeners.push(l);
            }
            Err(e) if i > 0 && host.is_ipv6() && e.kind() == io::ErrorKind::AddrNotAvailable => {
                log::warn!("IPv6 loopback unavailable, listening on IPv4 only: {e}");
            }
            Err(source) => return Err(StartError::Bind { addr, source }),
        }
    }
    Ok(listeners)
}

async fn watch_signals(stop: watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use actix_web::rt::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => log::info!("SIGTERM"),
            _ = int.recv() => log::info!("SIGINT"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = actix_web::rt::signal::ctrl_c().await;
    }
    let _ = stop.send(true);
}

/// How long `/health` waits for the registry before calling it unresponsive.
const REGISTRY_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// `/health`: 200 with `"status":"ok"`, or 503 with `"status":"failing"` and `problems` when
/// the registry does not answer, a storage writer has died or storage writes fail.
async fn health(state: actix_web::web::Data<AppState>) -> HttpResponse {
    let stats = tokio::time::timeout(
        REGISTRY_HEALTH_TIMEOUT,
        state.registry.send(GetRegistryStats),
    )
    .await
    .ok()
    .and_then(Result::ok);
    let mut problems: Vec<String> = Vec::new();
    if stats.is_none() {
        problems.push("the conversation registry does not answer".into());
    }
    if Metrics::get(&state.metrics.dead_writers) > 0 {
        problems.push("a storage writer thread has stopped".into());
    }
    if let Some(cause) = state.metrics.storage_failure() {
        problems.push(format!("storage writes fail: {cause}"));
    }
    let mut response = if problems.is_empty() {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response.json(serde_json::json!({
        "status": if problems.is_empty() { "ok" } else { "failing" },
        "problems": problems,
        // The web client asks for a token only when the server needs one.
        "tokenRequired": state.config.token.is_some(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptimeSeconds": state.started.elapsed().as_secs_f64(),
        "conversations": stats.map(|s| s.conversations),
        "loadedConversations": stats.map(|s| s.loaded),
        "connectedSockets": Metrics::gauge(&state.metrics.sockets),
        "joinedClients": Metrics::gauge(&state.metrics.joined_clients),
    }))
}

async fn metrics_text(state: actix_web::web::Data<AppState>) -> HttpResponse {
    use std::fmt::Write;
    let m = &state.metrics;
    let stats = state.registry.send(GetRegistryStats).await.ok();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    metric(
        "roundtable_sockets",
        "gauge",
        "Open WebSocket connections.",
        Metrics::gauge(&m.sockets).to_string(),
    );
    metric(
        "roundtable_joined_clients",
        "gauge",
        "Clients joined to conversations.",
        Metrics::gauge(&m.joined_clients).to_string(),
    );
    metric(
        "roundtable_loaded_conversations",
        "gauge",
        "Conversations loaded in memory.",
        Metrics::gauge(&m.loaded_conversations).to_string(),
    );
    metric(
        "roundtable_conversations",
        "gauge",
        "Conversations in the registry.",
        stats.map_or(0, |s| s.conversations).to_string(),
    );
    metric(
        "roundtable_frames_in_total",
        "counter",
        "Messages received.",
        Metrics::get(&m.frames_in).to_string(),
    );
    metric(
        "roundtable_frames_out_total",
        "counter",
        "Messages queued for sending.",
        Metrics::get(&m.frames_out).to_string(),
    );
    metric(
        "roundtable_frames_dropped_total",
        "counter",
        "Inbound frames dropped as malformed.",
        Metrics::get(&m.frames_dropped).to_string(),
    );
    metric(
        "roundtable_slow_client_closes_total",
        "counter",
        "Clients closed because their outbound queue was full.",
        Metrics::get(&m.slow_client_closes).to_string(),
    );
    metric(
        "roundtable_evictions_total",
        "counter",
        "Conversations unloaded after idling.",
        Metrics::get(&m.evictions).to_string(),
    );
    metric(
        "roundtable_storage_errors_total",
        "counter",
        "Storage writes (appends, fsyncs, whole-file writes) that failed.",
        Metrics::get(&m.storage_errors).to_string(),
    );
    metric(
        "roundtable_storage_failing",
        "gauge",
        "1 while storage writes fail (see /health for the cause).",
        u8::from(m.storage_failure().is_some()).to_string(),
    );
    metric(
        "roundtable_log_writer_queued_bytes",
        "gauge",
        "Bytes queued for the log writer and not yet written.",
        state.log_writer.queued_bytes().to_string(),
    );
    metric(
        "roundtable_inbound_reassembly_bytes",
        "gauge",
        "Bytes of fragmented messages being reassembled, over every connection.",
        state.inbound.held().to_string(),
    );
    metric(
        "roundtable_log_fsyncs_total",
        "counter",
        "fsyncs made by the log writer (one per touched file per batch).",
        Metrics::get(&m.log_fsyncs).to_string(),
    );
    metric(
        "roundtable_log_barriers_total",
        "counter",
        "Write barriers confirmed by the log writer (acknowledgements waiting for durability).",
        Metrics::get(&m.log_barriers).to_string(),
    );
    metric(
        "roundtable_writer_backpressure_total",
        "counter",
        "Times a conversation paused because the log writer's queue was over its bound.",
        Metrics::get(&m.writer_backpressure).to_string(),
    );
    let _ = writeln!(
        out,
        "# HELP roundtable_rpc_errors_total invokeError answers by method.\n# TYPE roundtable_rpc_errors_total counter"
    );
    for (method, n) in m.rpc_errors() {
        let method = method
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = writeln!(
            out,
            "roundtable_rpc_errors_total{{method=\"{method}\"}} {n}"
        );
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(out)
}

/// Any path other than the fixed routes: a WebSocket upgrade, after the security checks.
/// Plain requests get the web client's files ([`web::respond`]) or 404.
async fn upgrade(
    req: HttpRequest,
    body: actix_web::web::Payload,
    state: actix_web::web::Data<AppState>,
) -> HttpResponse {
    let config = &state.config;
    let is_upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_upgrade {
        if let Some(page) = web::respond(&req) {
            return page;
        }
        return HttpResponse::NotFound()
            .body("Roundtable speaks WebSocket here; see /health and /metrics");
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &config.allowed_origins) {
            log::warn!("refused WebSocket upgrade from Origin {origin:?}");
            return HttpResponse::Forbidden().body("Origin not allowed");
        }
    }
    match &config.token {
        Some(token) => {
            if !token_presented(&req, token) {
                log::warn!("refused WebSocket upgrade without a valid token");
                return HttpResponse::Unauthorized()
                    .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
                    .body("missing or wrong token");
            }
        }
        None => {
            if let Err(refusal) = same_user_only(&req) {
                log::warn!("refused WebSocket upgrade: {refusal}");
                return HttpResponse::Forbidden().body(refusal);
            }
        }
    }
    let echo = config.echo_path.as_deref() == Some(req.path());
    transport::start(&req, body, state.into_inner(), echo)
}

/// True for `localhost`, `127.x.x.x` and `[::1]`, with any port.
fn is_loopback_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Splits `host[:port]` / `[v6][:port]` and returns the host.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split(']')
            .next()
            .map_or(authority, |h| &authority[..h.len() + 1]);
    }
    authority.rsplit_once(':').map_or(authority, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            authority
        }
    })
}

fn host_is_loopback(req: &HttpRequest) -> bool {
    match req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        Some(h) => is_loopback_host(strip_port(h.trim())),
        // HTTP/1.0 without Host: nothing to rebind.
        None => true,
    }
}

/// Loopback http(s) origins, or one listed with `--allow-origin`.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim();
    if allowed.iter().any(|a| {
        a.trim_end_matches('/')
            .eq_ignore_ascii_case(origin.trim_end_matches('/'))
    }) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return false;
    }
    let authority = rest.split('/').next().unwrap_or("");
    !authority.contains('@') && is_loopback_host(strip_port(authority))
}

/// Without a token, a loopback connection is served only when the OS user that opened it is
/// the server's own (so other users of a shared machine cannot read, delete or stop anything).
/// A connection from another address is allowed (the server only listens beyond loopback when
/// told to with `--host`, and warns at start when it does so without a token).
fn same_user_only(req: &HttpRequest) -> Result<(), String> {
    let Some(peer) = req.peer_addr() else {
        return Err("the connection has no peer address".into());
    };
    if !peer.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    let local = req.app_config().local_addr();
    let own = peer::own_uid().map_err(|e| format!("cannot read this process's uid: {e}"))?;
    match peer::loopback_peer_uid(peer, local) {
        Ok(Some(uid)) if uid == own => Ok(()),
        Ok(Some(uid)) => Err(format!(
            "connection from another OS user (uid {uid}); this server serves only uid {own} \
             without a token (start it with --token-file to share it)"
        )),
        Ok(None) => Err(format!(
            "cannot tell which OS user opened the connection from {peer}"
        )),
        Err(e) => Err(format!(
            "cannot read the socket table to check the peer's user: {e}"
        )),
    }
}

fn token_presented(req: &HttpRequest, expected: &str) -> bool {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if bearer.is_some_and(|b| constant_time_eq(b.as_bytes(), expected.as_bytes())) {
        return true;
    }
    actix_web::web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.get("token").cloned())
        .is_some_and(|t| constant_time_eq(t.as_bytes(), expected.as_bytes()))
}

/// Compares without an early exit, so timing does not reveal how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert!(origin_allowed("http://localhost:3000", &[]));
        assert!(origin_allowed("https://127.0.0.1", &[]));
        assert!(origin_allowed("http://[::1]:8999", &[]));
        assert!(!origin_allowed("https://evil.example", &[]));
        assert!(!origin_allowed("http://localhost.evil.example", &[]));
        assert!(!origin_allowed("http://user@evil.example", &[]));
        assert!(!origin_allowed("chrome-extension://abc", &[]));
        assert!(origin_allowed(
            "chrome-extension://abc",
            &["chrome-extension://abc".into()]
        ));
        assert!(!origin_allowed("null", &[]));
    }

    #[test]
    fn hosts_and_tokens() {
        assert!(is_loopback_host(strip_port("localhost:8999")));
        assert!(is_loopback_host(strip_port("[::1]:8999")));
        assert!(is_loopback_host(strip_port("127.0.0.2")));
        assert!(!is_loopback_host(strip_port("attacker.example:8999")));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
