//! The prompt's answers to what a running request asks beyond a plain question: a form
//! (`requestInteraction` of type `form`, or a private `requestForm`) is asked field by field,
//! a proposed action (`proposeAction`) is run or cancelled, a `pickRemember` choice is a pick
//! and then its checkbox as a yes / no. Each builds the response the server expects.
//!
//! Who talks to it: `Prompt` in `running.rs`, while its command runs or at `/answer` for a
//! choice that waited at the prompt; the lines are read by the UI thread
//! (`Ui::AskLine` → `Input::Text`). Ctrl-C at any of these prompts cancels the command, as at
//! a question (at `/answer`, the choice keeps waiting).

use std::sync::mpsc as std_mpsc;

use serde_json::{json, Map, Value};
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

/// The strings of `field[key]`.
fn strings(field: &Value, key: &str) -> Vec<String> {
    field[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The prompt of one form field: its question, numbered choices, and how to answer.
pub(super) fn field_prompt(field: &Value) -> String {
    let prompt = field["prompt"].as_str().unwrap_or("");
    let listed = |choices: &[String]| {
        choices
            .iter()
            .enumerate()
            .map(|(i, c)| format!("[{}] {c}", i + 1))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let other = if field["allowFreeText"] == true {
        " (or type another answer)"
    } else {
        ""
    };
    let choices = strings(field, "choices");
    match field["kind"].as_str() {
        Some("yesNo") => format!("? {prompt} [y/n] > "),
        // A text question (a pick with free text and no choices).
        Some("pick") if choices.is_empty() && field["allowFreeText"] == true => {
            match field["freeTextPlaceholder"].as_str() {
                Some(hint) => format!("? {prompt} ({hint}) > "),
                None => format!("? {prompt} > "),
            }
        }
        Some("multiChoice") => format!(
            "? {prompt} {} (numbers separated by commas){other} > ",
            listed(&choices)
        ),
        _ => format!("? {prompt} {}{other} > ", listed(&choices)),
    }
}

/// The answer a typed `line` gives one form field: `Ok(None)` skips it (empty, no default),
/// `Err` says how to answer (asked again).
pub(super) fn read_field(field: &Value, line: &str) -> Result<Option<Value>, String> {
    let line = line.trim();
    let choices = strings(field, "choices");
    let free_text = field["allowFreeText"] == true;
    match field["kind"].as_str() {
        Some("yesNo") => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(Some(json!({"kind": "yesNo", "value": true}))),
            "n" | "no" => Ok(Some(json!({"kind": "yesNo", "value": false}))),
            "" => Ok(field["defaultValue"]
                .as_bool()
                .map(|v| json!({"kind": "yesNo", "value": v}))),
            _ => Err("Answer y or n.".into()),
        },
        Some("multiChoice") => {
            if line.is_empty() {
                return Ok(field
                    .get("defaultIds")
                    .filter(|d| d.is_array())
                    .map(|d| json!({"kind": "multiChoice", "selected": d})));
            }
            let mut selected = Vec::new();
            let mut typed = Vec::new();
            for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                match pick(part, &choices) {
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
            let mut answer = json!({"kind": "multiChoice", "selected": selected});
            if !typed.is_empty() {
                answer["text"] = typed.join(", ").into();
            }
            Ok(Some(answer))
        }
        _ => {
            if line.is_empty() {
                return Ok(field["defaultId"]
                    .as_u64()
                    .map(|d| json!({"kind": "pick", "selected": d})));
            }
            match pick(line, &choices) {
                Some(i) => Ok(Some(json!({"kind": "pick", "selected": i}))),
                None if free_text => {
                    Ok(Some(json!({"kind": "pick", "selected": -1, "text": line})))
                }
                None => Err(format!("Answer with a number from 1 to {}.", choices.len())),
            }
        }
    }
}

/// Asks `form` (a `QuestionForm`) field by field; its `QuestionFormResponse`, or `None`
/// when Ctrl-C was pressed.
pub(super) async fn fill_form(
    form: &Value,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
) -> Option<Value> {
    if let Some(message) = form["message"].as_str() {
        let _ = ui.send(Ui::Print(format!("? {message}")));
    }
    let mut answers = Map::new();
    for field in form["fields"].as_array().into_iter().flatten() {
        let Some(id) = field["id"].as_str() else {
            continue;
        };
        loop {
            let typed = line(ui, input, field_prompt(field)).await?;
            match read_field(field, &typed) {
                Ok(Some(answer)) => {
                    answers.insert(id.to_string(), answer);
                    break;
                }
                Ok(None) => break,
                Err(hint) => {
                    let _ = ui.send(Ui::Print(hint));
                }
            }
        }
    }
    Some(json!({"answers": answers}))
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
    let pick_field = json!({"kind": "pick", "prompt": choice.message, "choices": choice.choices});
    let selected = loop {
        let typed = line(ui, input, field_prompt(&pick_field)).await?;
        match read_field(&pick_field, &typed) {
            Ok(Some(answer)) => break answer["selected"].clone(),
            Ok(None) | Err(_) => {
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
    let checkbox = json!({"kind": "yesNo", "prompt": format!("{label}?"), "defaultValue": false});
    let remember = loop {
        let typed = line(ui, input, field_prompt(&checkbox)).await?;
        match read_field(&checkbox, &typed) {
            Ok(answer) => break answer.is_some_and(|a| a["value"] == true),
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

    #[test]
    fn fields_read_typed_lines() {
        let pick = json!({"id": "s", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true});
        assert_eq!(
            field_prompt(&pick),
            "? Size? [1] S [2] M (or type another answer) > "
        );
        assert_eq!(
            read_field(&pick, "2"),
            Ok(Some(json!({"kind": "pick", "selected": 1})))
        );
        assert_eq!(
            read_field(&pick, "XL"),
            Ok(Some(json!({"kind": "pick", "selected": -1, "text": "XL"})))
        );
        assert_eq!(read_field(&pick, ""), Ok(None));
        let multi = json!({"kind": "multiChoice", "prompt": "Top?", "choices": ["ham", "olives"]});
        assert_eq!(
            read_field(&multi, "2, ham, 2"),
            Ok(Some(json!({"kind": "multiChoice", "selected": [1, 0]})))
        );
        assert_eq!(
            read_field(&multi, "1, pineapple"),
            Err("Answer with numbers from 1 to 2, separated by commas.".into())
        );
        let yes_no = json!({"kind": "yesNo", "prompt": "Deliver?", "defaultValue": true});
        assert_eq!(
            read_field(&yes_no, "N"),
            Ok(Some(json!({"kind": "yesNo", "value": false})))
        );
        assert_eq!(
            read_field(&yes_no, ""),
            Ok(Some(json!({"kind": "yesNo", "value": true})))
        );
        assert_eq!(read_field(&yes_no, "maybe"), Err("Answer y or n.".into()));
    }
}
