//! `cluster`: three Roundtable nodes on one `nats-server -js` (Debian's package) on loopback.
//!
//! - Fan-out of one conversation with N clients all on the node that owns it, then with the
//!   same N clients spread over the three nodes (two thirds of them relayed through NATS to
//!   the owner's virtual connections), the submitter on a relayed node. Same measurement as
//!   `fanout` (window 1, then `window` turns in flight), same run, so the ratio spread / one
//!   node is the cost of the relay. CPU: every node process's user + system time over the
//!   loaded phase per delivered frame, one node against spread, and from the two the CPU of
//!   one relayed delivery against a local one (spread, a third of the deliveries are local).
//! - Failover: a client on node b joined to a conversation node a owns; `kill -9` of a; the
//!   time until b has taken the conversation over (its log says it rejoined the client), and
//!   the first turn after it. Reports the lease time it ran with.
//!
//! The baselines have no cluster: the figures are Roundtable's own, one layout against the
//! other.

use std::time::{Duration, Instant};

use crate::client::Client;
use crate::fleet::{self, Mode};
use crate::report::{self, Figure, ScenarioReport};
use crate::scenarios::{run_tag, Ctx};
use crate::server::ServerProcess;
use crate::support::nats::NatsServer;

/// Lease time the nodes run with (seconds): the failover figure scales with it.
const LEASE_SECONDS: &str = "2";

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let mut report = ScenarioReport::new("cluster");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it starts its own NATS server and three nodes (not with --url)".into());
        return Ok(report);
    }
    let s = &ctx.sizes;
    let clients = ctx.fit_clients(s.fanout_clients.max(3), &mut report) / 3 * 3;
    report.param("nodes", 3);
    report.param("clients", clients);
    report.param("latency_turns", s.latency_turns);
    report.param("turns", s.turns);
    report.param("window", s.window);
    report.param("lease_time_s", LEASE_SECONDS);
    if !crate::support::nats::available() {
        return Err("the cluster scenario needs nats-server: apt install nats-server".into());
    }
    let nats = NatsServer::start();
    let nodes = start_nodes(ctx, &nats, &["a", "b", "c"])?;
    let one = fanout(ctx, &nodes, clients, false).await;
    let spread = fanout(ctx, &nodes, clients, true).await;
    for node in nodes {
        node.stop();
    }
    let (one, one_notes) = one?;
    let (spread, spread_notes) = spread?;
    report.notes.extend(one_notes);
    report.notes.extend(spread_notes);
    let rate = |figures: &[Figure]| {
        figures
            .iter()
            .find(|f| f.name == "delivered_msgs_per_s")
            .map(|f| f.value)
    };
    if let (Some(a), Some(b)) = (rate(&one), rate(&spread)) {
        report.figures.push(Figure::new(
            "spread_vs_one_node_delivered",
            b / a.max(1e-9),
            "x",
        ));
    }
    // Spread, a third of the deliveries are local (on a, the owner) and two thirds relayed:
    // what is left of the spread CPU per delivery after the local third, per relayed one.
    let cpu = |figures: &[Figure]| {
        figures
            .iter()
            .find(|f| f.name == "cpu_us_per_delivery")
            .map(|f| f.value)
    };
    if let (Some(local), Some(spread)) = (cpu(&one), cpu(&spread)) {
        let relayed = (spread - local / 3.0) / (2.0 / 3.0);
        report
            .figures
            .push(Figure::new("relayed_cpu_us_per_delivery", relayed, "us"));
        report.figures.push(Figure::new(
            "relayed_vs_local_cpu_per_delivery",
            relayed / local.max(1e-9),
            "x",
        ));
    }
    for mut f in one {
        f.name = format!("one_node_{}", f.name);
        report.figures.push(f);
    }
    for mut f in spread {
        f.name = format!("spread_{}", f.name);
        report.figures.push(f);
    }
    let failover = failover(ctx, &nats).await?;
    report.figures.extend(failover);
    report.notes.push(
        "no baseline: the baselines have no cluster; spread is compared with one node".into(),
    );
    Ok(report)
}

/// Starts one node per name on `nats`.
fn start_nodes(ctx: &Ctx, nats: &NatsServer, names: &[&str]) -> Result<Vec<Node>, String> {
    names
        .iter()
        .map(|name| {
            let dir = ctx.tempdir()?;
            let url = nats.url();
            let process = ServerProcess::roundtable(
                &ctx.launch,
                dir.path(),
                &[
                    "--cluster",
                    &url,
                    "--node-name",
                    name,
                    "--lease-time",
                    LEASE_SECONDS,
                ],
            )?;
            Ok(Node { process, _dir: dir })
        })
        .collect()
}

/// A running node and its instance directory.
struct Node {
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Node {
    fn url(&self) -> String {
        self.process.url()
    }

    fn stop(self) {
        self.process.stop();
    }
}

/// One fan-out measurement: `clients` joined to a fresh conversation owned by node a, all on
/// a (`spread` false) or a third on each node with the submitter on b (`spread` true).
async fn fanout(
    ctx: &Ctx,
    nodes: &[Node],
    clients: usize,
    spread: bool,
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let s = &ctx.sizes;
    let label = if spread { "spread" } else { "one node" };
    let mut control = Client::connect(&nodes[0].url()).await?;
    let conversation = control
        .create_conversation(&format!(
            "{}-cluster-{}",
            run_tag(),
            clients + spread as usize
        ))
        .await?;
    // The first join (on a) takes the lease: a owns it.
    let mut owner = Client::connect(&nodes[0].url()).await?;
    owner.join(&conversation, |_| {}).await?;
    let (stats, mut done) = ctx.stats(s.latency_turns + s.turns);
    let mut members = Vec::new();
    let per_node = if spread { clients / 3 } else { clients };
    let used: &[Node] = if spread { nodes } else { &nodes[..1] };
    // The submitter is the first member: on b when spread.
    let order: Vec<&Node> = if spread {
        vec![&used[1], &used[0], &used[2]]
    } else {
        vec![&used[0]]
    };
    let started = Instant::now();
    for node in order {
        let plan: Vec<_> = (0..per_node)
            .map(|_| (conversation.clone(), Mode::Reading))
            .collect();
        let joined = fleet::join_all(
            &node.url(),
            &plan,
            &stats,
            s.join_concurrency.min(fleet::SAME_CONVERSATION_JOINS),
            true,
            &format!("cluster {label}: joining"),
        )
        .await?;
        members.extend(joined.members);
    }
    let join_s = started.elapsed().as_secs_f64();
    let audience = members.len() as u32;
    let submitters = [members[0].cmds.clone()];
    let deadline = ctx.deadline();
    let (unloaded, cpu_before, loaded) = fleet::unloaded_then_loaded(
        &stats,
        &mut done,
        &submitters,
        (s.latency_turns, s.turns, s.window),
        audience,
        deadline,
        &format!("cluster {label}"),
        || nodes_cpu_seconds(nodes),
    )
    .await;
    let cpu = nodes_cpu_seconds(nodes)
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let delivery = stats.delivery.lock().expect("histogram lock").clone();
    fleet::stop_all(members).await;
    owner.close().await;
    control.close().await;
    unloaded.check("window-1 phase")?;
    loaded.check("loaded phase")?;
    let mut notes = Vec::new();
    fleet::run_notes(
        &format!("{label}: window-1 phase"),
        &unloaded,
        &stats,
        &mut notes,
    );
    fleet::run_notes(
        &format!("{label}: loaded phase"),
        &loaded,
        &stats,
        &mut notes,
    );
    let secs = loaded.elapsed.as_secs_f64().max(1e-9);
    let mut figures = vec![
        Figure::new("delivered_msgs_per_s", loaded.frames as f64 / secs, "msg/s"),
        Figure::new("turns_per_s", loaded.completed as f64 / secs, "turn/s"),
        Figure::new("join_all_s", join_s, "s"),
    ];
    if let Some(cpu) = cpu {
        figures.push(Figure::new(
            "cpu_us_per_delivery",
            cpu * 1e6 / loaded.frames.max(1) as f64,
            "us",
        ));
    }
    figures.extend(report::percentiles(
        "last_delivery_unloaded",
        &unloaded.turn_latency,
    ));
    figures.extend(report::percentiles("delivery_loaded", &delivery));
    Ok((figures, notes))
}

/// CPU time (user + system) every node has used so far, together, in seconds.
fn nodes_cpu_seconds(nodes: &[Node]) -> Option<f64> {
    nodes
        .iter()
        .map(|n| crate::server::cpu_seconds(n.process.pid()))
        .sum()
}

/// Kill -9 of an owner with a client joined through another node: seconds until that node
/// rejoined the client (owns the conversation), and the first turn after it.
async fn failover(ctx: &Ctx, nats: &NatsServer) -> Result<Vec<Figure>, String> {
    let mut nodes = start_nodes(ctx, nats, &["fa", "fb"])?;
    let b = nodes.pop().expect("two nodes");
    let a = nodes.pop().expect("two nodes");
    let mut on_a = Client::connect(&a.url()).await?;
    let id = on_a
        .create_conversation(&format!("{}-failover", run_tag()))
        .await?;
    on_a.join(&id, |_| {}).await?;
    let mut on_b = Client::connect(&b.url()).await?;
    on_b.join(&id, |_| {}).await?;
    crate::scenarios::crash::run_turn(&mut on_b, &id, "before").await?;
    let killed = Instant::now();
    a.process.kill_9();
    let wanted = format!("rejoined conversation {id} on this node");
    let limit = killed + Duration::from_secs(60);
    while !b.process.log_tail(200).contains(&wanted) {
        if Instant::now() > limit {
            return Err(format!(
                "node fb did not take the conversation over within 60 s; its log:\n{}",
                b.process.log_tail(30)
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took_over = killed.elapsed();
    let turn = Instant::now();
    crate::scenarios::crash::run_turn(&mut on_b, &id, "after").await?;
    let first_turn = turn.elapsed();
    on_b.close().await;
    b.stop();
    Ok(vec![
        Figure::new("failover_s", took_over.as_secs_f64(), "s"),
        Figure::new(
            "first_turn_after_failover_ms",
            first_turn.as_secs_f64() * 1000.0,
            "ms",
        ),
    ])
}
