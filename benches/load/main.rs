//! The Roundtable load harness: `cargo bench --bench load -- <scenario> [options]`.
//!
//! It starts the real `roundtable` binary as a child process on a temporary instance directory
//! (or drives `--url`, a running server on a loopback address), runs the scenario with real
//! WebSocket clients over loopback, then runs the same scenario against the baseline (this
//! executable re-run as `__baseline`, see [`baseline`]) and, where turns wait for an fsync,
//! the durable baseline (`__baseline --durable DIR`, see [`durable`]), and prints every figure
//! beside the baselines' with the ratios. Every run is bounded in clients, messages and time:
//! every wait has a deadline, a scenario the server cannot serve fails with what it waited
//! for, the next scenario still runs, and the exit code is 1.
//!
//! Modules: [`scenarios`] (the ten scenarios), [`fleet`] (many joined clients and their
//! turns), [`client`] (one lean protocol client), [`invokes`] (its answers to server → client
//! invokes), [`server`] (child processes, RSS, metrics, the loopback rule), [`support`]
//! (spawning and stopping a server, frame building: shared with the integration tests),
//! [`fixtures`] (instance directories written straight to disk), [`report`] (figures,
//! percentiles, targets, table, JSON, progress bars), [`selftest`] (the harness's own checks,
//! run first).

#[path = "../../tests/support/mod.rs"]
mod support;

mod baseline;
mod client;
mod durable;
mod fixtures;
mod fleet;
mod fsinfo;
mod invokes;
mod report;
mod scenarios;
mod selftest;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::report::{say, ScenarioReport};
use crate::scenarios::{Ctx, Sizes, ALL};
use crate::server::Launch;

/// Upper bounds no flag can exceed: every run stays bounded.
const MAX_CLIENTS: usize = 50_000;
const MAX_TURNS: usize = 1_000_000;
const MAX_SECONDS: u64 = 3_600;
const MAX_REGISTRY: usize = 1_000_000;
const MAX_HISTORY: u64 = 10_000_000;
const MAX_COMMAND_CHARS: usize = 10_000;

/// Load harness for Roundtable: drives a real server with WebSocket clients on loopback.
#[derive(Parser, Debug)]
#[command(
    name = "load",
    about = "Roundtable load harness: cargo bench --bench load -- <scenario> [options]",
    after_help = "Scenarios: fanout, rooms, churn, registry, history, slow, startup, crash, \
                  search, cluster, all (comma-separated lists work too); nemesis (the cluster \
                  under faults, only when named). See BENCHMARKS.md."
)]
struct Args {
    /// Scenario to run: fanout, rooms, churn, registry, history, slow, startup, crash, search,
    /// cluster or all.
    scenario: String,
    /// Tiny sizes: every scenario finishes in seconds (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object per scenario per line on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Drive this running server (ws://, loopback only) instead of starting one.
    #[arg(long)]
    url: Option<String>,
    /// Do not run the baselines.
    #[arg(long)]
    no_baseline: bool,
    /// Do not run the durable baseline (fanout, rooms).
    #[arg(long)]
    no_durable_baseline: bool,
    /// fanout / rooms / slow: the text each turn submits (default: an echo turn's text), e.g.
    /// "@conversation list".
    #[arg(long, value_name = "TEXT")]
    command: Option<String>,
    /// Seconds a turn may go without completing before its scenario fails (default 30).
    #[arg(long, value_name = "SECONDS")]
    turn_timeout: Option<f64>,
    /// The roundtable binary (default: next to this executable, i.e. target/<profile>/).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// RUST_LOG for the server (default: inherited, i.e. the server's own default, info).
    #[arg(long)]
    server_log: Option<String>,
    /// Directory for temporary instance directories (default: the system's).
    #[arg(long)]
    tmpdir: Option<PathBuf>,
    /// fanout / slow / churn: clients.
    #[arg(long)]
    clients: Option<usize>,
    /// fanout / slow: turns in the throughput phase.
    #[arg(long)]
    turns: Option<usize>,
    /// fanout / slow: turns in the unloaded (window 1) phase.
    #[arg(long)]
    latency_turns: Option<usize>,
    /// fanout / slow: turns in flight in the throughput phase (1..=100).
    #[arg(long)]
    window: Option<usize>,
    /// rooms: conversations.
    #[arg(long)]
    rooms: Option<usize>,
    /// rooms: clients per conversation.
    #[arg(long)]
    per_room: Option<usize>,
    /// rooms: light-load rate in turns per second.
    #[arg(long)]
    rate: Option<f64>,
    /// rooms / churn: seconds of light load / of cycling.
    #[arg(long)]
    seconds: Option<f64>,
    /// churn: conversations the clients cycle through.
    #[arg(long)]
    churn_conversations: Option<usize>,
    /// registry: existing conversations per round, comma-separated (e.g. 100,10000,100000).
    #[arg(long, value_delimiter = ',')]
    registry_sizes: Option<Vec<usize>>,
    /// registry: operations of each kind per round.
    #[arg(long)]
    ops: Option<usize>,
    /// history: log sizes in entries, comma-separated (e.g. 1000,1000000).
    #[arg(long, value_delimiter = ',')]
    history_sizes: Option<Vec<u64>>,
    /// startup: conversations on disk.
    #[arg(long)]
    startup_conversations: Option<usize>,
    /// search: conversations on disk (100 display entries each).
    #[arg(long)]
    search_conversations: Option<usize>,
    /// Connects and joins in flight while joining many clients.
    #[arg(long)]
    join_concurrency: Option<usize>,
    /// Time cap of each scenario run against one server, in seconds (a whole scenario is
    /// stopped after 4x this plus 2 minutes).
    #[arg(long)]
    max_seconds: Option<u64>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("__baseline") => return baseline::main(),
        Some("__selftest") => return selftest_main(),
        _ => {}
    }
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("load: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    let scenarios: Vec<&'static str> = if args.scenario == "all" {
        ALL.to_vec()
    } else {
        args.scenario
            .split(',')
            .map(|s| {
                ALL.iter()
                    .chain(scenarios::NAMED_ONLY.iter())
                    .find(|a| **a == s.trim())
                    .copied()
                    .ok_or_else(|| {
                        format!(
                            "unknown scenario {s:?}; one of {}, nemesis or all",
                            ALL.join(", ")
                        )
                    })
            })
            .collect::<Result<_, _>>()?
    };
    if let Some(url) = &args.url {
        server::check_loopback(url)?;
    }
    let sizes = sizes(&args)?;
    let launch = Launch {
        bin: server_bin(args.server_bin.clone())?,
        log_filter: args.server_log.clone(),
    };
    let fd_limit = raise_open_file_limit();
    say(&format!(
        "open-file limit {fd_limit}: up to {} client sockets",
        fd_limit.saturating_sub(64)
    ));
    let tmp = args.tmpdir.clone().unwrap_or_else(std::env::temp_dir);
    if let Some(line) = fsinfo::describe(&tmp) {
        say(&line);
    }
    say(&format!(
        "server {}{}",
        args.url
            .as_deref()
            .unwrap_or(&launch.bin.display().to_string()),
        if args.quick { " (quick mode)" } else { "" }
    ));
    let ctx = Ctx {
        sizes,
        launch,
        url: args.url.clone(),
        baseline: !args.no_baseline,
        durable_baseline: !args.no_durable_baseline,
        command: command(&args)?,
        turn_timeout: turn_timeout(&args)?,
        fd_limit,
        tmp: args.tmpdir.clone(),
        quick: args.quick,
    };
    let runtime = runtime()?;
    let checks = runtime
        .block_on(selftest::run())
        .map_err(|e| format!("the harness's own checks failed: {e}"))?;
    say(&format!("{checks} self-checks passed"));
    let started = Instant::now();
    let (reports, failed) = run_each(&runtime, &ctx, &scenarios, args.json);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    let table = report::table(&reports);
    if args.json {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    say(&format!(
        "total {:.1} s{}",
        started.elapsed().as_secs_f64(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", failed.join(", "))
        }
    ));
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the scenarios one after the other: a failed one gets a report saying why, and the
/// next one still runs. Returns the reports and the names of the failed ones.
fn run_each(
    runtime: &tokio::runtime::Runtime,
    ctx: &Ctx,
    scenarios: &[&'static str],
    json: bool,
) -> (Vec<ScenarioReport>, Vec<&'static str>) {
    let mut reports: Vec<ScenarioReport> = Vec::new();
    let mut failed = Vec::new();
    for &name in scenarios {
        let t = Instant::now();
        say(&format!("== {name}"));
        let report = match runtime.block_on(watched(ctx, name)) {
            Ok(report) => {
                say(&format!(
                    "{name} done in {:.1} s",
                    t.elapsed().as_secs_f64()
                ));
                report
            }
            Err(e) => {
                say(&format!(
                    "{name} FAILED after {:.1} s: {e}",
                    t.elapsed().as_secs_f64()
                ));
                failed.push(name);
                ScenarioReport::failed(name, e)
            }
        };
        if json {
            println!("{}", report.to_json());
        }
        reports.push(report);
    }
    (reports, failed)
}

/// The harness's runtime: one worker per core.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `__selftest`: the harness's own checks alone.
fn selftest_main() -> ExitCode {
    let outcome = runtime().and_then(|r| r.block_on(selftest::run()));
    match outcome {
        Ok(n) => {
            say(&format!("{n} self-checks passed"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("self-checks FAILED: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// Runs a scenario under the watchdog: every wait inside has its own deadline, and this one
/// catches anything that still would not end, saying what the harness was doing.
async fn watched(ctx: &Ctx, name: &'static str) -> Result<ScenarioReport, String> {
    let cap = Duration::from_secs(4 * ctx.sizes.max_seconds + 120);
    match tokio::time::timeout(cap, run_scenario(ctx, name)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "the scenario did not finish within {} s (4x --max-seconds + 120 s); it was at: {}",
            cap.as_secs(),
            report::activity()
        )),
    }
}

/// `--command`, checked (default: the echo turn's text).
fn command(args: &Args) -> Result<String, String> {
    match &args.command {
        None => Ok(fleet::TURN_TEXT.to_string()),
        Some(c) if c.trim().is_empty() => Err("--command must not be empty".into()),
        Some(c) if c.chars().count() > MAX_COMMAND_CHARS => Err(format!(
            "--command must be at most {MAX_COMMAND_CHARS} characters"
        )),
        Some(c) => Ok(c.clone()),
    }
}

/// `--turn-timeout`, checked (default: 30 s).
fn turn_timeout(args: &Args) -> Result<Duration, String> {
    match args.turn_timeout {
        None => Ok(fleet::TURN_TIMEOUT),
        Some(s) if s > 0.0 && s <= MAX_SECONDS as f64 => Ok(Duration::from_secs_f64(s)),
        Some(_) => Err(format!("--turn-timeout must be in (0, {MAX_SECONDS}]")),
    }
}

async fn run_scenario(ctx: &Ctx, name: &str) -> Result<ScenarioReport, String> {
    let mut report = match name {
        "fanout" => scenarios::fanout::run(ctx).await,
        "rooms" => scenarios::rooms::run(ctx).await,
        "churn" => scenarios::churn::run(ctx).await,
        "registry" => scenarios::registry::run(ctx).await,
        "history" => scenarios::history::run(ctx).await,
        "slow" => scenarios::slow::run(ctx).await,
        "startup" => scenarios::startup::run(ctx).await,
        "search" => scenarios::search::run(ctx).await,
        "crash" => scenarios::crash::run(ctx).await,
        "cluster" => scenarios::cluster::run(ctx).await,
        "nemesis" => scenarios::nemesis::run(ctx).await,
        "stream" => scenarios::stream::run(ctx).await,
        other => Err(format!("unknown scenario {other}")),
    }?;
    report.param("quick", ctx.quick);
    report.param(
        "server",
        if ctx.url.is_some() {
            "url"
        } else {
            "child process"
        },
    );
    Ok(report)
}

/// Default or quick sizes, with the flags applied and bounded.
fn sizes(args: &Args) -> Result<Sizes, String> {
    let mut s = Sizes::new(args.quick);
    let bounded = |what: &str, v: usize, max: usize| {
        if v == 0 || v > max {
            Err(format!("--{what} must be between 1 and {max}"))
        } else {
            Ok(v)
        }
    };
    if let Some(v) = args.clients {
        let v = bounded("clients", v, MAX_CLIENTS)?;
        s.fanout_clients = v;
        s.churn_clients = v;
    }
    if let Some(v) = args.turns {
        s.turns = bounded("turns", v, MAX_TURNS)?;
    }
    if let Some(v) = args.latency_turns {
        s.latency_turns = bounded("latency-turns", v, MAX_TURNS)?;
    }
    if let Some(v) = args.window {
        s.window = bounded("window", v, 100)?;
    }
    if let Some(v) = args.rooms {
        s.rooms = bounded("rooms", v, MAX_CLIENTS)?;
    }
    if let Some(v) = args.per_room {
        s.per_room = bounded("per-room", v, MAX_CLIENTS)?;
    }
    if s.rooms * s.per_room > MAX_CLIENTS {
        return Err(format!(
            "--rooms x --per-room must be at most {MAX_CLIENTS}"
        ));
    }
    if let Some(v) = args.rate {
        if !(v > 0.0 && v <= 100_000.0) {
            return Err("--rate must be in (0, 100000]".into());
        }
        s.rooms_rate = v;
    }
    if let Some(v) = args.seconds {
        if !(v > 0.0 && v <= MAX_SECONDS as f64) {
            return Err(format!("--seconds must be in (0, {MAX_SECONDS}]"));
        }
        s.rooms_seconds = v;
        s.churn_seconds = v;
    }
    if let Some(v) = args.churn_conversations {
        s.churn_conversations = bounded("churn-conversations", v, MAX_CLIENTS)?;
    }
    if let Some(v) = &args.registry_sizes {
        for n in v {
            bounded("registry-sizes", *n, MAX_REGISTRY)?;
        }
        s.registry_sizes = v.clone();
    }
    if let Some(v) = args.ops {
        s.registry_ops = bounded("ops", v, 100_000)?;
    }
    if let Some(v) = &args.history_sizes {
        for n in v {
            if *n <= 10 || *n > MAX_HISTORY {
                return Err(format!(
                    "--history-sizes must be between 11 and {MAX_HISTORY}"
                ));
            }
        }
        s.history_sizes = v.clone();
    }
    if let Some(v) = args.startup_conversations {
        s.startup_conversations = bounded("startup-conversations", v, MAX_REGISTRY)?;
    }
    if let Some(v) = args.search_conversations {
        s.search_conversations = bounded("search-conversations", v, MAX_REGISTRY)?;
    }
    if let Some(v) = args.join_concurrency {
        s.join_concurrency = bounded("join-concurrency", v, 10_000)?;
    }
    if let Some(v) = args.max_seconds {
        if v == 0 || v > MAX_SECONDS {
            return Err(format!("--max-seconds must be between 1 and {MAX_SECONDS}"));
        }
        s.max_seconds = v;
    }
    Ok(s)
}

/// `--server-bin`, else `roundtable` next to this executable's directory (cargo puts bench
/// executables in `target/<profile>/deps/`, the binary in `target/<profile>/`), else the
/// path cargo gave at build time.
fn server_bin(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(bin) = flag {
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("--server-bin {}: no such file", bin.display()))
        };
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        exe.parent()
            .and_then(|deps| deps.parent())
            .map(|profile| profile.join("roundtable"))
    });
    let built = PathBuf::from(env!("CARGO_BIN_EXE_roundtable"));
    beside
        .into_iter()
        .chain([built])
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "the roundtable binary was not found next to the harness; run \
             `cargo build --release` first, or pass --server-bin PATH"
                .to_string()
        })
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the limit in force.
fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            say("cannot read the open-file limit; assuming 1024");
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max.min(1 << 20),
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                say(&format!(
                    "raised the open-file limit from {} to {}",
                    limit.rlim_cur, raised.rlim_cur
                ));
                limit = raised;
            } else {
                say(&format!(
                    "could not raise the open-file limit above {} (hard limit {})",
                    limit.rlim_cur, limit.rlim_max
                ));
            }
        }
    }
    limit.rlim_cur
}
