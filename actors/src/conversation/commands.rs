//! `@` commands handled by the conversation itself rather than the agent loop: `@conversation`
//! (answered with `takeAction manage-conversation` to the originating client, reference section
//! 6.6), `@help`, `@compact`, `@explain` and `@translate`; plus `getCommandCompletion` for all
//! of them.
//!
//! The parsing and texts here are pure (the CLI uses them too); the `impl Conversation` block
//! at the end decides what a started request does: a command, or an agent turn.

use actix::prelude::*;
use serde_json::{json, Value};

use super::queue::Request;
use super::routing::Audience;
use super::Conversation;
use crate::client::OutboundCall;

/// A parsed `@` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `@conversation …`: the `manage-conversation` payload for the client.
    Conversation(Value),
    /// `@help`.
    Help,
    /// `@compact`.
    Compact,
    /// `@explain <request>`: how the request would be handled, without running it.
    Explain(String),
    /// `@translate <request>`: the actions (tool calls) it translates to, without running them.
    Translate(String),
    /// `@something` we do not know.
    Unknown(String),
}

/// The `@conversation` subcommands, for help and completion.
pub const CONVERSATION_SUBCOMMANDS: [&str; 11] = [
    "help", "new", "list", "info", "switch", "prev", "next", "rename", "delete", "find", "search",
];

/// Top-level commands, for help and completion.
pub const COMMANDS: [&str; 5] = [
    "@conversation",
    "@help",
    "@compact",
    "@explain",
    "@translate",
];

/// Parses `text` when it starts with `@` (after leading white space); `None` otherwise.
pub fn parse(text: &str) -> Option<Command> {
    let text = text.trim();
    let rest = text.strip_prefix('@')?;
    let (head, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let args = args.trim();
    Some(match head {
        "conversation" | "conv" => Command::Conversation(conversation_payload(args)),
        "help" => Command::Help,
        "compact" => Command::Compact,
        "explain" => Command::Explain(args.to_string()),
        "translate" => Command::Translate(args.to_string()),
        other => Command::Unknown(other.to_string()),
    })
}

fn conversation_payload(args: &str) -> Value {
    let (sub, rest) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
    let rest = rest.trim();
    match sub {
        "" | "help" => json!({"subcommand": "help"}),
        "new" if rest.is_empty() => json!({"subcommand": "new"}),
        "new" => json!({"subcommand": "new", "name": rest}),
        "list" => json!({"subcommand": "list"}),
        "info" => json!({"subcommand": "info"}),
        "switch" if rest.is_empty() => json!({"subcommand": "next"}),
        "switch" => json!({"subcommand": "switch", "name": rest}),
        "prev" => json!({"subcommand": "prev"}),
        "next" => json!({"subcommand": "next"}),
        "rename" => match split_two(rest) {
            Some((name, new_name)) => {
                json!({"subcommand": "rename", "name": name, "newName": new_name})
            }
            None => json!({"subcommand": "rename", "newName": unquote(rest)}),
        },
        "delete" => json!({"subcommand": "delete", "name": unquote(rest)}),
        "find" => json!({"subcommand": "find", "query": rest}),
        "search" => json!({"subcommand": "search", "query": rest}),
        _ => json!({"subcommand": "help"}),
    }
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_string();
        }
    }
    s.to_string()
}

/// `rename <name> <new>`: two words, or quoted phrases. One argument means "rename current".
fn split_two(s: &str) -> Option<(String, String)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (first, rest) = if let Some(q) = s.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = s[1..].find(q)? + 1;
        (s[1..end].to_string(), s[end + 1..].trim())
    } else {
        let (a, b) = s.split_once(char::is_whitespace)?;
        (a.to_string(), b.trim())
    };
    if rest.is_empty() {
        return None;
    }
    Some((first, unquote(rest)))
}

/// The `@help` text (markdown).
pub fn help_text() -> String {
    let mut out = String::from("**Commands**\n\n");
    out.push_str("- `@help`: this list\n");
    out.push_str("- `@compact`: summarize the chat history to keep the model's context short\n");
    out.push_str("- `@explain <request>`: how the request would be handled, without running it\n");
    out.push_str(
        "- `@translate <request>`: the actions a request translates to, without running them\n",
    );
    out.push_str("- `@conversation <sub>`: manage conversations; subcommands:\n");
    for (sub, what) in [
        ("new [name]", "create a conversation and switch to it"),
        ("list", "list conversations"),
        ("info", "show the current conversation"),
        ("switch <name>", "switch by name (fuzzy)"),
        ("prev / next", "cycle through conversations"),
        ("rename [name] <new>", "rename one (default: the current)"),
        ("delete <name>", "delete one (not the current)"),
        ("find <query>", "find conversations by name"),
        ("search <query>", "search conversation content"),
    ] {
        out.push_str(&format!("  - `{sub}`: {what}\n"));
    }
    out.push_str("\nAnything else goes to the assistant, which can calculate, tell the time and show sample weather.");
    out
}

/// `getCommandCompletion(prefix)`: `{startIndex, completions, closedSet, directionSensitive,
/// afterWildcard}` for `@` commands and `@conversation` subcommands.
pub fn completion(prefix: &str) -> Value {
    let trimmed_start = prefix.len() - prefix.trim_start().len();
    let p = &prefix[trimmed_start..];
    let empty = json!({"startIndex": prefix.len(), "completions": [], "closedSet": false,
                       "directionSensitive": false, "afterWildcard": "none"});
    if !p.starts_with('@') {
        return empty;
    }
    match p.split_once(char::is_whitespace) {
        None => json!({
            "startIndex": trimmed_start,
            "completions": [{"name": "Commands", "completions": COMMANDS, "needQuotes": false}],
            "closedSet": true, "directionSensitive": false, "afterWildcard": "none"
        }),
        Some((cmd, rest))
            if (cmd == "@conversation" || cmd == "@conv") && !rest.trim_start().contains(' ') =>
        {
            let start = prefix.len() - rest.trim_start().len();
            json!({
                "startIndex": start,
                "completions": [{"name": "Subcommands", "completions": CONVERSATION_SUBCOMMANDS, "needQuotes": false}],
                "closedSet": true, "directionSensitive": false, "afterWildcard": "none"
            })
        }
        Some(_) => empty,
    }
}

impl Conversation {
    /// What the request that just started (turn `turn`) does: an `@` command is answered here,
    /// `@compact` / `@explain` / `@translate` start their provider call, anything else starts
    /// an agent turn.
    pub(super) fn run_request(&mut self, turn: u64, request: &Request, ctx: &mut Context<Self>) {
        match parse(&request.text) {
            Some(Command::Conversation(payload)) => {
                let call = OutboundCall::new(
                    "takeAction",
                    &json!([request.id_obj(), "manage-conversation", payload]),
                );
                self.emit(call, &Audience::Only(request.origin));
                self.finish(turn, None, ctx);
            }
            Some(Command::Help) => {
                let help = json!({"type": "markdown", "content": help_text()});
                self.finish_showing(turn, request, help, None, ctx);
            }
            Some(Command::Unknown(name)) => {
                let text = format!("Unknown command @{name}. Type @help for the list.");
                let error = json!({"type": "text", "content": text, "kind": "error"});
                self.finish_showing(turn, request, error, Some(text), ctx);
            }
            Some(Command::Compact) => self.start_compact(turn, ctx),
            Some(Command::Explain(text)) => self.start_plan(turn, text, true, ctx),
            Some(Command::Translate(text)) => self.start_plan(turn, text, false, ctx),
            None => self.start_agent_turn(turn, ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_follow_the_reference_table() {
        let p = |t: &str| match parse(t) {
            Some(Command::Conversation(v)) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(p("@conversation"), json!({"subcommand": "help"}));
        assert_eq!(p("@conversation new"), json!({"subcommand": "new"}));
        assert_eq!(
            p("@conversation new My Chat"),
            json!({"subcommand": "new", "name": "My Chat"})
        );
        assert_eq!(
            p("@conversation switch research"),
            json!({"subcommand": "switch", "name": "research"})
        );
        assert_eq!(p("@conversation switch"), json!({"subcommand": "next"}));
        assert_eq!(
            p("@conversation rename Better"),
            json!({"subcommand": "rename", "newName": "Better"})
        );
        assert_eq!(
            p("@conversation rename old new"),
            json!({"subcommand": "rename", "name": "old", "newName": "new"})
        );
        assert_eq!(
            p("@conversation rename \"old one\" new one"),
            json!({"subcommand": "rename", "name": "old one", "newName": "new one"})
        );
        assert_eq!(
            p("@conversation delete x"),
            json!({"subcommand": "delete", "name": "x"})
        );
        assert_eq!(
            p("@conversation find q"),
            json!({"subcommand": "find", "query": "q"})
        );
        assert_eq!(p("@conversation list"), json!({"subcommand": "list"}));
        assert_eq!(parse("@help"), Some(Command::Help));
        assert_eq!(parse("@nope x"), Some(Command::Unknown("nope".into())));
        assert_eq!(parse("hello"), None);
    }

    #[test]
    fn completes_commands_and_subcommands() {
        let c = completion("@");
        assert_eq!(c["startIndex"], 0);
        assert_eq!(c["completions"][0]["completions"][0], "@conversation");
        let c = completion("@conversation sw");
        assert_eq!(c["startIndex"], 14);
        assert!(c["completions"][0]["completions"]
            .as_array()
            .unwrap()
            .contains(&json!("switch")));
        assert_eq!(completion("hello")["completions"], json!([]));
    }
}
