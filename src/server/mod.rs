//! The HTTP server: [`serve`] takes the instance lock, starts the storage writer and the
//! registry, binds the listeners, runs actix-web until a stop request, then shuts down in
//! order (sockets close with 1001, the registry saves, the lock is released).
//!
//! - [`routes`]: `/health`, `/metrics` (table-driven) and the WebSocket upgrade on every
//!   other path, which hands the socket to [`crate::transport`].
//! - [`guards`]: the `Host`, `Origin`, token and same-user checks; [`peer`] finds the OS
//!   user behind a loopback connection for the last one.
//! - [`web`]: the built-in web client's files, served to plain requests.
//! - [`backup`]: `GET /backup`, a consistent snapshot streamed as an archive.
//! - [`restart`]: the `restart` RPC: the listening sockets kept across a re-exec.
//! - [`descriptors`]: the descriptor limit raised at start and shared between sockets and
//!   files (the socket cap).
//!
//! Who talks to it: the binary (`roundtable serve`) and tests call [`serve`]; the transport
//! reads [`AppState`] and asks for a stop through it (the `shutdown` RPC).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_http::HttpService;
use actix_service::{map_config, IntoServiceFactory, ServiceFactoryExt as _};
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::web::{self as web_routes, Data};
use actix_web::App;
use roundtable_actors::cluster::log_stream::LogReplicator;
use roundtable_actors::cluster::{Cluster, RegistryBackend};
use roundtable_actors::conversation::RuntimeConfig;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::protocol::frames::InboundBudget;
use roundtable_actors::registry::{
    read_registry_early, start_shared_sync, ClusterServices, ConversationRegistry, LiveDirectory,
    RegistryConfig, ShutdownRegistry,
};
use roundtable_actors::search::SearchIndex;
use roundtable_actors::storage::layout::Layout;
use roundtable_actors::storage::lock::InstanceLock;
use roundtable_actors::storage::log_writer::LogWriter;
use tokio::sync::watch;

use crate::config::ServerConfig;
use crate::providers;
use crate::transport;

pub mod backup;
pub mod descriptors;
pub mod guards;
pub mod peer;
pub mod restart;
pub mod routes;
pub mod systemd;
pub mod web;

pub use crate::transport::AppState;

/// Bytes all connections together may hold in messages being reassembled from fragments;
/// past it a connection that adds more is closed with 1013 (try again later).
pub const INBOUND_REASSEMBLY_BUDGET: usize = 256 << 20;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Storage problem (lock held, corrupt registry, I/O): the message names the file.
    #[error(transparent)]
    Store(#[from] roundtable_actors::storage::StoreError),
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

/// Raises the descriptor limit to the hard one and shares it between sockets and files
/// ([`descriptors`]); says what it got. A `--max-sockets` that does not fit is refused.
fn descriptor_budget(config: &ServerConfig) -> Result<descriptors::DescriptorBudget, StartError> {
    let limit = match descriptors::raise_limit() {
        Ok((before, now)) if now > before => {
            log::info!("descriptor limit raised from {before} to {now} (the hard limit)");
            now
        }
        Ok((_, now)) => now,
        Err(e) => {
            log::warn!("cannot read or raise the descriptor limit ({e}); assuming 1024");
            1024
        }
    };
    let budget = descriptors::DescriptorBudget::new(limit, config.max_sockets)
        .map_err(StartError::Config)?;
    log::info!(
        "up to {} WebSocket connections (descriptor limit {limit}, {} kept for files)",
        budget.sockets,
        limit.saturating_sub(budget.connections as u64)
    );
    Ok(budget)
}

/// The actors and threads [`serve`] starts before it listens, stopped in order at the end.
struct Started {
    /// The supervised registry actor.
    registry: Addr<ConversationRegistry>,
    /// The registry's loaded conversations, for direct joins.
    directory: Arc<LiveDirectory>,
    /// The registry's own arbiter.
    registry_arbiter: Arbiter,
    /// One arbiter per core for the conversations.
    conversation_arbiters: Vec<Arbiter>,
    /// The shared append writer.
    log_writer: LogWriter,
    /// The content search index (its threads stop after the conversations have).
    search: SearchIndex,
    /// The MCP servers' thread (stopped, its children killed, after the conversations).
    mcp: crate::mcp::McpHub,
    /// `serve --cluster`: what the registry shares with the other nodes (the same object
    /// its config holds), for the sync that fills its copy.
    shared: Option<Arc<dyn ClusterServices>>,
}

/// Runs the server until it is stopped (the `shutdown` or `restart` RPC, or a signal). Must be
/// called inside an actix `System`. Returns after the registry has been saved and every socket
/// closed; for a restart, with the listening sockets to hand to the next image.
pub async fn serve(config: ServerConfig) -> Result<restart::Stopped, StartError> {
    let descriptors = descriptor_budget(&config)?;
    let layout = Layout::new(&config.instance_dir);
    let lock = InstanceLock::acquire(&layout.root)?;
    let metrics = Arc::new(Metrics::default());
    let cores = if config.workers > 0 {
        config.workers
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    };
    let cluster = match &config.cluster {
        Some(settings) => Some(
            Cluster::connect(settings.clone())
                .await
                .map_err(|e| StartError::Config(format!("cluster: {e}")))?,
        ),
        None => None,
    };
    let started = start_registry(&config, &layout, &metrics, cores, cluster.clone()).await?;
    if let (Some(cluster), Some(shared)) = (&cluster, &started.shared) {
        // The list this node answers is the cluster's before the first client connects.
        start_shared_sync(shared.clone(), started.registry.clone())
            .await
            .map_err(|e| StartError::Config(format!("cluster: {e}")))?;
        // Searches reach every node's index; the others count the nodes they wait for.
        actix_web::rt::spawn(cluster.clone().serve_search(started.search.clone()));
        actix_web::rt::spawn(cluster.clone().announce_node());
    }

    let listeners = match restart::adopt()? {
        Some(adopted) => {
            log::info!(
                "restarted: serving on the {} listening socket(s) the previous image kept open",
                adopted.len()
            );
            adopted
        }
        None => bind(&config)?,
    };
    let port = listeners[0].local_addr()?.port();
    let kept = listeners
        .iter()
        .map(restart::keep)
        .collect::<io::Result<Vec<_>>>()?;
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let (closing_tx, closing_rx) = watch::channel(false);
    let state = Data::new(AppState {
        config: config.clone(),
        registry: started.registry.clone(),
        directory: started.directory.clone(),
        metrics,
        started: Instant::now(),
        port,
        stop: stop_tx,
        restarting: Default::default(),
        closing: closing_rx,
        next_socket: Default::default(),
        log_writer: started.log_writer.clone(),
        inbound: InboundBudget::new(INBOUND_REASSEMBLY_BUDGET),
        cluster,
        relay_links: Default::default(),
        descriptors,
    });
    let mut server = actix_server::Server::build()
        .workers(cores)
        // Each worker stops accepting at its share: past the sockets' cap and the HTTP
        // headroom, new connections wait in the backlog instead of taking the descriptors
        // the conversations' files need.
        .max_concurrent_connections(descriptors.connections.div_ceil(cores))
        .shutdown_timeout(5)
        .disable_signals();
    for listener in listeners {
        let addr = listener.local_addr()?;
        let state = state.clone();
        server = server.listen(format!("roundtable-{addr}"), listener, move || {
            http_service(state.clone(), addr)
        })?;
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

    if let Some(cluster) = state.cluster.clone() {
        actix_web::rt::spawn(transport::serve_relays(state.clone().into_inner(), cluster));
    }
    let running = actix_web::rt::spawn(server);
    let signals = actix_web::rt::spawn(watch_signals(state.stop.clone()));
    systemd::ready(port);
    let watchdog = systemd::watchdog_interval().map(|interval| {
        actix_web::rt::spawn(systemd::watchdog(
            interval,
            started.registry.clone(),
            started.log_writer.clone(),
            state.metrics.clone(),
        ))
    });
    // Wait for a stop request.
    while !*stop_rx.borrow_and_update() {
        if stop_rx.changed().await.is_err() {
            break;
        }
    }
    log::info!("shutting down: closing sockets, saving the registry");
    systemd::stopping();
    if let Some(watchdog) = watchdog {
        watchdog.abort();
    }
    // Stop accepting before the sockets are told to close: a client that reconnects at once
    // (after a restart's 1012) must wait in the backlog for the next image, not be accepted
    // by this one and closed again.
    handle.pause().await;
    // `pause()` returns once the command is queued for actix-server's accept thread, not once
    // that thread has deregistered the listener: give it a moment (a loaded machine may not
    // run it at once). A client accepted in that window anyway gets 1012 and reconnects.
    actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    let _ = closing_tx.send(true);
    // Give connections a moment to queue their 1001 close frames.
    actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    let _ = started.registry.send(ShutdownRegistry).await;
    // Every conversation has closed its files: make them durable by themselves and empty the
    // node log, so the next start has nothing to replay.
    let _ = started.log_writer.checkpoint().await;
    // Every conversation has stopped and handed over its last documents: commit them.
    let search = started.search.clone();
    let _ = actix_web::rt::task::spawn_blocking(move || search.shutdown()).await;
    let mcp = started.mcp;
    let _ = actix_web::rt::task::spawn_blocking(move || mcp.stop()).await;
    handle.stop(true).await;
    let _ = running.await;
    signals.abort();
    for a in started.conversation_arbiters {
        a.stop();
    }
    started.registry_arbiter.stop();
    drop(lock);
    if state.restarting.load(std::sync::atomic::Ordering::Acquire) {
        log::info!("stopped; restarting");
        return Ok(restart::Stopped::Restart(kept));
    }
    log::info!("stopped");
    Ok(restart::Stopped::Shutdown)
}

/// Starts the MCP servers' thread, picks the provider, starts the log writer, opens the registry
/// (migrations, recovery) and starts it, supervised, on its own arbiter.
async fn start_registry(
    config: &ServerConfig,
    layout: &Layout,
    metrics: &Arc<Metrics>,
    cores: usize,
    cluster: Option<Cluster>,
) -> Result<Started, StartError> {
    let (mcp, tool_servers) =
        crate::mcp::McpHub::start(&config.mcp_servers).map_err(StartError::Config)?;
    // Every provider the settings offer, built once; conversations get the default.
    let provider_set =
        providers::ProviderSet::build(&config.providers).map_err(StartError::Config)?;
    let providers = provider_set.shared();
    let conversation_arbiters: Vec<Arbiter> = (0..cores).map(|_| Arbiter::new()).collect();
    // The disk work of the start (the node log's replay, before anything reads a conversation
    // file; the search index's opening) runs on a thread of its own while this thread reads
    // the registry file into the registry's tables, the start's longest step at 10,000
    // conversations. Not the other way round: the main thread's malloc arena grows in large
    // steps, another thread's a page at a time (see `read_registry_early`).
    let disk_work = {
        let (metrics, root, node_log) = (metrics.clone(), layout.root.clone(), config.node_log);
        let (search_layout, reindex) = (layout.clone(), config.reindex);
        move || -> Result<(LogWriter, SearchIndex), StartError> {
            let (log_writer, _replayed) =
                LogWriter::start_with_log(metrics.clone(), root, node_log)?;
            let search = SearchIndex::open(&search_layout, reindex, metrics)?;
            Ok((log_writer, search))
        }
    };
    let disk_work = std::thread::Builder::new()
        .name("start-disk".into())
        .spawn(disk_work)?;
    let early_registry = read_registry_early(layout, cluster.is_some());
    let (mut log_writer, search) = disk_work
        .join()
        .map_err(|_| StartError::Config("the start's disk work panicked".into()))??;
    let mut shared: Option<Arc<dyn ClusterServices>> = None;
    if let Some(cluster) = cluster {
        // Conversation files also go to the cluster's log stream; barriers wait for it.
        let replicator = LogReplicator::start(&cluster, layout.conversations_dir());
        log_writer = log_writer.replicated(Arc::new(replicator.clone()));
        shared = Some(Arc::new(RegistryBackend::new(
            cluster,
            replicator,
            log_writer.clone(),
        )));
    }
    // In a cluster every join asks the registry (ownership, read-your-writes).
    let directory = Arc::new(match shared {
        None => LiveDirectory::new(),
        Some(_) => LiveDirectory::disabled(),
    });
    let registry = ConversationRegistry::open_prefetched(
        RegistryConfig {
            layout: layout.clone(),
            idle_timeout: config.idle_timeout,
            repair: config.repair,
            conversation_arbiters: conversation_arbiters.iter().map(|a| a.handle()).collect(),
            metrics: metrics.clone(),
            runtime: Arc::new(RuntimeConfig {
                providers,
                tool_servers,
                log_writer: log_writer.clone(),
                no_clients_grace: config.no_clients_grace,
                max_iterations: config.max_iterations,
                interaction_timeout: config.interaction_timeout,
                instance_root: layout.root.clone(),
                log_filter: crate::logging::control(),
                search: Some(search.clone()),
                working_directory: config.working_directory.clone(),
                compact_at: config.compact_at,
            }),
            cluster: shared.clone(),
            directory: directory.clone(),
        },
        early_registry,
    )?;
    let registry_arbiter = Arbiter::new();
    let registry =
        actix::Supervisor::start_in_arbiter(&registry_arbiter.handle(), move |_| registry);
    Ok(Started {
        registry,
        directory,
        registry_arbiter,
        conversation_arbiters,
        log_writer,
        search,
        mcp,
        shared,
    })
}

/// One worker's application: the `Host` check in front of every route, then the routes.
/// One worker's HTTP service on the listener bound to `addr`: actix-web's application for
/// ordinary requests, and the same application behind actix-http's upgrade service for
/// WebSocket upgrades, which then get the TCP stream without the HTTP/1 dispatcher
/// ([`transport::upgrade_service`]). The settings are `HttpServer`'s, which this replaces only
/// to reach that upgrade hook.
fn http_service(
    state: Data<AppState>,
    addr: SocketAddr,
) -> impl ServiceFactory<
    tokio::net::TcpStream,
    Config = (),
    Response = (),
    Error = actix_http::error::DispatchError,
    InitError = (),
> {
    let app_config =
        move |()| actix_web::dev::AppConfig::__priv_test_new(false, addr.to_string(), addr);
    let requests = map_config(
        app(state.clone())
            .into_factory()
            .map_err(|err: actix_web::Error| err.error_response()),
        app_config,
    );
    let upgrades = transport::upgrade_service(map_config(app(state).into_factory(), app_config));
    HttpService::build()
        // Small frames must not wait ~40 ms for the peer's delayed ACK (Nagle).
        .tcp_nodelay(true)
        // Close TCP as soon as a response that ends the connection is written.
        .client_disconnect_timeout(Duration::ZERO)
        .local_addr(addr)
        .upgrade(upgrades)
        .finish(requests)
        .tcp()
}

fn app(
    state: Data<AppState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(state)
        .wrap_fn(|req, srv| {
            use actix_web::dev::Service as _;
            // DNS rebinding: while bound to loopback, only loopback Host names are served.
            let refused = req
                .app_data::<Data<AppState>>()
                .is_some_and(|s| !guards::host_allowed(req.request(), &s.config));
            let fut = (!refused).then(|| srv.call(req));
            async move {
                match fut {
                    Some(f) => f.await,
                    None => Err(actix_web::error::ErrorForbidden("Host not allowed")),
                }
            }
        })
        .route("/health", web_routes::get().to(routes::health))
        .route("/metrics", web_routes::get().to(routes::metrics_text))
        .route("/backup", web_routes::get().to(backup::backup))
        .default_service(web_routes::to(routes::upgrade))
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

/// One listener per configured host, all on the same port (the first one's, with port 0).
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

/// Turns SIGTERM / SIGINT into a stop request.
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

/// The server's panic policy: a panic anywhere (an actor, a writer thread, a handler) is a bug
/// that may have left shared state half-changed, so the process logs it and aborts at once
/// instead of limping on (a registry whose mailbox is gone would fail every request while the
/// port still answers). Every acknowledged change is already on disk, so nothing acknowledged
/// is lost; the service manager (systemd's `Restart=on-failure`) starts it again, and the
/// start-up recovery closes the requests that were running. Installed by `roundtable serve`.
pub fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        log::error!("panic: {info}; aborting so that the service manager restarts the server");
        std::process::abort();
    }));
}
