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

/// `getDynamicDisplay`, `getTemplateSchema`, `getTemplateCompletion`: `Unknown app agent`
/// for a name that is no agent here, else the agent does not support it; `checkCache` as
/// TypeAgent with its cache off (nothing runs); `getAgentSchemas`: the chat agent's tools and
/// a client agent's actions in TypeAgent's shape, filtered by name.
#[test]
fn dispatcher_extras_answer_like_typeagent() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("extras");
    let d = dispatcher(&id);
    let answers: [(&str, Value, Result<Value, &str>); 7] = [
        (
            "getDynamicDisplay",
            json!(["chat", "html", "d1"]),
            Err("Dynamic display not supported by 'chat'"),
        ),
        (
            "getDynamicDisplay",
            json!(["weather", "html", "d1"]),
            Err("Unknown app agent: weather"),
        ),
        (
            "getTemplateSchema",
            json!(["system", "action", {}]),
            Err("Template schema not supported by 'system'"),
        ),
        (
            "getTemplateCompletion",
            json!(["nope", "action", {}, "actionName"]),
            Err("Unknown app agent: nope"),
        ),
        (
            "checkCache",
            json!(["what is 2+3"]),
            Ok(json!({"lastError": "Cache is not enabled"})),
        ),
        ("getAgentSchemas", json!(["zzz"]), Ok(json!([]))),
        (
            "getDynamicDisplay",
            json!([]),
            Err("Invalid argument 0 (appAgentName) of getDynamicDisplay: expected a string"),
        ),
    ];
    for (method, args, expected) in answers {
        let got = a.invoke(&d, method, args.clone());
        assert_eq!(got, expected.map_err(str::to_string), "{method} {args}");
    }
    assert_eq!(
        a.invoke(&d, "checkCache", json!([3])),
        Err("Invalid argument 0 (request) of checkCache: expected a string".into())
    );
    // checkCache ran nothing.
    let history = a.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] != "user-request"),
        "{history}"
    );

    let schemas = a.invoke(&d, "getAgentSchemas", json!([null])).unwrap();
    assert_eq!(schemas.as_array().unwrap().len(), 1, "{schemas}");
    let chat = &schemas[0];
    assert_eq!(
        (&chat["name"], &chat["emoji"]),
        (&json!("chat"), &json!("💬"))
    );
    assert_eq!(chat["subSchemas"][0]["schemaName"], "chat");
    let tools: Vec<&str> = chat["subSchemas"][0]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    for tool in ["calculate", "get_current_time", "get_weather", "ask_user"] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }

    // A client agent's actions, grouped by schema, descriptions from its comments.
    let mut phone = server.connect();
    phone.join(&id);
    phone
        .agent(
            "registerClientAgent",
            crate::client_agents::registration("androidDevice", Some(&id)),
        )
        .unwrap();
    let schemas = a
        .invoke(&d, "getAgentSchemas", json!(["androidDevice"]))
        .unwrap();
    assert_eq!(
        schemas,
        json!([{
            "name": "androidDevice",
            "emoji": "⏰",
            "description": "Acts on this phone.",
            "subSchemas": [{
                "schemaName": "androidDevice",
                "description": "Acts on this phone.",
                "actions": [
                    {"name": "setAlarm", "description": "Sets an alarm on the phone.\nUse when the user asks to be woken up or for an alarm."},
                    {"name": "showAlarms", "description": "Opens the clock app on its list of alarms."}
                ]
            }]
        }])
    );
    assert_eq!(
        a.invoke(&d, "getAgentSchemas", json!([]))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        a.invoke(
            &d,
            "getDynamicDisplay",
            json!(["androidDevice", "html", "x"])
        ),
        Err("Dynamic display not supported by 'androidDevice'".into())
    );
}

/// The `onUserFeedback` / `onUserHide` calls among a client's pending frames, in order.
fn announced(c: &mut Client, id: &str, method: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| c.expect_call(&clientio(id), method)[0].clone())
        .collect()
}

/// `recordUserFeedback` and the hide methods: each entry is logged in TypeAgent's shape,
/// announced to the clients (a filtered client only for its own requests), answered once
/// durable, replayed by `getDisplayHistory` after a crash; `restoreAllHidden` and
/// `flushHidden` act on the current restorable hides, read back from the log after a restart.
#[test]
fn feedback_and_hides_are_durable_announced_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &[]);
    let (mut a, id) = server.joined("feedback");
    let d = dispatcher(&id);
    let mut filtered = server.connect();
    filtered
        .agent(
            "joinConversation",
            json!([{"conversationId": id, "filter": true}]),
        )
        .unwrap();
    let mut watcher = server.connect();
    watcher.join(&id);
    let rid = Client::request_id(&a.submit(&id, "first"));
    a.until_complete(&id, &rid);
    let rid2 = Client::request_id(&a.submit(&id, "second"));
    a.until_complete(&id, &rid2);

    let ours = json!({"requestId": rid, "connectionId": "0", "clientRequestId": "cr-5"});
    assert_eq!(
        a.invoke(
            &d,
            "recordUserFeedback",
            json!([ours, "down", "bad-response", "too short", true])
        ),
        Ok(Value::Null)
    );
    let entry = &announced(&mut watcher, &id, "onUserFeedback", 1)[0];
    assert_eq!(entry["type"], "user-feedback");
    assert_eq!(entry["requestId"], ours);
    assert_eq!(
        (&entry["rating"], &entry["category"], &entry["comment"]),
        (&json!("down"), &json!("bad-response"), &json!("too short"))
    );
    assert!(
        entry["seq"].is_u64() && entry["timestamp"].is_u64(),
        "{entry}"
    );
    // A rating cleared: null, no category, an empty comment left out.
    assert_eq!(
        a.invoke(
            &d,
            "recordUserFeedback",
            json!([{"requestId": rid2}, null, null, ""])
        ),
        Ok(Value::Null)
    );
    let cleared = &announced(&mut watcher, &id, "onUserFeedback", 1)[0];
    assert_eq!(cleared["rating"], Value::Null);
    assert!(cleared.get("comment").is_none() && cleared.get("category").is_none());

    // Hides: one per (request, target); a permanent one is not restorable.
    for (req, hidden, target, permanent) in [
        (&rid, true, json!("agent"), false),
        (&rid2, true, json!("user"), false),
        (&rid2, true, Value::Null, false),
        (&rid, true, json!("user"), true),
    ] {
        let args = json!([{"requestId": req}, hidden, target, permanent]);
        assert_eq!(a.invoke(&d, "recordUserHide", args), Ok(Value::Null));
    }
    let hides = announced(&mut watcher, &id, "onUserHide", 4);
    assert_eq!(hides[0]["target"], "agent");
    assert!(hides[2].get("target").is_none() && hides[2].get("permanent").is_none());
    assert_eq!(hides[3]["permanent"], true);
    assert_eq!(a.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(3)));
    let restored = announced(&mut watcher, &id, "onUserHide", 3);
    assert!(restored
        .iter()
        .all(|h| h["hidden"] == false && h.get("permanent").is_none()));
    assert_eq!(restored[0]["requestId"]["requestId"], rid.as_str());
    assert_eq!(a.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(0)));
    // Hide again and flush: permanent, then nothing left to restore.
    a.invoke(
        &d,
        "recordUserHide",
        json!([{"requestId": rid}, true, "agent"]),
    )
    .unwrap();
    assert_eq!(a.invoke(&d, "flushHidden", json!([])), Ok(json!(1)));
    assert_eq!(a.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(0)));
    // One left hidden across the crash.
    a.invoke(
        &d,
        "recordUserHide",
        json!([{"requestId": rid2}, true, "agent"]),
    )
    .unwrap();
    // The filtered client saw none of it: the requests were not its own. The conversation
    // announces each change before it answers its caller, and answers the filtered client's
    // own request after that.
    filtered.expect_none_before(
        "an announcement of someone else's feedback or hide",
        |f| {
            is_call(&clientio(&id), "onUserHide")(f) || is_call(&clientio(&id), "onUserFeedback")(f)
        },
        |c| c.invoke(&d, "getQueueSnapshot", json!([])).unwrap(),
    );
    assert_eq!(
        a.invoke(&d, "recordUserHide", json!([{"requestId": rid}, "yes"])),
        Err("Invalid argument 1 (hidden) of recordUserHide: expected a boolean".into())
    );

    // Answered means durable: a crash right after loses none of it.
    server.kill();
    let server = Server::start_in(dir.path(), &[]);
    let mut b = server.connect();
    b.join(&id);
    let history = b.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "user-feedback").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "user-message-hidden")
            .count(),
        10,
        "{kinds:?}"
    );
    // The current hides are read back from the log: only rid2's agent bubble.
    assert_eq!(b.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(1)));
    let restored = announced(&mut b, &id, "onUserHide", 1);
    assert_eq!(
        (
            &restored[0]["requestId"]["requestId"],
            &restored[0]["target"]
        ),
        (&json!(rid2), &json!("agent"))
    );
}

/// Acknowledged means durable: with every storage write failing, feedback and hides answer
/// the storage error and announce nothing; once the disk is back they work again.
#[test]
fn feedback_on_a_failing_disk_is_refused_and_not_announced() {
    let instance = tempfile::tempdir().unwrap();
    let (server, switch) = Server::start_with_fault_switch(instance.path());
    let (mut a, id) = server.joined("faulty feedback");
    let d = dispatcher(&id);
    let mut watcher = server.connect();
    watcher.join(&id);
    // The hides are read once, before the disk fails.
    assert_eq!(a.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(0)));

    std::fs::write(&switch, "ENOSPC").unwrap();
    for (method, args) in [
        ("recordUserFeedback", json!([{"requestId": "r1"}, "up"])),
        (
            "recordUserHide",
            json!([{"requestId": "r1"}, true, "agent"]),
        ),
    ] {
        let err = a.invoke(&d, method, args).unwrap_err();
        assert!(
            err.starts_with("Storage error: ") && err.contains("No space left on device"),
            "{method}: {err}"
        );
    }
    std::fs::remove_file(&switch).unwrap();
    eventually("health recovers", || server.http_get("/health").0 == 200);
    assert_eq!(
        a.invoke(&d, "recordUserFeedback", json!([{"requestId": "r2"}, "up"])),
        Ok(Value::Null)
    );
    // The first announcement the watcher gets is the one that was saved.
    let first = &announced(&mut watcher, &id, "onUserFeedback", 1)[0];
    assert_eq!(first["requestId"]["requestId"], "r2");
    assert!(watcher
        .inbox
        .iter()
        .all(|f| f["message"]["name"] != "onUserHide"));
}

/// At most `MAX_HIDDEN_MESSAGES` (1,000) restorable hidden messages per conversation: one
/// more is refused with the bound, a request already hidden may be hidden again, and
/// restoring makes room.
#[test]
fn hidden_messages_are_bounded() {
    const LIMIT: usize = 1_000;
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("many hides");
    let d = dispatcher(&id);
    for batch in (0..LIMIT).collect::<Vec<_>>().chunks(200) {
        let ids: Vec<u64> = batch
            .iter()
            .map(|i| {
                a.send_invoke(
                    &d,
                    "recordUserHide",
                    json!([{"requestId": format!("r{i}")}, true]),
                )
            })
            .collect();
        for call_id in ids {
            assert_eq!(a.wait_answer(&d, call_id), Ok(Value::Null));
        }
        a.inbox.retain(|f| f["message"]["name"] != "onUserHide");
    }
    let refused = a.invoke(
        &d,
        "recordUserHide",
        json!([{"requestId": "one-more"}, true]),
    );
    assert_eq!(
        refused,
        Err("Too many hidden messages in this conversation (limit 1000); restore or flush them first".into())
    );
    // Not new: the same request's bubble hidden again, or shown, is fine.
    assert_eq!(
        a.invoke(&d, "recordUserHide", json!([{"requestId": "r7"}, true])),
        Ok(Value::Null)
    );
    assert_eq!(
        a.invoke(&d, "recordUserHide", json!([{"requestId": "r7"}, false])),
        Ok(Value::Null)
    );
    assert_eq!(
        a.invoke(
            &d,
            "recordUserHide",
            json!([{"requestId": "one-more"}, true])
        ),
        Ok(Value::Null)
    );
    assert_eq!(a.invoke(&d, "flushHidden", json!([])), Ok(json!(LIMIT)));
    assert_eq!(a.invoke(&d, "restoreAllHidden", json!([])), Ok(json!(0)));
}

/// The texts the turn's `appendDisplay` calls showed, as one string per call.
fn shown(calls: &[Call]) -> Vec<String> {
    Client::texts(calls)
}

/// A form to everyone (`ask me a form …` → `ask_user_form`): `requestInteraction` of type
/// `form` to every client and in a joiner's `pendingInteractions`, a bad answer refused with
/// the question kept, the answers read back for the model, logged; a cancelled form reads as
/// dismissed.
#[test]
fn forms_asked_of_everyone() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("forms");
    let mut b = server.connect();
    b.join(&id);
    let (d, io) = (dispatcher(&id), clientio(&id));
    let rid = Client::request_id(&a.submit(
        &id,
        "ask me a form Pizza: Size? S|M|…; Toppings? ham, olives; Deliver?",
    ));
    let q = b.expect_call(&io, "requestInteraction")[0].clone();
    assert_eq!(q["type"], "form");
    assert_eq!(q["requestId"]["requestId"], rid.as_str());
    assert_eq!(
        q["form"],
        json!({"message": "Pizza", "paged": true, "fields": [
            {"id": "q1", "kind": "pick", "prompt": "Size?", "choices": ["S", "M"], "allowFreeText": true},
            {"id": "q2", "kind": "multiChoice", "prompt": "Toppings?", "choices": ["ham", "olives"]},
            {"id": "q3", "kind": "yesNo", "prompt": "Deliver?"}
        ]})
    );
    let interaction = q["interactionId"].as_str().unwrap().to_string();
    let mut c = server.connect();
    assert_eq!(c.join(&id)["pendingInteractions"][0], q);

    let bad = json!([{"interactionId": interaction, "type": "form",
        "value": {"answers": {"q2": {"kind": "multiChoice", "selected": [5]}}}}]);
    assert_eq!(
        b.invoke(&d, "respondToInteraction", bad),
        Err("Invalid argument 0 (response) of respondToInteraction: answer \"q2\" selects 5, which is no choice".into())
    );
    let answers = json!({"answers": {
        "q1": {"kind": "pick", "selected": -1, "text": "XL"},
        "q2": {"kind": "multiChoice", "selected": [1]},
        "q3": {"kind": "yesNo", "value": true}
    }});
    let good = json!([{"interactionId": interaction, "type": "form", "value": answers}]);
    assert_eq!(b.invoke(&d, "respondToInteraction", good), Ok(Value::Null));
    let calls = a.until_complete(&id, &rid);
    assert!(calls.iter().any(|(m, args)| m == "interactionResolved"
        && args[0] == interaction.as_str()
        && args[1] == answers));
    assert!(
        shown(&calls).contains(
            &"The user submitted the form:\n- Size? => \"XL\" (free text)\n- Toppings? => olives\n- Deliver? => Yes"
                .to_string()
        ),
        "{calls:?}"
    );

    // Cancelled by a client: the model reads that the form was dismissed.
    let rid = Client::request_id(&a.submit(&id, "ask me a form: Deliver?"));
    let q = b.expect_call(&io, "requestInteraction")[0].clone();
    b.send_call(&d, "cancelInteraction", json!([q["interactionId"]]));
    let calls = a.until_complete(&id, &rid);
    assert!(calls.iter().any(|(m, _)| m == "interactionCancelled"));
    assert!(
        shown(&calls).contains(&"The user dismissed the form without answering.".to_string()),
        "{calls:?}"
    );
    let history = c.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    let forms: Vec<&Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "pending-interaction")
        .collect();
    assert_eq!(forms.len(), 2);
    assert_eq!(forms[0]["interactionType"], "form");
    assert_eq!(forms[0]["form"]["fields"][2]["kind"], "yesNo");
    assert!(history
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "interaction-resolved" && e["response"] == answers));
}

/// `propose <tool> {json}` → `propose_action`: a `requestInteraction` of type
/// `proposeAction` with TypeAgent's action template; no value runs it as proposed, an edited
/// action runs edited, `null` cancels, a replacement of another action is refused.
#[test]
fn proposed_actions_run_edited_or_cancelled() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("proposals");
    let (d, io) = (dispatcher(&id), clientio(&id));
    let propose = |a: &mut Client| {
        let rid = Client::request_id(&a.submit(&id, r#"propose calculate {"expression": "2*3"}"#));
        let q = a.expect_call(&io, "requestInteraction")[0].clone();
        (rid, q)
    };
    let (rid, q) = propose(&mut a);
    assert_eq!(q["type"], "proposeAction");
    let templates = &q["actionTemplates"];
    assert_eq!(
        (&templates["templateAgentName"], &templates["templateName"]),
        (&json!("chat"), &json!("action"))
    );
    let action = json!({"schemaName": "chat", "actionName": "calculate", "parameters": {"expression": "2*3"}});
    assert_eq!(templates["templateData"][0]["data"], action);
    assert_eq!(
        templates["templateData"][0]["schema"]["fields"]["parameters"]["type"]["fields"]
            ["expression"],
        json!({"optional": false, "type": {"type": "string"}})
    );
    let id_of = |q: &Value| q["interactionId"].as_str().unwrap().to_string();
    a.invoke(
        &d,
        "respondToInteraction",
        json!([{"interactionId": id_of(&q), "type": "proposeAction"}]),
    )
    .unwrap();
    let calls = a.until_complete(&id, &rid);
    assert!(shown(&calls).contains(&"6".to_string()));
    // Run as proposed: no value, so interactionResolved carries none either.
    assert!(calls
        .iter()
        .any(|(m, args)| m == "interactionResolved" && args == &json!([id_of(&q)])));

    let (rid, q) = propose(&mut a);
    let other = json!([{"schemaName": "chat", "actionName": "get_weather", "parameters": {}}]);
    assert_eq!(
        a.invoke(&d, "respondToInteraction", json!([{"interactionId": id_of(&q), "type": "proposeAction", "value": other}])),
        Err("Invalid argument 0 (response) of respondToInteraction: the replacement must keep schemaName \"chat\" and actionName \"calculate\"".into())
    );
    let mut edited = action.clone();
    edited["parameters"]["expression"] = json!("3*3");
    a.invoke(
        &d,
        "respondToInteraction",
        json!([{"interactionId": id_of(&q), "type": "proposeAction", "value": [edited]}]),
    )
    .unwrap();
    let calls = a.until_complete(&id, &rid);
    assert!(
        shown(&calls)
            .contains(&r#"(the user changed the input to {"expression":"3*3"}) 9"#.to_string()),
        "{calls:?}"
    );

    let (rid, q) = propose(&mut a);
    a.invoke(
        &d,
        "respondToInteraction",
        json!([{"interactionId": id_of(&q), "type": "proposeAction", "value": null}]),
    )
    .unwrap();
    let calls = a.until_complete(&id, &rid);
    assert!(
        shown(&calls).contains(&"the user cancelled the proposed calculate call".to_string()),
        "{calls:?}"
    );
}

/// Private choices beyond yes / no: `ask me and remember …` is a `pickRemember`
/// `requestChoice` (7th argument: the checkbox label) answered `{selected, remember}` (a bad
/// answer is refused, the choice kept); once remembered the question is not asked again.
/// `ask me privately a form …` is a `requestForm` answered through `respondToChoice`.
#[test]
fn pick_remember_and_private_forms() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("choices");
    let mut b = server.connect();
    b.join(&id);
    let (d, io) = (dispatcher(&id), clientio(&id));
    let rid = Client::request_id(&a.submit(&id, "ask me and remember Use the fast route?"));
    let choice = a.expect_call(&io, "requestChoice");
    assert_eq!(
        choice,
        json!([
            choice[0],
            choice[1],
            "pickRemember",
            "Use the fast route?",
            ["Yes", "No"],
            "chat",
            "Don't ask me this again"
        ])
    );
    assert_eq!(choice[0]["requestId"], rid.as_str());
    let choice_id = choice[1].clone();
    // What TypeAgent's CLI sends for a non-numeric answer.
    assert_eq!(
        a.invoke(&d, "respondToChoice", json!([choice_id, {"selected": null, "remember": false}])),
        Err("Invalid argument 1 (response) of respondToChoice: expected {selected, remember} with selected a choice from 0 to 1".into())
    );
    assert_eq!(
        b.invoke(
            &d,
            "respondToChoice",
            json!([choice_id, {"selected": 0, "remember": true}])
        ),
        Err("Choice not found or expired".into())
    );
    assert_eq!(
        a.invoke(
            &d,
            "respondToChoice",
            json!([choice_id, {"selected": 0, "remember": true}])
        ),
        Ok(Value::Null)
    );
    let calls = a.until_complete(&id, &rid);
    assert!(
        shown(&calls).contains(&"You answered Yes; I will not ask again.".to_string()),
        "{calls:?}"
    );
    let calls = a.run_turn(&id, "ask me and remember Use the fast route?");
    assert!(calls.iter().all(|(m, _)| m != "requestChoice"));
    assert!(
        shown(&calls)
            .contains(&"You answered Yes before and asked me not to ask again.".to_string()),
        "{calls:?}"
    );

    // A private form.
    let rid = Client::request_id(&a.submit(&id, "ask me privately a form: Deliver?; Size? S|M"));
    let form = a.expect_call(&io, "requestForm");
    assert_eq!(form[0]["requestId"], rid.as_str());
    assert_eq!(form[2]["fields"][1]["choices"], json!(["S", "M"]));
    assert_eq!(form[3], "chat");
    let answers = json!({"answers": {"q1": {"kind": "yesNo", "value": false}, "q2": {"kind": "pick", "selected": 1}}});
    assert_eq!(
        a.invoke(
            &d,
            "respondToChoice",
            json!([form[1], {"answers": {"q2": {"kind": "pick", "selected": -1, "text": "L"}}}])
        ),
        Err(
            "Invalid argument 1 (response) of respondToChoice: question \"q2\" takes no free text"
                .into()
        )
    );
    assert_eq!(
        a.invoke(&d, "respondToChoice", json!([form[1], answers])),
        Ok(Value::Null)
    );
    let calls = a.until_complete(&id, &rid);
    assert!(
        shown(&calls)
            .contains(&"The user submitted the form:\n- Deliver? => No\n- Size? => M".to_string()),
        "{calls:?}"
    );
    // B sees the rest of the turn, sent after the form through the same queue: the form (and
    // the private choices of the turns before) would have come before it.
    b.expect_none_before(
        "a private choice or form",
        |f| is_call(&io, "requestForm")(f) || is_call(&io, "requestChoice")(f),
        |b| b.until_complete(&id, &rid),
    );
}

/// Nobody answers: a form times out as dismissed, a proposed action as not run.
#[test]
fn forms_and_proposals_time_out() {
    let server = Server::start(&["--interaction-timeout", "0.3"]);
    let (mut a, id) = server.joined("timeouts");
    let calls = a.run_turn(&id, "ask me a form: Deliver?");
    assert!(shown(&calls).contains(&"The user dismissed the form without answering.".to_string()));
    let calls = a.run_turn(&id, r#"propose calculate {"expression": "1+1"}"#);
    assert!(
        shown(&calls).contains(&"no answer in time".to_string()),
        "{calls:?}"
    );
}

/// `roundtable connect` in a pseudo-terminal: Roundtable's own CLI asks a form field by field
/// (a bad answer asked again), runs a proposed action, asks a pick-and-remember's checkbox,
/// and fills a private form.
#[test]
fn cli_answers_forms_proposals_and_remember() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["connect", "--port", &server.port.to_string()])
        .env("ROUNDTABLE_HOME", home.path())
        .env("RUST_LOG", "warn")
        .env("TERM", "dumb");
    let options = rexpect::session::Options {
        timeout_ms: Some(15_000),
        strip_ansi_escape_codes: true,
    };
    let mut p = rexpect::session::spawn_with_options(cmd, options).expect("spawn in a pty");
    p.exp_string("CLI> ").unwrap();
    p.send_line("ask me a form Pizza: Size? S|M|…; Toppings? ham, olives; Deliver?")
        .unwrap();
    p.exp_string("? Pizza").unwrap();
    p.exp_string("? Size? [1] S [2] M (or type another answer) > ")
        .unwrap();
    p.send_line("XL").unwrap();
    p.exp_string("? Toppings? [1] ham [2] olives (numbers separated by commas) > ")
        .unwrap();
    p.send_line("3").unwrap();
    p.exp_string("Answer with numbers from 1 to 2, separated by commas.")
        .unwrap();
    p.exp_string("? Toppings?").unwrap();
    p.send_line("1, 2").unwrap();
    p.exp_string("? Deliver? [y/n] > ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("- Size? => \"XL\" (free text)").unwrap();
    p.exp_string("- Toppings? => ham, olives").unwrap();
    p.exp_string("- Deliver? => Yes").unwrap();
    p.exp_string("CLI> ").unwrap();

    p.send_line(r#"propose calculate {"expression": "6*7"}"#)
        .unwrap();
    p.exp_string(r#"? Run calculate {"expression":"6*7"}? [1] Run [2] Cancel > "#)
        .unwrap();
    p.send_line("1").unwrap();
    p.exp_string("[result] 42").unwrap();
    p.exp_string("CLI> ").unwrap();

    p.send_line("ask me and remember Shortcut?").unwrap();
    p.exp_string("? Shortcut? [1] Yes [2] No > ").unwrap();
    p.send_line("2").unwrap();
    p.exp_string("? Don't ask me this again? [y/n] > ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("You answered No; I will not ask again.")
        .unwrap();
    p.exp_string("CLI> ").unwrap();

    p.send_line("ask me privately a form: Deliver?").unwrap();
    p.exp_string("? Deliver? [y/n] > ").unwrap();
    p.send_line("n").unwrap();
    p.exp_string("- Deliver? => No").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
