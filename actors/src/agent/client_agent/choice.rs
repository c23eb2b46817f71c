//! What a client agent's `ActionResult` asks beyond its display, read as TypeAgent's
//! dispatcher reads it (`emitActionResult`, `dispatcher/src/execute/actionHandlers.ts`):
//!
//! - `pendingChoice` ([`AskedChoice`]): a choice card for the request's originator,
//!   `requestChoice(requestId, choiceId, type, message, choices, source, checkboxLabel?)`
//!   (`yesNo`, `multiChoice`, `pickRemember`) or `requestForm(requestId, choiceId, {fields,
//!   message?, paged?}, source)` (`form`). The card does not block the request; the client's
//!   `respondToChoice(choiceId, response)` is checked against what was asked
//!   ([`ExpectedAnswer`]) and handed to the agent as `handleChoice` ([`handle_choice_args`]).
//! - `dynamicDisplayId` / `dynamicDisplayNextRefreshMs`: `setDynamicDisplay(requestId,
//!   source, actionIndex, displayId, nextRefreshMs)` ([`dynamic_display_args`]); clients then
//!   ask the agent's `getDynamicDisplay` through the dispatcher.
//!
//! Pure functions: the conversation (`conversation/client_agents.rs`) sends the calls and
//! keeps the routes.

use serde_json::{json, Map, Value};

use super::{action_context_params, SessionContext, MAX_CHOICE_ID_CHARS};
use crate::agent::questions::{Picked, QuestionForm};

/// What a `respondToChoice` response must be, by the choice's type (TypeAgent's shapes: the
/// agent gets the response as the client sent it).
#[derive(Debug, Clone, PartialEq)]
pub enum ExpectedAnswer {
    /// `yesNo`: `true` or `false`.
    YesNo,
    /// `multiChoice`: an array of indices among `choices` options.
    MultiChoice {
        /// How many options were offered.
        choices: usize,
    },
    /// `pickRemember`: `{selected, remember}`, `selected` among `choices` options.
    PickRemember {
        /// How many options were offered.
        choices: usize,
    },
    /// `form`: a `QuestionFormResponse` for this form.
    Form(QuestionForm),
}

impl ExpectedAnswer {
    /// Checks a client's response; `Err` says what is wrong (the choice then stays open).
    pub fn check(&self, response: &Value) -> Result<(), String> {
        match self {
            ExpectedAnswer::YesNo => match response {
                Value::Bool(_) => Ok(()),
                _ => Err("a yesNo choice is answered true or false".into()),
            },
            ExpectedAnswer::MultiChoice { choices } => {
                let in_range = |v: &Value| v.as_u64().is_some_and(|i| (i as usize) < *choices);
                match response {
                    Value::Array(picked) if picked.iter().all(in_range) => Ok(()),
                    _ => Err(format!(
                        "a multiChoice choice is answered with an array of choices from 0 to {}",
                        choices.saturating_sub(1)
                    )),
                }
            }
            ExpectedAnswer::PickRemember { choices } => Picked::read(response, *choices).map(drop),
            ExpectedAnswer::Form(form) => form.read_response(response).map(drop),
        }
    }
}

/// A client agent's `pendingChoice`, read: the call that asks it and what its answer must
/// be.
#[derive(Debug, Clone, PartialEq)]
pub struct AskedChoice {
    /// The agent's `choiceId`: the client answers with it and the agent's `handleChoice`
    /// gets it back (TypeAgent keys its routes by it).
    pub choice_id: String,
    /// `requestChoice` or `requestForm`.
    pub method: &'static str,
    /// The call's arguments.
    pub args: Value,
    /// What the answer must be.
    pub expects: ExpectedAnswer,
}

impl AskedChoice {
    /// Reads `pendingChoice` (TypeAgent's `PendingChoice`) of a result for the request
    /// `request_id` (the `RequestId` object), shown as coming from `source` (the schema
    /// name). `Err` says why it cannot be asked.
    pub fn read(pending: &Value, request_id: Value, source: &str) -> Result<AskedChoice, String> {
        let pending = pending
            .as_object()
            .ok_or("pendingChoice is not an object")?;
        let choice_id = match pending.get("choiceId") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => return Err("pendingChoice.choiceId is not a non-empty string".into()),
        };
        if choice_id.chars().count() > MAX_CHOICE_ID_CHARS {
            return Err(format!(
                "pendingChoice.choiceId is longer than {MAX_CHOICE_ID_CHARS} characters"
            ));
        }
        let kind = pending.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "form" {
            return read_form(pending, choice_id, request_id, source);
        }
        let message = pending
            .get("message")
            .filter(|m| m.is_string())
            .ok_or("pendingChoice.message is not a string")?;
        let choices = || -> Result<&Vec<Value>, String> {
            pending
                .get("choices")
                .and_then(Value::as_array)
                .filter(|c| c.iter().all(Value::is_string))
                .ok_or_else(|| format!("the choices of a {kind} pendingChoice are not strings"))
        };
        let (offered, expects, checkbox_label) = match kind {
            // TypeAgent sends a yes / no with no choices (clients show Yes and No).
            "yesNo" => (json!([]), ExpectedAnswer::YesNo, Value::Null),
            "multiChoice" => {
                let choices = choices()?;
                let expects = ExpectedAnswer::MultiChoice {
                    choices: choices.len(),
                };
                (json!(choices), expects, Value::Null)
            }
            "pickRemember" => {
                let choices = choices()?;
                let expects = ExpectedAnswer::PickRemember {
                    choices: choices.len(),
                };
                let label = match pending.get("checkboxLabel") {
                    None | Some(Value::Null) => Value::Null,
                    Some(label @ Value::String(_)) => label.clone(),
                    Some(_) => return Err("pendingChoice.checkboxLabel is not a string".into()),
                };
                (json!(choices), expects, label)
            }
            other => {
                return Err(format!(
                    "pendingChoice.type {other:?} is not yesNo, multiChoice, pickRemember or form"
                ))
            }
        };
        let args = json!([
            request_id,
            choice_id,
            kind,
            message,
            offered,
            source,
            checkbox_label
        ]);
        Ok(AskedChoice {
            choice_id,
            method: "requestChoice",
            args,
            expects,
        })
    }
}

/// A `form` pendingChoice: its `fields` (and `message`, `paged` when set) go to the client
/// as the agent wrote them; read as a [`QuestionForm`] within its bounds to check answers.
fn read_form(
    pending: &Map<String, Value>,
    choice_id: String,
    request_id: Value,
    source: &str,
) -> Result<AskedChoice, String> {
    let mut form = Map::new();
    for key in ["fields", "message", "paged"] {
        if let Some(v) = pending.get(key).filter(|v| !v.is_null()) {
            form.insert(key.into(), v.clone());
        }
    }
    let form = Value::Object(form);
    let read: QuestionForm = serde_json::from_value(form.clone())
        .map_err(|e| format!("the form of pendingChoice is not a QuestionForm: {e}"))?;
    read.check()
        .map_err(|e| format!("the form of pendingChoice: {e}"))?;
    Ok(AskedChoice {
        args: json!([request_id, choice_id, form, source]),
        choice_id,
        method: "requestForm",
        expects: ExpectedAnswer::Form(read),
    })
}

/// The arguments of `setDynamicDisplay` for a result's `dynamicDisplayId` (`None` when it
/// has none, or it is not a string): `[requestId, source, actionIndex, displayId,
/// nextRefreshMs]`, the refresh as the agent gave it (`null` when absent).
pub fn dynamic_display_args(
    result: &Value,
    request_id: Value,
    source: &str,
    action_index: usize,
) -> Option<Value> {
    let id = result.get("dynamicDisplayId")?.as_str()?;
    let refresh = result
        .get("dynamicDisplayNextRefreshMs")
        .cloned()
        .unwrap_or(Value::Null);
    Some(json!([request_id, source, action_index, id, refresh]))
}

/// The arguments of the `handleChoice` invoke, as TypeAgent's agent-rpc client sends them:
/// one object with a fresh action context's params (not from the reasoning loop), the
/// `choiceId` and the client's `response` as sent.
pub fn handle_choice_args(
    choice_id: &str,
    response: Value,
    action_context_id: u64,
    session: &SessionContext,
) -> Value {
    let mut params = action_context_params(session, action_context_id, false);
    params.insert("choiceId".into(), json!(choice_id));
    params.insert("response".into(), response);
    json!([params])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rid() -> Value {
        json!({"connectionId": "0", "requestId": "r1"})
    }

    #[test]
    fn the_four_kinds_read_as_typeagent_sends_them() {
        let yes_no = json!({"choiceId": "c1", "type": "yesNo", "message": "Install?"});
        let asked = AskedChoice::read(&yes_no, rid(), "clock").unwrap();
        assert_eq!(asked.method, "requestChoice");
        assert_eq!(
            asked.args,
            json!([rid(), "c1", "yesNo", "Install?", [], "clock", null])
        );
        assert_eq!(asked.expects, ExpectedAnswer::YesNo);

        let multi = json!({"choiceId": "c2", "type": "multiChoice", "message": "Which?",
                           "choices": ["a", "b"]});
        let asked = AskedChoice::read(&multi, rid(), "clock.sub").unwrap();
        assert_eq!(
            asked.args,
            json!([
                rid(),
                "c2",
                "multiChoice",
                "Which?",
                ["a", "b"],
                "clock.sub",
                null
            ])
        );
        assert_eq!(asked.expects, ExpectedAnswer::MultiChoice { choices: 2 });

        let pick = json!({"choiceId": "c3", "type": "pickRemember", "message": "Open with?",
                          "choices": ["x"], "checkboxLabel": "Always"});
        let asked = AskedChoice::read(&pick, rid(), "clock").unwrap();
        assert_eq!(
            asked.args,
            json!([
                rid(),
                "c3",
                "pickRemember",
                "Open with?",
                ["x"],
                "clock",
                "Always"
            ])
        );

        let form = json!({"choiceId": "c4", "type": "form", "message": "Setup",
                          "fields": [{"id": "f", "kind": "yesNo", "prompt": "Ok?", "extra": 1}]});
        let asked = AskedChoice::read(&form, rid(), "clock").unwrap();
        assert_eq!(asked.method, "requestForm");
        // The fields go out as written (an unknown key included).
        assert_eq!(
            asked.args,
            json!([rid(), "c4", {"fields": [{"id": "f", "kind": "yesNo", "prompt": "Ok?",
                   "extra": 1}], "message": "Setup"}, "clock"])
        );
    }

    #[test]
    fn unreadable_choices_say_why() {
        let cases = [
            (json!("c"), "pendingChoice is not an object"),
            (
                json!({"type": "yesNo", "message": "m"}),
                "pendingChoice.choiceId is not a non-empty string",
            ),
            (
                json!({"choiceId": "c", "type": "yesNo"}),
                "pendingChoice.message is not a string",
            ),
            (
                json!({"choiceId": "c", "type": "multiChoice", "message": "m", "choices": [1]}),
                "the choices of a multiChoice pendingChoice are not strings",
            ),
            (
                json!({"choiceId": "c", "type": "maybe", "message": "m"}),
                "pendingChoice.type \"maybe\" is not yesNo, multiChoice, pickRemember or form",
            ),
            (
                json!({"choiceId": "c", "type": "form", "fields": []}),
                "the form of pendingChoice: a form has 1 to 16 questions, not 0",
            ),
        ];
        for (pending, why) in cases {
            assert_eq!(
                AskedChoice::read(&pending, rid(), "a"),
                Err(why.to_string()),
                "{pending}"
            );
        }
        let long = json!({"choiceId": "x".repeat(MAX_CHOICE_ID_CHARS + 1), "type": "yesNo",
                          "message": "m"});
        assert!(AskedChoice::read(&long, rid(), "a").is_err());
    }

    #[test]
    fn answers_are_checked_against_the_kind() {
        assert!(ExpectedAnswer::YesNo.check(&json!(false)).is_ok());
        assert!(ExpectedAnswer::YesNo.check(&json!(0)).is_err());
        let multi = ExpectedAnswer::MultiChoice { choices: 2 };
        assert!(multi.check(&json!([])).is_ok());
        assert!(multi.check(&json!([0, 1])).is_ok());
        assert_eq!(
            multi.check(&json!([2])),
            Err("a multiChoice choice is answered with an array of choices from 0 to 1".into())
        );
        let pick = ExpectedAnswer::PickRemember { choices: 1 };
        assert!(pick
            .check(&json!({"selected": 0, "remember": true}))
            .is_ok());
        assert!(pick.check(&json!({"selected": 1})).is_err());
    }

    #[test]
    fn dynamic_display_and_handle_choice_arguments() {
        let result = json!({"dynamicDisplayId": "d1", "dynamicDisplayNextRefreshMs": 500});
        assert_eq!(
            dynamic_display_args(&result, rid(), "clock", 2),
            Some(json!([rid(), "clock", 2, "d1", 500]))
        );
        assert_eq!(dynamic_display_args(&json!({}), rid(), "clock", 0), None);
        let args = handle_choice_args("c1", json!(true), 7, &SessionContext::new("s-1"));
        assert_eq!(
            args,
            json!([{"contextId": 0, "hasInstanceStorage": false, "hasSessionStorage": false,
                    "sessionContextId": "s-1", "actionContextId": 7,
                    "isFromReasoningLoop": false, "choiceId": "c1", "response": true}])
        );
    }
}
