//! What a line typed at the prompt means ([`Line`]), decided before anything is sent.
//!
//! Precedence, first match wins:
//! 1. The prompt's own commands, answered here: `/history` (bare) and `@conversation history`
//!    page back through the display log; `/conversation …` and `@conversation …` run the
//!    `manage-conversation` subcommand here (as TypeAgent's CLI does), except `handoff`, which is
//!    the server's; `/answer …` answers what waits at the prompt.
//! 2. TypeAgent's slash commands (its `ts/packages/cli/src/slashCommands.ts` table) become the
//!    `@system` command it sends for them: `/help` (after the list of slash commands) is
//!    `@system help`, `/history N`, `/session …`, `/config …` and `/trace …` are `@system
//!    <name> …`, `/agents` is `@system config agents`; `/clear` and `/exit` are `@system clear`
//!    and `@system exit`, which the server answers by clearing this screen or ending the
//!    session. Any other `/word` is an unknown command, said here (TypeAgent does the same).
//! 3. Anything else goes to the conversation as typed.
//!
//! Who talks to it: `handle_line` in the parent module, once per line.

use roundtable_actors::conversation::commands::{self, Command};

use crate::client::clientio::ManageConversation;

/// One typed line, by what it asks.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Line {
    /// `/history` or `@conversation history`: the screenful before the oldest entry shown.
    History,
    /// `@conversation …` / `/conversation …`: run here.
    Manage(ManageConversation),
    /// `/answer …`: answer the oldest question or choice waiting at the prompt.
    Answer(String),
    /// `/help`: the slash commands, then the server's `@system help`.
    Help,
    /// `/word` with no meaning here or in TypeAgent's CLI.
    UnknownSlash(String),
    /// Sent to the conversation: the text as typed, or the `@system` command a slash command
    /// stands for.
    Submit(String),
}

/// The list `/help` prints before the server's `@system help`.
pub(super) const SLASH_HELP: &str = "Slash commands (the first three are answered by this prompt):
  /history               the screenful before the oldest entry shown
  /conversation <sub>    same as @conversation <sub>, run here (handoff goes to the server)
  /answer <n>            answer the question or choice waiting at the prompt
  /help                  this list, then @system help
  /history N             @system history N: the last N messages of the chat history
  /session [info]        @system session
  /config [show|agents]  @system config
  /agents                @system config agents
  /trace [filter]        @system trace: show or set the server's log filter
  /clear                 @system clear: clear the screen
  /exit                  @system exit: leave (as Ctrl-D)
Any other line goes to the conversation as typed.";

/// Reads a typed (trimmed, non-empty) line.
pub(super) fn parse(line: &str) -> Line {
    if asks_history(line) {
        return Line::History;
    }
    if let Some(rest) = line.strip_prefix('/') {
        return slash(rest);
    }
    match commands::parse(line) {
        Some(Command::Conversation(payload)) => {
            Line::Manage(ManageConversation::from_payload(&payload))
        }
        _ => Line::Submit(line.to_string()),
    }
}

/// `/<name> <args>`, as TypeAgent's CLI reads it (the name is not case-sensitive).
fn slash(rest: &str) -> Line {
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let args = args.trim();
    let system = |sub: &str| {
        Line::Submit(if args.is_empty() {
            format!("@system {sub}")
        } else {
            format!("@system {sub} {args}")
        })
    };
    match name.to_lowercase().as_str() {
        "conversation" => match commands::parse(&format!("@conversation {args}")) {
            Some(Command::Conversation(payload)) => {
                Line::Manage(ManageConversation::from_payload(&payload))
            }
            // `handoff` is the server's work.
            _ => Line::Submit(format!("@conversation {args}")),
        },
        "answer" => Line::Answer(args.to_string()),
        "help" => Line::Help,
        sub @ ("history" | "session" | "config" | "trace" | "clear" | "exit") => system(sub),
        "agents" => Line::Submit("@system config agents".into()),
        _ => Line::UnknownSlash(format!("/{name}")),
    }
}

/// Whether a typed line asks for earlier history: `/history`, `@conversation history` (or
/// `@conv history`).
pub(super) fn asks_history(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    matches!(
        words.as_slice(),
        ["/history"] | ["@conversation" | "@conv", "history"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prompt's own commands come first; TypeAgent's slash commands become its `@system`
    /// commands; other slashes are unknown; the rest is sent as typed.
    #[test]
    fn lines_by_precedence() {
        let submit = |s: &str| Line::Submit(s.into());
        for (typed, meant) in [
            ("/history", Line::History),
            ("@conv history", Line::History),
            ("/history 5", submit("@system history 5")),
            ("/HELP", Line::Help),
            ("/session", submit("@system session")),
            ("/config agents", submit("@system config agents")),
            ("/agents", submit("@system config agents")),
            (
                "/trace roundtable=debug",
                submit("@system trace roundtable=debug"),
            ),
            ("/clear", submit("@system clear")),
            ("/exit", submit("@system exit")),
            ("/answer 2", Line::Answer("2".into())),
            ("/verbose", Line::UnknownSlash("/verbose".into())),
            (
                "/conversation list",
                Line::Manage(ManageConversation::List(None)),
            ),
            (
                "@conversation switch Work",
                Line::Manage(ManageConversation::Switch(Some("Work".into()))),
            ),
            (
                "/conversation handoff CLI",
                submit("@conversation handoff CLI"),
            ),
            ("@system help", submit("@system help")),
            ("hello /help", submit("hello /help")),
        ] {
            assert_eq!(parse(typed), meant, "{typed}");
        }
        for typed in [
            "/history 5",
            "@conversation list",
            "history",
            "@system history",
        ] {
            assert!(!asks_history(typed), "{typed}");
        }
    }
}
