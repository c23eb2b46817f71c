//! The `roundtable` binary: `roundtable serve` runs the server; `connect`, `conversations`,
//! `run`, `server` and `backup` are the client; `restore` fills an instance directory. Thin on
//! purpose: flags become a [`ServerConfig`] or a call into [`roundtable::cli`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use roundtable::cli;
use roundtable::config::ServeArgs;
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
    /// Save a consistent snapshot of a running server's conversations into one archive
    /// (gzip-compressed when FILE ends in .gz or .tgz).
    Backup {
        /// The archive to write.
        file: PathBuf,
        #[command(flatten)]
        address: Address,
    },
    /// Restore a backup archive into a new instance directory (serve it with --instance-dir).
    Restore {
        /// The archive to read.
        file: PathBuf,
        /// The directory to create (it must be new or empty unless --force).
        #[arg(long)]
        instance_dir: PathBuf,
        /// Delete what the directory holds first.
        #[arg(long)]
        force: bool,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server logs at info by default; the client commands only warn.
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    roundtable::logging::init(default_level);
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Connect(args) => cli::block_on(async move {
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
        } => cli::block_on(async move { cli::conversations(&address.url(), command, json).await }),
        Command::Run { command, address } => cli::block_on(async move {
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
        Command::Backup { file, address } => cli::finish(cli::backup(&address.url(), &file)),
        Command::Restore {
            file,
            instance_dir,
            force,
        } => cli::finish(cli::restore(&file, &instance_dir, force)),
        Command::Server { command, address } => cli::block_on(async move {
            match command {
                ServerCmd::Status => cli::server_status(&address.url()).await,
                ServerCmd::Stop => cli::server_stop(&address.url()).await,
            }
        }),
    }
}

/// `roundtable serve`: flags → [`ServerConfig`] (a bad flag exits with 2), then the server
/// under the abort-on-panic policy until it stops.
fn serve(args: ServeArgs) -> ExitCode {
    let config = match ServerConfig::try_from(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("roundtable: {e}");
            return ExitCode::from(2);
        }
    };
    roundtable::server::abort_on_panic();
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
