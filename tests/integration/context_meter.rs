//! The context meter (issue 28, part 2) through the real binary and a scripted
//! OpenAI-compatible model that reports `usage`: the rules over turns (absolute count, a dip
//! keeps the baseline and adds only output, the cap at the window, no change without usage),
//! the `contextMeter` notification to every client before `commandComplete`, `getStatus`,
//! `@system session` and `@system meter [reset]`, `@compact` clearing it, a restart (clean
//! and `kill -9`) and a new client seeing the same meter, backup and restore carrying it, a
//! move between cluster nodes carrying it, and the CLI's prompt showing it.
//!
//! The scripted model answers every request whole (one JSON body), which the provider, though
//! it asks for a stream, reads as the answer; streamed usage is `provider_streams.rs`'s.

use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;

/// The model name the server is configured with.
const MODEL: &str = "meter-model";
/// The model name the scripted answers report (the meter shows this one).
const ANSWERING_MODEL: &str = "meter-model-q4";
/// `ROUNDTABLE_OPENAI_CONTEXT_WINDOW` of every server here.
const WINDOW: u64 = 8192;

/// A chat-completions answer with `message` and, when given, `usage` (prompt, completion).
fn answer(message: Value, usage: Option<(u64, u64)>) -> String {
    let mut body = json!({
        "model": ANSWERING_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    });
    if let Some((prompt, completion)) = usage {
        body["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion});
    }
    body.to_string()
}

/// A text answer reporting `usage`.
fn said(text: &str, usage: Option<(u64, u64)>) -> (u16, String) {
    (
        200,
        answer(json!({"role": "assistant", "content": text}), usage),
    )
}

/// A model whose answer to each request is `said("ok", usage)` with the usage the request's
/// last user message names as `in/out` (`usage 1000/200`), and none when it names none: the
/// test decides each turn's report by what it sends. A summary request (`@compact`) gets
/// `summary` with a large usage, which the meter must not take.
fn model_by_text() -> ScriptedHttp {
    scripted(|_, body| {
        let last_user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string();
        if last_user.starts_with("Summarize our conversation") {
            return said("summary", Some((7000, 900)));
        }
        let usage = last_user
            .split_whitespace()
            .skip_while(|w| *w != "usage")
            .nth(1)
            .and_then(|u| u.split_once('/'))
            .map(|(i, o)| (i.parse().unwrap(), o.parse().unwrap()));
        said("ok", usage)
    })
}

/// Starts a server on `dir` with the OpenAI provider talking to `model`, the window
/// [`WINDOW`], and `extra` flags.
fn start_in(dir: &Path, model: &ScriptedHttp, extra: &[&str]) -> Server {
    let mut args = vec!["--provider", "openai"];
    args.extend_from_slice(extra);
    Server::try_start_env(dir, &args, &model_env(model)).unwrap_or_else(|log| panic!("{log}"))
}

/// The environment that points `--provider openai` at `model`, with the window.
fn model_env(model: &ScriptedHttp) -> [(&'static str, &str); 3] {
    [
        ("ROUNDTABLE_OPENAI_BASE_URL", &model.url),
        ("ROUNDTABLE_OPENAI_MODEL", MODEL),
        ("ROUNDTABLE_OPENAI_CONTEXT_WINDOW", "8192"),
    ]
}

/// The meter as the wire carries it.
fn meter(tokens: u64) -> Value {
    json!({"contextTokens": tokens, "contextWindow": WINDOW, "model": ANSWERING_MODEL})
}

/// `getStatus`'s `contextMeter`.
fn status_meter(c: &mut Client, id: &str) -> Value {
    let status = c.invoke(&dispatcher(id), "getStatus", json!([])).unwrap();
    status
        .get("contextMeter")
        .cloned()
        .unwrap_or_else(|| panic!("no contextMeter in {status}"))
}

/// The `contextMeter` notifications among a turn's calls, in order.
fn meter_notices(calls: &[Call]) -> Vec<Value> {
    calls
        .iter()
        .filter(|(m, a)| m == "notify" && a[1] == "contextMeter")
        .map(|(_, a)| {
            assert_eq!(a[0], Value::Null, "not tied to a request: {a}");
            assert_eq!(a[3], "agent-server", "{a}");
            a[2].clone()
        })
        .collect()
}

/// The calls of request `rid` among `calls` (from its `requestQueued` on): a client's
/// inbox may still hold calls of earlier requests it did not wait for.
fn own<'a>(calls: &'a [Call], rid: &str) -> &'a [Call] {
    let start = calls
        .iter()
        .position(|(m, a)| m == "requestQueued" && a[0]["requestId"] == rid)
        .unwrap_or_else(|| panic!("no requestQueued for {rid} in {calls:?}"));
    &calls[start..]
}

/// One turn by `c`: checks that a meter change is announced once, right before
/// `commandComplete`; answers the announced meter (`None`: no announcement).
fn turn(c: &mut Client, id: &str, text: &str) -> Option<Value> {
    let rid = Client::request_id(&c.submit(id, text));
    turn_seen(c, id, &rid).pop()
}

/// The calls of one request `c` runs (only its own).
fn run(c: &mut Client, id: &str, text: &str) -> Vec<Call> {
    let rid = Client::request_id(&c.submit(id, text));
    own(&c.until_complete(id, &rid), &rid).to_vec()
}

/// The text a command showed.
fn shown(c: &mut Client, id: &str, command: &str) -> String {
    Client::texts(&run(c, id, command)).join("\n")
}

/// The rules over turns, as every client sees them: a report is the absolute context; a turn
/// with a tool call counts its last call; a dip keeps the baseline and adds only the output;
/// an answer without usage changes nothing; the cap is the window. Each change reaches the
/// originator, another client and a filtered client (`contextMeter` goes to everyone) before
/// `commandComplete`; `getStatus`, `@system session` and `@system meter` say the same;
/// `@system meter reset` clears it and the next report starts it afresh.
#[test]
fn the_meter_follows_the_rules_and_reaches_every_client() {
    let model = scripted(|n, _| match n {
        0 => said("one", Some((1000, 200))),
        1 => (
            200,
            answer(
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "calculate",
                    "arguments": "{\"expression\":\"2+2\"}"}}]}),
                Some((1500, 20)),
            ),
        ),
        2 => said("4", Some((1600, 100))),
        3 => said("dip", Some((300, 50))),
        4 => said("no usage", None),
        5 => said("big", Some((9000, 500))),
        _ => said("fresh", Some((400, 20))),
    });
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path(), &model, &[]);
    let (mut a, id) = server.joined("metered");
    let mut b = server.connect();
    b.join(&id);
    let mut filtered = server.connect();
    filtered
        .agent(
            "joinConversation",
            json!([{"conversationId": id, "filter": true}]),
        )
        .unwrap();
    assert_eq!(
        status_meter(&mut a, &id),
        Value::Null,
        "nothing reported yet"
    );

    // The other clients see the same announcement; the filtered one sees it although the
    // request is not its own.
    let mut clients = [a, b, filtered];
    check(&mut clients, &id, "hello", Some(meter(1200)));
    // Two model calls: the last one's input re-sends the first, so it alone counts.
    check(&mut clients, &id, "what is 2+2", Some(meter(1700)));
    // A dip below 1700: the baseline stays and only the 50 output tokens are added.
    check(&mut clients, &id, "short", Some(meter(1750)));
    // No usage in the answer: no change, no announcement.
    check(&mut clients, &id, "quiet", None);
    let [_, b, _] = &mut clients;
    assert_eq!(status_meter(b, &id), meter(1750));
    // Past the window: capped.
    check(&mut clients, &id, "long", Some(meter(WINDOW)));
    let [a, b, filtered] = &mut clients;
    assert_eq!(status_meter(a, &id), meter(WINDOW));

    let session = shown(b, &id, "@system session");
    assert!(
        session.contains("- Context: 8,192 of 8,192 tokens (100%), model `meter-model-q4`"),
        "{session}"
    );
    assert_eq!(
        shown(b, &id, "@system meter"),
        "- Context: 8,192 of 8,192 tokens (100%), model `meter-model-q4`"
    );
    // The file beside the history ends with the meter.
    let file = server
        .dir
        .join("conversations")
        .join(&id)
        .join("sessions/chat/contextMeter.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text.lines().last().unwrap()).unwrap(),
        meter(WINDOW)
    );

    // An explicit reset clears it for everyone; a second reset changes nothing.
    let calls = run(b, &id, "@system meter reset");
    assert_eq!(meter_notices(&calls), vec![Value::Null]);
    assert_eq!(
        Client::texts(&calls),
        ["Context meter reset: the next turn that reports usage starts it again.\n\n- Context: nothing reported since the conversation began or was last reset"]
    );
    assert_eq!(filtered_notice(filtered, &id), Value::Null);
    assert_eq!(status_meter(a, &id), Value::Null);
    assert!(meter_notices(&run(b, &id, "@system meter reset")).is_empty());
    assert_eq!(text_last_line(&file), "null");
    // With no baseline, the next report is the meter, however small.
    check(&mut clients, &id, "again", Some(meter(420)));
    let a = &mut clients[0];
    // A wrong word is refused with its own text.
    let calls = run(a, &id, "@system meter zero");
    let done = &calls.last().unwrap().1;
    assert_eq!(
        done[2]["result"]["lastError"],
        "@system meter: give show or reset, got \"zero\""
    );
}

/// `clients[0]` (`a`) runs `text`; it and `clients[1]` (`b`) see the announcement
/// `expected` (once, right before `commandComplete`; nothing when `None`), and so does the
/// filtered `clients[2]`, although the request is not its own.
fn check(clients: &mut [Client; 3], id: &str, text: &str, expected: Option<Value>) {
    let [a, b, filtered] = clients;
    let ack = a.submit(id, text);
    let rid = Client::request_id(&ack);
    let notices = turn_seen(a, id, &rid);
    assert_eq!(notices, turn_seen(b, id, &rid), "{text}");
    assert_eq!(
        notices,
        expected.clone().into_iter().collect::<Vec<_>>(),
        "{text}"
    );
    if let Some(expected) = expected {
        assert_eq!(filtered_notice(filtered, id), expected);
    }
}

/// The next meter a filtered client is told: it gets only calls for everyone (its join's
/// `statusNotice` dismissals come first).
fn filtered_notice(filtered: &mut Client, id: &str) -> Value {
    let seen = loop {
        let notify = filtered.expect_call(&clientio(id), "notify");
        if notify[1] != "statusNotice" {
            break notify;
        }
    };
    assert_eq!(seen[1], "contextMeter", "{seen}");
    seen[2].clone()
}

/// The announcements of request `rid` as `c` sees them, checked to come right before its
/// `commandComplete`.
fn turn_seen(c: &mut Client, id: &str, rid: &str) -> Vec<Value> {
    let calls = c.until_complete(id, rid);
    let calls = own(&calls, rid);
    let notices = meter_notices(calls);
    assert!(notices.len() <= 1, "{calls:?}");
    if !notices.is_empty() {
        let at = calls
            .iter()
            .position(|(m, a)| m == "notify" && a[1] == "contextMeter")
            .unwrap();
        assert_eq!(calls[at + 1].1[1], "commandComplete", "{calls:?}");
    }
    notices
}

/// The file's last line.
fn text_last_line(file: &Path) -> String {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string()
}

/// The meter is persisted beside the history: after a clean restart and after `kill -9` right
/// after an acknowledged turn, a newly joined client's `getStatus` and `@system session` show
/// the same meter, and the baseline it keeps still applies (a dip after the restart adds only
/// its output).
#[test]
fn the_meter_survives_restarts_and_kill_9() {
    let model = model_by_text();
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path(), &model, &[]);
    let (mut a, id) = server.joined("durable");
    assert_eq!(turn(&mut a, &id, "usage 3000/400"), Some(meter(3400)));
    assert!(server.shutdown().success());

    let server = start_in(dir.path(), &model, &[]);
    let mut fresh = server.connect();
    fresh.join(&id);
    assert_eq!(status_meter(&mut fresh, &id), meter(3400));
    let session = shown(&mut fresh, &id, "@system session");
    assert!(
        session.contains("- Context: 3,400 of 8,192 tokens (41%), model `meter-model-q4`"),
        "{session}"
    );
    // The first turn after the restart under-reports: the baseline holds, plus its output.
    assert_eq!(turn(&mut fresh, &id, "usage 200/60"), Some(meter(3460)));
    server.kill();

    let server = start_in(dir.path(), &model, &[]);
    let mut again = server.connect();
    again.join(&id);
    assert_eq!(status_meter(&mut again, &id), meter(3460));
    assert_eq!(turn(&mut again, &id, "usage 4000/100"), Some(meter(4100)));
    // Acknowledged, then killed at once: the meter is as durable as the turn.
    server.kill();
    let server = start_in(dir.path(), &model, &[]);
    let mut last = server.connect();
    last.join(&id);
    assert_eq!(status_meter(&mut last, &id), meter(4100));
}

/// `@compact` clears the meter (announced as `null`) and does not take the summary call's
/// usage; the next turn's report is the new baseline, even a small one.
#[test]
fn compact_clears_the_meter() {
    let model = model_by_text();
    let server = Server::start_env(&["--provider", "openai"], &model_env(&model));
    let (mut a, id) = server.joined("compacted");
    assert_eq!(turn(&mut a, &id, "usage 5000/300"), Some(meter(5300)));
    let calls = run(&mut a, &id, "@compact");
    assert!(
        Client::texts(&calls)
            .iter()
            .any(|t| t.starts_with("**Conversation compacted**")),
        "{calls:?}"
    );
    assert_eq!(meter_notices(&calls), vec![Value::Null]);
    assert_eq!(status_meter(&mut a, &id), Value::Null);
    assert_eq!(turn(&mut a, &id, "usage 900/40"), Some(meter(940)));
}

/// Issue 50: once the meter reaches `--compact-at` percent of the window (90 by default),
/// the next turn first has the model summarize the history, every client is told, and the
/// turn's model call reads the summary instead of the history; the meter starts over. Below
/// the threshold, and with `--compact-at 0`, nothing is compacted on its own.
#[test]
fn a_nearly_full_context_is_compacted_before_the_next_model_call() {
    let model = model_by_text();
    let server = Server::start_env(&["--provider", "openai"], &model_env(&model));
    let (mut a, id) = server.joined("filling up");
    let mut b = server.connect();
    b.join(&id);
    // 7,000 of 8,192 tokens (85%): below the threshold.
    assert_eq!(turn(&mut a, &id, "first usage 6900/100"), Some(meter(7000)));
    let calls = run(&mut a, &id, "second usage 7300/100");
    assert!(Client::texts(&calls)
        .iter()
        .all(|t| !t.contains("compacted")));
    // 7,400 (90%): the next turn compacts first.
    let rid = Client::request_id(&a.submit(&id, "third usage 500/20"));
    let calls = own(&a.until_complete(&id, &rid), &rid).to_vec();
    let texts = Client::texts(&calls);
    assert!(
        texts[0].starts_with(
            "**Conversation compacted to stay within the model's context window** (4 messages \
             → 1 summary; the history file keeps them all)\n\nsummary"
        ),
        "{texts:?}"
    );
    assert!(b
        .until_complete(&id, &rid)
        .iter()
        .any(|(m, a)| m == "appendDisplay" && a[0]["compactSummary"] == true));
    let bodies = model.bodies.lock().unwrap().clone();
    let summary_request = &bodies[bodies.len() - 2];
    assert!(summary_request
        .to_string()
        .contains("Summarize our conversation"));
    let turn_request = bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<String> = turn_request
        .iter()
        .filter_map(|m| m["content"].as_str().map(String::from))
        .collect();
    assert!(texts[1].starts_with("[summary] summary"), "{texts:?}");
    assert_eq!(texts.last().unwrap(), "third usage 500/20");
    assert!(!texts.iter().any(|t| t.starts_with("first")), "{texts:?}");
    // The meter follows the turn that read the summary.
    assert_eq!(status_meter(&mut a, &id), meter(520));

    // Turned off, a full context is left to the model.
    let off = Server::start_env(
        &["--provider", "openai", "--compact-at", "0"],
        &model_env(&model),
    );
    let (mut c, off_id) = off.joined("never on its own");
    assert_eq!(turn(&mut c, &off_id, "usage 8000/100"), Some(meter(8100)));
    let calls = run(&mut c, &off_id, "usage 10/1");
    assert!(Client::texts(&calls)
        .iter()
        .all(|t| !t.contains("compacted")));
}

/// Issue 50: the model refuses a turn as longer than its window (OpenAI's
/// `context_length_exceeded`): the conversation compacts and runs the turn again, once; a
/// second refusal is the exact error, offering `@compact`.
#[test]
fn a_models_overflow_compacts_once_then_is_the_error() {
    const OVERFLOW: &str = r#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}"#;
    let refusals = std::sync::Mutex::new(0);
    let model = scripted(move |_, body| {
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        let text = last["content"].as_str().unwrap_or("");
        if text.starts_with("Summarize our conversation") {
            return said("the summary", None);
        }
        let history_is_summarized = body["messages"].as_array().unwrap().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[summary]"))
        });
        match text {
            "long question" if !history_is_summarized => {
                *refusals.lock().unwrap() += 1;
                (400, OVERFLOW.to_string())
            }
            "always too long" => (400, OVERFLOW.to_string()),
            _ => said("fits now", None),
        }
    });
    let server = Server::start_env(&["--provider", "openai"], &model_env(&model));
    let (mut a, id) = server.joined("overflowing");
    run(&mut a, &id, "some history");
    let calls = run(&mut a, &id, "long question");
    let texts = Client::texts(&calls);
    assert!(
        texts[0].starts_with(
            "**Conversation compacted: the model said it was longer than its context window**"
        ),
        "{texts:?}"
    );
    assert_eq!(texts.last().unwrap(), "fits now");
    let done = &calls.last().unwrap().1;
    assert!(done[2]["result"].get("lastError").is_none(), "{done}");
    // A second refusal after the compaction is the exact error, as the output and lastError.
    let calls = run(&mut a, &id, "always too long");
    let expected = "the conversation is longer than the model's context window (This model's \
                    maximum context length is 8192 tokens): `@compact` summarizes its history so \
                    that it fits";
    let done = &calls.last().unwrap().1;
    assert_eq!(done[2]["result"]["lastError"], json!(expected), "{done}");
    assert_eq!(Client::texts(&calls).last().unwrap(), expected);
    assert_eq!(
        Client::texts(&calls)
            .iter()
            .filter(|t| t.contains("Conversation compacted"))
            .count(),
        1,
        "compacted once, not again and again"
    );
}

/// `roundtable backup` of a running server holds the meter file, and `roundtable restore`
/// brings it back: the restored server shows the same meter.
#[test]
fn backup_and_restore_carry_the_meter() {
    let model = model_by_text();
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path(), &model, &[]);
    let (mut a, id) = server.joined("archived");
    assert_eq!(turn(&mut a, &id, "usage 2500/500"), Some(meter(3000)));
    let archive = tempfile::tempdir().unwrap();
    let file = archive.path().join("backup.tar");
    crate::backup::backup(server.port, &file);
    drop(server);

    let restored = tempfile::tempdir().unwrap();
    let target = restored.path().join("instance");
    let out = crate::backup::restore(&file, &target, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = start_in(&target, &model, &[]);
    let mut c = server.connect();
    c.join(&id);
    assert_eq!(status_meter(&mut c, &id), meter(3000));
}

/// In a cluster the meter file goes through the log stream with the rest of the
/// conversation: used on node a and evicted there, the conversation is taken over by node b
/// (which never had its files) with the same meter, and b's turns go on from its baseline.
#[test]
fn the_meter_moves_with_the_conversation_between_nodes() {
    if !crate::support::nats::available() {
        skip("nats-server is not installed (apt install nats-server; .ci/run does)");
        return;
    }
    let nats = crate::support::nats::NatsServer::start();
    let model = model_by_text();
    let start = |node: &str| {
        Server::start_env(
            &[
                "--provider",
                "openai",
                "--cluster",
                &nats.url(),
                "--node-name",
                node,
                "--idle-timeout",
                "0.2",
            ],
            &model_env(&model),
        )
    };
    let a = start("a");
    let b = start("b");
    let (mut on_a, id) = a.joined("travelling");
    assert_eq!(turn(&mut on_a, &id, "usage 6000/144"), Some(meter(6144)));
    on_a.agent("leaveConversation", json!([id])).unwrap();
    eventually("a to evict it and give its lease back", || {
        a.metric("roundtable_cluster_owned_conversations{node=\"a\"}") == 0.0
    });
    eventually("b to know the conversation", || {
        b.connect().names().contains(&"travelling".to_string())
    });
    let mut on_b = b.connect();
    on_b.join(&id);
    assert_eq!(
        b.metric("roundtable_cluster_owned_conversations{node=\"b\"}"),
        1.0
    );
    assert_eq!(status_meter(&mut on_b, &id), meter(6144));
    assert_eq!(turn(&mut on_b, &id, "usage 10/6"), Some(meter(6150)));
}

/// The CLI's prompt: plain before any report, then the meter after a turn, and the meter at
/// once when the CLI joins a conversation that has one (read with `getStatus`).
#[test]
fn the_cli_prompt_shows_the_meter() {
    let model = model_by_text();
    let server = Server::start_env(&["--provider", "openai"], &model_env(&model));
    let home = tempfile::tempdir().unwrap();
    let mut p = crate::cli::pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    p.send_line("usage 1000/234").unwrap();
    p.exp_string("CLI [ctx 1.2k/8.1k 15%]> ").unwrap();
    p.send_line("@system meter").unwrap();
    p.exp_string("- Context: 1,234 of 8,192 tokens (15%), model `meter-model-q4`")
        .unwrap();
    p.exp_string("CLI [ctx 1.2k/8.1k 15%]> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();

    let mut p = crate::cli::pty(server.port, home.path(), &[]);
    p.exp_string("CLI [ctx 1.2k/8.1k 15%]> ").unwrap();
    p.send_line("@system meter reset").unwrap();
    p.exp_string("Context meter reset").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
