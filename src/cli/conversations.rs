//! `roundtable conversations create | list | search | rename | delete`: one call each, printed as text
//! or, with `--json`, as JSON.

use std::io::{IsTerminal, Write};

use serde_json::json;

use super::render::content_matches;
use super::{table, terminal_safe, CliError, CliResult};
use crate::client::conversation::sort_newest_first;
use crate::client::{Connection, Endpoint};

/// `roundtable conversations …` (parsed by clap in `main.rs`).
#[derive(Debug, clap::Subcommand)]
pub enum ConversationsCommand {
    /// Create a conversation.
    Create {
        /// Its name.
        name: String,
    },
    /// List conversations, newest first.
    List {
        /// Only names containing this (case-insensitive).
        #[arg(long)]
        name: Option<String>,
    },
    /// Search every conversation's requests and agent output; best first, with the passages
    /// that matched.
    Search {
        /// Words (prefix matches count, `word*` asks for them), or a "quoted phrase".
        text: String,
        /// At most this many conversations (at most 100).
        #[arg(long, short = 'n', default_value_t = 10)]
        max: u64,
    },
    /// Rename a conversation.
    Rename {
        /// Conversation id.
        id: String,
        /// New name.
        new_name: String,
    },
    /// Delete a conversation (asks first unless --yes or stdin is not a terminal).
    Delete {
        /// Conversation id.
        id: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Runs `roundtable conversations …`.
pub async fn conversations(
    server: &Endpoint,
    command: ConversationsCommand,
    as_json: bool,
) -> CliResult {
    let conn = Connection::connect_to(server).await?;
    match command {
        ConversationsCommand::Create { name } => {
            let info = conn.create_conversation(&name).await?;
            if as_json {
                println!("{}", serde_json::to_string(&info).expect("serializes"));
            } else {
                println!(
                    "Created \"{}\" ({})",
                    terminal_safe(&info.name),
                    info.conversation_id
                );
            }
        }
        ConversationsCommand::List { name } => {
            let mut list = conn.list_conversations(name.as_deref()).await?;
            sort_newest_first(&mut list);
            if as_json {
                println!("{}", serde_json::to_string(&list).expect("serializes"));
            } else if list.is_empty() {
                println!("No conversations found.");
            } else {
                println!("{}", terminal_safe(&table(&list, None)));
            }
        }
        ConversationsCommand::Search { text, max } => {
            let matches = conn.search_conversation_content(&text, Some(max)).await?;
            if as_json {
                println!("{}", serde_json::to_string(&matches).expect("serializes"));
            } else if matches.is_empty() {
                println!(
                    "No conversation content matches \"{}\".",
                    terminal_safe(&text)
                );
            } else {
                println!("{}", terminal_safe(&content_matches(&matches)));
            }
        }
        ConversationsCommand::Rename { id, new_name } => {
            conn.rename_conversation(&id, &new_name).await?;
            if as_json {
                println!("{}", json!({"conversationId": id, "name": new_name}));
            } else {
                println!(
                    "Renamed {} to \"{}\"",
                    terminal_safe(&id),
                    terminal_safe(&new_name)
                );
            }
        }
        ConversationsCommand::Delete { id, yes } => {
            if !yes
                && std::io::stdin().is_terminal()
                && !ask_yes_no(&format!("Delete conversation {id}?"))
            {
                return Err(CliError::new("not deleted"));
            }
            conn.delete_conversation(&id).await?;
            if as_json {
                println!("{}", json!({"conversationId": id, "deleted": true}));
            } else {
                println!("Deleted {}", terminal_safe(&id));
            }
        }
    }
    conn.close();
    Ok(())
}

/// Asks on stderr, reads the answer from stdin: true for `y` / `yes`.
pub(super) fn ask_yes_no(question: &str) -> bool {
    eprint!("{} [y/N] ", terminal_safe(question));
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok()
        && matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
}
