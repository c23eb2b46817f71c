//! The `builtin` provider: offline and deterministic, so the whole agent loop (tool calls,
//! tool results, final answer) runs in tests and on machines without a model. It reads the
//! newest user message: `run <tool> {json}` calls any offered tool by name (a client agent's
//! action is `<agent>__<action>`; the JSON object, optional, is the tool's input), arithmetic
//! goes to `calculate`, "time" to `get_current_time` (a place "in Tokyo" is looked up in the tz
//! database), "weather" to `get_weather`, "ask me …?" to `ask_user`; once tool results are in,
//! it answers with them. A question or request it cannot handle gets a plain "cannot" naming
//! what it can do; any other text is echoed (`echo: <text>`, what the tests and the load
//! harness run).

use serde_json::{json, Value};

use super::{
    ChatMessage, ContentBlock, LocalBoxFuture, Provider, ProviderError, ProviderRequest,
    ProviderResponse, Role,
};

/// The offline provider.
#[derive(Debug, Default, Clone)]
pub struct BuiltinProvider;

impl Provider for BuiltinProvider {
    fn name(&self) -> &str {
        "builtin"
    }

    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let response = respond(&request);
        Box::pin(async move { Ok(response) })
    }
}

fn text(t: impl Into<String>) -> ProviderResponse {
    ProviderResponse {
        content: vec![ContentBlock::Text { text: t.into() }],
    }
}

fn tool(id: String, name: &str, input: serde_json::Value) -> ProviderResponse {
    ProviderResponse {
        content: vec![ContentBlock::ToolUse {
            id,
            name: name.to_string(),
            input,
        }],
    }
}

fn respond(request: &ProviderRequest) -> ProviderResponse {
    let Some(last) = request.all_messages().next_back() else {
        return text("Hello! Ask me to calculate something, for the time or the weather.");
    };
    // Tool results are in: answer with them.
    let results: Vec<(&str, bool)> = last
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    if last.role == Role::User && !results.is_empty() {
        let asked = last_user_text(request.all_messages()).unwrap_or_default();
        return text(
            results
                .iter()
                .map(|(c, err)| {
                    if *err {
                        format!("Sorry, that did not work: {c}")
                    } else if asked.to_lowercase().contains("ask me")
                        || asked.ends_with('?') && c.starts_with("answer:")
                    {
                        format!("You answered {}.", c.trim_start_matches("answer:").trim())
                    } else {
                        c.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    let user = last.joined_text();
    let lower = user.to_lowercase();
    let call_id = format!("call_{}", request.message_count());
    let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
    if lower.starts_with("run ") {
        return run_tool(user[4..].trim(), request, call_id);
    }
    if let Some(q) = lower
        .strip_prefix("ask me ")
        .filter(|_| offered("ask_user"))
    {
        let private = q.starts_with("privately ");
        let q = q.strip_prefix("privately ").unwrap_or(q);
        let question = user[user.len() - q.len()..].trim().to_string();
        let input = json!({"question": question, "choices": ["Yes", "No"], "private": private});
        return tool(call_id, "ask_user", input);
    }
    if lower.contains("weather") && offered("get_weather") {
        let location = after_word(&user, " in ").unwrap_or_else(|| "Seattle".to_string());
        return tool(call_id, "get_weather", json!({"location": location}));
    }
    if lower.contains("time") && offered("get_current_time") {
        return match time_zone_asked(&user) {
            Ok(zone) => tool(call_id, "get_current_time", json!({"timezone": zone})),
            Err(place) => text(format!(
                "I don't know the time zone of \"{place}\". Name a city (\"time in Tokyo\") or \
                 an IANA zone (\"time in Europe/Paris\")."
            )),
        };
    }
    if let Some(expr) = arithmetic(&user).filter(|_| offered("calculate")) {
        return tool(call_id, "calculate", json!({"expression": expr}));
    }
    if is_question(&lower) {
        return text(format!(
            "I can't answer that: I am Roundtable's offline builtin provider, not a language \
             model. I can calculate (\"what is 2+3\"), tell the time (\"time in Tokyo\") and \
             the weather (\"weather in Paris\"), and ask you a question (\"ask me …\"). \
             Start the server with `--provider openai` for a model. You said: {user}"
        ));
    }
    text(format!("echo: {user}"))
}

/// The zone a time request names: an IANA name or "UTC" among its words, else the place after
/// its last " in " (through the tz database), else UTC. `Err(place)` for a place the database
/// does not know.
fn time_zone_asked(user: &str) -> Result<String, String> {
    let named = user
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '/' && c != '_'))
        .find(|w| w.contains('/') || *w == "UTC");
    if let Some(zone) = named {
        return Ok(zone.to_string());
    }
    match after_word(user, " in ") {
        Some(place) => super::tools::zone_for_place(&place).ok_or(place),
        None => Ok("UTC".to_string()),
    }
}

/// Whether the text asks something (a question mark, or a question / request word first),
/// as opposed to a statement the provider echoes.
fn is_question(lower: &str) -> bool {
    const ASKING: [&str; 14] = [
        "what", "who", "why", "how", "when", "where", "which", "can", "could", "would", "is",
        "are", "tell", "please",
    ];
    let first = lower.split_whitespace().next().unwrap_or("");
    lower.trim_end().ends_with('?')
        || ASKING.contains(&first.trim_matches(|c: char| !c.is_alphanumeric()))
}

/// `run <tool> [{json}]`: a call of the offered tool `<tool>` with the JSON object as its input
/// (`{}` when absent); a tool that is not offered, or input that is not a JSON object, is
/// answered in text.
fn run_tool(rest: &str, request: &ProviderRequest, call_id: String) -> ProviderResponse {
    let (name, params) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !request.tools.iter().any(|t| t.name == name) {
        let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        return text(format!(
            "No tool named \"{name}\" is offered here. Offered: {}.",
            names.join(", ")
        ));
    }
    let input = match params.trim() {
        "" => json!({}),
        params => match serde_json::from_str::<Value>(params) {
            Ok(v) if v.is_object() => v,
            Ok(_) => return text(format!("The input of run {name} must be a JSON object.")),
            Err(e) => return text(format!("Could not read the input of run {name}: {e}.")),
        },
    };
    tool(call_id, name, input)
}

fn last_user_text<'a>(
    messages: impl DoubleEndedIterator<Item = &'a ChatMessage>,
) -> Option<String> {
    messages
        .rev()
        .find(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }))
        })
        .map(ChatMessage::joined_text)
}

fn after_word(text: &str, word: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let at = lower.rfind(word)? + word.len();
    let rest = text[at..].trim().trim_end_matches(['?', '.', '!']).trim();
    (!rest.is_empty()).then(|| rest.to_string())
}

/// The arithmetic part of a request like "what is 2+3?": the longest run of number, operator,
/// parenthesis and space characters that holds a digit and an operator.
fn arithmetic(text: &str) -> Option<String> {
    let is_expr = |c: char| c.is_ascii_digit() || "+-*/^(). ".contains(c);
    let mut best: Option<&str> = None;
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), '\0')))
    {
        match (is_expr(c) && c != '\0', start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let run = text[s..i].trim().trim_end_matches(['.', ' ']);
                let has_digit = run.chars().any(|c| c.is_ascii_digit());
                let has_op = run.chars().skip(1).any(|c| "+-*/^".contains(c));
                if has_digit && has_op && best.is_none_or(|b| run.len() > b.len()) {
                    best = Some(run);
                }
                start = None;
            }
            _ => {}
        }
    }
    best.map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ToolSpec;

    fn req(messages: Vec<ChatMessage>) -> ProviderRequest {
        let tools = ["calculate", "get_current_time", "get_weather", "ask_user"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                input_schema: json!({}),
            })
            .collect();
        ProviderRequest::new(String::new(), messages, tools)
    }

    #[test]
    fn picks_tools_and_answers_with_results() {
        let r = respond(&req(vec![ChatMessage::text(Role::User, "what is 2+3")]));
        assert!(
            matches!(&r.content[0], ContentBlock::ToolUse { name, input, .. } if name == "calculate" && input["expression"] == "2+3")
        );
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "What's the weather in Paris?",
        )]));
        assert!(
            matches!(&r.content[0], ContentBlock::ToolUse { input, .. } if input["location"] == "Paris")
        );
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "time in Europe/Paris please",
        )]));
        assert!(
            matches!(&r.content[0], ContentBlock::ToolUse { input, .. } if input["timezone"] == "Europe/Paris")
        );
        let r = respond(&req(vec![
            ChatMessage::text(Role::User, "what is 2+3"),
            ChatMessage {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: "5".into(),
                    is_error: false,
                }],
            },
        ]));
        assert_eq!(r.content, vec![ContentBlock::Text { text: "5".into() }]);
        let r = respond(&req(vec![ChatMessage::text(Role::User, "hello world")]));
        assert_eq!(
            r.content,
            vec![ContentBlock::Text {
                text: "echo: hello world".into()
            }]
        );
    }

    /// The only text of a response that answers in words.
    fn said(r: &ProviderResponse) -> &str {
        match &r.content[..] {
            [ContentBlock::Text { text }] => text,
            other => panic!("expected one text block, got {other:?}"),
        }
    }

    /// "in <place>" goes through the tz database; an unknown place and a question the
    /// provider cannot answer get a plain "cannot", not an echo.
    #[test]
    fn places_for_time_and_plain_refusals() {
        for (asked, zone) in [
            ("what time is it in Tokyo", "Asia/Tokyo"),
            ("What time is it in New York?", "America/New_York"),
            ("time please", "UTC"),
        ] {
            let r = respond(&req(vec![ChatMessage::text(Role::User, asked)]));
            assert!(
                matches!(&r.content[0], ContentBlock::ToolUse { name, input, .. } if name == "get_current_time" && input["timezone"] == zone),
                "{asked}: {r:?}"
            );
        }
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "what time is it in Atlantis?",
        )]));
        assert!(
            said(&r).starts_with("I don't know the time zone of \"Atlantis\""),
            "{r:?}"
        );
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "Who wrote Hamlet?",
        )]));
        assert!(said(&r).starts_with("I can't answer that"), "{r:?}");
        assert!(said(&r).ends_with("You said: Who wrote Hamlet?"), "{r:?}");
    }

    #[test]
    fn run_calls_an_offered_tool_by_name() {
        let mut r = req(vec![ChatMessage::text(
            Role::User,
            "run phone__setAlarm {\"time\": \"07:00\"}",
        )]);
        r.tools.push(ToolSpec {
            name: "phone__setAlarm".into(),
            description: String::new(),
            input_schema: json!({}),
        });
        let out = respond(&r);
        assert!(
            matches!(&out.content[0], ContentBlock::ToolUse { name, input, .. }
                if name == "phone__setAlarm" && input == &json!({"time": "07:00"})),
            "{out:?}"
        );
        // Without input: an empty object, even for a request that mentions the time.
        r.messages = vec![ChatMessage::text(Role::User, "Run phone__setAlarm")];
        assert!(
            matches!(&respond(&r).content[0], ContentBlock::ToolUse { input, .. } if input == &json!({}))
        );
        let texts = [
            ("run nope {}", "No tool named \"nope\" is offered here. Offered: calculate, get_current_time, get_weather, ask_user, phone__setAlarm."),
            ("run calculate [1]", "The input of run calculate must be a JSON object."),
            ("run calculate {oops", "Could not read the input of run calculate: key must be a string at line 1 column 2."),
        ];
        for (asked, answer) in texts {
            r.messages = vec![ChatMessage::text(Role::User, asked)];
            assert_eq!(
                respond(&r).content,
                vec![ContentBlock::Text {
                    text: answer.into()
                }]
            );
        }
    }

    #[test]
    fn finds_the_expression() {
        assert_eq!(
            arithmetic("what is (2 + 3) * 4?").as_deref(),
            Some("(2 + 3) * 4")
        );
        assert_eq!(arithmetic("call me at 555"), None);
        assert_eq!(arithmetic("2^10").as_deref(), Some("2^10"));
    }
}
