//! MCP elicitation (a server asks the user for structured input in the middle of a call) as
//! a Roundtable form ([`QuestionForm`], asked with [`TurnSink::ask_form`]): asked of every
//! client joined to the conversation, answered by any, timed out and superseded like the
//! conversation's other questions. The answer goes back to the server as MCP says: `accept`
//! with the content, `decline` (the form was dismissed, or could not be answered validly), or
//! `cancel` (nobody could be asked, or the turn ended).
//!
//! The requested schema is a flat object of primitive properties (MCP allows no more), each
//! one question of the form, keyed by the property's name:
//!
//! | property | question |
//! |---|---|
//! | `enum` / `oneOf` of `const` (titles from `enumNames` / `title`) | a pick among the labels |
//! | `array` of such an enum (`items.enum` / `items.anyOf`) | a multiple choice (`minItems` / `maxItems` checked) |
//! | `boolean` | yes / no |
//! | `string` (`format` email, uri, date, date-time; `minLength` / `maxLength`) | free text |
//! | `number` / `integer` (`minimum` / `maximum`) | free text, read as a number |
//!
//! A free-text question's hint names its `default`. An unanswered question takes its `default`, is left out when optional, and is asked again when required.
//! An answer that does not fit its property (not a number, out of range, not an email) asks
//! the form again with what was wrong, at most [`MAX_ATTEMPTS`] times; then the server gets
//! `decline`. More than [`MAX_FORM_FIELDS`] properties are asked as consecutive forms.
//!
//! Who talks to it: the call future in [`super::server`], on the conversation's thread, with
//! the turn's sink.

use roundtable_actors::agent::questions::{
    FieldAnswer, FormField, QuestionForm, QuestionFormResponse, MAX_FORM_CHOICES, MAX_FORM_FIELDS,
    MAX_FORM_TEXT_CHARS, MAX_FREE_TEXT_CHARS,
};
use roundtable_actors::agent::turn::TurnSink;
use serde_json::{json, Map, Value};

/// Properties one elicitation may ask; past it the request is declined.
pub const MAX_FIELDS: usize = 32;

/// Times one form is asked (the first time and after wrong answers) before `decline`.
pub const MAX_ATTEMPTS: usize = 3;

/// What goes back to the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The user answered: the content object.
    Accept(Value),
    /// The user said no (or the form cannot be asked or answered validly).
    Decline,
    /// Nobody answered (nobody could be asked, or the turn ended).
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

/// What kind of value a property takes, with its constraints.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// One of `values` (shown as the field's choices).
    Choice {
        /// The value each choice stands for.
        values: Vec<Value>,
    },
    /// Any of `values`, between `min` and `max` of them.
    Multi {
        /// The value each choice stands for.
        values: Vec<Value>,
        /// `minItems`.
        min: Option<u64>,
        /// `maxItems`.
        max: Option<u64>,
    },
    /// `true` or `false`.
    YesNo,
    /// A string, its length bounded, maybe in a `format`.
    Text {
        /// `minLength`.
        min: Option<u64>,
        /// `maxLength`.
        max: Option<u64>,
        /// `format`: email, uri, date, date-time (others are not checked).
        format: Option<String>,
    },
    /// A number (an integer when `integer`), bounded.
    Number {
        /// `type: integer`.
        integer: bool,
        /// `minimum`.
        min: Option<f64>,
        /// `maximum`.
        max: Option<f64>,
    },
}

/// One property of the requested schema.
#[derive(Debug, Clone, PartialEq)]
struct Property {
    /// Its name: the field id and the content's key.
    key: String,
    /// What is asked (`description`, else `title`, else the name).
    prompt: String,
    /// The labels shown for a choice or multiple choice.
    labels: Vec<String>,
    /// What it takes.
    kind: Kind,
    /// Its `default`.
    default: Option<Value>,
    /// Listed in `required`.
    required: bool,
}

/// The values and labels of an enum: `enum` (+ `enumNames`), or `oneOf` / `anyOf` of
/// `{const, title}`.
fn enumeration(p: &Value) -> Option<(Vec<Value>, Vec<String>)> {
    let label = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    if let Some(values) = p.get("enum").and_then(Value::as_array) {
        let names = p.get("enumNames").and_then(Value::as_array);
        let labels = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map_or_else(|| label(v), str::to_string)
            })
            .collect();
        return Some((values.clone(), labels)).filter(|(v, _)| !v.is_empty());
    }
    let options = p
        .get("oneOf")
        .or_else(|| p.get("anyOf"))
        .and_then(Value::as_array)?;
    let (values, labels): (Vec<Value>, Vec<String>) = options
        .iter()
        .filter_map(|o| {
            let v = o.get("const")?.clone();
            let l = o
                .get("title")
                .and_then(Value::as_str)
                .map_or_else(|| label(&v), str::to_string);
            Some((v, l))
        })
        .unzip();
    Some((values, labels)).filter(|(v, _)| !v.is_empty())
}

/// The properties of `schema`, in order, or why it cannot be asked.
fn properties(schema: &Value) -> Result<Vec<Property>, String> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    if props.len() > MAX_FIELDS {
        return Err(format!("{} properties (at most {MAX_FIELDS})", props.len()));
    }
    let number = |p: &Value, k: &str| p.get(k).and_then(Value::as_f64);
    let count = |p: &Value, k: &str| p.get(k).and_then(Value::as_u64);
    props
        .iter()
        .map(|(key, p)| {
            if key.is_empty() || key.chars().count() > MAX_FORM_TEXT_CHARS {
                return Err(format!(
                    "a property name of {} characters",
                    key.chars().count()
                ));
            }
            let prompt: String = p
                .get("description")
                .or_else(|| p.get("title"))
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
                .unwrap_or(key)
                .chars()
                .take(MAX_FORM_TEXT_CHARS)
                .collect();
            let ty = p.get("type").and_then(Value::as_str);
            let mut labels = Vec::new();
            let kind = if let Some((values, names)) = enumeration(p) {
                labels = names;
                Kind::Choice { values }
            } else if ty == Some("array") {
                let (values, names) = p
                    .get("items")
                    .and_then(enumeration)
                    .ok_or_else(|| format!("property {key:?} is an array of no enumeration"))?;
                labels = names;
                Kind::Multi {
                    values,
                    min: count(p, "minItems"),
                    max: count(p, "maxItems"),
                }
            } else {
                match ty {
                    Some("boolean") => Kind::YesNo,
                    Some("number") | Some("integer") => Kind::Number {
                        integer: ty == Some("integer"),
                        min: number(p, "minimum"),
                        max: number(p, "maximum"),
                    },
                    Some("string") | None => Kind::Text {
                        min: count(p, "minLength"),
                        max: count(p, "maxLength"),
                        format: p.get("format").and_then(Value::as_str).map(str::to_string),
                    },
                    Some(other) => return Err(format!("property {key:?} of type {other:?}")),
                }
            };
            if labels.len() > MAX_FORM_CHOICES {
                return Err(format!(
                    "property {key:?} has {} choices (at most {MAX_FORM_CHOICES})",
                    labels.len()
                ));
            }
            let labels = labels
                .into_iter()
                .map(|l| l.chars().take(MAX_FORM_TEXT_CHARS).collect())
                .collect();
            Ok(Property {
                key: key.clone(),
                prompt,
                labels,
                kind,
                default: p.get("default").cloned(),
                required: required.contains(&key.as_str()),
            })
        })
        .collect()
}

/// How a free-text value is written in a choice or a hint.
fn shown(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string)
}

impl Property {
    /// The form question asking this property.
    fn field(&self) -> FormField {
        let (id, prompt) = (self.key.clone(), self.prompt.clone());
        let position = |values: &[Value], v: &Value| values.iter().position(|x| x == v);
        match &self.kind {
            Kind::Choice { values } => FormField::Pick {
                id,
                prompt,
                choices: self.labels.clone(),
                default_id: self.default.as_ref().and_then(|d| position(values, d)),
                allow_free_text: false,
                free_text_placeholder: None,
            },
            Kind::Multi { values, .. } => FormField::MultiChoice {
                id,
                prompt,
                choices: self.labels.clone(),
                default_ids: self.default.as_ref().and_then(Value::as_array).map(|d| {
                    d.iter()
                        .filter_map(|v| position(values, v))
                        .collect::<Vec<_>>()
                }),
                allow_free_text: false,
                free_text_placeholder: None,
            },
            Kind::YesNo => FormField::YesNo {
                id,
                prompt,
                default_value: self.default.as_ref().and_then(Value::as_bool),
            },
            Kind::Text { .. } | Kind::Number { .. } => FormField::Pick {
                id,
                prompt,
                choices: Vec::new(),
                default_id: None,
                allow_free_text: true,
                free_text_placeholder: Some(self.placeholder()),
            },
        }
    }

    /// The free-text box's hint: what the answer must be, and what an empty answer gives.
    fn placeholder(&self) -> String {
        let hint = self.hint();
        match &self.default {
            Some(d) => {
                let d: String = shown(d).chars().take(MAX_FORM_TEXT_CHARS / 2).collect();
                format!("{hint} (empty: {d})")
            }
            None => hint,
        }
    }

    /// The free-text box's hint: what the answer must be.
    fn hint(&self) -> String {
        let range = |min: Option<String>, max: Option<String>| match (min, max) {
            (Some(a), Some(b)) => format!(" from {a} to {b}"),
            (Some(a), None) => format!(" of at least {a}"),
            (None, Some(b)) => format!(" of at most {b}"),
            (None, None) => String::new(),
        };
        match &self.kind {
            Kind::Number { integer, min, max } => format!(
                "{}{}",
                if *integer {
                    "a whole number"
                } else {
                    "a number"
                },
                range(min.map(|v| v.to_string()), max.map(|v| v.to_string()))
            ),
            Kind::Text { format, .. } => match format.as_deref() {
                Some("email") => "an email address".into(),
                Some("uri") => "a URI (https://…)".into(),
                Some("date") => "a date (YYYY-MM-DD)".into(),
                Some("date-time") => "a date and time (YYYY-MM-DDThh:mm:ssZ)".into(),
                _ => "text".into(),
            },
            _ => String::new(),
        }
    }

    /// The value `answer` gives this property: `Ok(None)` leaves it out, `Err` says what is
    /// wrong with it.
    fn read(&self, answer: Option<&FieldAnswer>) -> Result<Option<Value>, String> {
        let name = &self.prompt;
        let unanswered = || match (&self.default, self.required) {
            (Some(d), _) => Ok(Some(d.clone())),
            (None, false) => Ok(None),
            (None, true) => Err(format!("“{name}” needs an answer")),
        };
        match (&self.kind, answer) {
            (_, None) => unanswered(),
            (Kind::Choice { values }, Some(FieldAnswer::Pick { selected, .. })) => {
                match usize::try_from(*selected).ok().and_then(|i| values.get(i)) {
                    Some(v) => Ok(Some(v.clone())),
                    None => unanswered(),
                }
            }
            (Kind::Multi { values, min, max }, Some(FieldAnswer::MultiChoice { selected, .. })) => {
                let chosen: Vec<Value> = selected
                    .iter()
                    .filter_map(|i| values.get(*i).cloned())
                    .collect();
                let n = chosen.len() as u64;
                if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                    let (a, b) = (
                        min.unwrap_or(0),
                        max.map_or("any".into(), |m| m.to_string()),
                    );
                    return Err(format!("“{name}” takes {a} to {b} choices, not {n}"));
                }
                Ok(Some(Value::Array(chosen)))
            }
            (Kind::YesNo, Some(FieldAnswer::YesNo { value })) => Ok(Some(Value::Bool(*value))),
            (
                Kind::Text { .. } | Kind::Number { .. },
                Some(FieldAnswer::Pick { selected, text }),
            ) => {
                let typed = match (selected, text) {
                    (-1, Some(t)) if !t.trim().is_empty() => t.trim(),
                    _ => return unanswered(),
                };
                self.check(typed).map(Some)
            }
            (_, Some(_)) => Err(format!("“{name}” got an answer of another kind")),
        }
    }

    /// The typed `text` as this property's value, or what is wrong with it.
    fn check(&self, text: &str) -> Result<Value, String> {
        let name = &self.prompt;
        match &self.kind {
            Kind::Number { integer, min, max } => {
                let value: f64 = text
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| format!("“{name}”: {text:?} is not a number"))?;
                if *integer && value.fract() != 0.0 {
                    return Err(format!("“{name}”: {text:?} is not a whole number"));
                }
                if min.is_some_and(|m| value < m) || max.is_some_and(|m| value > m) {
                    return Err(format!("“{name}”: {text} is not {}", self.hint()));
                }
                Ok(if *integer {
                    json!(value as i64)
                } else {
                    json!(value)
                })
            }
            Kind::Text { min, max, format } => {
                let chars = text.chars().count() as u64;
                if min.is_some_and(|m| chars < m) || max.is_some_and(|m| chars > m) {
                    return Err(format!(
                        "“{name}” takes {} to {} characters, not {chars}",
                        min.unwrap_or(0),
                        max.unwrap_or(MAX_FREE_TEXT_CHARS as u64)
                    ));
                }
                if !fits_format(format.as_deref(), text) {
                    return Err(format!("“{name}”: {text:?} is not {}", self.hint()));
                }
                Ok(Value::String(text.to_string()))
            }
            _ => Err(format!("“{name}” takes no typed answer")),
        }
    }
}

/// Whether `text` looks like the string `format` (the checks a form would make; the server
/// checks again).
fn fits_format(format: Option<&str>, text: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let date = |s: &str| {
        let parts: Vec<&str> = s.split('-').collect();
        matches!(parts.as_slice(), [y, m, d] if y.len() == 4 && m.len() == 2 && d.len() == 2
            && digits(y) && digits(m) && digits(d)
            && (1..=12).contains(&m.parse::<u8>().unwrap_or(0))
            && (1..=31).contains(&d.parse::<u8>().unwrap_or(0)))
    };
    match format {
        Some("email") => text.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !text.contains(char::is_whitespace)
        }),
        Some("uri") => {
            text.split_once(':').is_some_and(|(scheme, rest)| {
                !rest.is_empty()
                    && scheme
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            }) && !text.contains(char::is_whitespace)
        }
        Some("date") => date(text),
        Some("date-time") => text
            .split_once(['T', 't'])
            .is_some_and(|(d, time)| date(d) && time.len() >= 8 && time.as_bytes()[2] == b':'),
        _ => true,
    }
}

/// Asks the conversation `message` with `schema`; what the server gets back.
pub async fn ask(sink: &dyn TurnSink, server: &str, message: &str, schema: &Value) -> Answer {
    let properties = match properties(schema) {
        Ok(p) => p,
        Err(e) => {
            log::info!("MCP server {server}: elicitation declined: its schema has {e}");
            return Answer::Decline;
        }
    };
    let heading: String = format!("{server} asks: {message}")
        .chars()
        .take(MAX_FORM_TEXT_CHARS)
        .collect();
    let mut content = Map::new();
    for page in properties.chunks(MAX_FORM_FIELDS) {
        match ask_page(sink, server, &heading, page).await {
            Ok(values) => content.extend(values),
            Err(answer) => return answer,
        }
    }
    Answer::Accept(Value::Object(content))
}

/// Asks one form of at most [`MAX_FORM_FIELDS`] properties until its answers fit (or
/// [`MAX_ATTEMPTS`] run out); the values, or the answer that ends the elicitation.
async fn ask_page(
    sink: &dyn TurnSink,
    server: &str,
    heading: &str,
    page: &[Property],
) -> Result<Map<String, Value>, Answer> {
    if page.is_empty() {
        return Ok(Map::new());
    }
    let mut message = heading.to_string();
    for attempt in 1..=MAX_ATTEMPTS {
        let form = QuestionForm {
            message: Some(message.chars().take(MAX_FORM_TEXT_CHARS).collect()),
            fields: page.iter().map(Property::field).collect(),
            paged: None,
        };
        if let Err(e) = form.check() {
            log::info!("MCP server {server}: elicitation declined: {e}");
            return Err(Answer::Decline);
        }
        let response: QuestionFormResponse = match sink.ask_form(form, false).await {
            Ok(r) => r,
            Err(e) => {
                log::info!("MCP server {server}: elicitation not answered: {e}");
                return Err(Answer::Cancel);
            }
        };
        if response.cancelled {
            log::info!("MCP server {server}: elicitation dismissed: declined");
            return Err(Answer::Decline);
        }
        let mut values = Map::new();
        let mut wrong = Vec::new();
        for property in page {
            match property.read(response.answers.get(&property.key)) {
                Ok(Some(v)) => {
                    values.insert(property.key.clone(), v);
                }
                Ok(None) => {}
                Err(e) => wrong.push(e),
            }
        }
        if wrong.is_empty() {
            return Ok(values);
        }
        log::info!(
            "MCP server {server}: elicitation answer {attempt} of {MAX_ATTEMPTS} does not fit: {}",
            wrong.join("; ")
        );
        message = format!("{heading}\nPlease correct: {}", wrong.join("; "));
    }
    Err(Answer::Decline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything_schema() -> Value {
        json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "title": "String", "description": "Your full, legal name"},
            "check": {"type": "boolean", "description": "Agree?"},
            "email": {"type": "string", "format": "email"},
            "integer": {"type": "integer", "minimum": 1, "maximum": 100, "default": 42},
            "pet": {"type": "string", "enum": ["pet-1", "pet-2"], "enumNames": ["Cats", "Dogs"], "default": "pet-2"},
            "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}, {"const": "h2"}]},
            "fish": {"type": "array", "minItems": 1, "maxItems": 2,
                     "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Trout"}, {"const": "f3"}]},
                     "default": ["f1"]}
        }})
    }

    /// Properties come in the order of their names (serde_json's map is sorted).
    #[test]
    fn schema_becomes_a_form_with_its_defaults() {
        let props = properties(&everything_schema()).unwrap();
        let fields: Vec<Value> = props
            .iter()
            .map(|p| serde_json::to_value(p.field()).unwrap())
            .collect();
        assert_eq!(
            fields,
            vec![
                json!({"id": "check", "kind": "yesNo", "prompt": "Agree?"}),
                json!({"id": "email", "kind": "pick", "prompt": "email", "choices": [], "allowFreeText": true, "freeTextPlaceholder": "an email address"}),
                json!({"id": "fish", "kind": "multiChoice", "prompt": "fish", "choices": ["Tuna", "Trout", "f3"], "defaultIds": [0]}),
                json!({"id": "hero", "kind": "pick", "prompt": "hero", "choices": ["Superman", "h2"]}),
                json!({"id": "integer", "kind": "pick", "prompt": "integer", "choices": [], "allowFreeText": true, "freeTextPlaceholder": "a whole number from 1 to 100 (empty: 42)"}),
                json!({"id": "name", "kind": "pick", "prompt": "Your full, legal name", "choices": [], "allowFreeText": true, "freeTextPlaceholder": "text"}),
                json!({"id": "pet", "kind": "pick", "prompt": "pet", "choices": ["Cats", "Dogs"], "defaultId": 1}),
            ]
        );
    }

    #[test]
    fn answers_are_read_and_checked() {
        let props = properties(&everything_schema()).unwrap();
        let by = |k: &str| props.iter().find(|p| p.key == k).unwrap();
        let pick = |s: i64, t: Option<&str>| FieldAnswer::Pick {
            selected: s,
            text: t.map(str::to_string),
        };
        assert_eq!(
            by("name").read(None),
            Err("“Your full, legal name” needs an answer".into())
        );
        assert_eq!(
            by("name").read(Some(&pick(-1, Some(" Ada ")))),
            Ok(Some(json!("Ada")))
        );
        assert_eq!(by("email").read(None), Ok(None));
        assert!(by("email").read(Some(&pick(-1, Some("nope")))).is_err());
        assert_eq!(
            by("email").read(Some(&pick(-1, Some("a@b.org")))),
            Ok(Some(json!("a@b.org")))
        );
        assert_eq!(by("integer").read(None), Ok(Some(json!(42))));
        assert_eq!(
            by("integer").read(Some(&pick(-1, Some("7")))),
            Ok(Some(json!(7)))
        );
        assert_eq!(
            by("integer").read(Some(&pick(-1, Some("500")))),
            Err("“integer”: 500 is not a whole number from 1 to 100".into())
        );
        assert!(by("integer").read(Some(&pick(-1, Some("7.5")))).is_err());
        assert!(by("integer").read(Some(&pick(-1, Some("seven")))).is_err());
        assert_eq!(
            by("pet").read(Some(&pick(0, None))),
            Ok(Some(json!("pet-1")))
        );
        assert_eq!(by("hero").read(None), Ok(None));
        let multi = |s: Vec<usize>| FieldAnswer::MultiChoice {
            selected: s,
            text: None,
        };
        assert_eq!(
            by("fish").read(Some(&multi(vec![1, 2]))),
            Ok(Some(json!(["f2", "f3"])))
        );
        assert!(by("fish").read(Some(&multi(vec![0, 1, 2]))).is_err());
        assert!(by("check").read(Some(&pick(0, None))).is_err());
    }

    #[test]
    fn formats_and_unaskable_schemas() {
        assert!(fits_format(Some("date"), "1815-12-10"));
        assert!(!fits_format(Some("date"), "1815-13-10"));
        assert!(fits_format(Some("date-time"), "1815-12-10T08:00:00Z"));
        assert!(fits_format(Some("uri"), "https://example.org/x"));
        assert!(!fits_format(Some("uri"), "example dot org"));
        assert!(properties(&json!({"properties": {"x": {"type": "object"}}})).is_err());
        let many: Map<String, Value> = (0..=MAX_FIELDS)
            .map(|i| (format!("p{i}"), json!({"type": "boolean"})))
            .collect();
        assert!(properties(&json!({ "properties": many })).is_err());
    }
}
