//! The nemesis (issue 31): three Roundtable nodes on a three-server NATS cluster (JetStream,
//! everything with three replicas), clients on every node submitting turns and creating,
//! renaming and deleting conversations, while faults come one at a time and overlapping:
//! `kill -9` of an owner, `SIGSTOP` of an owner for longer than the lease then `SIGCONT`, a
//! NATS server restarted, a node cut off from NATS (a [`CutProxy`] sits between each node and
//! each NATS server) and healed. Then [`check`] reads every conversation's history through
//! every node and the registry, and the [`Report`] counts what a client was promised and did
//! not get: acknowledged turns lost or duplicated, orders that differ, names held twice,
//! acknowledged deletes that came back, acknowledged registry changes lost, and the longest
//! time any conversation made no progress under each kind of fault.
//!
//! Shared by the CI-sized test (`tests/integration/cluster/nemesis.rs`) and the load harness's
//! `nemesis` scenario, which differ only in [`Config`]. Files: this one runs the nodes and the
//! faults, `workers.rs` the clients, `check.rs` the checker, `wire.rs` the clients' socket.
//! Set `ROUNDTABLE_NEMESIS_LOGS=<dir>` to keep every node's log there after a run
//! (`node-<name>.log`, each of its processes in turn), each conversation's history as a node
//! read it at the end, and its acknowledged turns with the time of each acknowledgement.

mod check;
pub mod wire;
mod workers;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::nats_cluster::NatsCluster;
use crate::support::proxy::CutProxy;
use crate::support::server::{self, ChildServer, Stderr};

pub use check::Report;
use workers::Shared;

/// What a run does.
pub struct Config {
    /// The `roundtable` binary.
    pub bin: PathBuf,
    /// Faults of each kind (the overlapping kind included).
    pub faults_per_kind: usize,
    /// Conversations the turn workers share (each has one worker on every node).
    pub conversations: usize,
    /// The nodes' `--lease-time` in seconds.
    pub lease_seconds: f64,
    /// Each worker starts at most one request per this interval (keeps histories readable).
    pub pace: Duration,
    /// More `serve` flags for every node (`--cluster-replicas 3`).
    pub node_args: Vec<String>,
    /// Told each fault as it starts: (number, total, description).
    pub on_fault: Option<OnFault>,
}

/// Told each fault as it starts: (number from 1, total, what is done).
pub type OnFault = Box<dyn Fn(usize, usize, &str) + Send + Sync>;

/// The kinds of fault, in the order a run cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `kill -9` of the node owning the most conversations; restarted once every conversation
    /// moved on.
    Kill9,
    /// `SIGSTOP` of an owner until every conversation moved on (at least 1.5 leases), then
    /// `SIGCONT`: the resumed node must not write.
    Stop,
    /// `kill -9` of one NATS server, restarted with its store.
    NatsRestart,
    /// A node cut off from every NATS server, then healed.
    CutOff,
    /// Two at once: a node cut off while an owner is killed, or an owner stopped while a
    /// NATS server restarts.
    Overlap,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::Kill9,
        FaultKind::Stop,
        FaultKind::NatsRestart,
        FaultKind::CutOff,
        FaultKind::Overlap,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill9 => "kill -9 of an owner",
            FaultKind::Stop => "SIGSTOP past the lease, SIGCONT",
            FaultKind::NatsRestart => "restart of one NATS server",
            FaultKind::CutOff => "node cut off from NATS, healed",
            FaultKind::Overlap => "two at once",
        }
    }
}

/// One fault as it happened.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// What was done, for the report.
    pub what: String,
    /// When it began.
    pub started: Instant,
    /// When every conversation had been acknowledged a turn after the fault was undone
    /// (`None`: not within the recovery deadline).
    pub recovered: Option<Instant>,
}

/// One Roundtable node of the run.
pub(crate) struct Node {
    /// `a`, `b` or `c`.
    pub(crate) name: String,
    /// Its instance directory, kept across restarts.
    dir: tempfile::TempDir,
    /// Its process while it runs.
    server: Mutex<Option<ChildServer>>,
    /// Its WebSocket port, 0 while it is down (workers wait for it).
    pub(crate) port: AtomicU16,
    /// One proxy per NATS server: the node reaches NATS only through these.
    proxies: Vec<CutProxy>,
    /// Whether it is stopped (`SIGSTOP`).
    stopped: AtomicBool,
    /// What its earlier processes logged (for `ROUNDTABLE_NEMESIS_LOGS`).
    past_logs: Mutex<String>,
}

/// How long a killed node or NATS server may take to come back, and every conversation to
/// progress after a fault is undone.
const RECOVERY: Duration = Duration::from_secs(90);

/// Runs the nemesis and checks the outcome.
pub fn run(config: Config) -> Result<Report, String> {
    let mut nats = NatsCluster::start();
    let lease = Duration::from_secs_f64(config.lease_seconds);
    let nodes: Arc<Vec<Node>> = Arc::new(
        ["a", "b", "c"]
            .iter()
            .map(|name| Node {
                name: name.to_string(),
                dir: tempfile::tempdir().expect("instance dir"),
                server: Mutex::new(None),
                port: AtomicU16::new(0),
                proxies: nats.ports().into_iter().map(CutProxy::start).collect(),
                stopped: AtomicBool::new(false),
                past_logs: Mutex::default(),
            })
            .collect(),
    );
    for node in nodes.iter() {
        // A node that cannot start is often NATS's doing: say what the servers logged.
        start_node(&config, node).map_err(|e| {
            let logs: String = (0..3)
                .map(|i| format!("--- nats n{i}\n{}", nats.log(i)))
                .collect();
            format!("{e}\nThe NATS servers logged:\n{logs}")
        })?;
    }
    let shared = Arc::new(Shared::new(config.conversations));
    let ids = workers::create_conversations(&nodes, config.conversations)?;
    let handles = workers::start(&nodes, &shared, &ids, config.pace, lease);
    let mut faults = Vec::new();
    let outcome = (|| -> Result<(), String> {
        wait_progress(&shared, Instant::now(), RECOVERY)
            .ok_or("the conversations made no progress before the first fault")?;
        let total = config.faults_per_kind * FaultKind::ALL.len();
        for round in 0..config.faults_per_kind {
            for (k, kind) in FaultKind::ALL.iter().enumerate() {
                let number = round * FaultKind::ALL.len() + k;
                let fault = inject(&config, &nodes, &mut nats, &shared, *kind, number, total)?;
                faults.push(fault);
            }
        }
        Ok(())
    })();
    shared.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        let _ = handle.join();
    }
    let report = outcome.and_then(|()| check::check(&nodes, &shared, &ids, &faults));
    let keep_logs = std::env::var_os("ROUNDTABLE_NEMESIS_LOGS").map(PathBuf::from);
    for node in nodes.iter() {
        resume(node);
        kill_node(node);
        if let Some(dir) = &keep_logs {
            let _ = std::fs::create_dir_all(dir);
            let log = node.past_logs.lock().unwrap();
            let _ = std::fs::write(dir.join(format!("node-{}.log", node.name)), &*log);
        }
    }
    if let Some(dir) = &keep_logs {
        for i in 0..3 {
            let _ = std::fs::write(dir.join(format!("nats-n{i}.log")), nats.log(i));
        }
    }
    drop(nats);
    report
}

/// Starts (or restarts) `node` on its instance directory.
fn start_node(config: &Config, node: &Node) -> Result<(), String> {
    let urls: Vec<String> = node.proxies.iter().map(CutProxy::url).collect();
    let lease = config.lease_seconds.to_string();
    let mut args = vec![
        "--cluster",
        &urls.join(","),
        "--node-name",
        &node.name,
        "--lease-time",
        &lease,
        // Checks of each node's copy of the list (`registry/reconcile.rs`) come more often
        // than the default 30 s, so the final check waits less for one.
        "--reconcile-time",
        "10",
    ]
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<String>>();
    args.extend(config.node_args.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cmd = server::serve_command(&config.bin, node.dir.path(), &args);
    let child = ChildServer::spawn(
        cmd,
        &format!("node {}", node.name),
        // A restarted node reads the registry before it listens: up to five bounded attempts
        // while the NATS cluster settles after a fault.
        Duration::from_secs(150),
        Stderr {
            keep: Some(20_000),
            echo: std::env::var_os("ROUNDTABLE_TEST_LOG").is_some(),
        },
    )?;
    node.port.store(child.port, Ordering::SeqCst);
    *node.server.lock().unwrap() = Some(child);
    Ok(())
}

/// `kill -9` of `node`; workers see its port as 0 until it is started again.
fn kill_node(node: &Node) {
    node.port.store(0, Ordering::SeqCst);
    if let Some(mut server) = node.server.lock().unwrap().take() {
        server.kill();
        let mut past = node.past_logs.lock().unwrap();
        past.push_str(&server.log());
        past.push_str("\n--- killed ---\n");
    }
}

/// Sends `signal` to `node`'s process.
fn signal(node: &Node, signal: libc::c_int) {
    if let Some(server) = node.server.lock().unwrap().as_ref() {
        // SAFETY: kill(2) on our own child, not reaped (it is reaped only by `kill_node`).
        unsafe {
            libc::kill(server.pid() as libc::pid_t, signal);
        }
    }
}

/// `SIGCONT` if `node` is stopped.
fn resume(node: &Node) {
    if node.stopped.swap(false, Ordering::SeqCst) {
        signal(node, libc::SIGCONT);
    }
}

/// The running, not stopped, node that owns the most conversations (by its `/metrics`),
/// excluding `except`; ties go to the first.
fn owner(nodes: &[Node], except: Option<usize>) -> usize {
    let mut best = (None, -1.0);
    for (i, node) in nodes.iter().enumerate() {
        let port = node.port.load(Ordering::SeqCst);
        if Some(i) == except || port == 0 || node.stopped.load(Ordering::SeqCst) {
            continue;
        }
        let owned = server::http_get(port, "/metrics", Duration::from_secs(5))
            .ok()
            .and_then(|(_, body)| {
                server::metric_value(
                    &body,
                    &format!(
                        "roundtable_cluster_owned_conversations{{node=\"{}\"}}",
                        node.name
                    ),
                )
            })
            .unwrap_or(0.0);
        if owned > best.1 {
            best = (Some(i), owned);
        }
    }
    best.0.unwrap_or(0)
}

/// Waits until every conversation has had a turn acknowledged after `since`; when.
fn wait_progress(shared: &Shared, since: Instant, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    shared.wait_all_acked_after(since, deadline)
}

/// Waits until every conversation moved on after `since`, and at least `at_least`.
fn hold(shared: &Shared, since: Instant, at_least: Duration) {
    let _ = wait_progress(shared, since, RECOVERY);
    let until = since + at_least;
    let now = Instant::now();
    if until > now {
        // The fault's own length (a stop must outlast the lease): a schedule, not a wait for
        // an event.
        std::thread::sleep(until - now);
    }
}

/// Injects one fault of `kind`, undoes it, and waits for recovery.
fn inject(
    config: &Config,
    nodes: &[Node],
    nats: &mut NatsCluster,
    shared: &Shared,
    kind: FaultKind,
    number: usize,
    total: usize,
) -> Result<Fault, String> {
    let lease = Duration::from_secs_f64(config.lease_seconds);
    let started = Instant::now();
    let what;
    match kind {
        FaultKind::Kill9 => {
            let i = owner(nodes, None);
            what = format!("kill -9 of node {}", nodes[i].name);
            announce(config, number, total, &what);
            kill_node(&nodes[i]);
            hold(shared, started, Duration::ZERO);
            start_node(config, &nodes[i])?;
        }
        FaultKind::Stop => {
            let i = owner(nodes, None);
            what = format!("SIGSTOP of node {}", nodes[i].name);
            announce(config, number, total, &what);
            nodes[i].stopped.store(true, Ordering::SeqCst);
            signal(&nodes[i], libc::SIGSTOP);
            hold(shared, started, lease.mul_f64(1.5));
            resume(&nodes[i]);
        }
        FaultKind::NatsRestart => {
            let j = number % 3;
            what = format!("restart of NATS server n{j}");
            announce(config, number, total, &what);
            nats.kill(j);
            hold(shared, started, lease);
            nats.restart(j);
        }
        FaultKind::CutOff => {
            let i = owner(nodes, None);
            what = format!("node {} cut off from NATS", nodes[i].name);
            announce(config, number, total, &what);
            nodes[i].proxies.iter().for_each(CutProxy::cut);
            hold(shared, started, lease.mul_f64(1.5));
            nodes[i].proxies.iter().for_each(CutProxy::heal);
        }
        FaultKind::Overlap if number.is_multiple_of(2) => {
            let killed = owner(nodes, None);
            let cut = (killed + 1) % 3;
            what = format!(
                "node {} cut off while node {} is killed",
                nodes[cut].name, nodes[killed].name
            );
            announce(config, number, total, &what);
            nodes[cut].proxies.iter().for_each(CutProxy::cut);
            kill_node(&nodes[killed]);
            hold(shared, started, lease.mul_f64(1.5));
            start_node(config, &nodes[killed])?;
            nodes[cut].proxies.iter().for_each(CutProxy::heal);
        }
        FaultKind::Overlap => {
            let stopped = owner(nodes, None);
            let j = number % 3;
            what = format!(
                "node {} stopped while NATS server n{j} restarts",
                nodes[stopped].name
            );
            announce(config, number, total, &what);
            nodes[stopped].stopped.store(true, Ordering::SeqCst);
            signal(&nodes[stopped], libc::SIGSTOP);
            nats.kill(j);
            hold(shared, started, lease.mul_f64(1.5));
            nats.restart(j);
            resume(&nodes[stopped]);
        }
    }
    let healed = Instant::now();
    let recovered = wait_progress(shared, healed, RECOVERY);
    Ok(Fault {
        kind,
        what,
        started,
        recovered,
    })
}

/// Tells the caller a fault begins.
fn announce(config: &Config, number: usize, total: usize, what: &str) {
    if let Some(on_fault) = &config.on_fault {
        on_fault(number + 1, total, what);
    }
}
