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

use super::super::turn_sink::TurnSink;
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

/// Whether the requester is asked before `payload` goes to its client when a model asked
/// for it: the subcommands that move the user to another conversation (`new`, `switch`,
/// `prev`, `next`) or change a name everyone sees (`rename`). Reading ones (`list`, `info`,
/// `find`, `search`) show the requester only what its client can already list; `delete` is
/// confirmed by the client itself (Roundtable's and TypeAgent's clients ask before they
/// delete), so it is not asked twice.
fn needs_consent(payload: &Value) -> bool {
    matches!(
        payload["subcommand"].as_str(),
        Some("new" | "switch" | "prev" | "next" | "rename")
    )
}

/// The yes/no question put to the requester before a model's conversation action runs.
fn consent_question(what: &str) -> String {
    format!("The assistant asks to {what}. Allow it?")
}

/// Puts `what` to the requester (`requestChoice` yes/no, to the requesting client only) and
/// answers `Err` with what the model is told when it is not allowed: declined, or not
/// answered (time-out, cancel, nobody to ask).
async fn ask_consent(sink: &dyn TurnSink, what: &str) -> Result<(), String> {
    let answer = sink
        .ask(
            consent_question(what),
            vec!["Yes".to_string(), "No".to_string()],
            true,
        )
        .await;
    match answer {
        Ok(0) => Ok(()),
        Ok(_) => Err(format!(
            "the user declined: you may not {what}; nothing was done"
        )),
        Err(why) => Err(format!(
            "the user did not allow it ({why}); nothing was done"
        )),
    }
}

/// Runs a call through the turn's sink: the payload goes to the requesting client (or the
/// handoff is booked for the turn's end); the text tells the model what will happen. With
/// `ask_first` (a model that may have been steered by what it read, see
/// [`Provider::acts_on_typed_words_only`](crate::agent::Provider::acts_on_typed_words_only)),
/// a move, a rename or a handoff is first put to the requester, and runs only when allowed:
/// a handoff copies another conversation's words into this one, where everyone in it reads
/// them, and a move takes the user somewhere they did not choose.
pub async fn run(input: &Value, sink: &dyn TurnSink, ask_first: bool) -> Result<String, String> {
    match request(input)? {
        ConversationRequest::Client(payload) => {
            let what = describe(&payload);
            if ask_first && needs_consent(&payload) {
                ask_consent(sink, &what).await?;
            }
            sink.client_action("manage-conversation", payload)?;
            Ok(format!(
                "Your client app will {what} when this reply ends, and show the result itself."
            ))
        }
        ConversationRequest::Handoff(source) => {
            if ask_first {
                sink.check_handoff(&source)?;
                ask_consent(
                    sink,
                    &format!(
                        "copy a summary of the conversation \"{source}\" into this one, where \
                         everyone in it can read it"
                    ),
                )
                .await?;
            }
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

    /// A sink that answers every question with `answer` and records what was asked and
    /// what was booked.
    struct Asked {
        answer: Result<usize, String>,
        questions: std::cell::RefCell<Vec<(String, Vec<String>, bool)>>,
        booked: std::cell::RefCell<Vec<String>>,
    }

    impl Asked {
        fn answering(answer: Result<usize, String>) -> Asked {
            Asked {
                answer,
                questions: Default::default(),
                booked: Default::default(),
            }
        }
    }

    impl TurnSink for Asked {
        fn display(&self, _content: Value, _extra: Option<Value>) {}
        fn ask(
            &self,
            question: String,
            choices: Vec<String>,
            private: bool,
        ) -> crate::agent::LocalBoxFuture<'static, Result<usize, String>> {
            self.questions
                .borrow_mut()
                .push((question, choices, private));
            let answer = self.answer.clone();
            Box::pin(async move { answer })
        }
        fn client_action(&self, _action: &str, data: Value) -> Result<(), String> {
            self.booked.borrow_mut().push(data.to_string());
            Ok(())
        }
        fn handoff(&self, source: &str) -> Result<(), String> {
            self.booked.borrow_mut().push(format!("handoff {source}"));
            Ok(())
        }
        fn check_handoff(&self, _source: &str) -> Result<(), String> {
            Ok(())
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Finding 4 of the third security review: a model's move, rename or handoff is put to
    /// the requester (privately, yes/no) and runs only when allowed; reading subcommands and
    /// delete (which the clients confirm) are not asked; a provider that acts on typed words
    /// only is never asked about.
    #[test]
    fn a_models_moves_renames_and_handoffs_ask_the_requester_first() {
        let input = |sub: &str| match sub {
            "switch" => json!({"subcommand": "switch", "name": "secret-plans"}),
            "rename" => json!({"subcommand": "rename", "newName": "pwned"}),
            "delete" => json!({"subcommand": "delete", "name": "x"}),
            "handoff" => json!({"subcommand": "handoff", "name": "secret-plans"}),
            sub => json!({ "subcommand": sub }),
        };
        for sub in ["new", "switch", "prev", "next", "rename", "handoff"] {
            let declined = Asked::answering(Ok(1));
            let error = block_on(run(&input(sub), &declined, true)).unwrap_err();
            assert!(
                error.starts_with("the user declined: you may not "),
                "{sub}: {error}"
            );
            assert!(
                declined.booked.borrow().is_empty(),
                "{sub}: booked when declined"
            );
            let questions = declined.questions.borrow();
            assert_eq!(questions.len(), 1, "{sub}");
            let (question, choices, private) = &questions[0];
            assert!(question.starts_with("The assistant asks to "), "{question}");
            assert!(question.ends_with(". Allow it?"), "{question}");
            assert_eq!(choices, &["Yes", "No"]);
            assert!(private, "{sub}: only the requester is asked");

            let allowed = Asked::answering(Ok(0));
            assert!(block_on(run(&input(sub), &allowed, true)).is_ok(), "{sub}");
            assert_eq!(allowed.booked.borrow().len(), 1, "{sub}");

            let unanswered = Asked::answering(Err("no answer in time".into()));
            assert_eq!(
                block_on(run(&input(sub), &unanswered, true)).unwrap_err(),
                "the user did not allow it (no answer in time); nothing was done"
            );
            assert!(unanswered.booked.borrow().is_empty());

            let typed = Asked::answering(Ok(1));
            assert!(block_on(run(&input(sub), &typed, false)).is_ok(), "{sub}");
            assert!(
                typed.questions.borrow().is_empty(),
                "{sub}: typed words asked"
            );
            assert_eq!(typed.booked.borrow().len(), 1, "{sub}");
        }
        let handoff = Asked::answering(Ok(1));
        let _ = block_on(run(&input("handoff"), &handoff, true));
        assert_eq!(
            handoff.questions.borrow()[0].0,
            "The assistant asks to copy a summary of the conversation \"secret-plans\" into \
             this one, where everyone in it can read it. Allow it?"
        );
        for sub in ["list", "info", "delete"] {
            let sink = Asked::answering(Ok(1));
            assert!(block_on(run(&input(sub), &sink, true)).is_ok(), "{sub}");
            assert!(sink.questions.borrow().is_empty(), "{sub} asked");
            assert_eq!(sink.booked.borrow().len(), 1, "{sub}");
        }
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
