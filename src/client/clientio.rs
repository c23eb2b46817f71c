//! The server → client calls of the `clientio:<conversationId>` channel (reference section
//! 6.1), typed once: [`ClientIo::decode`] reads a call's `(method, args)` (positional
//! arguments, `null` or missing meaning absent) into a [`ClientIo`], and the connection's
//! reader hands every call on as an [`Event::Call`](super::Event::Call) carrying one. The CLI
//! matches on these; nothing in it indexes raw arguments.
//!
//! The `manage-conversation` payload a `takeAction` carries (section 6.6), which is also what
//! the server's `@conversation` parser builds, is typed here as [`ManageConversation`].
//! Forms are the server's own [`QuestionForm`] (the actors crate's type, reused). Message
//! contents (`IAgentMessage`) and a proposal's action templates stay JSON: they are data to
//! render, with many optional shapes.

use roundtable_actors::agent::questions::QuestionForm;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// A request's `RequestId` (`{connectionId, requestId, clientRequestId}`): says whose request
/// a call belongs to. Every field is optional: system messages carry `{requestId: "system"}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestId {
    /// The connection that submitted the request.
    #[serde(default)]
    pub connection_id: Option<String>,
    /// The server's id of the request (what `cancelCommand` and completions name).
    #[serde(default)]
    pub request_id: Option<String>,
}

impl RequestId {
    /// Whether this names the request `id`.
    pub fn is(&self, id: &str) -> bool {
        self.request_id.as_deref() == Some(id)
    }
}

/// What a `requestChoice` asks for: how it is answered (`respondToChoice`'s response).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChoiceKind {
    /// Answered `true` / `false`.
    YesNo,
    /// Answered with the chosen indexes.
    MultiChoice,
    /// A pick and a "remember" checkbox: `{selected, remember}`.
    PickRemember,
    /// A kind this client does not know: offered as a pick, answered with the index chosen.
    #[serde(other)]
    Other,
}

/// A private `requestChoice` (to the requesting connection only), answered with
/// `respondToChoice(choice_id, response)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The request it belongs to.
    pub request_id: RequestId,
    /// What the answer names.
    pub choice_id: String,
    /// How it is answered.
    pub kind: ChoiceKind,
    /// The question.
    pub message: String,
    /// The labels offered (`yesNo` may come with none: see [`Choice::labels`]).
    pub choices: Vec<String>,
    /// A `pickRemember`'s checkbox label.
    pub checkbox_label: Option<String>,
}

impl Choice {
    /// The labels to offer: `choices`, or Yes and No for a `yesNo` sent with none (as
    /// TypeAgent sends it).
    pub fn labels(&self) -> Vec<String> {
        if self.choices.is_empty() && self.kind == ChoiceKind::YesNo {
            return vec!["Yes".into(), "No".into()];
        }
        self.choices.clone()
    }
}

/// A private `requestForm`, answered with `respondToChoice(choice_id, QuestionFormResponse)`.
#[derive(Debug, Clone, PartialEq)]
pub struct FormChoice {
    /// The request it belongs to.
    pub request_id: RequestId,
    /// What the answer names.
    pub choice_id: String,
    /// The form, read field by field.
    pub form: QuestionForm,
    /// Who asks (an agent's name).
    pub source: String,
}

/// The type of a deferred interaction (`PendingInteractionRequest.type`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InteractionKind {
    /// A question with labelled choices, answered with an index.
    Question,
    /// An action to run or cancel.
    ProposeAction,
    /// A form, answered with a `QuestionFormResponse`.
    Form,
    /// A type this client does not know.
    #[serde(other)]
    Other,
}

/// A `requestInteraction` (`PendingInteractionRequest`): broadcast to every client, answered
/// by one with `respondToInteraction`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interaction {
    /// What the answer names.
    pub interaction_id: String,
    /// Question, proposal or form.
    #[serde(rename = "type")]
    pub kind: InteractionKind,
    /// The request that asks (absent for some system questions).
    #[serde(default)]
    pub request_id: Option<RequestId>,
    /// A question's text.
    #[serde(default)]
    pub message: Option<String>,
    /// A question's labels.
    #[serde(default)]
    pub choices: Vec<String>,
    /// A form's questions.
    #[serde(default)]
    pub form: Option<QuestionForm>,
    /// A proposal's `actionTemplates` (the action is `templateData[0].data`).
    #[serde(default)]
    pub action_templates: Option<Value>,
}

impl Interaction {
    /// Whether the request `id` asks it.
    pub fn asked_by(&self, id: &str) -> bool {
        self.request_id.as_ref().is_some_and(|r| r.is(id))
    }

    /// The connection that asks (`?` when unknown).
    pub fn asker(&self) -> &str {
        self.request_id
            .as_ref()
            .and_then(|r| r.connection_id.as_deref())
            .unwrap_or("?")
    }
}

/// One `manage-conversation` payload (`{subcommand, name?, newName?, query?}`), from a
/// `takeAction` or from the server's own `@conversation` parser
/// ([`roundtable_actors::conversation::commands::parse`]), decoded by
/// [`ManageConversation::from_payload`]. Names and queries are trimmed; empty is absent.
#[derive(Debug, Clone, PartialEq)]
pub enum ManageConversation {
    /// `help` (also a payload without a subcommand).
    Help,
    /// `info`: the current conversation.
    Info,
    /// `list`, optionally filtered by name.
    List(Option<String>),
    /// `find <query>`: by name.
    Find(Option<String>),
    /// `search <query>`: by content.
    Search(Option<String>),
    /// `new [name]`.
    New(Option<String>),
    /// `switch <name>`.
    Switch(Option<String>),
    /// `prev`.
    Prev,
    /// `next`.
    Next,
    /// `rename [name] <new name>`.
    Rename {
        /// The one to rename (default: the current one).
        name: Option<String>,
        /// Its new name.
        new_name: Option<String>,
    },
    /// `delete <name>`.
    Delete(Option<String>),
    /// A subcommand this client does not know, by name.
    Unknown(String),
}

/// The fields of a `manage-conversation` payload, as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagePayload {
    subcommand: Option<String>,
    name: Option<String>,
    new_name: Option<String>,
    query: Option<String>,
}

impl ManageConversation {
    /// Decodes a payload; one that is not an object of strings is `help`.
    pub fn from_payload(payload: &Value) -> ManageConversation {
        let Ok(p) = ManagePayload::deserialize(payload) else {
            return ManageConversation::Help;
        };
        let text = |s: Option<String>| s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let (name, new_name, query) = (text(p.name), text(p.new_name), text(p.query));
        match p.subcommand.as_deref().unwrap_or("help") {
            "help" => ManageConversation::Help,
            "info" => ManageConversation::Info,
            "list" => ManageConversation::List(name),
            "find" => ManageConversation::Find(query),
            "search" => ManageConversation::Search(query),
            "new" => ManageConversation::New(name),
            "switch" => ManageConversation::Switch(name),
            "prev" => ManageConversation::Prev,
            "next" => ManageConversation::Next,
            "rename" => ManageConversation::Rename { name, new_name },
            "delete" => ManageConversation::Delete(name),
            other => ManageConversation::Unknown(other.to_string()),
        }
    }
}

/// What a `takeAction` asks the requesting client to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `manage-conversation`: run it with the conversation helpers.
    ManageConversation(ManageConversation),
    /// Any other action, by name, with its data.
    Other {
        /// The action's name.
        name: String,
        /// Its data.
        data: Value,
    },
}

/// A `notify` call: `[notificationId, event, data, source, …]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The request it is about, when the id is a `RequestId` (or its id alone, a string).
    pub request_id: Option<String>,
    /// `commandComplete`, `contextMeter`, `statusNotice`, …
    pub event: String,
    /// The event's data.
    pub data: Value,
}

/// One server → client call on `clientio:<id>`, by method.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientIo {
    /// `setUserRequest(requestId, command)`: a request starts (the echo of what was typed).
    SetUserRequest {
        /// Whose request.
        request_id: RequestId,
        /// What was typed.
        command: String,
    },
    /// `setDisplay(message)` / `appendDisplay(message, mode)`: output to show.
    Display {
        /// The `IAgentMessage`.
        message: Value,
        /// `temporary` output is replaced by what follows (a status line).
        temporary: bool,
        /// `inline` output continues the current line: a piece of an answer being written.
        inline: bool,
    },
    /// `notify(...)`.
    Notify(Notification),
    /// `requestChoice(...)`.
    RequestChoice(Choice),
    /// `requestForm(...)`.
    RequestForm(FormChoice),
    /// `requestInteraction(PendingInteractionRequest)` (boxed: by far the largest call).
    RequestInteraction(Box<Interaction>),
    /// `interactionResolved(id, value)` / `interactionCancelled(id)`: no longer waiting.
    InteractionEnded {
        /// The interaction.
        interaction_id: String,
    },
    /// `takeAction(requestId, action, data)`.
    TakeAction {
        /// The request that asks.
        request_id: RequestId,
        /// What to do.
        action: Action,
    },
    /// `clear(requestId)`: clear the screen (`@system clear`).
    Clear {
        /// The request that asks.
        request_id: RequestId,
    },
    /// `exit(requestId)`: leave (`@system exit`).
    Exit {
        /// The request that asks.
        request_id: RequestId,
    },
    /// `requestCancelled(requestId, reason, version)`.
    RequestCancelled {
        /// The request.
        request_id: String,
        /// TypeAgent's `QueueCancelReason` (`user`, …).
        reason: String,
    },
    /// Any other call (`setDisplayInfo`, the queue events, …), as sent.
    Other {
        /// The method.
        method: String,
        /// Its arguments.
        args: Vec<Value>,
    },
}

/// Reads the first `N` positional arguments as the tuple `T`: missing ones are `null`
/// (absent), later ones are ignored.
fn positional<T: DeserializeOwned>(args: &[Value], n: usize) -> Result<T, String> {
    let mut taken: Vec<Value> = args.iter().take(n).cloned().collect();
    taken.resize(n, Value::Null);
    serde_json::from_value(Value::Array(taken)).map_err(|e| e.to_string())
}

impl ClientIo {
    /// Decodes one call. A call of a known method whose arguments do not fit is an error (the
    /// connection logs it and passes it on as [`ClientIo::Other`]).
    pub fn decode(method: &str, args: &[Value]) -> Result<ClientIo, String> {
        Ok(match method {
            "setUserRequest" => {
                let (request_id, command): (Option<RequestId>, Option<String>) =
                    positional(args, 2)?;
                ClientIo::SetUserRequest {
                    request_id: request_id.unwrap_or_default(),
                    command: command.unwrap_or_default(),
                }
            }
            "setDisplay" | "appendDisplay" => {
                let (message, mode): (Value, Option<String>) = positional(args, 2)?;
                ClientIo::Display {
                    message,
                    temporary: mode.as_deref() == Some("temporary"),
                    inline: mode.as_deref() == Some("inline"),
                }
            }
            "notify" => Self::notification(args)?,
            "requestChoice" => Self::choice(args)?,
            "requestForm" => {
                let (request_id, choice_id, form, source): (
                    Option<RequestId>,
                    String,
                    QuestionForm,
                    Option<String>,
                ) = positional(args, 4)?;
                ClientIo::RequestForm(FormChoice {
                    request_id: request_id.unwrap_or_default(),
                    choice_id,
                    form,
                    source: source.unwrap_or_default(),
                })
            }
            "requestInteraction" => {
                ClientIo::RequestInteraction(Box::new(positional::<(_,)>(args, 1)?.0))
            }
            "interactionResolved" | "interactionCancelled" => ClientIo::InteractionEnded {
                interaction_id: positional::<(String,)>(args, 1)?.0,
            },
            "takeAction" => {
                let (request_id, name, data): (Option<RequestId>, String, Value) =
                    positional(args, 3)?;
                let action = if name == "manage-conversation" {
                    Action::ManageConversation(ManageConversation::from_payload(&data))
                } else {
                    Action::Other { name, data }
                };
                ClientIo::TakeAction {
                    request_id: request_id.unwrap_or_default(),
                    action,
                }
            }
            "clear" | "exit" => {
                let request_id = positional::<(Option<RequestId>,)>(args, 1)?
                    .0
                    .unwrap_or_default();
                if method == "clear" {
                    ClientIo::Clear { request_id }
                } else {
                    ClientIo::Exit { request_id }
                }
            }
            "requestCancelled" => {
                let (request_id, reason): (String, Option<String>) = positional(args, 2)?;
                ClientIo::RequestCancelled {
                    request_id,
                    reason: reason.unwrap_or_default(),
                }
            }
            _ => ClientIo::Other {
                method: method.to_string(),
                args: args.to_vec(),
            },
        })
    }

    /// `notify(notificationId, event, data, source, …)`: the id is a `RequestId`, a string
    /// or absent.
    fn notification(args: &[Value]) -> Result<ClientIo, String> {
        let (id, event, data): (Value, String, Value) = positional(args, 3)?;
        let request_id = match id {
            Value::String(s) => Some(s),
            Value::Object(_) => {
                RequestId::deserialize(&id)
                    .map_err(|e| e.to_string())?
                    .request_id
            }
            _ => None,
        };
        Ok(ClientIo::Notify(Notification {
            request_id,
            event,
            data,
        }))
    }

    /// `requestChoice(requestId, choiceId, kind, message, choices, source, checkboxLabel?)`.
    fn choice(args: &[Value]) -> Result<ClientIo, String> {
        type Args = (
            Option<RequestId>,
            String,
            ChoiceKind,
            Option<String>,
            Option<Vec<String>>,
            Option<String>,
            Option<String>,
        );
        let (request_id, choice_id, kind, message, choices, _source, checkbox_label): Args =
            positional(args, 7)?;
        Ok(ClientIo::RequestChoice(Choice {
            request_id: request_id.unwrap_or_default(),
            choice_id,
            kind,
            message: message.unwrap_or_default(),
            choices: choices.unwrap_or_default(),
            checkbox_label,
        }))
    }

    /// The request this call is addressed to, for the calls sent to the requester alone
    /// (`clear`, `exit`, `takeAction`, private choices).
    pub fn requester(&self) -> Option<&RequestId> {
        match self {
            ClientIo::Clear { request_id }
            | ClientIo::Exit { request_id }
            | ClientIo::TakeAction { request_id, .. } => Some(request_id),
            ClientIo::RequestChoice(c) => Some(&c.request_id),
            ClientIo::RequestForm(f) => Some(&f.request_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Calls as the server sends them decode into their types; missing trailing arguments
    /// are absent, a known method with arguments that do not fit is an error.
    #[test]
    fn calls_decode_by_method() {
        let rid = json!({"connectionId": "0", "requestId": "r", "clientRequestId": "c"});
        let choice = ClientIo::decode(
            "requestChoice",
            &[rid.clone(), json!("k"), json!("yesNo"), json!("Sure?")],
        )
        .unwrap();
        let ClientIo::RequestChoice(choice) = choice else {
            panic!("{choice:?}")
        };
        assert_eq!(choice.labels(), ["Yes", "No"]);
        assert!(choice.request_id.is("r"));
        assert_eq!(
            ClientIo::decode(
                "notify",
                &[rid.clone(), json!("commandComplete"), json!({})]
            ),
            Ok(ClientIo::Notify(Notification {
                request_id: Some("r".into()),
                event: "commandComplete".into(),
                data: json!({}),
            }))
        );
        let action = ClientIo::decode(
            "takeAction",
            &[
                rid,
                json!("manage-conversation"),
                json!({"subcommand": "rename", "name": " a ", "newName": "b"}),
            ],
        )
        .unwrap();
        assert!(matches!(
            action,
            ClientIo::TakeAction { action: Action::ManageConversation(ManageConversation::Rename { name: Some(ref n), new_name: Some(ref m) }), .. } if n == "a" && m == "b"
        ));
        let asked = ClientIo::decode(
            "requestInteraction",
            &[json!({"interactionId": "i", "type": "question", "message": "Go?", "choices": ["Yes", "No"]})],
        )
        .unwrap();
        assert!(
            matches!(asked, ClientIo::RequestInteraction(ref i) if i.kind == InteractionKind::Question && i.asker() == "?")
        );
        assert!(ClientIo::decode("requestChoice", &[json!(null), json!(5)]).is_err());
        assert_eq!(
            ManageConversation::from_payload(&json!({"subcommand": "switch", "name": "  "})),
            ManageConversation::Switch(None)
        );
        assert_eq!(
            ManageConversation::from_payload(&json!({"subcommand": "history"})),
            ManageConversation::Unknown("history".into())
        );
        assert_eq!(
            ManageConversation::from_payload(&json!(7)),
            ManageConversation::Help
        );
    }
}
