//! The systemd service-manager protocol, spoken only when systemd asks for it: with
//! `$NOTIFY_SOCKET` set (`Type=notify` units), `serve` sends `READY=1` once it listens,
//! `STOPPING=1` when it starts shutting down, and, with `$WATCHDOG_USEC` set (`WatchdogSec=`),
//! `WATCHDOG=1` at half the interval — but only after the registry actor has answered a message
//! and the log writer thread has run a job, so a wedged registry or writer stops the pings and
//! systemd restarts the service (`Restart=on-failure`). A timer alone would keep beating.
//!
//! Talks to: `server::serve` (ready, stopping, the watchdog task), the registry and the log
//! writer (the liveness probes). Messages go through the `sd-notify` crate.

use std::time::Duration;

use actix::Addr;
use roundtable_actors::metrics::Metrics;
use roundtable_actors::registry::{ConversationRegistry, GetRegistryStats};
use roundtable_actors::storage::log_writer::LogWriter;
use sd_notify::NotifyState;

/// Tells systemd the service is up (a no-op without `$NOTIFY_SOCKET`).
pub fn ready(port: u16) {
    let status = format!("listening on port {port}");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Tells systemd the service is stopping (a no-op without `$NOTIFY_SOCKET`).
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// One datagram to the service manager; a failure is logged, never fatal (systemd then judges
/// the service by its own timeouts).
fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        log::warn!("systemd notify failed: {e}");
    }
}

/// The watchdog interval systemd expects pings within, as sd_watchdog_enabled(3) reads it:
/// `$WATCHDOG_USEC`, for this process unless `$WATCHDOG_PID` names another one. (The
/// `sd-notify` crate's own check also requires `$WATCHDOG_PID` to be set, which sd_notify(3)
/// does not.) `None`: no watchdog, or no `$NOTIFY_SOCKET` to ping on.
pub fn watchdog_interval() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Pings the watchdog every half `interval` for as long as the server runs, each ping after
/// the registry answered and the log writer ran a job (each within that half interval), and
/// while no writer thread has died. A missed check skips the ping and says why.
pub async fn watchdog(
    interval: Duration,
    registry: Addr<ConversationRegistry>,
    log_writer: LogWriter,
    metrics: std::sync::Arc<Metrics>,
) {
    let period = interval / 2;
    log::info!("systemd watchdog: pinging every {period:?} while the registry and writers live");
    loop {
        actix_web::rt::time::sleep(period).await;
        match alive(period, &registry, &log_writer, &metrics).await {
            Ok(()) => send(&[NotifyState::Watchdog]),
            Err(why) => log::error!("systemd watchdog: not pinging: {why}"),
        }
    }
}

/// Whether the parts a ping vouches for work: the registry's mailbox, the log writer's thread
/// and every writer thread still running.
async fn alive(
    deadline: Duration,
    registry: &Addr<ConversationRegistry>,
    log_writer: &LogWriter,
    metrics: &Metrics,
) -> Result<(), String> {
    let dead = Metrics::get(&metrics.dead_writers);
    if dead > 0 {
        return Err(format!("{dead} writer threads have stopped"));
    }
    match actix_web::rt::time::timeout(deadline, registry.send(GetRegistryStats)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("the registry is gone: {e}")),
        Err(_) => return Err(format!("the registry did not answer within {deadline:?}")),
    }
    // An empty sync is a job like any other: it is answered once the writer thread reaches it.
    match actix_web::rt::time::timeout(deadline, log_writer.sync(Vec::new())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err("the log writer thread is gone".into()),
        Err(_) => Err(format!(
            "the log writer did not run a job within {deadline:?}"
        )),
    }
}
