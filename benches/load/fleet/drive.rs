//! Runs of turns: [`drive`] submits turns through a fleet's submitters with a window and an
//! optional pace, waits for every member to see each completion, and stops at the time cap,
//! when the server closes a member, or when the turns stop completing (a refused submit, or
//! no completion within the turn time-out), saying why in [`DriveResult::stalled`].

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use super::{Cmd, Stats};
use crate::report::{self, latency_histogram};

/// How a run of turns went.
pub struct DriveResult {
    /// Turns whose completion every member saw.
    pub completed: usize,
    /// Submit → last delivery per turn.
    pub turn_latency: Histogram<u64>,
    /// First submit → last completion.
    pub elapsed: Duration,
    /// Frames received by all members meanwhile.
    pub frames: u64,
    /// True if the deadline ended the run early.
    pub timed_out: bool,
    /// Members the server closed during the run (the run stops: their turns never complete).
    pub lost: u64,
    /// Why the run stopped making progress (a refused submit, or no completion within the
    /// turn time-out): the server cannot serve these turns, so the scenario fails with it.
    pub stalled: Option<String>,
}

impl DriveResult {
    /// `Err` with the reason when the run stalled.
    pub fn check(&self, phase: &str) -> Result<(), String> {
        match &self.stalled {
            Some(why) => Err(format!("{phase}: {why}")),
            None => Ok(()),
        }
    }
}

/// The turns in flight and when the run last made progress.
struct InFlight {
    /// Submitted, not yet seen complete by every member.
    waiting: BTreeSet<usize>,
    /// The last completion, or the submit that ended an idle spell.
    progress: Instant,
    /// Refused submits before the run started.
    refusals_before: u64,
}

impl InFlight {
    fn submitted(&mut self, k: usize) {
        if self.waiting.is_empty() {
            self.progress = Instant::now();
        }
        self.waiting.insert(k);
    }

    fn completed(&mut self, k: usize) {
        self.waiting.remove(&k);
        self.progress = Instant::now();
    }

    /// When the oldest turn in flight times out, if any is.
    fn stall_at(&self, stats: &Stats) -> Option<Instant> {
        (!self.waiting.is_empty()).then(|| self.progress + stats.turn_timeout)
    }

    /// Why the run cannot go on, if it cannot: a refused submit, or no completion in time.
    fn stalled(&self, stats: &Stats, audience: u32) -> Option<String> {
        if stats.submit_errors.load(Ordering::Relaxed) > self.refusals_before {
            let first = stats.first_refusal.lock().expect("refusal lock").clone();
            let (k, why) = first.unwrap_or((usize::MAX, "no reason kept".into()));
            return Some(format!(
                "submitCommand for request lt{k} was refused: {why}"
            ));
        }
        let k = *self.waiting.first()?;
        if Instant::now() < self.stall_at(stats)? {
            return None;
        }
        let seen = audience.saturating_sub(stats.remaining(k));
        Some(format!(
            "no commandComplete for request lt{k} within {} s ({seen} of {audience} clients \
             saw it): the server may not run turns for {:?}",
            stats.turn_timeout.as_secs_f64(),
            stats.command
        ))
    }
}

/// Runs turns `first..first + count` through `submitters` (turn `k` goes to
/// `submitters[k % len]`), at most `window` in flight, each seen by `audience` members;
/// `pace` spaces submissions (turns per second), `None` submits as fast as the window allows.
/// Stops at `deadline` (`timed_out`), when the server closes a member (`lost`), or when the
/// turns stop completing (`stalled`).
#[allow(clippy::too_many_arguments)]
pub async fn drive(
    stats: &Arc<Stats>,
    done: &mut mpsc::UnboundedReceiver<usize>,
    submitters: &[mpsc::UnboundedSender<Cmd>],
    first: usize,
    count: usize,
    window: usize,
    audience: u32,
    pace: Option<f64>,
    deadline: Instant,
    label: &str,
) -> DriveResult {
    let count = count.min(stats.capacity().saturating_sub(first));
    let bar = report::progress(count as u64, label.to_string());
    let frames_before = stats.frames.load(Ordering::Relaxed);
    let started = Instant::now();
    let due =
        |k: usize| pace.map(|rate| started + Duration::from_secs_f64((k - first) as f64 / rate));
    let end = first + count;
    let mut next = first;
    let mut completed = 0usize;
    let mut turn_latency = latency_histogram();
    let mut timed_out = false;
    let mut stalled = None;
    let closed_before = stats.closed.load(Ordering::SeqCst);
    let mut lost = 0;
    let mut flight = InFlight {
        waiting: BTreeSet::new(),
        progress: started,
        refusals_before: stats.submit_errors.load(Ordering::Relaxed),
    };
    while completed < count {
        // Submit what the window and the pace allow.
        while next < end
            && flight.waiting.len() < window.max(1)
            && due(next).is_none_or(|d| Instant::now() >= d)
        {
            stats.expect(next, audience);
            let _ = submitters[next % submitters.len()].send(Cmd::Submit(next));
            flight.submitted(next);
            next += 1;
        }
        lost = stats.closed.load(Ordering::SeqCst) - closed_before;
        stalled = flight.stalled(stats, audience);
        if lost > 0 || stalled.is_some() {
            break;
        }
        // Wake at least every 100 ms to notice closed members and refused submits.
        let wake = [
            Some(Instant::now() + Duration::from_millis(100)),
            Some(deadline),
            due(next).filter(|_| next < end),
            flight.stall_at(stats),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(deadline);
        match tokio::time::timeout_at(wake.into(), done.recv()).await {
            Ok(Some(k)) => {
                if let Some(lat) = stats.turn_latency(k) {
                    report::record(&mut turn_latency, lat);
                }
                completed += 1;
                flight.completed(k);
                bar.inc(1);
            }
            Ok(None) => break,
            Err(_) if Instant::now() >= deadline => {
                timed_out = true;
                break;
            }
            Err(_) => {}
        }
    }
    bar.finish_and_clear();
    DriveResult {
        completed,
        turn_latency,
        elapsed: started.elapsed(),
        frames: stats.frames.load(Ordering::Relaxed) - frames_before,
        timed_out,
        lost,
        stalled,
    }
}

/// The two phases a fan-out figure comes from: `latency_turns` turns one at a time (each
/// turn's latency unloaded), then, once the delivery histogram is reset and `between` ran (a
/// measurement that must not include the first phase), `turns` more with `window` in flight
/// (none when the first phase stalled). `label` names the run in the progress bars.
#[allow(clippy::too_many_arguments)]
pub async fn unloaded_then_loaded<B>(
    stats: &Arc<Stats>,
    done: &mut mpsc::UnboundedReceiver<usize>,
    submitters: &[mpsc::UnboundedSender<Cmd>],
    (latency_turns, turns, window): (usize, usize, usize),
    audience: u32,
    deadline: Instant,
    label: &str,
    between: impl FnOnce() -> B,
) -> (DriveResult, B, DriveResult) {
    let unloaded = drive(
        stats,
        done,
        submitters,
        0,
        latency_turns,
        1,
        audience,
        None,
        deadline,
        &format!("{label}: window 1"),
    )
    .await;
    stats.reset_delivery();
    let measured = between();
    let loaded_turns = if unloaded.stalled.is_some() { 0 } else { turns };
    let loaded = drive(
        stats,
        done,
        submitters,
        latency_turns,
        loaded_turns,
        window,
        audience,
        None,
        deadline,
        &format!("{label}: window {window}"),
    )
    .await;
    (unloaded, measured, loaded)
}
