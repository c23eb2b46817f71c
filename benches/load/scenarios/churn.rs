//! `churn`: C connected clients (default 100) each join and leave in a loop, spread over a few
//! conversations (default 10), for a fixed time. Measures join + leave cycles per second and
//! the join and leave latencies. Sockets stay open: the cycle is the protocol's, not TCP's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::{run_tag, Ctx, Running};
use crate::server::Kind;

/// Runs the scenario against Roundtable and the baseline.
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("churn");
    let clients = ctx.fit_clients(s.churn_clients.max(1), &mut report);
    let conversations = s.churn_conversations.clamp(1, clients);
    report.param("clients", clients);
    report.param("conversations", conversations);
    report.param("seconds", s.churn_seconds);
    let mut report = crate::scenarios::with_baseline(ctx, report, |kind| async move {
        let server = Running::start(ctx, kind, None, &[])?;
        let result = measure(ctx, &server, kind, clients, conversations).await;
        server.stop();
        result
    })
    .await?;
    report.target(
        "cycles_per_s",
        "churn >= 20,000 join+leave cycles/s",
        false,
        |v| v >= 20_000.0,
    );
    Ok(report)
}

async fn measure(
    ctx: &Ctx,
    server: &Running,
    kind: Kind,
    clients: usize,
    conversations: usize,
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let s = &ctx.sizes;
    let mut control = Client::connect(&server.url).await?;
    let mut ids = Vec::new();
    for i in 0..conversations {
        ids.push(
            control
                .create_conversation(&format!("{}-churn-{i}", run_tag()))
                .await?,
        );
    }
    let join_hist = Arc::new(Mutex::new(latency_histogram()));
    let leave_hist = Arc::new(Mutex::new(latency_histogram()));
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (go, _) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(Client::connect(&server.url).await?);
    }
    let run_for = Duration::from_secs_f64(s.churn_seconds.max(0.05));
    let bar = report::progress(
        (run_for.as_millis() / 100) as u64,
        format!("churn {}: cycling", kind.name()),
    );
    for (i, mut client) in connected.into_iter().enumerate() {
        let id = ids[i % ids.len()].clone();
        let (join_hist, leave_hist, cycles, stop) = (
            join_hist.clone(),
            leave_hist.clone(),
            cycles.clone(),
            stop.clone(),
        );
        let mut go = go.subscribe();
        tasks.push(tokio::spawn(async move {
            go.wait_for(|started| *started)
                .await
                .map_err(|e| e.to_string())?;
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                client.join(&id, |_| {}).await?;
                let t1 = Instant::now();
                client.leave(&id, |_| {}).await?;
                let t2 = Instant::now();
                report::record(&mut join_hist.lock().expect("lock"), t1 - t0);
                report::record(&mut leave_hist.lock().expect("lock"), t2 - t1);
                cycles.fetch_add(1, Ordering::Relaxed);
            }
            client.close().await;
            Ok::<(), String>(())
        }));
    }
    let started = Instant::now();
    go.send_replace(true);
    while started.elapsed() < run_for {
        tokio::time::sleep(Duration::from_millis(100)).await;
        bar.set_position((started.elapsed().as_millis() / 100) as u64);
    }
    let done_cycles = cycles.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    bar.finish_and_clear();
    let mut first_error = None;
    // Each client stops after its current join or leave (each bounded by the RPC time-out).
    let stop_by = tokio::time::Instant::now() + crate::client::RPC_TIMEOUT;
    for t in tasks {
        let abort = t.abort_handle();
        match tokio::time::timeout_at(stop_by, t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                first_error.get_or_insert(e);
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e.to_string());
            }
            Err(_) => {
                abort.abort();
                first_error.get_or_insert(format!(
                    "a churn client did not finish its join or leave within {} s",
                    crate::client::RPC_TIMEOUT.as_secs()
                ));
            }
        }
    }
    if server.external() {
        control.delete_conversations(&ids).await;
    }
    control.close().await;
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut figures = vec![Figure::new(
        "cycles_per_s",
        done_cycles as f64 / elapsed.as_secs_f64().max(1e-9),
        "cycle/s",
    )];
    figures.extend(report::percentiles(
        "join",
        &join_hist.lock().expect("lock"),
    ));
    figures.extend(report::percentiles(
        "leave",
        &leave_hist.lock().expect("lock"),
    ));
    Ok((figures, Vec::new()))
}
