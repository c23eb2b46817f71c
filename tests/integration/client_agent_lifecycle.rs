//! Client-hosted agents' lifecycle, as TypeAgent's dispatcher runs an agent-rpc agent: at
//! registration `initializeAgentContext` (its `contextId` becomes every later invoke's
//! `agentContextId`), `updateAgentContext(enable: true)` per schema and
//! `startBackgroundTasks`, all before the registration is answered; when the agent goes
//! `stopBackgroundTasks`, `updateAgentContext(enable: false)` per schema and
//! `closeAgentContext`. Only the methods the agent lists are sent; a failing
//! `initializeAgentContext` fails the registration.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::completion::{send_raw_result, CLOCK_COMMANDS};
use crate::harness::*;

/// The clock agent's channel.
const CLOCK: &str = "agent:clock";

/// Every method of TypeAgent's `agentInterface` (`AgentInvokeFunctions` and the calls but
/// `cancelAction`).
const ALL_METHODS: &[&str] = &[
    "initializeAgentContext",
    "updateAgentContext",
    "executeAction",
    "validateWildcardMatch",
    "getDynamicDisplay",
    "closeAgentContext",
    "startBackgroundTasks",
    "stopBackgroundTasks",
    "getCommands",
    "getCommandCompletion",
    "executeCommand",
    "resolveEntity",
    "getTemplateSchema",
    "getTemplateCompletion",
    "getActionCompletion",
    "handleChoice",
    "getDynamicSchema",
    "getDynamicGrammar",
    "checkReadiness",
    "setup",
    "streamPartialAction",
];

/// The clock's own schema: one action.
const CLOCK_SCHEMA: &str = r#"export type ClockAction = ShowTimeAction;

// Shows the time.
export type ShowTimeAction = {
    actionName: "showTime";
};
"#;

/// Its sub-schema `clock.timer`: one action.
const TIMER_SCHEMA: &str = r#"export type TimerAction = StartTimerAction;

// Starts a timer.
export type StartTimerAction = {
    actionName: "startTimer";
    parameters: {
        // How long, in minutes.
        minutes: number;
    };
};
"#;

/// `registerClientAgent` for `clock` in `conversation`, with a schema and a sub-schema,
/// listing `interface`.
fn clock_registration(conversation: &str, interface: &[&str]) -> Value {
    let schema = |name: &str, content: &str| {
        json!({"description": "Clock.", "schemaType": name,
            "schemaFile": {"format": "ts", "content": content}})
    };
    json!([{
        "name": "clock",
        "manifest": {
            "emojiChar": "🕰",
            "description": "A clock.",
            "schema": schema("ClockAction", CLOCK_SCHEMA),
            "subActionManifests": {
                "timer": {"description": "Timers.", "schema": schema("TimerAction", TIMER_SCHEMA)}
            }
        },
        "agentInterface": interface,
        "conversationId": conversation,
    }])
}

/// The invokes the agent received: (method, its argument object).
type Seen = Vec<(String, Value)>;

/// Plays the clock agent: answers every invoke on its channel (`initializeAgentContext` with
/// `{contextId: 42}`, `getCommands` with [`CLOCK_COMMANDS`], the runs with a result, the
/// rest void), recording it in `seen`, until a frame passes `done`; returns that frame.
fn serve_until(agent: &mut Client, seen: &mut Seen, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "gave up; seen: {seen:?}");
        let Some(f) = agent.read_frame(Duration::from_millis(200)) else {
            assert!(agent.closed.is_none(), "agent closed: {:?}", agent.closed);
            continue;
        };
        let m = &f["message"];
        // Calls (no answer expected, e.g. `streamPartialAction`) are recorded too, so the
        // exact sequence below also shows which methods are never sent.
        if f["name"] == CLOCK && m["type"] == "call" {
            seen.push((
                m["name"].as_str().unwrap().to_string(),
                m["args"][0].clone(),
            ));
        }
        if f["name"] == CLOCK && m["type"] == "invoke" {
            let method = m["name"].as_str().unwrap().to_string();
            let call_id = m["callId"].as_u64().unwrap();
            seen.push((method.clone(), m["args"][0].clone()));
            match method.as_str() {
                "initializeAgentContext" => {
                    agent.send_result(CLOCK, call_id, json!({"contextId": 42}))
                }
                "getCommands" => send_raw_result(agent, CLOCK, call_id, CLOCK_COMMANDS),
                "executeAction" => {
                    agent.send_result(CLOCK, call_id, json!({"historyText": "It is noon."}))
                }
                "executeCommand" => {
                    agent.send_result(CLOCK, call_id, json!({"displayContent": "Timer set."}))
                }
                _ => agent.send_result(CLOCK, call_id, Value::Null),
            }
        }
        if done(&f) {
            return f;
        }
    }
}

/// Whether `f` answers `call_id` on `agent-server`.
fn answers(f: &Value, call_id: u64) -> bool {
    f["name"] == AGENT_SERVER
        && f["message"]["callId"] == call_id
        && matches!(
            f["message"]["type"].as_str(),
            Some("invokeResult" | "invokeError")
        )
}

/// Whether `f` is the server's invoke of `method` on the clock's channel.
fn invokes(f: &Value, method: &str) -> bool {
    f["name"] == CLOCK && f["message"]["type"] == "invoke" && f["message"]["name"] == method
}

/// The `agent-server` answer `f` as a result or an error text.
fn outcome(f: &Value) -> Rpc {
    match f["message"]["type"].as_str() {
        Some("invokeResult") => Ok(f["message"]["result"].clone()),
        _ => Err(f["message"]["error"].as_str().unwrap().to_string()),
    }
}

/// An agent listing every method of TypeAgent's interface gets, over a registration, an
/// action, an `@clock` command and its unregistration, exactly TypeAgent's sequence:
/// `initializeAgentContext({})`, `updateAgentContext(enable: true)` for `clock` then
/// `clock.timer`, `startBackgroundTasks` (all before the registration is answered), the runs,
/// then `stopBackgroundTasks`, `updateAgentContext(enable: false)` per schema and
/// `closeAgentContext` (before the unregistration is answered). Every invoke after
/// `initializeAgentContext` carries the `agentContextId` it answered (42).
#[test]
fn the_lifecycle_runs_in_typeagent_order() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("lifecycle");
    let mut agent = server.connect();
    agent.join(&id);
    let mut seen = Seen::new();

    let reg = agent.send_invoke(
        AGENT_SERVER,
        "registerClientAgent",
        clock_registration(&id, ALL_METHODS),
    );
    let answer = serve_until(&mut agent, &mut seen, |f| answers(f, reg));
    assert_eq!(outcome(&answer), Ok(Value::Null));

    let rid = Client::request_id(&cli.submit(&id, "run clock__showTime"));
    serve_until(&mut agent, &mut seen, |f| invokes(f, "executeAction"));
    let calls = cli.until_complete(&id, &rid);
    assert!(
        crate::client_agents::tool_results(&calls).contains(&("It is noon.".into(), false)),
        "{calls:?}"
    );

    let rid = Client::request_id(&cli.submit(&id, "@clock timer 5"));
    serve_until(&mut agent, &mut seen, |f| invokes(f, "executeCommand"));
    let calls = cli.until_complete(&id, &rid);
    let shown = |(m, a): &Call| m == "appendDisplay" && a[0]["message"] == "Timer set.";
    assert!(calls.iter().any(shown), "{calls:?}");

    let unreg = agent.send_invoke(
        AGENT_SERVER,
        "unregisterClientAgent",
        json!([{"name": "clock", "conversationId": id}]),
    );
    let answer = serve_until(&mut agent, &mut seen, |f| answers(f, unreg));
    assert_eq!(outcome(&answer), Ok(Value::Null));

    let methods: Vec<&str> = seen.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "initializeAgentContext",
            "updateAgentContext",
            "updateAgentContext",
            "startBackgroundTasks",
            "executeAction",
            "getCommands",
            "executeCommand",
            "stopBackgroundTasks",
            "updateAgentContext",
            "updateAgentContext",
            "closeAgentContext",
        ]
    );
    assert_eq!(seen[0].1, json!({}), "no settings, no optionsCallBack");
    for (method, args) in &seen[1..] {
        assert_eq!(args["agentContextId"], 42, "{method}: {args}");
        assert_eq!(args["contextId"], 0, "{method}: {args}");
    }
    let updates: Vec<(Value, Value)> = seen
        .iter()
        .filter(|(m, _)| m == "updateAgentContext")
        .map(|(_, a)| (a["enable"].clone(), a["schemaName"].clone()))
        .collect();
    assert_eq!(
        updates,
        [
            (json!(true), json!("clock")),
            (json!(true), json!("clock.timer")),
            (json!(false), json!("clock")),
            (json!(false), json!("clock.timer")),
        ]
    );
    // The session context of one registration throughout.
    let session = &seen[1].1["sessionContextId"];
    assert!(seen[1..]
        .iter()
        .all(|(_, a)| &a["sessionContextId"] == session));
}

/// An agent listing only `executeAction` gets none of the lifecycle invokes: its first
/// invoke (callId 0) is the action, without `agentContextId`, and its unregistration sends
/// nothing (the answer is the next frame on the socket).
#[test]
fn an_agent_without_lifecycle_methods_gets_none() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("no lifecycle");
    let mut agent = server.connect();
    agent.join(&id);
    let registered = agent.agent(
        "registerClientAgent",
        clock_registration(&id, &["executeAction"]),
    );
    assert_eq!(registered, Ok(Value::Null));

    let rid = Client::request_id(&cli.submit(&id, "run clock__showTime"));
    let (call_id, args) = agent.expect_invoke(CLOCK, "executeAction");
    assert_eq!(call_id, 0, "an invoke came before the action");
    assert!(args[0].get("agentContextId").is_none(), "{args}");
    agent.send_result(CLOCK, call_id, json!({"historyText": "It is noon."}));
    cli.until_complete(&id, &rid);

    let unreg = agent.send_invoke(
        AGENT_SERVER,
        "unregisterClientAgent",
        json!([{"name": "clock", "conversationId": id}]),
    );
    let mut seen = Seen::new();
    let answer = serve_until(&mut agent, &mut seen, |f| answers(f, unreg));
    assert_eq!(outcome(&answer), Ok(Value::Null));
    assert_eq!(seen, Seen::new());
    assert!(
        !agent.inbox.iter().any(|f| f["name"] == CLOCK),
        "{:?}",
        agent.inbox
    );
}

/// `initializeAgentContext` answering an error fails the registration with the agent's text;
/// nothing more is sent to it (no `closeAgentContext`: it has no context), its name is free,
/// and registering again works.
#[test]
fn a_failing_initialize_fails_the_registration() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("failing init");
    let mut agent = server.connect();
    agent.join(&id);
    let interface = [
        "initializeAgentContext",
        "executeAction",
        "closeAgentContext",
    ];

    let reg = agent.send_invoke(
        AGENT_SERVER,
        "registerClientAgent",
        clock_registration(&id, &interface),
    );
    let (init, _) = agent.expect_invoke(CLOCK, "initializeAgentContext");
    agent.send_error(CLOCK, init, "The clock is broken.");
    assert_eq!(
        agent.wait_answer(AGENT_SERVER, reg),
        Err("Client agent 'clock' failed to initialize: The clock is broken.".into())
    );
    let status = cli
        .invoke(&dispatcher(&id), "getStatus", json!([]))
        .unwrap();
    assert!(
        !agent_names(&status).contains(&"clock".to_string()),
        "{status}"
    );

    let reg = agent.send_invoke(
        AGENT_SERVER,
        "registerClientAgent",
        clock_registration(&id, &interface),
    );
    let mut seen = Seen::new();
    let answer = serve_until(&mut agent, &mut seen, |f| answers(f, reg));
    assert_eq!(outcome(&answer), Ok(Value::Null));
    let methods: Vec<&str> = seen.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(methods, ["initializeAgentContext"]);
    assert!(
        !agent.inbox.iter().any(|f| f["name"] == CLOCK),
        "{:?}",
        agent.inbox
    );
}

/// The agent is closed (`stopBackgroundTasks`, `updateAgentContext(enable: false)` per
/// schema, `closeAgentContext`, with its `agentContextId`) when its client leaves the
/// conversation, when another client unregisters it, and when the conversation is deleted.
#[test]
fn leaving_unregistered_by_another_or_deleted_closes_the_agent() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("leave");
    let teardown = [
        "stopBackgroundTasks",
        "updateAgentContext",
        "updateAgentContext",
        "closeAgentContext",
    ];
    for how in ["leave", "unregistered by another client", "delete"] {
        let mut agent = server.connect();
        agent.join(&id);
        let mut seen = Seen::new();
        let reg = agent.send_invoke(
            AGENT_SERVER,
            "registerClientAgent",
            clock_registration(&id, ALL_METHODS),
        );
        let answer = serve_until(&mut agent, &mut seen, |f| answers(f, reg));
        assert_eq!(outcome(&answer), Ok(Value::Null));
        seen.clear();
        match how {
            "leave" => {
                agent.send_invoke(AGENT_SERVER, "leaveConversation", json!([id]));
            }
            "delete" => {
                cli.agent("deleteConversation", json!([id])).unwrap();
            }
            _ => {
                let unregistered = cli.agent(
                    "unregisterClientAgent",
                    json!([{"name": "clock", "conversationId": id}]),
                );
                assert_eq!(unregistered, Ok(Value::Null));
            }
        }
        serve_until(&mut agent, &mut seen, |f| invokes(f, "closeAgentContext"));
        let methods: Vec<&str> = seen.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(methods, teardown, "{how}");
        assert!(seen.iter().all(|(_, a)| a["agentContextId"] == 42), "{how}");
    }
}

/// `initializeAgentContext` unanswered within `--client-agent-timeout` fails the registration
/// with the time-out's text; the late answer is dropped.
#[test]
fn an_unanswered_initialize_fails_the_registration() {
    let server = Server::start(&["--client-agent-timeout", "0.3"]);
    let (_cli, id) = server.joined("slow init");
    let mut agent = server.connect();
    agent.join(&id);
    let reg = agent.send_invoke(
        AGENT_SERVER,
        "registerClientAgent",
        clock_registration(&id, &["initializeAgentContext", "executeAction"]),
    );
    let (init, _) = agent.expect_invoke(CLOCK, "initializeAgentContext");
    assert_eq!(
        agent.wait_answer(AGENT_SERVER, reg),
        Err("Client agent 'clock' failed to initialize: client agent 'clock' did not answer within 0.3 s".into())
    );
    agent.send_result(CLOCK, init, json!({"contextId": 1}));
    let status = agent
        .invoke(&dispatcher(&id), "getStatus", json!([]))
        .unwrap();
    assert!(
        !agent_names(&status).contains(&"clock".to_string()),
        "{status}"
    );
}

/// The names of `getStatus`'s agents.
fn agent_names(status: &Value) -> Vec<String> {
    status["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}
