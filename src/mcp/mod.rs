//! MCP servers, through the official Rust SDK (`rmcp`): the configuration users already have
//! ([`config`]: `[mcp.servers.NAME]`, `--mcp-config` desktop JSON), one supervisor per server
//! that starts it (a child process over stdio, [`stdio`], or a Streamable HTTP session),
//! lists its tools and follows `tools/list_changed` ([`listing`]), and restarts it with
//! backoff ([`server`]), its parts sharing one state ([`shared`]; a call in flight:
//! [`in_flight`]); each server is a [`ToolServer`] whose tools the agent loop offers as
//! `NAME__tool`. Calls ([`call`]) give content blocks ([`content`]); the server's requests and
//! notifications go to the [`handler`]; elicitation requests become the conversation's
//! questions ([`elicit`]). What a server sends is checked for shape before rmcp parses it
//! ([`wire`]), so a message too deep or too large costs that message only.
//!
//! Threads: every MCP client runs on one dedicated thread, `mcp`, with its own tokio runtime
//! ([`McpHub`]), apart from the actix arbiters; conversations reach it only through channels
//! (see [`server`]). `serve` starts the hub before the registry and stops it when the server
//! stops: every supervisor kills its child and waits for it before the thread ends (at most
//! [`STOP_WAIT`]), so a restart in place leaves no zombie behind.
//!
//! Who talks to it: `crate::server` (start, stop), the conversations' turns (through
//! `dyn ToolServer`), `@system config agents` (through [`ToolServer::status`]).

pub mod call;
pub mod config;
pub mod content;
pub mod elicit;
pub mod handler;
pub mod http;
pub mod in_flight;
pub mod listing;
pub mod server;
pub mod shared;
pub mod stdio;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;

use roundtable_actors::agent::turn::ToolServer;
use tokio::sync::watch;

pub use config::McpServerConfig;

/// Longest the hub waits, when it stops, for its supervisors to stop their servers (each kills
/// its child and waits for it).
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The servers as the agent loop sees them, by name (the tools' prefix).
pub type McpToolServers = HashMap<String, Arc<dyn ToolServer>>;

/// The MCP thread and its servers.
pub struct McpHub {
    /// Set to stop every supervisor (and so the thread).
    stop: watch::Sender<bool>,
    /// The `mcp` thread.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl McpHub {
    /// Starts the `mcp` thread and a supervisor for each enabled server; the servers as tool
    /// servers, by name. Connecting happens in the background: a server's tools are offered
    /// once it is connected (the log says `MCP server NAME: connected (N tools; …)`).
    pub fn start(configs: &[McpServerConfig]) -> Result<(McpHub, McpToolServers), String> {
        // rmcp's HTTPS goes through rustls without a built-in provider: install ring's (in
        // the tree already). A second install (a restart in place) is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (stop, stop_rx) = watch::channel(false);
        // Each supervisor holds a sender: the channel closes when the last one has stopped.
        let (alive, mut all_stopped) = tokio::sync::mpsc::channel::<()>(1);
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("mcp".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                let mut stop_rx = stop_rx;
                runtime.block_on(async move {
                    let _ = stop_rx.wait_for(|stopped| *stopped).await;
                    // Each supervisor kills its child and waits for it, then drops its sender.
                    let stopped = all_stopped.recv();
                    if tokio::time::timeout(STOP_WAIT, stopped).await.is_err() {
                        log::warn!(
                            "MCP servers not all stopped within {} s",
                            STOP_WAIT.as_secs()
                        );
                    }
                });
                runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            })
            .map_err(|e| format!("cannot start the mcp thread: {e}"))?;
        let runtime = handle_rx
            .recv()
            .map_err(|_| "the mcp thread did not start".to_string())?
            .map_err(|e| format!("cannot start the mcp runtime: {e}"))?;
        let mut servers = McpToolServers::new();
        for config in configs {
            if !config.enabled {
                log::info!("MCP server {}: disabled; not started", config.name);
                continue;
            }
            log::info!(
                "MCP server {}: starting ({})",
                config.name,
                config.transport_text()
            );
            let shared = server::Shared::new(config.clone(), runtime.clone());
            runtime.spawn(server::supervise(
                shared.clone(),
                stop.subscribe(),
                alive.clone(),
            ));
            servers.insert(config.name.clone(), Arc::new(server::McpServer { shared }));
        }
        drop(alive);
        Ok((
            McpHub {
                stop,
                thread: Some(thread),
            },
            servers,
        ))
    }

    /// Stops every server (stdio children are killed) and the thread.
    pub fn stop(mut self) {
        self.stop_now();
    }

    /// [`McpHub::stop`] behind `&mut` (also run on drop).
    fn stop_now(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop_now();
    }
}
