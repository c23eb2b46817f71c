//! Client-hosted agents beyond `executeAction`: `cancelAction` when the turn running an
//! action is cancelled, the agent's calls on its channel (`notify`, `setDisplay`,
//! `appendDisplay`, `takeAction`, `appendDiagnosticData`) reaching the conversation's
//! clients, the agent's `@` commands (`getCommands` in completion, `getCommandCompletion`
//! for parameters, `@agent sub params` running `executeCommand`), and the session context
//! (`sessionContextId`) every invoke carries.

use serde_json::{json, Value};

use crate::client_agents::{registration, PHONE};
use crate::completion::{clock_registration, send_raw_result, CLOCK_COMMANDS};
use crate::harness::*;

/// The clock agent's channel.
const CLOCK: &str = "agent:clock";

/// A client of `id` hosting `androidDevice` (actions only).
fn phone_in(server: &Server, id: &str) -> Client {
    let mut phone = server.connect();
    phone.join(id);
    phone
        .agent(
            "registerClientAgent",
            registration("androidDevice", Some(id)),
        )
        .unwrap();
    phone
}

/// A client of `id` hosting `clock` with commands.
fn clock_in(server: &Server, id: &str) -> Client {
    let mut clock = server.connect();
    clock.join(id);
    let interface = ["getCommands", "getCommandCompletion", "executeCommand"];
    clock
        .agent("registerClientAgent", clock_registration(id, &interface))
        .unwrap();
    clock
}

/// The next `method` call on `channel` whose arguments pass `wanted` (skipping join notices,
/// `statusNotice`s and the chat agent's tool-call lines).
fn call_where(
    c: &mut Client,
    channel: &str,
    method: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let args = c.expect_call(channel, method);
        if wanted(&args) {
            return args;
        }
    }
}

/// Whether `s` is a UUID as `randomUUID()` writes it.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        })
}

/// The running `executeAction` gets `cancelAction {actionContextId}` when its turn is
/// cancelled (by `cancelCommand`, then by `interrupt`); the server stops waiting at once (the
/// request is cancelled while the agent has not answered), the late answers are dropped, and
/// the channel's callIds go on after the calls (invokes and calls share the counter).
#[test]
fn a_cancelled_turn_cancels_the_action() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("cancel");
    let mut phone = phone_in(&server, &id);
    let d = dispatcher(&id);

    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (first, args) = phone.expect_invoke(PHONE, "executeAction");
    let context = args[0]["actionContextId"].clone();
    let kind = cli.invoke(&d, "cancelCommand", json!([rid])).unwrap();
    assert_eq!(kind["kind"], "cancelled_running");
    assert_eq!(
        phone.expect_call(PHONE, "cancelAction"),
        json!([{"actionContextId": context}])
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(calls.last().unwrap().0, "requestCancelled");
    phone.send_result(PHONE, first, json!({"historyText": "too late"}));

    // interrupt cancels the running turn the same way.
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (second, args) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(second, first + 2, "cancelAction took callId {}", first + 1);
    let context = args[0]["actionContextId"].clone();
    cli.invoke(&d, "interrupt", json!(["what is 2+3"])).unwrap();
    assert_eq!(
        phone.expect_call(PHONE, "cancelAction"),
        json!([{"actionContextId": context}])
    );
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(calls.last().unwrap().0, "requestCancelled");
    phone.send_error(PHONE, second, "aborted");

    // The late answers went nowhere; the next call is answered normally.
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (third, _) = phone.expect_invoke(PHONE, "executeAction");
    assert_eq!(third, second + 2);
    phone.send_result(PHONE, third, json!({"historyText": "2 alarms"}));
    let calls = cli.until_complete(&id, &rid);
    assert!(calls
        .iter()
        .any(|(m, a)| m == "appendDisplay" && a[0]["toolResult"]["content"] == "2 alarms"));
}

/// The agent's calls while its action runs reach a second client of the conversation:
/// `setDisplay` (and its `set-display` log entry), `appendDisplay`, `appendDiagnosticData`
/// and `notify` are broadcast; `takeAction` goes to the requesting client only. A call
/// naming an action context that is not open is ignored.
#[test]
fn the_agent_calls_reach_the_other_clients() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("calls");
    let mut other = server.connect();
    other.join(&id);
    let mut phone = phone_in(&server, &id);
    let io = clientio(&id);

    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    let context = args[0]["actionContextId"].as_u64().unwrap();
    phone.send_call(
        PHONE,
        "setDisplay",
        json!([{"actionContextId": 99, "content": "stale"}]),
    );
    phone.send_call(
        PHONE,
        "setDisplay",
        json!([{"actionContextId": context, "content": "Alarms:"}]),
    );
    phone.send_call(
        PHONE,
        "appendDisplay",
        json!([{"actionContextId": context, "content": {"type": "text", "content": "07:00"}, "mode": "block"}]),
    );
    phone.send_call(
        PHONE,
        "takeAction",
        json!([{"actionContextId": context, "action": "open-folder", "data": {"path": "/sdcard"}}]),
    );
    phone.send_call(
        PHONE,
        "appendDiagnosticData",
        json!([{"actionContextId": context, "data": {"alarms": 1}}]),
    );
    phone.send_call(
        PHONE,
        "notify",
        json!([0, "info", "Alarm list opened", "n-1"]),
    );

    let request = other.expect_call(&io, "setUserRequest")[0].clone();
    assert_eq!(request["requestId"], rid.as_str());
    let message = |content: Value| json!({"message": content, "requestId": request, "source": "androidDevice", "sourceIcon": "⏰"});
    assert_eq!(
        other.expect_call(&io, "setDisplay"),
        json!([message(json!("Alarms:"))])
    );
    assert_eq!(
        call_where(&mut other, &io, "appendDisplay", |a| a[0]["source"]
            == "androidDevice"),
        json!([
            message(json!({"type": "text", "content": "07:00"})),
            "block"
        ])
    );
    assert_eq!(
        other.expect_call(&io, "appendDiagnosticData"),
        json!([request, {"alarms": 1}])
    );
    assert_eq!(
        call_where(&mut other, &io, "notify", |a| a[3] == "androidDevice"),
        json!([
            "n-1",
            "info",
            "Alarm list opened",
            "androidDevice",
            null,
            null
        ])
    );
    assert_eq!(
        cli.expect_call(&io, "takeAction"),
        json!([request, "open-folder", {"path": "/sdcard"}])
    );

    phone.send_result(PHONE, call_id, json!({"historyText": "1 alarm"}));
    cli.until_complete(&id, &rid);
    // The action context is closed now: its calls are ignored; notify still goes out.
    phone.send_call(
        PHONE,
        "appendDisplay",
        json!([{"actionContextId": context, "content": "late"}]),
    );
    phone.send_call(PHONE, "notify", json!([0, "warning", "after", null]));
    let after = other.until_complete(&id, &rid);
    assert!(after.iter().all(|(m, _)| m != "takeAction"), "{after:?}");
    assert!(
        after.iter().all(|(_, a)| a[0]["message"] != json!("stale")),
        "{after:?}"
    );
    assert_eq!(
        call_where(&mut other, &io, "notify", |a| a[3] == "androidDevice"),
        json!([null, "warning", "after", "androidDevice", null, null])
    );
    assert!(other
        .inbox
        .iter()
        .all(|f| f["message"]["args"][0]["message"] != "late"));
    // setDisplay is in the display log.
    let history = cli
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    assert!(history
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "set-display" && e["message"] == message(json!("Alarms:"))));
}

/// Sends `getCommandCompletion(input)` and answers the `getCommands` it causes.
fn complete_with_clock(cli: &mut Client, clock: &mut Client, id: &str, input: &str) -> u64 {
    let call = cli.send_invoke(
        &dispatcher(id),
        "getCommandCompletion",
        json!([input, "forward"]),
    );
    let (get, args) = clock.expect_invoke(CLOCK, "getCommands");
    assert_eq!(args[0]["contextId"], 0);
    send_raw_result(clock, CLOCK, get, CLOCK_COMMANDS);
    call
}

/// The agent's commands in completion: `Agent Names` lists it, `@clock ` offers its
/// sub-commands in the order it declared them (`getCommands`), and a parameter is completed
/// by its `getCommandCompletion` with TypeAgent's parsed parameters (arguments in declared
/// order). `@clock alarm set -r 07:30 wake up` runs `executeCommand` with the sub-command
/// path and the parsed parameters after `setDisplayInfo`; its `displayContent` is shown and
/// the request completes. Errors: a missing argument, and the agent's `invokeError`.
#[test]
fn the_agent_commands_complete_and_run() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("clock");
    let mut clock = clock_in(&server, &id);
    let d = dispatcher(&id);

    let c = cli
        .invoke(&d, "getCommandCompletion", json!(["@", "forward"]))
        .unwrap();
    assert_eq!(
        c["completions"][1],
        json!({"name": "Agent Names", "completions": ["dispatcher", "system", "clock"],
            "separatorMode": "optionalSpace"})
    );

    let call = complete_with_clock(&mut cli, &mut clock, &id, "@clock ");
    let c = cli.wait_answer(&d, call).unwrap();
    assert_eq!(
        c,
        json!({"startIndex": 7, "completions": [{"name": "Subcommands",
            "completions": ["alarm", "timer"], "separatorMode": "optionalSpace"}],
            "closedSet": true, "directionSensitive": false, "afterWildcard": "none"})
    );

    let call = complete_with_clock(&mut cli, &mut clock, &id, "@clock alarm set 07:");
    let (asked, args) = clock.expect_invoke(CLOCK, "getCommandCompletion");
    let session = args[0]["sessionContextId"].as_str().unwrap().to_string();
    assert!(is_uuid(&session), "{session}");
    assert_eq!(
        args,
        json!([{"contextId": 0, "hasInstanceStorage": false, "hasSessionStorage": false,
            "sessionContextId": session, "commands": ["alarm", "set"],
            "params": {"args": {"time": "07:"}, "flags": {}, "tokens": ["07:"],
                "lastCompletableParam": "time", "lastParamImplicitQuotes": false,
                "nextArgs": ["label"], "remainderLength": 0},
            "names": ["time"], "direction": "forward"}])
    );
    clock.send_result(
        CLOCK,
        asked,
        json!({"groups": [{"name": "Times", "completions": ["07:00", "07:30"]}], "closedSet": true}),
    );
    let c = cli.wait_answer(&d, call).unwrap();
    assert_eq!(
        c,
        json!({"startIndex": 17, "completions": [{"name": "Times",
            "completions": ["07:00", "07:30"], "separatorMode": "optionalSpace"}],
            "closedSet": true, "directionSensitive": false, "afterWildcard": "none"})
    );

    // Running a command.
    let rid = Client::request_id(&cli.submit(&id, "@clock alarm set -r 07:30 wake up"));
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(&mut clock, CLOCK, get, CLOCK_COMMANDS);
    let (run, args) = clock.expect_invoke(CLOCK, "executeCommand");
    assert_eq!(
        args,
        json!([{"actionContextId": 0, "isFromReasoningLoop": false, "contextId": 0,
            "hasInstanceStorage": false, "hasSessionStorage": false, "sessionContextId": session,
            "commands": ["alarm", "set"],
            "params": {"args": {"time": "07:30", "label": "wake up"}, "flags": {"repeat": true},
                "tokens": ["-r", "07:30", "wake up"], "lastCompletableParam": "label",
                "lastParamImplicitQuotes": true, "nextArgs": [], "remainderLength": 0}}])
    );
    clock.send_result(
        CLOCK,
        run,
        json!({"displayContent": "Alarm set for 07:30", "entities": []}),
    );
    let calls = cli.until_complete(&id, &rid);
    let request = calls
        .iter()
        .find(|(m, _)| m == "setUserRequest")
        .map(|(_, a)| a[0].clone())
        .expect("setUserRequest");
    assert_eq!(request["requestId"], rid.as_str());
    // One setDisplayInfo for the command: the agent's, not a second generic one.
    let infos: Vec<&Value> = calls
        .iter()
        .filter(|(m, _)| m == "setDisplayInfo")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(infos, [&json!([request, "clock", null, ["alarm", "set"]])]);
    assert!(calls.contains(&(
        "appendDisplay".to_string(),
        json!([{"message": "Alarm set for 07:30", "requestId": request, "source": "clock",
            "sourceIcon": "🕰"}, "block"])
    )));
    let (method, args) = calls.last().unwrap();
    assert_eq!(
        (method.as_str(), &args[1]),
        ("notify", &json!("commandComplete"))
    );
    assert_eq!(args[0], request);
    assert!(
        args[2]["result"]["metrics"]["command"]["duration"].is_number(),
        "{args}"
    );

    // A command without a table entry and a missing argument: TypeAgent's texts.
    let rid = Client::request_id(&cli.submit(&id, "@clock alarm set"));
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(&mut clock, CLOCK, get, CLOCK_COMMANDS);
    let calls = cli.until_complete(&id, &rid);
    let error = "ERROR: Missing argument 'time'\n\nUsage: @clock alarm set <time> [<label>] [flags]\nFlags:\n  --repeat, -r";
    assert_eq!(calls.last().unwrap().1[2]["result"]["lastError"], error);
    let rid = Client::request_id(&cli.submit(&id, "@clock snooze"));
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(&mut clock, CLOCK, get, CLOCK_COMMANDS);
    let calls = cli.until_complete(&id, &rid);
    assert!(Client::texts(&calls)[0].starts_with(
        "ERROR: 'snooze' is not a subcommand for '@clock'.\n\nUsage: @clock <subcommand>"
    ));

    // The agent's own error.
    let rid = Client::request_id(&cli.submit(&id, "@clock timer 5"));
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(&mut clock, CLOCK, get, CLOCK_COMMANDS);
    let (run, args) = clock.expect_invoke(CLOCK, "executeCommand");
    assert_eq!(args[0]["params"]["args"], json!({"minutes": 5}));
    assert_eq!(args[0]["actionContextId"], 1);
    clock.send_error(CLOCK, run, "No timer app");
    let calls = cli.until_complete(&id, &rid);
    assert_eq!(
        calls.last().unwrap().1[2]["result"]["lastError"],
        "ERROR: No timer app"
    );
}

/// `sessionContextId`: one UUID per registration, the same in every invoke of it
/// (`executeAction` as well); a new registration of the name gets a new one.
#[test]
fn the_session_context_id_is_stable_per_registration() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("session");
    let mut phone = phone_in(&server, &id);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
        let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
        ids.push(args[0]["sessionContextId"].as_str().unwrap().to_string());
        assert!(args[0].get("agentContextId").is_none());
        phone.send_result(PHONE, call_id, Value::Null);
        cli.until_complete(&id, &rid);
    }
    assert!(is_uuid(&ids[0]), "{}", ids[0]);
    assert_eq!(ids[0], ids[1]);
    phone
        .agent("unregisterClientAgent", json!([{"name": "androidDevice"}]))
        .unwrap();
    phone
        .agent(
            "registerClientAgent",
            registration("androidDevice", Some(&id)),
        )
        .unwrap();
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    let renewed = args[0]["sessionContextId"].as_str().unwrap();
    assert!(is_uuid(renewed) && renewed != ids[0]);
    phone.send_result(PHONE, call_id, Value::Null);
    cli.until_complete(&id, &rid);
}
