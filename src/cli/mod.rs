//! The client side of the `roundtable` binary: `connect` (the interactive prompt),
//! `conversations`, `run`, `server`, `backup` and `restore`: everything but the last two goes
//! through [`crate::client`] over the real protocol, to the [`Endpoint`] [`endpoint`] builds
//! (URL, and the token from `--token-file` or `ROUNDTABLE_TOKEN`); `backup` reads `GET /backup` and
//! `restore` only the archive and the target directory (nothing here reads a running server's
//! files); and [`service`], which writes the systemd unit that runs the server.
//!
//! Files: `connect.rs` (the interactive prompt: `connect/line.rs` decides what a typed line
//! means, `connect/running.rs` runs it and follows its request, `connect/asking.rs` reads
//! forms and choices; `complete.rs` is its Tab completion), `conversations.rs`, `run.rs`, `server.rs`,
//! `backup.rs` (one per subcommand; `backup.rs` has both archive commands), `render.rs`
//! (terminal-safe text, messages, replayed history, the table: shared by every subcommand, so
//! not under `connect`), `state.rs` (`cli-state.json`, the last joined conversation). The binary
//! parses the flags and calls [`block_on`] with one of them (or [`finish`] with the outcome
//! of `backup` / `restore`, which run their own runtime or none).

use crate::client::{ClientError, Endpoint};

mod backup;
mod complete;
mod connect;
mod conversations;
mod render;
mod run;
mod server;
pub mod service;
mod state;

pub use backup::{backup, parse_bytes, restore};
pub use connect::{connect, ConnectOptions};
pub use conversations::{conversations, ConversationsCommand};
pub use render::{
    content_text, render_action, render_history_entry, render_message, table, terminal_safe,
    HistoryReader,
};
pub use run::{run, RunKind};
pub use server::{server_status, server_stop};
pub use state::{home_dir, load_state, save_state};

/// Name of the conversation the CLI uses by default (as TypeAgent's CLI does).
pub const CLI_CONVERSATION: &str = "CLI";

/// A CLI failure: one line for the user, and the exit code.
#[derive(Debug)]
pub struct CliError {
    /// What to print.
    pub message: String,
    /// Process exit code.
    pub code: u8,
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError {
            message: e.to_string(),
            code: 1,
        }
    }
}

impl CliError {
    /// A failure with exit code 1.
    pub(crate) fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 1,
        }
    }
}

/// Result of a CLI command.
pub type CliResult<T = ()> = Result<T, CliError>;

/// The environment variable a client command reads its token from (the same one `serve`
/// reads), when no `--token-file` is given.
pub const TOKEN_ENV: &str = "ROUNDTABLE_TOKEN";

/// The server a client command talks to: `url`, with the token from `token_file` (its first
/// line; a warning when other users can read it) or else `$ROUNDTABLE_TOKEN`. The token goes
/// out as `Authorization: Bearer`, never in the URL (other users see command lines in `ps`).
pub fn endpoint(url: String, token_file: Option<&std::path::Path>) -> CliResult<Endpoint> {
    let token = match token_file {
        Some(path) => {
            let token =
                crate::config::read_token_file(path).map_err(|e| CliError::new(e.to_string()))?;
            if token.is_empty() {
                return Err(CliError::new(format!(
                    "--token-file {}: the file's first line is empty",
                    path.display()
                )));
            }
            Some(token)
        }
        None => std::env::var(TOKEN_ENV)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
    };
    Ok(Endpoint { url, token })
}

/// Runs a client command on a small tokio runtime; an error is one line on stderr, and its
/// code the exit code.
pub fn block_on(work: impl std::future::Future<Output = CliResult>) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("roundtable: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    finish(runtime.block_on(work))
}

/// A client command's outcome as the process's: an error is one line on stderr, and its code
/// the exit code.
pub fn finish(result: CliResult) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roundtable: {}", terminal_safe(&e.message));
            std::process::ExitCode::from(e.code)
        }
    }
}
