//! The `manage_conversation` tool: conversation management in words ("switch to my work
//! conversation", "list my conversations", "hand off my research conversation here"), as
//! TypeAgent's `system.conversation` sub-agent does it.
//!
//! Its input is the `manage-conversation` payload `@conversation` builds (`subcommand` and,
//! per subcommand, `name`, `newName` or `query`), plus one subcommand of Roundtable's own,
//! `handoff`. What a call becomes:
//!
//! - `new`, `list`, `info`, `switch`, `prev`, `next`, `rename`, `delete`, `find`, `search`: the
//!   same `takeAction(requestId, "manage-conversation", payload)` `@conversation` sends, to the
//!   client that made the request ([`TurnSink::client_action`]). The client carries it out
//!   with its own conversation RPCs and shows the result itself. `takeAction` is a call the
//!   client does not answer (TypeAgent's `ClientIO.takeAction` returns nothing, and neither
//!   its CLI nor its shell reports back), so the model is told what was sent and what the
//!   client will do, never how it went. As with `@conversation`, the call goes out just
//!   before the request completes (the conversation holds it until the turn has ended), so
//!   a client that switches away has already seen the whole answer.
//! - `handoff`: done by the server, not the client ([`TurnSink::handoff`]): once the turn has
//!   ended, the named conversation is summarized into this one (see the conversation's
//!   `handoff.rs`); the request completes with its outcome.
//!
//! There is no `help`: as in TypeAgent, help is `@conversation` typed, never asked in words.

use serde_json::{json, Value};

use super::super::turn::TurnSink;
use super::{input_object, optional_str, ToolSpec};

/// Name of the conversation-management tool.
pub const MANAGE_CONVERSATION: &str = "manage_conversation";

/// The subcommands the tool takes, in the order the spec lists them.
pub const SUBCOMMANDS: [&str; 11] = [
    "new", "list", "info", "switch", "prev", "next", "rename", "delete", "find", "search",
    "handoff",
];

/// Longest `name`, `newName` or `query` the tool takes, in characters: four times the longest
/// conversation name (256), room for a topic ("the one where we planned the Lisbon trip");
/// longer input is refused, so a runaway model cannot push a page of text to every client.
pub const MAX_FIELD_CHARS: usize = 1024;

/// What a call asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum ConversationRequest {
    /// A `manage-conversation` payload for the requesting client.
    Client(Value),
    /// A handoff of the named conversation (name or id) into this one, by the server.
    Handoff(String),
}

/// What the model is offered.
pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: MANAGE_CONVERSATION.to_owned(),
        description: "Manage the user's conversations (the separate chat threads on this \
            server, not messages within this one). Use it whenever the user asks in words to \
            create, list, show, switch to, cycle through, rename, delete or find conversations, \
            or to bring another conversation's context into this one. Examples: \"create a new \
            conversation called research\" → new {name}; \"list my conversations\" → list; \
            \"which conversation am I in\" → info; \"switch to my work conversation\" → switch \
            {name: \"work\"}; \"next conversation\" → next; \"previous conversation\" → \
            prev; \"rename this conversation to notes\" → rename {newName}; \"delete the old project conversation\" → delete {name: \
            \"old project\"}; \"find the conversation about taxes\" → find {query}; \"search my \
            conversations for the docker command\" → search {query}; \"hand off my research \
            conversation here\" → handoff {name: \"research\"}. Everything except handoff is \
            carried out by the user's client app when your reply ends; the client shows the \
            result itself and does not report back, so say what you asked for, not that it \
            succeeded. handoff is done by the server: it summarizes the named conversation and \
            adds the summary to this conversation when your reply ends."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "subcommand": {
                    "type": "string",
                    "enum": SUBCOMMANDS,
                    "description": "new: create a conversation and switch to it; list: list them; \
                        info: show the current one; switch: go to an existing one; prev / next: \
                        cycle; rename: rename one; delete: delete one; find: find by name; \
                        search: search what was said in them; handoff: summarize another \
                        conversation into this one."
                },
                "name": {
                    "type": "string",
                    "description": "new: the new conversation's name (optional); switch: its \
                        name, or what was discussed in it; rename: the conversation to rename \
                        (omit for the current one); delete: the conversation to delete; \
                        handoff: the conversation to bring into this one (name or id)."
                },
                "newName": {"type": "string", "description": "rename: the new name."},
                "query": {
                    "type": "string",
                    "description": "find: words of a conversation's name or topic; search: \
                        words said in a conversation."
                }
            },
            "required": ["subcommand"]
        }),
    }
}

/// Reads a call's input: the payload for the client (exactly `@conversation`'s: only the
/// fields its subcommand uses, trimmed), or the handoff's source. An error names what is
/// wrong, so the model can correct itself.
pub fn request(input: &Value) -> Result<ConversationRequest, String> {
    input_object(input)?;
    let field = |name: &str| -> Result<Option<String>, String> {
        let Some(text) = optional_str(input, name)?.map(str::trim) else {
            return Ok(None);
        };
        if text.chars().count() > MAX_FIELD_CHARS {
            return Err(format!(
                "field \"{name}\" is longer than {MAX_FIELD_CHARS} characters"
            ));
        }
        Ok((!text.is_empty()).then(|| text.to_string()))
    };
    let needed = |name: &str, what: &str| -> Result<String, String> {
        field(name)?.ok_or_else(|| format!("{what} needs \"{name}\" (a non-empty string)"))
    };
    let subcommand = field("subcommand")?
        .ok_or_else(|| "missing required field \"subcommand\" (a string)".to_string())?;
    let payload = match subcommand.as_str() {
        "new" => match field("name")? {
            Some(name) => json!({"subcommand": "new", "name": name}),
            None => json!({"subcommand": "new"}),
        },
        sub @ ("list" | "info" | "prev" | "next") => json!({ "subcommand": sub }),
        sub @ ("switch" | "delete") => json!({"subcommand": sub, "name": needed("name", sub)?}),
        "rename" => {
            let new_name = needed("newName", "rename")?;
            match field("name")? {
                Some(name) => json!({"subcommand": "rename", "name": name, "newName": new_name}),
                None => json!({"subcommand": "rename", "newName": new_name}),
            }
        }
        sub @ ("find" | "search") => json!({"subcommand": sub, "query": needed("query", sub)?}),
        "handoff" => return Ok(ConversationRequest::Handoff(needed("name", "handoff")?)),
        other => {
            return Err(format!(
                "unknown subcommand \"{other}\": use one of {}",
                SUBCOMMANDS.join(", ")
            ))
        }
    };
    Ok(ConversationRequest::Client(payload))
}

/// What the client will do with `payload`, in words ("switch to the conversation named or
/// matching \"work\"").
pub fn describe(payload: &Value) -> String {
    let text = |k: &str| payload[k].as_str().unwrap_or_default();
    match payload["subcommand"].as_str().unwrap_or_default() {
        "new" if payload.get("name").is_some() => format!(
            "create a conversation named \"{}\" (or open the one that has that name) and switch \
             to it",
            text("name")
        ),
        "new" => "create a new conversation and switch to it".into(),
        "list" => "list your conversations".into(),
        "info" => "show which conversation this is".into(),
        "switch" => format!(
            "switch to the conversation named or matching \"{}\"",
            text("name")
        ),
        "prev" => "switch to the previous conversation".into(),
        "next" => "switch to the next conversation".into(),
        "rename" if payload.get("name").is_some() => {
            format!("rename \"{}\" to \"{}\"", text("name"), text("newName"))
        }
        "rename" => format!("rename this conversation to \"{}\"", text("newName")),
        "delete" => format!("delete the conversation \"{}\"", text("name")),
        "find" => format!(
            "find the conversations whose name matches \"{}\"",
            text("query")
        ),
        "search" => format!(
            "search what was said in your conversations for \"{}\"",
            text("query")
        ),
        other => format!("run \"{other}\""),
    }
}

/// Runs a call through the turn's sink: the payload goes to the requesting client (or the
/// handoff is booked for the turn's end); the text tells the model what will happen.
pub fn run(input: &Value, sink: &dyn TurnSink) -> Result<String, String> {
    match request(input)? {
        ConversationRequest::Client(payload) => {
            let what = describe(&payload);
            sink.client_action("manage-conversation", payload)?;
            Ok(format!(
                "Your client app will {what} when this reply ends, and show the result itself."
            ))
        }
        ConversationRequest::Handoff(source) => {
            sink.handoff(&source)?;
            Ok(format!(
                "When this reply ends, the server summarizes the conversation \"{source}\" and \
                 adds the summary to this conversation, or says why it could not."
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_only_what_their_subcommand_uses() {
        let client = |input: Value| match request(&input) {
            Ok(ConversationRequest::Client(p)) => p,
            other => panic!("{input}: {other:?}"),
        };
        assert_eq!(
            client(json!({"subcommand": "new", "name": " Research ", "query": "x"})),
            json!({"subcommand": "new", "name": "Research"})
        );
        assert_eq!(
            client(json!({"subcommand": "new", "name": ""})),
            json!({"subcommand": "new"})
        );
        assert_eq!(
            client(json!({"subcommand": "list", "name": "x"})),
            json!({"subcommand": "list"})
        );
        assert_eq!(
            client(json!({"subcommand": "switch", "name": "work"})),
            json!({"subcommand": "switch", "name": "work"})
        );
        assert_eq!(
            client(json!({"subcommand": "rename", "newName": "notes"})),
            json!({"subcommand": "rename", "newName": "notes"})
        );
        assert_eq!(
            client(json!({"subcommand": "rename", "name": "a b", "newName": "c"})),
            json!({"subcommand": "rename", "name": "a b", "newName": "c"})
        );
        assert_eq!(
            client(json!({"subcommand": "search", "query": "docker"})),
            json!({"subcommand": "search", "query": "docker"})
        );
        assert_eq!(
            request(&json!({"subcommand": "handoff", "name": " research "})),
            Ok(ConversationRequest::Handoff("research".into()))
        );
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let error = |input: Value| request(&input).unwrap_err();
        assert_eq!(
            error(json!({})),
            "missing required field \"subcommand\" (a string)"
        );
        assert_eq!(
            error(json!({"subcommand": "help"})),
            "unknown subcommand \"help\": use one of new, list, info, switch, prev, next, \
             rename, delete, find, search, handoff"
        );
        assert_eq!(
            error(json!({"subcommand": "switch"})),
            "switch needs \"name\" (a non-empty string)"
        );
        assert_eq!(
            error(json!({"subcommand": "rename", "name": "x"})),
            "rename needs \"newName\" (a non-empty string)"
        );
        assert_eq!(
            error(json!({"subcommand": "handoff", "name": "  "})),
            "handoff needs \"name\" (a non-empty string)"
        );
        assert_eq!(
            error(json!({"subcommand": "delete", "name": 3})),
            "field \"name\" must be a string, got a number"
        );
        assert_eq!(
            error(json!({"subcommand": "find", "query": "q".repeat(MAX_FIELD_CHARS + 1)})),
            "field \"query\" is longer than 1024 characters"
        );
        assert_eq!(
            error(json!("list")),
            "tool input must be a JSON object, got a string"
        );
    }

    #[test]
    fn the_spec_lists_every_subcommand_but_help() {
        let spec = spec();
        assert!(crate::agent::valid_tool_name(&spec.name));
        assert_eq!(spec.input_schema["required"], json!(["subcommand"]));
        assert_eq!(
            spec.input_schema["properties"]["subcommand"]["enum"],
            json!(SUBCOMMANDS)
        );
        assert!(!SUBCOMMANDS.contains(&"help"));
        for sub in SUBCOMMANDS {
            assert!(spec.description.contains(&format!("→ {sub}")), "{sub}");
        }
    }
}
