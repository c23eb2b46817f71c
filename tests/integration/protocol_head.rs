//! TypeAgent's protocol at head (issue 26), the queue and results side: the
//! `requestCancelled` reasons TypeAgent emits (`user`, `no_clients`, `server_stopping`), what
//! follows a cancel, `commandComplete`'s `{result: {metrics, traceId, …}}`, the call order of
//! one request with `setDisplayInfo` and a coalesced `queueStateChanged`, an invoke's
//! `metadata` (W3C trace context), `ProcessCommandOptions` and the working-directory policy,
//! queue snapshots, and `agent-cli` living through the deletion of its conversation.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

/// A 1×1 PNG, base64 (an attachment).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A W3C trace id and a parent span id, as a client with tracing on sends them.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";

/// callIds the tests give their hand-written invokes: far above the harness's own counters.
const OWN_CALL_IDS: u64 = 1_000_000;

/// Collects the `clientio:<id>` calls `c` receives until `done(method, args)` holds for one
/// (included); every other frame stays for later, in order.
fn calls_until(c: &mut Client, id: &str, mut done: impl FnMut(&str, &Value) -> bool) -> Vec<Call> {
    let channel = clientio(id);
    let deadline = Instant::now() + WAIT;
    let mut calls = Vec::new();
    let mut kept = Vec::new();
    loop {
        let Some(f) = c.read_frame(Duration::from_millis(200)) else {
            assert!(
                c.closed.is_none(),
                "socket closed: {:?}; got {calls:?}",
                c.closed
            );
            assert!(Instant::now() < deadline, "timed out; got {calls:?}");
            continue;
        };
        if f["name"] != channel.as_str() || f["message"]["type"] != "call" {
            kept.push(f);
            continue;
        }
        let method = f["message"]["name"].as_str().unwrap().to_string();
        let args = f["message"]["args"].clone();
        let stop = done(&method, &args);
        calls.push((method, args));
        if stop {
            for k in kept.into_iter().rev() {
                c.inbox.push_front(k);
            }
            return calls;
        }
    }
}

/// Whether a call is `commandComplete` of `rid`.
fn completes(rid: &str) -> impl Fn(&str, &Value) -> bool + '_ {
    move |m, a| m == "notify" && a[1] == "commandComplete" && a[0]["requestId"] == rid
}

/// Whether a call is `requestCancelled` of `rid`.
fn cancels(rid: &str) -> impl Fn(&str, &Value) -> bool + '_ {
    move |m, a| m == "requestCancelled" && a[0] == rid
}

/// The calls a request produced, without the system notices (joins, leaves, status notices)
/// that other clients' comings and goings add.
fn own(calls: &[Call]) -> Vec<Call> {
    let notice = |m: &str, a: &Value| {
        let system_display = m == "appendDisplay" && a[0]["requestId"]["requestId"] == "system";
        let status = m == "notify" && a[1] == "statusNotice";
        system_display || status
    };
    calls
        .iter()
        .filter(|(m, a)| !notice(m, a))
        .cloned()
        .collect()
}

/// The method names of `calls`.
fn methods(calls: &[Call]) -> Vec<&str> {
    calls.iter().map(|(m, _)| m.as_str()).collect()
}

/// Sends an invoke with `metadata` (and a callId of its own); its answer.
fn invoke_with_metadata(
    c: &mut Client,
    channel: &str,
    call_id: u64,
    method: &str,
    args: Value,
    metadata: Value,
) -> Rpc {
    let frame = json!({"name": channel, "message": {"type": "invoke", "callId": call_id,
        "name": method, "args": args, "metadata": metadata}});
    c.send_text(&frame.to_string());
    c.wait_answer(channel, call_id)
}

/// Submits `text` as the server-side request `rid`; the ack.
fn submit_as(c: &mut Client, id: &str, text: &str, rid: &str) -> Value {
    c.invoke(
        &dispatcher(id),
        "submitCommand",
        json!([text, null, null, format!("client-{rid}"), rid]),
    )
    .expect("submitCommand")
}

/// Opens its gate when dropped, so no scripted answer stays held after a test.
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A server whose model holds back its answer to a request whose newest message says `slow`
/// until the returned gate opens (at the latest when it is dropped), and answers `done`
/// otherwise: a turn that keeps running, not waiting on anybody. `envs` go to the server.
fn gated_server(extra: &[&str], envs: &[(&str, &str)]) -> (Server, OpenOnDrop, ScriptedHttp) {
    let gate = Gate::closed();
    let model = model_held_by(&gate, |body| {
        body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m.to_string().contains("slow"))
    });
    let mut args = vec!["--provider", "openai"];
    args.extend_from_slice(extra);
    let mut all = vec![
        ("ROUNDTABLE_OPENAI_BASE_URL", model.url.as_str()),
        ("ROUNDTABLE_OPENAI_MODEL", "gated"),
    ];
    all.extend_from_slice(envs);
    (Server::start_env(&args, &all), OpenOnDrop(gate), model)
}

/// A running request (its model call held) and one queued behind it, both submitted by `c`.
fn running_and_queued(c: &mut Client, id: &str, running: &str, queued: &str) {
    let ack = submit_as(c, id, "slow work", running);
    assert_eq!(ack["entry"]["state"], "running", "{ack}");
    let ack = submit_as(c, id, "@help", queued);
    assert_eq!(ack["entry"]["state"], "queued", "{ack}");
}

/// Fractional milliseconds, as a `PhaseTiming.duration` carries them.
fn is_duration(v: &Value) -> bool {
    v.as_f64().is_some_and(|d| d >= 0.0)
}

/// Whether `v` is a W3C trace id: 32 lowercase hex digits.
fn is_trace_id(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

// ---- requestCancelled reasons (item 1) --------------------------------------------------

/// `cancelCommand` of a queued request: `requestCancelled` with TypeAgent's reason `user` and
/// no `commandComplete` ever; of the running one: `requestCancelled` `user`, then
/// `commandComplete` with `{cancelled: true, metrics, traceId}` and a `command-result` entry.
#[test]
fn cancel_command_is_reason_user_and_only_a_running_cancel_completes() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("cancel");
    running_and_queued(&mut a, &id, "run-1", "queued-1");
    let d = dispatcher(&id);
    let r = a.invoke(&d, "cancelCommand", json!(["queued-1"])).unwrap();
    assert_eq!(r["kind"], "cancelled_queued");
    let mut seen = calls_until(&mut a, &id, cancels("queued-1"));
    assert_eq!(seen.last().unwrap().1[1], "user");
    let r = a.invoke(&d, "cancelCommand", json!(["run-1"])).unwrap();
    assert_eq!(r["kind"], "cancelled_running");
    let calls = calls_until(&mut a, &id, completes("run-1"));
    let own = own(&calls);
    let at = own
        .iter()
        .position(|(m, a)| m == "requestCancelled" && a[0] == "run-1")
        .expect("requestCancelled");
    assert_eq!(own[at].1[1], "user");
    assert!(own[at].1[2].is_u64(), "{:?}", own[at]);
    assert_eq!(at + 1, own.len() - 1, "commandComplete follows it: {own:?}");
    let result = &own.last().unwrap().1[2]["result"];
    assert_eq!(result["cancelled"], true, "{result}");
    assert!(is_duration(&result["metrics"]["duration"]), "{result}");
    assert!(is_trace_id(&result["traceId"]), "{result}");
    seen.extend(calls);
    // The next request runs to its end; the queued one never completed.
    let ack = a.submit(&id, "@help");
    seen.extend(a.until_complete(&id, &Client::request_id(&ack)));
    assert!(
        !seen.iter().any(|(m, a)| completes("queued-1")(m, a)),
        "a queued cancel completed: {seen:?}"
    );
    let h = a.history(&id);
    let result_of = |rid: &str| {
        h.iter()
            .filter(|e| e["type"] == "command-result" && e["requestId"]["requestId"] == rid)
            .count()
    };
    assert_eq!((result_of("run-1"), result_of("queued-1")), (1, 0));
}

/// `cancelCommandByClientId` (a call) cancels with reason `user`.
#[test]
fn cancel_by_client_id_is_reason_user() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("by client id");
    running_and_queued(&mut a, &id, "run-2", "queued-2");
    a.send_call(
        &dispatcher(&id),
        "cancelCommandByClientId",
        json!(["client-queued-2"]),
    );
    let calls = calls_until(&mut a, &id, cancels("queued-2"));
    assert_eq!(calls.last().unwrap().1[1], "user");
    a.send_call(
        &dispatcher(&id),
        "cancelCommandByClientId",
        json!(["client-run-2"]),
    );
    let calls = calls_until(&mut a, &id, cancels("run-2"));
    assert_eq!(calls.last().unwrap().1[1], "user");
    let calls = calls_until(&mut a, &id, completes("run-2"));
    assert_eq!(calls.last().unwrap().1[2]["result"]["cancelled"], true);
}

/// `interrupt` goes to the head of the queue, then cancels the running request (reason
/// `user`), so it runs next, before what was already queued.
#[test]
fn interrupt_is_reason_user_and_runs_before_the_queue() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("interrupt");
    running_and_queued(&mut a, &id, "run-3", "queued-3");
    let ack = a
        .invoke(&dispatcher(&id), "interrupt", json!(["@system help"]))
        .unwrap();
    let interrupt = Client::request_id(&ack);
    let calls = calls_until(&mut a, &id, completes(&interrupt));
    let at = calls
        .iter()
        .position(|(m, a)| cancels("run-3")(m, a))
        .expect("cancelled");
    assert_eq!(calls[at].1[1], "user");
    assert!(calls
        .iter()
        .any(|(m, a)| completes("run-3")(m, a) && a[2]["result"]["cancelled"] == true));
    // What started after the cancel: the interrupt, not what was queued before it.
    let started: Vec<&Value> = calls[at..]
        .iter()
        .filter(|(m, _)| m == "requestStarted")
        .map(|(_, a)| &a[0]["requestId"])
        .collect();
    assert_eq!(started, [&json!(interrupt)], "{calls:?}");
    let calls = calls_until(&mut a, &id, completes("queued-3"));
    assert!(calls
        .iter()
        .any(|(m, a)| m == "requestStarted" && a[0]["requestId"] == "queued-3"));
}

/// A submit while the running request waits on a question supersedes it: reason `user`.
#[test]
fn supersede_is_reason_user() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("supersede");
    assert_eq!(submit_as(&mut a, &id, "ask me Stuck?", "run-4")["ok"], true);
    a.expect_call(&clientio(&id), "requestInteraction");
    let next = Client::request_id(&a.submit(&id, "hello"));
    let calls = calls_until(&mut a, &id, cancels("run-4"));
    assert_eq!(calls.last().unwrap().1[1], "user");
    a.until_complete(&id, &next);
}

/// After the last client stayed away for the grace period, queued work is cancelled with
/// `no_clients` and a running request is left alone; a running request stalled on a question
/// nobody can answer is cancelled with `no_clients` too.
#[test]
fn no_clients_is_its_own_reason() {
    let (server, gate, _model) = gated_server(&["--no-clients-grace", "0.2"], &[]);
    let (mut a, id) = server.joined("nobody");
    running_and_queued(&mut a, &id, "run-5", "queued-5");
    drop(a);
    server.wait_log(&format!(
        "conversation {id}: queued-5 cancelled (no_clients), saved and announced \
         (requestCancelled reason no_clients)"
    ));
    // The running request was left alone: it finishes once its model answers.
    drop(gate);
    let mut b = server.connect();
    b.join(&id);
    eventually("the running request finishes", || {
        b.history(&id)
            .iter()
            .any(|e| e["type"] == "command-result" && e["requestId"]["requestId"] == "run-5")
    });
    assert!(
        !server.log().contains("run-5 cancelled"),
        "{}",
        server.log()
    );

    let server = Server::start(&["--no-clients-grace", "0.2"]);
    let (mut a, id) = server.joined("stalled");
    assert_eq!(
        submit_as(&mut a, &id, "ask me Anyone?", "asks-5")["ok"],
        true
    );
    a.expect_call(&clientio(&id), "requestInteraction");
    drop(a);
    server.wait_log(&format!(
        "conversation {id}: asks-5 cancelled (no_clients), saved and announced \
         (requestCancelled reason no_clients)"
    ));
}

/// A server shutting down cancels queued and running work with `server_stopping`. As in
/// TypeAgent's server, the sockets are closed (1001) before the conversations stop, so no
/// client is left to see it: the log says which reason went out.
#[test]
fn shutdown_is_reason_server_stopping() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("stopping");
    running_and_queued(&mut a, &id, "run-6", "queued-6");
    let mut admin = server.connect();
    admin.send_invoke(AGENT_SERVER, "shutdown", json!([]));
    assert_eq!(a.wait_close(), 1001);
    for rid in ["queued-6", "run-6"] {
        server.wait_log(&format!(
            "conversation {id}: {rid} cancelled (server_stopping), saved and announced \
             (requestCancelled reason server_stopping)"
        ));
    }
}

/// A conversation deleted under its queue cancels its work with `server_stopping` (TypeAgent
/// has no reason for it: the request will never run and nobody asked it to stop).
#[test]
fn a_deleted_conversation_is_reason_server_stopping() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("doomed");
    running_and_queued(&mut a, &id, "run-7", "queued-7");
    let mut other = server.connect();
    other.agent("deleteConversation", json!([id])).unwrap();
    let mut reasons = Vec::new();
    calls_until(&mut a, &id, |m, args| {
        if m == "requestCancelled" {
            reasons.push((args[0].clone(), args[1].clone()));
        }
        completes("run-7")(m, args)
    });
    assert_eq!(
        reasons,
        [
            (json!("queued-7"), json!("server_stopping")),
            (json!("run-7"), json!("server_stopping"))
        ]
    );
}

/// A request whose acceptance cannot be written (the storage fault seam: ENOSPC) is refused
/// with `storage_error`, and the clients that saw it start learn it is gone with
/// `server_stopping`.
#[test]
fn a_storage_failure_is_reason_server_stopping() {
    let switch_dir = tempfile::tempdir().unwrap();
    let switch = switch_dir.path().join("fault");
    let (server, _gate, _model) = gated_server(
        &[],
        &[("ROUNDTABLE_TEST_FAULT_FILE", switch.to_str().unwrap())],
    );
    let (mut a, id) = server.joined("faulty");
    a.run_turn(&id, "@help");
    // The journal's closing record of `@help` is queued before its completion is sent and
    // written after: the fault must not hit it (the conversation would then refuse the next
    // request before queueing it), so wait until the writer holds nothing.
    let deadline = Instant::now() + WAIT;
    while server.metric("roundtable_log_writer_queued_bytes") != 0.0 {
        assert!(Instant::now() < deadline, "the log writer never caught up");
        std::thread::yield_now();
    }
    std::fs::write(&switch, "ENOSPC").unwrap();
    let refused = submit_as(&mut a, &id, "slow and doomed", "doomed-8");
    assert_eq!(refused["error"], "storage_error", "{refused}");
    let calls = calls_until(&mut a, &id, cancels("doomed-8"));
    assert_eq!(calls.last().unwrap().1[1], "server_stopping");
    std::fs::remove_file(&switch).unwrap();
}

// ---- commandComplete, the call order, setDisplayInfo (items 2 and 3) --------------------

/// Issue 50 (a): the builtin answers `ask me …` with a question; TypeAgent's CLI records its
/// prompt's raw mode at the submit's answer, and with the question first it stopped taking
/// Enter once the question was cancelled. The answer reaches the submitter first, then the
/// question.
#[test]
fn a_submits_answer_comes_before_its_question() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("ask-order");
    let call_id = a.send_invoke(
        &dispatcher(&id),
        "submitCommand",
        json!(["ask me is it cold?", null, null, "q-1", "question-1"]),
    );
    let mut frames = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !frames
        .iter()
        .any(|f: &Value| f["message"]["name"] == "requestInteraction")
    {
        assert!(Instant::now() < deadline, "{frames:?}");
        if let Some(f) = a.read_frame(Duration::from_millis(200)) {
            frames.push(f);
        }
    }
    let answer = frames
        .iter()
        .position(|f| f["message"]["callId"] == call_id && f["message"]["type"] == "invokeResult");
    let question = frames
        .iter()
        .position(|f| f["message"]["name"] == "requestInteraction")
        .unwrap();
    assert!(answer.is_some_and(|answer| answer < question), "{frames:?}");
}

/// One `@` command, as a second client sees it and as its submitter sees it: exactly
/// TypeAgent's order, `setDisplayInfo` with the command's words, `commandComplete` with
/// `{metrics: {parse, command, actions: [], duration}, traceId}` and one `queueStateChanged`,
/// after it; the submit's answer arrives after `setUserRequest`. The history holds the
/// `set-display-info` entry and the same metrics and trace id in `command-result`.
#[test]
fn one_request_goes_out_in_typeagents_order() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("order");
    let mut b = server.connect();
    b.join(&id);
    let d = dispatcher(&id);
    let call_id = a.send_invoke(
        &d,
        "submitCommand",
        json!(["@system help", null, null, "o-1", "order-1"]),
    );
    let expected = [
        "requestQueued",
        "requestStarted",
        "setUserRequest",
        "setDisplayInfo",
        "appendDisplay",
        "notify",
        "queueStateChanged",
    ];
    // The submitter: every frame, the answer included.
    let mut frames = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !frames
        .iter()
        .any(|f: &Value| f["message"]["name"] == "queueStateChanged")
    {
        assert!(Instant::now() < deadline, "{frames:?}");
        if let Some(f) = a.read_frame(Duration::from_millis(200)) {
            frames.push(f);
        }
    }
    let answer = frames
        .iter()
        .position(|f| f["message"]["callId"] == call_id && f["message"]["type"] == "invokeResult")
        .expect("the submit's answer");
    // The answer comes first, before any call of its request, as TypeAgent's server sends it
    // (issue 50: TypeAgent's CLI records its prompt's state at the answer, and a question
    // that came first left its prompt refusing Enter).
    let first_call = frames
        .iter()
        .position(|f| f["message"]["type"] == "call" && f.to_string().contains("order-1"))
        .unwrap();
    assert!(answer < first_call, "{frames:?}");
    // Started by this submit (and already finished): `running`, with its `startedAt`, as
    // TypeAgent's entry on an idle queue.
    let entry = &frames[answer]["message"]["result"]["entry"];
    assert_eq!(entry["state"], "running", "{entry}");
    assert!(entry["startedAt"].is_u64(), "{entry}");
    let calls: Vec<Call> = frames
        .iter()
        .filter(|f| f["message"]["type"] == "call")
        .map(|f| {
            (
                f["message"]["name"].as_str().unwrap().to_string(),
                f["message"]["args"].clone(),
            )
        })
        .collect();
    assert_eq!(methods(&own(&calls)), expected);
    // The other client: the same calls.
    let calls = own(&calls_until(&mut b, &id, |m, _| m == "queueStateChanged"));
    assert_eq!(methods(&calls), expected);
    let args = |m: &str| &calls.iter().find(|(n, _)| n == m).unwrap().1;
    let info = args("setDisplayInfo");
    assert_eq!(info.as_array().unwrap().len(), 4, "{info}");
    assert_eq!(info[0]["requestId"], "order-1");
    assert_eq!(
        (&info[1], &info[2], &info[3]),
        (&json!("system"), &Value::Null, &json!(["help"]))
    );
    let result = &args("notify")[2]["result"];
    let metrics = &result["metrics"];
    for phase in ["parse", "command"] {
        assert!(is_duration(&metrics[phase]["duration"]), "{result}");
    }
    assert_eq!(metrics["actions"], json!([]));
    assert!(is_duration(&metrics["duration"]), "{result}");
    assert!(is_trace_id(&result["traceId"]), "{result}");
    assert!(result.get("lastError").is_none());
    let queued_version = args("requestQueued")[1].as_u64().unwrap();
    let snapshot = &args("queueStateChanged")[0];
    assert_eq!(
        snapshot,
        &json!({"running": null, "queued": [], "paused": false, "version": queued_version + 2})
    );
    // The next request: again no snapshot before its completion (the last one went out).
    let ack = b.submit(&id, "@help");
    let calls = own(&b.until_complete(&id, &Client::request_id(&ack)));
    assert_eq!(methods(&calls), expected[..6]);

    let h = b.history(&id);
    let of_order: Vec<&Value> = h
        .iter()
        .filter(|e| {
            e["requestId"]["requestId"] == "order-1"
                || e["message"]["requestId"]["requestId"] == "order-1"
        })
        .collect();
    let types: Vec<&Value> = of_order.iter().map(|e| &e["type"]).collect();
    assert_eq!(
        types,
        [
            &json!("user-request"),
            &json!("set-display-info"),
            &json!("append-display"),
            &json!("command-result")
        ]
    );
    let info = of_order[1];
    assert_eq!(
        (&info["source"], &info["action"]),
        (&json!("system"), &json!(["help"]))
    );
    assert!(info.get("actionIndex").is_none(), "{info}");
    assert!(info["seq"].is_u64() && info["timestamp"].is_u64(), "{info}");
    assert_eq!(of_order[3]["metrics"], *metrics);
    assert_eq!(of_order[3]["traceId"], result["traceId"]);
}

/// An agent turn: `setDisplayInfo(…, "dispatcher", null, ["request"])`, then per tool call
/// `setDisplayInfo(…, "chat", 0, {schemaName, actionName, parameters})` before its displays
/// and `appendDiagnosticData` with its result; `commandComplete`'s metrics have the model
/// time as `parse`, one `actions` entry per tool call and no `command`. A failed command
/// carries `lastError` and its metrics.
#[test]
fn an_agent_turn_names_its_actions_and_times_them() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("turn");
    let ack = a.submit(&id, "what is 2+3");
    let rid = Client::request_id(&ack);
    let calls = own(&a.until_complete(&id, &rid));
    let infos: Vec<&Value> = calls
        .iter()
        .filter(|(m, _)| m == "setDisplayInfo")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(infos.len(), 2, "{calls:?}");
    assert_eq!(
        infos[0].as_array().unwrap()[1..],
        [json!("dispatcher"), Value::Null, json!(["request"])]
    );
    assert_eq!(
        infos[1].as_array().unwrap()[1..],
        [
            json!("chat"),
            json!(0),
            json!({"schemaName": "chat", "actionName": "calculate", "parameters": {"expression": "2+3"}})
        ]
    );
    let at = |pred: &dyn Fn(&Call) -> bool| calls.iter().position(pred).unwrap();
    let tool_info = at(&|(m, a)| m == "setDisplayInfo" && a[2] == 0);
    let tool_call = at(&|(m, a)| m == "appendDisplay" && a[0].get("toolCall").is_some());
    let diagnostic = at(&|(m, _)| m == "appendDiagnosticData");
    assert!(tool_info < tool_call && tool_call < diagnostic, "{calls:?}");
    assert_eq!(
        calls[diagnostic].1[1],
        json!({"type": "actionResult", "source": "chat", "schemaName": "chat", "actionIndex": 0,
               "result": {"historyText": "5", "entities": []}})
    );
    let metrics = &calls.last().unwrap().1[2]["result"]["metrics"];
    assert!(is_duration(&metrics["parse"]["duration"]), "{metrics}");
    assert_eq!(metrics["actions"].as_array().unwrap().len(), 1, "{metrics}");
    assert!(is_duration(&metrics["actions"][0]["duration"]), "{metrics}");
    assert!(metrics.get("command").is_none(), "{metrics}");
    // The history replays both, the tool's with its index; appendDiagnosticData is not logged.
    let h = a.history(&id);
    let logged: Vec<&Value> = h
        .iter()
        .filter(|e| e["type"] == "set-display-info" && e["requestId"]["requestId"] == rid.as_str())
        .collect();
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[1]["actionIndex"], 0);
    assert_eq!(logged[1]["action"]["actionName"], "calculate");
    // A failed command: lastError and its metrics.
    let ack = a.submit(&id, "@nope");
    let calls = a.until_complete(&id, &Client::request_id(&ack));
    let result = &calls.last().unwrap().1[2]["result"];
    assert_eq!(
        result["lastError"],
        "Unknown command @nope. Type @help for the list."
    );
    assert!(is_duration(&result["metrics"]["duration"]), "{result}");
}

// ---- metadata and trace ids (item 4) ----------------------------------------------------

/// A `dispatcher` invoke's valid `traceparent` becomes the request's trace id: in its log
/// lines (queued, started, each action, finished), `commandComplete.result.traceId` and the
/// `command-result` entry; `interrupt` too. Without one, each request gets a fresh id.
#[test]
fn traceparent_is_the_request_trace_id() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("traced");
    a.run_turn(
        &id,
        "@system trace roundtable_actors::conversation=debug,info",
    );
    let d = dispatcher(&id);
    let metadata = json!({"version": 1, "traceparent": format!("00-{TRACE}-{PARENT}-01"),
                          "tracestate": "vendor=x"});
    let ack = invoke_with_metadata(
        &mut a,
        &d,
        OWN_CALL_IDS,
        "submitCommand",
        json!(["what is 2+3", null, null, "t-1", "traced-1"]),
        metadata.clone(),
    )
    .unwrap();
    assert_eq!(ack["ok"], true);
    let calls = a.until_complete(&id, "traced-1");
    assert_eq!(calls.last().unwrap().1[2]["result"]["traceId"], TRACE);
    for line in [
        format!("request traced-1 trace={TRACE} queued"),
        format!("request traced-1 started (trace={TRACE})"),
        format!("request traced-1 trace={TRACE}: action 0 chat.calculate started"),
        format!("request traced-1 trace={TRACE}: action 0 chat.calculate succeeded"),
        format!("request traced-1 trace={TRACE} finished"),
    ] {
        server.wait_log(&format!("conversation {id}: {line}"));
    }
    let h = a.history(&id);
    let result = h
        .iter()
        .find(|e| e["type"] == "command-result" && e["requestId"]["requestId"] == "traced-1")
        .unwrap();
    assert_eq!(result["traceId"], TRACE);

    let other = "4bf92f3577b34da6a3ce929d0e0e4736";
    let ack = invoke_with_metadata(
        &mut a,
        &d,
        OWN_CALL_IDS + 1,
        "interrupt",
        json!(["@help"]),
        json!({"version": 1, "traceparent": format!("00-{other}-{PARENT}-00")}),
    )
    .unwrap();
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&id, &rid);
    assert_eq!(calls.last().unwrap().1[2]["result"]["traceId"], other);

    let first = Client::request_id(&a.submit(&id, "@help"));
    let calls = a.until_complete(&id, &first);
    let fresh = calls.last().unwrap().1[2]["result"]["traceId"].clone();
    assert!(
        is_trace_id(&fresh) && fresh != TRACE && fresh != other,
        "{fresh}"
    );
    let second = Client::request_id(&a.submit(&id, "@help"));
    let calls = a.until_complete(&id, &second);
    assert_ne!(calls.last().unwrap().1[2]["result"]["traceId"], fresh);
}

/// `metadata` of any shape never fails an invoke, on any channel: a wrong version, a
/// non-object, an invalid `traceparent` are ignored (the request gets a fresh trace id), and
/// `agent-server` invokes with metadata are answered as without.
#[test]
fn metadata_of_any_shape_is_never_an_error() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("any metadata");
    let d = dispatcher(&id);
    let bad_parent = format!("00-{}-{PARENT}-01", TRACE.to_uppercase());
    for (n, metadata) in [
        json!({"version": 2, "traceparent": format!("00-{TRACE}-{PARENT}-01")}),
        json!("v1"),
        json!([1]),
        json!({"version": 1, "traceparent": bad_parent}),
        json!({"version": 1, "traceparent": format!("00-{}-{PARENT}-01", "0".repeat(32))}),
        json!({"version": 1, "traceparent": 7, "typeagent": {"agentName": "bad name!"}}),
        json!(null),
    ]
    .into_iter()
    .enumerate()
    {
        let rid = format!("meta-{n}");
        let ack = invoke_with_metadata(
            &mut a,
            &d,
            OWN_CALL_IDS + n as u64,
            "submitCommand",
            json!(["@help", null, null, null, rid]),
            metadata.clone(),
        )
        .unwrap_or_else(|e| panic!("{metadata}: {e}"));
        assert_eq!(ack["ok"], true, "{metadata}");
        let calls = a.until_complete(&id, &rid);
        let trace = &calls.last().unwrap().1[2]["result"]["traceId"];
        assert!(is_trace_id(trace) && trace != TRACE, "{metadata}: {trace}");
    }
    let list = invoke_with_metadata(
        &mut a,
        AGENT_SERVER,
        OWN_CALL_IDS,
        "listConversations",
        json!([null]),
        json!({"version": 1, "traceparent": format!("00-{TRACE}-{PARENT}-01")}),
    )
    .unwrap();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["conversationId"] == id.as_str()),
        "{list}"
    );
    let status = invoke_with_metadata(
        &mut a,
        &d,
        OWN_CALL_IDS + 100,
        "getStatus",
        json!([]),
        json!({"version": "one"}),
    )
    .unwrap();
    assert!(status["agents"].is_array());
}

// ---- options and the working directory (item 5) -----------------------------------------

/// The canonical form of `p`.
fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// `agent-cli`'s submit, `[text, null, {workingDirectory: cwd}, uuid]` (4 arguments), runs;
/// with no roots configured any existing directory is taken, canonicalized, and every copy
/// of the entry (answer, `requestQueued`, `requestStarted`, snapshot) carries it; the same
/// client's next request without one works there again, another client's in the default.
#[test]
fn agent_cli_submits_with_its_working_directory() {
    let dirs = tempfile::tempdir().unwrap();
    let default = dirs.path().join("default");
    let cli_cwd = dirs.path().join("project");
    std::fs::create_dir_all(&default).unwrap();
    std::fs::create_dir_all(cli_cwd.join("sub")).unwrap();
    let server = Server::start(&["--working-directory-default", default.to_str().unwrap()]);
    let (mut a, id) = server.joined("CLI");
    let d = dispatcher(&id);
    let requested = format!("{}/sub/..", cli_cwd.display());
    let ack = a
        .invoke(
            &d,
            "submitCommand",
            json!(["ask me Where?", null, {"workingDirectory": requested},
            "8d1e5b5c-4a0f-4c47-9f55-6f7c1b1a0001"]),
        )
        .unwrap();
    assert_eq!(ack["ok"], true, "{ack}");
    let project = canonical(&cli_cwd);
    assert_eq!(
        ack["entry"]["options"],
        json!({"workingDirectory": project})
    );
    let rid = Client::request_id(&ack);
    let calls = calls_until(&mut a, &id, |m, _| m == "requestInteraction");
    for m in ["requestQueued", "requestStarted"] {
        let (_, args) = calls.iter().find(|(n, _)| n == m).unwrap();
        assert_eq!(
            args[0]["options"]["workingDirectory"],
            project.as_str(),
            "{m}"
        );
    }
    let snapshot = a.invoke(&d, "getQueueSnapshot", json!([])).unwrap();
    assert_eq!(
        snapshot["running"]["options"]["workingDirectory"],
        project.as_str()
    );
    a.invoke(&d, "cancelCommand", json!([rid])).unwrap();
    // No directory: this client's last one; another client's: the default.
    let ack = a.invoke(&d, "submitCommand", json!(["@help"])).unwrap();
    assert_eq!(
        ack["entry"]["options"]["workingDirectory"],
        project.as_str()
    );
    let mut b = server.connect();
    b.join(&id);
    let ack = b
        .invoke(&d, "submitCommand", json!(["@help", null, null]))
        .unwrap();
    assert_eq!(
        ack["entry"]["options"]["workingDirectory"],
        canonical(&default)
    );
}

/// With `--working-directory-root`, a request's directory must lie within a root: inside is
/// kept; outside, missing, a file, a link leading out, or not a string give the default (the
/// rejection is logged, never refused); the other `ProcessCommandOptions` keys are kept as
/// sent, and `interrupt` is held to the same policy.
#[test]
fn working_directory_roots_fence_requests() {
    let dirs = tempfile::tempdir().unwrap();
    let root = dirs.path().join("root");
    let inside = root.join("inside");
    let default = root.join("default");
    let outside = dirs.path().join("outside");
    for d in [&inside, &default, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(inside.join("file.txt"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, inside.join("escape")).unwrap();
    let server = Server::start(&[
        "--working-directory-root",
        root.to_str().unwrap(),
        "--working-directory-default",
        default.to_str().unwrap(),
    ]);
    let (mut a, id) = server.joined("fenced");
    let d = dispatcher(&id);
    let mut submit = |dir: Value| {
        let mut options = json!({"activeSchemas": ["player"], "activeSchemaFamilies": ["media"],
            "reasoningProfile": "default", "noReasoning": true,
            "userContext": {"editor": {"workspaceFolders": ["/w"]}}});
        options["workingDirectory"] = dir;
        let ack = a
            .invoke(&d, "submitCommand", json!(["@help", null, options, null]))
            .unwrap();
        assert_eq!(ack["ok"], true, "{ack}");
        let options = ack["entry"]["options"].clone();
        a.until_complete(&id, &Client::request_id(&ack));
        assert_eq!(options["activeSchemas"], json!(["player"]));
        assert_eq!(options["activeSchemaFamilies"], json!(["media"]));
        assert_eq!(options["reasoningProfile"], "default");
        assert_eq!(options["noReasoning"], true);
        assert_eq!(
            options["userContext"]["editor"]["workspaceFolders"],
            json!(["/w"])
        );
        options["workingDirectory"].clone()
    };
    let default_dir = canonical(&default);
    assert_eq!(submit(json!(inside.to_str().unwrap())), canonical(&inside));
    for rejected in [
        json!(outside.to_str().unwrap()),
        json!(root.join("missing").to_str().unwrap()),
        json!(inside.join("file.txt").to_str().unwrap()),
        json!(inside.join("escape").to_str().unwrap()),
        json!(42),
    ] {
        assert_eq!(submit(rejected.clone()), default_dir.as_str(), "{rejected}");
    }
    server.wait_log(&format!(
        "working directory \"{}\" is not an allowed directory",
        outside.display()
    ));
    let ack = a
        .invoke(
            &d,
            "interrupt",
            json!(["@help", null, {"workingDirectory": outside.to_str().unwrap()}]),
        )
        .unwrap();
    assert_eq!(
        ack["entry"]["options"]["workingDirectory"],
        default_dir.as_str()
    );
}

/// When neither the requested directory nor the default passes (the default lies outside
/// every root), the request works in none: its options lose the rejected directory and keep
/// the rest; without other options it has none.
#[test]
fn a_request_with_no_allowed_directory_gets_none() {
    let dirs = tempfile::tempdir().unwrap();
    let root = dirs.path().join("root");
    let outside = dirs.path().join("outside");
    for d in [&root, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    let server = Server::start(&[
        "--working-directory-root",
        root.to_str().unwrap(),
        "--working-directory-default",
        outside.to_str().unwrap(),
    ]);
    let (mut a, id) = server.joined("nowhere");
    let d = dispatcher(&id);
    let escape = outside.to_str().unwrap();
    let ack = a
        .invoke(
            &d,
            "submitCommand",
            json!(["@help", null, {"workingDirectory": escape, "noReasoning": true}]),
        )
        .unwrap();
    assert_eq!(
        ack["entry"]["options"],
        json!({"noReasoning": true}),
        "{ack}"
    );
    a.until_complete(&id, &Client::request_id(&ack));
    let ack = a
        .invoke(
            &d,
            "submitCommand",
            json!(["@help", null, {"workingDirectory": escape}]),
        )
        .unwrap();
    assert!(ack["entry"].get("options").is_none(), "{ack}");
    a.until_complete(&id, &Client::request_id(&ack));
}

/// Options count toward the bytes a conversation's queue may hold, like the text they come
/// with: a request whose options would pass the bound is refused with `queue_full`.
#[test]
fn options_count_toward_the_queued_bytes() {
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("big options");
    let ack = submit_as(&mut a, &id, "slow work", "holds-9");
    assert_eq!(ack["entry"]["state"], "running");
    let d = dispatcher(&id);
    let context = "c".repeat(9 << 20);
    let ack = a
        .invoke(
            &d,
            "submitCommand",
            json!(["@help", null, {"userContext": {"note": context}}]),
        )
        .unwrap();
    assert_eq!(
        ack["entry"]["state"],
        "queued",
        "{}",
        &ack.to_string()[..200]
    );
    let refused = a
        .invoke(
            &d,
            "submitCommand",
            json!(["@help", null, {"userContext": {"note": context}}]),
        )
        .unwrap();
    assert_eq!(
        refused,
        json!({"ok": false, "error": "queue_full", "maxDepth": 100, "maxBytes": 16 << 20})
    );
}

/// The settings: roots of which none exists stop the server at start with the reason;
/// `config show` lists both keys with where they came from.
#[test]
fn working_directory_settings_are_checked_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let log = Server::try_start_in(
        dir.path(),
        &["--working-directory-root", "/nonexistent/root"],
    )
    .err()
    .expect("the server refuses to start");
    assert!(
        log.contains("--working-directory-root: none of the roots is an existing directory"),
        "{log}"
    );
    let root = dir.path().to_str().unwrap();
    let file = dir.path().join("rt.toml");
    std::fs::write(&file, format!("working-directory-default = \"{root}\"\n")).unwrap();
    let out = Command::new(binary())
        .args([
            "config",
            "show",
            "--config",
            file.to_str().unwrap(),
            "--working-directory-root",
            root,
        ])
        .env_remove("ROUNDTABLE_CONFIG")
        .env_remove("ROUNDTABLE_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key}:\n{out}"))
            .to_string()
    };
    let roots = line("working-directory-root");
    assert!(
        roots.contains(&format!("[\"{root}\"]")) && roots.ends_with("# flag"),
        "{roots}"
    );
    let default = line("working-directory-default");
    assert!(
        default.contains(root) && default.ends_with(":1"),
        "{default}"
    );
}

// ---- queue snapshots (item 7) -------------------------------------------------------------

/// `getQueueSnapshot` and every `queueStateChanged` carry `paused: false`; entries carry
/// `attachmentCount` and `options`, and the running entry `blockedOn: "interaction"` while it
/// waits on a question, which a new snapshot announces, and one without it once answered
/// (here the model then takes its time, so the request is still running).
#[test]
fn snapshots_say_paused_attachments_options_and_blocked_on() {
    let gate = Gate::closed();
    let held = gate.clone();
    let model = scripted(move |n, _| match n {
        0 => (
            200,
            completion(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "q1", "type": "function", "function": {"name": "ask_user", "arguments": "{\"question\":\"Ready?\"}"}}]})),
        ),
        _ => {
            held.pass();
            (
                200,
                completion(json!({"role": "assistant", "content": "done"})),
            )
        }
    });
    let _open = OpenOnDrop(gate);
    let server = Server::with_model(&model, "asks", &[]);
    let (mut a, id) = server.joined("snapshots");
    let d = dispatcher(&id);
    let ack = a
        .invoke(
            &d,
            "submitCommand",
            json!(["look", [PNG], {"noReasoning": true}, null, "snap-1"]),
        )
        .unwrap();
    assert_eq!(ack["entry"]["attachmentCount"], 1);
    let calls = calls_until(&mut a, &id, |m, args| {
        m == "queueStateChanged" && args[0]["running"]["blockedOn"] == "interaction"
    });
    let question = calls
        .iter()
        .find(|(m, _)| m == "requestInteraction")
        .expect("asked")
        .1[0]
        .clone();
    let snapshot = &calls.last().unwrap().1[0];
    assert_eq!(snapshot["paused"], false);
    assert_eq!(snapshot["running"]["requestId"], "snap-1");
    assert_eq!(snapshot["running"]["attachmentCount"], 1);
    assert_eq!(snapshot["running"]["options"]["noReasoning"], true);
    assert_eq!(snapshot["running"]["state"], "running");
    let now = a.invoke(&d, "getQueueSnapshot", json!([])).unwrap();
    assert_eq!(now["paused"], false);
    assert_eq!(now["running"]["blockedOn"], "interaction");
    a.invoke(
        &d,
        "respondToInteraction",
        json!([{"interactionId": question["interactionId"], "type": "question", "value": 0}]),
    )
    .unwrap();
    let calls = calls_until(&mut a, &id, |m, args| {
        m == "queueStateChanged" && args[0]["running"]["requestId"] == "snap-1"
    });
    let snapshot = &calls.last().unwrap().1[0];
    assert!(snapshot["running"].get("blockedOn").is_none(), "{snapshot}");
    assert_eq!(snapshot["paused"], false);
    drop(_open);
    a.until_complete(&id, "snap-1");
}

/// `promoteCommand(requestId)`: a queued request moves to the front (`true`, and the new order
/// in `queueStateChanged`); the request already first answers `true` and changes nothing
/// (the snapshot keeps its version); the running request and an unknown id answer `false`.
#[test]
fn promote_moves_a_queued_request_to_the_front() {
    let (server, gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("promote");
    let d = dispatcher(&id);
    running_and_queued(&mut a, &id, "p-run", "p-1");
    for rid in ["p-2", "p-3"] {
        let ack = submit_as(&mut a, &id, "@help", rid);
        assert_eq!(ack["entry"]["state"], "queued", "{ack}");
    }
    let order = |snapshot: &Value| -> Vec<String> {
        snapshot["queued"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["requestId"].as_str().unwrap().to_string())
            .collect()
    };
    let before = a.invoke(&d, "getQueueSnapshot", json!([])).unwrap();
    assert_eq!(order(&before), ["p-1", "p-2", "p-3"]);

    assert_eq!(
        a.invoke(&d, "promoteCommand", json!(["p-3"])),
        Ok(json!(true))
    );
    let calls = calls_until(&mut a, &id, |m, args| {
        m == "queueStateChanged" && order(&args[0]).first().map(String::as_str) == Some("p-3")
    });
    let moved = &calls.last().unwrap().1[0];
    assert_eq!(order(moved), ["p-3", "p-1", "p-2"]);

    let now = a.invoke(&d, "getQueueSnapshot", json!([])).unwrap();
    assert_eq!(
        a.invoke(&d, "promoteCommand", json!(["p-3"])),
        Ok(json!(true))
    );
    let same = a.invoke(&d, "getQueueSnapshot", json!([])).unwrap();
    assert_eq!(same["version"], now["version"], "{same}");
    assert_eq!(order(&same), ["p-3", "p-1", "p-2"]);

    assert_eq!(
        a.invoke(&d, "promoteCommand", json!(["p-run"])),
        Ok(json!(false))
    );
    assert_eq!(
        a.invoke(&d, "promoteCommand", json!(["nope"])),
        Ok(json!(false))
    );
    drop(gate);
    a.until_complete(&id, "p-2");
}

// ---- agent-cli after its conversation was deleted (item 6) -------------------------------

/// `agent-cli` exactly (reference K.1–K.5): it finds or creates `CLI`, joins, replays the
/// history, asks `getStatus` before every prompt and submits with its working directory.
/// Another client deletes the conversation: the CLI's next submit answers `Conversation not
/// found: <id>` (it prints it), its `getStatus` answers a status with an `agents` array (so
/// it draws its prompt instead of dying), and `/conversation switch other` (list, join the
/// other, replay, leave the old one, whose error it ignores) leaves it working there.
#[test]
fn agent_cli_survives_the_deletion_of_its_conversation() {
    let server = Server::start(&[]);
    let mut cli = server.connect();
    let cwd = std::env::current_dir().unwrap();
    let cwd = cwd.to_str().unwrap();
    let found = cli.agent("listConversations", json!(["CLI"])).unwrap();
    assert_eq!(found, json!([]));
    let id = cli
        .agent("createConversation", json!(["CLI", null]))
        .unwrap()["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    cli.agent("joinConversation", json!([{"conversationId": id}]))
        .unwrap();
    let d = dispatcher(&id);
    cli.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    let status = cli.invoke(&d, "getStatus", json!([])).unwrap();
    assert!(status["agents"].is_array(), "{status}");
    let ack = cli
        .invoke(
            &d,
            "submitCommand",
            json!(["what is 2+3", null, {"workingDirectory": cwd},
            "5f0c6f2e-2b1e-4b8e-9d3c-000000000001"]),
        )
        .unwrap();
    cli.until_complete(&id, &Client::request_id(&ack));
    cli.invoke(&d, "getStatus", json!([])).unwrap();

    let mut other = server.connect();
    let other_id = other.create("other");
    other.agent("deleteConversation", json!([id])).unwrap();
    other.join(&other_id);
    // The CLI is told (it ignores it, as agent-cli does).
    calls_until(&mut cli, &id, |m, a| {
        m == "notify" && a[1] == "conversationDeleted"
    });

    let error = cli
        .invoke(
            &d,
            "submitCommand",
            json!(["hello?", null, {"workingDirectory": cwd},
            "5f0c6f2e-2b1e-4b8e-9d3c-000000000002"]),
        )
        .unwrap_err();
    assert_eq!(error, format!("Conversation not found: {id}"));
    let status = cli.invoke(&d, "getStatus", json!([])).unwrap();
    assert_eq!(status["agents"], json!([]), "{status}");
    assert!(status["details"].is_string(), "{status}");
    let error = cli.invoke(&d, "getDisplayHistory", json!([])).unwrap_err();
    assert_eq!(error, format!("Conversation not found: {id}"));

    // /conversation switch other
    let all = cli.agent("listConversations", json!([null])).unwrap();
    let target = all
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "other")
        .unwrap()["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    cli.agent("joinConversation", json!([{"conversationId": target}]))
        .unwrap();
    let d2 = dispatcher(&target);
    cli.invoke(&d2, "getDisplayHistory", json!([])).unwrap();
    let _ = cli.agent("leaveConversation", json!([id]));
    let status = cli.invoke(&d2, "getStatus", json!([])).unwrap();
    assert!(status["agents"].is_array());
    let ack = cli
        .invoke(
            &d2,
            "submitCommand",
            json!(["what is 2+3", null, {"workingDirectory": cwd},
            "5f0c6f2e-2b1e-4b8e-9d3c-000000000003"]),
        )
        .unwrap();
    let calls = cli.until_complete(&target, &Client::request_id(&ack));
    assert!(Client::texts(&calls).contains(&"5".to_string()));
}

/// docs/protocol.md's "not sent" clientio rows, checked: over a scenario that produces every
/// kind of output Roundtable has (a model turn, `@explain`, `@translate`, `@help`, `@system
/// session`, `@conversation list`, `@compact`, a cancelled request), neither the requesting
/// client nor a second joined client receives any of these methods or `notify` events, on
/// any channel.
#[test]
fn what_roundtable_never_sends_a_client_stays_unsent() {
    const NEVER: [&str; 4] = [
        "openLocalView",
        "closeLocalView",
        "getUserContext",
        "shutdown",
    ];
    const NEVER_EVENTS: [&str; 5] = [
        "explained",
        "grammarRule",
        "showNotifications",
        "randomCommandSelected",
        "developerMode",
    ];
    let as_frame = |(method, args): Call| json!({"message": {"name": method, "args": args}});
    let (server, _gate, _model) = gated_server(&[], &[]);
    let (mut a, id) = server.joined("never sent");
    let mut b = server.connect();
    b.join(&id);
    let mut frames: Vec<Value> = Vec::new();
    for text in [
        "@explain what is 2+3",
        "@translate what time is it in Tokyo",
        "@help",
        "@system session",
        "@conversation list",
        "@compact",
        "what is 2+3",
    ] {
        frames.extend(a.run_turn(&id, text).into_iter().map(as_frame));
    }
    // A model turn, cancelled while the model holds its answer.
    let ack = a.submit(&id, "slow hello");
    let rid = Client::request_id(&ack);
    a.invoke(&dispatcher(&id), "cancelCommand", json!([rid]))
        .expect("cancel");
    frames.extend(a.until_complete(&id, &rid).into_iter().map(as_frame));
    // Everything else either client got, on any channel, up to that cancellation: for a,
    // every frame before the answer to a queue snapshot it asks for now (the conversation
    // answers it after everything it sent a before); for b, every frame up to the
    // cancellation.
    let ((), rest) = a.recording(|a| {
        a.invoke(&dispatcher(&id), "getQueueSnapshot", json!([]))
            .expect("snapshot");
    });
    frames.extend(rest);
    loop {
        let f = b
            .read_frame(WAIT)
            .expect("the second client sees the cancellation");
        let done = f["message"]["name"] == "requestCancelled" && f["message"]["args"][0] == rid;
        frames.push(f);
        if done {
            break;
        }
    }
    let names: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["message"]["name"].as_str())
        .collect();
    assert!(names.contains(&"takeAction"), "{names:?}");
    assert!(names.contains(&"requestCancelled"), "{names:?}");
    for method in NEVER {
        assert!(!names.contains(&method), "{method} was sent: {names:?}");
    }
    for f in &frames {
        if f["message"]["name"] == "notify" {
            let event = f["message"]["args"][1].as_str().unwrap_or_default();
            assert!(!NEVER_EVENTS.contains(&event), "notify {event} was sent");
        }
    }
}
