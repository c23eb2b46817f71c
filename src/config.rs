//! Server settings. Built from command-line flags by `main.rs`; tests build it directly.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use roundtable_actors::outbox::OutboxLimits;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on (the default is both loopbacks, 127.0.0.1 and ::1).
    pub hosts: Vec<IpAddr>,
    /// TCP port; 0 picks a free one (the startup line says which).
    pub port: u16,
    /// Instance directory (registry, conversations, agent storage, lock).
    pub instance_dir: PathBuf,
    /// How long a conversation with no clients stays in memory.
    pub idle_timeout: Duration,
    /// Largest WebSocket frame and largest reassembled message, in bytes.
    pub max_frame_bytes: usize,
    /// Serve the conformance echo endpoint on this path (off when `None`).
    pub echo_path: Option<String>,
    /// Extra origins allowed to open a WebSocket (exact `scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// When set, upgrades need `Authorization: Bearer <token>` or `?token=<token>`.
    pub token: Option<String>,
    /// Move a corrupt registry aside instead of refusing to start.
    pub repair: bool,
    /// Heartbeat: ping every interval, drop a peer that missed the previous ping.
    pub ping_interval: Duration,
    /// A connection whose peer accepts no data for this long is aborted (`TCP_USER_TIMEOUT`).
    pub stall_timeout: Duration,
    /// Bounds of each socket's outbound queue.
    pub outbox: OutboxLimits,
    /// HTTP worker threads (and conversation arbiters); 0 = one per core.
    pub workers: usize,
    /// Which model backend the agent loop uses.
    pub provider: ProviderChoice,
    /// Provider calls per turn before the agent loop gives up.
    pub max_iterations: usize,
    /// After the last client leaves, queued work waits this long, then is cancelled.
    pub no_clients_grace: Duration,
    /// How long a question to the users waits for an answer.
    pub interaction_timeout: Duration,
    /// External tool servers: (name, base URL), offered as `name__tool`.
    pub tool_servers: Vec<(String, String)>,
}

/// The agent's model backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderChoice {
    /// Offline and deterministic: tools for arithmetic, time and weather, otherwise echo.
    Builtin,
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint (`ROUNDTABLE_OPENAI_*` env).
    Openai,
}

impl ServerConfig {
    /// Defaults for an instance directory: loopback, port 8999, 5-minute idle, 16 MiB frames.
    pub fn new(instance_dir: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            hosts: vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ],
            port: 8999,
            instance_dir: instance_dir.into(),
            idle_timeout: Duration::from_secs(300),
            max_frame_bytes: 16 * 1024 * 1024,
            echo_path: None,
            allowed_origins: Vec::new(),
            token: None,
            repair: false,
            // TypeAgent's server sweeps every 30 s; clients (OkHttp) ping on the same period.
            ping_interval: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
            outbox: OutboxLimits::default(),
            workers: 0,
            provider: ProviderChoice::Builtin,
            max_iterations: 10,
            no_clients_grace: Duration::from_secs(30),
            // TypeAgent's per-interaction timeout.
            interaction_timeout: Duration::from_secs(600),
            tool_servers: Vec::new(),
        }
    }

    /// True when every listen address is a loopback address (enables the Host check).
    pub fn loopback_only(&self) -> bool {
        self.hosts.iter().all(|h| h.is_loopback())
    }
}
