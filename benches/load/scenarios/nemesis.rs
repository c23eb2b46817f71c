//! `nemesis`: the cluster under faults (issue 31). Three Roundtable nodes on a three-server
//! NATS cluster with every bucket and the log stream replicated three times; clients on every
//! node submit turns in shared conversations and race to create, rename and delete others
//! while faults come one at a time and two at once: `kill -9` of an owner, `SIGSTOP` past the
//! lease then `SIGCONT`, a NATS server restarted, a node cut off from NATS (through a proxy the
//! harness controls) and healed. The checker then reads every history through every node and
//! the registry from every node. The loss columns must all be 0; the stall is the longest time
//! any conversation went without an acknowledged turn under one fault of that kind.
//!
//! Not part of `all` (it runs for minutes and needs no baseline): `cargo bench --bench load --
//! nemesis` (20 faults of each kind; `--quick`: 2). The same run, CI-sized, is the test
//! `cluster::nemesis::nothing_acknowledged_is_lost_under_faults`; both are
//! `tests/support/nemesis/`.

use std::time::Duration;

use crate::report::{self, Figure, ScenarioReport};
use crate::scenarios::Ctx;
use crate::support::nemesis::{self, Config};

/// The nodes' lease time (seconds): failover, and so every stall, scales with it.
const LEASE_SECONDS: f64 = 2.0;

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let mut report = ScenarioReport::new("nemesis");
    if ctx.url.is_some() {
        report.notes.push(
            "skipped: it starts its own NATS cluster and three nodes (not with --url)".into(),
        );
        return Ok(report);
    }
    if !crate::support::nats::available() {
        return Err("the nemesis scenario needs nats-server: apt install nats-server".into());
    }
    let faults_per_kind = if ctx.quick { 2 } else { 20 };
    let conversations = 3;
    report.param("nodes", 3);
    report.param("nats_servers", 3);
    report.param("replicas", 3);
    report.param("faults_per_kind", faults_per_kind);
    report.param("conversations", conversations);
    report.param("lease_time_s", LEASE_SECONDS);
    let total = faults_per_kind * nemesis::FaultKind::ALL.len();
    let bar = report::progress(total as u64, "nemesis: faults".into());
    let progress = bar.clone();
    let config = Config {
        bin: ctx.launch.bin.clone(),
        faults_per_kind,
        conversations,
        lease_seconds: LEASE_SECONDS,
        pace: Duration::from_millis(40),
        node_args: vec!["--cluster-replicas".into(), "3".into()],
        on_fault: Some(Box::new(move |n, _, what| {
            progress.set_position(n as u64 - 1);
            progress.set_message(format!("nemesis: {what}"));
        })),
    };
    let outcome = tokio::task::spawn_blocking(move || nemesis::run(config))
        .await
        .map_err(|e| format!("the nemesis panicked: {e}"))??;
    bar.finish_and_clear();
    let count =
        |name: &str, value: usize, unit: &'static str| Figure::new(name, value as f64, unit);
    report.figures.extend([
        count("turns_acknowledged", outcome.turns_acknowledged, "turns"),
        count("turns_lost", outcome.turns_lost, "turns"),
        count("turns_duplicated", outcome.turns_duplicated, "turns"),
        count("order_mismatches", outcome.order_mismatches, "pairs"),
        count(
            "registry_acknowledged",
            outcome.registry_acknowledged,
            "changes",
        ),
        count("registry_lost", outcome.registry_lost, "changes"),
        count("names_held_twice", outcome.names_held_twice, "names"),
        count(
            "deletes_resurrected",
            outcome.deletes_resurrected,
            "deletes",
        ),
        count("copies_repaired", outcome.copy_repairs as usize, "changes"),
    ]);
    for (kind, n, unrecovered, stall) in &outcome.faults {
        let key = match kind {
            nemesis::FaultKind::Kill9 => "kill9",
            nemesis::FaultKind::Stop => "sigstop",
            nemesis::FaultKind::NatsRestart => "nats_restart",
            nemesis::FaultKind::CutOff => "cut_off",
            nemesis::FaultKind::Overlap => "overlap",
        };
        report
            .figures
            .push(count(&format!("{key}_faults"), *n, "faults"));
        report.figures.push(count(
            &format!("{key}_not_recovered"),
            *unrecovered,
            "faults",
        ));
        report.figures.push(Figure::new(
            format!("{key}_longest_stall"),
            stall.as_secs_f64() * 1000.0,
            "ms",
        ));
    }
    report.notes.extend(outcome.problems.iter().cloned());
    if !outcome.clean() {
        report
            .notes
            .push("FAILED: the nemesis found the problems above".into());
    }
    Ok(report)
}
