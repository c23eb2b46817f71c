//! The tools that ask the people in the conversation, answered through the turn's
//! [`TurnSink`] (the conversation sends the question to the clients and waits):
//!
//! - `ask_user` — one question with choices (default Yes / No), to everyone or `private`ly
//!   to the person who sent the request; with `remember: true` it is a private pick with a
//!   "don't ask me this again" checkbox (TypeAgent's `pickRemember`), whose answer tells the
//!   model when not to ask again.
//! - `ask_user_form` — several questions at once (pick / multiChoice / yesNo, optional free
//!   text), TypeAgent's reasoning tool of the same name and argument shape; answered as one
//!   form ([`QuestionForm`]).
//! - `propose_action` — shows a call of another offered tool before it runs (TypeAgent's
//!   `proposeAction`): the people run it as proposed, run it with edited parameters, or
//!   cancel it. For actions with side effects.
//!
//! This module owns their specs, reads their inputs (errors name what was wrong, so a model
//! can correct itself) and words the answers for the model; the agent loop (`turn.rs`) calls
//! [`ask_user`], [`ask_user_form`] and [`proposal`], and runs the tool a proposal accepted.

use serde_json::{json, Value};

use super::super::questions::{
    ActionProposal, FormField, QuestionForm, MAX_FORM_CHOICES, MAX_FORM_TEXT_CHARS,
};
use super::super::turn_sink::TurnSink;
use super::super::ToolSpec;

/// One question, with choices.
pub const ASK_USER: &str = "ask_user";
/// Several questions in one form.
pub const ASK_USER_FORM: &str = "ask_user_form";
/// Another tool's call, shown before it runs.
pub const PROPOSE_ACTION: &str = "propose_action";
/// The checkbox of an `ask_user` with `remember: true`.
pub const REMEMBER_LABEL: &str = "Don't ask me this again";
/// What an answer with the checkbox ticked adds for the model.
pub const REMEMBERED_NOTE: &str =
    " (the user asked to remember this answer: do not ask this question again)";

/// Whether `name` is one of the tools of this module.
pub fn is_interactive(name: &str) -> bool {
    matches!(name, ASK_USER | ASK_USER_FORM | PROPOSE_ACTION)
}

/// The specs of `ask_user`, `ask_user_form` and `propose_action`, in that order.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: ASK_USER.into(),
            description: "Ask the people in this conversation a question and wait for their answer. \
                          Use for confirmations and choices. With remember: true the person who sent \
                          the request may tick \"don't ask me this again\"; when an answer says so, \
                          use it next time instead of asking."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "choices": {"type": "array", "items": {"type": "string"}, "description": "Default: Yes, No"},
                    "private": {"type": "boolean", "description": "Ask only the person who sent the request"},
                    "remember": {"type": "boolean", "description": "Offer to remember the answer (asks privately)"}
                },
                "required": ["question"]
            }),
        },
        ToolSpec {
            name: ASK_USER_FORM.into(),
            description: "Ask SEVERAL questions at once in a single form and wait until they are \
                          submitted. Prefer this over several ask_user calls when you need more than \
                          one answer. Each question has an id, a kind (\"pick\" = choose one, \
                          \"multiChoice\" = choose any, \"yesNo\"), a prompt and, for pick and \
                          multiChoice, at least 2 choices; allowFreeText lets the person type an \
                          \"Other\" value. Returns every answer by question."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "Optional heading shown above the questions."},
                    "questions": {
                        "type": "array",
                        "description": "One or more questions to present together.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "description": "Unique id; answers are keyed by it."},
                                "kind": {"type": "string", "enum": ["pick", "multiChoice", "yesNo"]},
                                "prompt": {"type": "string", "description": "The question text."},
                                "choices": {"type": "array", "items": {"type": "string"}, "description": "Options for pick/multiChoice (at least 2)."},
                                "allowFreeText": {"type": "boolean", "description": "Allow an \"Other: ___\" free-text answer (pick/multiChoice)."}
                            },
                            "required": ["id", "kind", "prompt"]
                        }
                    },
                    "paged": {"type": "boolean", "description": "Present the questions one at a time."},
                    "private": {"type": "boolean", "description": "Ask only the person who sent the request"}
                },
                "required": ["questions"]
            }),
        },
        ToolSpec {
            name: PROPOSE_ACTION.into(),
            description: "Propose a call of another tool to the people in this conversation before \
                          running it: they run it as proposed, run it with edited parameters, or \
                          cancel it. Use for actions with side effects. Returns the tool's result, or \
                          says that it was cancelled."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "The tool to run, as offered."},
                    "input": {"type": "object", "description": "Its input."}
                },
                "required": ["tool"]
            }),
        },
    ]
}

/// A boolean input field (`false` when absent).
fn flag(input: &Value, field: &str) -> Result<bool, String> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{field} must be a boolean")),
    }
}

/// `ask_user`: the answer as `answer: <choice>` (with [`REMEMBERED_NOTE`] when the person
/// ticked "remember").
pub async fn ask_user(input: &Value, sink: &dyn TurnSink) -> Result<String, String> {
    let question = input
        .get("question")
        .and_then(Value::as_str)
        .ok_or("ask_user needs a \"question\" string")?
        .to_string();
    let choices: Vec<String> = match input.get("choices") {
        None | Some(Value::Null) => vec!["Yes".into(), "No".into()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_string)
                    .ok_or("choices must be strings")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("choices must be an array of strings".into()),
    };
    if choices.is_empty() || choices.len() > MAX_FORM_CHOICES {
        return Err(format!("choices must hold 1 to {MAX_FORM_CHOICES} strings"));
    }
    let chosen = |index: usize| {
        choices
            .get(index)
            .map(|c| format!("answer: {c}"))
            .ok_or_else(|| format!("answer {index} is not one of the choices"))
    };
    if flag(input, "remember")? {
        let picked = sink
            .ask_remember(question, choices.clone(), REMEMBER_LABEL.to_string())
            .await?;
        let answer = chosen(picked.index)?;
        return Ok(if picked.remember {
            format!("{answer}{REMEMBERED_NOTE}")
        } else {
            answer
        });
    }
    let private = flag(input, "private")?;
    let index = sink.ask(question, choices.clone(), private).await?;
    chosen(index)
}

/// A string field of a question object ("" when absent or not a string).
fn text<'a>(q: &'a Value, field: &str) -> &'a str {
    q.get(field).and_then(Value::as_str).unwrap_or("")
}

/// `ask_user_form`'s input as a form (TypeAgent's `buildReasoningForm`, same error texts),
/// and whether to ask privately.
pub fn form_of(input: &Value) -> Result<(QuestionForm, bool), String> {
    let questions = match input.get("questions") {
        Some(Value::Array(q)) if !q.is_empty() => q,
        _ => return Err("ask_user_form requires a non-empty `questions` array.".into()),
    };
    let mut fields = Vec::with_capacity(questions.len());
    for (i, q) in questions.iter().enumerate() {
        let id = match text(q, "id") {
            "" => format!("q{}", i + 1),
            id => id.to_string(),
        };
        if fields.iter().any(|f: &FormField| f.id() == id) {
            return Err(format!("Duplicate question id \"{id}\"."));
        }
        let prompt = text(q, "prompt").to_string();
        if prompt.is_empty() {
            return Err(format!("Question \"{id}\" is missing a prompt."));
        }
        let kind = text(q, "kind");
        if kind == "yesNo" {
            fields.push(FormField::YesNo {
                id,
                prompt,
                default_value: None,
            });
            continue;
        }
        if kind != "pick" && kind != "multiChoice" {
            let shown = q.get("kind").map_or("undefined".to_string(), |k| match k {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            return Err(format!(
                "Question \"{id}\" has unknown kind \"{shown}\". Use \"pick\", \"multiChoice\", or \"yesNo\"."
            ));
        }
        let choices: Vec<String> = q
            .get("choices")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if choices.len() < 2 {
            return Err(format!(
                "Question \"{id}\" ({kind}) needs at least 2 non-empty choices."
            ));
        }
        let allow_free_text = q.get("allowFreeText") == Some(&Value::Bool(true));
        fields.push(if kind == "pick" {
            FormField::Pick {
                id,
                prompt,
                choices,
                default_id: None,
                allow_free_text,
                free_text_placeholder: None,
            }
        } else {
            FormField::MultiChoice {
                id,
                prompt,
                choices,
                default_ids: None,
                allow_free_text,
                free_text_placeholder: None,
            }
        });
    }
    let message = Some(text(input, "message"))
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    // Several questions are asked one at a time, as TypeAgent's tool does.
    let paged =
        (fields.len() > 1 || input.get("paged") == Some(&Value::Bool(true))).then_some(true);
    let form = QuestionForm {
        message,
        fields,
        paged,
    };
    form.check()?;
    Ok((form, flag(input, "private")?))
}

/// `ask_user_form`: the answers in words (TypeAgent's `formatReasoningFormResponse`).
pub async fn ask_user_form(input: &Value, sink: &dyn TurnSink) -> Result<String, String> {
    let (form, private) = form_of(input)?;
    let response = sink.ask_form(form.clone(), private).await?;
    Ok(form.describe(&response))
}

/// `propose_action`'s input: a call of an offered tool (not of an asking tool) with an
/// object input.
pub fn proposal(input: &Value, offered: &[ToolSpec]) -> Result<ActionProposal, String> {
    let tool = input
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("propose_action needs a \"tool\" string")?;
    if is_interactive(tool) {
        return Err(format!("propose_action cannot propose {tool}"));
    }
    let spec = offered
        .iter()
        .find(|t| t.name == tool)
        .ok_or_else(|| format!("no tool named {tool:?} is offered"))?;
    let tool_input = match input.get("input") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err("the input of propose_action must be a JSON object".into()),
    };
    if tool.chars().count() > MAX_FORM_TEXT_CHARS {
        return Err("the tool name is too long".into());
    }
    Ok(ActionProposal {
        tool: tool.to_string(),
        input: tool_input,
        input_schema: spec.input_schema.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TypeAgent's `buildReasoningForm` rules and texts.
    #[test]
    fn forms_from_tool_input() {
        let (form, private) = form_of(&json!({
            "message": "Pizza",
            "questions": [
                {"kind": "pick", "prompt": "Size?", "choices": ["S", "M", ""], "allowFreeText": true},
                {"id": "x", "kind": "yesNo", "prompt": "Deliver?"}
            ]
        }))
        .unwrap();
        assert!(!private);
        assert_eq!(
            serde_json::to_value(&form).unwrap(),
            json!({"message": "Pizza", "paged": true, "fields": [
                {"id": "q1", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true},
                {"id": "x", "kind": "yesNo", "prompt": "Deliver?"}
            ]})
        );
        for (input, error) in [
            (json!({}), "ask_user_form requires a non-empty `questions` array."),
            (json!({"questions": [{"kind": "yesNo"}]}), "Question \"q1\" is missing a prompt."),
            (
                json!({"questions": [{"id": "a", "kind": "yesNo", "prompt": "?"}, {"id": "a", "kind": "yesNo", "prompt": "?"}]}),
                "Duplicate question id \"a\".",
            ),
            (
                json!({"questions": [{"kind": "pick", "prompt": "?", "choices": ["one"]}]}),
                "Question \"q1\" (pick) needs at least 2 non-empty choices.",
            ),
            (
                json!({"questions": [{"kind": "rate", "prompt": "?"}]}),
                "Question \"q1\" has unknown kind \"rate\". Use \"pick\", \"multiChoice\", or \"yesNo\".",
            ),
        ] {
            assert_eq!(form_of(&input).unwrap_err(), error, "{input}");
        }
    }

    #[test]
    fn proposals_name_an_offered_tool() {
        let offered = super::super::builtin_tool_specs();
        let p = proposal(
            &json!({"tool": "calculate", "input": {"expression": "1+1"}}),
            &offered,
        )
        .unwrap();
        assert_eq!(p.input, json!({"expression": "1+1"}));
        assert_eq!(p.input_schema, offered[0].input_schema);
        assert_eq!(
            proposal(&json!({"tool": "ask_user"}), &offered).unwrap_err(),
            "propose_action cannot propose ask_user"
        );
        assert_eq!(
            proposal(&json!({"tool": "rm"}), &offered).unwrap_err(),
            "no tool named \"rm\" is offered"
        );
    }
}
