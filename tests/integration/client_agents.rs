//! Client-hosted agents (`registerClientAgent` / `unregisterClientAgent`): a scripted client
//! registers an Android-style agent, the model calls its action, the server invokes
//! `executeAction` on the client's `agent:<name>` channel and the `ActionResult` becomes the
//! tool result; every registration error text of the reference; and what happens when the
//! client goes away, does not answer, answers an error, unregisters or leaves.

use serde_json::{json, Value};

use crate::harness::*;

/// An Android-style schema: an entry union of two actions, one with parameters, one without.
const PHONE_SCHEMA: &str = r#"// Copyright (c) Example.

export type PhoneAction = SetAlarmAction | ShowAlarmsAction;

// Sets an alarm on the phone.
// Use when the user asks to be woken up or for an alarm.
export type SetAlarmAction = {
    actionName: "setAlarm";
    parameters: {
        // Local time of day in HH:mm format.
        time: string;
        // Days the alarm repeats on; omit for a one-off alarm.
        days?: ("monday" | "tuesday")[];
    };
};

// Opens the clock app on its list of alarms.
export type ShowAlarmsAction = {
    actionName: "showAlarms";
};
"#;

/// The agent's channel.
pub(crate) const PHONE: &str = "agent:androidDevice";

/// `registerClientAgent` as Android sends it, for `name` in `conversation`.
pub(crate) fn registration(name: &str, conversation: Option<&str>) -> Value {
    let mut param = json!({
        "name": name,
        "manifest": {
            "emojiChar": "⏰",
            "description": "Acts on this phone.",
            "defaultEnabled": true,
            "schema": {
                "description": "Acts on this phone.",
                "schemaType": "PhoneAction",
                "schemaFile": {"format": "ts", "content": PHONE_SCHEMA}
            }
        },
        "agentInterface": ["executeAction"]
    });
    if let Some(id) = conversation {
        param["conversationId"] = json!(id);
    }
    json!([param])
}

/// A phone joined to `id` the way Android joins, with `androidDevice` registered.
fn joined_phone(server: &Server, id: &str) -> Client {
    let mut phone = server.connect();
    phone
        .agent(
            "joinConversation",
            json!([{"clientType": "extension", "filter": false, "conversationId": id}]),
        )
        .unwrap();
    let registered = phone.agent(
        "registerClientAgent",
        registration("androidDevice", Some(id)),
    );
    assert_eq!(registered, Ok(Value::Null));
    phone
}

/// Waits until `c` has been told that a client left `id` (in `seen`, or still to come).
fn await_leave_notice(c: &mut Client, id: &str, seen: &[Call]) {
    let is_leave =
        |args: &Value| args[0]["message"]["content"] == "[A client has left this conversation.]";
    if seen
        .iter()
        .any(|(m, a)| m == "appendDisplay" && is_leave(a))
    {
        return;
    }
    while !is_leave(&c.expect_call(&clientio(id), "appendDisplay")) {}
}

/// The tool results a turn showed: (content, isError).
pub(crate) fn tool_results(calls: &[Call]) -> Vec<(String, bool)> {
    calls
        .iter()
        .filter(|(m, _)| m == "appendDisplay")
        .filter_map(|(_, a)| {
            let r = &a[0]["toolResult"];
            Some((r["content"].as_str()?.to_string(), r["isError"].as_bool()?))
        })
        .collect()
}

/// A scripted model that calls `androidDevice__setAlarm` (07:00 on Mondays), then answers
/// `Done: <the tool result>`.
pub(crate) fn alarm_model() -> ScriptedHttp {
    scripted(|n, body| match n {
        0 => (
            200,
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function", "function": {
                    "name": "androidDevice__setAlarm",
                    "arguments": "{\"time\":\"07:00\",\"days\":[\"monday\"]}"}}]}),
            ),
        ),
        _ => {
            let last = body["messages"].as_array().unwrap().last().unwrap();
            let answer = format!("Done: {}", last["content"].as_str().unwrap());
            (
                200,
                completion(json!({"role": "assistant", "content": answer})),
            )
        }
    })
}

/// The whole round trip with a scripted model: the model is offered the phone's two actions
/// (descriptions and parameters from the schema), calls `androidDevice__setAlarm`, the phone
/// gets `invoke executeAction` on `agent:androidDevice` with the action and context ids,
/// answers an `ActionResult`, and the model's next request carries its `historyText` as the
/// tool result. `getStatus` lists the agent.
#[test]
fn the_model_runs_an_action_on_the_phone() {
    let model = alarm_model();
    let server = Server::with_model(&model, "test-model", &[]);
    let (mut cli, id) = server.joined("phone chat");
    let mut phone = joined_phone(&server, &id);
    let status = cli
        .invoke(&dispatcher(&id), "getStatus", json!([]))
        .unwrap();
    // The assistant and the command families first, as TypeAgent lists its own agents, then
    // the client-hosted agent.
    assert_eq!(
        status["agents"],
        json!([
            {"emoji": "🤖", "name": "chat", "lastUsed": false, "priority": false,
                "request": false, "active": true},
            {"emoji": "🔧", "name": "system", "lastUsed": false, "priority": false,
                "request": false, "active": true},
            {"emoji": "⏰", "name": "androidDevice", "lastUsed": false, "priority": false,
                "request": false, "active": true}
        ])
    );
    // TypeAgent CLI's `/agents` lists it with its actions.
    let listed = Client::texts(&cli.run_turn(&id, "@system config agents")).join("\n");
    assert!(
        listed.contains("Client-hosted agent `androidDevice` ⏰ (client 1): available")
            && listed.contains("`androidDevice__setAlarm`: Sets an alarm on the phone"),
        "{listed}"
    );

    let rid = Client::request_id(&cli.submit(&id, "wake me at 7 on mondays"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(call_id, 0);
    // The registration's session context: a UUID (checked in client_agent_commands.rs).
    let session = args[0]["sessionContextId"]
        .as_str()
        .expect("sessionContextId");
    assert_eq!(
        args,
        json!([{
            "action": {"schemaName": "androidDevice", "actionName": "setAlarm",
                "parameters": {"time": "07:00", "days": ["monday"]}},
            "actionContextId": 0, "contextId": 0, "hasInstanceStorage": false,
            "hasSessionStorage": false, "isFromReasoningLoop": true,
            "sessionContextId": session
        }])
    );
    phone.send_result(
        PHONE,
        call_id,
        json!({"historyText": "Alarm set for 07:00 on Monday.",
            "displayContent": "Alarm set for 07:00 on Monday.", "entities": []}),
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [("Alarm set for 07:00 on Monday.".to_string(), false)]
    );
    assert!(Client::texts(&calls).contains(&"Done: Alarm set for 07:00 on Monday.".to_string()));

    let bodies = model.bodies.lock().unwrap().clone();
    let tools = bodies[0]["tools"].as_array().unwrap();
    let alarm = tools
        .iter()
        .find(|t| t["function"]["name"] == "androidDevice__setAlarm")
        .expect("setAlarm offered");
    assert_eq!(
        alarm["function"]["description"],
        "Sets an alarm on the phone.\nUse when the user asks to be woken up or for an alarm."
    );
    let params = &alarm["function"]["parameters"];
    assert_eq!(params["required"], json!(["time"]));
    assert_eq!(
        params["properties"]["days"]["items"],
        json!({"type": "string", "enum": ["monday", "tuesday"]})
    );
    let show = tools
        .iter()
        .find(|t| t["function"]["name"] == "androidDevice__showAlarms")
        .expect("showAlarms offered");
    assert_eq!(
        show["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    let tool_message = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        tool_message,
        json!({"role": "tool", "tool_call_id": "call_1", "content": "Alarm set for 07:00 on Monday."})
    );
}

/// Every registration error of the reference, with its exact text, in TypeAgent's order:
/// the conversation is resolved first, then the name, then the manifest; and the bounds.
#[test]
fn registration_errors_have_the_reference_texts() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let register = |c: &mut Client, name: &str, id: Option<&str>| {
        c.agent("registerClientAgent", registration(name, id))
            .unwrap_err()
    };
    let nothing = "Cannot register client agent: no conversation joined";
    assert_eq!(register(&mut c, "androidDevice", None), nothing);
    assert_eq!(
        c.agent("unregisterClientAgent", json!([{"name": "androidDevice"}]))
            .unwrap_err(),
        nothing
    );
    let a = c.create("a");
    let b = c.create("b");
    assert_eq!(
        register(&mut c, "androidDevice", Some(&a)),
        format!("Not joined to conversation: {a}")
    );
    c.join(&a);
    c.join(&b);
    assert_eq!(
        register(&mut c, "androidDevice", None),
        "Cannot register client agent: multiple conversations joined; specify conversationId"
    );
    assert_eq!(
        c.agent(
            "registerClientAgent",
            registration("androidDevice", Some(&a))
        ),
        Ok(Value::Null)
    );
    assert_eq!(
        register(&mut c, "androidDevice", Some(&a)),
        format!("Client agent 'androidDevice' is already registered on conversation '{a}'")
    );
    // One `agent:<name>` channel per socket, as in TypeAgent.
    assert_eq!(
        register(&mut c, "androidDevice", Some(&b)),
        "Channel 'agent:androidDevice' already exists"
    );
    // A second socket cannot take the name; nobody takes a built-in agent's or tool's name.
    let mut other = server.connect();
    other.join(&a);
    for name in ["androidDevice", "calculate", "ask_user", "chat", "system"] {
        assert_eq!(
            register(&mut other, name, None),
            format!("App agent '{name}' already exists")
        );
    }
    assert_eq!(
        register(&mut other, "bad__name", None),
        "Invalid client agent name 'bad__name': use 1 to 32 letters, digits, '-' or '_', not ending in '_' and without '__'"
    );
    let mut broken = registration("broken", None);
    broken[0]["manifest"]["schema"]["schemaFile"]["content"] =
        json!("export type PhoneAction = {\n  actionName: \"x\" \"y\" };");
    assert_eq!(
        other.agent("registerClientAgent", broken).unwrap_err(),
        "Invalid manifest for client agent 'broken': schema of 'broken': expected ';', ',' or '}' at line 2, column 19, found \"y\""
    );
    let mut huge = registration("huge", None);
    huge[0]["manifest"]["padding"] = json!("x".repeat(300_000));
    let too_large = other.agent("registerClientAgent", huge).unwrap_err();
    assert!(
        too_large.starts_with("Manifest of client agent 'huge' is too large (")
            && too_large.ends_with(" bytes; limit 262144)"),
        "{too_large}"
    );
    assert_eq!(
        other.agent("registerClientAgent", json!([])).unwrap_err(),
        "Invalid argument 0 (param) of registerClientAgent: expected an object"
    );
    assert_eq!(
        other
            .agent("registerClientAgent", json!([{"name": "x", "manifest": 3}]))
            .unwrap_err(),
        "Invalid argument 0 (manifest) of registerClientAgent: expected an object"
    );

    // Bounds: 8 agents per socket, 16 per conversation.
    let (mut first, mut second, mut third) = (server.connect(), server.connect(), server.connect());
    for s in [&mut first, &mut second, &mut third] {
        s.join(&b);
    }
    for i in 0..8 {
        first
            .agent("registerClientAgent", registration(&format!("f{i}"), None))
            .unwrap();
        second
            .agent("registerClientAgent", registration(&format!("s{i}"), None))
            .unwrap();
    }
    assert_eq!(
        register(&mut first, "f8", None),
        "Too many client agents on this connection (limit 8)"
    );
    assert_eq!(
        register(&mut third, "t0", None),
        format!("Too many client agents in conversation '{b}' (limit 16)")
    );
}

/// With the builtin provider's fixed form `run <agent>__<action> {json}`: the phone closes
/// its socket while the action runs; the model sees a clear tool error, the agent is gone
/// (the next `run` finds no such tool) and another socket may take the name.
#[test]
fn a_phone_that_disconnects_mid_call() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("flaky");
    let mut phone = joined_phone(&server, &id);
    let rid =
        Client::request_id(&cli.submit(&id, r#"run androidDevice__setAlarm {"time": "06:30"}"#));
    let (_, args) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(args[0]["action"]["parameters"], json!({"time": "06:30"}));
    phone.close();
    let calls = cli.until_complete(&id, &rid);
    let gone = "the client hosting agent 'androidDevice' disconnected before answering";
    assert_eq!(tool_results(&calls), [(gone.to_string(), true)]);
    assert!(Client::texts(&calls).contains(&gone.to_string()));
    // The socket's leave (which unregisters its agents) is announced to the others.
    await_leave_notice(&mut cli, &id, &calls);

    let calls = cli.run_turn(&id, "run androidDevice__showAlarms");
    let texts = Client::texts(&calls);
    assert!(
        texts[0].starts_with("No tool named \"androidDevice__showAlarms\" is offered here."),
        "{texts:?}"
    );
    let mut again = joined_phone(&server, &id);
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, args) = again.expect_invoke(PHONE, "executeAction");
    assert_eq!(
        args[0]["action"],
        json!({"schemaName": "androidDevice", "actionName": "showAlarms"})
    );
    again.send_result(
        PHONE,
        call_id,
        json!({"displayContent": {"type": "text", "content": ["07:00", "08:00"]}, "entities": []}),
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(tool_results(&calls), [("07:00\n08:00".to_string(), false)]);
}

/// A phone that does not answer in time: the model gets the time-out; the late answer is
/// dropped and the next call (callId 1) works.
#[test]
fn a_phone_that_does_not_answer_in_time() {
    let server = Server::start(&["--client-agent-timeout", "0.3"]);
    let (mut cli, id) = server.joined("slow phone");
    let mut phone = joined_phone(&server, &id);
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (late, _) = phone.expect_invoke(PHONE, "executeAction");
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [(
            "client agent 'androidDevice' did not answer within 0.3 s".to_string(),
            true
        )]
    );
    phone.send_result(PHONE, late, json!({"historyText": "too late"}));
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, _) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(call_id, late + 1);
    phone.send_result(PHONE, call_id, Value::Null);
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(tool_results(&calls), [("done".to_string(), false)]);
}

/// An `invokeError` answer and an `ActionResult` with `error` are both tool errors the model
/// sees; an invoke from the client on the agent channel is answered `No invoke handler`.
#[test]
fn a_phone_that_answers_errors() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("erring phone");
    let mut phone = joined_phone(&server, &id);
    let rid =
        Client::request_id(&cli.submit(&id, r#"run androidDevice__setAlarm {"time": "25:00"}"#));
    let (call_id, _) = phone.expect_invoke(PHONE, "executeAction");
    phone.send_error(PHONE, call_id, "Android client agent is not registered.");
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [(
            "client agent 'androidDevice' failed: Android client agent is not registered."
                .to_string(),
            true
        )]
    );
    let rid =
        Client::request_id(&cli.submit(&id, r#"run androidDevice__setAlarm {"time": "25:00"}"#));
    let (call_id, _) = phone.expect_invoke(PHONE, "executeAction");
    phone.send_result(
        PHONE,
        call_id,
        json!({"error": "Invalid setAlarm parameters."}),
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [("Invalid setAlarm parameters.".to_string(), true)]
    );
    assert_eq!(
        phone.invoke(PHONE, "getStorage", json!([{}])),
        Err("No invoke handler getStorage".to_string())
    );
}

/// Unregistering: the phone's own unregister removes its tools and fails a call waiting on
/// it; leaving the conversation unregisters too; and Android's recovery works — a second
/// phone told `App agent … already exists` unregisters the stale agent (whoever registered
/// it), registers again and gets the calls.
#[test]
fn unregister_leave_and_android_recovery() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("unregister");
    let mut phone = joined_phone(&server, &id);
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(
        phone.agent(
            "unregisterClientAgent",
            json!([{"name": "androidDevice", "conversationId": id}])
        ),
        Ok(Value::Null)
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        tool_results(&calls),
        [(
            "client agent 'androidDevice' was unregistered before answering".to_string(),
            true
        )]
    );
    let calls = cli.run_turn(&id, "run androidDevice__showAlarms");
    assert!(Client::texts(&calls)[0].starts_with("No tool named"));
    // Unregistering a name nobody holds is fine (as in TypeAgent).
    assert_eq!(
        phone.agent("unregisterClientAgent", json!([{"name": "androidDevice"}])),
        Ok(Value::Null)
    );

    // Leaving unregisters; the name is free again (a fresh registration on the same socket).
    phone
        .agent("registerClientAgent", registration("androidDevice", None))
        .unwrap();
    phone.agent("leaveConversation", json!([id])).unwrap();
    let calls = cli.run_turn(&id, "run androidDevice__showAlarms");
    assert!(Client::texts(&calls)[0].starts_with("No tool named"));
    phone.join(&id);
    phone
        .agent("registerClientAgent", registration("androidDevice", None))
        .unwrap();

    // A second phone: collision, eviction, registration; calls now go to it.
    let mut second = server.connect();
    second.join(&id);
    assert_eq!(
        second.agent("registerClientAgent", registration("androidDevice", None)),
        Err("App agent 'androidDevice' already exists".to_string())
    );
    second
        .agent(
            "unregisterClientAgent",
            json!([{"name": "androidDevice", "conversationId": id}]),
        )
        .unwrap();
    second
        .agent("registerClientAgent", registration("androidDevice", None))
        .unwrap();
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, _) = second.expect_invoke(PHONE, "executeAction");
    second.send_result(PHONE, call_id, json!({"historyText": "2 alarms"}));
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(tool_results(&calls), [("2 alarms".to_string(), false)]);
}

/// The schema of the security review (issue 25, finding 2), 514 bytes: the action `deep`
/// takes an `L1`, and `Lk = { f0: Lk+1; f1: Lk+1; f2: Lk+1; f3: Lk+1 }` nine levels deep —
/// 4⁹ paths to the last level's strings.
fn four_wide_nine_deep() -> String {
    let mut src = String::from(
        "type PhoneAction = Deep;\ntype Deep = {actionName: \"deep\"; parameters: L1};\n",
    );
    for k in 1..=9 {
        let next = if k == 9 {
            "string".to_string()
        } else {
            format!("L{}", k + 1)
        };
        let fields: String = (0..4).map(|i| format!("f{i}: {next}; ")).collect();
        src.push_str(&format!("type L{k} = {{ {fields}}};\n"));
    }
    src
}

/// [`registration`] of `name` with the TypeScript schema `content` (entry `PhoneAction`).
fn registration_of(name: &str, content: &str) -> Value {
    let mut r = registration(name, None);
    r[0]["manifest"]["schema"]["schemaFile"]["content"] = json!(content);
    r
}

/// Issue 25, finding 2: the four-wide, nine-deep schema (once 9 s, RSS 42 MB → 1.5 GB, 2.9 GB
/// after a turn) registers at once over a real socket with a small schema — each level once
/// under `$defs`, referred to by `$ref` — the server's RSS stays flat, and a turn offers the
/// tool and runs the action.
#[test]
fn a_schema_four_wide_and_nine_deep_registers_small() {
    let model = scripted(|n, _| match n {
        0 => (
            200,
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function", "function": {
                    "name": "hostile__deep", "arguments": "{\"f0\":{}}"}}]}),
            ),
        ),
        _ => (
            200,
            completion(json!({"role": "assistant", "content": "deep done"})),
        ),
    });
    let server = Server::with_model(&model, "test-model", &[]);
    let (mut cli, id) = server.joined("deep");
    let mut host = server.connect();
    host.join(&id);
    let content = four_wide_nine_deep();
    assert!(content.len() < 600, "{}", content.len());
    let rss_before = server.rss_kb();
    let started = std::time::Instant::now();
    assert_eq!(
        host.agent("registerClientAgent", registration_of("hostile", &content)),
        Ok(Value::Null)
    );
    let took = started.elapsed();
    let rss_registered = server.rss_kb();
    eprintln!("registered in {took:?}; RSS {rss_before} → {rss_registered} KiB");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");

    let rid = Client::request_id(&cli.submit(&id, "go deep"));
    let (call_id, args) = host.expect_invoke("agent:hostile", "executeAction");
    assert_eq!(
        args[0]["action"],
        json!({"schemaName": "hostile", "actionName": "deep", "parameters": {"f0": {}}})
    );
    host.send_result("agent:hostile", call_id, json!({"historyText": "deep"}));
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(tool_results(&calls), [("deep".to_string(), false)]);
    assert!(Client::texts(&calls).contains(&"deep done".to_string()));
    let rss_after = server.rss_kb();
    eprintln!("after the turn: RSS {rss_after} KiB");
    assert!(
        rss_after.saturating_sub(rss_before) < 50 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );

    // What the model was offered: L1 in place, L2…L9 once each.
    let bodies = model.bodies.lock().unwrap().clone();
    let tool = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "hostile__deep")
        .expect("hostile__deep offered")
        .clone();
    let params = &tool["function"]["parameters"];
    assert_eq!(params["type"], "object");
    assert_eq!(params["properties"]["f3"], json!({"$ref": "#/$defs/L2"}));
    let defs = params["$defs"].as_object().unwrap();
    let keys: Vec<&str> = defs.keys().map(String::as_str).collect();
    assert_eq!(keys, ["L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9"]);
    assert_eq!(
        defs["L8"]["properties"]["f0"],
        json!({"$ref": "#/$defs/L9"})
    );
    assert_eq!(defs["L9"]["properties"]["f0"], json!({"type": "string"}));
    let bytes = params.to_string().len();
    assert!(bytes < 2048, "{bytes} bytes: {params}");
}

/// Past the bounds of a converted schema: a schema 1,400 fields wide is refused with the
/// exact error (its schema would be more than 4,096 JSON values), and one 100,000 array levels
/// deep with a syntax error instead of overflowing the server's stack; the server keeps its
/// memory and goes on registering.
#[test]
fn schemas_past_the_bounds_are_refused_exactly() {
    let server = Server::start(&[]);
    let (_, id) = server.joined("bounds");
    let mut host = server.connect();
    host.join(&id);
    let rss_before = server.rss_kb();
    let fields: String = (0..1400).map(|i| format!("f{i}: string; ")).collect();
    let wide = format!("type PhoneAction = {{actionName: \"wide\"; parameters: {{ {fields}}} }};");
    assert_eq!(
        host.agent("registerClientAgent", registration_of("wide", &wide)),
        Err(
            "Invalid manifest for client agent 'wide': schema of 'wide': the parameters schema \
             of action 'wide' is too large (over the limit of 4096 JSON nodes per action)"
                .to_string()
        )
    );
    let deep = format!(
        "type PhoneAction = {{actionName: \"deep\"; parameters: {{x: string{}}}}};",
        "[]".repeat(100_000)
    );
    assert_eq!(
        host.agent("registerClientAgent", registration_of("deep", &deep)),
        Err(
            "Invalid manifest for client agent 'deep': schema of 'deep': expected a less deeply \
             nested type at line 1, column 103, found '['"
                .to_string()
        )
    );
    let empty = "type PhoneAction = {actionName: \"\"};";
    assert_eq!(
        host.agent("registerClientAgent", registration_of("empty", empty)),
        Err(
            "Invalid manifest for client agent 'empty': type 'PhoneAction' has an empty \
             actionName: an action name is 1 or more letters, digits, '-' or '_'"
                .to_string()
        )
    );
    assert_eq!(
        host.agent("registerClientAgent", registration("androidDevice", None)),
        Ok(Value::Null)
    );
    let rss_after = server.rss_kb();
    assert!(
        rss_after.saturating_sub(rss_before) < 50 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
}
