//! `startup`: a server process on an instance directory holding 10,000 conversations (each
//! with a small display log), after a clean shutdown. Measures exec → first answered
//! `listConversations` (answered and parsed by the harness; and apart, exec → the answer's
//! arrival, before the harness's own parse of it), idle RSS, and the first joins of cold (not
//! loaded) conversations. Then
//! the same after a crash (no clean-shutdown marker: every log tail is re-read to recount).
//!
//! The reference, in the same run: an empty instance's exec → first list and idle RSS. The
//! empty and the full instance are booted in turn, [`BOOTS`] times each, and the boot times are
//! each one's median (a single boot's time moved by a factor of two with the machine). Before
//! the measured boots, one boot builds the content search index (as any server's first start
//! on these logs would) and waits until every document is in, so the measured boots are the
//! steady state, not a rebuild.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::{Client, AGENT_SERVER};
use crate::fixtures::{write_display_log, write_registry, FixtureConversation};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::{mb, wait_indexed, Ctx};
use crate::server::ServerProcess;

/// Entries in each conversation's log (ten echo turns).
const LOG_ENTRIES: u64 = 30;

/// Measured boots of the empty and of the full instance each (one each with `--quick`).
const BOOTS: usize = 5;

/// Runs the scenario (Roundtable only).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("startup");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it starts its own server process (not with --url)".into());
        return Ok(report);
    }
    let n = s.startup_conversations.max(1);
    report.param("conversations", n);
    report.param("log_entries_each", LOG_ENTRIES);
    report.param("cold_joins", s.cold_joins);
    let dir = ctx.tempdir()?;
    let t = Instant::now();
    let mut conversations: Vec<_> = (0..n)
        .map(|i| FixtureConversation::new(format!("conversation {i}")))
        .collect();
    for c in &mut conversations {
        c.message_count = write_display_log(dir.path(), &c.id, LOG_ENTRIES)
            .map_err(|e| format!("cannot write the fixture: {e}"))?;
    }
    write_registry(dir.path(), &conversations)
        .map_err(|e| format!("cannot write the fixture: {e}"))?;
    report.notes.push(format!(
        "fixture written in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    drop_caches_hint(&mut report);

    let boots = if ctx.quick { 1 } else { BOOTS };
    report.param("boots_each", boots);
    let bar = report::progress(
        2 + 2 * boots as u64 + 1,
        "startup: index build, empty and full boots in turn, after a crash".into(),
    );
    // The first start on these logs builds the search index: wait for all of it.
    let documents: u64 = conversations.iter().map(|c| 2 * c.message_count).sum();
    let (ready, _, _, client) = boot(ctx, dir.path(), n).await?;
    let t = Instant::now();
    wait_indexed(&ready.1, documents, Duration::from_secs(600)).await?;
    report.notes.push(format!(
        "a first boot indexed the {documents} documents for content search in {:.1} s before the measured boots",
        t.elapsed().as_secs_f64()
    ));
    client.close().await;
    ready.1.stop();
    bar.inc(1);
    // The reference: an empty instance, made by a first boot that is not measured (as the
    // full instance's first boot above is not), so both are measured after a clean shutdown.
    let empty_dir = ctx.tempdir()?;
    let (ready, _, _, client) = boot(ctx, empty_dir.path(), 1).await?;
    client.close().await;
    ready.1.stop();
    bar.inc(1);

    // Boots of the empty and the full instance in turn; the figures are each one's median,
    // so one boot slowed by the machine (writeback of the fixture, another process) does not
    // decide the ratio. The last boot of each stays up for the idle RSS (and the cold joins).
    let (mut empty_times, mut listening_times) = (Vec::new(), Vec::new());
    let (mut connected_times, mut ready_times) = (Vec::new(), Vec::new());
    let mut received_times = Vec::new();
    let mut last = None;
    for i in 0..boots {
        let (ready, _, _, client) = boot(ctx, empty_dir.path(), 1).await?;
        empty_times.push(ms(ready.0));
        if i + 1 == boots {
            tokio::time::sleep(Duration::from_millis(if ctx.quick { 200 } else { 1000 })).await;
            if let Some(kb) = ready.1.rss_kb() {
                report
                    .figures
                    .push(Figure::new("empty_idle_rss_mb", mb(kb), "MB"));
            }
        }
        client.close().await;
        ready.1.stop();
        bar.inc(1);
        let (ready, listening, connected, first) = boot(ctx, dir.path(), n).await?;
        listening_times.push(ms(listening));
        connected_times.push(ms(connected));
        ready_times.push(ms(ready.0));
        // The list's frame arrived before the harness parsed it (the empty instance's list is
        // one entry: its parse is negligible, and its arrival is not timed apart).
        received_times.push(ms(first
            .large_frame_received_at()
            .map_or(ready.0, |t| t - ready.1.spawned_at)));
        if i + 1 == boots {
            last = Some((ready.1, first));
        } else {
            first.close().await;
            ready.1.stop();
        }
        bar.inc(1);
    }
    let list = |v: &[f64]| {
        v.iter()
            .map(|t| format!("{t:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.notes.push(format!(
        "exec → first list, each boot in order: empty {} ms; full {} ms",
        list(&empty_times),
        list(&ready_times)
    ));
    for (name, times) in [
        ("empty_exec_to_first_list_ms", &mut empty_times),
        ("exec_to_listening_ms", &mut listening_times),
        ("exec_to_connected_ms", &mut connected_times),
        ("exec_to_first_list_ms", &mut ready_times),
        ("exec_to_first_list_received_ms", &mut received_times),
    ] {
        report.figures.push(Figure::new(name, median(times), "ms"));
    }
    let (server, first) = last.ok_or("no boot was made")?;
    tokio::time::sleep(Duration::from_millis(if ctx.quick { 200 } else { 1000 })).await;
    if let Some(kb) = server.rss_kb() {
        report
            .figures
            .push(Figure::new("idle_rss_mb", mb(kb), "MB"));
    }
    // Cold joins: each conversation is joined for the first time since start.
    let mut client = first;
    let mut hist = latency_histogram();
    let mut first_join = None;
    for c in conversations.iter().take(s.cold_joins.max(1)) {
        let t = Instant::now();
        client.join(&c.id, |_| {}).await?;
        let took = t.elapsed();
        first_join.get_or_insert(took);
        report::record(&mut hist, took);
    }
    client.close().await;
    if let Some(t) = first_join {
        report
            .figures
            .push(Figure::new("first_cold_join_ms", ms(t), "ms"));
    }
    report
        .figures
        .extend(report::percentiles("cold_join", &hist));
    server.stop();
    bar.inc(1);

    // After a crash: no clean-shutdown marker, so every log tail is re-read.
    let _ = std::fs::remove_file(dir.path().join("conversations").join(".clean-shutdown"));
    let (ready, _, _, client) = boot(ctx, dir.path(), n).await?;
    report.figures.push(Figure::new(
        "exec_to_first_list_after_crash_ms",
        ms(ready.0),
        "ms",
    ));
    client.close().await;
    ready.1.stop();
    bar.finish_and_clear();

    report.target(
        "exec_to_first_list_ms",
        "startup under 100 ms with 10,000 conversations",
        false,
        |v| v < 100.0,
    );
    report.target(
        "idle_rss_mb",
        "idle RSS under 20 MB with 10,000 conversations",
        false,
        |v| v < 20.0,
    );
    push_derived(
        &mut report,
        "idle_rss_over_empty_mb",
        ("idle_rss_mb", "empty_idle_rss_mb"),
        |f, e| f - e,
        "MB",
    );
    push_derived(
        &mut report,
        "first_list_over_empty_x",
        ("exec_to_first_list_ms", "empty_exec_to_first_list_ms"),
        |f, e| f / e,
        "x",
    );
    // The same without the harness's own parse of the 10,000-entry answer into a
    // `serde_json::Value` (about 10 ms on this machine), which the empty instance's one-entry
    // answer does not pay: the server's part of the figure.
    push_derived(
        &mut report,
        "first_list_received_over_empty_x",
        (
            "exec_to_first_list_received_ms",
            "empty_exec_to_first_list_ms",
        ),
        |f, e| f / e,
        "x",
    );
    report.target(
        "idle_rss_over_empty_mb",
        "idle RSS with 10,000 conversations at most 4 MB over an empty server's (issue 11)",
        false,
        |v| v <= 4.0,
    );
    report.target(
        "first_list_over_empty_x",
        "exec → first list with 10,000 conversations at most 3x an empty instance's (issue 11)",
        false,
        |v| v <= 3.0,
    );
    report.target(
        "first_cold_join_ms",
        "first join of a cold conversation under 5 ms",
        false,
        |v| v < 5.0,
    );
    if n < 10_000 {
        for t in report.targets.iter_mut().take(4) {
            t.met = None;
            t.note = format!("{} (run had {n} conversations, not 10,000)", t.note);
        }
    }
    report.notes.push("no baseline: it has no storage".into());
    Ok(report)
}

/// `((exec → first list, the server), exec → listening, exec → connected, the client)`.
type Booted = ((Duration, ServerProcess), Duration, Duration, Client);

/// Starts the server on `dir` and times exec → listening line → first answered list.
async fn boot(ctx: &Ctx, dir: &Path, n: usize) -> Result<Booted, String> {
    let server = ServerProcess::roundtable(&ctx.launch, dir, &[])?;
    let listening = server.listening_at - server.spawned_at;
    let mut client = Client::connect(&server.url()).await?;
    let connected = server.spawned_at.elapsed();
    let v = client
        .invoke(AGENT_SERVER, "listConversations", json!([null]), |_| {})
        .await?;
    let ready = server.spawned_at.elapsed();
    let listed = v.as_array().map_or(0, Vec::len);
    if listed != n {
        return Err(format!(
            "listConversations after start returned {listed} conversations, expected {n}:\n{}",
            server.log_tail(20)
        ));
    }
    Ok(((ready, server), listening, connected, client))
}

/// Pushes `name`, `combine` of the full instance's figure and the empty one's (`of`), when
/// both were measured.
fn push_derived(
    report: &mut ScenarioReport,
    name: &str,
    of: (&str, &str),
    combine: fn(f64, f64) -> f64,
    unit: &'static str,
) {
    let value = |name| report.figure(name).map(|f| f.value);
    if let (Some(full), Some(empty)) = (value(of.0), value(of.1)) {
        report
            .figures
            .push(Figure::new(name, combine(full, empty), unit));
    }
}

/// The median of `values` (the mean of the middle two when their number is even).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The fixture was just written, so it is in the page cache: say so (a cold-cache start after
/// a reboot reads the registry and the logs from disk and is slower).
fn drop_caches_hint(report: &mut ScenarioReport) {
    report.notes.push(
        "the instance directory is in the page cache (written just before): warm-cache figures"
            .into(),
    );
}
