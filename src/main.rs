//! The `roundtable` binary: `roundtable serve` runs the server; `connect`, `conversations`,
//! `run`, `server` and `backup` are the client; `restore` fills an instance directory;
//! `config`, `service`, `completions` and `man` are the operator's tools. Thin on purpose:
//! flags (with the config file) become a [`ServerConfig`] or a call into [`roundtable::cli`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use roundtable::cli;
use roundtable::config::ServeArgs;
use roundtable::server::restart::{self, Stopped};
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
    Serve(Box<ServeArgs>),
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
        /// Also restore the instance's roundtable.toml (never its token or token-file) and
        /// the agents' storage (the system prompt); by default only the conversations.
        #[arg(long)]
        with_config: bool,
        /// The most bytes the restore writes (e.g. 512M, 64G); a larger archive is refused
        /// before anything is written.
        #[arg(long, default_value = "64G", value_parser = cli::parse_bytes)]
        max_bytes: u64,
    },
    /// Show the effective server configuration, or write a config file.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
    /// List the models a provider serves (its /v1/models): the configured default, or the
    /// one --provider names (builtin, openai, anthropic or a [providers.NAME] profile); takes
    /// the same flags as `serve`.
    Models(Box<ServeArgs>),
    /// Run the server as a systemd service: install, uninstall or show its unit.
    Service {
        #[command(subcommand)]
        command: ServiceCmd,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `roundtable man > roundtable.1`.
    Man,
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Every setting's effective value and where it comes from (flag, environment, file,
    /// default); takes the same flags as `serve`.
    Show(Box<ServeArgs>),
    /// Write a commented config file with every key at its default.
    Init {
        /// Where (default: ~/.roundtable/roundtable.toml, or $ROUNDTABLE_HOME's).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ServiceCmd {
    /// Write the systemd unit that runs `roundtable serve`.
    Install {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Print the unit instead of writing it.
        #[arg(long)]
        dry_run: bool,
        /// Config file the service reads (`serve --config`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Instance directory (default ~/.roundtable); the only path the service may write.
        #[arg(long)]
        instance_dir: Option<PathBuf>,
        /// Seconds systemd waits for a watchdog ping before restarting the service.
        #[arg(long, default_value_t = 30)]
        watchdog_secs: u32,
    },
    /// Stop, disable and remove the unit.
    Uninstall {
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Where the unit is and what systemd says of it.
    Status {
        #[command(flatten)]
        scope: ScopeArgs,
    },
}

/// User or system unit.
#[derive(clap::Args)]
struct ScopeArgs {
    /// A user unit (~/.config/systemd/user/; the default).
    #[arg(long, conflicts_with = "system")]
    user: bool,
    /// A system unit (/etc/systemd/system/, run as you; needs root).
    #[arg(long)]
    system: bool,
}

impl ScopeArgs {
    fn scope(&self) -> cli::service::Scope {
        if self.system {
            cli::service::Scope::System
        } else {
            cli::service::Scope::User
        }
    }
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
    /// The server's token, from this file's first line (keep it private: chmod 600); sent as
    /// `Authorization: Bearer`. Default: $ROUNDTABLE_TOKEN.
    #[arg(long, global = true)]
    token_file: Option<PathBuf>,
}

impl Address {
    /// The URL and the token (a token file that cannot be read is an error here).
    fn endpoint(&self) -> cli::CliResult<roundtable::client::Endpoint> {
        let url = self
            .url
            .clone()
            .unwrap_or_else(|| roundtable::client::url_for_port(self.port));
        cli::endpoint(url, self.token_file.as_deref())
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
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // The server logs at info by default (rmcp's info events, whole MCP handshakes, only
    // with RUST_LOG); the client commands only warn.
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info,rmcp=warn"
    } else {
        "warn"
    };
    roundtable::logging::init(default_level);
    match cli.command {
        Command::Serve(args) => serve(*args, sub_matches(&matches, &["serve"])),
        Command::Connect(args) => cli::block_on(async move {
            let server = args.address.endpoint()?;
            let options = cli::ConnectOptions {
                conversation: args.conversation,
                resume: args.resume,
                memory: args.memory,
            };
            cli::connect(&server, options).await
        }),
        Command::Conversations {
            command,
            address,
            json,
        } => cli::block_on(
            async move { cli::conversations(&address.endpoint()?, command, json).await },
        ),
        Command::Run { command, address } => cli::block_on(async move {
            let (kind, args) = match command {
                RunCmd::Request(a) => (cli::RunKind::Request, a),
                RunCmd::Explain(a) => (cli::RunKind::Explain, a),
                RunCmd::Translate(a) => (cli::RunKind::Translate, a),
            };
            cli::run(
                &address.endpoint()?,
                kind,
                &args.text.join(" "),
                args.conversation.as_deref(),
            )
            .await
        }),
        Command::Backup { file, address } => cli::finish(
            address
                .endpoint()
                .and_then(|server| cli::backup(&server, &file)),
        ),
        Command::Restore {
            file,
            instance_dir,
            force,
            with_config,
            max_bytes,
        } => cli::finish(cli::restore(
            &file,
            &instance_dir,
            &roundtable::backup::restore::RestoreOptions {
                force,
                with_config,
                max_bytes,
            },
        )),
        Command::Server { command, address } => cli::block_on(async move {
            let server = address.endpoint()?;
            match command {
                ServerCmd::Status => cli::server_status(&server).await,
                ServerCmd::Stop => cli::server_stop(&server).await,
            }
        }),
        Command::Config { command } => config(command, &matches),
        Command::Models(args) => models(*args, &matches),
        Command::Service { command } => service(command),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "roundtable",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Man => {
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e.to_string(), 1),
            }
        }
    }
}

/// The matches of the subcommand at `path` (it was parsed, so it is there).
fn sub_matches<'a>(matches: &'a ArgMatches, path: &[&str]) -> &'a ArgMatches {
    roundtable::config_file::serve_matches(matches, path).expect("the parsed subcommand")
}

/// Prints `roundtable: <message>` and exits with `code`.
fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("roundtable: {message}");
    ExitCode::from(code)
}

/// `roundtable config show | init`.
fn config(command: ConfigCmd, matches: &ArgMatches) -> ExitCode {
    match command {
        ConfigCmd::Show(args) => {
            let mut args = *args;
            let serve = sub_matches(matches, &["config", "show"]);
            match roundtable::config_file::apply_file(&mut args, serve) {
                Ok(file) => {
                    print!("{}", roundtable::config_file::show(&args, serve, &file));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e.to_string(), 2),
            }
        }
        ConfigCmd::Init { config, force } => {
            let Some(path) = config.or_else(roundtable::config_file::default_path) else {
                return fail("no home directory; pass --config", 2);
            };
            match roundtable::config_file::init(&path, force) {
                Ok(()) => {
                    println!("wrote {}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e, 1),
            }
        }
    }
}

/// `roundtable models`: the provider the flags, the environment and the config file name,
/// built as `serve` builds it, asked for its models; one per line.
fn models(mut args: ServeArgs, matches: &ArgMatches) -> ExitCode {
    let serve = sub_matches(matches, &["models"]);
    let file = match roundtable::config_file::apply_file(&mut args, serve) {
        Ok(file) => file,
        Err(e) => return fail(&e.to_string(), 2),
    };
    let settings = match args.provider_settings() {
        Ok(settings) => settings,
        Err(e) => return fail(&roundtable::config_file::locate(e, &file).to_string(), 2),
    };
    cli::block_on(async move {
        let set = roundtable::providers::ProviderSet::build(&settings)
            .map_err(|message| cli::CliError { message, code: 2 })?;
        let provider = set.default_provider();
        let models = provider.list_models().await.map_err(|e| cli::CliError {
            message: e.to_string(),
            code: 1,
        })?;
        if models.is_empty() {
            println!("{} serves no models to choose from", provider.name());
        }
        for model in models {
            println!("{model}");
        }
        Ok(())
    })
}

/// `roundtable service install | uninstall | status`.
fn service(command: ServiceCmd) -> ExitCode {
    let result = match command {
        ServiceCmd::Install {
            scope,
            dry_run,
            config,
            instance_dir,
            watchdog_secs,
        } => cli::service::install(&cli::service::InstallOptions {
            scope: scope.scope(),
            dry_run,
            config,
            instance_dir,
            watchdog_secs,
        }),
        ServiceCmd::Uninstall { scope } => cli::service::uninstall(scope.scope()),
        ServiceCmd::Status { scope } => cli::service::status(scope.scope()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.message, e.code),
    }
}

/// Drops the server's actix system, and with it the tasks still alive when it stopped (a
/// cluster node's NATS subscriptions among them), inside a Tokio context: actix drops its
/// tasks after leaving its runtime, and an `async_nats::Subscriber` spawns its unsubscribe
/// when dropped, which panics outside one. The spawned unsubscribes never run (the
/// connection is gone with the process); without this, every clean stop of a cluster node
/// ended in the abort-on-panic policy's abort.
fn drop_inside_a_runtime(system: actix_web::rt::SystemRunner) {
    match tokio::runtime::Builder::new_current_thread().build() {
        Ok(context) => {
            let _inside = context.enter();
            drop(system);
        }
        Err(e) => {
            log::warn!("cannot build a runtime to drop the server's tasks in: {e}");
            std::mem::forget(system);
        }
    }
}

/// `roundtable serve`: flags, environment and config file → [`ServerConfig`] (a bad value
/// exits with 2, naming the file, line and key when the file set it), then the server under
/// the abort-on-panic policy until it stops.
fn serve(mut args: ServeArgs, matches: &ArgMatches) -> ExitCode {
    let file = match roundtable::config_file::apply_file(&mut args, matches) {
        Ok(file) => file,
        Err(e) => return fail(&e.to_string(), 2),
    };
    let config = match ServerConfig::try_from(args) {
        Ok(config) => config,
        Err(e) => return fail(&roundtable::config_file::locate(e, &file).to_string(), 2),
    };
    roundtable::server::abort_on_panic();
    let system = actix_web::rt::System::new();
    let result = system.block_on(roundtable::serve(config));
    drop_inside_a_runtime(system);
    match result {
        Ok(Stopped::Shutdown) => ExitCode::SUCCESS,
        Ok(Stopped::Restart(_)) if restart::under_systemd() => {
            log::info!(
                "restart: exiting with {} for systemd to restart the unit",
                restart::RESTART_EXIT_CODE
            );
            ExitCode::from(restart::RESTART_EXIT_CODE)
        }
        Ok(Stopped::Restart(listeners)) => {
            let e = restart::reexec(listeners);
            log::error!("restart: cannot start the server again: {e}");
            eprintln!("roundtable: restart: cannot start the server again: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            log::error!("{e}");
            eprintln!("roundtable: {e}");
            ExitCode::FAILURE
        }
    }
}
