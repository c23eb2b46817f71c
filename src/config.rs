//! Server settings: [`ServerConfig`] is everything [`serve`](crate::serve) needs; [`ServeArgs`]
//! are the flags of `roundtable serve`, and `ServerConfig::try_from(args)` validates them
//! (durations, token or token file, MCP servers) and fills in the defaults. Tests build a
//! [`ServerConfig`] directly.
//!
//! `ServeArgs` lives here, in the library, rather than in `main.rs`: each flag sits next to the
//! field it sets and the rule that checks it, the validation is unit-testable, and the binary
//! stays clap glue that only flattens it as its `serve` subcommand. A [`ConfigError`] is a
//! usage error: the binary prints it as `roundtable: <text>` and exits with 2.

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod cluster;
pub use cluster::{CLUSTER_PASSWORD_ENV, CLUSTER_TOKEN_ENV};

use roundtable_actors::cluster::ClusterSettings;
use roundtable_actors::conversation::WorkingDirectoryPolicy;
use roundtable_actors::outbox::{OutboxLimits, ServerBudget, DEFAULT_SERVER_QUEUED_BYTES};

use crate::providers::{ProviderProfile, ProviderSettings};

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
    /// The node log: its segment bound, and whether it is used (`--no-wal` fsyncs each
    /// conversation file per batch instead).
    pub node_log: roundtable_actors::storage::node_log::NodeLogConfig,
    /// Serve the conformance echo endpoint on this path (off when `None`).
    pub echo_path: Option<String>,
    /// Extra origins allowed to open a WebSocket (exact `scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// When set, upgrades need `Authorization: Bearer <token>` or `?token=<token>`.
    pub token: Option<String>,
    /// Move a corrupt registry aside instead of refusing to start.
    pub repair: bool,
    /// Throw the content search index away and rebuild it from the display logs.
    pub reindex: bool,
    /// Heartbeat: ping every interval, drop a peer that missed the previous ping.
    pub ping_interval: Duration,
    /// A connection whose peer accepts no data for this long is aborted (`TCP_USER_TIMEOUT`).
    pub stall_timeout: Duration,
    /// Bounds of each socket's outbound queue.
    pub outbox: OutboxLimits,
    /// `--max-sockets`: WebSocket connections served at once; `None` takes what the
    /// descriptor limit leaves after the reserve for files (`server/descriptors.rs`).
    pub max_sockets: Option<usize>,
    /// `--compact-at`: the share of the model's context window (percent) at which a
    /// conversation compacts its history before the next model call; 0: never on its own.
    pub compact_at: u64,
    /// HTTP worker threads (and conversation arbiters); 0 = one per core.
    pub workers: usize,
    /// The model backends offered (`--provider`'s default and the config file's
    /// `[providers.NAME]` profiles); built into a `ProviderSet` at start.
    pub providers: ProviderSettings,
    /// Provider calls per turn before the agent loop gives up.
    pub max_iterations: usize,
    /// After the last client leaves, queued work waits this long, then is cancelled.
    pub no_clients_grace: Duration,
    /// How long a question to the users waits for an answer.
    pub interaction_timeout: Duration,
    /// MCP servers (`[mcp.servers.NAME]`, `--mcp-config`), their tools offered as
    /// `NAME__tool`.
    pub mcp_servers: Vec<crate::mcp::McpServerConfig>,
    /// How long a call to a client-hosted agent's action waits for the client's answer.
    pub client_agent_timeout: Duration,
    /// `--cluster`: the NATS server and this node's name; `None` runs a single node.
    pub cluster: Option<ClusterSettings>,
    /// Where requests may work (`--working-directory-root`) and where they work when they
    /// name no allowed directory (`--working-directory-default`).
    pub working_directory: WorkingDirectoryPolicy,
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
            node_log: Default::default(),
            echo_path: None,
            allowed_origins: Vec::new(),
            token: None,
            repair: false,
            reindex: false,
            // TypeAgent's server sweeps every 30 s; clients (OkHttp) ping on the same period.
            ping_interval: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
            outbox: OutboxLimits::default(),
            max_sockets: None,
            compact_at: 90,
            workers: 0,
            providers: ProviderSettings::builtin(),
            max_iterations: 10,
            no_clients_grace: Duration::from_secs(30),
            // TypeAgent's per-interaction timeout.
            interaction_timeout: Duration::from_secs(600),
            mcp_servers: Vec::new(),
            client_agent_timeout: roundtable_actors::agent::client_agent::DEFAULT_CALL_TIMEOUT,
            cluster: None,
            working_directory: WorkingDirectoryPolicy::new(&[], &server_directory())
                .expect("no roots is a valid policy"),
        }
    }

    /// True when every listen address is a loopback address (enables the Host check).
    pub fn loopback_only(&self) -> bool {
        self.hosts.iter().all(|h| h.is_loopback())
    }
}

/// The flags of `roundtable serve`, turned into a [`ServerConfig`] by `try_from`. The field
/// comments are the `--help` text (hence plain `<ts>`, not HTML, in one of them).
#[derive(clap::Args)]
#[allow(rustdoc::invalid_html_tags)]
pub struct ServeArgs {
    /// Read settings from this TOML file (default: <instance-dir>/roundtable.toml when it
    /// exists). Flags and environment variables win over it.
    #[arg(long, env = "ROUNDTABLE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// TCP port (0 picks a free one).
    #[arg(long, env = "ROUNDTABLE_PORT", default_value_t = 8999)]
    pub(crate) port: u16,
    /// Address to listen on (repeatable). Default: both loopbacks, 127.0.0.1 and ::1.
    #[arg(long = "host")]
    pub(crate) hosts: Vec<IpAddr>,
    /// Instance directory. Default: ~/.roundtable.
    #[arg(long, env = "ROUNDTABLE_HOME")]
    pub(crate) instance_dir: Option<PathBuf>,
    /// Seconds a conversation with no clients stays in memory.
    #[arg(long, default_value_t = 300.0)]
    pub(crate) idle_timeout: f64,
    /// Largest WebSocket frame / message in bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub(crate) max_frame_bytes: usize,
    /// Serve a WebSocket echo endpoint on this path (conformance testing).
    #[arg(long)]
    pub(crate) echo_path: Option<String>,
    /// Size of a node log segment in bytes: past it the log starts another and the files it
    /// covered are flushed and the old segment removed (at least 4096).
    #[arg(long, default_value_t = roundtable_actors::storage::node_log::DEFAULT_SEGMENT_BYTES)]
    pub(crate) wal_segment_bytes: u64,
    /// Do not write the node log: fsync each conversation file once per batch instead (slower;
    /// kept for comparisons). A log a crash left is still replayed at start-up.
    #[arg(long)]
    pub(crate) no_wal: bool,
    /// Also accept WebSocket upgrades from this Origin (repeatable), e.g. chrome-extension://id.
    #[arg(long = "allow-origin")]
    pub(crate) allowed_origins: Vec<String>,
    /// Require this token (Authorization: Bearer, or ?token=) on every upgrade. Visible to
    /// other users in `ps`: prefer --token-file or ROUNDTABLE_TOKEN.
    #[arg(long, env = "ROUNDTABLE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Read the token from this file (its first line; the file should be private).
    #[arg(long, conflicts_with = "token")]
    pub(crate) token_file: Option<PathBuf>,
    /// Move an unparsable registry aside to conversations.json.corrupt-<ts> and start empty.
    #[arg(long)]
    pub(crate) repair: bool,
    /// Rebuild the content search index from the display logs (in the background; searches
    /// answer from what is indexed so far).
    #[arg(long)]
    pub(crate) reindex: bool,
    /// Seconds between heartbeat pings.
    #[arg(long, default_value_t = 30.0, hide = true)]
    pub(crate) ping_interval: f64,
    /// Seconds a connection may take no data before it is aborted (TCP_USER_TIMEOUT).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) stall_timeout: f64,
    /// Largest outbound queue per socket, in frames.
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_queued_frames: usize,
    /// Compact a conversation's history before a model call once its context meter reaches
    /// this share of the model's window, in percent (1 to 100; 0: only on `@compact`).
    #[arg(long, default_value_t = 90)]
    pub(crate) compact_at: u64,
    /// Most WebSocket connections served at once; an upgrade past it is answered 503.
    /// Default: the descriptor limit (raised to the hard limit at start) less a reserve for
    /// files; the start-up log says both.
    #[arg(long)]
    pub(crate) max_sockets: Option<usize>,
    /// The agent's model backend: builtin (offline), openai (ROUNDTABLE_OPENAI_BASE_URL,
    /// _MODEL, _API_KEY), anthropic (ROUNDTABLE_ANTHROPIC_MODEL, _API_KEY), or the name of a
    /// [providers.NAME] profile of the config file.
    #[arg(long, env = "ROUNDTABLE_PROVIDER", default_value = "builtin")]
    pub(crate) provider: String,
    /// The config file's `[providers.NAME]` tables (set by the config file, not a flag).
    #[arg(skip)]
    pub(crate) provider_profiles: Vec<ProviderProfile>,
    /// Model calls per turn before the agent loop gives up.
    #[arg(long, default_value_t = 10)]
    pub(crate) max_iterations: usize,
    /// Seconds queued work survives after the last client leaves (then: no_clients).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) no_clients_grace: f64,
    /// MCP servers in the JSON desktop clients use, {"mcpServers": {NAME: {command, args,
    /// env} | {url, headers}}} (repeatable); their tools are offered as NAME__tool.
    #[arg(long = "mcp-config")]
    pub(crate) mcp_configs: Vec<PathBuf>,
    /// The config file's `[mcp.servers.NAME]` tables (set by the config file, not a flag).
    #[arg(skip)]
    pub(crate) mcp_file_servers: Vec<crate::mcp::McpServerConfig>,
    /// Seconds a question to the users waits for an answer.
    #[arg(long, default_value_t = 600.0, hide = true)]
    pub(crate) interaction_timeout: f64,
    /// Largest outbound queue per socket, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub(crate) max_queued_bytes: usize,
    /// Seconds a call to a client-hosted agent's action (Android's phone actions) waits for
    /// the client's answer; then the model gets a time-out error.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) client_agent_timeout: f64,
    /// Largest outbound queue of all sockets together, in bytes; past it a push fails as if
    /// that socket's queue were full (it is closed as a slow consumer).
    #[arg(long, default_value_t = DEFAULT_SERVER_QUEUED_BYTES)]
    pub(crate) max_queued_bytes_total: usize,
    /// Join a cluster through this NATS server with JetStream (nats://HOST:PORT; several
    /// comma-separated): the conversation list lives there, shared by every node
    /// (docs/cluster.md).
    #[arg(long, env = "ROUNDTABLE_CLUSTER")]
    pub(crate) cluster: Option<String>,
    /// This node's name in the cluster (letters, digits, '-', '_'; unique per node). Default:
    /// the host name.
    #[arg(long, env = "ROUNDTABLE_NODE_NAME")]
    pub(crate) node_name: Option<String>,
    /// Seconds an ownership lease lasts without renewal: how long a dead node's conversations
    /// wait before another node takes them over (the first node of a cluster sets it).
    #[arg(long, default_value_t = 6.0, hide = true)]
    pub(crate) lease_time: f64,
    /// Seconds between checks of this node's copy of the conversation list against the
    /// cluster's registry bucket (each repairs what the bucket's watch did not deliver).
    #[arg(long, default_value_t = 30.0, hide = true)]
    pub(crate) reconcile_time: f64,
    /// JetStream replicas (1 to 5) of every bucket and of the log stream this node creates;
    /// more than 1 needs a clustered NATS. An existing one with another count is updated
    /// where JetStream allows it.
    #[arg(long, env = "ROUNDTABLE_CLUSTER_REPLICAS", default_value_t = 1)]
    pub(crate) cluster_replicas: usize,
    /// The cluster's name (letters, digits, '-', '_'; 1 to 32; case-insensitive): it prefixes
    /// every NATS subject, bucket and stream, so clusters with different names share one NATS
    /// account without seeing each other. Default: rt (the names of clusters before the flag).
    #[arg(long, env = "ROUNDTABLE_CLUSTER_NAME", default_value = roundtable_actors::cluster::names::DEFAULT_CLUSTER_NAME)]
    pub(crate) cluster_name: String,
    /// The NATS user for --cluster; its password comes from --cluster-password-file or
    /// $ROUNDTABLE_CLUSTER_PASSWORD (never a flag: it would show in `ps`).
    #[arg(long, env = "ROUNDTABLE_CLUSTER_USER")]
    pub(crate) cluster_user: Option<String>,
    /// A file whose first line is the password of --cluster-user.
    #[arg(long)]
    pub(crate) cluster_password_file: Option<PathBuf>,
    /// A file whose first line is the NATS token for --cluster (or $ROUNDTABLE_CLUSTER_TOKEN).
    #[arg(long)]
    pub(crate) cluster_token_file: Option<PathBuf>,
    /// A file whose first line is the cluster secret (every node the same; at least 16
    /// bytes; mode 0600): it authenticates the nodes' messages to each other. Required with
    /// --cluster. Make one: head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE.
    #[arg(long)]
    pub(crate) cluster_secret_file: Option<PathBuf>,
    /// A NATS .creds file (user JWT and nkey seed) for --cluster.
    #[arg(long, env = "ROUNDTABLE_CLUSTER_CREDS")]
    pub(crate) cluster_creds: Option<PathBuf>,
    /// PEM certificates that sign the NATS server's TLS certificate (besides the system's).
    /// A tls:// URL requires TLS; a nats:// one uses it when the server demands it.
    #[arg(long)]
    pub(crate) cluster_tls_ca: Option<PathBuf>,
    /// This node's TLS client certificate (PEM) for NATS; needs --cluster-tls-key.
    #[arg(long)]
    pub(crate) cluster_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --cluster-tls-cert.
    #[arg(long)]
    pub(crate) cluster_tls_key: Option<PathBuf>,
    /// A directory requests may work in (repeatable): a request's workingDirectory must lie
    /// within one, else it works in --working-directory-default. Default: any directory.
    #[arg(long = "working-directory-root")]
    pub(crate) working_directory_roots: Vec<PathBuf>,
    /// Where a request works when it names no allowed directory. Default: the server's
    /// current directory.
    #[arg(long)]
    pub(crate) working_directory_default: Option<PathBuf>,
}

impl ServeArgs {
    /// The providers these flags (and the config file read into them) offer, the default
    /// checked: what `serve` builds and what `roundtable models` asks.
    pub fn provider_settings(&self) -> Result<ProviderSettings, ConfigError> {
        let settings = ProviderSettings {
            default: self.provider.clone(),
            profiles: self.provider_profiles.clone(),
        };
        settings
            .check_default()
            .map_err(|message| ConfigError::Invalid {
                flag: "provider",
                message,
            })?;
        Ok(settings)
    }
}

/// A `roundtable serve` flag that cannot be used; the text is what the user sees.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No `--instance-dir` and no home directory to put `~/.roundtable` in.
    #[error("no home directory; pass --instance-dir")]
    NoHomeDirectory,
    /// A duration flag that is negative, not a number or too large.
    #[error("--{flag} must be a non-negative number of seconds")]
    NotSeconds {
        /// The flag, without its dashes.
        flag: &'static str,
    },
    /// A duration flag that must not be zero is.
    #[error("--{flag} must be positive")]
    NotPositive {
        /// The flag, without its dashes.
        flag: &'static str,
    },
    /// An MCP server entry that cannot be used (the text names the file and key).
    #[error("{0}")]
    Mcp(String),
    /// The `--token-file` cannot be read.
    #[error("--token-file {}: {source}", path.display())]
    TokenFile {
        /// The file given.
        path: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// `--cluster` / `--node-name` cannot be used (the text says why).
    #[error("{0}")]
    Cluster(String),
    /// A flag's value is out of range or unusable (the text says why).
    #[error("--{flag} {message}")]
    Invalid {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `--working-directory-root` names no existing directory (the text says so).
    #[error("--{0}")]
    WorkingDirectory(String),
    /// An empty token would silently turn authentication off.
    #[error("the token is empty; give a non-empty token, or none to serve only your own user")]
    EmptyToken,
    /// The config file cannot be read, does not parse, has an unknown key or a value of the
    /// wrong type (the text names the line and the key).
    #[error("config file {}: {message}", path.display())]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line.
        message: String,
    },
    /// A value from the config file that parses but is out of range.
    #[error("config file {}, line {line}, key `{key}`: {message}", path.display())]
    ConfigValue {
        /// The file.
        path: PathBuf,
        /// 1-based line of the value.
        line: usize,
        /// The key.
        key: &'static str,
        /// What is wrong (the flag's own message).
        message: String,
    },
}

impl ConfigError {
    /// The flag (= config key) a value error is about, for pointing at the config file line
    /// that set it.
    pub fn flag(&self) -> Option<&'static str> {
        match self {
            ConfigError::NotSeconds { flag }
            | ConfigError::NotPositive { flag }
            | ConfigError::Invalid { flag, .. } => Some(flag),
            ConfigError::TokenFile { .. } => Some("token-file"),
            ConfigError::EmptyToken => Some("token"),
            ConfigError::Cluster(_) => Some("cluster"),
            ConfigError::WorkingDirectory(_) => Some("working-directory-root"),
            _ => None,
        }
    }
}

/// The server's current directory (the default working directory of requests, as
/// TypeAgent's `process.cwd()`); `.` if it cannot be read.
fn server_directory() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}

impl TryFrom<ServeArgs> for ServerConfig {
    type Error = ConfigError;

    /// Checks the flags in the order the user reads them in errors: the provider, instance
    /// directory, durations, MCP servers, token. Logs the two warnings about exposure: a
    /// token on the command line, and listening beyond loopback without one.
    fn try_from(args: ServeArgs) -> Result<ServerConfig, ConfigError> {
        let providers = args.provider_settings()?;
        let instance_dir = args
            .instance_dir
            .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
            .ok_or(ConfigError::NoHomeDirectory)?;
        let mut config = ServerConfig::new(instance_dir);
        config.providers = providers;
        config.port = args.port;
        if !args.hosts.is_empty() {
            config.hosts = args.hosts;
        }
        config.idle_timeout = seconds("idle-timeout", args.idle_timeout)?;
        config.ping_interval = positive_seconds("ping-interval", args.ping_interval)?;
        config.stall_timeout = positive_seconds("stall-timeout", args.stall_timeout)?;
        config.no_clients_grace = seconds("no-clients-grace", args.no_clients_grace)?;
        config.interaction_timeout = seconds("interaction-timeout", args.interaction_timeout)?;
        config.client_agent_timeout =
            positive_seconds("client-agent-timeout", args.client_agent_timeout)?;
        config.mcp_servers = crate::mcp::config::merge(args.mcp_file_servers, &args.mcp_configs)
            .map_err(ConfigError::Mcp)?;
        config.max_iterations = args.max_iterations.max(1);
        config.max_frame_bytes = args.max_frame_bytes.max(1024);
        config.node_log = roundtable_actors::storage::node_log::NodeLogConfig {
            segment_bytes: args
                .wal_segment_bytes
                .max(roundtable_actors::storage::node_log::MIN_SEGMENT_BYTES),
            enabled: !args.no_wal,
        };
        config.echo_path = args.echo_path.map(|p| {
            if p.starts_with('/') {
                p
            } else {
                format!("/{p}")
            }
        });
        config.allowed_origins = args.allowed_origins;
        config.token = token(args.token, args.token_file.as_deref())?;
        if config.token.is_none() && !config.loopback_only() {
            log::warn!(
                "listening beyond loopback without a token: anyone who can reach the port can \
                 read, change and delete every conversation (use --token-file)"
            );
        }
        config.repair = args.repair;
        config.reindex = args.reindex;
        config.outbox.max_frames = args.max_queued_frames.max(1);
        config.max_sockets = args.max_sockets;
        if args.compact_at > 100 {
            return Err(ConfigError::Invalid {
                flag: "compact-at",
                message: format!(
                    "must be a percentage from 0 to 100, got {}",
                    args.compact_at
                ),
            });
        }
        config.compact_at = args.compact_at;
        config.outbox.max_bytes = args.max_queued_bytes.max(1024);
        config.outbox.server = Some(ServerBudget::new(args.max_queued_bytes_total.max(1024)));
        let default_directory = args
            .working_directory_default
            .unwrap_or_else(server_directory);
        config.working_directory =
            WorkingDirectoryPolicy::new(&args.working_directory_roots, &default_directory)
                .map_err(ConfigError::WorkingDirectory)?;
        config.cluster = cluster::from_flags(cluster::ClusterFlags {
            url: args.cluster,
            node_name: args.node_name,
            lease_time: args.lease_time,
            reconcile_time: args.reconcile_time,
            replicas: args.cluster_replicas,
            name: args.cluster_name,
            secret_file: args.cluster_secret_file,
            auth: cluster::ClusterAuthArgs {
                user: args.cluster_user,
                password_file: args.cluster_password_file,
                token_file: args.cluster_token_file,
                creds: args.cluster_creds,
                tls_ca: args.cluster_tls_ca,
                tls_cert: args.cluster_tls_cert,
                tls_key: args.cluster_tls_key,
            },
        })?;
        Ok(config)
    }
}

/// The token in `path` (its first line, trimmed), as `serve --token-file` and the client
/// commands' `--token-file` read it. Warns when the file is readable by other users (its
/// group or everyone): whoever reads it can use the server. An empty token is the caller's
/// to refuse.
pub fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let failed = |source| ConfigError::TokenFile {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(failed)?;
    warn_if_readable_by_others(path, "the token file");
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

/// Warns (`log::warn!`) when `path` can be read by its group or by everyone: `what` holds a
/// secret (a token file, a config file with a token).
pub fn warn_if_readable_by_others(path: &Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        log::warn!(
            "{what} {} is readable by other users (mode {mode:o}); whoever reads it can use the \
             server: run chmod 600 {}",
            path.display(),
            path.display()
        );
    }
}

/// `--flag` seconds as a duration.
fn seconds(flag: &'static str, s: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(s).map_err(|_| ConfigError::NotSeconds { flag })
}

/// Like [`seconds`], refusing zero.
fn positive_seconds(flag: &'static str, s: f64) -> Result<Duration, ConfigError> {
    match seconds(flag, s)? {
        d if d.is_zero() => Err(ConfigError::NotPositive { flag }),
        d => Ok(d),
    }
}

/// The token from `--token` / `ROUNDTABLE_TOKEN` or `--token-file`: an empty one is refused
/// (it would silently turn authentication off), and a token on the command line gets a
/// warning (other users see it in `ps`).
fn token(flag: Option<String>, file: Option<&Path>) -> Result<Option<String>, ConfigError> {
    let token = match (flag, file) {
        (_, Some(path)) => Some(read_token_file(path)?),
        (Some(t), None) => {
            if std::env::args().any(|a| a == "--token" || a.starts_with("--token=")) {
                log::warn!(
                    "--token on the command line is visible to other users (ps); \
                     prefer --token-file or ROUNDTABLE_TOKEN"
                );
            }
            Some(t)
        }
        (None, None) => None,
    };
    match token {
        Some(t) if t.trim().is_empty() => Err(ConfigError::EmptyToken),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use roundtable_actors::cluster::Names;

    /// `roundtable serve` as clap sees it, for these tests.
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn config(flags: &[&str]) -> Result<ServerConfig, ConfigError> {
        let mut argv = vec!["serve", "--instance-dir", "/tmp/roundtable-config-test"];
        argv.extend_from_slice(flags);
        ServerConfig::try_from(Serve::try_parse_from(argv).expect("flags parse").args)
    }

    #[test]
    fn durations_are_checked_in_order() {
        let err = config(&["--idle-timeout=-1", "--ping-interval=0"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--idle-timeout must be a non-negative number of seconds"
        );
        let err = config(&["--ping-interval=0"]).unwrap_err();
        assert_eq!(err.to_string(), "--ping-interval must be positive");
        let config = config(&["--stall-timeout=1.5", "--echo-path=echo"]).unwrap();
        assert_eq!(config.stall_timeout, Duration::from_millis(1500));
        assert_eq!(config.echo_path.as_deref(), Some("/echo"));
    }

    #[test]
    fn mcp_configs_and_tokens() {
        let err = config(&["--mcp-config=/nonexistent/mcp.json"]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--mcp-config /nonexistent/mcp.json: "),
            "{err}"
        );
        let err = config(&["--token-file=/nonexistent/token"]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--token-file /nonexistent/token: "),
            "{err}"
        );
        let err = config(&["--token= "]).unwrap_err();
        assert!(matches!(err, ConfigError::EmptyToken));
    }

    /// `--cluster-secret-file=<a private secret file>` (kept while the directory lives).
    fn secret_flag() -> (tempfile::TempDir, String) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster-secret");
        std::fs::write(&file, "a cluster secret for the tests\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let flag = format!("--cluster-secret-file={}", file.display());
        (dir, flag)
    }

    /// `config` of `--cluster` with a secret and `flags`.
    fn cluster_config(flags: &[&str]) -> Result<ServerConfig, ConfigError> {
        let (_dir, secret) = secret_flag();
        let mut all = vec!["--cluster=nats://127.0.0.1:4222", secret.as_str()];
        all.extend_from_slice(flags);
        config(&all)
    }

    #[test]
    fn cluster_replicas_are_one_to_five() {
        let settings = |flags: &[&str]| cluster_config(flags).map(|c| c.cluster.unwrap().replicas);
        assert_eq!(settings(&["--node-name=a"]).unwrap(), 1);
        assert_eq!(
            settings(&["--node-name=a", "--cluster-replicas=3"]).unwrap(),
            3
        );
        for bad in ["0", "6"] {
            let err =
                settings(&["--node-name=a", &format!("--cluster-replicas={bad}")]).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("--cluster-replicas must be 1 to 5 (JetStream replicas), not {bad}")
            );
            assert_eq!(err.flag(), Some("cluster-replicas"));
        }
    }

    #[test]
    fn cluster_names_are_checked() {
        let names = |flags: &[&str]| cluster_config(flags).map(|c| c.cluster.unwrap().names);
        assert_eq!(names(&["--node-name=a"]).unwrap(), Names::default());
        assert_eq!(
            names(&["--node-name=a", "--cluster-name=One"])
                .unwrap()
                .registry_bucket(),
            "one_registry"
        );
        let err = names(&["--node-name=a", "--cluster-name=a.b"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--cluster-name \"a.b\" may contain only letters, digits, '-' and '_'"
        );
        assert_eq!(err.flag(), Some("cluster-name"));
    }

    #[test]
    fn working_directory_roots_must_exist() {
        let err = config(&["--working-directory-root=/nonexistent/root"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--working-directory-root: none of the roots is an existing directory"
        );
        assert_eq!(err.flag(), Some("working-directory-root"));
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let flag = format!("--working-directory-root={}", root.display());
        let default = format!("--working-directory-default={}", root.display());
        let config = config(&[&flag, "--working-directory-root=/nonexistent", &default]).unwrap();
        assert_eq!(
            config.working_directory.allowed_roots(),
            std::slice::from_ref(&root)
        );
        assert_eq!(
            config.working_directory.default_root(),
            Some(root.as_path())
        );
    }
}
