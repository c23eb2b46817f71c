//! The `roundtable` binary: `roundtable serve` runs the server; `connect`, `conversations`,
//! `run` and `server` are the client. Thin on purpose: flags become a [`ServerConfig`] or a
//! call into [`roundtable::cli`].

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use roundtable::cli;
use roundtable::config::ProviderChoice;
use roundtable::ServerConfig;

/// A local conversation server speaking the TypeAgent agent-server protocol.
#[derive(Parser)]
#[command(name = "roundtable", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Chat interactively in a conversation (default: the one named CLI).
    Connect(ConnectArgs),
    /// Manage conversations without joining them.
    Conversations {
        #[command(subcommand)]
        command: cli::ConversationsCommand,
        #[command(flatten)]
        address: Address,
        /// Print JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Run one request non-interactively and print the agent's output.
    Run {
        #[command(subcommand)]
        command: RunCmd,
        #[command(flatten)]
        address: Address,
    },
    /// Probe or stop a running server.
    Server {
        #[command(subcommand)]
        command: ServerCmd,
        #[command(flatten)]
        address: Address,
    },
}

/// Where the server is.
#[derive(clap::Args)]
struct Address {
    /// Server port on localhost.
    #[arg(long, env = "ROUNDTABLE_PORT", default_value_t = 8999, global = true)]
    port: u16,
    /// Full WebSocket URL (wins over --port), e.g. ws://127.0.0.1:8999/.
    #[arg(long, global = true)]
    url: Option<String>,
}

impl Address {
    fn url(&self) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| roundtable::client::url_for_port(self.port))
    }
}

#[derive(clap::Args)]
struct ConnectArgs {
    /// Join this conversation id.
    #[arg(long, short = 'c')]
    conversation: Option<String>,
    /// Rejoin the conversation of the last session (~/.roundtable/cli-state.json).
    #[arg(long)]
    resume: bool,
    /// Use a temporary conversation, deleted on exit.
    #[arg(long, conflicts_with_all = ["conversation", "resume"])]
    memory: bool,
    #[command(flatten)]
    address: Address,
}

#[derive(Subcommand)]
enum RunCmd {
    /// Run a request and print the output.
    Request(RunArgs),
    /// Explain how a request would be handled, without running it.
    Explain(RunArgs),
    /// Show the actions a request translates to, without running them.
    Translate(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The request.
    #[arg(required = true, num_args = 1..)]
    text: Vec<String>,
    /// Conversation id (default: the one named CLI).
    #[arg(long, short = 'c')]
    conversation: Option<String>,
}

#[derive(Subcommand)]
enum ServerCmd {
    /// Is a server running?
    Status,
    /// Stop the running server gracefully.
    Stop,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TCP port (0 picks a free one).
    #[arg(long, env = "ROUNDTABLE_PORT", default_value_t = 8999)]
    port: u16,
    /// Address to listen on (repeatable). Default: both loopbacks, 127.0.0.1 and ::1.
    #[arg(long = "host")]
    hosts: Vec<IpAddr>,
    /// Instance directory. Default: ~/.roundtable.
    #[arg(long, env = "ROUNDTABLE_HOME")]
    instance_dir: Option<PathBuf>,
    /// Seconds a conversation with no clients stays in memory.
    #[arg(long, default_value_t = 300.0)]
    idle_timeout: f64,
    /// Largest WebSocket frame / message in bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    max_frame_bytes: usize,
    /// Serve a WebSocket echo endpoint on this path (conformance testing).
    #[arg(long)]
    echo_path: Option<String>,
    /// Also accept WebSocket upgrades from this Origin (repeatable), e.g. chrome-extension://id.
    #[arg(long = "allow-origin")]
    allowed_origins: Vec<String>,
    /// Require this token (Authorization: Bearer, or ?token=) on every upgrade. Visible to
    /// other users in `ps`: prefer --token-file or ROUNDTABLE_TOKEN.
    #[arg(long, env = "ROUNDTABLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the token from this file (its first line; the file should be private).
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Move an unparsable registry aside to conversations.json.corrupt-<ts> and start empty.
    #[arg(long)]
    repair: bool,
    /// Seconds between heartbeat pings.
    #[arg(long, default_value_t = 30.0, hide = true)]
    ping_interval: f64,
    /// Seconds a connection may take no data before it is aborted (TCP_USER_TIMEOUT).
    #[arg(long, default_value_t = 30.0)]
    stall_timeout: f64,
    /// Largest outbound queue per socket, in frames.
    #[arg(long, default_value_t = 4096)]
    max_queued_frames: usize,
    /// The agent's model backend (openai reads ROUNDTABLE_OPENAI_BASE_URL, _MODEL, _API_KEY).
    #[arg(
        long,
        env = "ROUNDTABLE_PROVIDER",
        value_enum,
        default_value = "builtin"
    )]
    provider: ProviderChoice,
    /// Model calls per turn before the agent loop gives up.
    #[arg(long, default_value_t = 10)]
    max_iterations: usize,
    /// Seconds queued work survives after the last client leaves (then: no_clients).
    #[arg(long, default_value_t = 30.0)]
    no_clients_grace: f64,
    /// An external tool server, NAME=URL (repeatable); its tools are offered as NAME__tool.
    #[arg(long = "tool-server")]
    tool_servers: Vec<String>,
    /// Seconds a question to the users waits for an answer.
    #[arg(long, default_value_t = 600.0, hide = true)]
    interaction_timeout: f64,
    /// Largest outbound queue per socket, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    max_queued_bytes: usize,
    /// Largest outbound queue of all sockets together, in bytes; past it a push fails as if
    /// that socket's queue were full (it is closed as a slow consumer).
    #[arg(long, default_value_t = roundtable_actors::outbox::DEFAULT_SERVER_QUEUED_BYTES)]
    max_queued_bytes_total: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server logs at info by default; the client commands only warn.
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .init();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Connect(args) => client(async move {
            let url = args.address.url();
            let options = cli::ConnectOptions {
                conversation: args.conversation,
                resume: args.resume,
                memory: args.memory,
            };
            cli::connect(&url, options).await
        }),
        Command::Conversations {
            command,
            address,
            json,
        } => client(async move { cli::conversations(&address.url(), command, json).await }),
        Command::Run { command, address } => client(async move {
            let (kind, args) = match command {
                RunCmd::Request(a) => (cli::RunKind::Request, a),
                RunCmd::Explain(a) => (cli::RunKind::Explain, a),
                RunCmd::Translate(a) => (cli::RunKind::Translate, a),
            };
            cli::run(
                &address.url(),
                kind,
                &args.text.join(" "),
                args.conversation.as_deref(),
            )
            .await
        }),
        Command::Server { command, address } => client(async move {
            match command {
                ServerCmd::Status => cli::server_status(&address.url()).await,
                ServerCmd::Stop => cli::server_stop(&address.url()).await,
            }
        }),
    }
}

/// Runs a client command on a small tokio runtime; errors are one line on stderr.
fn client(work: impl std::future::Future<Output = cli::CliResult>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("roundtable: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roundtable: {}", roundtable::cli::terminal_safe(&e.message));
            ExitCode::from(e.code)
        }
    }
}

fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("--{flag} must be a non-negative number of seconds"))
}

/// Like [`seconds`], refusing zero.
fn positive_seconds(flag: &str, s: f64) -> Result<Duration, String> {
    match seconds(flag, s)? {
        d if d.is_zero() => Err(format!("--{flag} must be positive")),
        d => Ok(d),
    }
}

/// The server's panic policy: a panic anywhere (an actor, a writer thread, a handler) is a bug
/// that may have left shared state half-changed, so the process logs it and aborts at once
/// instead of limping on (a registry whose mailbox is gone would fail every request while the
/// port still answers). Every acknowledged change is already on disk, so nothing acknowledged
/// is lost; the service manager (systemd's `Restart=on-failure`) starts it again, and the
/// start-up recovery closes the requests that were running.
fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        log::error!("panic: {info}; aborting so that the service manager restarts the server");
        std::process::abort();
    }));
}

/// The token from `--token` / `ROUNDTABLE_TOKEN` or `--token-file`: an empty one is refused
/// (it would silently turn authentication off), and a token on the command line gets a
/// warning (other users see it in `ps`).
fn token(flag: Option<String>, file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    let token = match (flag, file) {
        (_, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
            Some(text.lines().next().unwrap_or("").trim().to_string())
        }
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
        Some(t) if t.trim().is_empty() => Err(
            "the token is empty; give a non-empty token, or none to serve only your own user"
                .into(),
        ),
        other => Ok(other),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let instance_dir = match args
        .instance_dir
        .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
    {
        Some(d) => d,
        None => {
            eprintln!("roundtable: no home directory; pass --instance-dir");
            return ExitCode::from(2);
        }
    };
    let mut config = ServerConfig::new(instance_dir);
    config.port = args.port;
    if !args.hosts.is_empty() {
        config.hosts = args.hosts;
    }
    let timing = (|| {
        Ok::<_, String>((
            seconds("idle-timeout", args.idle_timeout)?,
            positive_seconds("ping-interval", args.ping_interval)?,
            positive_seconds("stall-timeout", args.stall_timeout)?,
            seconds("no-clients-grace", args.no_clients_grace)?,
            seconds("interaction-timeout", args.interaction_timeout)?,
        ))
    })();
    match timing {
        Ok((idle, ping, stall, grace, interaction)) => {
            config.idle_timeout = idle;
            config.ping_interval = ping;
            config.stall_timeout = stall;
            config.no_clients_grace = grace;
            config.interaction_timeout = interaction;
        }
        Err(e) => {
            eprintln!("roundtable: {e}");
            return ExitCode::from(2);
        }
    }
    for spec in &args.tool_servers {
        match roundtable::toolserver::parse_spec(spec) {
            Ok(server) => config.tool_servers.push(server),
            Err(e) => {
                eprintln!("roundtable: {e}");
                return ExitCode::from(2);
            }
        }
    }
    config.provider = args.provider;
    config.max_iterations = args.max_iterations.max(1);
    config.max_frame_bytes = args.max_frame_bytes.max(1024);
    config.echo_path = args.echo_path.map(|p| {
        if p.starts_with('/') {
            p
        } else {
            format!("/{p}")
        }
    });
    config.allowed_origins = args.allowed_origins;
    config.token = match token(args.token, args.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("roundtable: {e}");
            return ExitCode::from(2);
        }
    };
    if config.token.is_none() && !config.loopback_only() {
        log::warn!(
            "listening beyond loopback without a token: anyone who can reach the port can read, \
             change and delete every conversation (use --token-file)"
        );
    }
    config.repair = args.repair;
    config.outbox.max_frames = args.max_queued_frames.max(1);
    config.outbox.max_bytes = args.max_queued_bytes.max(1024);
    config.outbox.server = Some(roundtable_actors::outbox::ServerBudget::new(
        args.max_queued_bytes_total.max(1024),
    ));
    abort_on_panic();
    let result = actix_web::rt::System::new().block_on(roundtable::serve(config));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            eprintln!("roundtable: {e}");
            ExitCode::FAILURE
        }
    }
}
