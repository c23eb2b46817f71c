//! `crash`: acknowledged means durable, measured. One instance directory, many cycles of:
//! start the server, join one conversation, run turns and wait for each `commandComplete`,
//! then `kill -9` at once. After the last cycle every acknowledged turn must be in the
//! display history (user request and result, once). Reports turns acknowledged, turns lost
//! (the target is 0) and the restart time (exec → first join answered).
//!
//! The servers run with small node log segments (16 KB, a checkpoint every few turns), and
//! the cycles rotate through three kills: at a random point after the acknowledgements (often
//! inside a checkpoint), inside a checkpoint for certain (the checkpointer stopped between
//! flushing the files and removing the segments, `ROUNDTABLE_TEST_WAL_HOLD=checkpoint`), and
//! inside the start-up replay (records written back into the files, segments not removed yet,
//! `ROUNDTABLE_TEST_WAL_HOLD=replay`).

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::client::{Client, Incoming};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::Ctx;
use crate::server::ServerProcess;
use crate::support::protocol;

/// Turns acknowledged in each cycle before the kill.
const TURNS_PER_CYCLE: usize = 5;
/// Node log segment size for the crash servers: a checkpoint every few turns.
const SEGMENT_BYTES: &str = "16384";
/// Turns a held-checkpoint cycle runs at most while it waits for a checkpoint to start.
const MAX_TURNS_TO_CHECKPOINT: usize = 60;

/// Runs the scenario (Roundtable only: it kills its own server).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let mut report = ScenarioReport::new("crash");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it kills and restarts its own server (not with --url)".into());
        return Ok(report);
    }
    let cycles = if ctx.quick { 5 } else { 100 };
    report.param("cycles", cycles);
    report.param("turns_per_cycle", TURNS_PER_CYCLE);
    let dir = ctx.tempdir()?;
    let mut conversation: Option<String> = None;
    let mut acknowledged: Vec<String> = Vec::new();
    let mut restart = latency_histogram();
    let bar = report::progress(cycles as u64, "crash: run turns, kill -9, restart".into());
    let markers = ctx.tempdir()?;
    let (mut held_checkpoints, mut held_replays) = (0, 0);
    for cycle in 0..cycles {
        if cycle % 3 == 2 {
            // Kill the start-up replay of what the last cycle left in the log.
            kill_inside_replay(ctx, dir.path(), &markers.path().join(format!("r{cycle}"))).await?;
            held_replays += 1;
            bar.inc(1);
            continue;
        }
        let checkpoint_marker = markers.path().join(format!("c{cycle}"));
        let hold = (cycle % 3 == 1).then(|| format!("checkpoint:{}", checkpoint_marker.display()));
        let envs: Vec<(&str, &str)> = hold
            .iter()
            .map(|h| ("ROUNDTABLE_TEST_WAL_HOLD", h.as_str()))
            .collect();
        let server = ServerProcess::roundtable_env(
            &ctx.launch,
            dir.path(),
            &["--wal-segment-bytes", SEGMENT_BYTES],
            &envs,
        )?;
        let mut client = Client::connect(&server.url()).await?;
        let id = match &conversation {
            Some(id) => id.clone(),
            None => {
                let id = client.create_conversation("load-crash").await?;
                conversation = Some(id.clone());
                id
            }
        };
        client.join(&id, |_| {}).await?;
        report::record(&mut restart, server.spawned_at.elapsed());
        for turn in 0..TURNS_PER_CYCLE {
            let rid = run_turn(&mut client, &id, &format!("c{cycle}t{turn}")).await?;
            acknowledged.push(rid);
        }
        if hold.is_some() {
            // Turns until the checkpointer stops inside a checkpoint, then one more.
            let mut turn = TURNS_PER_CYCLE;
            while !checkpoint_marker.exists() {
                if turn >= MAX_TURNS_TO_CHECKPOINT {
                    return Err(format!(
                        "no node log checkpoint started within {turn} turns of 16 KB segments"
                    ));
                }
                let rid = run_turn(&mut client, &id, &format!("c{cycle}t{turn}")).await?;
                acknowledged.push(rid);
                turn += 1;
            }
            let rid = run_turn(&mut client, &id, &format!("c{cycle}held")).await?;
            acknowledged.push(rid);
            held_checkpoints += 1;
        }
        server.kill_9();
        bar.inc(1);
    }
    bar.finish_and_clear();

    let server = ServerProcess::roundtable(&ctx.launch, dir.path(), &[])?;
    let mut client = Client::connect(&server.url()).await?;
    let id = conversation.expect("one cycle ran");
    client.join(&id, |_| {}).await?;
    let history = client
        .invoke(
            &protocol::dispatcher(&id),
            "getDisplayHistory",
            json!([]),
            |_| {},
        )
        .await?;
    let entries = history.as_array().cloned().unwrap_or_default();
    let ids_of = |kind: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|e| e["type"] == kind && e.get("error").is_none())
            .filter_map(|e| e["requestId"]["requestId"].as_str().map(str::to_string))
            .collect()
    };
    let requests: Vec<String> = ids_of("user-request");
    let results: HashSet<String> = ids_of("command-result").into_iter().collect();
    let lost = acknowledged
        .iter()
        .filter(|rid| requests.iter().filter(|r| r == rid).count() != 1 || !results.contains(*rid))
        .count();
    client.close().await;
    server.stop();

    report.figures.push(Figure::new(
        "kills_inside_a_checkpoint",
        held_checkpoints as f64,
        "kills",
    ));
    report.figures.push(Figure::new(
        "kills_inside_replay",
        held_replays as f64,
        "kills",
    ));
    report.figures.push(Figure::new(
        "turns_acknowledged",
        acknowledged.len() as f64,
        "turns",
    ));
    report
        .figures
        .push(Figure::new("turns_lost", lost as f64, "turns"));
    report
        .figures
        .extend(report::percentiles("restart_to_join", &restart));
    report.target(
        "turns_lost",
        "no acknowledged turn lost across kill -9 cycles",
        false,
        |v| v == 0.0,
    );
    if lost > 0 {
        // Not a performance figure: a lost acknowledged turn is a bug, and fails the run.
        return Err(format!(
            "{lost} of {} acknowledged turns lost after kill -9",
            acknowledged.len()
        ));
    }
    report
        .notes
        .push("no baseline: it has no storage to recover".into());
    Ok(report)
}

/// Starts a server on `dir` that stops inside its start-up replay (after writing the records
/// back, before removing the segments), waits for it to get there, and kills it.
async fn kill_inside_replay(
    ctx: &Ctx,
    dir: &std::path::Path,
    marker: &std::path::Path,
) -> Result<(), String> {
    let mut cmd = crate::support::server::serve_command(&ctx.launch.bin, dir, &[]);
    cmd.env(
        "ROUNDTABLE_TEST_WAL_HOLD",
        format!("replay:{}", marker.display()),
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("start the server for a replay kill: {e}"))?;
    let deadline = std::time::Instant::now() + crate::client::RPC_TIMEOUT;
    // The hold's marker file is the event; the server has no socket yet to tell us.
    while !marker.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the server exited ({status}) before its replay hold"
            ));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return Err("the server never reached its replay hold".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    child
        .kill()
        .map_err(|e| format!("kill -9 inside the replay: {e}"))?;
    let _ = child.wait();
    Ok(())
}

/// Submits one turn and waits for its `commandComplete`; returns the request id.
pub(crate) async fn run_turn(client: &mut Client, id: &str, text: &str) -> Result<String, String> {
    // The completion may overtake the ack (clients buffer it, as TypeAgent's do).
    let mut completed: Vec<String> = Vec::new();
    let mut note = |frame: &str| {
        if let Some(rid) = completion_of(frame) {
            completed.push(rid);
        }
    };
    let ack = client
        .invoke(
            &protocol::dispatcher(id),
            "submitCommand",
            json!([text, null, null, text, null]),
            &mut note,
        )
        .await?;
    let rid = ack["entry"]["requestId"]
        .as_str()
        .ok_or_else(|| format!("submitCommand answered {ack}"))?
        .to_string();
    if completed.contains(&rid) {
        return Ok(rid);
    }
    let wait = async {
        loop {
            match client.recv().await {
                Incoming::Call(frame) if completion_of(&frame).as_ref() == Some(&rid) => {
                    return Ok(());
                }
                Incoming::Closed(code) => return Err(format!("socket closed ({code:?})")),
                _ => {}
            }
        }
    };
    tokio::time::timeout(crate::client::RPC_TIMEOUT, wait)
        .await
        .map_err(|_| {
            format!(
                "no commandComplete for request {rid} within {} s",
                crate::client::RPC_TIMEOUT.as_secs()
            )
        })??;
    Ok(rid)
}

/// The request id of a `notify … commandComplete` frame.
fn completion_of(frame: &str) -> Option<String> {
    if !frame.contains("\"commandComplete\"") {
        return None;
    }
    let v: Value = serde_json::from_str(frame).ok()?;
    v["message"]["args"][0]["requestId"]
        .as_str()
        .map(str::to_string)
}
