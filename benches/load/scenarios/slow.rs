//! `slow`: the fanout scenario (echo turns, or `--command`) with one client that stops
//! reading. Phase A runs turns in a
//! conversation of N reading clients; phase B runs the same turns in a fresh conversation of N
//! reading clients plus one that joins and never reads again (with a 4 KB receive buffer, so
//! it fills in seconds). Phase B goes on until the server has closed the slow client (seen in
//! `/metrics` as `roundtable_slow_client_closes_total`) or the time cap. Figures: the others'
//! delivery p99 with and without it, the server's RSS, and when the slow client was closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fleet::{self, Mode};
use crate::report::{self, Figure, ScenarioReport};
use crate::scenarios::{mb, run_tag, Ctx, Running};
use crate::server::{metric, Kind, RssSampler};

const SLOW_CLOSES: &str = "roundtable_slow_client_closes_total";

/// Runs the scenario (Roundtable only: the baseline has no slow-consumer handling).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("slow");
    let mut clients = s.fanout_clients.max(1);
    if 2 * clients + 2 > ctx.max_clients() {
        let fit = (ctx.max_clients() / 2).saturating_sub(1).max(1);
        report.notes.push(format!(
            "scaled down from {clients} to {fit} clients (open-file limit {})",
            ctx.fd_limit
        ));
        clients = fit;
    }
    report.param("clients", clients);
    report.param("turns", s.turns);
    report.param("window", s.window);
    ctx.command_param(&mut report, false);
    // Quick mode bounds the per-socket queue at 64 frames so the close comes in seconds; the
    // full run uses the server's default bound (4096 frames / 32 MiB).
    let extra: &[&str] = if ctx.quick {
        &["--max-queued-frames", "64"]
    } else {
        &[]
    };
    if ctx.quick {
        report.param("max_queued_frames", 64);
    }
    let server = Running::start(ctx, Kind::Roundtable, None, extra)?;
    let result = measure(ctx, &server, clients).await;
    server.stop();
    let (figures, notes) = result?;
    report.figures = figures;
    report.notes.extend(notes);
    report.target(
        "p99_with_over_without",
        "the slow reader costs the others less than 2x p99",
        false,
        |v| v < 2.0,
    );
    report
        .notes
        .push("no baseline: it has no slow-consumer handling (its queues are unbounded)".into());
    Ok(report)
}

async fn measure(
    ctx: &Ctx,
    server: &Running,
    clients: usize,
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let s = &ctx.sizes;
    let mut notes = Vec::new();
    let port = server
        .url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok());
    let mut control = crate::client::Client::connect(&server.url).await?;
    let mut figures = Vec::new();
    let mut p99 = [f64::NAN; 2];
    for (phase, with_slow) in [false, true].into_iter().enumerate() {
        let deadline = ctx.deadline();
        let label = if with_slow { "with" } else { "without" };
        let conversation = control
            .create_conversation(&format!("{}-slow-{label}", run_tag()))
            .await?;
        // Room for the turns of a phase that runs until the slow client is closed (quick mode
        // stops after three rounds: the kernel's socket buffers alone hold megabytes).
        let max_turns = s.turns.max(1) * if ctx.quick { 3 } else { 50 };
        let (stats, mut done) = ctx.stats(max_turns);
        let mut plan: Vec<_> = (0..clients)
            .map(|_| (conversation.clone(), Mode::Reading))
            .collect();
        if with_slow {
            plan.push((conversation.clone(), Mode::Stalled));
        }
        let joined = fleet::join_all(
            &server.url,
            &plan,
            &stats,
            s.join_concurrency.min(fleet::SAME_CONVERSATION_JOINS),
            true,
            &format!("slow {label}: joining"),
        )
        .await?;
        let submitters = [joined.members[0].cmds.clone()];
        let closes_before = port.and_then(|p| metric(p, SLOW_CLOSES)).unwrap_or(0.0);
        let rss_before = server.rss_kb();
        let sampler = RssSampler::start(server.pid());
        // Watch /metrics for the close while turns run.
        let closed_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let watching = Arc::new(AtomicBool::new(with_slow && port.is_some()));
        let started = Instant::now();
        let watcher = {
            let (closed_at, watching) = (closed_at.clone(), watching.clone());
            tokio::task::spawn_blocking(move || {
                while watching.load(Ordering::Relaxed) {
                    if let Some(n) = port.and_then(|p| metric(p, SLOW_CLOSES)) {
                        if n > closes_before {
                            *closed_at.lock().expect("lock") = Some(Instant::now());
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(25));
                }
            })
        };
        let mut turns_done = 0;
        let mut delivery = report::latency_histogram();
        let stalled = loop {
            let r = fleet::drive(
                &stats,
                &mut done,
                &submitters,
                turns_done,
                s.turns,
                s.window,
                clients as u32,
                None,
                deadline,
                &format!("slow {label}: turns"),
            )
            .await;
            turns_done += r.completed;
            let stalled = r.check(&format!("{label} slow client"));
            fleet::run_notes(&format!("{label} slow client"), &r, &stats, &mut notes);
            let closed = closed_at.lock().expect("lock").is_some();
            if !with_slow
                || stalled.is_err()
                || closed
                || r.timed_out
                || r.lost > 0
                || r.completed == 0
                || turns_done + s.turns > max_turns
            {
                if with_slow && !closed && stalled.is_ok() {
                    notes.push(format!(
                        "the slow client was not closed within {turns_done} turns"
                    ));
                }
                break stalled;
            }
        };
        watching.store(false, Ordering::Relaxed);
        let _ = watcher.await;
        delivery.add(&*stats.delivery.lock().expect("lock")).ok();
        let peak = sampler.finish();
        p99[phase] = delivery.value_at_quantile(0.99) as f64 / 1000.0;
        figures.push(Figure::new(
            format!("p99_{label}_slow_ms"),
            p99[phase],
            "ms",
        ));
        figures.push(Figure::new(
            format!("p50_{label}_slow_ms"),
            delivery.value_at_quantile(0.5) as f64 / 1000.0,
            "ms",
        ));
        figures.push(Figure::new(
            format!("turns_{label}_slow"),
            turns_done as f64,
            "turns",
        ));
        if let (Some(b), Some(p)) = (rss_before, peak) {
            figures.push(Figure::new(format!("rss_before_{label}_mb"), mb(b), "MB"));
            figures.push(Figure::new(format!("rss_peak_{label}_mb"), mb(p), "MB"));
        }
        if with_slow {
            if let Some(at) = *closed_at.lock().expect("lock") {
                figures.push(Figure::new(
                    "slow_closed_after_s",
                    (at - started).as_secs_f64(),
                    "s",
                ));
            }
        }
        fleet::stop_all(joined.members).await;
        if server.external() {
            control.delete_conversations([&conversation]).await;
        }
        if let Err(why) = stalled {
            control.close().await;
            return Err(why);
        }
    }
    control.close().await;
    figures.push(Figure::new("p99_with_over_without", p99[1] / p99[0], "x"));
    Ok((figures, notes))
}
