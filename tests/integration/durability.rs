//! Crashes, disk faults, hostile volumes and the panic policy: acknowledged means durable,
//! delete deletes, everything that grows with input has a bound.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;

/// The history text of a request the server stopped before it finished.
const STOPPED: &str = "The server stopped before this request finished; it did not complete.";

fn entries_of<'a>(history: &'a [Value], kind: &str, request_id: &str) -> Vec<&'a Value> {
    history
        .iter()
        .filter(|e| {
            let id = match e.get("requestId") {
                Some(id) => id,
                None => &e["message"]["requestId"],
            };
            e["type"] == kind && id["requestId"] == request_id
        })
        .collect()
}

/// Issue finding 1: five `kill -9` cycles of five acknowledged turns each; every turn whose
/// `commandComplete` arrived is in the history after the last restart, complete and once.
#[test]
fn acknowledged_turns_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged = Vec::new();
    let mut conversation: Option<String> = None;
    for cycle in 0..5 {
        let server = Server::start_in(dir.path(), &[]);
        let mut c = server.connect();
        let id = conversation
            .get_or_insert_with(|| c.create("crash"))
            .clone();
        c.join(&id);
        for turn in 0..5 {
            let rid = Client::request_id(&c.submit(&id, &format!("what is {cycle} + {turn}")));
            let calls = c.until_complete(&id, &rid);
            let (method, args) = calls.last().unwrap();
            assert_eq!(method, "notify", "turn was cancelled: {calls:?}");
            assert!(args[2]["result"]["metrics"].is_object(), "{args}");
            assert!(args[2]["result"].get("cancelled").is_none(), "{args}");
            acknowledged.push(rid);
        }
        server.kill();
    }
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    let id = conversation.unwrap();
    c.join(&id);
    let history = c.history(&id);
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|rid| {
            entries_of(&history, "user-request", rid).len() != 1
                || entries_of(&history, "command-result", rid).len() != 1
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged turns lost or doubled: {missing:?}",
        missing.len(),
        acknowledged.len()
    );
    for rid in &acknowledged {
        assert!(entries_of(&history, "command-result", rid)[0]
            .get("error")
            .is_none());
    }
    let seqs: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seqs not increasing: {seqs:?}"
    );
}

/// A crash with one request running (blocked on a private choice) and one queued behind it,
/// both acknowledged: the conversation's id and the two requestIds.
fn crash_with_running_and_queued(dir: &std::path::Path, name: &str) -> (String, String, String) {
    let server = Server::start_in(dir, &[]);
    let (mut c, id) = server.joined(name);
    let running = Client::request_id(&c.submit(&id, "ask me privately are you there?"));
    c.expect_call(&clientio(&id), "requestChoice");
    let queued_ack = c.submit(&id, "what is 2 + 3");
    assert_eq!(queued_ack["entry"]["state"], "queued");
    let queued = Client::request_id(&queued_ack);
    server.kill();
    (id, running, queued)
}

/// The display log of conversation `id` in instance directory `dir`.
fn display_log_path(dir: &std::path::Path, id: &str) -> std::path::PathBuf {
    dir.join("conversations").join(id).join("displayLog.jsonl")
}

/// A request acknowledged but never finished (running, and queued behind it) is not forgotten
/// by a crash: after the restart each has a failed `command-result` and an error line, once.
#[test]
fn unfinished_requests_are_closed_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (id, running, queued) = crash_with_running_and_queued(dir.path(), "unfinished");

    for restart in 0..2 {
        let server = Server::start_in(dir.path(), &[]);
        let mut c = server.connect();
        c.join(&id);
        let history = c.history(&id);
        for rid in [&running, &queued] {
            assert_eq!(
                entries_of(&history, "user-request", rid).len(),
                1,
                "restart {restart}: {rid} in {history:?}"
            );
            let results = entries_of(&history, "command-result", rid);
            assert_eq!(results.len(), 1, "restart {restart}: {history:?}");
            assert_eq!(results[0]["error"], STOPPED);
            let lines = entries_of(&history, "append-display", rid);
            assert!(lines
                .iter()
                .any(|e| e["message"]["message"]["content"] == STOPPED));
        }
        // The queued request never ran: its user-request comes after the running one's.
        let seq_of = |rid: &str| entries_of(&history, "user-request", rid)[0]["seq"].clone();
        assert!(seq_of(&running).as_u64() < seq_of(&queued).as_u64());
        // A clean stop the first time, so the second start proves recovery is not repeated.
        if restart == 0 {
            assert!(server.shutdown().success());
        }
    }
}

/// A crash between a request's journal `started` record and its `user-request` entry (the
/// display log ends just before it, as a kill -9 between the two writes leaves it, or as a
/// node that takes the conversation over from the log stream finds it): after the restart
/// the history holds its `user-request` once, with the failed result. The nemesis found the
/// opposite order of those two writes duplicating the `user-request` after a failover.
#[test]
fn a_crash_between_started_and_its_user_request_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &[]);
    let (mut c, id) = server.joined("cut short");
    let running = Client::request_id(&c.submit(&id, "ask me privately are you there?"));
    c.expect_call(&clientio(&id), "requestChoice");
    // The user-request is written behind the choice: wait until the writer has it on disk.
    let log_path = display_log_path(dir.path(), &id);
    eventually("the user-request to be on disk", || {
        std::fs::read_to_string(&log_path).is_ok_and(|t| t.contains(&running))
    });
    server.kill();
    // Cut the display log just before the running request's user-request.
    let text = std::fs::read_to_string(&log_path).unwrap();
    let cut = text
        .lines()
        .position(|l| l.contains("\"user-request\"") && l.contains(&running))
        .expect("the running request's user-request is on disk");
    let kept: String = text.lines().take(cut).map(|l| format!("{l}\n")).collect();
    std::fs::write(&log_path, kept).unwrap();
    let journal = std::fs::read_to_string(
        dir.path()
            .join("conversations")
            .join(&id)
            .join("requests.jsonl"),
    )
    .unwrap();
    assert!(journal.contains("\"started\""), "{journal}");

    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    let history = c.history(&id);
    assert_eq!(
        entries_of(&history, "user-request", &running).len(),
        1,
        "{history:?}"
    );
    let results = entries_of(&history, "command-result", &running);
    assert_eq!(results.len(), 1, "{history:?}");
    assert_eq!(results[0]["error"], STOPPED);
    let seqs: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] + 1 == w[1]),
        "seqs not contiguous: {seqs:?}"
    );
}

/// Recovery is idempotent: a conversation recovered once and taken over again before the
/// recovery's journal `closed` records reached disk (or the log stream) is recovered again
/// without a second `user-request` or result. The nemesis found the queued request's
/// `user-request` twice after two takeovers in a row.
#[test]
fn a_second_recovery_writes_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (id, running, queued) = crash_with_running_and_queued(dir.path(), "recovered twice");
    // First recovery: wait until it is in the history, then crash again.
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    assert_eq!(
        entries_of(&c.history(&id), "command-result", &queued).len(),
        1
    );
    let log_path = display_log_path(dir.path(), &id);
    eventually("the first recovery to be on disk", || {
        std::fs::read_to_string(&log_path).is_ok_and(|t| {
            t.lines()
                .any(|l| l.contains("\"command-result\"") && l.contains(&queued))
        })
    });
    server.kill();
    // As if its `closed` records had not made it: drop them from the journal.
    let journal_path = dir
        .path()
        .join("conversations")
        .join(&id)
        .join("requests.jsonl");
    let journal = std::fs::read_to_string(&journal_path).unwrap();
    let kept: String = journal
        .lines()
        .filter(|l| !l.contains("\"closed\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&journal_path, kept).unwrap();

    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    let history = c.history(&id);
    for rid in [&running, &queued] {
        assert_eq!(
            entries_of(&history, "user-request", rid).len(),
            1,
            "{rid} in {history:?}"
        );
        assert_eq!(
            entries_of(&history, "command-result", rid).len(),
            1,
            "{rid} in {history:?}"
        );
    }
}

/// Issue finding 2, made deterministic with the slow-writer seam: a delete that arrives while
/// the writer still holds the conversation's appends answers only after they are done, and
/// nothing recreates the directory afterwards.
#[test]
fn delete_waits_for_the_writer() {
    let server = Server::start_env(&[], &[("ROUNDTABLE_TEST_WRITER_DELAY_MS", "300")]);
    let (mut a, id) = server.joined("doomed");
    let mut b = server.connect();
    b.join(&id);
    let dir = server.dir.join("conversations").join(&id);
    // Queue writes without waiting for them: the submit's answer waits on the slow writer.
    a.send_invoke(
        &dispatcher(&id),
        "submitCommand",
        json!(["what is 1 + 1", null, null, "doomed-1", null]),
    );
    b.agent("deleteConversation", json!([id])).unwrap();
    assert!(
        !dir.exists(),
        "{} exists when delete answered",
        dir.display()
    );
    // Barrier: a turn of another conversation completes only after the writer has done
    // everything queued before it, including any late append into the deleted directory.
    let other = b.create("survivor");
    b.join(&other);
    let rid = Client::request_id(&b.submit(&other, "hello"));
    b.until_complete(&other, &rid);
    assert!(
        !dir.exists(),
        "{} was recreated after delete",
        dir.display()
    );
    assert!(
        !server
            .log()
            .contains("append after its conversation was deleted"),
        "a write reached the writer after the delete"
    );
}

/// A storm of creates, renames and deletes killed mid-way: the registry loads, and every
/// acknowledged change is there.
#[test]
fn registry_storm_killed_midway_keeps_every_acknowledged_change() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    let base: Vec<String> = (0..40).map(|i| c.create(&format!("base {i}"))).collect();
    enum Op {
        Create(String),
        Rename(String, String),
        Delete(String),
    }
    let mut ops: HashMap<u64, Op> = HashMap::new();
    for i in 0..150 {
        let (method, args, op) = match i % 3 {
            0 if i / 3 < 20 => {
                let id = base[i / 3].clone();
                let name = format!("renamed {i}");
                (
                    "renameConversation",
                    json!([id, name]),
                    Op::Rename(id, name),
                )
            }
            1 if i / 3 < 20 => {
                let id = base[20 + i / 3].clone();
                ("deleteConversation", json!([id]), Op::Delete(id))
            }
            _ => {
                let name = format!("storm {i}");
                ("createConversation", json!([name]), Op::Create(name))
            }
        };
        ops.insert(c.send_invoke(AGENT_SERVER, method, args), op);
    }
    // Read answers until half are in, then crash.
    let mut acked: Vec<(u64, Value)> = Vec::new();
    while acked.len() < 75 {
        let f = c.read_frame(WAIT).expect("answers keep coming");
        if f["message"]["type"] == "invokeResult" {
            acked.push((
                f["message"]["callId"].as_u64().unwrap(),
                f["message"]["result"].clone(),
            ));
        }
    }
    server.kill();

    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    let list = c.agent("listConversations", json!([null])).unwrap();
    let now: HashMap<String, String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["conversationId"].as_str().unwrap().to_string(),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (call_id, result) in &acked {
        match &ops[call_id] {
            Op::Create(name) => {
                let id = result["conversationId"].as_str().unwrap();
                assert_eq!(now.get(id), Some(name), "acknowledged create lost");
            }
            Op::Rename(id, name) => assert_eq!(now.get(id), Some(name), "rename lost"),
            Op::Delete(id) => assert!(!now.contains_key(id), "deleted {id} is back"),
        }
    }
    // Nothing appears that was never asked for.
    let asked: HashSet<String> = ops
        .values()
        .filter_map(|op| match op {
            Op::Create(n) | Op::Rename(_, n) => Some(n.clone()),
            Op::Delete(_) => None,
        })
        .chain((0..40).map(|i| format!("base {i}")))
        .chain(["default".to_string()])
        .collect();
    for name in now.values() {
        assert!(asked.contains(name), "unexpected conversation {name:?}");
    }
}

/// Issue finding 4: an invoke on a `dispatcher:` channel this socket has not joined is
/// answered, with `Conversation not found` once the conversation is gone.
#[test]
fn invokes_on_unjoined_channels_are_answered() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    let id = a.create("somebody else's");
    assert_eq!(
        b.invoke(&dispatcher(&id), "getQueueSnapshot", json!([]))
            .unwrap_err(),
        format!("Not joined to conversation: {id}")
    );
    let nowhere = "6f1c1b1e-0000-4000-8000-000000000000";
    assert_eq!(
        b.invoke(&dispatcher(nowhere), "submitCommand", json!(["hi"]))
            .unwrap_err(),
        format!("Conversation not found: {nowhere}")
    );
    // Joined, then deleted by someone else: the next submit is answered, not left hanging.
    b.join(&id);
    a.agent("deleteConversation", json!([id])).unwrap();
    assert_eq!(
        b.invoke(&dispatcher(&id), "submitCommand", json!(["hi"]))
            .unwrap_err(),
        format!("Conversation not found: {id}")
    );
}

/// Issue finding 3: 50,000 invokes with random method names leave `/metrics` the same size and
/// the server's memory flat; the in-flight bound answers the invoke past it exactly.
#[test]
fn hostile_volumes_stay_bounded() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let burst = |c: &mut Client, from: u64, n: u64| {
        for batch in 0..n / 1000 {
            for i in 0..1000 {
                let method = format!("no-such-method-{:x}", (from + batch * 1000 + i) * 7919);
                c.send_invoke(AGENT_SERVER, &method, json!([]));
            }
            let mut answered = 0;
            while answered < 1000 {
                let f = c.read_frame(WAIT).expect("answers keep coming");
                if f["message"]["type"] == "invokeError" {
                    answered += 1;
                }
            }
        }
    };
    burst(&mut c, 0, 5_000);
    let metrics_before = server.http_get("/metrics").1.len();
    let rss_before = server.rss_kb();
    burst(&mut c, 5_000, 50_000);
    let metrics_after = server.http_get("/metrics").1;
    let rss_after = server.rss_kb();
    assert!(
        metrics_after.len() <= metrics_before + 64,
        "/metrics grew from {metrics_before} to {} bytes",
        metrics_after.len()
    );
    assert!(metrics_after.contains("roundtable_rpc_errors_total{method=\"other\"} 55000"));
    assert!(
        rss_after < rss_before + 8 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}

/// Past 256 unanswered invokes on one socket, the next are answered at once with the exact
/// error (submits held by the slow-writer seam stay in flight meanwhile).
#[test]
fn in_flight_invokes_are_capped() {
    let server = Server::start_env(&[], &[("ROUNDTABLE_TEST_WRITER_DELAY_MS", "2000")]);
    let mut c = server.connect();
    let ids: Vec<String> = (0..3).map(|i| c.create(&format!("room {i}"))).collect();
    for id in &ids {
        c.join(id);
    }
    for i in 0..300 {
        c.send_invoke(
            &dispatcher(&ids[i % 3]),
            "submitCommand",
            json!([
                format!("what is {i} + 1"),
                null,
                null,
                format!("c{i}"),
                null
            ]),
        );
    }
    let (mut ok, mut refused) = (0, 0);
    while ok + refused < 300 {
        let f = c.read_frame(WAIT).expect("every invoke is answered");
        match f["message"]["type"].as_str() {
            Some("invokeResult") => ok += 1,
            Some("invokeError") => {
                assert_eq!(
                    f["message"]["error"],
                    "Too many requests in flight on this connection (limit 256); wait for answers before sending more"
                );
                refused += 1;
            }
            _ => {}
        }
    }
    assert!(ok <= 256 && refused >= 1, "ok {ok}, refused {refused}");
}

/// Disk faults through the storage layer's fault seam: a failing write gets a clear error,
/// `/health` says why with 503, the data already on disk is intact, and everything works
/// again when the disk recovers.
#[test]
fn disk_faults_are_reported_and_recovered_from() {
    let switch_dir = tempfile::tempdir().unwrap();
    let switch = switch_dir.path().join("fault");
    let switch_str = switch.to_str().unwrap();
    let instance = tempfile::tempdir().unwrap();
    let server = Server::try_start_env(
        instance.path(),
        &[],
        &[("ROUNDTABLE_TEST_FAULT_FILE", switch_str)],
    )
    .unwrap();
    let (mut c, id) = server.joined("faulty");
    let first = Client::request_id(&c.submit(&id, "what is 2 + 2"));
    c.until_complete(&id, &first);
    assert_eq!(server.http_get("/health").0, 200);

    std::fs::write(&switch, "ENOSPC").unwrap();
    let refused = c.submit(&id, "what is 3 + 3");
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"], "storage_error");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{refused}"
    );
    let (status, body) = server.http_get("/health");
    assert_eq!(status, 503, "{body}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "failing");
    assert!(health["problems"][0]
        .as_str()
        .unwrap()
        .contains("No space left on device"));
    // Registry changes fail with the cause too, and change nothing.
    let err = c.agent("createConversation", json!(["never"])).unwrap_err();
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!c.names().contains(&"never".to_string()));
    // The server keeps serving reads; what was on disk is intact.
    let h = c.history(&id);
    assert_eq!(entries_of(&h, "command-result", &first).len(), 1);

    std::fs::remove_file(&switch).unwrap();
    eventually("health recovers", || server.http_get("/health").0 == 200);
    let again = Client::request_id(&c.submit(&id, "what is 4 + 4"));
    c.until_complete(&id, &again);
    let conversation_dir = server.dir.join("conversations").join(&id);
    assert!(server.shutdown().success());
    // Nothing half-written stayed behind: every line on disk parses.
    for file in ["displayLog.jsonl", "requests.jsonl"] {
        let text = std::fs::read_to_string(conversation_dir.join(file)).unwrap();
        for line in text.lines() {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("{file}: bad line {line:?}: {e}"));
        }
    }
}

/// The same for real: an instance on a tiny tmpfs filled up by another file. Needs mount
/// permission (root in its own namespace); skipped with the reason where the machine refuses.
#[test]
fn a_full_tmpfs_is_reported_and_recovered_from() {
    let mount_point = tempfile::tempdir().unwrap();
    let mut mount = std::process::Command::new("mount");
    mount
        .args(["-t", "tmpfs", "-o", "size=4m", "roundtable-test"])
        .arg(mount_point.path());
    if !machine_allows(&mut mount, "mount a tmpfs here") {
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(mount_point.path());
    let instance = mount_point.path().join("instance");
    let server = Server::start_in(&instance, &[]);
    let (mut c, id) = server.joined("small disk");
    let first = Client::request_id(&c.submit(&id, "what is 5 + 5"));
    c.until_complete(&id, &first);
    // Fill the file system.
    let filler = mount_point.path().join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .output();
    let mut refused = None;
    for i in 0..200 {
        let ack = c.submit(&id, &format!("{i} {}", "x".repeat(8000)));
        if ack["ok"] == false {
            refused = Some(ack);
            break;
        }
        let rid = Client::request_id(&ack);
        c.until_complete(&id, &rid);
    }
    let refused = refused.expect("a full disk refuses a submit");
    assert_eq!(refused["error"], "storage_error", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{refused}"
    );
    // (Health may already be back: a small append can still fit in a file's last page, and a
    // write that succeeds clears the failure. The fault-seam test pins the 503 down.)
    assert!(server.metric("roundtable_storage_errors_total") >= 1.0);
    std::fs::remove_file(&filler).unwrap();
    eventually("health recovers", || server.http_get("/health").0 == 200);
    let again = Client::request_id(&c.submit(&id, "what is 6 + 6"));
    c.until_complete(&id, &again);
    let h = c.history(&id);
    assert_eq!(entries_of(&h, "command-result", &first).len(), 1);
    assert!(server.shutdown().success());
}

/// The panic policy: a panic in the registry aborts the process (no zombie that answers
/// `/health` while every request fails); a restart serves the same data.
#[test]
fn a_panic_aborts_and_a_restart_serves_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut server =
        Server::try_start_env(dir.path(), &[], &[("ROUNDTABLE_TEST_PANIC", "1")]).unwrap();
    let mut c = server.connect();
    let id = c.create("survives a panic");
    c.send_invoke(AGENT_SERVER, "testPanic", json!([]));
    let status = server.wait_exit();
    assert!(!status.success(), "exited with {status:?}");
    server.wait_log("test panic requested");
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    assert_eq!(server.http_get("/health").0, 200);
}
