//! The harness's own checks, run before every run (they take milliseconds) and alone with
//! `cargo bench --bench load -- __selftest`. The bench is built with `harness = false`, so
//! `#[test]` functions here would never run; these checks do, in CI's quick run too.
//!
//! They cover what the harness must get right before its figures mean anything: the answers
//! to server → client invokes (`invokes.rs`) and how the client classifies and answers frames
//! (`client.rs`, through a real loopback socket), recognising a turn's completion, and the
//! durable baseline's log (`durable.rs`), read back with Roundtable's own display-log reader.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::client::{classify, completed_turn, Client, Incoming};
use crate::durable::{GroupLog, Pending};
use crate::invokes::reply_to;

/// One named check.
type Check = (&'static str, fn() -> Result<(), String>);

/// The synchronous checks.
const CHECKS: [Check; 7] = [
    ("void invokes answer null", void_invokes),
    ("questions answer their default", questions),
    ("other invokes answer not supported", unsupported_invokes),
    ("malformed invokes", malformed_invokes),
    ("frames are classified", classified),
    ("completions are recognised", completions),
    ("the durable log reads back in Roundtable", durable_log),
];

/// Runs every check; `Err` lists the failures.
pub async fn run() -> Result<usize, String> {
    let mut failed = Vec::new();
    for (name, check) in CHECKS {
        if let Err(e) = check() {
            failed.push(format!("{name}: {e}"));
        }
    }
    if let Err(e) = socket_round_trip().await {
        failed.push(format!("invokes are answered on the socket: {e}"));
    }
    if failed.is_empty() {
        Ok(CHECKS.len() + 1)
    } else {
        Err(failed.join("; "))
    }
}

fn invoke(channel: &str, call_id: u64, method: &str, args: Value) -> Value {
    json!({"name": channel, "message": {"type": "invoke", "callId": call_id, "name": method, "args": args}})
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

fn answer_of(frame: Value) -> Result<Result<Value, String>, String> {
    reply_to(&frame)
        .map(|r| r.answer)
        .ok_or_else(|| format!("no reply to {frame}"))
}

fn void_invokes() -> Result<(), String> {
    for method in [
        "getUserContext",
        "takeAction",
        "openLocalView",
        "closeLocalView",
    ] {
        let frame = invoke("clientio:c1", 7, method, json!([{"requestId": "r"}]));
        let reply = reply_to(&frame).ok_or_else(|| format!("{method}: no reply"))?;
        expect(method, reply.answer, Ok(Value::Null))?;
        let sent: Value = serde_json::from_str(&reply.frame).map_err(|e| e.to_string())?;
        expect(
            &format!("{method} reply frame"),
            sent,
            json!({"name": "clientio:c1", "message": {"type": "invokeResult", "callId": 7, "result": null}}),
        )?;
    }
    Ok(())
}

fn questions() -> Result<(), String> {
    let object = invoke(
        "clientio:c1",
        0,
        "question",
        json!([{"message": "Go?", "choices": ["a", "b", "c"], "defaultId": 2}]),
    );
    expect("question {defaultId: 2}", answer_of(object)?, Ok(json!(2)))?;
    let positional = invoke(
        "clientio:c1",
        1,
        "popupQuestion",
        json!(["Go?", ["a", "b"], 1, "agent"]),
    );
    expect("popupQuestion(…, 1)", answer_of(positional)?, Ok(json!(1)))?;
    let bare = invoke("clientio:c1", 2, "question", json!(["Go?", ["a", "b"]]));
    expect("question without default", answer_of(bare)?, Ok(json!(0)))?;
    let yes = invoke(
        "clientio:c1",
        3,
        "askYesNo",
        json!([{"message": "Sure?", "defaultValue": true}]),
    );
    expect(
        "askYesNo {defaultValue: true}",
        answer_of(yes)?,
        Ok(json!(true)),
    )?;
    let no = invoke(
        "clientio:c1",
        4,
        "askYesNo",
        json!([{"requestId": "r"}, "Sure?"]),
    );
    expect("askYesNo without default", answer_of(no)?, Ok(json!(false)))
}

fn unsupported_invokes() -> Result<(), String> {
    for (channel, method) in [
        ("agent:androidDevice", "executeAction"),
        ("clientio:c1", "proposeAction"),
        ("clientio:c1", "requestChoice"),
    ] {
        let frame = invoke(channel, 9, method, json!([{}]));
        let reply = reply_to(&frame).ok_or_else(|| format!("{method}: no reply"))?;
        let text = format!("{method}: not supported by the load harness");
        expect(method, reply.answer, Err(text.clone()))?;
        let sent: Value = serde_json::from_str(&reply.frame).map_err(|e| e.to_string())?;
        expect(
            &format!("{method} reply frame"),
            sent,
            json!({"name": channel, "message": {"type": "invokeError", "callId": 9, "error": text}}),
        )?;
    }
    Ok(())
}

fn malformed_invokes() -> Result<(), String> {
    let no_array = json!({"name": "clientio:c1", "message": {"type": "invoke", "callId": 3, "name": "question", "args": {}}});
    expect(
        "args not an array",
        answer_of(no_array)?,
        Err("Invalid invoke message".to_string()),
    )?;
    let no_id = json!({"name": "clientio:c1", "message": {"type": "invoke", "callId": -1, "name": "question", "args": []}});
    expect("negative callId", reply_to(&no_id), None)?;
    let call = json!({"name": "clientio:c1", "message": {"type": "call", "callId": 3, "name": "setDisplay", "args": []}});
    expect("a call", reply_to(&call), None)?;
    let answer = json!({"name": "agent-server", "message": {"type": "invokeResult", "callId": 3}});
    expect("an answer", reply_to(&answer), None)
}

fn classified() -> Result<(), String> {
    let text = |v: Value| Utf8Bytes::from(v.to_string());
    match classify(text(invoke("clientio:c1", 5, "getUserContext", json!([])))) {
        Incoming::Invoked(r) if r.method == "getUserContext" && r.channel == "clientio:c1" => {}
        other => return Err(format!("an invoke classified as {other:?}")),
    }
    let call = json!({"name": "clientio:c1", "message": {"type": "call", "callId": 1, "name": "notify", "args": []}});
    if !matches!(classify(text(call)), Incoming::Call(_)) {
        return Err("a call was not classified as a call".into());
    }
    let answer = json!({"name": "agent-server", "message": {"type": "invokeError", "callId": 4, "error": "nope"}});
    match classify(text(answer)) {
        Incoming::Answer {
            call_id: 4,
            result: Err(e),
            ..
        } if e == "nope" => Ok(()),
        other => Err(format!("an invokeError classified as {other:?}")),
    }
}

fn completions() -> Result<(), String> {
    let frame = json!({"name": "clientio:c1", "message": {"type": "call", "callId": 6, "name": "notify",
        "args": [{"connectionId": "0", "requestId": "r", "clientRequestId": "lt42"}, "commandComplete", {"result": null}, "system", null, null]}});
    expect(
        "commandComplete of lt42",
        completed_turn(&frame.to_string()),
        Some(42),
    )?;
    let other = json!({"name": "clientio:c1", "message": {"type": "call", "callId": 6, "name": "notify",
        "args": [{"clientRequestId": "cmd-1"}, "commandComplete", {}, "system"]}});
    expect(
        "someone else's turn",
        completed_turn(&other.to_string()),
        None,
    )
}

fn durable_log() -> Result<(), String> {
    use roundtable_actors::storage::display_log::{message_count_on_disk, read_range, FILE_NAME};
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut log = GroupLog::new(dir.path());
    let turn = |conversation: &str, n: u64| Pending {
        conversation: conversation.to_string(),
        entries: crate::baseline::log_entries(
            &json!({"connectionId": "0", "requestId": format!("r{n}"), "clientRequestId": format!("lt{n}")}),
            "hello",
        ),
        then: (),
    };
    let fsyncs = log
        .commit(&[turn("a", 0), turn("b", 1), turn("a", 2)])
        .map_err(|e| e.to_string())?;
    expect("fsyncs for a batch over two conversations", fsyncs, 2)?;
    let fsyncs = log.commit(&[turn("a", 3)]).map_err(|e| e.to_string())?;
    expect("fsyncs for one turn", fsyncs, 1)?;
    let a = dir.path().join("0");
    let entries = read_range(&a.join(FILE_NAME), 0, 100).map_err(|e| e.to_string())?;
    let kinds: Vec<Value> = entries
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).map(|v| json!([v["seq"], v["type"]])))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let kinds_of_a_turn = [
        "user-request",
        "set-display-info",
        "append-display",
        "command-result",
    ];
    let want: Vec<Value> = (0..3 * kinds_of_a_turn.len())
        .map(|seq| json!([seq, kinds_of_a_turn[seq % kinds_of_a_turn.len()]]))
        .collect();
    expect("conversation a's entries (seq, type)", kinds, want)?;
    expect(
        "conversation a's message count",
        message_count_on_disk(&a),
        3,
    )?;
    expect(
        "conversation b's message count",
        message_count_on_disk(&dir.path().join("1")),
        1,
    )
}

/// A loopback server invokes `getUserContext` then sends a call: the client answers the
/// invoke on the socket (null result, same channel and callId) and hands both frames over.
async fn socket_round_trip() -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut ws = tokio_tungstenite::accept_async(stream)
            .await
            .map_err(|e| e.to_string())?;
        let frames = [
            invoke("clientio:c1", 11, "getUserContext", json!([])),
            json!({"name": "clientio:c1", "message": {"type": "call", "callId": 12, "name": "setDisplay", "args": []}}),
        ];
        for f in frames {
            ws.send(Message::text(f.to_string()))
                .await
                .map_err(|e| e.to_string())?;
        }
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                serde_json::from_str::<Value>(t.as_str()).map_err(|e| e.to_string())
            }
            other => Err(format!("the server got {other:?} instead of a reply")),
        }
    });
    let server_abort = server.abort_handle();
    let check = async {
        let mut client = Client::connect(&format!("ws://127.0.0.1:{port}/")).await?;
        match client.recv().await {
            Incoming::Invoked(r) if r.answer == Ok(Value::Null) => {}
            other => return Err(format!("first frame: {other:?}")),
        }
        if !matches!(client.recv().await, Incoming::Call(_)) {
            return Err("second frame was not the call".into());
        }
        let reply = server.await.map_err(|e| e.to_string())??;
        client.close().await;
        expect(
            "the reply the server got",
            reply,
            json!({"name": "clientio:c1", "message": {"type": "invokeResult", "callId": 11, "result": null}}),
        )
    };
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), check)
        .await
        .map_err(|_| "no round trip within 10 s".to_string())?;
    server_abort.abort();
    outcome
}
