//! What a client agent's `ActionResult` asks beyond its display, as TypeAgent's dispatcher
//! handles it: a `pendingChoice` becomes a private `requestChoice` / `requestForm` for the
//! request's originator, whose `respondToChoice` runs the agent's `handleChoice` (its result
//! shown like an action's, a chained choice asked again) and answers its `CommandResult`; a
//! `dynamicDisplayId` becomes `setDynamicDisplay`, and the dispatcher's `getDynamicDisplay`,
//! `getTemplateSchema` and `getTemplateCompletion` are forwarded to the agent. The agent is a
//! scripted client (`clock`, with an action and `@clock` commands); the CLI answers its
//! choices in a pseudo-terminal.

use serde_json::{json, Value};

use crate::completion::{send_raw_result, CLOCK_COMMANDS};
use crate::harness::*;

/// The agent's channel.
const CLOCK: &str = "agent:clock";

/// The agent's one action (`clock__install`), for the tool path (`run clock__install {}`).
const CLOCK_SCHEMA: &str = r#"
export type ClockAction = InstallAction;

// Installs the clock's tools.
export type InstallAction = {
    actionName: "install";
};
"#;

/// Everything the agent can implement here.
const ALL: &[&str] = &[
    "executeAction",
    "executeCommand",
    "getCommands",
    "handleChoice",
    "getDynamicDisplay",
    "getTemplateSchema",
    "getTemplateCompletion",
];

/// A client of `id` hosting `clock`, implementing `interface`.
fn clock_in(server: &Server, id: &str, interface: &[&str]) -> Client {
    let mut clock = server.connect();
    clock.join(id);
    let registration = json!([{
        "name": "clock",
        "manifest": {
            "emojiChar": "🕰",
            "description": "A clock.",
            "schema": {
                "description": "A clock.",
                "schemaType": "ClockAction",
                "schemaFile": {"format": "ts", "content": CLOCK_SCHEMA}
            }
        },
        "agentInterface": interface,
        "conversationId": id,
    }]);
    clock.agent("registerClientAgent", registration).unwrap();
    clock
}

/// Submits `@clock alarm list` from `cli`, answers the `getCommands` it causes; the request
/// id and the `executeCommand` invoke (callId, args).
fn run_command(cli: &mut Client, clock: &mut Client, id: &str) -> (String, u64, Value) {
    let rid = Client::request_id(&cli.submit(id, "@clock alarm list"));
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(clock, CLOCK, get, CLOCK_COMMANDS);
    let (call, args) = clock.expect_invoke(CLOCK, "executeCommand");
    (rid, call, args)
}

/// Runs `@clock alarm list`, whose result is `result`; the request id, the `RequestId` object
/// clients see, the calls `cli` got until the completion and the `executeCommand` args.
fn command_asking(
    cli: &mut Client,
    clock: &mut Client,
    id: &str,
    result: Value,
) -> (String, Value, Vec<Call>, Value) {
    let (rid, call, args) = run_command(cli, clock, id);
    clock.send_result(CLOCK, call, result);
    let calls = cli.until_complete(id, &rid);
    let request = calls
        .iter()
        .find(|(m, _)| m == "setUserRequest")
        .map(|(_, a)| a[0].clone())
        .expect("setUserRequest");
    (rid, request, calls, args)
}

/// The args of the `method` call among `calls`.
fn args_of(calls: &[Call], method: &str) -> Value {
    calls
        .iter()
        .find(|(m, _)| m == method)
        .map(|(_, a)| a.clone())
        .unwrap_or_else(|| panic!("no {method} in {calls:?}"))
}

/// `respondToChoice(choiceId, response)` from `cli` while `clock` answers `handleChoice`
/// with `result`: the `handleChoice` args and the `respondToChoice` answer.
fn answer(
    cli: &mut Client,
    clock: &mut Client,
    id: &str,
    choice_id: &str,
    response: Value,
    result: Value,
) -> (Value, Rpc) {
    let d = dispatcher(id);
    let call = cli.send_invoke(&d, "respondToChoice", json!([choice_id, response]));
    let (handle, args) = clock.expect_invoke(CLOCK, "handleChoice");
    clock.send_result(CLOCK, handle, result);
    (args, cli.wait_answer(&d, call))
}

/// The next `appendDisplay` of `c` from the agent `clock`: (its message, its mode).
fn clock_display(c: &mut Client, id: &str) -> (Value, Value) {
    loop {
        let args = c.expect_call(&clientio(id), "appendDisplay");
        if args[0]["source"] == "clock" {
            return (args[0].clone(), args[1].clone());
        }
    }
}

/// A `yesNo` choice of a command's result: only the originator is asked (with TypeAgent's
/// arguments: no choices, the agent as source), the command completes meanwhile; the
/// originator's `true` reaches the agent's `handleChoice` with a fresh action context of the
/// same session context, the agent's calls naming it and its result show to the other client
/// under the original request, and `respondToChoice` answers void. The choice is then gone.
#[test]
fn a_yes_no_choice_is_answered_by_the_agent() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("yes no");
    let mut other = server.connect();
    other.join(&id);
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);

    let result = json!({"displayContent": "Checking…",
        "pendingChoice": {"choiceId": "c-yes", "type": "yesNo", "message": "Install the tools?"}});
    let (rid, request, calls, executed) = command_asking(&mut cli, &mut clock, &id, result);
    assert_eq!(
        args_of(&calls, "requestChoice"),
        json!([
            request,
            "c-yes",
            "yesNo",
            "Install the tools?",
            [],
            "clock",
            null
        ])
    );
    // The other client saw the command complete, without the choice.
    let seen = other.until_complete(&id, &rid);
    assert!(seen.iter().all(|(m, _)| m != "requestChoice"), "{seen:?}");

    // Someone else cannot answer it.
    assert_eq!(
        other.invoke(&d, "respondToChoice", json!(["c-yes", true])),
        Err("Choice not found or expired".into())
    );

    let call = cli.send_invoke(&d, "respondToChoice", json!(["c-yes", true]));
    let (handle, args) = clock.expect_invoke(CLOCK, "handleChoice");
    let context = args[0]["actionContextId"].as_u64().unwrap();
    assert_ne!(json!(context), executed[0]["actionContextId"]);
    assert_eq!(
        args,
        json!([{"contextId": 0, "hasInstanceStorage": false, "hasSessionStorage": false,
                "sessionContextId": executed[0]["sessionContextId"],
                "actionContextId": context, "isFromReasoningLoop": false,
                "choiceId": "c-yes", "response": true}])
    );
    clock.send_call(
        CLOCK,
        "appendDisplay",
        json!([{"actionContextId": context, "content": "Installing…", "mode": "block"}]),
    );
    clock.send_result(CLOCK, handle, json!({"displayContent": "Installed."}));
    assert_eq!(cli.wait_answer(&d, call), Ok(Value::Null));

    let message = |content: &str| json!({"message": content, "requestId": request, "source": "clock", "sourceIcon": "🕰"});
    // The command's own display came with its completion.
    assert!(
        seen.iter()
            .any(|(m, a)| m == "appendDisplay" && *a == json!([message("Checking…"), "block"])),
        "{seen:?}"
    );
    assert_eq!(
        clock_display(&mut other, &id),
        (message("Installing…"), json!("block"))
    );
    assert_eq!(
        clock_display(&mut other, &id),
        (message("Installed."), json!("block"))
    );
    // Logged like the request's other output.
    let history = cli.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    assert!(history
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "append-display" && e["message"] == message("Installed.")));

    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-yes", true])),
        Err("Choice not found or expired".into())
    );
}

/// A `multiChoice` asked by an action the model ran (the tool path) and a `pickRemember`
/// asked by a command: their arguments as TypeAgent sends them; an answer that does not fit
/// is refused and the choice stays open; the answers reach `handleChoice` as sent.
#[test]
fn multi_choice_and_pick_remember_choices() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("multi");
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);

    let rid = Client::request_id(&cli.submit(&id, "run clock__install {}"));
    let (call, _) = clock.expect_invoke(CLOCK, "executeAction");
    clock.send_result(
        CLOCK,
        call,
        json!({"historyText": "Asked which tools.", "pendingChoice": {"choiceId": "c-multi",
            "type": "multiChoice", "message": "Which tools?", "choices": ["git", "make"]}}),
    );
    let calls = cli.until_complete(&id, &rid);
    let request = args_of(&calls, "setUserRequest")[0].clone();
    assert_eq!(
        args_of(&calls, "requestChoice"),
        json!([
            request,
            "c-multi",
            "multiChoice",
            "Which tools?",
            ["git", "make"],
            "clock",
            null
        ])
    );
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-multi", [2]])),
        Err(
            "Invalid argument 1 (response) of respondToChoice: a multiChoice choice is answered \
             with an array of choices from 0 to 1"
                .into()
        )
    );
    let (args, answered) = answer(
        &mut cli,
        &mut clock,
        &id,
        "c-multi",
        json!([0, 1]),
        json!(null),
    );
    assert_eq!(args[0]["response"], json!([0, 1]));
    assert_eq!(answered, Ok(Value::Null));

    let result = json!({"pendingChoice": {"choiceId": "c-pick", "type": "pickRemember",
        "message": "Open with?", "choices": ["vim", "nano"], "checkboxLabel": "Always"}});
    let (_, request, calls, _) = command_asking(&mut cli, &mut clock, &id, result);
    assert_eq!(
        args_of(&calls, "requestChoice"),
        json!([
            request,
            "c-pick",
            "pickRemember",
            "Open with?",
            ["vim", "nano"],
            "clock",
            "Always"
        ])
    );
    assert!(cli
        .invoke(&d, "respondToChoice", json!(["c-pick", {"selected": 2}]))
        .unwrap_err()
        .starts_with("Invalid argument 1 (response) of respondToChoice: "));
    let response = json!({"selected": 1, "remember": true});
    let (args, answered) = answer(
        &mut cli,
        &mut clock,
        &id,
        "c-pick",
        response.clone(),
        json!({}),
    );
    assert_eq!(args[0]["response"], response);
    assert_eq!(answered, Ok(Value::Null));
}

/// A `form` choice goes out as `requestForm(requestId, choiceId, {fields, message}, source)`;
/// its `QuestionFormResponse` reaches `handleChoice`; a `handleChoice` result with an
/// `error` is shown as an error to everyone and is the `lastError` of `respondToChoice`.
#[test]
fn a_form_choice_and_a_failing_answer() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("form");
    let mut other = server.connect();
    other.join(&id);
    let mut clock = clock_in(&server, &id, ALL);

    let fields = json!([
        {"id": "when", "kind": "pick", "prompt": "When?", "choices": ["07:00", "08:00"]},
        {"id": "daily", "kind": "yesNo", "prompt": "Every day?"}
    ]);
    let result = json!({"pendingChoice": {"choiceId": "c-form", "type": "form",
        "message": "New alarm", "fields": fields}});
    let (_, request, calls, _) = command_asking(&mut cli, &mut clock, &id, result);
    assert_eq!(
        args_of(&calls, "requestForm"),
        json!([request, "c-form", {"fields": fields, "message": "New alarm"}, "clock"])
    );
    let response = json!({"answers": {"when": {"kind": "pick", "selected": 1},
                                       "daily": {"kind": "yesNo", "value": true}}});
    let failed = json!({"error": "Alarm storage is full."});
    let (args, answered) = answer(
        &mut cli,
        &mut clock,
        &id,
        "c-form",
        response.clone(),
        failed,
    );
    assert_eq!(args[0]["response"], response);
    assert_eq!(answered, Ok(json!({"lastError": "Alarm storage is full."})));
    let (message, _) = clock_display(&mut other, &id);
    assert_eq!(
        message["message"],
        json!({"type": "text", "content": "Alarm storage is full.", "kind": "error"})
    );
    assert_eq!(message["requestId"], request);
}

/// `handleChoice` may answer with another `pendingChoice`: it is asked of the same
/// originator under the same request (the agent's name as source), and answered the same way;
/// an agent whose `handleChoice` fails gives its error text to `respondToChoice`.
#[test]
fn a_chained_choice() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("chain");
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);

    let result = json!({"pendingChoice": {"choiceId": "step-1", "type": "yesNo",
        "message": "Start?"}});
    let (_, request, _, _) = command_asking(&mut cli, &mut clock, &id, result);
    let next = json!({"displayContent": "Step 1 done.", "pendingChoice": {"choiceId": "step-2",
        "type": "multiChoice", "message": "Then?", "choices": ["stop", "go on"]}});
    let (_, answered) = answer(&mut cli, &mut clock, &id, "step-1", json!(true), next);
    assert_eq!(answered, Ok(Value::Null));
    assert_eq!(
        cli.expect_call(&clientio(&id), "requestChoice"),
        json!([
            request,
            "step-2",
            "multiChoice",
            "Then?",
            ["stop", "go on"],
            "clock",
            null
        ])
    );

    let call = cli.send_invoke(&d, "respondToChoice", json!(["step-2", [1]]));
    let (handle, args) = clock.expect_invoke(CLOCK, "handleChoice");
    assert_eq!(args[0]["choiceId"], "step-2");
    clock.send_error(CLOCK, handle, "Cannot go on.");
    assert_eq!(cli.wait_answer(&d, call), Err("Cannot go on.".into()));
}

/// An unknown choice id, a choice answered after `--interaction-timeout`, and one pushed out
/// by more than `MAX_PENDING_AGENT_CHOICES` (16) newer ones: `Choice not found or expired`.
/// A choice of a turn cannot be taken over by an agent's choice of the same id.
#[test]
fn unknown_expired_and_forgotten_choices() {
    let server = Server::start(&["--interaction-timeout", "0.3"]);
    let (mut cli, id) = server.joined("expiry");
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);
    let not_found = Err("Choice not found or expired".to_string());

    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["nope", true])),
        not_found
    );
    let result = json!({"pendingChoice": {"choiceId": "c-late", "type": "yesNo",
        "message": "Still there?"}});
    command_asking(&mut cli, &mut clock, &id, result);
    server.wait_log("client agent's choice c-late expired");
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-late", true])),
        not_found
    );

    // The bound: 17 choices, the first one is forgotten.
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("bound");
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);
    for n in 0..17 {
        let result = json!({"pendingChoice": {"choiceId": format!("c-{n}"), "type": "yesNo",
            "message": "Ok?"}});
        command_asking(&mut cli, &mut clock, &id, result);
    }
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-0", true])),
        not_found
    );
    let (args, answered) = answer(&mut cli, &mut clock, &id, "c-1", json!(false), json!(null));
    assert_eq!(
        (&args[0]["choiceId"], answered),
        (&json!("c-1"), Ok(Value::Null))
    );
}

/// An agent whose interface lacks `handleChoice`: its choice is asked, and answering it says
/// `Agent 'clock' does not support choices` (the route is used up, as in TypeAgent).
#[test]
fn an_agent_without_handle_choice() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("no handler");
    let mut clock = clock_in(&server, &id, &["executeCommand", "getCommands"]);
    let d = dispatcher(&id);
    let result = json!({"pendingChoice": {"choiceId": "c-1", "type": "yesNo", "message": "Ok?"}});
    let (_, _, calls, _) = command_asking(&mut cli, &mut clock, &id, result);
    assert_eq!(args_of(&calls, "requestChoice")[1], "c-1");
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-1", true])),
        Err("Agent 'clock' does not support choices".into())
    );
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-1", true])),
        Err("Choice not found or expired".into())
    );
}

/// The agent goes while its choice waits: unregistered, or its socket closed; the choice is
/// forgotten. Its socket closing while `handleChoice` runs fails `respondToChoice` with the
/// call's error.
#[test]
fn the_agent_leaving_forgets_its_choices() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("leaving");
    let d = dispatcher(&id);
    let not_found = Err("Choice not found or expired".to_string());
    let ask = |n: &str| json!({"pendingChoice": {"choiceId": n, "type": "yesNo", "message": "?"}});

    let mut clock = clock_in(&server, &id, ALL);
    command_asking(&mut cli, &mut clock, &id, ask("c-unregistered"));
    clock
        .agent("unregisterClientAgent", json!([{"name": "clock"}]))
        .unwrap();
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-unregistered", true])),
        not_found
    );
    drop(clock);

    let mut clock = clock_in(&server, &id, ALL);
    command_asking(&mut cli, &mut clock, &id, ask("c-closed"));
    clock.close();
    let leave = |a: &Value| a[0]["message"]["content"] == "[A client has left this conversation.]";
    while !leave(&cli.expect_call(&clientio(&id), "appendDisplay")) {}
    assert_eq!(
        cli.invoke(&d, "respondToChoice", json!(["c-closed", true])),
        not_found
    );

    let mut clock = clock_in(&server, &id, ALL);
    command_asking(&mut cli, &mut clock, &id, ask("c-running"));
    let call = cli.send_invoke(&d, "respondToChoice", json!(["c-running", true]));
    clock.expect_invoke(CLOCK, "handleChoice");
    clock.close();
    let answered = cli.wait_answer(&d, call);
    assert!(
        answered == Err("the client hosting agent 'clock' disconnected before answering".into())
            || answered == Err("client agent 'clock' was unregistered before answering".into()),
        "{answered:?}"
    );
}

/// `dynamicDisplayId` of an action's result becomes `setDynamicDisplay(requestId, schemaName,
/// actionIndex, displayId, nextRefreshMs)` to every client; the dispatcher's
/// `getDynamicDisplay`, `getTemplateSchema` and `getTemplateCompletion` reach the agent with
/// its session context and answer what it answers (its error text when it fails); an agent
/// that does not implement one gets TypeAgent's "not supported" texts.
#[test]
fn dynamic_display_and_templates_are_forwarded() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("dynamic");
    let mut other = server.connect();
    other.join(&id);
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);

    let rid = Client::request_id(&cli.submit(&id, "run clock__install {}"));
    let (call, executed) = clock.expect_invoke(CLOCK, "executeAction");
    clock.send_result(
        CLOCK,
        call,
        json!({"historyText": "Installing.", "dynamicDisplayId": "progress",
               "dynamicDisplayNextRefreshMs": 500}),
    );
    let calls = other.until_complete(&id, &rid);
    let request = args_of(&calls, "setUserRequest")[0].clone();
    let index = calls
        .iter()
        .find(|(m, a)| m == "setDisplayInfo" && a[1] == "clock")
        .map(|(_, a)| a[2].clone())
        .expect("the action's setDisplayInfo");
    assert_eq!(
        args_of(&calls, "setDynamicDisplay"),
        json!([request, "clock", index, "progress", 500])
    );

    let session = executed[0]["sessionContextId"].clone();
    let context = json!({"contextId": 0, "hasInstanceStorage": false,
                         "hasSessionStorage": false, "sessionContextId": session});
    let with = |fields: Value| {
        let mut all = context.clone();
        all.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        json!([all])
    };
    let asked: [(&str, Value, &str, Value, Value); 3] = [
        (
            "getDynamicDisplay",
            json!(["clock", "html", "progress"]),
            "getDynamicDisplay",
            with(json!({"type": "html", "displayId": "progress"})),
            json!({"content": "<b>50%</b>", "nextRefreshMs": -1}),
        ),
        (
            "getTemplateSchema",
            json!(["clock", "alarm", {"time": "07:00"}]),
            "getTemplateSchema",
            with(json!({"templateName": "alarm", "data": {"time": "07:00"}})),
            json!({"templateAgentName": "clock", "templateName": "alarm", "data": {}}),
        ),
        (
            "getTemplateCompletion",
            json!(["clock", "alarm", {}, "time"]),
            "getTemplateCompletion",
            with(json!({"templateName": "alarm", "data": {}, "propertyName": "time"})),
            json!(["07:00", "08:00"]),
        ),
    ];
    for (method, args, invoked, sent, answered) in asked {
        let call = other.send_invoke(&d, method, args);
        let (handle, got) = clock.expect_invoke(CLOCK, invoked);
        assert_eq!(got, sent, "{method}");
        clock.send_result(CLOCK, handle, answered.clone());
        assert_eq!(other.wait_answer(&d, call), Ok(answered), "{method}");
    }
    let call = other.send_invoke(&d, "getDynamicDisplay", json!(["clock", "html", "gone"]));
    let (handle, _) = clock.expect_invoke(CLOCK, "getDynamicDisplay");
    clock.send_error(CLOCK, handle, "Unknown display gone");
    assert_eq!(
        other.wait_answer(&d, call),
        Err("Unknown display gone".into())
    );
    drop(clock);

    // Another registration without these methods: TypeAgent's texts.
    let mut plain = server.connect();
    plain.join(&id);
    let registration = json!([{"name": "plain", "manifest": {"description": "Plain."},
        "agentInterface": ["executeCommand"], "conversationId": id}]);
    plain.agent("registerClientAgent", registration).unwrap();
    for (method, args, error) in [
        (
            "getDynamicDisplay",
            json!(["plain", "html", "d"]),
            "Dynamic display not supported by 'plain'",
        ),
        (
            "getTemplateSchema",
            json!(["plain", "t", {}]),
            "Template schema not supported by 'plain'",
        ),
        (
            "getTemplateCompletion",
            json!(["plain", "t", {}, "p"]),
            "Template schema not supported by 'plain'",
        ),
    ] {
        assert_eq!(cli.invoke(&d, method, args), Err(error.into()), "{method}");
    }
}

/// An agent that does not answer `getDynamicDisplay` within `--client-agent-timeout`: the
/// dispatcher call fails with the time-out's text.
#[test]
fn a_forwarded_call_times_out() {
    let server = Server::start(&["--client-agent-timeout", "0.3"]);
    let (mut cli, id) = server.joined("slow");
    let mut clock = clock_in(&server, &id, ALL);
    let d = dispatcher(&id);
    let call = cli.send_invoke(&d, "getDynamicDisplay", json!(["clock", "html", "d"]));
    clock.expect_invoke(CLOCK, "getDynamicDisplay");
    assert_eq!(
        cli.wait_answer(&d, call),
        Err("client agent 'clock' did not answer within 0.3 s".into())
    );
}

/// `roundtable connect` answers a client agent's choices: the first (asked inline while its
/// command runs, or at the prompt once the command completed first) and a chained one, each
/// reaching `handleChoice` as TypeAgent's shapes (`true`, `[1]`), their results printed.
#[test]
fn the_cli_answers_a_client_agents_choices() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = crate::cli::pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    let mut lister = server.connect();
    let id = lister.agent("listConversations", json!(["CLI"])).unwrap()[0]["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut clock = clock_in(&server, &id, ALL);

    // Answers a choice whose line the CLI printed: inline (`> `) or with /answer.
    let pick = |p: &mut rexpect::session::PtySession, asked: &str, n: &str| {
        let (_, how) = p
            .exp_regex(&format!(
                r"{} (> |\(answer with /answer <n>\))",
                regex_escape(asked)
            ))
            .unwrap();
        let line = if how.ends_with("> ") {
            n.to_string()
        } else {
            format!("/answer {n}")
        };
        p.send_line(&line).unwrap();
    };

    p.send_line("@clock alarm list").unwrap();
    let (get, _) = clock.expect_invoke(CLOCK, "getCommands");
    send_raw_result(&mut clock, CLOCK, get, CLOCK_COMMANDS);
    let (call, _) = clock.expect_invoke(CLOCK, "executeCommand");
    clock.send_result(
        CLOCK,
        call,
        json!({"pendingChoice": {"choiceId": "c-1", "type": "yesNo", "message": "Install?"}}),
    );
    pick(&mut p, "? Install? [1] Yes [2] No", "1");
    let (handle, args) = clock.expect_invoke(CLOCK, "handleChoice");
    assert_eq!(args[0]["response"], true);
    clock.send_result(
        CLOCK,
        handle,
        json!({"displayContent": "Installed.", "pendingChoice": {"choiceId": "c-2",
            "type": "multiChoice", "message": "Which?", "choices": ["git", "make"]}}),
    );
    p.exp_string("Installed.").unwrap();
    pick(&mut p, "? Which? [1] git [2] make", "2");
    let (handle, args) = clock.expect_invoke(CLOCK, "handleChoice");
    assert_eq!(
        (&args[0]["choiceId"], &args[0]["response"]),
        (&json!("c-2"), &json!([1]))
    );
    clock.send_result(CLOCK, handle, json!({"displayContent": "Picked make."}));
    p.exp_string("Picked make.").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// `text` as a regular expression matching itself.
fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}
