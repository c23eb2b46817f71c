//! The `roundtable` binary: `roundtable serve` runs the server. Thin on purpose: flags become a
//! [`ServerConfig`] and [`roundtable::serve`] does the rest.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
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
    /// Require this token (Authorization: Bearer, or ?token=) on every upgrade.
    #[arg(long, env = "ROUNDTABLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Move an unparsable registry aside to conversations.json.corrupt-<ts> and start empty.
    #[arg(long)]
    repair: bool,
    /// Seconds between heartbeat pings.
    #[arg(long, default_value_t = 30.0, hide = true)]
    ping_interval: f64,
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
    /// Seconds a question to the users waits for an answer.
    #[arg(long, default_value_t = 600.0, hide = true)]
    interaction_timeout: f64,
    /// Largest outbound queue per socket, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    max_queued_bytes: usize,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
    }
}

fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("--{flag} must be a non-negative number of seconds"))
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
    let durations = seconds("idle-timeout", args.idle_timeout)
        .and_then(|idle| Ok((idle, seconds("ping-interval", args.ping_interval)?)));
    match durations {
        Ok((idle, ping)) if !ping.is_zero() => {
            config.idle_timeout = idle;
            config.ping_interval = ping;
        }
        Ok(_) => {
            eprintln!("roundtable: --ping-interval must be positive");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("roundtable: {e}");
            return ExitCode::from(2);
        }
    }
    match (
        seconds("no-clients-grace", args.no_clients_grace),
        seconds("interaction-timeout", args.interaction_timeout),
    ) {
        (Ok(grace), Ok(interaction)) => {
            config.no_clients_grace = grace;
            config.interaction_timeout = interaction;
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("roundtable: {e}");
            return ExitCode::from(2);
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
    config.token = args.token.filter(|t| !t.is_empty());
    config.repair = args.repair;
    config.outbox.max_frames = args.max_queued_frames.max(1);
    config.outbox.max_bytes = args.max_queued_bytes.max(1024);
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
