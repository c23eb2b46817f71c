//! The agent's built-in tools, one file each: [`calculate`](mod@calculate),
//! [`get_current_time`](mod@get_current_time) and [`get_weather`](mod@get_weather); and, in
//! [`interactive`], the tools that ask the people in the conversation (`ask_user`,
//! `ask_user_form`, `propose_action`), which the agent loop runs through its sink; and, in
//! [`manage_conversation`](mod@manage_conversation), conversation management in words (its
//! calls go to the requesting client, or to the server for a handoff, through the sink too).
//!
//! This module owns the list of tool specs offered to the model ([`builtin_tool_specs`]), the
//! dispatcher that runs a call by name ([`run_builtin_tool`]) and the argument helpers the tools
//! share (a JSON object, a required or optional string field, errors that name what was
//! received). Each tool's file holds its name, its spec, its `run` and the logic behind it.
//!
//! The agent loop in `actors/src/agent/` calls [`builtin_tool_specs`] when it builds a
//! provider request and [`run_builtin_tool`] for every tool call the model makes; `None`
//! means "not a built-in, route it elsewhere", `Err` becomes an `is_error` tool result.
//! Nothing here panics on any input.

pub mod calculate;
pub mod get_current_time;
pub mod get_weather;
pub mod interactive;
pub mod manage_conversation;

use serde_json::Value;

use super::ToolSpec;

pub use calculate::{calculate, format_number, CALCULATE};
pub use get_current_time::{zone_for_place, GET_CURRENT_TIME};
pub use get_weather::GET_WEATHER;
pub use manage_conversation::MANAGE_CONVERSATION;

/// The spec of `manage_conversation` (offered with the asking tools: it runs through the
/// turn's sink, see [`manage_conversation::run`]).
pub fn manage_conversation_spec() -> ToolSpec {
    manage_conversation::spec()
}

/// The specs of the three built-in tools, in a fixed order: `calculate`,
/// `get_current_time`, `get_weather`.
pub fn builtin_tool_specs() -> Vec<ToolSpec> {
    vec![
        calculate::spec(),
        get_current_time::spec(),
        get_weather::spec(),
    ]
}

/// The built-in tools a real model is offered (see
/// [`Provider::offers_demo_tools`](crate::agent::Provider::offers_demo_tools)):
/// `calculate`, and `get_current_time` unless `has_time_tool` (a tool server offers one:
/// two tools for one thing only confuse a model); never `get_weather`'s sample data.
pub fn real_tool_specs(has_time_tool: bool) -> Vec<ToolSpec> {
    let mut specs = vec![calculate::spec()];
    if !has_time_tool {
        specs.push(get_current_time::spec());
    }
    specs
}

/// Runs the built-in tool `name` with `input` (the model's JSON arguments).
///
/// Returns `None` when `name` is not a built-in tool, otherwise `Some(Ok(text))` with the
/// result text or `Some(Err(text))` with an error message meant for an `is_error` tool
/// result (missing or ill-typed fields, invalid expressions, unknown time zones, ...).
pub fn run_builtin_tool(name: &str, input: &Value) -> Option<Result<String, String>> {
    let result = match name {
        CALCULATE => calculate::run(input),
        GET_CURRENT_TIME => get_current_time::run(input),
        GET_WEATHER => get_weather::run(input),
        _ => return None,
    };
    Some(result)
}

/// The input as a JSON object, or an error naming what was received instead.
fn input_object(input: &Value) -> Result<&serde_json::Map<String, Value>, String> {
    input
        .as_object()
        .ok_or_else(|| format!("tool input must be a JSON object, got {}", json_type(input)))
}

/// The string field `field`; an error when it is absent, `null` or not a string.
fn required_str<'a>(input: &'a Value, field: &str) -> Result<&'a str, String> {
    optional_str(input, field)?
        .ok_or_else(|| format!("missing required field \"{field}\" (a string)"))
}

/// `Ok(None)` when the field is absent or `null`; an error when it is not a string.
fn optional_str<'a>(input: &'a Value, field: &str) -> Result<Option<&'a str>, String> {
    match input_object(input)?.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(format!(
            "field \"{field}\" must be a string, got {}",
            json_type(other)
        )),
    }
}

/// How an error names the JSON type it received ("a number", "an array", ...).
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn specs() {
        let specs = builtin_tool_specs();
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [CALCULATE, GET_CURRENT_TIME, GET_WEATHER]);
        for spec in &specs {
            assert!(super::super::valid_tool_name(&spec.name));
            assert_eq!(spec.input_schema["type"], "object");
            assert!(spec.input_schema["properties"].is_object());
            assert!(spec.input_schema["required"].is_array());
        }
        assert_eq!(specs[0].input_schema["required"], json!(["expression"]));
        assert_eq!(specs[1].input_schema["required"], json!([]));
        assert_eq!(specs[2].input_schema["required"], json!(["location"]));
        assert!(specs[0].description.contains("+ - * / ^"));
        assert!(specs[2].description.contains("SAMPLE"));
        assert!(specs[2].description.contains("NOT a real forecast"));
    }

    #[test]
    fn run_builtin_tool_dispatch_and_bad_input() {
        assert_eq!(
            run_builtin_tool(CALCULATE, &json!({"expression": "0.1 + 0.2"})),
            Some(Ok("0.3".to_owned()))
        );
        assert_eq!(
            run_builtin_tool(CALCULATE, &json!({"expression": "(2+3)*4"})),
            Some(Ok("20".to_owned()))
        );
        assert_eq!(
            run_builtin_tool(CALCULATE, &json!({"expression": "1/0"})),
            Some(Err("division by zero at position 2".to_owned()))
        );
        assert_eq!(run_builtin_tool("no_such_tool", &json!({})), None);
        assert_eq!(run_builtin_tool("", &json!({})), None);
        assert_eq!(
            run_builtin_tool("Calculate", &json!({"expression": "1"})),
            None
        );

        let cases = [
            (
                CALCULATE,
                json!({}),
                "missing required field \"expression\"",
            ),
            (
                CALCULATE,
                json!({"expression": 42}),
                "must be a string, got a number",
            ),
            (
                CALCULATE,
                json!({"expression": null}),
                "missing required field",
            ),
            (CALCULATE, json!({"expression": ["1"]}), "got an array"),
            (
                CALCULATE,
                json!("1+1"),
                "must be a JSON object, got a string",
            ),
            (CALCULATE, Value::Null, "must be a JSON object, got null"),
            (
                GET_WEATHER,
                json!({}),
                "missing required field \"location\"",
            ),
            (GET_WEATHER, json!({"location": true}), "got a boolean"),
            (
                GET_WEATHER,
                json!([1, 2]),
                "must be a JSON object, got an array",
            ),
            (GET_CURRENT_TIME, json!({"timezone": {}}), "got an object"),
            (
                GET_CURRENT_TIME,
                json!(3),
                "must be a JSON object, got a number",
            ),
        ];
        for (tool, input, expected) in cases {
            let e = run_builtin_tool(tool, &input).unwrap().unwrap_err();
            assert!(e.contains(expected), "{tool} {input}: {e}");
        }
    }
}
