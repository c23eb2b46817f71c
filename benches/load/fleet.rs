//! Many joined clients and the turns they watch. A [`Member`] is one socket joined to one
//! conversation, run by its own task: it counts every `clientio` frame it receives and, on the
//! `commandComplete` of a turn, records submit → delivery latency in the shared [`Stats`]. One
//! member per conversation also submits, when the scenario's driver tells it to. The
//! [`Stats`] turn book notices when the last member saw a turn complete and tells the driver,
//! which measures submit → last delivery and keeps its window of turns in flight. A run of
//! turns that stops making progress (no completion within the turn time-out, or a refused
//! submit) ends with a [`DriveResult::stalled`] reason instead of waiting for the time cap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

mod drive;

pub use drive::{drive, unloaded_then_loaded, DriveResult};

use crate::client::{completed_turn, Client, Incoming};
use crate::report::{self, latency_histogram};
use crate::support::protocol;

/// The text every load turn submits unless `--command` says otherwise: plain text, so the
/// builtin agent echoes it (one `appendDisplay`, no tool call).
pub const TURN_TEXT: &str = "hello from the load harness";

/// How long a turn may go without completing before a run of turns gives up on it (unless
/// `--turn-timeout` says otherwise): the same bound as one RPC.
pub const TURN_TIMEOUT: Duration = crate::client::RPC_TIMEOUT;

/// Joins in flight into one conversation while building a fleet. Roundtable raises a new
/// client actor's mailbox capacity in its `started()`, so a client that receives more than
/// actix's default 16 calls before it first runs (join notices from a burst of joins) is
/// closed with 1008; the fleet stays under that, and `fanout` measures the burst separately
/// (`burst_join_closed`).
pub const SAME_CONVERSATION_JOINS: usize = 8;

/// Book-keeping of one turn.
struct Slot {
    /// ns since `Stats::base` + 1 when submitted (0: not ours / not yet).
    submitted: AtomicU64,
    /// Latest delivery of its completion, ns since base.
    last: AtomicU64,
    /// Members still to see its completion.
    remaining: AtomicU32,
}

/// Counters shared by every member of a scenario run.
pub struct Stats {
    base: Instant,
    /// Every server → client frame received by a reading member.
    pub frames: AtomicU64,
    /// Submits the server refused (`ok:false`) or answered with an error.
    pub submit_errors: AtomicU64,
    /// Reading members whose socket the server closed.
    pub closed: AtomicU64,
    /// The close code of the first of them (0: none given).
    pub close_code: AtomicU32,
    /// Submit → each member's `commandComplete`.
    pub delivery: Mutex<Histogram<u64>>,
    /// Server → client invokes the members answered (`invokes.rs`).
    pub invokes_answered: AtomicU64,
    /// The first refused submit: its turn and what the server said (or why it was not sent).
    pub first_refusal: Mutex<Option<(usize, String)>>,
    /// The text each turn submits (`--command`).
    pub command: String,
    /// How long a turn may go without completing (`--turn-timeout`).
    pub turn_timeout: Duration,
    turns: Vec<Slot>,
    done: mpsc::UnboundedSender<usize>,
}

impl Stats {
    /// Room for `max_turns` echo turns of [`TURN_TEXT`]; completed turn numbers come out of
    /// the receiver.
    pub fn new(max_turns: usize) -> (Arc<Stats>, mpsc::UnboundedReceiver<usize>) {
        Stats::for_turns(max_turns, TURN_TEXT, TURN_TIMEOUT)
    }

    /// Room for `max_turns` turns submitting `command`, each given `turn_timeout`.
    pub fn for_turns(
        max_turns: usize,
        command: &str,
        turn_timeout: Duration,
    ) -> (Arc<Stats>, mpsc::UnboundedReceiver<usize>) {
        let (done, rx) = mpsc::unbounded_channel();
        let turns = (0..max_turns)
            .map(|_| Slot {
                submitted: AtomicU64::new(0),
                last: AtomicU64::new(0),
                remaining: AtomicU32::new(0),
            })
            .collect();
        (
            Arc::new(Stats {
                base: Instant::now(),
                frames: AtomicU64::new(0),
                submit_errors: AtomicU64::new(0),
                closed: AtomicU64::new(0),
                close_code: AtomicU32::new(0),
                delivery: Mutex::new(latency_histogram()),
                invokes_answered: AtomicU64::new(0),
                first_refusal: Mutex::new(None),
                command: command.to_string(),
                turn_timeout,
                turns,
                done,
            }),
            rx,
        )
    }

    /// Turns the book has room for.
    pub fn capacity(&self) -> usize {
        self.turns.len()
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Prepares turn `k`: `members` must see its completion.
    pub fn expect(&self, k: usize, members: u32) {
        if let Some(s) = self.turns.get(k) {
            s.remaining.store(members, Ordering::SeqCst);
            s.last.store(0, Ordering::SeqCst);
        }
    }

    fn mark_submitted(&self, k: usize) {
        if let Some(s) = self.turns.get(k) {
            s.submitted.store(self.now_ns() + 1, Ordering::SeqCst);
        }
    }

    /// Submit → last delivery of a completed turn.
    pub fn turn_latency(&self, k: usize) -> Option<Duration> {
        let s = self.turns.get(k)?;
        let submitted = s.submitted.load(Ordering::SeqCst).checked_sub(1)?;
        let last = s.last.load(Ordering::SeqCst);
        Some(Duration::from_nanos(last.saturating_sub(submitted)))
    }

    fn on_frame(&self, frame: &str) {
        self.frames.fetch_add(1, Ordering::Relaxed);
        let Some(k) = completed_turn(frame) else {
            return;
        };
        let Some(s) = self.turns.get(k) else { return };
        let Some(submitted) = s.submitted.load(Ordering::SeqCst).checked_sub(1) else {
            return;
        };
        let now = self.now_ns();
        report::record(
            &mut self.delivery.lock().expect("histogram lock"),
            Duration::from_nanos(now.saturating_sub(submitted)),
        );
        s.last.fetch_max(now, Ordering::SeqCst);
        if s.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _ = self.done.send(k);
        }
    }

    /// Members still to see turn `k`'s completion.
    fn remaining(&self, k: usize) -> u32 {
        self.turns
            .get(k)
            .map_or(0, |s| s.remaining.load(Ordering::SeqCst))
    }

    /// Counts a refused submit and keeps the first reason.
    fn refused(&self, k: usize, why: String) {
        self.submit_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_refusal.lock().expect("refusal lock");
        first.get_or_insert((k, why));
    }

    /// Clears the delivery histogram (between phases).
    pub fn reset_delivery(&self) {
        self.delivery.lock().expect("histogram lock").reset();
    }
}

/// What a member is told.
#[derive(Debug)]
pub enum Cmd {
    /// Submit turn `k`.
    Submit(usize),
    /// Close the socket and end.
    Stop,
}

/// Whether a member reads its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reads and counts everything.
    Reading,
    /// Joins, then never reads again (the slow consumer).
    Stalled,
}

/// A joined member's handle.
pub struct Member {
    /// Commands to the member's task.
    pub cmds: mpsc::UnboundedSender<Cmd>,
    /// The task; yields the close code if the server closed the socket.
    pub task: JoinHandle<Option<Option<u16>>>,
}

/// How long a member's start took, in its two steps.
pub struct StartLatency {
    /// TCP connect and WebSocket upgrade.
    pub connect: Duration,
    /// joinConversation invoke → result.
    pub join: Duration,
}

/// Connects, joins `conversation` and starts the member's task. Returns the member and how
/// long its connect and its join took.
pub async fn start_member(
    url: &str,
    conversation: &str,
    stats: Arc<Stats>,
    mode: Mode,
    recv_buffer: Option<u32>,
) -> Result<(Member, StartLatency), String> {
    let t0 = Instant::now();
    let mut client = Client::connect_with(url, recv_buffer).await?;
    let connect = t0.elapsed();
    let t1 = Instant::now();
    client.join(conversation, |_| {}).await?;
    let join = t1.elapsed();
    let (tx, rx) = mpsc::unbounded_channel();
    let dispatcher = protocol::dispatcher(conversation);
    let task = tokio::spawn(member_loop(client, dispatcher, stats, rx, mode));
    Ok((Member { cmds: tx, task }, StartLatency { connect, join }))
}

async fn member_loop(
    mut client: Client,
    dispatcher: String,
    stats: Arc<Stats>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    mode: Mode,
) -> Option<Option<u16>> {
    if mode == Mode::Stalled {
        while let Some(Cmd::Submit(_)) = cmds.recv().await {}
        client.close().await;
        return None;
    }
    // Our submits still unanswered: callId → turn.
    let mut submits: HashMap<u64, usize> = HashMap::new();
    loop {
        tokio::select! {
            biased;
            cmd = cmds.recv() => match cmd {
                Some(Cmd::Submit(k)) => {
                    stats.mark_submitted(k);
                    let args = json!([stats.command, null, null, format!("lt{k}"), null]);
                    match client.send_invoke(&dispatcher, "submitCommand", args).await {
                        Ok(call_id) => {
                            submits.insert(call_id, k);
                        }
                        Err(e) => {
                            stats.refused(k, format!("cannot send it: {e}"));
                            return Some(None);
                        }
                    }
                }
                Some(Cmd::Stop) | None => break,
            },
            incoming = client.recv() => match incoming {
                Incoming::Call(text) => stats.on_frame(&text),
                Incoming::Invoked(_) => {
                    stats.invokes_answered.fetch_add(1, Ordering::Relaxed);
                }
                Incoming::Answer { call_id, result, .. } => {
                    let k = submits.remove(&call_id).unwrap_or(usize::MAX);
                    match result {
                        Ok(v) if v["ok"] == true => {}
                        Ok(v) => stats.refused(k, format!("the server answered {v}")),
                        Err(e) => stats.refused(k, format!("the server answered an error: {e}")),
                    }
                }
                Incoming::Closed(code) => {
                    if stats.closed.fetch_add(1, Ordering::SeqCst) == 0 {
                        stats.close_code.store(u32::from(code.unwrap_or(0)), Ordering::SeqCst);
                    }
                    return Some(code);
                }
            },
        }
    }
    client.close().await;
    None
}

/// Members started by [`join_all`], in plan order, and how joining went.
pub struct Joined {
    /// One per plan entry.
    pub members: Vec<Member>,
    /// joinConversation latencies (successful first attempts).
    pub join_latency: Histogram<u64>,
    /// TCP connect + WebSocket upgrade latency of the members that joined at once.
    pub connect_latency: Histogram<u64>,
    /// First connect → last join answered (retries included).
    pub elapsed: Duration,
    /// Joins that failed at the first, concurrent attempt (retried alone when asked).
    pub failed: usize,
    /// The first of those failures, for the report.
    pub first_failure: Option<String>,
}

/// Connects and joins every `(conversation, mode)` of `plan`, `concurrency` at a time. With
/// `retry`, joins that fail are retried once, one at a time (a second failure is an error);
/// without it they are only counted and left out of `members`.
pub async fn join_all(
    url: &str,
    plan: &[(String, Mode)],
    stats: &Arc<Stats>,
    concurrency: usize,
    retry: bool,
    label: &str,
) -> Result<Joined, String> {
    let bar = report::progress(plan.len() as u64, label.to_string());
    let gate = Arc::new(Semaphore::new(concurrency.max(1)));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(plan.len());
    for (conversation, mode) in plan.iter().cloned() {
        let permit = gate.clone().acquire_owned().await.expect("semaphore open");
        let (url, stats, bar) = (url.to_string(), stats.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let r = start_member(&url, &conversation, stats, mode, small_buffer(mode)).await;
            drop(permit);
            bar.inc(1);
            r
        }));
    }
    let mut members: Vec<Option<Member>> = Vec::with_capacity(plan.len());
    let mut join_latency = latency_histogram();
    let mut connect_latency = latency_histogram();
    let mut failed = Vec::new();
    let mut first_failure = None;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok((m, lat)) => {
                report::record(&mut join_latency, lat.join);
                report::record(&mut connect_latency, lat.connect);
                members.push(Some(m));
            }
            Err(e) => {
                first_failure.get_or_insert(e);
                failed.push(i);
                members.push(None);
            }
        }
    }
    for &i in failed.iter().filter(|_| retry) {
        let (conversation, mode) = &plan[i];
        match start_member(url, conversation, stats.clone(), *mode, small_buffer(*mode)).await {
            Ok((m, _)) => members[i] = Some(m),
            Err(e) => {
                bar.finish_and_clear();
                stop_all(members.into_iter().flatten().collect()).await;
                return Err(format!(
                    "joining {} clients: {} failed, and a retry failed too: {e}",
                    plan.len(),
                    failed.len()
                ));
            }
        }
    }
    bar.finish_and_clear();
    Ok(Joined {
        members: members.into_iter().flatten().collect(),
        join_latency,
        connect_latency,
        elapsed: started.elapsed(),
        failed: failed.len(),
        first_failure,
    })
}

/// The stalled reader gets a small receive buffer so it fills in seconds, not minutes.
fn small_buffer(mode: Mode) -> Option<u32> {
    (mode == Mode::Stalled).then_some(4096)
}

/// Notes about a run that did not go to the end.
pub fn run_notes(name: &str, r: &DriveResult, stats: &Stats, notes: &mut Vec<String>) {
    if r.timed_out {
        notes.push(format!(
            "{name}: stopped at the time cap after {} turns",
            r.completed
        ));
    }
    if r.lost > 0 {
        notes.push(format!(
            "{name}: stopped after {} turns: the server closed {} reading client(s) (close code {})",
            r.completed,
            r.lost,
            stats.close_code.load(Ordering::SeqCst)
        ));
    }
}

/// A burst: `clients` sockets join `conversation` all at once. Returns how many of them the
/// server refused or closed (within `settle` after the last join answered).
pub async fn burst_join(
    url: &str,
    conversation: &str,
    clients: usize,
    settle: Duration,
) -> Result<usize, String> {
    let (stats, _done) = Stats::new(0);
    let plan: Vec<_> = (0..clients)
        .map(|_| (conversation.to_string(), Mode::Reading))
        .collect();
    let joined = join_all(url, &plan, &stats, clients, false, "join burst").await?;
    tokio::time::sleep(settle).await;
    let closed_after = joined
        .members
        .iter()
        .filter(|m| m.task.is_finished())
        .count();
    stop_all(joined.members).await;
    Ok(joined.failed + closed_after)
}

/// How long stopping a fleet may take in all (each member closes its socket within 2 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Tells every member to stop and waits for their tasks, [`STOP_TIMEOUT`] in all (members
/// still running then are aborted); returns the close codes of the members the server had
/// closed.
pub async fn stop_all(members: Vec<Member>) -> Vec<Option<u16>> {
    for m in &members {
        let _ = m.cmds.send(Cmd::Stop);
    }
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    let mut closed = Vec::new();
    for m in members {
        let abort = m.task.abort_handle();
        match tokio::time::timeout_at(deadline, m.task).await {
            Ok(Ok(Some(code))) => closed.push(code),
            Ok(_) => {}
            Err(_) => abort.abort(),
        }
    }
    closed
}
