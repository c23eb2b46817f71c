//! The `builtin` provider: offline and deterministic, so the whole agent loop (tool calls,
//! tool results, final answer) runs in tests and on machines without a model. It reads the
//! newest user message: `run <tool> {json}` calls any offered tool by name (a client agent's
//! action is `<agent>__<action>`; the JSON object, optional, is the tool's input), `propose
//! <tool> {json}` proposes that call first (`propose_action`), arithmetic goes to
//! `calculate`, "time" to `get_current_time` (a place "in Tokyo" is looked up in the tz
//! database), "weather" to `get_weather`, "ask me …?" to `ask_user`. Once tool results are
//! in, it adds only what they do not already say: a tool's result is shown to everyone as its
//! own display, so repeating it as the answer printed every result twice in TypeAgent's CLI
//! (`5` / `5`); an answer to a question is told back ("You answered Yes."), anything else ends
//! the turn with no more text. Conversation management in words ("switch to my work
//! conversation", "list my conversations", "hand off my research conversation here": the
//! phrases of `builtin/phrases.rs`) calls `manage_conversation`, ahead of the other tools, so "switch to
//! my weather conversation" is a switch. A question or request it cannot handle gets a plain "cannot" naming
//! what it can do; any other text is echoed (`echo: <text>`, what the tests and the load
//! harness run).
//!
//! The ways to ask:
//! - `ask me <question>` asks everyone Yes / No; `ask me privately <question>` only the
//!   sender.
//! - `ask me and remember <question>` asks the sender with a "don't ask me this again"
//!   checkbox; once ticked, the same question is answered from the history without asking.
//! - `ask me [privately] a form [<heading>]: <question>; <question>; …` asks a form
//!   (`ask_user_form`), one field per question: `Size? S|M|L` is a pick, `Toppings? ham,
//!   olives` a multiple choice, `Deliver?` a yes / no; a last choice `…` (or `...`) adds a
//!   free-text "Other".
//!
//! It reports no token usage (`ProviderResponse::usage` is always `None`): it is not a model,
//! and an estimate would make a conversation's context meter show numbers no model ever
//! counted. So with `--provider builtin` the meter stays empty (`contextMeter: null`); the
//! meter's tests use a scripted OpenAI-compatible model that reports exact usage.

mod phrases;

use serde_json::{json, Value};

use super::tools::interactive::{ASK_USER, ASK_USER_FORM, PROPOSE_ACTION, REMEMBERED_NOTE};
use super::tools::MANAGE_CONVERSATION;
use super::{
    ContentBlock, LocalBoxFuture, Provider, ProviderError, ProviderRequest, ProviderResponse, Role,
};

/// The offline provider.
#[derive(Debug, Default, Clone)]
pub struct BuiltinProvider;

impl Provider for BuiltinProvider {
    fn name(&self) -> &str {
        "builtin"
    }

    fn acts_on_typed_words_only(&self) -> bool {
        true
    }

    fn offers_demo_tools(&self) -> bool {
        true
    }

    fn answers_in_process(&self) -> bool {
        true
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
        usage: None,
    }
}

fn tool(id: String, name: &str, input: serde_json::Value) -> ProviderResponse {
    ProviderResponse {
        content: vec![ContentBlock::ToolUse {
            id,
            name: name.to_string(),
            input,
        }],
        usage: None,
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
        // Results (and errors) are on screen already; only answers to questions are told.
        let told: Vec<String> = results
            .iter()
            .filter(|(_, err)| !*err)
            .filter_map(|(c, _)| c.strip_prefix("answer:"))
            .map(|answer| match answer.strip_suffix(REMEMBERED_NOTE) {
                Some(kept) => format!("You answered {}; I will not ask again.", kept.trim()),
                None => format!("You answered {}.", answer.trim()),
            })
            .collect();
        return match told.is_empty() {
            true => ProviderResponse {
                content: Vec::new(),
                usage: None,
            },
            false => text(told.join("\n")),
        };
    }
    let user = last.joined_text();
    let lower = user.to_lowercase();
    let call_id = format!("call_{}", request.message_count());
    let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
    if lower.starts_with("run ") {
        return match tool_call(user[4..].trim(), request) {
            Ok((name, input)) => tool(call_id, name, input),
            Err(answer) => answer,
        };
    }
    if let Some(rest) = strip_prefix_ci(&user, "propose ").filter(|_| offered(PROPOSE_ACTION)) {
        return match tool_call(rest.trim(), request) {
            Ok((name, input)) => tool(
                call_id,
                PROPOSE_ACTION,
                json!({"tool": name, "input": input}),
            ),
            Err(answer) => answer,
        };
    }
    if let Some(asked) = strip_prefix_ci(&user, "ask me ").filter(|_| offered(ASK_USER)) {
        return ask(asked, request, call_id);
    }
    if let Some(input) =
        phrases::conversation_request(&user).filter(|_| offered(MANAGE_CONVERSATION))
    {
        return tool(call_id, MANAGE_CONVERSATION, input);
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

/// `<tool> [{json}]` (after `run` or `propose`): the offered tool `<tool>` and the JSON
/// object as its input (`{}` when absent); a tool that is not offered, or input that is not
/// a JSON object, is answered in text.
fn tool_call<'a>(
    rest: &'a str,
    request: &ProviderRequest,
) -> Result<(&'a str, Value), ProviderResponse> {
    let (name, params) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !request.tools.iter().any(|t| t.name == name) {
        let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        return Err(text(format!(
            "No tool named \"{name}\" is offered here. Offered: {}.",
            names.join(", ")
        )));
    }
    let input = match params.trim() {
        "" => json!({}),
        params => match serde_json::from_str::<Value>(params) {
            Ok(v) if v.is_object() => v,
            Ok(_) => {
                return Err(text(format!(
                    "The input of run {name} must be a JSON object."
                )))
            }
            Err(e) => {
                return Err(text(format!(
                    "Could not read the input of run {name}: {e}."
                )))
            }
        },
    };
    Ok((name, input))
}

/// `text` without its ASCII `prefix`, compared without case.
fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// `ask me …` (see the module docs): `ask_user`, with `private` or `remember`, or
/// `ask_user_form`; a question answered with "remember" before is answered from the history.
fn ask(asked: &str, request: &ProviderRequest, call_id: String) -> ProviderResponse {
    let (private, asked) = match strip_prefix_ci(asked, "privately ") {
        Some(rest) => (true, rest),
        None => (false, asked),
    };
    let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
    if let Some(spec) = strip_prefix_ci(asked, "a form").filter(|_| offered(ASK_USER_FORM)) {
        let mut input = form_input(spec);
        input["private"] = private.into();
        return tool(call_id, ASK_USER_FORM, input);
    }
    if let Some(question) = strip_prefix_ci(asked, "and remember ") {
        let question = question.trim();
        if let Some(answer) = remembered(request, question) {
            return text(format!(
                "You answered {answer} before and asked me not to ask again."
            ));
        }
        let input = json!({"question": question, "choices": ["Yes", "No"], "remember": true});
        return tool(call_id, ASK_USER, input);
    }
    let input = json!({"question": asked.trim(), "choices": ["Yes", "No"], "private": private});
    tool(call_id, ASK_USER, input)
}

/// `ask_user_form`'s input from `[<heading>]: <question>; …` (see the module docs).
fn form_input(spec: &str) -> Value {
    let (message, questions) = match spec.split_once(':') {
        Some((heading, questions)) => (heading.trim(), questions),
        None => ("", spec),
    };
    let questions: Vec<Value> = questions
        .split(';')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .enumerate()
        .map(|(i, q)| {
            let id = format!("q{}", i + 1);
            let (prompt, choices) = match q.find('?') {
                Some(at) => (&q[..=at], q[at + 1..].trim()),
                None => (q, ""),
            };
            if choices.is_empty() {
                return json!({"id": id, "kind": "yesNo", "prompt": prompt});
            }
            let (kind, separator) = if choices.contains('|') {
                ("pick", '|')
            } else {
                ("multiChoice", ',')
            };
            let mut list: Vec<&str> = choices.split(separator).map(str::trim).collect();
            let free_text = matches!(list.last(), Some(&"…" | &"..."));
            if free_text {
                list.pop();
            }
            json!({"id": id, "kind": kind, "prompt": prompt, "choices": list, "allowFreeText": free_text})
        })
        .collect();
    let mut input = json!({"questions": questions});
    if !message.is_empty() {
        input["message"] = message.into();
    }
    input
}

/// The answer given earlier to `ask_user` `question` with "don't ask me this again" ticked,
/// read from the conversation's history (its tool call and tool result).
fn remembered(request: &ProviderRequest, question: &str) -> Option<String> {
    let mut asked_ids = Vec::new();
    for message in request.all_messages() {
        for block in &message.content {
            match block {
                ContentBlock::ToolUse { id, name, input }
                    if name == ASK_USER
                        && input["remember"] == true
                        && input["question"]
                            .as_str()
                            .is_some_and(|q| q.eq_ignore_ascii_case(question)) =>
                {
                    asked_ids.push(id.clone());
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error: false,
                } if asked_ids.contains(tool_use_id) => {
                    if let Some(kept) = content
                        .strip_prefix("answer:")
                        .and_then(|a| a.strip_suffix(REMEMBERED_NOTE))
                    {
                        return Some(kept.trim().to_string());
                    }
                }
                _ => {}
            }
        }
    }
    None
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
    use crate::agent::{ChatMessage, ToolSpec};

    fn req(messages: Vec<ChatMessage>) -> ProviderRequest {
        let tools = [
            "calculate",
            "get_current_time",
            "get_weather",
            "ask_user",
            "ask_user_form",
            "propose_action",
        ]
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
        // The result is on screen as the tool's own display: not said again.
        assert_eq!(r.content, vec![]);
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
            ("run nope {}", "No tool named \"nope\" is offered here. Offered: calculate, get_current_time, get_weather, ask_user, ask_user_form, propose_action, phone__setAlarm."),
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

    /// The tool call of a response that calls one.
    fn called(r: &ProviderResponse) -> (&str, &Value) {
        match &r.content[..] {
            [ContentBlock::ToolUse { name, input, .. }] => (name, input),
            other => panic!("expected one tool call, got {other:?}"),
        }
    }

    #[test]
    fn asks_forms_remembers_and_proposes() {
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "Ask me privately a form Pizza: Size? S|M|…; Toppings? ham, olives; Deliver?",
        )]));
        assert_eq!(
            called(&r),
            (
                "ask_user_form",
                &json!({"message": "Pizza", "private": true, "questions": [
                    {"id": "q1", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true},
                    {"id": "q2", "kind": "multiChoice", "prompt": "Toppings?", "choices": ["ham", "olives"], "allowFreeText": false},
                    {"id": "q3", "kind": "yesNo", "prompt": "Deliver?"}
                ]})
            )
        );
        let r = respond(&req(vec![ChatMessage::text(
            Role::User,
            "propose calculate {\"expression\": \"2*3\"}",
        )]));
        assert_eq!(
            called(&r),
            (
                "propose_action",
                &json!({"tool": "calculate", "input": {"expression": "2*3"}})
            )
        );
        // Remember: asked with the checkbox, then answered from the history.
        let ask = ChatMessage::text(Role::User, "ask me and remember Shall I?");
        let r = respond(&req(vec![ask.clone()]));
        let (name, input) = called(&r);
        assert_eq!(
            (name, input),
            (
                "ask_user",
                &json!({"question": "Shall I?", "choices": ["Yes", "No"], "remember": true})
            )
        );
        let answered = |content: String| {
            vec![
                ask.clone(),
                ChatMessage {
                    role: Role::Assistant,
                    content: r.content.clone(),
                },
                ChatMessage {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "call_1".into(),
                        content,
                        is_error: false,
                    }],
                },
            ]
        };
        let mut history = answered(format!("answer: No{REMEMBERED_NOTE}"));
        assert_eq!(
            said(&respond(&req(history.clone()))),
            "You answered No; I will not ask again."
        );
        history.push(ChatMessage::text(
            Role::User,
            "ask me and remember shall i?",
        ));
        assert_eq!(
            said(&respond(&req(history))),
            "You answered No before and asked me not to ask again."
        );
        // Not ticked: asked again.
        let mut history = answered("answer: No".into());
        assert_eq!(said(&respond(&req(history.clone()))), "You answered No.");
        history.push(ChatMessage::text(
            Role::User,
            "ask me and remember Shall I?",
        ));
        assert_eq!(called(&respond(&req(history))).0, "ask_user");
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
