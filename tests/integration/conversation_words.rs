//! Conversations managed in words and handoff between conversations (issue 28, parts 1 and 3),
//! over real sockets with the builtin provider and the scripted OpenAI-compatible model:
//! each phrase (or the model's `manage_conversation` call) becomes the `takeAction
//! manage-conversation` payload `@conversation` sends, to the requester only, just before its
//! request completes; `@conversation handoff` (or words) appends the destination model's
//! summary of another conversation to this one, shown to every client, replayed, and sent to
//! the model next turn; each way a handoff fails answers its own text and changes nothing.

use std::sync::mpsc;
use std::sync::Mutex;

use roundtable_actors::conversation::{HANDOFF_INSTRUCTION, HANDOFF_SYSTEM};
use serde_json::{json, Value};

use crate::harness::*;

/// The `takeAction` calls among `calls`: (index in `calls`, args).
fn actions(calls: &[Call]) -> Vec<(usize, Value)> {
    calls
        .iter()
        .enumerate()
        .filter(|(_, (m, _))| m == "takeAction")
        .map(|(i, (_, a))| (i, a.clone()))
        .collect()
}

/// The `lastError` of the request's `commandComplete` (Null when it succeeded).
fn last_error(calls: &[Call]) -> Value {
    let (method, args) = calls.last().expect("calls");
    assert_eq!(method, "notify", "{calls:?}");
    args[2]["result"]["lastError"].clone()
}

/// The `kind` of the request's displays, in order.
fn kinds(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|(m, a)| m == "appendDisplay" && a[0]["requestId"]["requestId"] != "system")
        .map(|(_, a)| a[0]["message"]["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether a model request is a handoff's summary request.
fn is_summary(body: &Value) -> bool {
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"] == HANDOFF_INSTRUCTION
}

/// The text of the newest user message of a model request.
fn user_text(body: &Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    if last["role"] == "user" {
        last["content"].as_str().unwrap_or("").to_string()
    } else {
        String::new()
    }
}

/// A model that answers a user message `plan` knows with the tool calls it gives (in one
/// response), a handoff's summary request with `summary(n)` (`n`: summary requests before
/// this one), and anything else with `results: <the tool messages as JSON>` after tool
/// calls, or `noted`.
fn model(
    plan: impl Fn(&str) -> Vec<(&'static str, Value)> + Send + Sync + 'static,
    summary: impl Fn(usize) -> (u16, String) + Send + Sync + 'static,
) -> ScriptedHttp {
    let summaries = Mutex::new(0usize);
    scripted(move |_, body| {
        if is_summary(body) {
            let mut n = summaries.lock().unwrap();
            *n += 1;
            return summary(*n - 1);
        }
        if let Some(answer) = planned_tool_calls(body, &plan) {
            return answer;
        }
        let last = body["messages"].as_array().and_then(|m| m.last());
        if last.is_some_and(|m| m["role"] == "user" && m["content"].is_string()) {
            return (
                200,
                completion(json!({"role": "assistant", "content": "noted"})),
            );
        }
        tool_results_answer(body)
    })
}

/// A summary answer with `text`.
fn summary_of(text: &str) -> (u16, String) {
    (
        200,
        completion(json!({"role": "assistant", "content": text})),
    )
}

/// Every phrase of the issue and TypeAgent's design, and their variants (rename, info, next,
/// previous), with the builtin provider: each is the `manage-conversation` payload of the
/// `@conversation` command that means the same, sent with `takeAction` to the requester only,
/// after the request's last display and just before its completion.
#[test]
fn phrases_become_the_conversation_payload_for_the_requester_only() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("words");
    let mut b = server.connect();
    b.join(&id);
    let cases = [
        (
            "switch to my work conversation",
            "@conversation switch work",
        ),
        (
            "create a new conversation called research",
            "@conversation new research",
        ),
        (
            "delete the old project conversation",
            "@conversation delete old project",
        ),
        ("list my conversations", "@conversation list"),
        ("which conversation am I in?", "@conversation info"),
        ("next conversation", "@conversation next"),
        ("go back to the previous conversation", "@conversation prev"),
        (
            "rename this conversation to Notes",
            "@conversation rename Notes",
        ),
        (
            "rename my work conversation to office",
            "@conversation rename work office",
        ),
        (
            "find the conversation about taxes",
            "@conversation find taxes",
        ),
    ];
    for (words, command) in cases {
        let typed = a.run_turn(&id, command);
        let typed = actions(&typed);
        assert_eq!(typed.len(), 1, "{command}");
        let expected = typed[0].1[2].clone();

        let ack = a.submit(&id, words);
        let rid = Client::request_id(&ack);
        let calls = a.until_complete(&id, &rid);
        let sent = actions(&calls);
        assert_eq!(sent.len(), 1, "{words}: {calls:?}");
        let (at, args) = &sent[0];
        assert_eq!(args[0]["requestId"], rid.as_str(), "{words}");
        assert_eq!(args[1], "manage-conversation", "{words}");
        assert_eq!(args[2], expected, "{words}");
        // The model's answer first, then the action, then the completion.
        let last_display = calls
            .iter()
            .rposition(|(m, _)| m == "appendDisplay")
            .unwrap();
        assert!(last_display < *at, "{words}: {calls:?}");
        assert!(
            calls[at + 1..]
                .iter()
                .all(|(m, a)| m != "appendDisplay" || a[0]["requestId"]["requestId"] != rid),
            "{words}"
        );
        assert_eq!(last_error(&calls), Value::Null, "{words}");
        let answer = Client::texts(&calls).pop().unwrap();
        assert!(
            answer.starts_with("Your client app will "),
            "{words}: {answer}"
        );
        // The other client sees the turn, never the action.
        let seen = b.until_complete(&id, &rid);
        assert!(actions(&seen).is_empty(), "{words}: {seen:?}");
    }
    // The tool is offered to every turn and named in the agent list.
    let calls = a.run_turn(&id, "@system config agents");
    let text = Client::texts(&calls).join("\n");
    assert!(
        text.contains("- `manage_conversation`: available."),
        "{text}"
    );
}

/// With a model: the offered `manage_conversation` tool and its description; the model's call
/// is the same `takeAction` to the requester, and the model is told what the client will do;
/// input it cannot use is an error result it sees (no action); a reply sends at most 4
/// actions.
#[test]
fn the_model_calls_manage_conversation() {
    let model = model(
        |text| match text {
            "tidy up" => vec![(
                "manage_conversation",
                json!({"subcommand": "switch", "name": " work "}),
            )],
            "help me" => vec![("manage_conversation", json!({"subcommand": "help"}))],
            "list five times" => (0..5)
                .map(|_| ("manage_conversation", json!({"subcommand": "list"})))
                .collect(),
            _ => vec![],
        },
        |_| summary_of("unused"),
    );
    let server = Server::with_model(&model, "m", &[]);
    let (mut a, id) = server.joined("model");
    let mut b = server.connect();
    b.join(&id);

    let ack = a.submit(&id, "tidy up");
    let rid = Client::request_id(&ack);
    // A model's switch is first put to the requester (tests/integration/consent.rs).
    a.answer_choice(&id, true);
    let calls = a.until_complete(&id, &rid);
    let sent = actions(&calls);
    assert_eq!(sent.len(), 1, "{calls:?}");
    assert_eq!(sent[0].1[0]["requestId"], rid.as_str());
    assert_eq!(
        sent[0].1[2],
        json!({"subcommand": "switch", "name": "work"})
    );
    assert!(actions(&b.until_complete(&id, &rid)).is_empty());
    let bodies = model.bodies.lock().unwrap().clone();
    let tool = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "manage_conversation")
        .expect("manage_conversation offered")
        .clone();
    let description = tool["function"]["description"].as_str().unwrap();
    for phrase in [
        "\"switch to my work conversation\" → switch",
        "\"hand off my research conversation here\" → handoff",
        "does not report back",
    ] {
        assert!(description.contains(phrase), "{phrase}: {description}");
    }
    assert_eq!(
        tool["function"]["parameters"]["properties"]["subcommand"]["enum"],
        json!([
            "new", "list", "info", "switch", "prev", "next", "rename", "delete", "find", "search",
            "handoff"
        ])
    );
    let told = bodies[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(told["role"], "tool");
    assert_eq!(
        told["content"],
        "Your client app will switch to the conversation named or matching \"work\" when this \
         reply ends, and show the result itself."
    );

    let calls = a.run_turn(&id, "help me");
    assert!(actions(&calls).is_empty(), "{calls:?}");
    let bodies = model.bodies.lock().unwrap().clone();
    let told = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        told["content"],
        "ERROR: unknown subcommand \"help\": use one of new, list, info, switch, prev, next, rename, \
         delete, find, search, handoff"
    );

    let calls = a.run_turn(&id, "list five times");
    let sent = actions(&calls);
    assert_eq!(sent.len(), 4, "{calls:?}");
    assert!(sent
        .iter()
        .all(|(_, a)| a[2] == json!({"subcommand": "list"})));
    let bodies = model.bodies.lock().unwrap().clone();
    let told: Vec<Value> = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        told.last().unwrap(),
        "ERROR: this reply already sent 4 actions to the client, the most one reply may send"
    );
}

/// `@conversation handoff <name>` with a model: the destination's model summarizes the source
/// (its messages, then the handoff instruction, no tools); only the packet is appended: shown
/// to both clients of the destination, replayed by `getDisplayHistory`, and in the model's
/// next request. A loaded source is read from memory, an evicted one (named by id) from disk.
#[test]
fn a_handoff_appends_the_summary_for_every_client_and_the_next_turn() {
    let model = model(
        |_| vec![],
        |_| summary_of("Budget: 42 euros. Next: book the venue."),
    );
    let server = Server::with_model(&model, "m", &["--idle-timeout", "0.2"]);
    let (mut r, research) = server.joined("research");
    r.run_turn(&research, "the budget is 42 euros");
    let (mut a, work) = server.joined("work");
    let mut b = server.connect();
    b.join(&work);
    let hello = Client::request_id(&a.submit(&work, "hello"));
    a.until_complete(&work, &hello);
    b.until_complete(&work, &hello);

    let ack = a.submit(&work, "@conversation handoff  Research ");
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&work, &rid);
    let packet = "**Handoff from \"research\"** (2 messages summarized)\n\nBudget: 42 euros. \
                  Next: book the venue.";
    assert_eq!(Client::texts(&calls), [packet]);
    assert_eq!(kinds(&calls), ["info"]);
    assert_eq!(last_error(&calls), Value::Null);
    let shown = calls.iter().find(|(m, _)| m == "appendDisplay").unwrap().1[0].clone();
    assert_eq!(shown["handoff"]["name"], "research");
    assert_eq!(shown["handoff"]["conversationId"], research.as_str());
    assert_eq!(shown["handoff"]["messages"], 2);
    // The other client of the destination sees it live.
    assert_eq!(Client::texts(&b.until_complete(&work, &rid)), [packet]);

    // The summary request: the source's messages, the instruction, the destination's model.
    let bodies = model.bodies.lock().unwrap().clone();
    let asked = bodies.iter().find(|b| is_summary(b)).unwrap();
    assert_eq!(asked["model"], "m");
    assert!(asked
        .get("tools")
        .is_none_or(|t| t.as_array().unwrap().is_empty()));
    assert_eq!(
        asked["messages"],
        json!([
            {"role": "system", "content": HANDOFF_SYSTEM},
            {"role": "user", "content": "the budget is 42 euros"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": HANDOFF_INSTRUCTION},
        ])
    );

    // Replayed: a client joining later gets it from the display log.
    let history = a
        .invoke(&dispatcher(&work), "getDisplayHistory", json!([]))
        .unwrap();
    let entry = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["message"]["handoff"].is_object())
        .expect("handoff entry in the display log");
    assert_eq!(entry["message"]["message"]["content"], packet);

    // The model's next turn reads it, after the destination's own messages.
    a.run_turn(&work, "what was the budget?");
    let bodies = model.bodies.lock().unwrap().clone();
    let next = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<&str> = next.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(
        texts[1..],
        [
            "hello",
            "noted",
            "[Handoff packet from the conversation \"research\": a summary of it, brought into \
             this conversation to continue from.]\nBudget: 42 euros. Next: book the venue.",
            "what was the budget?"
        ]
    );

    // The source unloaded (evicted once its client left), named by id: read from disk.
    r.agent("leaveConversation", json!([research])).unwrap();
    eventually("research evicted", || {
        server.metric("roundtable_loaded_conversations") == 1.0
    });
    let calls = a.run_turn(&work, &format!("@conversation handoff {research}"));
    assert_eq!(Client::texts(&calls), [packet]);
    let bodies = model.bodies.lock().unwrap().clone();
    let asked = bodies.iter().rev().find(|b| is_summary(b)).unwrap();
    assert_eq!(asked["messages"][1]["content"], "the budget is 42 euros");
}

/// Words with the builtin provider: "hand off my research conversation here" calls
/// `manage_conversation`; the handoff runs once the reply has ended (the packet follows the
/// answer), with the builtin's local summary; `@system history` then holds the packet.
#[test]
fn words_hand_off_with_the_builtin_provider() {
    let server = Server::start(&[]);
    let (mut r, research) = server.joined("research");
    r.run_turn(&research, "remember the number 42");
    let (mut a, work) = server.joined("work");
    let calls = a.run_turn(&work, "hand off my research conversation here");
    let texts = Client::texts(&calls);
    assert_eq!(
        texts,
        [
            "manage_conversation({\"name\":\"research\",\"subcommand\":\"handoff\"})",
            "When this reply ends, the server summarizes the conversation \"research\" and adds \
             the summary to this conversation, or says why it could not.",
            "**Handoff from \"research\"** (2 messages summarized)\n\nSummary of 2 earlier \
             messages. The user asked:\n- remember the number 42",
        ]
    );
    assert!(actions(&calls).is_empty());
    assert_eq!(last_error(&calls), Value::Null);
    let history = Client::texts(&a.run_turn(&work, "@system history")).join("\n");
    assert!(
        history.contains("[Handoff packet from the conversation \"research\""),
        "{history}"
    );
    assert!(history.contains("- remember the number 42"), "{history}");
}

/// Each way a handoff fails answers its own text (shown as an error, and `lastError`) and
/// leaves the destination's chat history as it was: no conversation given, an unknown source,
/// the destination itself (by name or id), a source with no history, the model failing, the
/// model writing nothing.
#[test]
fn each_failed_handoff_says_why_and_changes_nothing() {
    let model = model(
        |_| vec![],
        |n| match n {
            0 => (400, r#"{"error":"bad request"}"#.to_string()),
            _ => summary_of("  "),
        },
    );
    let server = Server::with_model(&model, "m", &[]);
    let (mut r, research) = server.joined("research");
    r.run_turn(&research, "some facts");
    let mut c = server.connect();
    c.create("empty");
    let (mut a, work) = server.joined("work");
    a.run_turn(&work, "hello");
    let history = |a: &mut Client| Client::texts(&a.run_turn(&work, "@system history")).join("\n");
    let before = history(&mut a);
    assert!(
        before.starts_with("Chat history: the last 2 of 2 messages"),
        "{before}"
    );

    let calls = a.run_turn(&work, "@conversation handoff");
    let usage = "Give a conversation: @conversation handoff <name or id>";
    assert_eq!(Client::texts(&calls), [usage]);
    assert_eq!(kinds(&calls), ["warning"]);
    assert_eq!(last_error(&calls), usage);

    for (command, error) in [
        (
            "@conversation handoff nope".to_string(),
            "handoff: no conversation is named \"nope\" or has that id",
        ),
        (
            "@conversation handoff WORK".to_string(),
            "handoff: \"work\" is this conversation; name another conversation to hand off from",
        ),
        (
            format!("@conversation handoff {work}"),
            "handoff: \"work\" is this conversation; name another conversation to hand off from",
        ),
        (
            "@conversation handoff empty".to_string(),
            "handoff: \"empty\" has no chat history to hand off",
        ),
        (
            "@conversation handoff research".to_string(),
            "handoff: the summary of \"research\" failed: provider returned HTTP 400: bad request",
        ),
        (
            "@conversation handoff research".to_string(),
            "handoff: the model wrote no summary of \"research\"",
        ),
    ] {
        let calls = a.run_turn(&work, &command);
        assert_eq!(Client::texts(&calls), [error], "{command}");
        assert_eq!(kinds(&calls), ["error"], "{command}");
        assert_eq!(last_error(&calls), error, "{command}");
    }
    assert_eq!(history(&mut a), before);
    let bodies = model.bodies.lock().unwrap().clone();
    assert_eq!(bodies.iter().filter(|b| is_summary(b)).count(), 2);
}

/// A destination running a turn: the packet is never written into it. `@conversation handoff`
/// asked while a turn runs waits in the queue (visibly queued, no summary asked yet) and its
/// packet follows that turn; asked by the model inside its turn, it runs when the turn's agent
/// loop has ended (the turn's own next model call does not see it, the next turn does); a
/// second handoff in the same reply is refused with its own text.
#[test]
fn a_handoff_never_writes_into_a_running_turn() {
    let gate = Gate::closed();
    let held = gate.clone();
    let model = model(
        move |text| match text {
            "slow" => {
                held.pass();
                vec![]
            }
            "bring research over" => vec![(
                "manage_conversation",
                json!({"subcommand": "handoff", "name": "research"}),
            )],
            "twice" => vec![
                (
                    "manage_conversation",
                    json!({"subcommand": "handoff", "name": "research"}),
                ),
                (
                    "manage_conversation",
                    json!({"subcommand": "handoff", "name": "research"}),
                ),
            ],
            _ => vec![],
        },
        |n| summary_of(&format!("Summary {n}.")),
    );
    let server = Server::with_model(&model, "m", &[]);
    let (mut r, research) = server.joined("research");
    r.run_turn(&research, "facts");
    let (mut a, work) = server.joined("work");
    let mut b = server.connect();
    b.join(&work);

    let slow = Client::request_id(&a.submit(&work, "slow"));
    let ack = b.submit(&work, "@conversation handoff research");
    assert_eq!(ack["entry"]["state"], "queued", "{ack}");
    let handoff = Client::request_id(&ack);
    assert_eq!(
        model
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| is_summary(b))
            .count(),
        0
    );
    gate.open();
    let calls = a.until_complete(&work, &slow);
    assert_eq!(Client::texts(&calls), ["noted"]);
    let calls = b.until_complete(&work, &handoff);
    assert_eq!(
        Client::texts(&calls).last().unwrap(),
        "**Handoff from \"research\"** (2 messages summarized)\n\nSummary 0."
    );
    let history = a
        .invoke(&dispatcher(&work), "getDisplayHistory", json!([]))
        .unwrap();
    let contents: Vec<String> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            e["message"]["message"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(
        contents,
        [
            "noted",
            "**Handoff from \"research\"** (2 messages summarized)\n\nSummary 0."
        ]
    );

    // Asked by the model: after the reply, never inside it (once the requester allowed it,
    // tests/integration/consent.rs).
    let ack = a.submit(&work, "bring research over");
    a.answer_choice(&work, true);
    let calls = a.until_complete(&work, &Client::request_id(&ack));
    let texts = Client::texts(&calls);
    assert_eq!(
        texts.last().unwrap(),
        "**Handoff from \"research\"** (2 messages summarized)\n\nSummary 1."
    );
    assert!(texts[texts.len() - 2].starts_with("results: "), "{texts:?}");
    let bodies = model.bodies.lock().unwrap().clone();
    let in_turn = bodies
        .iter()
        .rev()
        .find(|b| !is_summary(b))
        .unwrap()
        .to_string();
    assert!(!in_turn.contains("Summary 1."), "{in_turn}");
    a.run_turn(&work, "and now?");
    let bodies = model.bodies.lock().unwrap().clone();
    let next = bodies.last().unwrap().to_string();
    assert!(next.contains("Summary 1."), "{next}");
    assert_eq!(user_text(bodies.last().unwrap()), "and now?");

    // One handoff per reply: the second is refused before anyone is asked about it.
    let ack = a.submit(&work, "twice");
    a.answer_choice(&work, true);
    let calls = a.until_complete(&work, &Client::request_id(&ack));
    assert!(calls.iter().all(|(m, _)| m != "requestChoice"), "{calls:?}");
    let bodies = model.bodies.lock().unwrap().clone();
    let told: Vec<Value> = bodies.iter().rev().find(|b| !is_summary(b)).unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        told.last().unwrap(),
        "ERROR: handoff: this reply already hands off \"research\"; ask for another handoff \
         after it has ended"
    );
    assert_eq!(
        Client::texts(&calls).last().unwrap(),
        "**Handoff from \"research\"** (2 messages summarized)\n\nSummary 2."
    );
    assert_eq!(bodies.iter().filter(|b| is_summary(b)).count(), 3);
}

/// The destination deleted while its handoff's summary is being written: the requester is
/// told the handoff did not happen, then that the conversation was deleted, and the request
/// is cancelled; the summary that arrives afterwards goes nowhere, the source is untouched.
#[test]
fn a_destination_deleted_meanwhile_gets_no_packet() {
    let gate = Gate::closed();
    let held = gate.clone();
    let (asked_tx, asked) = mpsc::channel();
    let asked_tx = Mutex::new(asked_tx);
    let model = model(
        |_| vec![],
        move |_| {
            let _ = asked_tx.lock().unwrap().send(());
            held.pass();
            summary_of("Too late.")
        },
    );
    let server = Server::with_model(&model, "m", &[]);
    let (mut r, research) = server.joined("research");
    r.run_turn(&research, "facts");
    let (mut a, work) = server.joined("work");
    let rid = Client::request_id(&a.submit(&work, "@conversation handoff research"));
    asked.recv_timeout(WAIT).expect("summary asked");
    let mut c = server.connect();
    c.agent("deleteConversation", json!([work])).unwrap();

    // What the requester is told, up to the deleted notice.
    let channel = clientio(&work);
    let mut calls: Vec<Call> = Vec::new();
    while !calls
        .iter()
        .any(|(m, a)| m == "notify" && a[1] == "conversationDeleted")
    {
        let frame = a.read_frame(WAIT).expect("the deletion is announced");
        if frame["name"] == channel.as_str() && frame["message"]["type"] == "call" {
            let message = &frame["message"];
            calls.push((
                message["name"].as_str().unwrap().to_string(),
                message["args"].clone(),
            ));
        }
    }
    let shown: Vec<(String, Value)> = calls
        .iter()
        .filter(|(m, _)| m == "appendDisplay")
        .map(|(_, a)| {
            (
                a[0]["message"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                a[0]["requestId"]["requestId"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "handoff: this conversation was deleted before the packet of \"research\" was \
                 added"
                    .to_string(),
                json!(rid)
            ),
            (
                "[This conversation was deleted.]".to_string(),
                json!("system")
            ),
        ],
        "{calls:?}"
    );
    gate.open();
    // The source is untouched and can still be handed off elsewhere.
    let (mut d, elsewhere) = server.joined("elsewhere");
    let calls = d.run_turn(&elsewhere, "@conversation handoff research");
    assert_eq!(
        Client::texts(&calls),
        ["**Handoff from \"research\"** (2 messages summarized)\n\nToo late."]
    );
}
