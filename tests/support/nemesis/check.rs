//! The nemesis's checker: once every fault is undone it reads each conversation's whole
//! history through every node and the registry from every node, and counts what was promised
//! and not kept.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::wire::{join_args, whole_history, Wire};
use super::workers::{RegistryOp, Shared};
use super::{Fault, FaultKind, Node};

/// What a run found. Every count but the acknowledgements and the stalls must be 0.
#[derive(Debug, Default)]
pub struct Report {
    /// Turns acknowledged to a client (`commandComplete` without an error).
    pub turns_acknowledged: usize,
    /// Acknowledged turns missing from the history (user request or result).
    pub turns_lost: usize,
    /// Requests whose user entry is in a history more than once.
    pub turns_duplicated: usize,
    /// Histories that differ between nodes, plus clients that saw completions in an order
    /// the history does not have.
    pub order_mismatches: usize,
    /// Names held by two conversations at the end.
    pub names_held_twice: usize,
    /// Acknowledged deletes whose conversation is listed or joinable at the end.
    pub deletes_resurrected: usize,
    /// Registry changes acknowledged.
    pub registry_acknowledged: usize,
    /// Acknowledged creates or renames not in the final list as acknowledged.
    pub registry_lost: usize,
    /// Changes the nodes' checks of their copies made (`registryRepairs`, all nodes): each
    /// one a change that node's watch had not delivered, so its lists lacked it until then.
    /// Not a loss (the list is read after a check), but a window in which read-your-writes
    /// did not hold on that node.
    pub copy_repairs: u64,
    /// Per kind: faults injected, faults not recovered within the deadline, the longest time
    /// any conversation went without an acknowledged turn under one of them.
    pub faults: Vec<(FaultKind, usize, usize, Duration)>,
    /// Every fault as it happened.
    pub timeline: Vec<Fault>,
    /// What was wrong, one line each (at most 50).
    pub problems: Vec<String>,
}

impl Report {
    /// Whether every loss column is zero and every fault recovered.
    pub fn clean(&self) -> bool {
        self.turns_lost == 0
            && self.turns_duplicated == 0
            && self.order_mismatches == 0
            && self.names_held_twice == 0
            && self.deletes_resurrected == 0
            && self.registry_lost == 0
            && self.faults.iter().all(|f| f.2 == 0)
    }

    /// The report as lines of text: the loss columns, then one line per kind of fault.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "turns acknowledged {}, lost {}, duplicated {}; order mismatches {}; registry changes acknowledged {}, lost {}; names held twice {}; deletes resurrected {}; copies repaired {}\n",
            self.turns_acknowledged,
            self.turns_lost,
            self.turns_duplicated,
            self.order_mismatches,
            self.registry_acknowledged,
            self.registry_lost,
            self.names_held_twice,
            self.deletes_resurrected,
            self.copy_repairs
        );
        for (kind, n, unrecovered, stall) in &self.faults {
            out.push_str(&format!(
                "{:<36} {n:>3} faults, {unrecovered} not recovered, longest stall {:.1} s\n",
                kind.name(),
                stall.as_secs_f64()
            ));
        }
        for fault in &self.timeline {
            out.push_str(&format!(
                "fault: {} ({}): {}\n",
                fault.what,
                fault.kind.name(),
                match fault.recovered {
                    Some(t) => format!(
                        "every conversation moved on {:.1} s after it began",
                        (t - fault.started).as_secs_f64()
                    ),
                    None => "NOT RECOVERED".into(),
                }
            ));
        }
        for problem in &self.problems {
            out.push_str(&format!("problem: {problem}\n"));
        }
        out
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < 50 {
            self.problems.push(what);
        }
    }
}

/// How long the final reads may take.
const READS: Duration = Duration::from_secs(120);

/// Checks the run's outcome.
pub fn check(
    nodes: &[Node],
    shared: &Shared,
    ids: &[String],
    faults: &[Fault],
) -> Result<Report, String> {
    let mut report = Report {
        timeline: faults.to_vec(),
        ..Report::default()
    };
    let deadline = Instant::now() + READS;
    // A node resumed or healed by the last fault may still be reconnecting to NATS, and then
    // answers lists from its copy at once, possibly stale (as documented): the reads wait
    // until every node says NATS is connected.
    let health = |node: &Node| {
        let port = node.port.load(Ordering::SeqCst);
        crate::support::server::http_get(port, "/health", Duration::from_secs(5))
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .map(|health| health["cluster"].clone())
            .unwrap_or_default()
    };
    let mut checks_before = Vec::new();
    for node in nodes {
        while health(node)["nats"] != "connected" {
            if Instant::now() > deadline {
                return Err(format!("node {} never reconnected to NATS", node.name));
            }
            // The connection's state has no event to wait on from outside the process.
            std::thread::sleep(Duration::from_millis(200));
        }
        checks_before.push(health(node)["registryReconciles"].as_u64().unwrap_or(0));
    }
    // The lists are compared once every node has checked its copy against the bucket after
    // the last fault (`registry/reconcile.rs`): the watch alone has been seen to miss a
    // change; what the checks had to repair is counted.
    for (node, before) in nodes.iter().zip(checks_before) {
        while health(node)["registryReconciles"].as_u64().unwrap_or(0) <= before {
            if Instant::now() > deadline {
                return Err(format!(
                    "node {} never checked its copy of the list",
                    node.name
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let mut wires = nodes
        .iter()
        .map(|n| {
            Wire::connect(n.port.load(Ordering::SeqCst), Duration::from_secs(10))
                .map_err(|e| format!("node {}: {e:?}", n.name))
        })
        .collect::<Result<Vec<Wire>, String>>()?;
    let turns = shared.turns();
    report.turns_acknowledged = turns.len();
    let seen = std::mem::take(&mut *shared.seen.lock().unwrap());
    for (k, id) in ids.iter().enumerate() {
        // Every reader joins before any reads, so that a join's own traces (if any) are in
        // every history read.
        for (wire, node) in wires.iter_mut().zip(nodes) {
            until_available(wire, deadline, |w| {
                w.agent("joinConversation", join_args(id), deadline)
            })
            .map_err(|e| format!("node {} joins {id}: {e:?}", node.name))?;
        }
        let mut histories = Vec::new();
        for (wire, node) in wires.iter_mut().zip(nodes) {
            histories.push(
                whole_history(wire, id, deadline)
                    .map_err(|e| format!("node {} history of {id}: {e:?}", node.name))?,
            );
        }
        for (n, other) in histories.iter().enumerate().skip(1) {
            if *other != histories[0] {
                report.order_mismatches += 1;
                report.problem(format!(
                    "conversation {k}: node {} reads a history of {} entries, node {} one of {}",
                    nodes[0].name,
                    histories[0].len(),
                    nodes[n].name,
                    other.len()
                ));
            }
        }
        if let Some(dir) = std::env::var_os("ROUNDTABLE_NEMESIS_LOGS") {
            let dir = std::path::PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            let lines: Vec<String> = histories[0].iter().map(Value::to_string).collect();
            let _ = std::fs::write(
                dir.join(format!("history-{k}-{id}.jsonl")),
                lines.join("\n"),
            );
            let acked: Vec<String> = turns
                .iter()
                .filter(|t| t.conversation == k)
                .map(|t| format!("{} {} {}", utc_time(t.wall), t.request_id, t.text))
                .collect();
            let _ = std::fs::write(dir.join(format!("acked-{k}.txt")), acked.join("\n"));
        }
        check_turns(&mut report, k, &histories[0], &turns, &seen);
    }
    check_registry(&mut report, &mut wires, nodes, shared, deadline)?;
    // Counted by each node's current process (a node killed during the run lost its count).
    report.copy_repairs = nodes
        .iter()
        .map(|node| health(node)["registryRepairs"].as_u64().unwrap_or(0))
        .sum();
    stalls(&mut report, shared, faults);
    Ok(report)
}

/// `call` once the node answers it: a node whose copy of the list is still catching up after
/// the last fault answers `Cluster unavailable` meanwhile (retried until `deadline`, each
/// refusal is retried: after the node's own 10 s catch-up bound, or 200 ms after one that
/// came at once).
fn until_available(
    wire: &mut Wire,
    deadline: Instant,
    mut call: impl FnMut(&mut Wire) -> Result<Value, super::wire::Failure>,
) -> Result<Value, super::wire::Failure> {
    loop {
        match call(wire) {
            Err(super::wire::Failure::Refused(e))
                if e.starts_with("Cluster unavailable") && Instant::now() < deadline =>
            {
                // A refusal that came at once (NATS not reachable yet): ask again shortly.
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Lost, duplicated and out-of-order turns of conversation `k`.
fn check_turns(
    report: &mut Report,
    k: usize,
    history: &[Value],
    turns: &[super::workers::AckedTurn],
    seen: &[(usize, Vec<String>)],
) {
    let mut commands: HashMap<&str, usize> = HashMap::new();
    let mut where_: HashMap<&str, Vec<String>> = HashMap::new();
    let mut position: HashMap<&str, usize> = HashMap::new();
    let mut results: HashSet<&str> = HashSet::new();
    for (i, entry) in history.iter().enumerate() {
        let request = entry["requestId"]["requestId"].as_str().unwrap_or_default();
        match entry["type"].as_str() {
            Some("user-request") => {
                let command = entry["command"].as_str().unwrap_or_default();
                *commands.entry(command).or_default() += 1;
                where_
                    .entry(command)
                    .or_default()
                    .push(format!("seq {} {request}", entry["seq"]));
                position.entry(request).or_insert(i);
            }
            Some("command-result") => {
                results.insert(request);
            }
            _ => {}
        }
    }
    for (command, n) in &commands {
        if *n > 1 {
            report.turns_duplicated += 1;
            report.problem(format!(
                "conversation {k}: {command:?} is in the history {n} times"
            ));
        }
    }
    for turn in turns.iter().filter(|t| t.conversation == k) {
        let there = commands.contains_key(turn.text.as_str());
        if !there || !results.contains(turn.request_id.as_str()) {
            report.turns_lost += 1;
            report.problem(format!(
                "conversation {k}: acknowledged {:?} ({}) is {}",
                turn.text,
                turn.request_id,
                if there {
                    "without its result"
                } else {
                    "missing"
                }
            ));
        }
    }
    for (c, order) in seen.iter().filter(|(c, _)| *c == k) {
        let positions: Vec<usize> = order
            .iter()
            .filter_map(|r| position.get(r.as_str()).copied())
            .collect();
        if positions.windows(2).any(|w| w[0] >= w[1]) {
            report.order_mismatches += 1;
            report.problem(format!(
                "conversation {c}: a client saw completions in an order the history does not have"
            ));
        }
    }
}

/// The registry as every node lists it, against what was acknowledged.
fn check_registry(
    report: &mut Report,
    wires: &mut [Wire],
    nodes: &[Node],
    shared: &Shared,
    deadline: Instant,
) -> Result<(), String> {
    let ops = shared.registry.lock().unwrap().clone();
    // The lists every node answers; the nodes' copies follow the bucket, so they agree once
    // each has caught up (a list waits for that).
    let mut lists = Vec::new();
    for (wire, node) in wires.iter_mut().zip(nodes) {
        let list = until_available(wire, deadline, |w| {
            w.agent("listConversations", json!([null]), deadline)
        })
        .map_err(|e| format!("node {} lists: {e:?}", node.name))?;
        let entries: Vec<(String, String)> = list
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                (
                    c["conversationId"].as_str().unwrap_or_default().to_string(),
                    c["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        lists.push(entries);
    }
    for (n, list) in lists.iter().enumerate().skip(1) {
        if *list != lists[0] {
            report.order_mismatches += 1;
            // Where they part, and whether they hold the same entries in another order.
            let at = list
                .iter()
                .zip(&lists[0])
                .position(|(a, b)| a != b)
                .unwrap_or(list.len().min(lists[0].len()));
            let mut sorted = (lists[0].clone(), list.clone());
            sorted.0.sort();
            sorted.1.sort();
            report.problem(format!(
                "node {} lists {} conversations, node {} {}; they part at {at}: {:?} against {:?}; {}",
                nodes[0].name,
                lists[0].len(),
                nodes[n].name,
                list.len(),
                lists[0].get(at),
                list.get(at),
                if sorted.0 == sorted.1 {
                    "the same entries in another order"
                } else {
                    "different entries"
                }
            ));
        }
    }
    let listed: HashMap<&str, &str> = lists[0]
        .iter()
        .map(|(id, name)| (id.as_str(), name.as_str()))
        .collect();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (_, name) in &lists[0] {
        let key = name
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        *names.entry(key).or_default() += 1;
    }
    for (name, n) in names {
        if n > 1 {
            report.names_held_twice += 1;
            report.problem(format!("the name {name:?} is held by {n} conversations"));
        }
    }
    // The last acknowledged name per id, unless an unanswered change came after it.
    let mut expected: HashMap<&str, Option<&str>> = HashMap::new();
    let mut deleted: HashSet<&str> = HashSet::new();
    let mut uncertain: HashSet<&str> = HashSet::new();
    for op in &ops {
        match op {
            RegistryOp::Created { id, name } | RegistryOp::Renamed { id, name } => {
                report.registry_acknowledged += 1;
                expected.insert(id, Some(name));
            }
            RegistryOp::MaybeRenamed { id, .. } | RegistryOp::MaybeDeleted { id } => {
                uncertain.insert(id);
            }
            RegistryOp::Deleted { id } => {
                report.registry_acknowledged += 1;
                deleted.insert(id);
            }
            RegistryOp::MaybeCreated { .. } => {}
        }
    }
    for id in &deleted {
        if listed.contains_key(id) {
            report.deletes_resurrected += 1;
            report.problem(format!("deleted conversation {id} is listed again"));
        } else if wires[0]
            .agent("joinConversation", join_args(id), deadline)
            .is_ok()
        {
            report.deletes_resurrected += 1;
            report.problem(format!("deleted conversation {id} can be joined again"));
        }
    }
    for (id, name) in expected {
        if deleted.contains(id) || uncertain.contains(id) {
            continue;
        }
        match listed.get(id) {
            None => {
                report.registry_lost += 1;
                report.problem(format!(
                    "acknowledged conversation {id} ({name:?}) is not listed"
                ));
            }
            Some(listed_name) if Some(*listed_name) != name => {
                report.registry_lost += 1;
                report.problem(format!(
                    "conversation {id} is listed as {listed_name:?}, acknowledged as {name:?}"
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Per kind of fault: how many, how many did not recover, and the longest time a conversation
/// went without an acknowledged turn from a fault's start to its recovery.
fn stalls(report: &mut Report, shared: &Shared, faults: &[Fault]) {
    let turns = shared.turns();
    let conversations = turns
        .iter()
        .map(|t| t.conversation)
        .max()
        .map_or(0, |m| m + 1);
    let mut acks: Vec<Vec<Instant>> = vec![Vec::new(); conversations];
    for turn in &turns {
        acks[turn.conversation].push(turn.at);
    }
    for times in &mut acks {
        times.sort();
    }
    for kind in FaultKind::ALL {
        let of_kind: Vec<&Fault> = faults.iter().filter(|f| f.kind == kind).collect();
        let unrecovered = of_kind.iter().filter(|f| f.recovered.is_none()).count();
        let mut longest = Duration::ZERO;
        for fault in &of_kind {
            let end = fault.recovered.unwrap_or_else(Instant::now);
            for times in &acks {
                longest = longest.max(longest_gap(times, fault.started, end));
            }
        }
        report
            .faults
            .push((kind, of_kind.len(), unrecovered, longest));
    }
}

/// The longest stretch without an acknowledgement among `times` (sorted) that overlaps
/// `[start, end]`.
fn longest_gap(times: &[Instant], start: Instant, end: Instant) -> Duration {
    let before = times
        .iter()
        .rev()
        .find(|t| **t <= start)
        .copied()
        .unwrap_or(start);
    let mut previous = before;
    let mut longest = Duration::ZERO;
    for t in times.iter().filter(|t| **t > start) {
        longest = longest.max(*t - previous);
        previous = *t;
        if *t >= end {
            return longest;
        }
    }
    longest.max(end.saturating_duration_since(previous))
}

/// `hh:mm:ss.mmm` UTC of `at`, to read an acknowledgement beside the nodes' logs.
fn utc_time(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_millis()
    )
}
