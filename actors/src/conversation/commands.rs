//! `@` commands handled by the conversation itself rather than the agent loop: `@conversation`
//! (answered with `takeAction manage-conversation` to the originating client, reference section
//! 6.6; its `handoff` subcommand is Roundtable's and runs here, `handoff.rs`), `@help`, `@compact`, `@explain`, `@translate`, the `@dispatcher` family TypeAgent's
//! `agent-cli run request | translate | explain` sends, and `@system` (its own module,
//! `system.rs`). Their names, help lines and parameters are declared once in `grammar.rs`, which
//! parses them with the argument parsers below; their completion is `completion.rs`;
//! `@<client agent> …` runs in
//! `client_agents.rs`.
//!
//! The parsing and texts here are pure (the CLI uses them too); the `impl Conversation` block
//! at the end decides what a started request does: a command, or an agent turn.

use actix::prelude::*;
use serde_json::json;

use super::audience::Audience;
use super::request_queue::Request;
use super::Conversation;
use crate::client::OutboundCall;

pub use super::grammar::{help_text, parse, Command};

impl Conversation {
    /// What the request that just started (turn `turn`) does: an `@` command is answered here,
    /// `@compact` / `@explain` / `@translate` start their provider call, anything else starts
    /// an agent turn. `@dispatcher request <text>` unwraps to `<text>`, which is then handled
    /// the same way (in a loop: wrapping nests without growing the stack).
    pub(super) fn run_request(&mut self, turn: u64, request: &Request, ctx: &mut Context<Self>) {
        let mut text = request.text.clone();
        loop {
            if let Some(agent) = self.client_command_host(&text) {
                return self.start_client_command(turn, agent, text, ctx);
            }
            let command = match parse(&text) {
                Some(Command::Request(inner)) if !inner.is_empty() => {
                    text = inner;
                    continue;
                }
                Some(command) => command,
                None => return self.start_agent_turn(turn, text, ctx),
            };
            return self.run_command(turn, request, command, ctx);
        }
    }

    /// Runs a parsed `@` command for the running request.
    fn run_command(
        &mut self,
        turn: u64,
        request: &Request,
        command: Command,
        ctx: &mut Context<Self>,
    ) {
        match command {
            Command::Conversation(payload) => {
                let call = OutboundCall::new(
                    "takeAction",
                    &json!([request.id_obj(), "manage-conversation", payload]),
                );
                self.emit(call, &Audience::Only(request.origin));
                self.finish(turn, None, ctx);
            }
            Command::Handoff(source) => self.start_handoff(turn, source, None, ctx),
            Command::Help => {
                let help = json!({"type": "markdown", "content": help_text()});
                self.finish_showing(turn, request, help, None, ctx);
            }
            Command::Request(_) => {
                let text = "Give a request: @dispatcher request <request>".to_string();
                let warning = json!({"type": "text", "content": text, "kind": "warning"});
                self.finish_showing(turn, request, warning, Some(text), ctx);
            }
            Command::System(command) => self.run_system(turn, request, command, ctx),
            Command::Unsupported(name) => self.finish_error(
                turn,
                request,
                format!("@{name}: not supported by Roundtable"),
                ctx,
            ),
            Command::Invalid(text) => self.finish_error(turn, request, text, ctx),
            Command::Unknown(name) => {
                let text = format!("Unknown command @{name}. Type @help for the list.");
                self.finish_error(turn, request, text, ctx);
            }
            Command::Compact => {
                self.start_compact(turn, super::turn_messages::AfterCompact::Finish, ctx)
            }
            Command::Explain(text) => self.start_plan(turn, text, true, ctx),
            Command::Translate(text) => self.start_plan(turn, text, false, ctx),
        }
    }

    /// Shows `text` as an error and finishes the request with it as `lastError`.
    pub(super) fn finish_error(
        &mut self,
        turn: u64,
        request: &Request,
        text: String,
        ctx: &mut Context<Self>,
    ) {
        let error = json!({"type": "text", "content": text, "kind": "error"});
        self.finish_showing(turn, request, error, Some(text), ctx);
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
        assert_eq!(
            parse("@conversation handoff \"old project\""),
            Some(Command::Handoff("old project".into()))
        );
        assert_eq!(
            parse("@conversation handoff"),
            Some(Command::Handoff(String::new()))
        );
        assert_eq!(parse("@help"), Some(Command::Help));
        assert_eq!(parse("@nope x"), Some(Command::Unknown("nope".into())));
        assert_eq!(parse("hello"), None);
    }

    /// The `manage_conversation` tool (conversation management in words) sends exactly the
    /// payload of the `@conversation` command that means the same.
    #[test]
    fn words_and_commands_make_the_same_payload() {
        use crate::agent::tools::manage_conversation::{request, ConversationRequest};
        for (input, typed) in [
            (json!({"subcommand": "new"}), "@conversation new"),
            (
                json!({"subcommand": "new", "name": "My Chat"}),
                "@conversation new My Chat",
            ),
            (json!({"subcommand": "list"}), "@conversation list"),
            (json!({"subcommand": "info"}), "@conversation info"),
            (
                json!({"subcommand": "switch", "name": "work"}),
                "@conversation switch work",
            ),
            (json!({"subcommand": "prev"}), "@conversation prev"),
            (json!({"subcommand": "next"}), "@conversation next"),
            (
                json!({"subcommand": "rename", "newName": "Better"}),
                "@conversation rename Better",
            ),
            (
                json!({"subcommand": "rename", "name": "old one", "newName": "new one"}),
                "@conversation rename \"old one\" new one",
            ),
            (
                json!({"subcommand": "delete", "name": "x"}),
                "@conversation delete x",
            ),
            (
                json!({"subcommand": "find", "query": "q"}),
                "@conversation find q",
            ),
            (
                json!({"subcommand": "search", "query": "q"}),
                "@conversation search q",
            ),
        ] {
            let Some(Command::Conversation(payload)) = parse(typed) else {
                panic!("{typed}");
            };
            assert_eq!(
                request(&input),
                Ok(ConversationRequest::Client(payload)),
                "{typed}"
            );
        }
        assert_eq!(
            request(&json!({"subcommand": "handoff", "name": "research"})),
            Ok(ConversationRequest::Handoff("research".into()))
        );
        assert_eq!(
            parse("@conversation handoff research"),
            Some(Command::Handoff("research".into()))
        );
    }

    #[test]
    fn dispatcher_family_unwraps_to_the_plain_commands() {
        assert_eq!(
            parse("@dispatcher request what is 2+3"),
            Some(Command::Request("what is 2+3".into()))
        );
        assert_eq!(
            parse("@dispatcher request @conversation list"),
            Some(Command::Request("@conversation list".into()))
        );
        assert_eq!(
            parse("@dispatcher translate  play bach "),
            Some(Command::Translate("play bach".into()))
        );
        assert_eq!(
            parse("@dispatcher explain x"),
            Some(Command::Explain("x".into()))
        );
        assert_eq!(parse("@dispatcher"), Some(Command::Help));
        assert_eq!(
            parse("@dispatcher request"),
            Some(Command::Request(String::new()))
        );
        assert_eq!(
            parse("@dispatcher replay x"),
            Some(Command::Unsupported("dispatcher replay".into()))
        );
        let help = help_text();
        for command in [
            "@conversation",
            "@help",
            "@compact",
            "@explain",
            "@translate",
            "@dispatcher",
            "@system",
        ] {
            assert!(
                help.contains(&format!("`{command}")),
                "{command} not in help"
            );
        }
        for sub in [
            "help",
            "history [N]",
            "session [info]",
            "config [show]",
            "config agents",
            "trace [filter]",
            "clear",
            "exit",
            "meter [show | reset]",
            "model [NAME | default]",
        ] {
            assert!(
                help.contains(&format!("`{sub}`")),
                "@system {sub} not in help"
            );
        }
    }
}
