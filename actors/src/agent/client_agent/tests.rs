//! Schema reading, registration checks and result texts.

use serde_json::{json, Map, Value};

use super::schema::Schema;
use super::*;

/// An Android-style schema: a copyright header, an entry union, a literal union type, a
/// commented action with parameters, one without, and a trailing field comment.
const PHONE_SCHEMA: &str = r#"// Copyright (c) Someone.
// Licensed under the MIT License.

export type PhoneAction =
    | SetAlarmAction
    | ShowAlarmsAction
    | SetTimerAction;

// A day of the week an alarm can repeat on.
export type RepeatDay = "monday" | "tuesday";

// Sets an alarm on the device.
// Use when the user asks for an alarm.
export type SetAlarmAction = {
    actionName: "setAlarm";
    parameters: {
        // Local time of day in HH:mm format.
        time: string;
        // Days the alarm repeats on.
        days?: RepeatDay[];
        label?: string; // shown on the alarm
    };
};

/** Opens the list of alarms. */
export type ShowAlarmsAction = {
    actionName: "showAlarms";
};

// A stray note, kept apart by a blank line: nobody's comment.

type SetTimerAction = {
    actionName: 'setTimer';
    parameters: { seconds: number };
};

type Unused = { actionName: "unused" };
"#;

fn ts_actions(src: &str, entry: Option<&str>) -> Result<Vec<ClientAction>, String> {
    Schema::new(ts_schema::parse(src)?).actions(entry, "phone")
}

#[test]
fn typescript_actions_with_comments_and_parameters() {
    let actions = ts_actions(PHONE_SCHEMA, Some("PhoneAction")).unwrap();
    let names: Vec<_> = actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["setAlarm", "showAlarms", "setTimer"]);
    let alarm = &actions[0];
    assert_eq!(
        alarm.description,
        "Sets an alarm on the device.\nUse when the user asks for an alarm."
    );
    assert!(alarm.has_parameters);
    assert_eq!(alarm.schema_name, "phone");
    assert_eq!(
        alarm.input_schema,
        json!({
            "type": "object",
            "properties": {
                "time": {"type": "string", "description": "Local time of day in HH:mm format."},
                "days": {"type": "array", "description": "Days the alarm repeats on.", "items": {
                    "type": "string", "enum": ["monday", "tuesday"],
                    "description": "A day of the week an alarm can repeat on."}},
                "label": {"type": "string", "description": "shown on the alarm"}
            },
            "required": ["time"]
        })
    );
    let show = &actions[1];
    assert_eq!(show.description, "Opens the list of alarms.");
    assert!(!show.has_parameters);
    assert_eq!(
        show.input_schema,
        json!({"type": "object", "properties": {}})
    );
    // Without an entry: every action type, in file order; the header is nobody's comment.
    let all = ts_actions(PHONE_SCHEMA, None).unwrap();
    let names: Vec<_> = all.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["setAlarm", "showAlarms", "setTimer", "unused"]);
    assert_eq!(all[3].description, "");
}

#[test]
fn typescript_syntax_beyond_the_basics() {
    let src = r#"
        import { Foo } from "./foo";
        const x = 3;
        interface Base { /* who */ originalRequest: string }
        // Plays a track.
        export interface PlayAction extends Base {
            actionName: "play";
            parameters: {
                "quoted-name": -1 | 2.5;
                pair: [string, number];
                tags: Array<string>;
                extra: Record<string, boolean>;
                nested: { readonly deep: (string | null)[] };
                mode: Base & { loud: true };
                any?: unknown;
                [key: string]: any;
            };
        }
    "#;
    let actions = ts_actions(src, None).unwrap();
    assert_eq!(actions.len(), 1);
    let p = &actions[0].input_schema["properties"];
    assert_eq!(
        p["quoted-name"],
        json!({"type": "number", "enum": [-1, 2.5]})
    );
    assert_eq!(
        p["pair"]["prefixItems"],
        json!([{"type": "string"}, {"type": "number"}])
    );
    assert_eq!(
        p["tags"],
        json!({"type": "array", "items": {"type": "string"}})
    );
    assert_eq!(
        p["extra"]["additionalProperties"],
        json!({"type": "boolean"})
    );
    assert_eq!(
        p["nested"]["properties"]["deep"]["items"]["anyOf"],
        json!([{"type": "string"}, {"type": "null"}])
    );
    assert_eq!(
        p["mode"]["properties"]["loud"],
        json!({"type": "boolean", "enum": [true]})
    );
    assert_eq!(p["mode"]["required"], json!(["originalRequest", "loud"]));
    assert_eq!(actions[0].input_schema["additionalProperties"], json!({}));
    assert_eq!(actions[0].description, "Plays a track.");
}

#[test]
fn typescript_errors_say_where() {
    let cases = [
        (
            "type A = {",
            "expected a field name or '}', found the end of the schema",
        ),
        (
            "type A = { a: string b: number }",
            "expected ';', ',' or '}' at line 1, column 22, found 'b'",
        ),
        (
            "type A = {\n  a: => 3 }",
            "expected a type at line 2, column 6, found '=>'",
        ),
        ("/* open", "unterminated comment at line 1, column 1"),
        (
            "type A = \"open",
            "unterminated string at line 1, column 10",
        ),
    ];
    for (src, expected) in cases {
        assert_eq!(ts_actions(src, None).unwrap_err(), expected, "{src}");
    }
    assert_eq!(
        ts_actions(PHONE_SCHEMA, Some("Nope")).unwrap_err(),
        "schema type 'Nope' is not declared in the schema"
    );
    assert!(ts_actions(PHONE_SCHEMA, Some("RepeatDay"))
        .unwrap_err()
        .starts_with("schema type 'RepeatDay' has no action types"));
    let twice = "type A = {actionName: \"a\"}; type B = {actionName: \"a\"};";
    assert_eq!(
        ts_actions(twice, None).unwrap_err(),
        "action 'a' is declared twice"
    );
    let not_object = "type A = {actionName: \"a\"; parameters: string};";
    assert_eq!(
        ts_actions(not_object, None).unwrap_err(),
        "the parameters of action 'a' (type 'A') are not an object type"
    );
    let deep = format!(
        "type A = {{actionName: \"a\"; parameters: {}}}",
        "{x: ".repeat(40)
    );
    assert!(ts_actions(&deep, None)
        .unwrap_err()
        .contains("expected a less deeply nested type"));
}

#[test]
fn every_prefix_of_a_schema_reads_or_fails_cleanly() {
    let src = format!("{PHONE_SCHEMA}\ntype E = {{ actionName: \"e\"; parameters: {{ \"a\\\"b\": `t`; c: [1, -2] }} }};");
    let actions = ts_actions(&src, None).unwrap();
    let e = actions.iter().find(|a| a.name == "e").unwrap();
    assert_eq!(
        e.input_schema["properties"]["a\"b"],
        json!({"type": "string", "enum": ["t"]})
    );
    for (i, _) in src.char_indices() {
        let _ = ts_actions(&src[..i], None);
        let _ = ts_actions(&src[i..], None);
    }
    for (i, _) in PHONE_SCHEMA.char_indices() {
        let m = manifest(json!({"format": "ts", "content": &PHONE_SCHEMA[..i]}));
        let _ = register("phone", &m);
    }
}

#[test]
fn typeagent_parsed_schema_json() {
    let pas = json!({
        "version": 1,
        "entry": {"action": "LightAction"},
        "types": {
            "LightAction": {"alias": true, "name": "LightAction", "type": {"type": "type-union",
                "types": [{"type": "type-reference", "name": "SwitchAction"}]}},
            "SwitchAction": {"alias": true, "name": "SwitchAction", "comments": ["Turns a light on or off."],
                "type": {"type": "object", "fields": {
                    "actionName": {"type": {"type": "string-union", "typeEnum": ["switch"]}},
                    "parameters": {"type": {"type": "object", "fields": {
                        "on": {"type": {"type": "boolean"}, "comments": ["On or off."]},
                        "room": {"optional": true, "type": {"type": "string-union", "typeEnum": ["hall", "den"]}},
                        "levels": {"optional": true, "type": {"type": "array", "elementType": {"type": "number"}}}
                    }}}
                }}}
        }
    });
    let (decls, entry) = pas_schema::parse(&pas.to_string()).unwrap();
    assert_eq!(entry.as_deref(), Some("LightAction"));
    let actions = Schema::new(decls)
        .actions(entry.as_deref(), "lights")
        .unwrap();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].name, "switch");
    assert_eq!(actions[0].description, "Turns a light on or off.");
    assert_eq!(
        actions[0].input_schema,
        json!({"type": "object", "required": ["on"], "properties": {
            "on": {"type": "boolean", "description": "On or off."},
            "room": {"type": "string", "enum": ["hall", "den"]},
            "levels": {"type": "array", "items": {"type": "number"}}
        }})
    );
    let bad = json!({"types": {"X": {"type": {"type": "weird"}}}});
    assert_eq!(
        pas_schema::parse(&bad.to_string()).unwrap_err(),
        "type 'X': unknown type kind \"weird\""
    );
}

#[test]
fn json_schema_definitions() {
    let schema = json!({
        "$defs": {
            "Where": {"type": "string", "description": "A place."},
            "Go": {"type": "object", "description": "Goes somewhere.",
                "properties": {
                    "actionName": {"const": "go"},
                    "parameters": {"type": "object", "required": ["to"],
                        "properties": {"to": {"$ref": "#/$defs/Where"}, "speed": {"type": "integer"}}}
                }},
            "Stop": {"type": "object", "properties": {"actionName": {"enum": ["stop"]}}}
        }
    });
    let (decls, entry) = pas_schema::parse(&schema.to_string()).unwrap();
    assert_eq!(entry, None);
    let actions = Schema::new(decls).actions(None, "car").unwrap();
    let names: Vec<_> = actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["go", "stop"]);
    assert_eq!(actions[0].description, "Goes somewhere.");
    assert_eq!(
        actions[0].input_schema["properties"]["to"],
        json!({"type": "string", "description": "A place."})
    );
    assert_eq!(actions[0].input_schema["required"], json!(["to"]));
    assert!(!actions[1].has_parameters);
    assert!(pas_schema::parse("[1]")
        .unwrap_err()
        .contains("not a JSON object"));
}

fn manifest(schema_file: Value) -> Map<String, Value> {
    json!({"emojiChar": "📱", "description": "A phone.",
        "schema": {"description": "x", "schemaType": "PhoneAction", "schemaFile": schema_file}})
    .as_object()
    .unwrap()
    .clone()
}

fn register(name: &str, m: &Map<String, Value>) -> RpcResult<ClientAgentSpec> {
    parse_registration(name, m, &[EXECUTE_ACTION.to_string()])
}

#[test]
fn registration_reads_the_manifest() {
    let m = manifest(json!({"format": "ts", "content": PHONE_SCHEMA}));
    let spec = register("phone", &m).unwrap();
    assert_eq!(spec.emoji, "📱");
    assert_eq!(spec.description, "A phone.");
    let tools = spec.tool_specs();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0].name, "setAlarm");
    assert_eq!(
        tools[2].description,
        "Action setTimer of the client agent phone."
    );
    // Without executeAction nothing can run, so nothing is offered.
    let quiet = parse_registration("phone", &m, &[]).unwrap();
    assert!(quiet.tool_specs().is_empty());
    assert_eq!(quiet.actions.len(), 3);
    // Sub-manifests add their actions under `<agent>.<sub>`; no schema at all is no actions.
    let mut with_sub = Map::new();
    with_sub.insert(
        "subActionManifests".into(),
        json!({"alarms": Value::Object(m.clone())}),
    );
    let spec = register("phone", &with_sub).unwrap();
    assert_eq!(spec.actions[0].schema_name, "phone.alarms");
    assert!(register("phone", &Map::new()).unwrap().actions.is_empty());
}

#[test]
fn registration_errors() {
    let m = manifest(json!({"format": "ts", "content": PHONE_SCHEMA}));
    for bad in [
        "",
        "a__b",
        "ends_",
        "has space",
        "x".repeat(33).as_str(),
        "é",
    ] {
        assert_eq!(
            register(bad, &m).unwrap_err().to_string(),
            format!("Invalid client agent name '{bad}': use 1 to 32 letters, digits, '-' or '_', not ending in '_' and without '__'")
        );
    }
    let huge = manifest(json!({"format": "ts", "content": "x".repeat(MAX_MANIFEST_BYTES)}));
    let e = register("phone", &huge).unwrap_err().to_string();
    assert!(
        e.starts_with("Manifest of client agent 'phone' is too large (")
            && e.ends_with("bytes; limit 262144)"),
        "{e}"
    );
    let cases = [
        (json!("schema.ts"), "Invalid manifest for client agent 'phone': schema of 'phone': \"schemaFile\" names a file (\"schema.ts\"); a client agent sends its schema inline as {\"format\": \"ts\", \"content\": …}"),
        (json!({"format": "xml", "content": ""}), "Invalid manifest for client agent 'phone': schema of 'phone': unsupported schema format \"xml\": use \"ts\" or \"pas\""),
        (json!({"format": "ts"}), "Invalid manifest for client agent 'phone': schema of 'phone': \"schemaFile.content\" is not a string"),
        (json!({"format": "ts", "content": "type PhoneAction = A; type A = {actionName: \"set alarm\"};"}),
            "Invalid manifest for client agent 'phone': action 'set alarm' cannot be offered as the tool 'phone__set alarm': a tool name is 1 to 64 letters, digits, '-' or '_'"),
    ];
    for (file, expected) in cases {
        assert_eq!(
            register("phone", &manifest(file)).unwrap_err().to_string(),
            expected
        );
    }
    let many: String = (0..65)
        .map(|i| format!("type A{i} = {{actionName: \"a{i}\"}};\n"))
        .collect();
    let mut m = manifest(json!({"format": "ts", "content": many}));
    m["schema"].as_object_mut().unwrap().remove("schemaType");
    assert_eq!(
        register("phone", &m).unwrap_err().to_string(),
        "Invalid manifest for client agent 'phone': 65 actions declared; the limit is 64"
    );
}

#[test]
fn execute_action_arguments() {
    let spec = register(
        "phone",
        &manifest(json!({"format": "ts", "content": PHONE_SCHEMA})),
    )
    .unwrap();
    let args = execute_action_args(&spec.actions[0], json!({"time": "07:00"}), 3);
    assert_eq!(
        args,
        json!([{"action": {"schemaName": "phone", "actionName": "setAlarm", "parameters": {"time": "07:00"}},
            "actionContextId": 3, "contextId": 0, "hasInstanceStorage": false,
            "hasSessionStorage": false, "isFromReasoningLoop": true}])
    );
    // An action without parameters gets none unless the model sent some.
    let args = execute_action_args(&spec.actions[1], json!({}), 4);
    assert_eq!(
        args[0]["action"],
        json!({"schemaName": "phone", "actionName": "showAlarms"})
    );
}

#[test]
fn action_results_as_tool_results() {
    let cases: [(Option<Value>, Result<&str, &str>); 9] = [
        (None, Ok("done")),
        (
            Some(json!({"historyText": "Alarm set.", "displayContent": "x", "entities": []})),
            Ok("Alarm set."),
        ),
        (
            Some(json!({"displayContent": "Shown.", "entities": []})),
            Ok("Shown."),
        ),
        (
            Some(json!({"displayContent": {"type": "markdown", "content": ["a", "b"]}})),
            Ok("a\nb"),
        ),
        (
            Some(
                json!({"displayContent": {"type": "text", "content": [["h1", "h2"], ["c1", "c2"]]}}),
            ),
            Ok("h1 | h2\nc1 | c2"),
        ),
        (
            Some(json!({"entities": [], "resultValue": [1, 2]})),
            Ok("[1,2]"),
        ),
        (Some(json!({"entities": []})), Ok("done")),
        (
            Some(json!({"error": "No alarm app."})),
            Err("No alarm app."),
        ),
        (Some(json!("plain")), Ok("plain")),
    ];
    for (result, expected) in cases {
        let got = action_result_text(result.as_ref());
        assert_eq!(
            got.as_deref().map_err(String::as_str),
            expected,
            "{result:?}"
        );
    }
    let long = action_result_text(Some(&json!("é".repeat(MAX_RESULT_CHARS + 5)))).unwrap();
    assert!(long.ends_with("… (cut at 16384 characters)"));
    assert_eq!(
        long.chars().count(),
        MAX_RESULT_CHARS + "… (cut at 16384 characters)".chars().count()
    );
}
