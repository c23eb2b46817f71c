//! MCP elicitation (a server asks the user a question in the middle of a call) as
//! Roundtable's interactions: asked of every client joined to the conversation, answered by
//! any, timed out and superseded like the conversation's other questions. The answer goes
//! back to the server as MCP says: `accept` with the content, `decline`, or `cancel` (the
//! question timed out, was superseded, or the turn ended).
//!
//! The requested schema is a flat object of primitive properties (MCP allows no more). Each
//! property is asked in turn: an enum as a choice among its values, a boolean as Yes / No.
//! TODO(issue 27, after merging main): a string, number or integer property is asked through
//! the form interaction (`TurnSink::ask_form`); until then such a property takes its default,
//! is left out when optional, and otherwise the request is declined.
//!
//! Who talks to it: the call future in [`super::server`], on the conversation's thread, with
//! the turn's sink.

use roundtable_actors::agent::turn::TurnSink;
use serde_json::{json, Map, Value};

/// Properties one elicitation may ask (each is a question).
pub const MAX_FIELDS: usize = 32;

/// What goes back to the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The user answered: the content object.
    Accept(Value),
    /// The user said no (or the form cannot be asked).
    Decline,
    /// Nobody answered (timed out, superseded, turn ended).
    Cancel,
}

impl Answer {
    /// The `ElicitResult` JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Answer::Accept(content) => json!({"action": "accept", "content": content}),
            Answer::Decline => json!({"action": "decline"}),
            Answer::Cancel => json!({"action": "cancel"}),
        }
    }
}

/// One property and how it is asked.
enum Field {
    /// A choice among these values (an enum, or Yes / No for a boolean).
    Choice {
        /// Its key.
        key: String,
        /// What is asked.
        question: String,
        /// The labels shown.
        labels: Vec<String>,
        /// The value each label stands for.
        values: Vec<Value>,
    },
    /// A property a choice cannot ask: its default, if it has one.
    Free {
        /// Its key.
        key: String,
        /// Its `default`.
        default: Option<Value>,
        /// Whether the schema requires it.
        required: bool,
    },
}

/// The properties of `schema`, in order.
fn fields(server: &str, message: &str, schema: &Value) -> Vec<Field> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .take(MAX_FIELDS)
        .map(|(key, p)| {
            let title = p
                .get("description")
                .or_else(|| p.get("title"))
                .and_then(Value::as_str)
                .unwrap_or(key);
            let question = format!("{server} asks: {message}\n{title}");
            let enum_values: Option<Vec<Value>> = p
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .or_else(|| {
                    p.get("oneOf").and_then(Value::as_array).map(|o| {
                        o.iter()
                            .filter_map(|c| c.get("const").cloned())
                            .collect::<Vec<_>>()
                    })
                })
                .filter(|v| !v.is_empty());
            match (p.get("type").and_then(Value::as_str), enum_values) {
                (_, Some(values)) => Field::Choice {
                    key: key.clone(),
                    question,
                    labels: values
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                        .collect(),
                    values,
                },
                (Some("boolean"), None) => Field::Choice {
                    key: key.clone(),
                    question,
                    labels: vec!["Yes".into(), "No".into()],
                    values: vec![Value::Bool(true), Value::Bool(false)],
                },
                _ => Field::Free {
                    key: key.clone(),
                    default: p.get("default").cloned(),
                    required: required.contains(&key.as_str()),
                },
            }
        })
        .collect()
}

/// Asks the conversation `message` with `schema`; what the server gets back.
pub async fn ask(sink: &dyn TurnSink, server: &str, message: &str, schema: &Value) -> Answer {
    let fields = fields(server, message, schema);
    let mut content = Map::new();
    for field in fields {
        match field {
            Field::Choice {
                key,
                question,
                labels,
                values,
            } => match sink.ask(question, labels, false).await {
                Ok(i) => match values.get(i) {
                    Some(v) => {
                        content.insert(key, v.clone());
                    }
                    None => return Answer::Cancel,
                },
                Err(e) => {
                    log::info!("MCP server {server}: elicitation not answered: {e}");
                    return Answer::Cancel;
                }
            },
            Field::Free {
                key,
                default,
                required,
            } => match default {
                Some(v) => {
                    content.insert(key, v);
                }
                None if !required => {}
                None => {
                    log::info!(
                        "MCP server {server}: elicitation declined: field {key:?} needs free text"
                    );
                    return Answer::Decline;
                }
            },
        }
    }
    Answer::Accept(Value::Object(content))
}
