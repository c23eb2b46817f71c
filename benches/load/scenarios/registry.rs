//! `registry`: createConversation / renameConversation / listConversations / deleteConversation
//! latency and rate on a server that already holds 100, 10,000 and 100,000 conversations
//! (written to `conversations.json` before start). One client runs each operation in turn
//! (latency; sequential rate), then 16 clients create at once (rate with group commit). The
//! figure that matters is growth: each operation's p50 at the largest size over the smallest.

use std::time::Instant;

use serde_json::json;

use crate::client::{Client, AGENT_SERVER};
use crate::fixtures::{write_registry, FixtureConversation};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::{Ctx, Running};
use crate::server::Kind;

/// Clients of the concurrent create phase.
const CONCURRENT: usize = 16;

/// Runs the scenario (Roundtable only: the baseline has no registry).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("registry");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it writes its own instance directories (not with --url)".into());
        return Ok(report);
    }
    let mut sizes = s.registry_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    report.param("existing", json!(sizes));
    report.param("ops_per_kind", s.registry_ops);
    report.param("list_ops", s.list_ops);
    report.param("concurrent_clients", CONCURRENT);
    let mut p50s: Vec<(usize, [f64; 4])> = Vec::new();
    for &size in &sizes {
        let (figures, p50) = round(ctx, size).await?;
        report.figures.extend(figures);
        p50s.push((size, p50));
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last()) {
        if p50s.len() > 1 {
            for (i, op) in ["create", "rename", "list", "delete"].iter().enumerate() {
                report.figures.push(Figure::new(
                    format!("{op}_p50_growth_{}_vs_{}", last.0, first.0),
                    last.1[i] / first.1[i],
                    "x",
                ));
            }
            let name = format!("create_p50_growth_{}_vs_{}", last.0, first.0);
            report.target(
                &name,
                "create at 100,000 conversations within 2x of create at 100",
                false,
                |v| v <= 2.0,
            );
            if !(first.0 <= 100 && last.0 >= 100_000) {
                if let Some(t) = report.targets.last_mut() {
                    t.met = None;
                    t.note = format!("{} (run compared {} with {})", t.note, last.0, first.0);
                }
            }
        }
    }
    report.notes.push("no baseline: it has no registry".into());
    Ok(report)
}

/// One server with `size` existing conversations: figures and the p50 of each operation.
async fn round(ctx: &Ctx, size: usize) -> Result<(Vec<Figure>, [f64; 4]), String> {
    let existing: Vec<_> = (0..size)
        .map(|i| FixtureConversation::new(format!("existing conversation {i}")))
        .collect();
    let fixture = |dir: &std::path::Path| write_registry(dir, &existing);
    let server = Running::start(ctx, Kind::Roundtable, Some(&fixture), &[])?;
    let result = measure(ctx, &server, size).await;
    server.stop();
    let figures = result?;
    let p50 = |op: &str| {
        figures
            .iter()
            .find(|f| f.name == format!("{op}_{size}_p50_ms"))
            .map_or(f64::NAN, |f| f.value)
    };
    let p50s = [p50("create"), p50("rename"), p50("list"), p50("delete")];
    Ok((figures, p50s))
}

async fn measure(ctx: &Ctx, server: &Running, size: usize) -> Result<Vec<Figure>, String> {
    let s = &ctx.sizes;
    let deadline = ctx.deadline();
    let ops = s.registry_ops.max(1);
    let mut client = Client::connect(&server.url).await?;
    let bar = report::progress(
        (ops * 3 + s.list_ops + ops) as u64,
        format!("registry {size}: operations"),
    );
    let mut figures = Vec::new();
    let mut ids = Vec::with_capacity(ops);
    let mut phase = |name: &str, hist: &hdrhistogram::Histogram<u64>, n: usize, secs: f64| {
        figures.extend(report::percentiles(&format!("{name}_{size}"), hist));
        figures.push(Figure::new(
            format!("{name}_{size}_per_s"),
            n as f64 / secs.max(1e-9),
            "op/s",
        ));
    };
    // create
    let mut hist = latency_histogram();
    let t = Instant::now();
    for i in 0..ops {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        ids.push(client.create_conversation(&format!("bench {i}")).await?);
        report::record(&mut hist, t0.elapsed());
        bar.inc(1);
    }
    phase("create", &hist, ids.len(), t.elapsed().as_secs_f64());
    // rename
    let mut hist = latency_histogram();
    let t = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let t0 = Instant::now();
        client
            .invoke(
                AGENT_SERVER,
                "renameConversation",
                json!([id, format!("bench {i} renamed"), null]),
                |_| {},
            )
            .await?;
        report::record(&mut hist, t0.elapsed());
        bar.inc(1);
    }
    phase("rename", &hist, ids.len(), t.elapsed().as_secs_f64());
    // list
    let mut hist = latency_histogram();
    let t = Instant::now();
    let mut listed = 0;
    for _ in 0..s.list_ops.max(1) {
        let t0 = Instant::now();
        let v = client
            .invoke(AGENT_SERVER, "listConversations", json!([null]), |_| {})
            .await?;
        report::record(&mut hist, t0.elapsed());
        listed = v.as_array().map_or(0, Vec::len);
        bar.inc(1);
    }
    phase("list", &hist, s.list_ops.max(1), t.elapsed().as_secs_f64());
    if listed < size {
        return Err(format!(
            "listConversations returned {listed} conversations, expected at least {size}"
        ));
    }
    // delete
    let mut hist = latency_histogram();
    let t = Instant::now();
    for id in &ids {
        let t0 = Instant::now();
        client
            .invoke(AGENT_SERVER, "deleteConversation", json!([id]), |_| {})
            .await?;
        report::record(&mut hist, t0.elapsed());
        bar.inc(1);
    }
    phase("delete", &hist, ids.len(), t.elapsed().as_secs_f64());
    // concurrent creates
    let per_client = ops.div_ceil(CONCURRENT);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CONCURRENT {
        let url = server.url.clone();
        let bar = bar.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&url).await?;
            for i in 0..per_client {
                client
                    .create_conversation(&format!("concurrent {c} {i}"))
                    .await?;
                bar.inc(1);
            }
            client.close().await;
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    figures.push(Figure::new(
        format!("concurrent_create_{size}_per_s"),
        (per_client * CONCURRENT) as f64 / t.elapsed().as_secs_f64().max(1e-9),
        "op/s",
    ));
    bar.finish_and_clear();
    client.close().await;
    Ok(figures)
}
