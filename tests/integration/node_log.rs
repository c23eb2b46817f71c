//! The node log against a real server: a `kill -9` inside a checkpoint (file systems flushed,
//! covered segments not removed yet) and inside the start-up replay (records written back,
//! segments not removed yet) loses nothing and doubles nothing; a clean stop leaves nothing to
//! replay. The unit tests in `actors/src/storage/node_log/tests.rs` play the machine crash that
//! loses the page cache, which a killed process cannot.

use std::path::Path;
use std::process::Stdio;

use serde_json::json;

use crate::harness::*;
use crate::support::server as child;

/// A small segment, so a few turns roll segments and start checkpoints (a turn writes about
/// 2 KB; the writer checkpoints by itself only past 3 waiting segments).
const SMALL_SEGMENT: &str = "16384";

/// The node log's segments in `dir`: (count, total bytes).
fn segments(dir: &Path) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(dir.join("wal")) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .fold((0, 0), |(n, bytes), e| {
            (n + 1, bytes + e.metadata().map_or(0, |m| m.len()))
        })
}

/// Runs one turn and returns its request id once `commandComplete` came (acknowledged).
fn acknowledged_turn(c: &mut Client, id: &str, text: &str) -> String {
    let rid = Client::request_id(&c.submit(id, text));
    let calls = c.until_complete(id, &rid);
    let (method, args) = calls.last().unwrap();
    assert_eq!(method, "notify", "{calls:?}");
    assert!(args[2]["result"].get("lastError").is_none(), "{args}");
    rid
}

#[test]
fn kills_inside_a_checkpoint_and_a_replay_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let checkpoint_marker = markers.path().join("checkpoint");
    let hold = format!("checkpoint:{}", checkpoint_marker.display());
    let server = Server::try_start_env(
        dir.path(),
        &["--wal-segment-bytes", SMALL_SEGMENT],
        &[("ROUNDTABLE_TEST_WAL_HOLD", hold.as_str())],
    )
    .unwrap();
    let mut c = server.connect();
    let id = c.create("node-log");
    c.join(&id);
    let mut acknowledged = Vec::new();
    // Turns until a segment fills and the checkpointer stops inside its checkpoint.
    for turn in 0.. {
        acknowledged.push(acknowledged_turn(
            &mut c,
            &id,
            &format!("what is {turn} + 1"),
        ));
        if checkpoint_marker.exists() {
            break;
        }
        assert!(turn < 200, "no checkpoint started after 200 turns");
    }
    // The checkpointer is held, the writer is not: one more turn is acknowledged meanwhile.
    acknowledged.push(acknowledged_turn(&mut c, &id, "one more"));
    let (held_segments, _) = segments(dir.path());
    assert!(
        held_segments >= 2,
        "{held_segments} segments while a checkpoint is held"
    );
    assert_eq!(server.metric("roundtable_wal_checkpoints_total"), 0.0);
    server.kill();

    // The next start replays every segment and is killed before it removes them.
    let replay_marker = markers.path().join("replay");
    let mut cmd = child::serve_command(Path::new(binary()), dir.path(), &[]);
    cmd.env("RUST_LOG", "info")
        .env(
            "ROUNDTABLE_TEST_WAL_HOLD",
            format!("replay:{}", replay_marker.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut replaying = cmd.spawn().unwrap();
    eventually("the start-up replay to reach its hold", || {
        replay_marker.exists()
    });
    replaying.kill().unwrap();
    replaying.wait().unwrap();
    assert!(
        segments(dir.path()).0 >= 2,
        "the held replay removed its segments"
    );

    // A third start replays again (the same bytes at the same offsets) and serves everything
    // once.
    let server = Server::start_in(dir.path(), &[]);
    server.wait_log("node log: replayed");
    assert_eq!(
        segments(dir.path()),
        (1, 8),
        "replayed segments are removed"
    );
    let mut c = server.connect();
    c.join(&id);
    let history = c.history(&id);
    for rid in &acknowledged {
        for kind in ["user-request", "command-result"] {
            let n = history
                .iter()
                .filter(|e| {
                    e["type"] == kind
                        && (e["requestId"]["requestId"] == rid.as_str()
                            || e["message"]["requestId"]["requestId"] == rid.as_str())
                })
                .count();
            assert_eq!(n, 1, "{kind} of {rid} appears {n} times");
        }
    }
    let seqs: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // A clean stop leaves nothing to replay.
    acknowledged_turn(&mut c, &id, "after the replay");
    c.close();
    assert!(server.shutdown().success());
    assert_eq!(segments(dir.path()), (1, 8));
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    c.join(&id);
    assert!(!server.log().contains("node log: replayed"));
    assert_eq!(server.metric("roundtable_wal_checkpoints_total"), 0.0);
}

/// One fsync covers a batch: with many turns in flight, the server makes fewer fsyncs than
/// it confirms barriers (without the node log, `--no-wal`, it makes about three and a half per
/// barrier, one per file per batch). The writer waits 5 ms before each batch, so what the
/// batches hold does not depend on how fast this machine's disk is today.
#[test]
fn turns_in_flight_share_the_log_fsync() {
    let server = Server::start_env(&[], &[("ROUNDTABLE_TEST_WRITER_DELAY_MS", "5")]);
    let mut c = server.connect();
    let id = c.create("node-log-batches");
    c.join(&id);
    let fsyncs_before = server.metric("roundtable_log_fsyncs_total");
    let barriers_before = server.metric("roundtable_log_barriers_total");
    let calls: Vec<u64> = (0..40)
        .map(|n| {
            c.send_invoke(
                &dispatcher(&id),
                "submitCommand",
                json!([
                    format!("what is {n} + 2"),
                    null,
                    null,
                    format!("cr-{n}"),
                    null
                ]),
            )
        })
        .collect();
    let ids: Vec<String> = calls
        .iter()
        .map(|call| Client::request_id(&c.wait_answer(&dispatcher(&id), *call).unwrap()))
        .collect();
    for rid in &ids {
        c.until_complete(&id, rid);
    }
    let fsyncs = server.metric("roundtable_log_fsyncs_total") - fsyncs_before;
    let barriers = server.metric("roundtable_log_barriers_total") - barriers_before;
    assert!(barriers >= 80.0, "{barriers} barriers for 40 turns");
    // What a crash would replay: the 40 turns' records, more than a segment header.
    assert!(server.metric("roundtable_wal_bytes") > 40.0 * 500.0);
    assert!(
        fsyncs < barriers,
        "{fsyncs} fsyncs for {barriers} barriers: batches do not share the log's fsync"
    );
}

/// A turn on an idle conversation makes one fsync for its submit and its completion: the
/// submit's barrier expects the completion's (its request is queued when it is sent), so the
/// writer waits for that one instead of fsyncing twice in a row. The seam stretches the wait
/// to a minute, so nothing depends on the completion coming within the 2 ms the writer waits
/// in production; the turn's completion (nothing queued behind it) ends the wait at once. A
/// checkpoint, whose fsyncs count too, during the turns voids the attempt.
#[test]
fn an_idle_conversations_turn_makes_one_fsync() {
    let server = Server::start_env(&[], &[("ROUNDTABLE_TEST_SYNC_LINGER_MS", "60000")]);
    let (mut c, id) = server.joined("one fsync a turn");
    // The conversation's files exist from here on.
    acknowledged_turn(&mut c, &id, "echo first");
    for _attempt in 0..3 {
        let checkpoints = server.metric("roundtable_wal_checkpoints_total");
        let before = server.metric("roundtable_log_fsyncs_total");
        for n in 0..10 {
            acknowledged_turn(&mut c, &id, &format!("echo {n}"));
        }
        let fsyncs = server.metric("roundtable_log_fsyncs_total") - before;
        if server.metric("roundtable_wal_checkpoints_total") != checkpoints {
            continue;
        }
        assert_eq!(
            fsyncs, 10.0,
            "10 turns, one after another on an idle conversation, made {fsyncs} fsyncs"
        );
        return;
    }
    panic!("a checkpoint ran during each of three attempts");
}

/// A slow disk is reported: a batch whose log write and fsync take longer than 50 ms is
/// counted in `roundtable_log_slow_syncs_total` and warned about in the log, once per 10 s
/// however many there are; the turns still complete.
#[test]
fn slow_log_syncs_are_counted_and_warned_about_once() {
    const WARNING: &str = "node log: a batch's write and fsync took";
    let started = std::time::Instant::now();
    let instance = tempfile::tempdir().unwrap();
    let (server, switch) = Server::start_with_fault_switch(instance.path());
    let (mut c, id) = server.joined("on a slow disk");
    acknowledged_turn(&mut c, &id, "echo fast");

    // Every storage operation takes 60 ms more: a log sync (a write and an fsync) 120 ms.
    // (A loaded machine may make a sync slow before that; nothing below depends on it not.)
    std::fs::write(&switch, "SLOW 60").unwrap();
    acknowledged_turn(&mut c, &id, "echo slow");
    server.wait_log(WARNING);
    acknowledged_turn(&mut c, &id, "echo slow again");
    assert!(server.metric("roundtable_log_slow_syncs_total") >= 2.0);
    std::fs::remove_file(&switch).unwrap();
    // Everything logged before this line has been read: the second slow sync was not warned
    // about on its own (one warning per 10 s; the test takes a second or two).
    c.create("after the slow disk");
    server.wait_log("(\"after the slow disk\")");
    let windows = 1 + started.elapsed().as_secs() as usize / 10;
    let warnings = server.log().matches(WARNING).count();
    assert!(
        warnings <= windows,
        "{warnings} warnings:\n{}",
        server.log()
    );
}
