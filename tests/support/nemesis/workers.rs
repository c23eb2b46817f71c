//! The nemesis's clients. One turn worker per (conversation, node) submits turns with unique
//! texts and notes each one acknowledged (`commandComplete` without an error) and every
//! completion it saw, in order; one registry worker per node races the others to create
//! `race-<i>`, renames what it won and deletes every other one, noting what was acknowledged
//! and what is unknown (no answer: it may or may not have happened). Every failure (an error,
//! a closed socket, a silent node) drops the socket; the worker connects again, to the same
//! node, when that node is up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use super::wire::{join_args, Failure, Wire};
use super::Node;
use crate::support::protocol;

/// A turn acknowledged to a client.
#[derive(Debug, Clone)]
pub struct AckedTurn {
    /// Index of its conversation.
    pub conversation: usize,
    /// The unique text it was submitted with.
    pub text: String,
    /// The requestId the server gave it.
    pub request_id: String,
    /// When the acknowledgement arrived.
    pub at: Instant,
    /// The same, by the wall clock (what the kept logs show it beside the nodes' logs).
    pub wall: SystemTime,
}

/// A registry change as a client learnt its outcome.
#[derive(Debug, Clone)]
pub enum RegistryOp {
    /// Created (acknowledged) with this name.
    Created { id: String, name: String },
    /// A create that got no answer: it may exist.
    MaybeCreated { name: String },
    /// Renamed (acknowledged).
    Renamed { id: String, name: String },
    /// A rename that got no answer.
    MaybeRenamed { id: String, name: String },
    /// Deleted (acknowledged).
    Deleted { id: String },
    /// A delete that got no answer.
    MaybeDeleted { id: String },
}

/// What the workers share with the fault driver and the checker.
pub struct Shared {
    /// Set at the end: the workers finish their current request and stop.
    pub stop: AtomicBool,
    /// Every acknowledged turn, and per worker the time of its last acknowledgement.
    progress: Mutex<Progress>,
    /// Signalled on every acknowledgement.
    acked: Condvar,
    /// Completions each turn worker saw, in order: (conversation, requestIds).
    pub seen: Mutex<Vec<(usize, Vec<String>)>>,
    /// Registry outcomes, in the order they were learnt.
    pub registry: Mutex<Vec<RegistryOp>>,
}

/// Acknowledgements so far.
#[derive(Default)]
pub struct Progress {
    /// Every acknowledged turn.
    pub turns: Vec<AckedTurn>,
    /// Per conversation, the time of its latest acknowledgement.
    latest: Vec<Option<Instant>>,
}

impl Shared {
    /// Nothing acknowledged yet, `conversations` conversations.
    pub fn new(conversations: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            progress: Mutex::new(Progress {
                turns: Vec::new(),
                latest: vec![None; conversations],
            }),
            acked: Condvar::new(),
            seen: Mutex::new(Vec::new()),
            registry: Mutex::new(Vec::new()),
        }
    }

    /// Every acknowledged turn so far.
    pub fn turns(&self) -> Vec<AckedTurn> {
        self.progress.lock().unwrap().turns.clone()
    }

    fn ack(&self, turn: AckedTurn) {
        let mut progress = self.progress.lock().unwrap();
        progress.latest[turn.conversation] = Some(turn.at);
        progress.turns.push(turn);
        self.acked.notify_all();
    }

    /// Waits until every conversation had an acknowledgement after `since` (then: when the
    /// last of them came), or `deadline`.
    pub fn wait_all_acked_after(&self, since: Instant, deadline: Instant) -> Option<Instant> {
        let mut progress = self.progress.lock().unwrap();
        loop {
            if progress.latest.iter().all(|t| t.is_some_and(|t| t > since)) {
                return progress.latest.iter().flatten().max().copied();
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            progress = self.acked.wait_timeout(progress, deadline - now).unwrap().0;
        }
    }
}

/// Creates the conversations `nemesis-<k>`, each from node `k % 3` (so that their first
/// joins, and ownership, spread over the nodes); their ids.
pub fn create_conversations(nodes: &[Node], n: usize) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    (0..n)
        .map(|k| {
            let port = nodes[k % nodes.len()].port.load(Ordering::SeqCst);
            let mut wire = Wire::connect(port, Duration::from_secs(10))
                .map_err(|e| format!("connect: {e:?}"))?;
            let info = wire
                .agent(
                    "createConversation",
                    json!([format!("nemesis-{k}"), null]),
                    deadline,
                )
                .map_err(|e| format!("create: {e:?}"))?;
            Ok(info["conversationId"]
                .as_str()
                .unwrap_or_default()
                .to_string())
        })
        .collect()
}

/// Starts every worker.
pub fn start(
    nodes: &Arc<Vec<Node>>,
    shared: &Arc<Shared>,
    ids: &[String],
    pace: Duration,
    lease: Duration,
) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        for n in 0..nodes.len() {
            // The node that created it joins first (it becomes the owner).
            let n = (k + n) % nodes.len();
            let (nodes, shared, id) = (nodes.clone(), shared.clone(), id.clone());
            handles.push(std::thread::spawn(move || {
                turn_worker(&nodes[n], &shared, k, &id, pace, lease)
            }));
        }
    }
    for n in 0..nodes.len() {
        let (nodes, shared) = (nodes.clone(), shared.clone());
        handles.push(std::thread::spawn(move || {
            registry_worker(&nodes[n], &shared, n, pace * 4)
        }));
    }
    handles
}

/// A socket to `node`, or `None` while the node is down or not answering.
fn connect(node: &Node) -> Option<Wire> {
    let port = node.port.load(Ordering::SeqCst);
    if port == 0 {
        return None;
    }
    Wire::connect(port, Duration::from_secs(3)).ok()
}

/// Paces a worker: returns when the next request may start (at most one per `pace`), or at
/// once if the last one was longer ago.
fn pace_until(next: &mut Instant, pace: Duration) {
    let now = Instant::now();
    if *next > now {
        // A load generator's rate, not a wait for something to happen.
        std::thread::sleep(*next - now);
    }
    *next = Instant::now().max(*next) + pace;
}

fn turn_worker(node: &Node, shared: &Shared, k: usize, id: &str, pace: Duration, lease: Duration) {
    let patience = lease * 3 + Duration::from_secs(10);
    let dispatcher = protocol::dispatcher(id);
    let mut wire: Option<Wire> = None;
    let mut seen = Vec::new();
    let mut next = Instant::now();
    let mut i = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        pace_until(&mut next, pace);
        let Some(w) = wire.as_mut() else {
            wire = connect(node).and_then(|mut w| {
                let deadline = Instant::now() + patience;
                w.agent("joinConversation", join_args(id), deadline)
                    .ok()
                    .map(|_| w)
            });
            continue;
        };
        let text = format!("nemesis c{k} {} #{i}", node.name);
        i += 1;
        let deadline = Instant::now() + patience;
        let submitted = w.invoke(
            &dispatcher,
            "submitCommand",
            json!([text, null, null, format!("cr-{k}-{}-{i}", node.name), null]),
            deadline,
        );
        let outcome = submitted.and_then(|ack| match ack["entry"]["requestId"].as_str() {
            Some(rid) if ack["ok"] == true => {
                let rid = rid.to_string();
                w.wait_complete(id, &rid, deadline)
                    .map(|ok| ok.then_some(rid))
            }
            _ => Ok(None),
        });
        seen.extend(
            w.completions
                .drain(..)
                .filter(|(c, _, _)| c == id)
                .map(|(_, r, _)| r),
        );
        match outcome {
            Ok(Some(request_id)) => shared.ack(AckedTurn {
                conversation: k,
                text,
                request_id,
                at: Instant::now(),
                wall: SystemTime::now(),
            }),
            // Not joined (the conversation is moving, or moved and the socket could not
            // follow it): join again on the same socket, as a client would. "Already joined"
            // or "Channel ... already exists": the socket followed it meanwhile.
            Err(Failure::Refused(e)) if e.contains("Not joined") => {
                let deadline = Instant::now() + patience;
                match w.agent("joinConversation", join_args(id), deadline) {
                    Ok(_) => {}
                    Err(Failure::Refused(e))
                        if e.contains("Already joined") || e.contains("already exists") => {}
                    Err(_) => wire = None,
                }
            }
            // Refused for now (cluster unavailable, storage error, queue full): the socket
            // stays joined (a relayed client is rejoined for it); the next request tries again.
            Ok(None) | Err(Failure::Refused(_)) => {}
            Err(Failure::Closed(_) | Failure::Timeout) => wire = None,
        }
    }
    shared.seen.lock().unwrap().push((k, seen));
}

fn registry_worker(node: &Node, shared: &Shared, n: usize, pace: Duration) {
    let mut wire: Option<Wire> = None;
    let mut next = Instant::now();
    let mut i = 0u64;
    let note = |op: RegistryOp| shared.registry.lock().unwrap().push(op);
    while !shared.stop.load(Ordering::SeqCst) {
        pace_until(&mut next, pace);
        let Some(w) = wire.as_mut() else {
            wire = connect(node);
            continue;
        };
        let deadline = || Instant::now() + Duration::from_secs(20);
        let name = format!("race-{i}");
        i += 1;
        let id = match w.agent("createConversation", json!([name, null]), deadline()) {
            Ok(info) => {
                let id = info["conversationId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                note(RegistryOp::Created {
                    id: id.clone(),
                    name: name.clone(),
                });
                id
            }
            Err(Failure::Refused(e)) if e.contains("already exists") => continue,
            Err(failure) => {
                note(RegistryOp::MaybeCreated { name });
                if !matches!(failure, Failure::Refused(_)) {
                    wire = None;
                }
                continue;
            }
        };
        let renamed = format!("{name} renamed by {n}");
        if !answered(
            w.agent("renameConversation", json!([id, renamed]), deadline()),
            || RegistryOp::Renamed {
                id: id.clone(),
                name: renamed.clone(),
            },
            || RegistryOp::MaybeRenamed {
                id: id.clone(),
                name: renamed.clone(),
            },
            &note,
        ) {
            wire = None;
            continue;
        }
        if i.is_multiple_of(2)
            && !answered(
                w.agent("deleteConversation", json!([id]), deadline()),
                || RegistryOp::Deleted { id: id.clone() },
                || RegistryOp::MaybeDeleted { id: id.clone() },
                &note,
            )
        {
            wire = None;
        }
    }
}

/// Notes an acknowledged (`done`) or unknown (`maybe`) outcome; false when the socket should
/// be dropped.
fn answered(
    outcome: Result<Value, Failure>,
    done: impl FnOnce() -> RegistryOp,
    maybe: impl FnOnce() -> RegistryOp,
    note: &impl Fn(RegistryOp),
) -> bool {
    match outcome {
        Ok(_) => {
            note(done());
            true
        }
        // A refusal changed nothing only if the cluster says so; it is noted as unknown all
        // the same (a "Cluster unavailable" after a write may follow a write that landed).
        Err(Failure::Refused(_)) => {
            note(maybe());
            true
        }
        Err(_) => {
            note(maybe());
            false
        }
    }
}
