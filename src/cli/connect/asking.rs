//! The prompt's answers to what a running request asks beyond a plain question: a form
//! (`requestInteraction` of type `form`, or a private `requestForm`) is asked field by field,
//! a proposed action (`proposeAction`) is run or cancelled, a `pickRemember` choice is a pick
//! and then its checkbox as a yes / no. Each builds the response the server expects.
//!
//! Who talks to it: `Prompt` in `running.rs`, while its command runs or at `/answer` for a
//! choice that waited at the prompt; the lines are read by the UI thread
//! (`Ui::AskLine` → `Input::Text`). Ctrl-C at any of these prompts cancels the command, as at
//! a question (at `/answer`, the choice keeps waiting).

use std::collections::BTreeMap;
use std::sync::mpsc as std_mpsc;

use roundtable_actors::agent::questions::{
    FieldAnswer, FormField, QuestionForm, QuestionFormResponse,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{pick, Input, Ui};
use crate::client::clientio::{Choice, Interaction};

/// Reads one line at `prompt`; `None` when Ctrl-C was pressed (cancel the command).
async fn line(
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
    prompt: String,
) -> Option<String> {
    let _ = ui.send(Ui::AskLine(prompt));
    loop {
        match input.recv().await? {
            Input::Text(text) => return Some(text),
            Input::Interrupt | Input::Eof => return None,
            // Left over from an earlier prompt.
            Input::Line(_) | Input::Answer(_) => {}
        }
    }
}

/// `[1] a [2] b`: how choices are offered, in a form field and on a waiting line alike.
pub(super) fn listed(choices: &[String]) -> String {
    choices
        .iter()
        .enumerate()
        .map(|(i, c)| format!("[{}] {c}", i + 1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The prompt of one form field: its question, numbered choices, and how to answer.
pub(super) fn field_prompt(field: &FormField) -> String {
    let other = |free_text: bool| {
        if free_text {
            " (or type another answer)"
        } else {
            ""
        }
    };
    match field {
        FormField::YesNo { prompt, .. } => format!("? {prompt} [y/n] > "),
        // A text question (a pick with free text and no choices).
        FormField::Pick {
            prompt,
            choices,
            allow_free_text: true,
            free_text_placeholder,
            ..
        } if choices.is_empty() => match free_text_placeholder {
            Some(hint) => format!("? {prompt} ({hint}) > "),
            None => format!("? {prompt} > "),
        },
        FormField::MultiChoice {
            prompt,
            choices,
            allow_free_text,
            ..
        } => format!(
            "? {prompt} {} (numbers separated by commas){} > ",
            listed(choices),
            other(*allow_free_text)
        ),
        FormField::Pick {
            prompt,
            choices,
            allow_free_text,
            ..
        } => format!(
            "? {prompt} {}{} > ",
            listed(choices),
            other(*allow_free_text)
        ),
    }
}

/// The answer a typed `line` gives one form field: `Ok(None)` skips it (empty, no default),
/// `Err` says how to answer (asked again).
pub(super) fn read_field(field: &FormField, line: &str) -> Result<Option<FieldAnswer>, String> {
    let line = line.trim();
    match field {
        FormField::YesNo { default_value, .. } => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(Some(FieldAnswer::YesNo { value: true })),
            "n" | "no" => Ok(Some(FieldAnswer::YesNo { value: false })),
            "" => Ok(default_value.map(|value| FieldAnswer::YesNo { value })),
            _ => Err("Answer y or n.".into()),
        },
        FormField::MultiChoice {
            choices,
            default_ids,
            allow_free_text,
            ..
        } => {
            if line.is_empty() {
                return Ok(default_ids
                    .clone()
                    .map(|selected| FieldAnswer::MultiChoice {
                        selected,
                        text: None,
                    }));
            }
            read_multi_choice(line, choices, *allow_free_text).map(Some)
        }
        FormField::Pick {
            choices,
            default_id,
            allow_free_text,
            ..
        } => {
            if line.is_empty() {
                return Ok(default_id.map(|d| FieldAnswer::Pick {
                    selected: d as i64,
                    text: None,
                }));
            }
            match pick(line, choices) {
                Some(i) => Ok(Some(FieldAnswer::Pick {
                    selected: i as i64,
                    text: None,
                })),
                None if *allow_free_text => Ok(Some(FieldAnswer::Pick {
                    selected: -1,
                    text: Some(line.to_string()),
                })),
                None => Err(format!("Answer with a number from 1 to {}.", choices.len())),
            }
        }
    }
}

/// A multiple choice typed as numbers or labels separated by commas (repeats count once);
/// other words are its free text when it allows one.
fn read_multi_choice(
    line: &str,
    choices: &[String],
    free_text: bool,
) -> Result<FieldAnswer, String> {
    let mut selected = Vec::new();
    let mut typed = Vec::new();
    for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pick(part, choices) {
            Some(i) if !selected.contains(&i) => selected.push(i),
            Some(_) => {}
            None if free_text => typed.push(part),
            None => {
                return Err(format!(
                    "Answer with numbers from 1 to {}, separated by commas.",
                    choices.len()
                ))
            }
        }
    }
    Ok(FieldAnswer::MultiChoice {
        selected,
        text: (!typed.is_empty()).then(|| typed.join(", ")),
    })
}

/// Asks `form` field by field; its answers, or `None` when Ctrl-C was pressed.
pub(super) async fn fill_form(
    form: &QuestionForm,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
) -> Option<QuestionFormResponse> {
    if let Some(message) = &form.message {
        let _ = ui.send(Ui::Print(format!("? {message}")));
    }
    let mut answers = BTreeMap::new();
    for field in &form.fields {
        loop {
            let typed = line(ui, input, field_prompt(field)).await?;
            match read_field(field, &typed) {
                Ok(Some(answer)) => {
                    answers.insert(field.id().to_string(), answer);
                    break;
                }
                Ok(None) => break,
                Err(hint) => {
                    let _ = ui.send(Ui::Print(hint));
                }
            }
        }
    }
    Some(QuestionFormResponse {
        answers,
        cancelled: false,
    })
}

/// A `proposeAction` interaction: shows the action, asks to run or cancel it; the
/// `respondToInteraction` response (no `value`: run; `null`: cancel), or `None` on Ctrl-C.
pub(super) async fn decide_proposal(
    interaction: &Interaction,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
) -> Option<Value> {
    let templates = interaction
        .action_templates
        .as_ref()
        .unwrap_or(&Value::Null);
    let action = &templates["templateData"][0]["data"];
    let prompt = format!(
        "? Run {} {}? [1] Run [2] Cancel > ",
        action["actionName"].as_str().unwrap_or("the action"),
        action.get("parameters").unwrap_or(&json!({}))
    );
    let choices = ["Run".to_string(), "Cancel".to_string()];
    let mut response =
        json!({"interactionId": interaction.interaction_id, "type": "proposeAction"});
    loop {
        match pick(&line(ui, input, prompt.clone()).await?, &choices) {
            Some(0) => return Some(response),
            Some(_) => {
                response["value"] = Value::Null;
                return Some(response);
            }
            None => {
                let _ = ui.send(Ui::Print("Answer 1 (run) or 2 (cancel).".into()));
            }
        }
    }
}

/// A `pickRemember` choice: the pick, then the checkbox as a yes / no; `{selected,
/// remember}`, or `None` on Ctrl-C.
pub(super) async fn pick_remember(
    choice: &Choice,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
) -> Option<Value> {
    let pick_field = FormField::Pick {
        id: String::new(),
        prompt: choice.message.clone(),
        choices: choice.choices.clone(),
        default_id: None,
        allow_free_text: false,
        free_text_placeholder: None,
    };
    let selected = loop {
        let typed = line(ui, input, field_prompt(&pick_field)).await?;
        match read_field(&pick_field, &typed) {
            Ok(Some(FieldAnswer::Pick { selected, .. })) => break selected,
            _ => {
                let _ = ui.send(Ui::Print(format!(
                    "Answer with a number from 1 to {}.",
                    choice.choices.len()
                )));
            }
        }
    };
    let label = choice
        .checkbox_label
        .as_deref()
        .unwrap_or("Remember this for next time");
    let checkbox = FormField::YesNo {
        id: String::new(),
        prompt: format!("{label}?"),
        default_value: Some(false),
    };
    let remember = loop {
        let typed = line(ui, input, field_prompt(&checkbox)).await?;
        match read_field(&checkbox, &typed) {
            Ok(answer) => break answer == Some(FieldAnswer::YesNo { value: true }),
            Err(hint) => {
                let _ = ui.send(Ui::Print(hint));
            }
        }
    };
    Some(json!({"selected": selected, "remember": remember}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field as the server sends it.
    fn field(v: Value) -> FormField {
        serde_json::from_value(v).unwrap()
    }

    /// An answer, as it goes on the wire.
    fn wire(answer: Result<Option<FieldAnswer>, String>) -> Result<Option<Value>, String> {
        answer.map(|a| a.map(|a| serde_json::to_value(a).unwrap()))
    }

    #[test]
    fn fields_read_typed_lines() {
        let pick = field(
            json!({"id": "s", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true}),
        );
        assert_eq!(
            field_prompt(&pick),
            "? Size? [1] S [2] M (or type another answer) > "
        );
        assert_eq!(
            wire(read_field(&pick, "2")),
            Ok(Some(json!({"kind": "pick", "selected": 1})))
        );
        assert_eq!(
            wire(read_field(&pick, "XL")),
            Ok(Some(json!({"kind": "pick", "selected": -1, "text": "XL"})))
        );
        assert_eq!(read_field(&pick, ""), Ok(None));
        let multi = field(
            json!({"id": "t", "kind": "multiChoice", "prompt": "Top?", "choices": ["ham", "olives"]}),
        );
        assert_eq!(
            wire(read_field(&multi, "2, ham, 2")),
            Ok(Some(json!({"kind": "multiChoice", "selected": [1, 0]})))
        );
        assert_eq!(
            read_field(&multi, "1, pineapple"),
            Err("Answer with numbers from 1 to 2, separated by commas.".into())
        );
        let yes_no =
            field(json!({"id": "d", "kind": "yesNo", "prompt": "Deliver?", "defaultValue": true}));
        assert_eq!(
            wire(read_field(&yes_no, "N")),
            Ok(Some(json!({"kind": "yesNo", "value": false})))
        );
        assert_eq!(
            wire(read_field(&yes_no, "")),
            Ok(Some(json!({"kind": "yesNo", "value": true})))
        );
        assert_eq!(read_field(&yes_no, "maybe"), Err("Answer y or n.".into()));
    }
}
