//! `roundtable conversations create | list | rename | delete`: one call each, printed as text
//! or, with `--json`, as JSON.

use std::io::{IsTerminal, Write};

use serde_json::json;

use super::{table, terminal_safe, CliError, CliResult};
use crate::client::conversation::sort_newest_first;
use crate::client::Connection;

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
pub async fn conversations(url: &str, command: ConversationsCommand, as_json: bool) -> CliResult {
    let conn = Connection::connect(url).await?;
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
