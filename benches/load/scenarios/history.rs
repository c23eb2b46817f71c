//! `history`: `getDisplayHistory(afterSeq)` for the last 10 entries of display logs of 1,000
//! and 1,000,000 entries, generated on disk in the server's format before it starts. Also the
//! cold join of each (loading a conversation reads only its log's last line), and pages of 40
//! (`getDisplayHistory(null, {limit: 40, beforeSeq?})`): the newest one (what a client opening
//! the conversation asks first) and the first one (what paging back reaches last). The figure
//! that matters is growth: the tail read's p50 on the largest log over the smallest ("flat" =
//! within 2x).

use std::time::Instant;

use serde_json::json;

use crate::client::Client;
use crate::fixtures::{write_display_log, write_registry, FixtureConversation};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::{Ctx, Running};
use crate::server::Kind;
use crate::support::protocol;

/// Entries read from the tail.
const TAIL: u64 = 10;
/// Entries in a page.
const PAGE: u64 = 40;

/// Runs the scenario (Roundtable only: the baseline keeps no history).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("history");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it writes its own instance directory (not with --url)".into());
        return Ok(report);
    }
    let mut sizes = s.history_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.retain(|n| *n > TAIL);
    report.param("entries", json!(sizes));
    report.param("reads", s.history_reads);
    let conversations: Vec<FixtureConversation> = sizes
        .iter()
        .map(|n| FixtureConversation::new(format!("history {n}")))
        .collect();
    let generated = Instant::now();
    let fixture = |dir: &std::path::Path| {
        let mut with_counts = conversations.clone();
        for (c, n) in with_counts.iter_mut().zip(&sizes) {
            c.message_count = write_display_log(dir, &c.id, *n)?;
        }
        write_registry(dir, &with_counts)
    };
    let server = Running::start(ctx, Kind::Roundtable, Some(&fixture), &[])?;
    report.notes.push(format!(
        "logs generated and server started in {:.2} s",
        generated.elapsed().as_secs_f64()
    ));
    let result = measure(ctx, &server, &sizes, &conversations).await;
    server.stop();
    let (figures, p50s) = result?;
    report.figures = figures;
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last()) {
        if p50s.len() > 1 {
            let name = format!("tail10_p50_growth_{}_vs_{}", last.0, first.0);
            report
                .figures
                .push(Figure::new(&name, last.1 / first.1, "x"));
            report.target(
                &name,
                "history tail read flat from 1,000 to 1,000,000 entries (within 2x)",
                false,
                |v| v <= 2.0,
            );
            if !(first.0 <= 1_000 && last.0 >= 1_000_000) {
                if let Some(t) = report.targets.last_mut() {
                    t.met = None;
                    t.note = format!("{} (run compared {} with {})", t.note, last.0, first.0);
                }
            }
        }
    }
    report.notes.push("no baseline: it keeps no history".into());
    Ok(report)
}

type Measured = (Vec<Figure>, Vec<(u64, f64)>);

async fn measure(
    ctx: &Ctx,
    server: &Running,
    sizes: &[u64],
    conversations: &[FixtureConversation],
) -> Result<Measured, String> {
    let reads = ctx.sizes.history_reads.max(1);
    let deadline = ctx.deadline();
    let mut figures = Vec::new();
    let mut p50s = Vec::new();
    for (n, conversation) in sizes.iter().zip(conversations) {
        let mut client = Client::connect(&server.url).await?;
        let t0 = Instant::now();
        client.join(&conversation.id, |_| {}).await?;
        figures.push(Figure::new(
            format!("cold_join_{n}_ms"),
            t0.elapsed().as_secs_f64() * 1000.0,
            "ms",
        ));
        let channel = protocol::dispatcher(&conversation.id);
        let after = (*n - TAIL - 1) as i64;
        let bar = report::progress(reads as u64, format!("history {n}: tail reads"));
        let tail = json!([after]);
        let hist = timed_reads(
            &mut client,
            &channel,
            &tail,
            TAIL,
            reads,
            deadline,
            *n,
            &bar,
        )
        .await?;
        bar.finish_and_clear();
        let p = report::percentiles(&format!("tail10_{n}"), &hist);
        p50s.push((*n, p[0].value));
        figures.extend(p);
        if *n >= 2 * PAGE {
            for (label, page) in [
                ("newest_page40", json!([null, {"limit": PAGE}])),
                (
                    "first_page40",
                    json!([null, {"limit": PAGE, "beforeSeq": PAGE}]),
                ),
            ] {
                let bar = report::progress(reads as u64, format!("history {n}: {label}"));
                let hist = timed_reads(
                    &mut client,
                    &channel,
                    &page,
                    PAGE,
                    reads,
                    deadline,
                    *n,
                    &bar,
                )
                .await?;
                bar.finish_and_clear();
                figures.extend(report::percentiles(&format!("{label}_{n}"), &hist));
            }
        }
        client.close().await;
    }
    Ok((figures, p50s))
}

/// Up to `reads` timed `getDisplayHistory(args)` calls on `channel` (fewer past `deadline`),
/// each checked to answer `expected` entries of the `n`-entry log; their latencies.
#[allow(clippy::too_many_arguments)]
async fn timed_reads(
    client: &mut Client,
    channel: &str,
    args: &serde_json::Value,
    expected: u64,
    reads: usize,
    deadline: Instant,
    n: u64,
    bar: &indicatif::ProgressBar,
) -> Result<hdrhistogram::Histogram<u64>, String> {
    let mut hist = latency_histogram();
    for _ in 0..reads {
        if Instant::now() > deadline {
            break;
        }
        let t = Instant::now();
        let v = client
            .invoke(channel, "getDisplayHistory", args.clone(), |_| {})
            .await?;
        report::record(&mut hist, t.elapsed());
        let got = v.as_array().map_or(0, Vec::len) as u64;
        if got != expected {
            return Err(format!(
                "getDisplayHistory({args}) on {n} entries returned {got}, expected {expected}"
            ));
        }
        bar.inc(1);
    }
    Ok(hist)
}
