//! The scenarios (the load issue's seven, `crash`, `search`, `cluster`, `nemesis` and `stream`) and what they share: the run
//! context ([`Ctx`]: sizes, how to start servers, the `--url` target, the open-file limit, the
//! turn text and time-out), the default and quick [`Sizes`], [`Running`], a server under test
//! (a child process on a temporary instance directory, or the external `--url` server), and
//! [`with_baselines`], which runs a scenario's measurement against the server and the two
//! baselines. Each scenario lives in its own module and returns a [`ScenarioReport`].

pub mod churn;
pub mod cluster;
pub mod crash;
pub mod fanout;
pub mod history;
pub mod nemesis;
pub mod registry;
pub mod rooms;
pub mod search;
pub mod slow;
pub mod startup;
pub mod stream;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::report::ScenarioReport;
use crate::server::{Kind, Launch, ServerProcess};

/// Every scenario, in the order `all` runs them.
pub const ALL: [&str; 11] = [
    "fanout", "rooms", "churn", "registry", "history", "slow", "startup", "crash", "search",
    "cluster", "stream",
];

/// Scenarios run only when named (minutes long, no baseline): the cluster under faults.
pub const NAMED_ONLY: [&str; 1] = ["nemesis"];

/// Sizes of every scenario (defaults are the issue's; `--quick` shrinks them to seconds).
#[derive(Debug, Clone)]
pub struct Sizes {
    /// fanout / slow: clients in the conversation.
    pub fanout_clients: usize,
    /// fanout / slow: turns at window 1 (unloaded latency).
    pub latency_turns: usize,
    /// fanout / slow: turns at `window` (throughput).
    pub turns: usize,
    /// Turns in flight in the throughput phase (the server queues up to 100).
    pub window: usize,
    /// rooms: conversations.
    pub rooms: usize,
    /// rooms: clients per conversation.
    pub per_room: usize,
    /// rooms: light load in turns per second over all conversations.
    pub rooms_rate: f64,
    /// rooms: seconds of light load.
    pub rooms_seconds: f64,
    /// churn: clients cycling.
    pub churn_clients: usize,
    /// churn: conversations they cycle through.
    pub churn_conversations: usize,
    /// churn: seconds of cycling.
    pub churn_seconds: f64,
    /// registry: existing conversations for each round.
    pub registry_sizes: Vec<usize>,
    /// registry: operations of each kind per round.
    pub registry_ops: usize,
    /// registry: listConversations calls per round.
    pub list_ops: usize,
    /// history: log sizes.
    pub history_sizes: Vec<u64>,
    /// history: tail reads per log.
    pub history_reads: usize,
    /// startup: conversations on disk.
    pub startup_conversations: usize,
    /// startup: cold joins measured.
    pub cold_joins: usize,
    /// search: conversations on disk (100 display entries each).
    pub search_conversations: usize,
    /// search: queries of each kind.
    pub search_queries_per_kind: usize,
    /// Connects / joins in flight while joining many clients.
    pub join_concurrency: usize,
    /// Time cap of each scenario run against one server.
    pub max_seconds: u64,
}

impl Sizes {
    /// The sizes, or tiny ones for `--quick`.
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                fanout_clients: 10,
                latency_turns: 20,
                turns: 100,
                window: 4,
                rooms: 20,
                per_room: 5,
                rooms_rate: 100.0,
                rooms_seconds: 0.5,
                churn_clients: 10,
                churn_conversations: 2,
                churn_seconds: 0.5,
                registry_sizes: vec![100, 2_000],
                registry_ops: 20,
                list_ops: 3,
                history_sizes: vec![1_000, 20_000],
                history_reads: 50,
                startup_conversations: 1_000,
                cold_joins: 5,
                search_conversations: 300,
                search_queries_per_kind: 10,
                join_concurrency: 50,
                max_seconds: 20,
            }
        } else {
            Sizes {
                fanout_clients: 100,
                latency_turns: 200,
                turns: 2_000,
                window: 4,
                rooms: 1_000,
                per_room: 10,
                rooms_rate: 200.0,
                rooms_seconds: 5.0,
                churn_clients: 100,
                churn_conversations: 10,
                churn_seconds: 5.0,
                registry_sizes: vec![100, 10_000, 100_000],
                registry_ops: 200,
                list_ops: 10,
                history_sizes: vec![1_000, 1_000_000],
                history_reads: 500,
                startup_conversations: 10_000,
                cold_joins: 20,
                search_conversations: 10_000,
                search_queries_per_kind: 50,
                join_concurrency: 200,
                max_seconds: 300,
            }
        }
    }
}

/// Everything a scenario needs to run.
pub struct Ctx {
    /// Sizes after flags.
    pub sizes: Sizes,
    /// How to start Roundtable.
    pub launch: Launch,
    /// `--url`: drive this running server instead of starting one.
    pub url: Option<String>,
    /// Run the baseline beside Roundtable where it applies.
    pub baseline: bool,
    /// Run the durable baseline too, in the scenarios whose turns wait for an fsync.
    pub durable_baseline: bool,
    /// The text each turn of `fanout`, `rooms` and `slow` submits (`--command`).
    pub command: String,
    /// How long a turn may go without completing before its scenario fails (`--turn-timeout`).
    pub turn_timeout: Duration,
    /// The harness's open-file limit after raising it.
    pub fd_limit: u64,
    /// Where temporary instance directories go.
    pub tmp: Option<PathBuf>,
    /// `--quick`.
    pub quick: bool,
}

impl Ctx {
    /// When a run against one server must stop.
    pub fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs(self.sizes.max_seconds)
    }

    /// The turn book of a scenario run: room for `max_turns` turns of `--command`.
    pub fn stats(
        &self,
        max_turns: usize,
    ) -> (
        std::sync::Arc<crate::fleet::Stats>,
        tokio::sync::mpsc::UnboundedReceiver<usize>,
    ) {
        crate::fleet::Stats::for_turns(max_turns, &self.command, self.turn_timeout)
    }

    /// Records `--command` in the report when it is not the default echo text (with a note
    /// when the scenario runs the baselines, which always echo).
    pub fn command_param(&self, report: &mut ScenarioReport, baselines: bool) {
        if self.command != crate::fleet::TURN_TEXT {
            report.param("command", self.command.as_str());
            if baselines && self.baseline {
                report.notes.push(
                    "the baselines answer every command with an echo turn of its text".into(),
                );
            }
        }
    }

    /// Clients the open-file limit allows the harness (each is one socket; 64 spare).
    pub fn max_clients(&self) -> usize {
        self.fd_limit.saturating_sub(64) as usize
    }

    /// `requested` clients, or as many as the open-file limit allows, with a note when it
    /// had to scale down.
    pub fn fit_clients(&self, requested: usize, report: &mut ScenarioReport) -> usize {
        if requested <= self.max_clients() {
            return requested;
        }
        report.notes.push(format!(
            "scaled down from {requested} to {} clients (open-file limit {})",
            self.max_clients(),
            self.fd_limit
        ));
        self.max_clients()
    }

    /// A temporary directory for an instance.
    pub fn tempdir(&self) -> Result<tempfile::TempDir, String> {
        let mut b = tempfile::Builder::new();
        b.prefix("roundtable-load-");
        match &self.tmp {
            Some(dir) => b.tempdir_in(dir),
            None => b.tempdir(),
        }
        .map_err(|e| format!("cannot create a temporary directory: {e}"))
    }
}

/// Writes an instance directory before the server starts.
pub type Fixture<'a> = &'a dyn Fn(&Path) -> std::io::Result<()>;

/// A server under test.
pub struct Running {
    /// Its WebSocket URL.
    pub url: String,
    /// The child process (`None` for `--url`).
    pub process: Option<ServerProcess>,
    /// The instance directory, removed on drop.
    _dir: Option<tempfile::TempDir>,
}

impl Running {
    /// Starts a fresh server of `kind` (Roundtable on a temporary instance prepared by
    /// `fixture`, the durable baseline on a temporary directory for its logs), or wraps `--url`
    /// for Roundtable when given (then `fixture` must be `None`).
    pub fn start(
        ctx: &Ctx,
        kind: Kind,
        fixture: Option<Fixture<'_>>,
        extra: &[&str],
    ) -> Result<Running, String> {
        match kind {
            Kind::Baseline | Kind::DurableBaseline => {
                let dir = match kind {
                    Kind::DurableBaseline => Some(ctx.tempdir()?),
                    _ => None,
                };
                let process = ServerProcess::baseline(dir.as_ref().map(|d| d.path()))?;
                crate::report::say(&format!("{} started on port {}", kind.name(), process.port));
                Ok(Running {
                    process: Some(process),
                    url: String::new(),
                    _dir: dir,
                }
                .with_url())
            }
            Kind::Roundtable => {
                if let Some(url) = &ctx.url {
                    if fixture.is_some() {
                        return Err("this scenario prepares its own instance directory and \
                                    cannot run against --url"
                            .into());
                    }
                    return Ok(Running {
                        url: url.clone(),
                        process: None,
                        _dir: None,
                    });
                }
                let dir = ctx.tempdir()?;
                if let Some(f) = fixture {
                    f(dir.path()).map_err(|e| format!("cannot write the fixture: {e}"))?;
                }
                let process = ServerProcess::roundtable(&ctx.launch, dir.path(), extra)?;
                Ok(Running {
                    url: String::new(),
                    process: Some(process),
                    _dir: Some(dir),
                }
                .with_url())
            }
        }
    }

    fn with_url(mut self) -> Running {
        if let Some(p) = &self.process {
            self.url = p.url();
        }
        self
    }

    /// The server's pid, when the harness started it.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ServerProcess::pid)
    }

    /// The server's RSS in KB, when the harness started it.
    pub fn rss_kb(&self) -> Option<u64> {
        self.process.as_ref().and_then(ServerProcess::rss_kb)
    }

    /// CPU seconds the server has used, when the harness started it.
    pub fn cpu_seconds(&self) -> Option<f64> {
        self.pid().and_then(crate::server::cpu_seconds)
    }

    /// True when driving someone else's server (clean up after ourselves).
    pub fn external(&self) -> bool {
        self.process.is_none()
    }

    /// Stops the child (if any) and removes the instance directory.
    pub fn stop(self) {
        if let Some(p) = self.process {
            p.stop();
        }
    }
}

/// A name prefix unique to this harness run (conversations it creates on a `--url` server).
pub fn run_tag() -> String {
    format!("load-{}", std::process::id())
}

/// Waits until `server`'s content index holds `documents` documents (its `/metrics`
/// counter), at most `limit`.
pub async fn wait_indexed(
    server: &crate::server::ServerProcess,
    documents: u64,
    limit: Duration,
) -> Result<(), String> {
    let port = server.port;
    let deadline = Instant::now() + limit;
    loop {
        let indexed = tokio::task::spawn_blocking(move || {
            crate::server::metric(port, "roundtable_search_documents_total")
        })
        .await
        .ok()
        .flatten()
        .unwrap_or(0.0);
        if indexed >= documents as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the content index held {indexed} of {documents} documents after {} s:\n{}",
                limit.as_secs(),
                server.log_tail(20)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// KB → MB.
pub fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// Runs `f` for Roundtable, then for the baseline when enabled, and returns the Roundtable
/// report with the baseline's figures attached (no durable baseline: see [`with_baselines`]).
pub async fn with_baseline<F, Fut>(
    ctx: &Ctx,
    report: ScenarioReport,
    f: F,
) -> Result<ScenarioReport, String>
where
    F: FnMut(Kind) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<crate::report::Figure>, Vec<String>), String>>,
{
    with_baselines(ctx, report, false, f).await
}

/// Runs `f` for Roundtable, then for the baseline and (with `durable`, for scenarios whose
/// turns wait for an fsync in Roundtable) the durable baseline when enabled, and returns the
/// Roundtable report with both baselines' figures attached.
pub async fn with_baselines<F, Fut>(
    ctx: &Ctx,
    mut report: ScenarioReport,
    durable: bool,
    mut f: F,
) -> Result<ScenarioReport, String>
where
    F: FnMut(Kind) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<crate::report::Figure>, Vec<String>), String>>,
{
    let (figures, notes) = f(Kind::Roundtable).await.map_err(on(Kind::Roundtable))?;
    report.figures = figures;
    report.notes.extend(notes);
    if !ctx.baseline {
        report
            .notes
            .push("baselines not run (--no-baseline)".into());
        return Ok(report);
    }
    let (base, notes) = f(Kind::Baseline).await.map_err(on(Kind::Baseline))?;
    report.attach_baseline(&base);
    report
        .notes
        .extend(notes.into_iter().map(|n| format!("baseline: {n}")));
    if !durable {
        return Ok(report);
    }
    if !ctx.durable_baseline {
        report
            .notes
            .push("durable baseline not run (--no-durable-baseline)".into());
        return Ok(report);
    }
    let (base, notes) = f(Kind::DurableBaseline)
        .await
        .map_err(on(Kind::DurableBaseline))?;
    report.attach_durable_baseline(&base);
    report
        .notes
        .extend(notes.into_iter().map(|n| format!("durable baseline: {n}")));
    Ok(report)
}

/// Prefixes an error with the server it happened against.
fn on(kind: Kind) -> impl Fn(String) -> String {
    let server = match kind {
        Kind::Roundtable => "Roundtable",
        Kind::Baseline => "the baseline",
        Kind::DurableBaseline => "the durable baseline",
    };
    move |e| format!("against {server}: {e}")
}
