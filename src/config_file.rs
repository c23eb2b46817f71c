//! The config file: a TOML file with one key per `serve` flag (the flag's name without its
//! dashes: `idle-timeout = 120`, `host = ["127.0.0.1"]`, `mcp-config = ["mcp.json"]`), and
//! `[mcp.servers.NAME]` tables, one per MCP server ([`crate::mcp::config`]). It is
//! `--config PATH` (or `$ROUNDTABLE_CONFIG`), else `<instance-dir>/roundtable.toml` when that
//! exists. Precedence: flags > environment > file > built-in defaults; clap says which of the
//! first two set a value (`ArgMatches::value_source`), the file fills in what they left at
//! the default. Unknown keys and values of the wrong type are refused with the line and key
//! (the `toml` crate's message); values that parse but are out of range are refused by the same
//! checks as the flags, with the file's line and key ([`locate`]).
//!
//! Also `roundtable config show` (every key's effective value and where it came from) and
//! `roundtable config init` (a commented file with every key at its default).
//!
//! Who talks to it: `main.rs` (serve, config show / init) before a [`ServerConfig`] is built.
//!
//! [`ServerConfig`]: crate::ServerConfig

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches, Parser};
use serde::Deserialize;
use toml::Spanned;

use crate::config::{ConfigError, ServeArgs};

mod providers;

/// The config file's name inside an instance directory.
pub const INSTANCE_CONFIG: &str = "roundtable.toml";

/// Where one effective value came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// An environment variable (named).
    Env(String),
    /// The config file, at this line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line of the value.
        line: usize,
    },
    /// The built-in default (or unset).
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(var) => write!(f, "environment ${var}"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// Keys set by the config file, with where.
pub type FileSources = BTreeMap<&'static str, Source>;

/// The keys, once: (key, `ServeArgs` field, type in the file, how it lands in the field, help
/// line for `config init`). A new `serve` flag gets its line here.
macro_rules! settings {
    ($( $key:literal => $field:ident : $ty:ty = $into:expr, $help:literal; )*) => {
        /// The file as written: every key optional, unknown keys refused (with their line).
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        struct FileConfig {
            $(
                #[serde(rename = $key, default)]
                $field: Option<Spanned<$ty>>,
            )*
            /// `[mcp.servers.NAME]` tables.
            #[serde(default)]
            mcp: Option<McpSection>,
            /// `[providers.NAME]` tables (model provider profiles).
            #[serde(default)]
            providers: BTreeMap<String, crate::providers::profiles::ProfileEntry>,
        }

        /// Every key: (key, clap id, help).
        const KEYS: &[(&str, &str, &str)] = &[$(($key, stringify!($field), $help)),*];

        impl FileConfig {
            /// Whether it holds the token itself (`token = …`): a warning says to move it
            /// into a private token file.
            fn holds_token(&self) -> bool {
                self.token.is_some()
            }

            /// Whether it sets `instance-dir` (refused in an instance's own file).
            fn sets_instance_dir(&self) -> bool {
                self.instance_dir.is_some()
            }

            /// Copies into `args` every value flags and environment left at their default.
            fn apply(
                self,
                args: &mut ServeArgs,
                matches: &ArgMatches,
                text: &str,
                path: &Path,
                sources: &mut FileSources,
            ) {
                $(
                    if let Some(value) = self.$field {
                        if left_default(matches, stringify!($field)) {
                            let line = line_of(text, value.span().start);
                            args.$field = ($into)(value.into_inner());
                            sources.insert($key, Source::File { path: path.to_path_buf(), line });
                        }
                    }
                )*
            }
        }

        /// Every key's effective value in `args` as TOML (`None`: unset).
        fn values(args: &ServeArgs) -> Vec<(&'static str, Option<toml::Value>)> {
            vec![$(($key, toml::Value::try_from(&args.$field).ok())),*]
        }
    };
}

/// The `[mcp]` table: `[mcp.servers.NAME]` entries (unknown keys refused).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct McpSection {
    /// The servers by name.
    #[serde(default)]
    servers: BTreeMap<String, Spanned<crate::mcp::config::TomlEntry>>,
}

/// The value itself.
fn same<T>(v: T) -> T {
    v
}

settings! {
    "port" => port: u16 = same, "TCP port (0 picks a free one).";
    "host" => hosts: Vec<IpAddr> = same, "Addresses to listen on. Default: both loopbacks.";
    "instance-dir" => instance_dir: PathBuf = Some, "Instance directory (only in a --config file).";
    "idle-timeout" => idle_timeout: f64 = same, "Seconds a conversation with no clients stays in memory.";
    "max-frame-bytes" => max_frame_bytes: usize = same, "Largest WebSocket frame / message in bytes.";
    "echo-path" => echo_path: String = Some, "Serve a WebSocket echo endpoint on this path (conformance testing).";
    "wal-segment-bytes" => wal_segment_bytes: u64 = same, "Size of a node log segment in bytes (at least 4096); past it the covered files are flushed and the segment removed.";
    "no-wal" => no_wal: bool = same, "Fsync each conversation file per batch instead of writing the node log (slower; for comparisons).";
    "allow-origin" => allowed_origins: Vec<String> = same, "Also accept WebSocket upgrades from these Origins.";
    "token" => token: String = Some, "Require this token on every upgrade (prefer token-file).";
    "token-file" => token_file: PathBuf = Some, "Read the token from this file (its first line).";
    "repair" => repair: bool = same, "Move an unparsable registry aside and start empty.";
    "reindex" => reindex: bool = same, "Rebuild the content search index from the display logs.";
    "ping-interval" => ping_interval: f64 = same, "Seconds between heartbeat pings.";
    "stall-timeout" => stall_timeout: f64 = same, "Seconds a connection may take no data before it is aborted.";
    "max-queued-frames" => max_queued_frames: usize = same, "Largest outbound queue per socket, in frames.";
    "compact-at" => compact_at: u64 = same, "Compact a conversation's history before a model call once its context meter reaches this share of the model's window, in percent (0: only on @compact).";
    "max-sockets" => max_sockets: usize = Some, "Most WebSocket connections served at once (default: the descriptor limit less a reserve for files).";
    "provider" => provider: String = same, "The agent's model backend: builtin, openai, anthropic or a [providers.NAME] profile.";
    "max-iterations" => max_iterations: usize = same, "Model calls per turn before the agent loop gives up.";
    "no-clients-grace" => no_clients_grace: f64 = same, "Seconds queued work survives after the last client leaves.";
    "mcp-config" => mcp_configs: Vec<PathBuf> = same, "MCP servers in the desktop clients' JSON ({\"mcpServers\": {...}}) files.";
    "interaction-timeout" => interaction_timeout: f64 = same, "Seconds a question to the users waits for an answer.";
    "max-queued-bytes" => max_queued_bytes: usize = same, "Largest outbound queue per socket, in bytes.";
    "max-queued-bytes-total" => max_queued_bytes_total: usize = same, "Largest outbound queue of all sockets together, in bytes.";
    "client-agent-timeout" => client_agent_timeout: f64 = same, "Seconds a client-hosted agent's action may take to answer.";
    "cluster" => cluster: String = Some, "Join a cluster through this NATS server (nats://HOST:PORT).";
    "node-name" => node_name: String = Some, "This node's name in the cluster (default: the host name).";
    "lease-time" => lease_time: f64 = same, "Seconds a cluster ownership lease lasts without renewal.";
    "reconcile-time" => reconcile_time: f64 = same, "Seconds between checks of a node's copy of the conversation list against the cluster's registry.";
    "cluster-replicas" => cluster_replicas: usize = same, "JetStream replicas (1 to 5) of the cluster's buckets and log stream.";
    "cluster-name" => cluster_name: String = same, "The cluster's name: prefixes its NATS subjects, buckets and stream (default rt).";
    "cluster-user" => cluster_user: String = Some, "The NATS user of the cluster (its password from cluster-password-file or $ROUNDTABLE_CLUSTER_PASSWORD).";
    "cluster-password-file" => cluster_password_file: PathBuf = Some, "A file whose first line is the password of cluster-user.";
    "cluster-token-file" => cluster_token_file: PathBuf = Some, "A file whose first line is the cluster's NATS token (or $ROUNDTABLE_CLUSTER_TOKEN).";
    "cluster-secret-file" => cluster_secret_file: PathBuf = Some, "A file whose first line is the cluster secret every node shares (required with cluster; mode 0600).";
    "cluster-creds" => cluster_creds: PathBuf = Some, "A NATS .creds file (user JWT and nkey seed) for the cluster.";
    "cluster-tls-ca" => cluster_tls_ca: PathBuf = Some, "PEM certificates that sign the NATS server's TLS certificate.";
    "cluster-tls-cert" => cluster_tls_cert: PathBuf = Some, "This node's TLS client certificate (PEM) for NATS.";
    "cluster-tls-key" => cluster_tls_key: PathBuf = Some, "The private key (PEM) of cluster-tls-cert.";
    "working-directory-root" => working_directory_roots: Vec<PathBuf> = same, "Directories requests may work in (default: any directory).";
    "working-directory-default" => working_directory_default: PathBuf = Some, "Where a request works when it names no allowed directory (default: the server's current directory).";
}

/// Whether flags and environment left `id` at its default (so the file may set it).
fn left_default(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        None | Some(ValueSource::DefaultValue)
    )
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The instance directory flags and environment name (before the file is read).
fn instance_dir(args: &ServeArgs) -> Result<PathBuf, ConfigError> {
    args.instance_dir
        .clone()
        .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
        .ok_or(ConfigError::NoHomeDirectory)
}

/// Reads the config file (if any) into `args` where flags and environment did not set a
/// value; answers which keys it set.
pub fn apply_file(args: &mut ServeArgs, matches: &ArgMatches) -> Result<FileSources, ConfigError> {
    let (path, explicit) = match &args.config {
        Some(path) => (path.clone(), true),
        None => (instance_dir(args)?.join(INSTANCE_CONFIG), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileSources::new())
        }
        Err(e) => {
            return Err(ConfigError::ConfigFile {
                path,
                message: e.to_string(),
            })
        }
    };
    let mut file: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::ConfigFile {
        path: path.clone(),
        message: e.to_string().trim_end().to_string(),
    })?;
    if !explicit && file.sets_instance_dir() {
        return Err(ConfigError::ConfigFile {
            path,
            message: "`instance-dir` cannot be set by the instance directory's own \
                      roundtable.toml; use --config FILE for a file that names the directory"
                .into(),
        });
    }
    if file.holds_token() {
        log::warn!(
            "config file {} holds the token (`token = …`): anyone who can read it, or a backup \
             of it, can use the server; put the token in a private file (chmod 600) and name it \
             with `token-file` instead",
            path.display()
        );
        crate::config::warn_if_readable_by_others(&path, "the config file");
    }
    let mut sources = FileSources::new();
    let mcp = file.mcp.take().unwrap_or_default();
    for (name, entry) in mcp.servers {
        let origin = format!("{}:{}", path.display(), line_of(&text, entry.span().start));
        let server = crate::mcp::config::from_toml(&name, entry.into_inner(), origin).map_err(
            |message| ConfigError::ConfigFile {
                path: path.clone(),
                message,
            },
        )?;
        args.mcp_file_servers.push(server);
    }
    for (name, entry) in std::mem::take(&mut file.providers) {
        let profile = crate::providers::profiles::from_toml(&name, entry, &path, &|offset| {
            line_of(&text, offset)
        })
        .map_err(|message| ConfigError::ConfigFile {
            path: path.clone(),
            message,
        })?;
        args.provider_profiles.push(profile);
    }
    file.apply(args, matches, &text, &path, &mut sources);
    Ok(sources)
}

/// A value error about a key the file set, restated with the file, line and key.
pub fn locate(error: ConfigError, sources: &FileSources) -> ConfigError {
    let Some(flag) = error.flag() else {
        return error;
    };
    match sources.get(flag) {
        Some(Source::File { path, line }) => {
            let message = error.to_string();
            let message = message
                .strip_prefix(&format!("--{flag} "))
                .unwrap_or(&message)
                .to_string();
            ConfigError::ConfigValue {
                path: path.clone(),
                line: *line,
                key: flag,
                message,
            }
        }
        _ => error,
    }
}

/// `ServeArgs` as clap sees them alone (for defaults and for `config show`).
#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    args: ServeArgs,
}

/// Where `key`'s effective value came from.
fn source_of(key: &str, id: &str, matches: &ArgMatches, file: &FileSources) -> Source {
    if let Some(source) = file.get(key) {
        return source.clone();
    }
    match matches.value_source(id) {
        Some(ValueSource::CommandLine) => Source::Flag,
        Some(ValueSource::EnvVariable) => {
            let command = ServeOnly::command();
            let var = command
                .get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_env())
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default();
            Source::Env(var)
        }
        _ => Source::Default,
    }
}

/// `roundtable config show`: every key, its effective value and its source, then each MCP
/// server with where it was configured. Secrets are never printed: the token is
/// `(set, hidden)`, URLs lose their credentials, MCP env and header values are `***`.
pub fn show(args: &ServeArgs, matches: &ArgMatches, file: &FileSources) -> String {
    let mut out = String::new();
    for ((key, value), (_, id, _)) in values(args).into_iter().zip(KEYS) {
        let shown = match value {
            // Never print a secret.
            Some(_) if key == "token" => "\"(set, hidden)\"".to_string(),
            Some(v) if key == "cluster" => {
                roundtable_actors::redact::redact_server_list(&v.to_string())
            }
            Some(v) => roundtable_actors::redact::redact_url_credentials(&v.to_string()),
            None => "(unset)".to_string(),
        };
        let line = format!("{key} = {shown}");
        let source = source_of(key, id, matches, file);
        let _ = writeln!(out, "{line:<48} # {source}");
    }
    match crate::mcp::config::merge(args.mcp_file_servers.clone(), &args.mcp_configs) {
        Ok(servers) => {
            for server in servers {
                let line = format!("mcp.servers.{} = {}", server.name, server.shown());
                let _ = writeln!(out, "{line:<48} # {}", server.origin);
            }
        }
        Err(e) => {
            let _ = writeln!(out, "# MCP servers: {e}");
        }
    }
    let env = |name: &str| std::env::var(name).ok();
    for (line, source) in providers::lines(&args.provider_profiles, &env) {
        let _ = writeln!(out, "{line:<48} # {source}");
    }
    out
}

/// The `ServeArgs` of the built-in defaults alone (no flags, environment ignored).
fn defaults() -> ServeArgs {
    let command = ServeOnly::command().mut_args(|a| a.env(None::<&'static str>));
    let matches = command
        .try_get_matches_from(["serve"])
        .expect("the defaults parse");
    ServeArgs::from_arg_matches(&matches).expect("the defaults are complete")
}

/// The text of `roundtable config init`: every key with its help line, at its default
/// (keys without one commented out).
pub fn init_text() -> String {
    let mut out = String::from(
        "# Roundtable's configuration: one key per `roundtable serve` flag. Flags and\n\
         # environment variables win over this file; `roundtable config show` tells where each\n\
         # value comes from.\n",
    );
    for ((key, value), (_, _, help)) in values(&defaults()).into_iter().zip(KEYS) {
        let _ = writeln!(out, "\n# {help}");
        match value {
            Some(toml::Value::Array(a)) if a.is_empty() => {
                let _ = writeln!(out, "# {key} = []");
            }
            Some(v) => {
                let _ = writeln!(out, "{key} = {v}");
            }
            None => {
                let _ = writeln!(out, "# {key} =");
            }
        }
    }
    out.push_str(
        "\n# Model providers by name (`provider = \"NAME\"` above picks the default): kind\n\
         # (\"openai\" or \"anthropic\"), model, base_url, api_key_env or api_key_file (its first\n\
         # line), context_window, timeout (seconds); for anthropic also max_tokens and\n\
         # thinking_budget. `roundtable models --provider NAME` lists a provider's models.\n\
         # [providers.local]\n\
         # kind = \"openai\"\n\
         # base_url = \"http://127.0.0.1:8080/v1\"\n\
         # model = \"qwen2.5-7b-instruct\"\n",
    );
    out
}

/// `roundtable config init`: writes [`init_text`] to `path` (private, atomically, its new
/// directories 0700), refusing to replace an existing file unless `force`.
pub fn init(path: &Path, force: bool) -> Result<(), String> {
    if path.exists() && !force {
        return Err(format!(
            "{} exists; pass --force to replace it",
            path.display()
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Usually the instance directory itself: private (0700) like every one Roundtable
        // creates.
        roundtable_actors::storage::durable::create_dir_durable(dir)
            .map_err(|e| format!("cannot create the directory {e}"))?;
    }
    roundtable_actors::storage::durable::write_atomic(path, init_text().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The default path `config init` writes: `$ROUNDTABLE_HOME` or `~/.roundtable`, then
/// `roundtable.toml`.
pub fn default_path() -> Option<PathBuf> {
    std::env::var_os("ROUNDTABLE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
        .map(|dir| dir.join(INSTANCE_CONFIG))
}

/// The `serve` subcommand's matches inside the whole command line's (`serve` or
/// `config show`).
pub fn serve_matches<'a>(matches: &'a ArgMatches, path: &[&str]) -> Option<&'a ArgMatches> {
    path.iter()
        .try_fold(matches, |m, name| m.subcommand_matches(name))
}

/// Checks that a `Command` built from `ServeArgs` has one key per flag (used by a test).
pub fn keys_cover(command: &Command) -> Vec<String> {
    let keys: Vec<&str> = KEYS.iter().map(|(_, id, _)| *id).collect();
    command
        .get_arguments()
        .map(|a| a.get_id().as_str())
        .filter(|id| !keys.contains(id) && *id != "config" && *id != "help")
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `serve` flag has a key.
    #[test]
    fn every_flag_has_a_key() {
        assert_eq!(keys_cover(&ServeOnly::command()), Vec::<String>::new());
    }

    /// `config init`'s text parses back to the defaults.
    #[test]
    fn init_text_is_valid_and_complete() {
        let text = init_text();
        let parsed: FileConfig = toml::from_str(&text).expect("init text parses");
        assert_eq!(parsed.idle_timeout.map(Spanned::into_inner), Some(300.0));
        assert_eq!(
            parsed.provider.map(Spanned::into_inner).as_deref(),
            Some("builtin")
        );
        for (key, _, _) in KEYS {
            assert!(text.contains(&format!("{key} =")), "{key} missing:\n{text}");
        }
    }

    #[test]
    fn lines_are_counted_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 4), 3);
    }
}
