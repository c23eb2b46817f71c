//! `fanout`: one conversation, N clients (default 100), one of them submits echo turns (or
//! `--command`). Phase 1 runs turns one at a time (unloaded submit → last-delivery latency);
//! phase 2 keeps `window` turns in flight and measures delivered messages per second across
//! all clients (every `clientio` call frame counts) and the latency under that load. Runs
//! against Roundtable, the baseline and the durable baseline; the unloaded latency is judged
//! against the durable one (Roundtable's completions wait for an fsync).

use std::sync::atomic::Ordering;

use crate::fleet::{self, Mode};
use crate::report::{self, Figure, Judge, ScenarioReport};
use crate::scenarios::{mb, run_tag, Ctx, Running};
use crate::server::{Kind, RssSampler};

/// Runs the scenario against Roundtable and the baseline.
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("fanout");
    let clients = ctx.fit_clients(s.fanout_clients.max(1), &mut report);
    report.param("clients", clients);
    report.param("latency_turns", s.latency_turns);
    report.param("turns", s.turns);
    report.param("window", s.window);
    ctx.command_param(&mut report, true);
    let report = crate::scenarios::with_baselines(ctx, report, true, |kind| async move {
        let server = Running::start(ctx, kind, None, &[])?;
        let result = measure(ctx, &server, kind, clients).await;
        server.stop();
        result
    })
    .await?;
    let mut report = report;
    report.target(
        "delivered_msgs_per_s",
        "fanout >= 50% of the baseline's delivered msg/s",
        true,
        |r| r >= 0.5,
    );
    report.judge(
        "last_delivery_unloaded_p50_ms",
        "unloaded submit → last delivery p50 <= 1.5x the durable baseline's",
        Judge::DurableRatio,
        |r| r <= 1.5,
    );
    Ok(report)
}

async fn measure(
    ctx: &Ctx,
    server: &Running,
    kind: Kind,
    clients: usize,
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let s = &ctx.sizes;
    let deadline = ctx.deadline();
    let mut notes = Vec::new();
    let mut control = crate::client::Client::connect(&server.url).await?;
    let conversation = control
        .create_conversation(&format!("{}-fanout", run_tag()))
        .await?;
    let (stats, mut done) = ctx.stats(s.latency_turns + s.turns);
    let plan: Vec<_> = (0..clients)
        .map(|_| (conversation.clone(), Mode::Reading))
        .collect();
    let joined = fleet::join_all(
        &server.url,
        &plan,
        &stats,
        s.join_concurrency.min(fleet::SAME_CONVERSATION_JOINS),
        true,
        &format!("fanout {}: joining", kind.name()),
    )
    .await?;
    let submitters = [joined.members[0].cmds.clone()];
    let sampler = RssSampler::start(server.pid());
    let (unloaded, cpu_before, loaded) = fleet::unloaded_then_loaded(
        &stats,
        &mut done,
        &submitters,
        (s.latency_turns, s.turns, s.window),
        clients as u32,
        deadline,
        &format!("fanout {}", kind.name()),
        || server.cpu_seconds(),
    )
    .await;
    let cpu = server
        .cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    // Group commit: write barriers (acknowledgements waiting for an fsync) per fsync.
    let group_commit = server.process.as_ref().and_then(|p| {
        let barriers = crate::server::metric(p.port, "roundtable_log_barriers_total")?;
        let fsyncs = crate::server::metric(p.port, "roundtable_log_fsyncs_total")?;
        (fsyncs > 0.0).then_some((barriers, fsyncs))
    });
    let peak = sampler.finish();
    let delivery = stats.delivery.lock().expect("histogram lock").clone();
    let errors = stats.submit_errors.load(Ordering::Relaxed);
    let invokes = stats.invokes_answered.load(Ordering::Relaxed);
    fleet::stop_all(joined.members).await;
    let stalled = unloaded
        .check("window-1 phase")
        .and_then(|()| loaded.check("loaded phase"));
    if let Err(why) = stalled {
        if server.external() {
            control.delete_conversations([&conversation]).await;
        }
        control.close().await;
        return Err(why);
    }
    // The same number of clients joining a fresh conversation all at once.
    let burst = control
        .create_conversation(&format!("{}-fanout-burst", run_tag()))
        .await?;
    let burst_closed = fleet::burst_join(
        &server.url,
        &burst,
        clients,
        std::time::Duration::from_millis(300),
    )
    .await?;
    if server.external() {
        control.delete_conversations([&conversation, &burst]).await;
    }
    control.close().await;
    if invokes > 0 {
        notes.push(format!(
            "the clients answered {invokes} server → client invokes with the harness's defaults"
        ));
    }
    fleet::run_notes("window-1 phase", &unloaded, &stats, &mut notes);
    fleet::run_notes("loaded phase", &loaded, &stats, &mut notes);
    if burst_closed > 0 {
        notes.push(format!(
            "{burst_closed} of {clients} clients joining at once were refused or closed \
             (the fleet itself joins {} at a time)",
            fleet::SAME_CONVERSATION_JOINS
        ));
    }
    if errors > 0 {
        notes.push(format!("{errors} submits were refused"));
    }
    let secs = loaded.elapsed.as_secs_f64().max(1e-9);
    let mut figures = vec![
        Figure::new("delivered_msgs_per_s", loaded.frames as f64 / secs, "msg/s"),
        Figure::new("turns_per_s", loaded.completed as f64 / secs, "turn/s"),
        Figure::new(
            "frames_per_turn_per_client",
            loaded.frames as f64 / (loaded.completed.max(1) * clients) as f64,
            "frames",
        ),
    ];
    figures.extend(report::percentiles(
        "last_delivery_unloaded",
        &unloaded.turn_latency,
    ));
    figures.extend(report::percentiles(
        "last_delivery_loaded",
        &loaded.turn_latency,
    ));
    figures.extend(report::percentiles("delivery_loaded", &delivery));
    figures.push(Figure::new("join_all_s", joined.elapsed.as_secs_f64(), "s"));
    figures.push(Figure::new(
        "burst_join_closed",
        burst_closed as f64,
        "clients",
    ));
    if let Some(cpu) = cpu {
        figures.push(Figure::new(
            "server_cpu_ms_per_turn",
            cpu * 1000.0 / loaded.completed.max(1) as f64,
            "ms",
        ));
        figures.push(Figure::new("server_cpu_percent", cpu * 100.0 / secs, "%"));
    }
    if let Some(kb) = peak {
        figures.push(Figure::new("server_rss_peak_mb", mb(kb), "MB"));
    }
    if let Some((barriers, fsyncs)) = group_commit {
        let turns = (unloaded.completed + loaded.completed).max(1) as f64;
        figures.push(Figure::new("log_fsyncs_per_turn", fsyncs / turns, "fsyncs"));
        figures.push(Figure::new(
            "log_barriers_per_turn",
            barriers / turns,
            "barriers",
        ));
        figures.push(Figure::new(
            "barriers_per_fsync",
            barriers / fsyncs,
            "barriers",
        ));
    }
    Ok((figures, notes))
}
