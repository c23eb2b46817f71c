//! What a turn can ask the people in its conversation besides a one-line question
//! ([`TurnSink::ask`](super::turn::TurnSink::ask)), in TypeAgent's wire shapes:
//!
//! - a **form** ([`QuestionForm`]): several questions answered together, each a single pick,
//!   a multiple choice or a yes/no, pick and multiple choice optionally with a free-text
//!   "Other" ([`FormField`]); the answer is a [`QuestionFormResponse`]. Asked with
//!   [`TurnSink::ask_form`](super::turn::TurnSink::ask_form). The types are general on
//!   purpose: the `ask_user_form` tool builds them from the model's arguments, and any other
//!   source of structured questions (an MCP server's elicitation request: a message and a
//!   flat schema of enum / boolean / string properties, which map onto pick / yesNo / a pick
//!   with free text) can build a `QuestionForm`, ask it and read the answers by field id the
//!   same way.
//! - a **pick with "remember"** ([`Picked`]): one choice plus a checkbox (TypeAgent's
//!   `pickRemember`), private to the request's originator.
//! - a **proposed action** ([`ActionProposal`]): a tool call shown before it runs (TypeAgent's
//!   `proposeAction` with an action template); the answer runs it as is, runs it edited, or
//!   cancels it ([`ProposalAnswer`]).
//!
//! This module owns the shapes, their bounds, how a client's answer is checked against what
//! was asked (a bad answer is refused and the question stays open) and how answers read as
//! text for the model. The conversation (`conversation/interactions.rs`) sends and routes
//! them.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Most questions in one form.
pub const MAX_FORM_FIELDS: usize = 16;
/// Most choices in one form question (and in a pick-and-remember).
pub const MAX_FORM_CHOICES: usize = 32;
/// Longest text of a form's message, a prompt, a choice, an id or a placeholder, in
/// characters.
pub const MAX_FORM_TEXT_CHARS: usize = 1_000;
/// Longest free-text answer, in characters.
pub const MAX_FREE_TEXT_CHARS: usize = 4_096;
/// Deepest nesting of a tool's input schema turned into an action template; deeper parts
/// are left out of the template (the action still carries them).
const MAX_TEMPLATE_DEPTH: usize = 16;

/// Several questions answered together (TypeAgent's `QuestionForm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionForm {
    /// A heading shown above the questions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The questions, in order.
    pub fields: Vec<FormField>,
    /// Ask one question at a time (GUI hosts); text hosts ask in order anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paged: Option<bool>,
}

/// One question of a form (TypeAgent's `QuestionFormField`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum FormField {
    /// Choose one of `choices` (or type a value, with `allow_free_text`).
    Pick {
        /// Answers are keyed by it.
        id: String,
        /// The question.
        prompt: String,
        /// The options.
        choices: Vec<String>,
        /// The option chosen unless the person picks another.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default_id: Option<usize>,
        /// Offer an "Other: ___" free-text answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_free_text: bool,
        /// Hint in the free-text box.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        free_text_placeholder: Option<String>,
    },
    /// Choose any of `choices` (and type a value too, with `allow_free_text`).
    MultiChoice {
        /// Answers are keyed by it.
        id: String,
        /// The question.
        prompt: String,
        /// The options.
        choices: Vec<String>,
        /// The options chosen unless the person changes them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default_ids: Option<Vec<usize>>,
        /// Offer an "Other: ___" free-text answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_free_text: bool,
        /// Hint in the free-text box.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        free_text_placeholder: Option<String>,
    },
    /// Yes or no.
    YesNo {
        /// Answers are keyed by it.
        id: String,
        /// The question.
        prompt: String,
        /// The answer unless the person gives the other.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default_value: Option<bool>,
    },
}

impl FormField {
    /// The field's id.
    pub fn id(&self) -> &str {
        match self {
            FormField::Pick { id, .. }
            | FormField::MultiChoice { id, .. }
            | FormField::YesNo { id, .. } => id,
        }
    }

    /// The field's question.
    pub fn prompt(&self) -> &str {
        match self {
            FormField::Pick { prompt, .. }
            | FormField::MultiChoice { prompt, .. }
            | FormField::YesNo { prompt, .. } => prompt,
        }
    }

    /// The kind's protocol name.
    pub fn kind(&self) -> &'static str {
        match self {
            FormField::Pick { .. } => "pick",
            FormField::MultiChoice { .. } => "multiChoice",
            FormField::YesNo { .. } => "yesNo",
        }
    }
}

/// The answers to a form (TypeAgent's `QuestionFormResponse`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct QuestionFormResponse {
    /// One answer per answered field, by field id.
    pub answers: BTreeMap<String, FieldAnswer>,
    /// The form was dismissed (or cancelled, or timed out) without answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

/// The answer to one form question (TypeAgent's `QuestionFormFieldAnswer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum FieldAnswer {
    /// A pick: the index into `choices`, or -1 with `text` for a typed value.
    Pick {
        /// Index, or -1.
        selected: i64,
        /// The typed value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// A multiple choice: indices into `choices`, and a typed value.
    MultiChoice {
        /// The indices chosen.
        selected: Vec<usize>,
        /// The typed value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Yes (`true`) or no.
    YesNo {
        /// The answer.
        value: bool,
    },
}

/// Characters of `text`, checked against `limit`.
fn bounded(what: &str, text: &str, limit: usize) -> Result<(), String> {
    let chars = text.chars().count();
    if chars > limit {
        return Err(format!(
            "{what} is {chars} characters long (at most {limit})"
        ));
    }
    Ok(())
}

impl QuestionFormResponse {
    /// The answer of a dismissed, cancelled or timed-out form: `{answers: {}, cancelled: true}`.
    pub fn cancelled() -> QuestionFormResponse {
        QuestionFormResponse {
            answers: BTreeMap::new(),
            cancelled: true,
        }
    }
}

impl QuestionForm {
    /// Checks the form against the bounds: 1 to [`MAX_FORM_FIELDS`] questions with distinct
    /// non-empty ids and non-empty prompts, 1 to [`MAX_FORM_CHOICES`] choices per pick or
    /// multiple choice (a pick with free text may have none: a text question), defaults among them, every text at most [`MAX_FORM_TEXT_CHARS`].
    pub fn check(&self) -> Result<(), String> {
        if self.fields.is_empty() || self.fields.len() > MAX_FORM_FIELDS {
            return Err(format!(
                "a form has 1 to {MAX_FORM_FIELDS} questions, not {}",
                self.fields.len()
            ));
        }
        if let Some(m) = &self.message {
            bounded("the form's message", m, MAX_FORM_TEXT_CHARS)?;
        }
        let mut ids = HashSet::new();
        for field in &self.fields {
            let id = field.id();
            if id.is_empty() || !ids.insert(id) {
                return Err(format!(
                    "question ids must be distinct and not empty: {id:?}"
                ));
            }
            bounded("a question id", id, MAX_FORM_TEXT_CHARS)?;
            if field.prompt().trim().is_empty() {
                return Err(format!("question {id:?} has no prompt"));
            }
            bounded("a question's prompt", field.prompt(), MAX_FORM_TEXT_CHARS)?;
            let (choices, defaults, placeholder) = match field {
                // A pick with free text and no choices is a plain text question.
                FormField::Pick {
                    choices,
                    allow_free_text: true,
                    default_id: None,
                    free_text_placeholder,
                    ..
                } if choices.is_empty() => {
                    if let Some(p) = free_text_placeholder {
                        bounded("a placeholder", p, MAX_FORM_TEXT_CHARS)?;
                    }
                    continue;
                }
                FormField::Pick {
                    choices,
                    default_id,
                    free_text_placeholder,
                    ..
                } => (
                    choices,
                    default_id.iter().copied().collect(),
                    free_text_placeholder,
                ),
                FormField::MultiChoice {
                    choices,
                    default_ids,
                    free_text_placeholder,
                    ..
                } => (
                    choices,
                    default_ids.clone().unwrap_or_default(),
                    free_text_placeholder,
                ),
                FormField::YesNo { .. } => continue,
            };
            if choices.is_empty() || choices.len() > MAX_FORM_CHOICES {
                return Err(format!(
                    "question {id:?} has {} choices (1 to {MAX_FORM_CHOICES})",
                    choices.len()
                ));
            }
            for c in choices {
                bounded("a choice", c, MAX_FORM_TEXT_CHARS)?;
            }
            if let Some(d) = defaults.iter().find(|d| **d >= choices.len()) {
                return Err(format!("question {id:?} has no choice {d} to default to"));
            }
            if let Some(p) = placeholder {
                bounded("a placeholder", p, MAX_FORM_TEXT_CHARS)?;
            }
        }
        Ok(())
    }

    /// Reads a client's answer to this form: a `QuestionFormResponse` whose answers name
    /// this form's questions with their kinds, indices among their choices, free text only
    /// where offered. `Err` says what is wrong (the form then stays open).
    pub fn read_response(&self, value: &Value) -> Result<QuestionFormResponse, String> {
        let response: QuestionFormResponse = serde_json::from_value(value.clone())
            .map_err(|e| format!("not a form response: {e}"))?;
        for (id, answer) in &response.answers {
            let field = self
                .fields
                .iter()
                .find(|f| f.id() == id)
                .ok_or_else(|| format!("the form has no question {id:?}"))?;
            let (free_text, text) = match (field, answer) {
                (FormField::YesNo { .. }, FieldAnswer::YesNo { .. }) => continue,
                (
                    FormField::Pick {
                        choices,
                        allow_free_text,
                        ..
                    },
                    FieldAnswer::Pick { selected, text },
                ) => {
                    let in_range = usize::try_from(*selected).is_ok_and(|s| s < choices.len());
                    if !in_range && *selected != -1 {
                        return Err(match choices.len() {
                            0 => format!("answer {id:?} must select -1 and type its text"),
                            n => format!(
                                "answer {id:?} must select a choice from 0 to {} (or -1)",
                                n - 1
                            ),
                        });
                    }
                    (*allow_free_text, text)
                }
                (
                    FormField::MultiChoice {
                        choices,
                        allow_free_text,
                        ..
                    },
                    FieldAnswer::MultiChoice { selected, text },
                ) => {
                    if let Some(s) = selected.iter().find(|s| **s >= choices.len()) {
                        return Err(format!("answer {id:?} selects {s}, which is no choice"));
                    }
                    (*allow_free_text, text)
                }
                (field, _) => {
                    return Err(format!("answer {id:?} must be of kind {}", field.kind()))
                }
            };
            if let Some(t) = text {
                if !free_text {
                    return Err(format!("question {id:?} takes no free text"));
                }
                bounded("a free-text answer", t, MAX_FREE_TEXT_CHARS)?;
            }
        }
        Ok(response)
    }

    /// The answers as text for the model (TypeAgent's `formatReasoningFormResponse`).
    pub fn describe(&self, response: &QuestionFormResponse) -> String {
        if response.cancelled {
            return "The user dismissed the form without answering.".to_string();
        }
        let lines: Vec<String> = self
            .fields
            .iter()
            .map(|f| {
                let answer = describe_answer(f, response.answers.get(f.id()));
                format!("- {} => {answer}", f.prompt())
            })
            .collect();
        format!("The user submitted the form:\n{}", lines.join("\n"))
    }
}

/// One answer in words.
fn describe_answer(field: &FormField, answer: Option<&FieldAnswer>) -> String {
    let choice = |choices: &[String], i: usize| {
        choices
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("choice {i}"))
    };
    match (field, answer) {
        (_, None) => "(no answer)".to_string(),
        (FormField::YesNo { .. }, Some(FieldAnswer::YesNo { value })) => {
            if *value { "Yes" } else { "No" }.to_string()
        }
        (FormField::Pick { choices, .. }, Some(FieldAnswer::Pick { selected, text })) => {
            match usize::try_from(*selected) {
                Ok(i) => choice(choices, i),
                Err(_) => text
                    .as_ref()
                    .map_or("(none)".to_string(), |t| format!("\"{t}\" (free text)")),
            }
        }
        (
            FormField::MultiChoice { choices, .. },
            Some(FieldAnswer::MultiChoice { selected, text }),
        ) => {
            let mut picks: Vec<String> = selected.iter().map(|i| choice(choices, *i)).collect();
            if let Some(t) = text {
                picks.push(format!("\"{t}\" (free text)"));
            }
            if picks.is_empty() {
                "(none)".to_string()
            } else {
                picks.join(", ")
            }
        }
        _ => "(invalid)".to_string(),
    }
}

/// The answer to a pick with a "remember" checkbox (TypeAgent's `{selected, remember}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    /// The chosen index.
    pub index: usize,
    /// The checkbox was ticked.
    pub remember: bool,
}

impl Picked {
    /// Reads a client's `{selected, remember?}` for `choices` options.
    pub fn read(value: &Value, choices: usize) -> Result<Picked, String> {
        let index = value
            .get("selected")
            .and_then(Value::as_u64)
            .map(|i| i as usize)
            .filter(|i| *i < choices)
            .ok_or_else(|| {
                format!(
                    "expected {{selected, remember}} with selected a choice from 0 to {}",
                    choices.saturating_sub(1)
                )
            })?;
        let remember = match value.get("remember") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("remember must be a boolean".into()),
        };
        Ok(Picked { index, remember })
    }
}

/// A tool call shown to the people in the conversation before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionProposal {
    /// The tool, as the model names it (`calculate`, `<agent>__<action>`).
    pub tool: String,
    /// Its input as the model gave it.
    pub input: Value,
    /// The tool's input schema (JSON Schema), for the template's fields.
    pub input_schema: Value,
}

/// What the people decided about an [`ActionProposal`].
#[derive(Debug, Clone, PartialEq)]
pub enum ProposalAnswer {
    /// Run the tool with this input (the proposed one, or as they edited it).
    Run(Value),
    /// Do not run it.
    Cancelled,
}

impl ActionProposal {
    /// `(schemaName, actionName)` of the action: `<agent>__<action>` names its agent's
    /// schema; the chat agent's own tools are in schema `chat`.
    fn names(&self) -> (&str, &str) {
        self.tool
            .split_once(super::SERVER_SEPARATOR)
            .unwrap_or(("chat", &self.tool))
    }

    /// The action as TypeAgent's templates carry it: `{schemaName, actionName, parameters}`.
    pub fn action(&self) -> Value {
        let (schema, action) = self.names();
        json!({"schemaName": schema, "actionName": action, "parameters": self.input})
    }

    /// TypeAgent's `TemplateEditConfig` for the proposal (`requestInteraction`'s
    /// `actionTemplates`): the action and a template of its fields, from the input schema.
    pub fn template_config(&self) -> Value {
        let (schema, action) = self.names();
        let union = |values: &str| json!({"type": {"type": "string-union", "typeEnum": [values], "discriminator": values}});
        let mut fields = Map::new();
        fields.insert("schemaName".into(), union(schema));
        fields.insert("actionName".into(), union(action));
        if let Some(parameters) =
            template_type(&self.input_schema, &self.input_schema, &mut Vec::new())
        {
            fields.insert("parameters".into(), json!({"type": parameters}));
        }
        json!({
            "templateAgentName": "chat",
            "templateName": "action",
            "preface": "Use the buttons to run or cancel the following action.",
            "editPreface": "Edit the following action to match your request.",
            "templateData": [{"schema": {"type": "object", "fields": fields}, "data": self.action()}],
            "defaultTemplate": {"type": "object", "fields": {"schemaName": {"type": {
                "type": "string-union", "typeEnum": [schema], "discriminator": ""}}}},
            "completion": false,
        })
    }

    /// Reads a client's answer (`respondToInteraction`'s `value`): absent runs the action as
    /// proposed, `null` cancels it, an array of one action (the same schema and action name)
    /// runs it with that action's `parameters`.
    pub fn read_answer(&self, value: Option<&Value>) -> Result<ProposalAnswer, String> {
        let actions = match value {
            None => return Ok(ProposalAnswer::Run(self.input.clone())),
            Some(Value::Null) => return Ok(ProposalAnswer::Cancelled),
            Some(Value::Array(actions)) => actions,
            Some(_) => {
                return Err(
                    "expected no value (run), null (cancel) or [action] (run edited)".into(),
                )
            }
        };
        let [action] = &actions[..] else {
            return Err(format!(
                "expected one replacement action, got {}",
                actions.len()
            ));
        };
        let (schema, name) = self.names();
        if action["schemaName"] != schema || action["actionName"] != name {
            return Err(format!(
                "the replacement must keep schemaName {schema:?} and actionName {name:?}"
            ));
        }
        match action.get("parameters") {
            None | Some(Value::Null) => Ok(ProposalAnswer::Run(json!({}))),
            Some(p @ Value::Object(_)) => Ok(ProposalAnswer::Run(p.clone())),
            Some(_) => Err("the replacement's parameters must be an object".into()),
        }
    }
}

/// A JSON Schema as TypeAgent's `TemplateType` (what an action editor can show); `None`
/// for what it cannot (`any`, `null`, cycles, past [`MAX_TEMPLATE_DEPTH`]). `$ref`s are
/// resolved against `root`'s `$defs` / `definitions`; `seen` holds the refs being expanded.
fn template_type(schema: &Value, root: &Value, seen: &mut Vec<String>) -> Option<Value> {
    if seen.len() > MAX_TEMPLATE_DEPTH {
        return None;
    }
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        if seen.iter().any(|s| s == reference) {
            return None;
        }
        let name = reference
            .strip_prefix("#/$defs/")
            .or_else(|| reference.strip_prefix("#/definitions/"))?;
        let target = root
            .get("$defs")
            .or_else(|| root.get("definitions"))?
            .get(name)?;
        seen.push(reference.to_string());
        let out = template_type(target, root, seen);
        seen.pop();
        return out;
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(types)) = schema.get(union) {
            seen.push(String::new());
            let out = types.iter().find_map(|t| template_type(t, root, seen));
            seen.pop();
            return out;
        }
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        let strings: Vec<&Value> = values.iter().filter(|v| v.is_string()).collect();
        if !strings.is_empty() {
            return Some(json!({"type": "string-union", "typeEnum": strings}));
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // A list of types: the first one that is not "null".
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")?,
        _ if schema.get("properties").is_some() => "object",
        _ => return None,
    };
    match kind {
        "string" | "boolean" => Some(json!({"type": kind})),
        "number" | "integer" => Some(json!({"type": "number"})),
        "array" => {
            seen.push(String::new());
            let element = schema
                .get("items")
                .and_then(|items| template_type(items, root, seen));
            seen.pop();
            Some(json!({"type": "array", "elementType": element?}))
        }
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut fields = Map::new();
            if let Some(Value::Object(properties)) = schema.get("properties") {
                seen.push(String::new());
                for (name, property) in properties {
                    if let Some(t) = template_type(property, root, seen) {
                        let optional = !required.contains(&name.as_str());
                        fields.insert(name.clone(), json!({"optional": optional, "type": t}));
                    }
                }
                seen.pop();
            }
            Some(json!({"type": "object", "fields": fields}))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> QuestionForm {
        serde_json::from_value(json!({
            "message": "Order",
            "fields": [
                {"id": "size", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true},
                {"id": "top", "kind": "multiChoice", "prompt": "Toppings?", "choices": ["ham", "olives"]},
                {"id": "deliver", "kind": "yesNo", "prompt": "Deliver?"}
            ]
        }))
        .unwrap()
    }

    /// The wire shape round-trips as TypeAgent spells it.
    #[test]
    fn forms_use_typeagents_shape() {
        let f = form();
        f.check().unwrap();
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["fields"][0]["allowFreeText"], true);
        assert_eq!(v["fields"][1]["kind"], "multiChoice");
        assert!(v["fields"][1].get("allowFreeText").is_none());
        assert_eq!(
            serde_json::to_value(QuestionFormResponse::cancelled()).unwrap(),
            json!({"answers": {}, "cancelled": true})
        );
    }

    #[test]
    fn responses_are_checked_against_the_form() {
        let f = form();
        let ok = json!({"answers": {
            "size": {"kind": "pick", "selected": -1, "text": "XL"},
            "top": {"kind": "multiChoice", "selected": [0, 1]},
            "deliver": {"kind": "yesNo", "value": false}
        }});
        let r = f.read_response(&ok).unwrap();
        assert_eq!(
            f.describe(&r),
            "The user submitted the form:\n- Size? => \"XL\" (free text)\n- Toppings? => ham, olives\n- Deliver? => No"
        );
        for (bad, why) in [
            (
                json!({"answers": {"size": {"kind": "pick", "selected": 2}}}),
                "must select a choice from 0 to 1",
            ),
            (
                json!({"answers": {"top": {"kind": "multiChoice", "selected": [0], "text": "x"}}}),
                "takes no free text",
            ),
            (
                json!({"answers": {"deliver": {"kind": "pick", "selected": 0}}}),
                "must be of kind yesNo",
            ),
            (
                json!({"answers": {"nope": {"kind": "yesNo", "value": true}}}),
                "has no question \"nope\"",
            ),
            (json!({"answers": 3}), "not a form response"),
        ] {
            let e = f.read_response(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let mut big = form();
        big.fields = (0..=MAX_FORM_FIELDS)
            .map(|i| FormField::YesNo {
                id: format!("q{i}"),
                prompt: "?".into(),
                default_value: None,
            })
            .collect();
        assert!(big.check().unwrap_err().contains("1 to 16 questions"));
    }

    #[test]
    fn proposals_template_and_answers() {
        let p = ActionProposal {
            tool: "phone__setAlarm".into(),
            input: json!({"time": "07:00"}),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "time": {"type": "string"},
                    "days": {"type": "array", "items": {"$ref": "#/$defs/Day"}},
                    "loud": {"type": ["boolean", "null"]}
                },
                "required": ["time"],
                "$defs": {"Day": {"enum": ["monday", "tuesday"]}}
            }),
        };
        let config = p.template_config();
        let data = &config["templateData"][0];
        assert_eq!(
            data["data"],
            json!({"schemaName": "phone", "actionName": "setAlarm", "parameters": {"time": "07:00"}})
        );
        assert_eq!(
            data["schema"]["fields"]["parameters"]["type"]["fields"],
            json!({
                "time": {"optional": false, "type": {"type": "string"}},
                "days": {"optional": true, "type": {"type": "array", "elementType": {"type": "string-union", "typeEnum": ["monday", "tuesday"]}}},
                "loud": {"optional": true, "type": {"type": "boolean"}}
            })
        );
        assert_eq!(
            p.read_answer(None),
            Ok(ProposalAnswer::Run(json!({"time": "07:00"})))
        );
        assert_eq!(
            p.read_answer(Some(&Value::Null)),
            Ok(ProposalAnswer::Cancelled)
        );
        let edited = json!([{"schemaName": "phone", "actionName": "setAlarm", "parameters": {"time": "08:00"}}]);
        assert_eq!(
            p.read_answer(Some(&edited)),
            Ok(ProposalAnswer::Run(json!({"time": "08:00"})))
        );
        let other = json!([{"schemaName": "phone", "actionName": "showAlarms"}]);
        assert!(p
            .read_answer(Some(&other))
            .unwrap_err()
            .contains("keep schemaName"));
        // A self-referencing schema ends.
        let cyclic = json!({"$ref": "#/$defs/A", "$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}}});
        assert_eq!(
            template_type(&cyclic, &cyclic, &mut Vec::new()),
            Some(json!({"type": "object", "fields": {}}))
        );
    }

    #[test]
    fn picked_reads_selected_and_remember() {
        assert_eq!(
            Picked::read(&json!({"selected": 1, "remember": true}), 2),
            Ok(Picked {
                index: 1,
                remember: true
            })
        );
        assert!(!Picked::read(&json!({"selected": 0}), 2).unwrap().remember);
        assert!(Picked::read(&json!({"selected": null, "remember": false}), 2).is_err());
        assert!(Picked::read(&json!({"selected": 2}), 2).is_err());
    }
}
