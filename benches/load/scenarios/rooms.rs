//! `rooms`: M conversations × K clients (default 1,000 × 10) joined and idle. Measures the time
//! to join them all, the server's RSS per joined client (RSS with everyone joined minus RSS with
//! the conversations created and nobody connected, over M × K), then a light load: echo turns
//! (or `--command`) spread round-robin over the conversations at a fixed rate, with delivery
//! latency. Runs against Roundtable, the baseline and the durable baseline.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::fleet::{self, Mode};
use crate::report::{self, Figure, ScenarioReport};
use crate::scenarios::{mb, run_tag, Ctx, Running};
use crate::server::Kind;

/// Runs the scenario against Roundtable and the baseline.
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("rooms");
    let per_room = s.per_room.max(1);
    let mut rooms = s.rooms.max(1);
    if rooms * per_room > ctx.max_clients() {
        let fit = (ctx.max_clients() / per_room).max(1);
        report.notes.push(format!(
            "scaled down from {rooms} to {fit} conversations (open-file limit {})",
            ctx.fd_limit
        ));
        rooms = fit;
    }
    report.param("conversations", rooms);
    report.param("clients_per_conversation", per_room);
    report.param("clients", rooms * per_room);
    report.param("light_rate_turns_per_s", s.rooms_rate);
    report.param("light_seconds", s.rooms_seconds);
    ctx.command_param(&mut report, true);
    let mut report = crate::scenarios::with_baselines(ctx, report, true, |kind| async move {
        let server = Running::start(ctx, kind, None, &[])?;
        let result = measure(ctx, &server, kind, rooms, per_room).await;
        server.stop();
        result
    })
    .await?;
    let clients = rooms * per_room;
    report.target(
        "rss_per_client_kb",
        "10,000 joined clients at <= 16 KB RSS each",
        false,
        |v| v <= 16.0,
    );
    if clients < 10_000 {
        if let Some(t) = report.targets.last_mut() {
            t.met = None;
            t.note = format!("{} (run had {clients} clients, not 10,000)", t.note);
        }
    }
    Ok(report)
}

async fn measure(
    ctx: &Ctx,
    server: &Running,
    kind: Kind,
    rooms: usize,
    per_room: usize,
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let s = &ctx.sizes;
    let deadline = ctx.deadline();
    let mut notes = Vec::new();
    // Create the conversations over a few sockets (creates are group-committed).
    let tag = run_tag();
    let creators = 16.min(rooms);
    let mut tasks = Vec::new();
    for c in 0..creators {
        let (url, tag) = (server.url.clone(), tag.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = crate::client::Client::connect(&url).await?;
            let mut ids = Vec::new();
            for i in (c..rooms).step_by(creators) {
                ids.push((
                    i,
                    client
                        .create_conversation(&format!("{tag}-room-{i}"))
                        .await?,
                ));
            }
            client.close().await;
            Ok::<_, String>(ids)
        }));
    }
    let mut ids = vec![String::new(); rooms];
    for t in tasks {
        for (i, id) in t.await.map_err(|e| e.to_string())?? {
            ids[i] = id;
        }
    }
    tokio::time::sleep(Duration::from_millis(if ctx.quick { 100 } else { 1000 })).await;
    let rss_before = server.rss_kb();
    let total_turns = (s.rooms_rate * s.rooms_seconds).ceil().max(1.0) as usize;
    let (stats, mut done) = ctx.stats(total_turns);
    // Room-major order: member r * per_room is room r's submitter.
    let plan: Vec<_> = ids
        .iter()
        .flat_map(|id| std::iter::repeat_n((id.clone(), Mode::Reading), per_room))
        .collect();
    let cpu_before_join = server.cpu_seconds();
    let joined = fleet::join_all(
        &server.url,
        &plan,
        &stats,
        s.join_concurrency,
        true,
        &format!("rooms {}: joining", kind.name()),
    )
    .await?;
    let join_cpu_s = server
        .cpu_seconds()
        .zip(cpu_before_join)
        .map(|(a, b)| a - b);
    if let Some(e) = &joined.first_failure {
        notes.push(format!(
            "{} joins failed at the first attempt and were retried alone; first: {e}",
            joined.failed
        ));
    }
    tokio::time::sleep(Duration::from_millis(if ctx.quick { 200 } else { 2000 })).await;
    let rss_joined = server.rss_kb();
    let submitters: Vec<_> = joined
        .members
        .iter()
        .step_by(per_room)
        .map(|m| m.cmds.clone())
        .collect();
    let fsyncs_before = log_fsyncs(server);
    let light = fleet::drive(
        &stats,
        &mut done,
        &submitters,
        0,
        total_turns,
        usize::MAX,
        per_room as u32,
        Some(s.rooms_rate),
        deadline,
        &format!("rooms {}: light load", kind.name()),
    )
    .await;
    let light_fsyncs = log_fsyncs(server)
        .zip(fsyncs_before)
        .map(|(after, before)| after - before);
    let delivery = stats.delivery.lock().expect("histogram lock").clone();
    let errors = stats.submit_errors.load(Ordering::Relaxed);
    let invokes = stats.invokes_answered.load(Ordering::Relaxed);
    fleet::stop_all(joined.members).await;
    if server.external() {
        let mut control = crate::client::Client::connect(&server.url).await?;
        control.delete_conversations(&ids).await;
        control.close().await;
    }
    light.check("light load")?;
    if invokes > 0 {
        notes.push(format!(
            "the clients answered {invokes} server → client invokes with the harness's defaults"
        ));
    }
    fleet::run_notes("light load", &light, &stats, &mut notes);
    if errors > 0 {
        notes.push(format!("{errors} submits were refused"));
    }
    let clients = rooms * per_room;
    let mut figures = vec![Figure::new("join_all_s", joined.elapsed.as_secs_f64(), "s")];
    figures.push(Figure::new(
        "joins_per_s",
        clients as f64 / joined.elapsed.as_secs_f64().max(1e-9),
        "join/s",
    ));
    figures.extend(report::percentiles("join", &joined.join_latency));
    figures.extend(report::percentiles("connect", &joined.connect_latency));
    figures.push(Figure::new("joins_retried", joined.failed as f64, "joins"));
    if let Some(cpu) = join_cpu_s {
        // Connect, upgrade and join, with whatever the server did beside them meanwhile.
        figures.push(Figure::new(
            "server_cpu_us_per_join",
            cpu * 1e6 / clients as f64,
            "us",
        ));
    }
    if let (Some(before), Some(after)) = (rss_before, rss_joined) {
        figures.push(Figure::new(
            "rss_per_client_kb",
            after.saturating_sub(before) as f64 / clients as f64,
            "KB",
        ));
        figures.push(Figure::new("rss_idle_mb", mb(before), "MB"));
        figures.push(Figure::new("rss_joined_mb", mb(after), "MB"));
    }
    figures.push(Figure::new(
        "light_delivered_msgs_per_s",
        light.frames as f64 / light.elapsed.as_secs_f64().max(1e-9),
        "msg/s",
    ));
    figures.extend(report::percentiles("light_delivery", &delivery));
    figures.extend(report::percentiles(
        "light_last_delivery",
        &light.turn_latency,
    ));
    if let Some(fsyncs) = light_fsyncs {
        // The node log's fsyncs while many conversations take turns at once: what a turn
        // costs in fsyncs outside `fanout`'s closed loop, whose window bounds the sharing.
        figures.push(Figure::new(
            "light_log_fsyncs_per_turn",
            fsyncs / light.completed.max(1) as f64,
            "fsyncs",
        ));
    }
    Ok((figures, notes))
}

/// The server's node-log fsyncs so far (`None` for a baseline, or without metrics).
fn log_fsyncs(server: &Running) -> Option<f64> {
    let port = server.process.as_ref()?.port;
    crate::server::metric(port, "roundtable_log_fsyncs_total")
}
