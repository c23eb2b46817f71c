//! `crash`: acknowledged means durable, measured. One instance directory, many cycles of:
//! start the server, join one conversation, run turns and wait for each `commandComplete`,
//! then `kill -9` at once. After the last cycle every acknowledged turn must be in the
//! display history (user request and result, once). Reports turns acknowledged, turns lost
//! (the target is 0) and the restart time (exec → first join answered).

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::client::{Client, Incoming};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::Ctx;
use crate::server::ServerProcess;
use crate::support::protocol;

/// Turns acknowledged in each cycle before the kill.
const TURNS_PER_CYCLE: usize = 5;

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
    for cycle in 0..cycles {
        let server = ServerProcess::roundtable(&ctx.launch, dir.path(), &[])?;
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
