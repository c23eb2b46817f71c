//! Issue 26, the methods TypeAgent's clients call that Roundtable answered `No invoke
//! handler`: `getSpeechToken` and the 19 macro methods on `agent-server`, the dispatcher
//! extras (dynamic displays, templates, cache, agent schemas, feedback and hides), and the
//! interactions and choices beyond the yes/no question (forms, proposed actions,
//! pick-and-remember), over real sockets against the real binary.

use serde_json::{json, Value};

use crate::harness::*;

/// `getSpeechToken` is void (no `result` key), as TypeAgent's server answers without speech.
#[test]
fn speech_token_is_void() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let call_id = c.send_invoke(AGENT_SERVER, "getSpeechToken", json!([]));
    let frame = loop {
        let f = c.read_frame(WAIT).expect("an answer");
        if f["name"] == AGENT_SERVER && f["message"]["callId"] == call_id {
            break f;
        }
    };
    assert_eq!(frame["message"]["type"], "invokeResult", "{frame}");
    assert!(frame["message"].get("result").is_none(), "{frame}");
}

/// The 19 macro methods, without a joined conversation: each answers as TypeAgent's
/// server with an empty store, or (recording) that Roundtable does not support it; bad
/// shapes get the protocol's exact argument errors.
#[test]
fn macro_methods_answer_as_an_empty_store() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let answers: [(&str, Value, Result<Value, &str>); 24] = [
        (
            "getMacroRecordingState",
            json!(["s1"]),
            Ok(json!({"status": "idle"})),
        ),
        (
            "claimMacroRecording",
            json!([{"sessionId": "s1", "cwd": "/w", "promptHash": "ab"}]),
            Ok(Value::Null),
        ),
        ("cancelMacroRecording", json!(["s1"]), Ok(Value::Null)),
        (
            "failMacroRecording",
            json!(["s1", "t1", "broken"]),
            Ok(Value::Null),
        ),
        ("listMacros", json!([null]), Ok(json!([]))),
        (
            "listMacros",
            json!([{"state": "approved", "limit": 5}]),
            Ok(json!([])),
        ),
        ("searchMacros", json!([{"query": "deploy"}]), Ok(json!([]))),
        ("searchMacros", json!([null]), Ok(json!([]))),
        (
            "armMacroRecording",
            json!([{"sessionId": "s1"}]),
            Err("Macro recording is not supported by Roundtable"),
        ),
        (
            "finalizeMacroRecording",
            json!([{"tokenId": "t1", "trace": {}}]),
            Err("The macro recording token is not active."),
        ),
        (
            "createMacroFromTrace",
            json!([{"traceId": "t-1", "name": "Deploy"}]),
            Err("Trace not found: t-1"),
        ),
        (
            "createMacroFromTrace",
            json!([{"traceId": "t-1", "name": "  "}]),
            Err("Macro name is required."),
        ),
        (
            "inspectMacro",
            json!([{"macroId": "m1"}]),
            Err("Macro not found: m1"),
        ),
        (
            "getMacroRequirements",
            json!([{"macroId": "m1", "version": 2}]),
            Err("Macro version not found: m1@2"),
        ),
        (
            "validateMacro",
            json!([{"macroId": "m1"}]),
            Err("Macro not found: m1"),
        ),
        (
            "approveMacro",
            json!([{"macroId": "m1"}]),
            Err("Macro not found: m1"),
        ),
        (
            "disableMacro",
            json!([{"macroId": "m1"}]),
            Err("Macro not found: m1"),
        ),
        ("deleteMacro", json!([{"macroId": "m1"}]), Ok(Value::Null)),
        (
            "deleteMacro",
            json!([{"macroId": "../m1"}]),
            Err("Invalid macro identifier."),
        ),
        (
            "runMacro",
            json!([{"runId": "r1", "macroId": "m1"}]),
            Err("Macro not found: m1"),
        ),
        (
            "submitMacroCandidate",
            json!([{"sourceMacroId": "m1", "sourceVersion": 2, "handoffRunId": "r1",
            "reason": "faster", "inputs": [], "steps": [], "executionEvidence": {}}]),
            Err("Macro version not found: m1@2"),
        ),
        ("cancelMacroRun", json!(["r1"]), Ok(Value::Null)),
        ("getMacroRun", json!(["r1"]), Err("Macro run not found: r1")),
        (
            "getMacroRun",
            json!(["r 1"]),
            Err("Invalid macro identifier."),
        ),
    ];
    for (method, args, expected) in answers {
        let got = c.agent(method, args.clone());
        assert_eq!(got, expected.map_err(str::to_string), "{method} {args}");
    }
    let shapes = [
        (
            "getMacroRecordingState",
            json!([]),
            "Invalid argument 0 (sessionId) of getMacroRecordingState: expected a string",
        ),
        (
            "armMacroRecording",
            json!(["s1"]),
            "Invalid argument 0 (request) of armMacroRecording: expected an object",
        ),
        (
            "armMacroRecording",
            json!([{"sessionId": "s1", "ttlMs": "long"}]),
            "Invalid argument 0 (ttlMs) of armMacroRecording: expected a non-negative integer",
        ),
        (
            "failMacroRecording",
            json!(["s1", "t1"]),
            "Invalid argument 2 (error) of failMacroRecording: expected a string",
        ),
        (
            "finalizeMacroRecording",
            json!([{"tokenId": "t1"}]),
            "Invalid argument 0 (trace) of finalizeMacroRecording: expected an object",
        ),
        (
            "listMacros",
            json!(["all"]),
            "Invalid argument 0 (request) of listMacros: expected an object",
        ),
        (
            "inspectMacro",
            json!([{"macroId": 7}]),
            "Invalid argument 0 (macroId) of inspectMacro: expected a string",
        ),
        (
            "runMacro",
            json!([{"macroId": "m1"}]),
            "Invalid argument 0 (runId) of runMacro: expected a string",
        ),
        (
            "submitMacroCandidate",
            json!([{"sourceMacroId": "m1", "sourceVersion": 1, "handoffRunId": "r1", "reason": "x"}]),
            "Invalid argument 0 (inputs) of submitMacroCandidate: expected an array",
        ),
    ];
    for (method, args, expected) in shapes {
        assert_eq!(
            c.agent(method, args.clone()),
            Err(expected.to_string()),
            "{method} {args}"
        );
    }
    // The socket still serves everything else.
    assert!(c.agent("listConversations", json!([null])).is_ok());
}
