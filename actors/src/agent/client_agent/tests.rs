//! Schema reading, registration checks and result texts.

use serde_json::{json, Map, Value};

use super::schema::{Schema, SchemaBudget};
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
    Schema::new(ts_schema::parse(src)?).actions(entry, "phone", &mut SchemaBudget::default())
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
        .actions(entry.as_deref(), "lights", &mut SchemaBudget::default())
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
    let actions = Schema::new(decls)
        .actions(None, "car", &mut SchemaBudget::default())
        .unwrap();
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
    let args = execute_action_args(
        &spec.actions[0],
        json!({"time": "07:00"}),
        3,
        &SessionContext::new("s-1"),
    );
    assert_eq!(
        args,
        json!([{"action": {"schemaName": "phone", "actionName": "setAlarm", "parameters": {"time": "07:00"}},
            "actionContextId": 3, "contextId": 0, "hasInstanceStorage": false,
            "hasSessionStorage": false, "isFromReasoningLoop": true, "sessionContextId": "s-1"}])
    );
    // An action without parameters gets none unless the model sent some.
    let args = execute_action_args(&spec.actions[1], json!({}), 4, &SessionContext::new("s-1"));
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

/// The schema of the security review (issue 25, finding 2): `Lk = { a: Lk+1; b: Lk+1; … }`,
/// `width` fields wide and `depth` levels deep, the last level's fields strings; the action
/// `deep` takes an `L1`. Copied out at every use it would be `width^depth` leaves.
fn wide_and_deep(width: usize, depth: usize) -> String {
    let fields = |ty: &str| -> String {
        (0..width)
            .map(|i| format!("f{i}: {ty}; "))
            .collect::<String>()
    };
    let mut src = String::from(
        "type PhoneAction = Deep;\ntype Deep = {actionName: \"deep\"; parameters: L1};\n",
    );
    for k in 1..=depth {
        let next = if k == depth {
            "string".to_string()
        } else {
            format!("L{}", k + 1)
        };
        src.push_str(&format!("type L{k} = {{ {}}};\n", fields(&next)));
    }
    src
}

/// A registration of the agent `phone` whose schema is the TypeScript `src` (entry
/// `PhoneAction` when it declares one, else every action type).
fn register_ts(src: &str) -> RpcResult<ClientAgentSpec> {
    let mut m = manifest(json!({"format": "ts", "content": src}));
    if !src.contains("type PhoneAction") {
        m["schema"].as_object_mut().unwrap().remove("schemaType");
    }
    register("phone", &m)
}

#[test]
fn a_type_used_more_than_once_is_written_once_under_defs() {
    let src = wide_and_deep(4, 9);
    assert!(src.len() < 600, "{}", src.len());
    let started = std::time::Instant::now();
    let spec = register_ts(&src).unwrap();
    eprintln!(
        "4 × 9 schema of {} bytes registered in {:?}",
        src.len(),
        started.elapsed()
    );
    let schema = &spec.actions[0].input_schema;
    let level = |next: Value| {
        json!({"type": "object", "required": ["f0", "f1", "f2", "f3"], "properties":
            {"f0": next, "f1": next, "f2": next, "f3": next}})
    };
    let at = |k: usize| json!({"$ref": format!("#/$defs/L{k}")});
    // L1 (the parameters) in place; L2…L9, each used four times, once each under `$defs`.
    let mut defs = Map::new();
    for k in 2..9 {
        defs.insert(format!("L{k}"), level(at(k + 1)));
    }
    defs.insert("L9".into(), level(json!({"type": "string"})));
    let mut expected = level(at(2));
    expected["$defs"] = Value::Object(defs);
    assert_eq!(schema, &expected);
    // Linear: one more level is one more definition, not four times the schema.
    let nodes = |depth| {
        let spec = register_ts(&wide_and_deep(4, depth)).unwrap();
        schema::json_nodes(&spec.actions[0].input_schema)
    };
    let (nine, ten) = (nodes(9), nodes(10));
    assert_eq!(nine, schema::json_nodes(&expected));
    assert_eq!(ten - nine, nodes(9) - nodes(8));
    assert!(nine < 200, "{nine}");
}

#[test]
fn recursive_types_are_refs_to_themselves() {
    let src = r#"
        // A folder and what it holds.
        type Tree = { name: string; children?: Tree[] };
        type Even = { next?: Odd };
        type Odd = { next?: Even };
        type PhoneAction = Mkdir | Walk | Chain;
        type Mkdir = { actionName: "mkdir"; parameters: Tree };
        type Walk = { actionName: "walk"; parameters: {
            // Where to start.
            from: Tree;
            to: Tree;
            parity: Even } };
        type Chain = { actionName: "chain"; parameters: { head: Even } };
    "#;
    let spec = register_ts(src).unwrap();
    let tree = json!({"type": "object", "description": "A folder and what it holds.",
        "required": ["name"], "properties": {"name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}});
    // The parameters are the recursive type itself: in place at the top, and under `$defs`
    // for its own references.
    let mut mkdir = tree.clone();
    mkdir["$defs"] = json!({"Tree": tree});
    assert_eq!(spec.actions[0].input_schema, mkdir);
    // A field's comment goes next to its `$ref`; a type reached once (`Odd`) stays in place.
    assert_eq!(
        spec.actions[1].input_schema,
        json!({"type": "object", "required": ["from", "to", "parity"], "properties": {
            "from": {"$ref": "#/$defs/Tree", "description": "Where to start."},
            "to": {"$ref": "#/$defs/Tree"},
            "parity": {"$ref": "#/$defs/Even"}},
            "$defs": {"Tree": tree, "Even": {"type": "object", "properties": {"next":
                {"type": "object", "properties": {"next": {"$ref": "#/$defs/Even"}}}}}}})
    );
    assert_eq!(
        spec.actions[2].input_schema["$defs"]["Even"]["properties"]["next"]["properties"]["next"],
        json!({"$ref": "#/$defs/Even"})
    );
}

#[test]
fn json_schema_definitions_used_twice_are_refs() {
    let schema = json!({
        "$defs": {
            "Place": {"type": "object", "description": "A place.", "required": ["name"],
                "properties": {"name": {"type": "string"}, "near": {"$ref": "#/$defs/Place"}}},
            "Route": {"type": "object", "properties": {
                "actionName": {"const": "route"},
                "parameters": {"type": "object", "properties": {
                    "from": {"$ref": "#/$defs/Place"}, "to": {"$ref": "#/$defs/Place"},
                    "mode": {"$ref": "#/definitions/Mode"}}}}},
            "Mode": {"enum": ["walk", "drive"], "description": "How to \"go\"\u{1}."},
        }
    });
    let (decls, _) = pas_schema::parse(&schema.to_string()).unwrap();
    let actions = Schema::new(decls)
        .actions(None, "maps", &mut SchemaBudget::default())
        .unwrap();
    assert_eq!(
        actions[0].input_schema,
        json!({"type": "object", "properties": {
            "from": {"$ref": "#/$defs/Place"}, "to": {"$ref": "#/$defs/Place"},
            "mode": {"type": "string", "enum": ["walk", "drive"], "description": "How to \"go\"\u{1}."}},
            "$defs": {"Place": {"type": "object", "description": "A place.", "required": ["name"],
                "properties": {"name": {"type": "string"}, "near": {"$ref": "#/$defs/Place"}}}}})
    );
}

#[test]
fn defs_keys_are_safe_and_distinct() {
    let pas = json!({
        "version": 1,
        "types": {
            "a b": {"name": "a b", "type": {"type": "object", "fields": {
                "x": {"type": {"type": "type-reference", "name": "a b"}}}}},
            "a_b": {"name": "a_b", "type": {"type": "object", "fields": {
                "y": {"type": {"type": "type-reference", "name": "a_b"}}}}},
            "Go": {"name": "Go", "type": {"type": "object", "fields": {
                "actionName": {"type": {"type": "string-union", "typeEnum": ["go"]}},
                "parameters": {"type": {"type": "object", "fields": {
                    "p": {"type": {"type": "type-reference", "name": "a b"}},
                    "q": {"type": {"type": "type-reference", "name": "a_b"}}}}}}}}
        }
    });
    let (decls, _) = pas_schema::parse(&pas.to_string()).unwrap();
    let actions = Schema::new(decls)
        .actions(None, "x", &mut SchemaBudget::default())
        .unwrap();
    let s = &actions[0].input_schema;
    // "a b" is referenced first and takes "a_b"; the real "a_b" gets its index (2) appended.
    assert_eq!(s["properties"]["p"], json!({"$ref": "#/$defs/a_b"}));
    assert_eq!(s["properties"]["q"], json!({"$ref": "#/$defs/a_b_2"}));
    assert_eq!(
        s["$defs"]["a_b"]["properties"]["x"],
        json!({"$ref": "#/$defs/a_b"})
    );
    assert_eq!(
        s["$defs"]["a_b_2"]["properties"]["y"],
        json!({"$ref": "#/$defs/a_b_2"})
    );
}

#[test]
fn parameters_schemas_are_bounded_per_action_and_per_agent() {
    let too_large = |e: RpcError| e.to_string();
    // Wide: 1,400 string fields are 4,203 JSON values (each field's schema is two, its name
    // in `required` one more).
    let fields: String = (0..1400).map(|i| format!("f{i}: string; ")).collect();
    let wide = format!("type W = {{actionName: \"wide\"; parameters: {{ {fields} }} }};");
    assert_eq!(
        too_large(register_ts(&wide).unwrap_err()),
        "Invalid manifest for client agent 'phone': schema of 'phone': the parameters schema of \
         action 'wide' is too large (over the limit of 4096 JSON nodes per action)"
    );
    // 1,300 fields fit.
    let fields: String = (0..1300).map(|i| format!("f{i}: string; ")).collect();
    let fits = format!("type W = {{actionName: \"wide\"; parameters: {{ {fields} }} }};");
    let spec = register_ts(&fits).unwrap();
    assert_eq!(schema::json_nodes(&spec.actions[0].input_schema), 3904);
    // Long: few values, but 40 comments of 2,000 characters are more than 64 KiB.
    let comment = format!("// {}\n", "c".repeat(2000));
    let fields: String = (0..40)
        .map(|i| format!("{comment}f{i}: string;\n"))
        .collect();
    let long = format!("type L = {{actionName: \"long\"; parameters: {{\n{fields} }} }};");
    assert_eq!(
        too_large(register_ts(&long).unwrap_err()),
        "Invalid manifest for client agent 'phone': schema of 'phone': the parameters schema of \
         action 'long' is too large (over the limit of 65536 bytes as JSON per action)"
    );
    // Per agent: five actions of 3,904 values each are more than 16,384 together.
    let actions: String = (0..5)
        .map(|a| format!("type A{a} = {{actionName: \"a{a}\"; parameters: Wide}};\n"))
        .collect();
    let fields: String = (0..1300).map(|i| format!("f{i}: string; ")).collect();
    let agent = format!("{actions}type Wide = {{ {fields} }};");
    assert_eq!(
        too_large(register_ts(&agent).unwrap_err()),
        "Invalid manifest for client agent 'phone': schema of 'phone': the parameters schemas of \
         the agent's actions are too large (over the limit of 16384 JSON nodes per agent, reached \
         at action 'a4')"
    );
    // And five actions of 60,000 bytes each (one shared type) are more than 256 KiB.
    let comment = format!("// {}\n", "c".repeat(1500));
    let fields: String = (0..40)
        .map(|i| format!("{comment}f{i}: string;\n"))
        .collect();
    let agent = format!("{actions}type Wide = {{\n{fields} }};");
    assert_eq!(
        too_large(register_ts(&agent).unwrap_err()),
        "Invalid manifest for client agent 'phone': schema of 'phone': the parameters schemas of \
         the agent's actions are too large (over the limit of 262144 bytes as JSON per agent, \
         reached at action 'a4')"
    );
    // Four of them fit: the budget is the agent's, over all its actions.
    let actions: String = (0..4)
        .map(|a| format!("type A{a} = {{actionName: \"a{a}\"; parameters: Wide}};\n"))
        .collect();
    let spec = register_ts(&format!("{actions}type Wide = {{\n{fields} }};")).unwrap();
    let bytes: usize = spec
        .actions
        .iter()
        .map(|a| a.input_schema.to_string().len())
        .sum();
    assert!(
        (200_000..MAX_AGENT_SCHEMA_BYTES).contains(&bytes),
        "{bytes}"
    );
}

#[test]
fn the_meter_counts_exactly_what_is_written() {
    // Escapes, non-ASCII, numbers and literals of every JSON type: `action` checks (in debug
    // builds) that its count is the schema's length as compact JSON; here too, in release.
    let schema = json!({"definitions": {"Odd": {"type": "object", "properties": {
    "actionName": {"const": "odd"},
    "parameters": {"type": "object", "description": "tab\t quote\" back\\ bell\u{7} é 🎉",
        "properties": {
            "n": {"enum": [1, -2.5, 1e300, 12345678901234567890u64]},
            "mixed": {"enum": ["a", 1, true, null, [1, {"k": "v"}], {"x\n": []}]},
            "c": {"const": {"deep": [[["x"]]]}}
        }}}}}});
    let (decls, _) = pas_schema::parse(&schema.to_string()).unwrap();
    let mut budget = SchemaBudget::default();
    let actions = Schema::new(decls).actions(None, "x", &mut budget).unwrap();
    let written = &actions[0].input_schema;
    assert_eq!(
        written["properties"]["mixed"],
        json!({"enum": ["a", 1, true, null, [1, {"k": "v"}], {"x\n": []}]})
    );
    assert_eq!(
        budget.used(),
        (schema::json_nodes(written), written.to_string().len())
    );
}

#[test]
fn empty_action_names_are_refused() {
    assert_eq!(
        register_ts("type PhoneAction = {actionName: \"\"; parameters: {a: string}};")
            .unwrap_err()
            .to_string(),
        "Invalid manifest for client agent 'phone': type 'PhoneAction' has an empty actionName: \
         an action name is 1 or more letters, digits, '-' or '_'"
    );
    let pas = json!({"$defs": {"Blank": {"properties": {"actionName": {"const": ""}}}}});
    let mut m = manifest(json!({"format": "pas", "content": pas.to_string()}));
    m["schema"].as_object_mut().unwrap().remove("schemaType");
    assert_eq!(
        register("phone", &m).unwrap_err().to_string(),
        "Invalid manifest for client agent 'phone': type 'Blank' has an empty actionName: an \
         action name is 1 or more letters, digits, '-' or '_'"
    );
    // Names that make too long a tool name, or carry other characters, are refused as before.
    let long = format!("type PhoneAction = {{actionName: \"{}\"}};", "a".repeat(58));
    assert_eq!(
        register_ts(&long).unwrap_err().to_string(),
        format!(
            "Invalid manifest for client agent 'phone': action '{0}' cannot be offered as the \
             tool 'phone__{0}': a tool name is 1 to 64 letters, digits, '-' or '_'",
            "a".repeat(58)
        )
    );
    let longest = format!("type PhoneAction = {{actionName: \"{}\"}};", "a".repeat(57));
    assert!(register_ts(&longest).is_ok());
}

#[test]
fn hostile_type_graphs_cost_linear_work() {
    // Array suffixes nest too: 100,000 `[]` are an error, not a stack overflow.
    let arrays = format!(
        "type PhoneAction = {{actionName: \"a\"; parameters: {{x: string{}}}}};",
        "[]".repeat(100_000)
    );
    let e = register_ts(&arrays).unwrap_err().to_string();
    assert!(
        e.contains("expected a less deeply nested type at line 1"),
        "{e}"
    );
    // Four-way unions (to the action), intersections (to its fields) and intersections (in
    // its parameters), each type visited once: when looking for actions, for their fields
    // and writing their schema. Followed path by path it would be 4^22 visits.
    let mut src = String::from("type PhoneAction = U1;\ntype U12 = J1;\n");
    src.push_str("type J12 = {actionName: \"a\"; parameters: I1};\ntype I21 = {x: string};\n");
    for k in 1..=20 {
        let four = |t: &str, sep: &str| [t; 4].join(sep);
        if k <= 11 {
            src.push_str(&format!(
                "type U{k} = {};\n",
                four(&format!("U{}", k + 1), " | ")
            ));
            src.push_str(&format!(
                "type J{k} = {};\n",
                four(&format!("J{}", k + 1), " & ")
            ));
        }
        src.push_str(&format!(
            "type I{k} = {};\n",
            four(&format!("I{}", k + 1), " & ")
        ));
    }
    let spec = register_ts(&src).unwrap();
    assert_eq!(spec.actions.len(), 1);
    let schema = &spec.actions[0].input_schema;
    assert_eq!(
        schema["allOf"],
        json!([{"$ref": "#/$defs/I2"}, {"$ref": "#/$defs/I2"}, {"$ref": "#/$defs/I2"}, {"$ref": "#/$defs/I2"}])
    );
    // I2…I20 once each; I20, an intersection of objects, is one object type.
    assert_eq!(schema["$defs"].as_object().unwrap().len(), 19);
    assert_eq!(
        schema["$defs"]["I20"],
        json!({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]})
    );
    // 5,000 aliases of one 5,000-way intersection: its action name is worked out once, not
    // once per alias (25 million steps).
    let parts: Vec<String> = (0..5000).map(|i| format!("A{i}")).collect();
    let mut src = format!("type W = {};\n", parts.join(" & "));
    for i in 0..5000 {
        src.push_str(&format!("type A{i} = {{}};\ntype X{i} = W;\n"));
    }
    let started = std::time::Instant::now();
    assert_eq!(register_ts(&src).unwrap().actions, []);
    eprintln!(
        "{} bytes of aliases read in {:?}",
        src.len(),
        started.elapsed()
    );
    // 7,000 actions are counted (and checked for duplicates) before any is converted.
    let many: String = (0..7000)
        .map(|i| format!("type A{i}={{actionName:\"a{i}\"}};"))
        .collect();
    assert_eq!(
        register_ts(&many).unwrap_err().to_string(),
        "Invalid manifest for client agent 'phone': 7000 actions declared; the limit is 64"
    );
}

/// The lifecycle read from `agentInterface` (only what it lists) and the manifest's schemas
/// (`<name>` and `<name>.<sub>`), the invokes it makes in TypeAgent's order, and the
/// `agentContextId` an `initializeAgentContext` answer gives.
#[test]
fn lifecycle_invokes() {
    let mut m = manifest(json!({"format": "ts", "content": PHONE_SCHEMA}));
    m.insert(
        "subActionManifests".into(),
        json!({"sms": {"schema": {"schemaType": "SmsAction", "schemaFile": {"format": "ts",
            "content": "export type SmsAction = { actionName: \"sendSms\" };"}}}}),
    );
    let all: Vec<String> = [
        EXECUTE_ACTION,
        INITIALIZE_AGENT_CONTEXT,
        UPDATE_AGENT_CONTEXT,
        START_BACKGROUND_TASKS,
        STOP_BACKGROUND_TASKS,
        CLOSE_AGENT_CONTEXT,
    ]
    .map(str::to_string)
    .into();
    let spec = parse_registration("phone", &m, &all).unwrap();
    assert_eq!(spec.lifecycle.schema_names, ["phone", "phone.sms"]);
    let session = SessionContext {
        id: "s-1".into(),
        agent_context_id: Some(json!(7)),
    };
    let names = |steps: Vec<(&'static str, Value)>| -> Vec<(&'static str, Value)> {
        steps
            .into_iter()
            .map(|(m, a)| {
                assert_eq!(a[0]["agentContextId"], 7, "{m}");
                assert_eq!(a[0]["sessionContextId"], "s-1", "{m}");
                (m, a[0]["schemaName"].clone())
            })
            .collect()
    };
    assert_eq!(
        names(spec.lifecycle.startup(&session)),
        [
            (UPDATE_AGENT_CONTEXT, json!("phone")),
            (UPDATE_AGENT_CONTEXT, json!("phone.sms")),
            (START_BACKGROUND_TASKS, Value::Null),
        ]
    );
    assert_eq!(
        names(spec.lifecycle.teardown(&session)),
        [
            (STOP_BACKGROUND_TASKS, Value::Null),
            (UPDATE_AGENT_CONTEXT, json!("phone")),
            (UPDATE_AGENT_CONTEXT, json!("phone.sms")),
            (CLOSE_AGENT_CONTEXT, Value::Null),
        ]
    );
    let update = &spec.lifecycle.teardown(&session)[1].1;
    assert_eq!(update[0]["enable"], false);
    assert_eq!(initialize_args(), json!([{}]));

    // Only what is listed is sent.
    let spec = register("phone", &m).unwrap();
    assert_eq!(
        spec.lifecycle,
        Lifecycle {
            schema_names: vec!["phone".into(), "phone.sms".into()],
            ..Lifecycle::default()
        }
    );
    assert!(spec.lifecycle.startup(&session).is_empty());
    assert!(spec.lifecycle.teardown(&session).is_empty());
    assert!(SessionContext::new("s")
        .params()
        .get("agentContextId")
        .is_none());

    assert_eq!(
        agent_context_id(Some(&json!({"contextId": 0}))),
        Some(json!(0))
    );
    assert_eq!(agent_context_id(Some(&json!({"contextId": null}))), None);
    assert_eq!(agent_context_id(Some(&json!(3))), None);
    assert_eq!(agent_context_id(None), None);
}
