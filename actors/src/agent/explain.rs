//! `@explain <request> => <action>`: TypeAgent's form of `@explain` (what `agent-cli run
//! explain` sends), which names the action the request was translated to. Parsed with
//! TypeAgent's rules and error texts (`RequestAction.fromString` in its agent cache); the
//! explanation says which tool each action is here and, for each parameter value, which
//! words of the request it comes from, or that the request does not say it (inferred).
//! No model is asked: the translation is given, and the mapping is read off the text.
//!
//! Used by `conversation/turn_events.rs` (`start_plan`); `@explain <request>` without `=>` keeps
//! Roundtable's own meaning (the plan a model would make).

use serde_json::{Map, Value};

use super::turn::{describe_plan, plan, TurnInput, SERVER_SEPARATOR};

/// What TypeAgent's errors quote as the accepted forms.
const FORMAT: &str = "'<request> => translator.action(<parameters>)' or '<request> => [ translator.action1(<parameters1>), translator.action2(<parameters2>), ... ]'";

/// The separator between the request and its actions.
pub const SEPARATOR: &str = "=>";

/// Most explanations one `--repeat` asks for: each may be a model call.
pub const MAX_REPEAT: u64 = 16;

/// TypeAgent's flags of `@dispatcher explain` (its `ExplainCommandHandler`: `--repeat`,
/// `--concurrency`, `--filterValueInRequest`, `--filterReference`), read off the front and the
/// end of the text so the request is not sent with them as words. The two filters steer
/// TypeAgent's cache explainer, which Roundtable has none of: they are taken and change
/// nothing here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainFlags {
    /// Explanations to make (1 to [`MAX_REPEAT`]).
    pub repeat: u64,
    /// How many of them run at once (at least 1; TypeAgent's default 5).
    pub concurrency: u64,
    /// `--filterValueInRequest` (TypeAgent's cache explainer only).
    pub filter_value_in_request: bool,
    /// `--filterReference` (TypeAgent's cache explainer only).
    pub filter_reference: bool,
}

impl Default for ExplainFlags {
    fn default() -> ExplainFlags {
        ExplainFlags {
            repeat: 1,
            concurrency: 5,
            filter_value_in_request: false,
            filter_reference: false,
        }
    }
}

/// What one flag token is.
enum Flag {
    /// `--repeat` / `--concurrency`, with its value when written `--name=value`.
    Number(&'static str, Option<String>),
    /// `--filterValueInRequest` / `--filterReference`, with its value when written `=value`.
    Switch(&'static str, Option<String>),
}

/// The flag `token` is, if it is one of the four.
fn flag(token: &str) -> Option<Flag> {
    let name = token.strip_prefix("--")?;
    let (name, value) = match name.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (name, None),
    };
    Some(match name {
        "repeat" => Flag::Number("repeat", value),
        "concurrency" => Flag::Number("concurrency", value),
        "filterValueInRequest" => Flag::Switch("filterValueInRequest", value),
        "filterReference" => Flag::Switch("filterReference", value),
        _ => return None,
    })
}

impl ExplainFlags {
    /// Sets flag `name` from `value` (`None`: a switch given bare), or says why it cannot.
    fn set(&mut self, name: &str, value: Option<&str>) -> Result<(), String> {
        match name {
            "repeat" | "concurrency" => {
                let value = value.unwrap_or("");
                let n: u64 = value.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!(
                        "Invalid value '{value}' for flag '--{name}': expected a positive integer"
                    )
                })?;
                if name == "repeat" {
                    if n > MAX_REPEAT {
                        return Err(format!(
                            "Invalid value '{value}' for flag '--repeat': at most {MAX_REPEAT}"
                        ));
                    }
                    self.repeat = n;
                } else {
                    self.concurrency = n;
                }
            }
            _ => {
                let on = match value {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(other) => {
                        return Err(format!(
                            "Invalid value '{other}' for flag '--{name}': expected true or false"
                        ))
                    }
                };
                if name == "filterValueInRequest" {
                    self.filter_value_in_request = on;
                } else {
                    self.filter_reference = on;
                }
            }
        }
        Ok(())
    }
}

/// `input` without TypeAgent's explain flags at its front and end, and the flags; an exact
/// error for a flag whose value is wrong. A flag's value is the next word (`--repeat 3`) or
/// follows `=` (`--repeat=3`); a switch takes `true` / `false` after it, or nothing. Flags in
/// the middle are words of the request (they could be inside its action's JSON).
pub fn take_flags(input: &str) -> Result<(String, ExplainFlags), String> {
    let mut flags = ExplainFlags::default();
    let words: Vec<(usize, &str)> = input
        .split_whitespace()
        .map(|w| (w.as_ptr() as usize - input.as_ptr() as usize, w))
        .collect();
    // The words a flag takes from `at` (itself and its value), setting it in `flags`; 0 when
    // the word there is not a flag.
    let take = |at: usize, flags: &mut ExplainFlags| -> Result<usize, String> {
        match words.get(at).and_then(|(_, w)| flag(w)) {
            None => Ok(0),
            Some(Flag::Number(name, Some(v))) | Some(Flag::Switch(name, Some(v))) => {
                flags.set(name, Some(&v)).map(|()| 1)
            }
            Some(Flag::Number(name, None)) => {
                let value = words.get(at + 1).map(|(_, w)| *w);
                flags.set(name, value).map(|()| 2)
            }
            Some(Flag::Switch(name, None)) => match words.get(at + 1).map(|(_, w)| *w) {
                Some(v @ ("true" | "false")) => flags.set(name, Some(v)).map(|()| 2),
                _ => flags.set(name, None).map(|()| 1),
            },
        }
    };
    let mut first = 0;
    loop {
        match take(first, &mut flags)? {
            0 => break,
            n => first += n,
        }
    }
    // From the end: a flag and its value that reach the end exactly, again and again (a
    // flag-like word whose group stops short is a word of the request, and sets nothing).
    let mut last = words.len();
    'outer: while last > first {
        for start in (first..last).rev().take(2) {
            let mut trial = flags.clone();
            let taken = take(start, &mut trial)?;
            if taken > 0 && start + taken == last {
                flags = trial;
                last = start;
                continue 'outer;
            }
        }
        break;
    }
    let text = match (words.get(first), last > first) {
        (Some(&(from, _)), true) => {
            let (to, word) = words[last - 1];
            input[from..to + word.len()].to_string()
        }
        _ => String::new(),
    };
    Ok((text, flags))
}

/// The line that heads a repeated explanation: how many ran and how many succeeded.
pub fn repeated_header(flags: &ExplainFlags, succeeded: u64) -> String {
    format!(
        "Repeated {} times with concurrency {}: {succeeded} of {} succeeded.\n\n",
        flags.repeat, flags.concurrency, flags.repeat
    )
}

/// A model's plan for `request`, made `flags.repeat` times, at most `flags.concurrency` at
/// once (one [`TurnInput`] each): the first plan described ([`describe_plan`]), headed by how
/// many succeeded when there were several; the first error when none did.
pub async fn plan_repeated(
    request: &str,
    inputs: Vec<TurnInput>,
    flags: &ExplainFlags,
    explain: bool,
) -> Result<String, String> {
    use futures_util::StreamExt as _;
    let results: Vec<_> = futures_util::stream::iter(inputs.into_iter().map(plan))
        .buffered(flags.concurrency.max(1) as usize)
        .collect()
        .await;
    let succeeded = results.iter().filter(|r| r.is_ok()).count() as u64;
    let first = results
        .iter()
        .find(|r| r.is_ok())
        .or(results.first())
        .cloned()
        .unwrap_or_else(|| Ok(Vec::new()));
    let shown = first
        .map(|blocks| describe_plan(request, &blocks, explain))
        .map_err(|e| e.to_string())?;
    Ok(if flags.repeat > 1 {
        repeated_header(flags, succeeded) + &shown
    } else {
        shown
    })
}

/// One action of the given translation.
#[derive(Debug, Clone, PartialEq)]
pub struct GivenAction {
    /// `translator` of `translator.action(…)` (empty when not given).
    pub schema: String,
    /// `action`.
    pub action: String,
    /// The parameters object, when given.
    pub parameters: Option<Map<String, Value>>,
}

/// `<request> => <actions>` split and parsed, or TypeAgent's error text.
pub fn parse_request_action(input: &str) -> Result<(String, Vec<GivenAction>), String> {
    let trimmed = input.trim();
    let Some(at) = trimmed.find(SEPARATOR) else {
        return Err(format!(
            "'{SEPARATOR}' not found. Input must be in the form of {FORMAT}"
        ));
    };
    let request = trimmed[..at].trim().to_string();
    let actions = trimmed[at + SEPARATOR.len()..].trim();
    let parsed = if actions.starts_with('[') {
        parse_actions(actions)?
    } else {
        vec![parse_action(actions, None)?]
    };
    Ok((request, parsed))
}

/// `[a(…), b(…)]`: split at the top-level commas (outside parentheses, brackets, braces and
/// strings), each parsed as one action.
fn parse_actions(actions: &str) -> Result<Vec<GivenAction>, String> {
    if !actions.ends_with(']') {
        return Err(format!(
            "Missing terminating ']'. Input must be in the form of {FORMAT}"
        ));
    }
    let inner = &actions[1..actions.len() - 1];
    let mut parts = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, c) in inner.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| parse_action(p.trim(), Some(i)))
        .collect()
}

/// `translator.action({json})`, with TypeAgent's error texts.
fn parse_action(action: &str, index: Option<usize>) -> Result<GivenAction, String> {
    let at = index.map_or(String::new(), |i| format!("Action {i}: "));
    let Some(left) = action.find('(') else {
        return Err(format!(
            "{at}Missing '('. Input must be in the form of {FORMAT}"
        ));
    };
    let function = &action[..left];
    let (schema, name) = function.rsplit_once('.').unwrap_or(("", function));
    if name.is_empty() {
        return Err(format!(
            "{at}Unable to parse action name from '{function}'. Input must be in the form of {FORMAT}"
        ));
    }
    if !action.ends_with(')') {
        return Err(format!(
            "{at}Missing terminating ')'. Input must be in the form of {FORMAT}"
        ));
    }
    let params = action[left + 1..action.len() - 1].trim();
    let parameters = if params.is_empty() {
        None
    } else {
        match serde_json::from_str::<Value>(params) {
            Ok(Value::Object(map)) => Some(map),
            Ok(_) => {
                return Err(format!(
                    "{at}Parameters must be a JSON object: {params}. Input must be in the form of {FORMAT}"
                ))
            }
            Err(e) => {
                return Err(format!(
                    "{at}Unable to parse parameters as JSON: {e}. Input must be in the form of {FORMAT}"
                ))
            }
        }
    };
    Ok(GivenAction {
        schema: schema.to_string(),
        action: name.to_string(),
        parameters,
    })
}

/// The tool an action names here: `schema__action` for an MCP server or client agent,
/// the bare name for the assistant's own tools (`chat.calculate` or `calculate`).
pub fn tool_name(action: &GivenAction, own_source: &str) -> String {
    if action.schema.is_empty() || action.schema == own_source {
        action.action.clone()
    } else {
        format!("{}{SERVER_SEPARATOR}{}", action.schema, action.action)
    }
}

/// The explanation shown for `request => actions`: per action, the tool and whether it is
/// offered in this conversation (`offered` lists the tool names), then where each parameter
/// value comes from in the request.
pub fn explain(
    request: &str,
    actions: &[GivenAction],
    offered: &[String],
    own_source: &str,
) -> String {
    let mut out = format!("Explanation of \"{request}\":\n");
    let lowered = request.to_lowercase();
    for action in actions {
        let tool = tool_name(action, own_source);
        let full = if action.schema.is_empty() {
            action.action.clone()
        } else {
            format!("{}.{}", action.schema, action.action)
        };
        let offered_here = if offered.contains(&tool) {
            "offered in this conversation"
        } else {
            "not offered in this conversation"
        };
        out.push_str(&format!("- `{full}`: the tool `{tool}` ({offered_here})\n"));
        let mut leaves = Vec::new();
        if let Some(p) = &action.parameters {
            for (k, v) in p {
                flatten(k.clone(), v, &mut leaves);
            }
        }
        if leaves.is_empty() {
            out.push_str("  - no parameters\n");
        }
        for (path, value) in leaves {
            let shown = value.to_string();
            let words = match &value {
                Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_lowercase()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            };
            let source = match words.and_then(|w| lowered.find(&w).map(|at| (at, w.len()))) {
                Some((at, len)) => format!(
                    "from the request's words \"{}\"",
                    request.get(at..at + len).unwrap_or(&lowered[at..at + len])
                ),
                None => "not in the request's words (inferred)".to_string(),
            };
            out.push_str(&format!("  - `{path}` = {shown}: {source}\n"));
        }
    }
    out
}

/// The leaf values of `value` with their paths (`a.b`, `list[0]`).
fn flatten(path: String, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                flatten(format!("{path}.{k}"), v, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                flatten(format!("{path}[{i}]"), v, out);
            }
        }
        _ => out.push((path, value.clone())),
    }
}

#[cfg(test)]
mod tests {
    /// Issue 50 (d): TypeAgent's explain flags before or after the request are taken, not
    /// sent as words; bad values get exact errors; a flag-like word inside stays.
    #[test]
    fn typeagents_explain_flags_are_read_off_the_ends() {
        use super::*;
        let (text, flags) = take_flags(
            "--repeat 3 --filterReference play bach => player.play({\"x\": \"--concurrency 2\"}) \
             --concurrency=2 --filterValueInRequest false",
        )
        .unwrap();
        assert_eq!(
            text,
            "play bach => player.play({\"x\": \"--concurrency 2\"})"
        );
        assert_eq!(
            flags,
            ExplainFlags {
                repeat: 3,
                concurrency: 2,
                filter_value_in_request: false,
                filter_reference: true,
            }
        );
        assert_eq!(
            take_flags("what is 2+3").unwrap(),
            ("what is 2+3".to_string(), ExplainFlags::default())
        );
        assert_eq!(
            take_flags("  keep   inner  --spaces=1 x ").unwrap().0,
            "keep   inner  --spaces=1 x"
        );
        assert_eq!(
            take_flags("x --repeat many").unwrap_err(),
            "Invalid value 'many' for flag '--repeat': expected a positive integer"
        );
        assert_eq!(
            take_flags("--repeat 17 x").unwrap_err(),
            "Invalid value '17' for flag '--repeat': at most 16"
        );
        assert_eq!(
            take_flags("x --repeat").unwrap_err(),
            "Invalid value '' for flag '--repeat': expected a positive integer"
        );
        assert_eq!(
            take_flags("x --filterReference=maybe").unwrap_err(),
            "Invalid value 'maybe' for flag '--filterReference': expected true or false"
        );
        assert_eq!(take_flags("--repeat 2").unwrap().0, "");
        // A flag whose group does not reach the end is a word, and sets nothing.
        assert_eq!(
            take_flags("mention --filterReference here").unwrap(),
            (
                "mention --filterReference here".to_string(),
                ExplainFlags::default()
            )
        );
    }

    use super::*;

    #[test]
    fn one_action_and_a_list_parse() {
        let (request, actions) = parse_request_action(
            "what is the weather in Paris => chat.get_weather({\"location\":\"Paris\"})",
        )
        .unwrap();
        assert_eq!(request, "what is the weather in Paris");
        assert_eq!(actions.len(), 1);
        assert_eq!(
            (actions[0].schema.as_str(), actions[0].action.as_str()),
            ("chat", "get_weather")
        );
        let (_, two) = parse_request_action(
            "add 2 and 3, then time in Tokyo => [calculate({\"expression\":\"2+3\"}), get_current_time({\"timezone\":\"Asia/Tokyo\"})]",
        )
        .unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[1].action, "get_current_time");
        let (_, none) = parse_request_action("stop => player.pause()").unwrap();
        assert_eq!(none[0].parameters, None);
    }

    #[test]
    fn malformed_input_gets_typeagents_texts() {
        let err = |s: &str| parse_request_action(s).unwrap_err();
        assert!(err("no separator")
            .starts_with("'=>' not found. Input must be in the form of '<request> =>"));
        assert!(err("x => play").starts_with("Missing '('."));
        assert!(err("x => .(").starts_with("Unable to parse action name from '.'"));
        assert!(err("x => play(").starts_with("Missing terminating ')'."));
        assert!(err("x => [a(), b(]").starts_with("Action 1: Missing terminating ')'."));
        assert!(err("x => play([1])").starts_with("Parameters must be a JSON object"));
        assert!(err("x => play({bad})").starts_with("Unable to parse parameters as JSON"));
    }

    #[test]
    fn each_value_is_traced_to_the_request_or_said_to_be_inferred() {
        let (request, actions) = parse_request_action(
            "Weather in paris, in celsius => chat.get_weather({\"location\":\"Paris\",\"days\":3,\"opts\":{\"units\":\"celsius\"}})",
        )
        .unwrap();
        let text = explain(&request, &actions, &["get_weather".to_string()], "chat");
        assert!(
            text.contains(
                "- `chat.get_weather`: the tool `get_weather` (offered in this conversation)"
            ),
            "{text}"
        );
        assert!(
            text.contains("`location` = \"Paris\": from the request's words \"paris\""),
            "{text}"
        );
        assert!(
            text.contains("`opts.units` = \"celsius\": from the request's words \"celsius\""),
            "{text}"
        );
        assert!(
            text.contains("`days` = 3: not in the request's words (inferred)"),
            "{text}"
        );
        let other = parse_request_action("x => phone.setAlarm({})").unwrap().1;
        assert_eq!(tool_name(&other[0], "chat"), "phone__setAlarm");
        assert!(explain("x", &other, &[], "chat")
            .contains("(not offered in this conversation)\n  - no parameters"));
    }
}
