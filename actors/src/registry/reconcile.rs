//! Checks of a cluster node's copy of the conversation list against the shared store
//! (docs/cluster.md, "Checks of the copy"). The watch (`shared.rs`) keeps the copy current
//! change by change, but under faults it has been seen to pass changes over: in nemesis runs
//! on NATS 2.9.10, right after a NATS server restart, a watch delivered revisions the bucket's
//! stream then did not have (writes a replica held and the cluster dropped), went on from
//! past them, and so never delivered the real changes that took those revisions; a node then
//! listed conversations fewer than the others, or an old name, for good. So a node does not
//! rely on the watch alone. At start, every `--reconcile-time` (30 s), within a second after
//! its watch had to start again and after NATS reconnects, it reads a fresh snapshot of the
//! store (the revision it is current to, then the last value of every key) and compares:
//!
//! - a change newer than anything the watch delivered (the watch lags) is applied as the
//!   snapshot has it, as the watch would have;
//! - any other difference (a record the copy lacks or names otherwise, a delete it has not
//!   applied, a conversation the snapshot lacks) is one the watch passed over, or one the
//!   snapshot alone cannot prove (its consumer may read a replica that is behind): the
//!   stream's leader is asked for that conversation's record, and the copy is made to agree
//!   with the answer (a repair: logged as a warning and counted); a removal needs the snapshot
//!   to agree with the leader, at most [`MAX_REMOVALS_PER_CHECK`] at once, and, without a
//!   delete marker, an absence that lasts ([`absence_proof_gap`]);
//! - a snapshot current to a revision older than what the watch delivered means the watch
//!   delivered revisions the stream does not have: every conversation the copy holds at such
//!   a revision is asked of the leader too, and the watch starts again from the snapshot's
//!   revision (and read-your-writes waits for it from there);
//! - nothing newer than the snapshot is undone, and the deletes this copy applied are
//!   remembered ([`SharedCopy`]) until a snapshot shows them;
//! - the audit: every check also asks the leader about a slice of the copy's conversations,
//!   in turn, whatever the snapshot shows (a copy and a snapshot read from the same stale
//!   replica agree on what is wrong), all of them at once after a fault
//!   ([`SharedCopy::start_sweep`]).
//!
//! Checks and repairs are counted (`/health`'s `registryReconciles`, `registryRepairs`). Once
//! a check is applied, the copy is current to the snapshot's revision, so the reads waiting
//! for it go on (`catch_up.rs`).
//!
//! Who talks to it: `shared.rs` sends the start snapshot and spawns [`check_the_copy`]; the
//! watch flags its restarts and takes rewinds from here; the watch and the catalog record
//! deletes in [`SharedCopy`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::shared_store::{bounded_snapshot, RegistryRecord, RegistrySnapshot};
use super::{ClusterServices, ConversationRegistry};
use crate::ids::ConversationId;

/// How often a node checks its copy against a fresh snapshot when nothing else asks for it
/// (`--reconcile-time`).
pub const DEFAULT_RECONCILE_TIME: Duration = Duration::from_secs(30);

/// How often [`check_the_copy`] looks whether a check is due (a reconnect, a restarted watch).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Conversations one check asks the store's leader about, at most (one request each): its
/// differences first, then the audit's next ones. The rest wait for the next check, which
/// comes within [`LOOK_EVERY`] after a fault, else a reconcile time later.
pub const MAX_CONFIRMATIONS: usize = 1024;

/// Conversations one check may remove on the store's leader's word, at least (or 1% of the
/// copy, if more): past it the check removes none (see [`ConversationRegistry::confirm_with_leader`]).
pub const MAX_REMOVALS_PER_CHECK: usize = 8;

/// How long a conversation must stay gone from the store without a delete marker, from the
/// first check that found it so to a later one, before a check removes it: two reconcile
/// times. A delete writes a marker; an absence without one is a purge of the stream, or what
/// a NATS server still catching up answers (seen under the nemesis: conversations missing
/// from both the snapshot and the leader's answer, back a minute later), and removing a
/// conversation closes its clients.
pub fn absence_proof_gap(reconcile_time: Duration) -> Duration {
    reconcile_time * 2
}

/// Deletes remembered at most until a snapshot shows them (past it a new one is not kept,
/// and logged: a snapshot read before that delete could then bring the conversation back
/// until the next check). Every delete needs the store, and every check (at least each
/// [`DEFAULT_RECONCILE_TIME`] while the store answers) lets go of those it shows, so this
/// is only reached by more deletes than this between two checks.
pub const MAX_REMEMBERED_DELETES: usize = 65_536;

/// A snapshot of the store for the registry to make its copy agree with. Answers the revision
/// the watch must start again from when the snapshot shows it delivered revisions the store
/// does not have.
#[derive(Message)]
#[rtype(result = "CheckOutcome")]
pub struct SharedSnapshot {
    /// The store's records and delete markers, and the revision they are current to.
    pub snapshot: RegistrySnapshot,
    /// The first one, at start: the copy loaded from this node's file is brought to it
    /// (re-ordered by creation time, its removals logged as deletes made while the node was
    /// away, nothing counted as a repair).
    pub start: bool,
    /// The newest revision the watch had delivered (and the registry applied) before the
    /// snapshot's revision was read: a difference at or below it is one the watch passed
    /// over, one above it only ahead of a lagging watch; a snapshot current to less means the
    /// watch delivered revisions the store does not have.
    pub watch_at: u64,
    /// The check follows a fault (NATS came back, the watch started again): every
    /// conversation of the copy is asked of the store's leader, not only those that differ
    /// from the snapshot (the audit: see this module's docs).
    pub sweep: bool,
}

/// What a check tells [`check_the_copy`].
#[derive(Debug, Default, MessageResponse)]
pub struct CheckOutcome {
    /// The watch must start again from this revision: the snapshot shows it delivered
    /// revisions the store does not have.
    pub rewind: Option<u64>,
    /// A round of the audit started by a fault has conversations still to ask about: the
    /// next check comes at the next look, not a reconcile time later.
    pub sweep_left: bool,
}

/// The deletes this node's copy applied that a snapshot may not show yet.
#[derive(Default)]
pub(super) struct SharedCopy {
    /// Deleted conversation → the store's revision of its delete (0: not known).
    deleted: HashMap<ConversationId, u64>,
    /// The bound was hit and logged (once per crossing).
    full_logged: bool,
    /// Conversations the last check found gone from the store without a delete marker
    /// (the snapshot lacks them, the leader has no record), by when that was first seen: one
    /// is removed only when a check at least [`absence_proof_gap`] later still finds it so.
    /// Each check keeps only its own finds, which are at most its removal bound.
    absent_since: HashMap<ConversationId, Instant>,
    /// Conversations the audit has still to ask the store's leader about, in id order; at
    /// most the copy's size (a new round replaces the old one).
    sweep_left: VecDeque<ConversationId>,
    /// The round under way follows a fault: checks come one after another until it is done,
    /// instead of one per reconcile time.
    sweep_urgent: bool,
    /// Conversations whose lost record this node is writing again (`lost_records.rs`): at
    /// most one write each at a time; bounded by the copy.
    pub(super) rewriting: HashSet<ConversationId>,
}

impl SharedCopy {
    /// Remembers that `id` was deleted at `revision` (0: not known).
    pub(super) fn tombstone(&mut self, id: ConversationId, revision: u64) {
        if let Some(known) = self.deleted.get_mut(&id) {
            *known = (*known).max(revision);
            return;
        }
        if self.deleted.len() >= MAX_REMEMBERED_DELETES {
            if !self.full_logged {
                log::warn!(
                    "cluster: {MAX_REMEMBERED_DELETES} deletes not yet confirmed by a check of \
                     this node's copy; further ones are not remembered until the next check"
                );
                self.full_logged = true;
            }
            return;
        }
        self.deleted.insert(id, revision);
    }

    /// Whether this copy deleted `id` (ids are never reused: nothing brings it back, but the
    /// store's leader).
    pub(super) fn is_deleted(&self, id: ConversationId) -> bool {
        self.deleted.contains_key(&id)
    }

    /// Notes the conversations a check found gone without a delete marker (forgetting any
    /// earlier find it did not repeat), and answers those found so since at least `gap` ago.
    fn long_absent(
        &mut self,
        found: &[ConversationId],
        now: Instant,
        gap: Duration,
    ) -> HashSet<ConversationId> {
        let mut long = HashSet::new();
        let mut still = HashMap::with_capacity(found.len());
        for id in found {
            let since = self.absent_since.get(id).copied().unwrap_or(now);
            if now.duration_since(since) >= gap {
                long.insert(*id);
            } else {
                still.insert(*id, since);
            }
        }
        self.absent_since = still;
        long
    }

    /// Starts a round of the audit over `ids` (the copy's conversations). The audit asks the
    /// store's leader about every conversation in turn, whatever the snapshot says, because a
    /// difference between the copy and a snapshot is not the only sign of a wrong copy. On
    /// NATS 2.9.10, under the nemesis, a node's copy and its snapshots agreed on an old name
    /// for good: both were read from a replica that had missed a rename (or had held a write
    /// the cluster dropped), so no check found a difference to ask about. `urgent`: the round
    /// follows a fault (NATS came back, the watch started again or went past the store), and
    /// checks come one after another until it is done.
    fn start_sweep(&mut self, mut ids: Vec<ConversationId>, urgent: bool) {
        ids.sort_unstable();
        self.sweep_left = ids.into();
        self.sweep_urgent = urgent;
    }

    /// Whether an urgent round still has conversations to ask about.
    fn urgent_left(&self) -> bool {
        self.sweep_urgent && !self.sweep_left.is_empty()
    }

    /// Adds to `confirm` (the differences, asked first) up to [`MAX_CONFIRMATIONS`] in all
    /// from the audit, skipping those already there or no longer in the copy; a finished
    /// round starts again over `all()`.
    fn take_sweep(
        &mut self,
        confirm: &mut Vec<ConversationId>,
        in_copy: impl Fn(ConversationId) -> bool,
        all: impl FnOnce() -> Vec<ConversationId>,
    ) {
        if self.sweep_left.is_empty() {
            self.start_sweep(all(), false);
        }
        let asked: HashSet<ConversationId> = confirm.iter().copied().collect();
        while confirm.len() < MAX_CONFIRMATIONS {
            let Some(id) = self.sweep_left.pop_front() else {
                break;
            };
            if in_copy(id) && !asked.contains(&id) {
                confirm.push(id);
            }
        }
    }

    /// Puts back at the sweep's front the conversations a check could not ask about.
    fn resweep(&mut self, ids: impl DoubleEndedIterator<Item = ConversationId>) {
        for id in ids.rev() {
            self.sweep_left.push_front(id);
        }
    }

    /// Lets go of the deletes `snapshot` shows, or whose revision it covers.
    fn forget_shown(&mut self, snapshot: &RegistrySnapshot) {
        for (id, _) in &snapshot.deleted {
            self.deleted.remove(id);
        }
        let covered = snapshot.watch_from.saturating_sub(1);
        self.deleted
            .retain(|_, revision| *revision == 0 || *revision > covered);
        self.full_logged = false;
    }
}

/// One conversation as the copy holds it, for [`plan`].
#[derive(Debug, Clone, Copy)]
struct Held<'a> {
    /// The store's revision of the record the copy holds (0: not known).
    revision: u64,
    /// A delete of it is under way here (left to that delete).
    deleting: bool,
    /// Its name here.
    name: &'a str,
}

/// What a check does, decided from the snapshot and the copy alone.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    /// Records to apply as the snapshot has them (newer than the watch got to, or at start).
    apply: Vec<(RegistryRecord, u64)>,
    /// Conversations to remove as the snapshot shows them deleted (same).
    remove: Vec<ConversationId>,
    /// Entries whose name agrees and whose revision is only older here: (id, revision).
    bump: Vec<(ConversationId, u64)>,
    /// Conversations to ask the store's leader about before changing anything.
    confirm: Vec<ConversationId>,
    /// Those of `confirm` the copy may remove when the leader has no record of them: the
    /// snapshot shows them deleted or lacks them, below its revision. Never one the snapshot
    /// holds, nor one the watch brought past a snapshot behind it: removing a conversation
    /// closes its clients, so it takes two sources that agree (right after a NATS server
    /// restart, one answered from a server that was behind).
    removable: Vec<ConversationId>,
    /// The snapshot is older than what the watch delivered: the watch went past the store.
    behind_watch: bool,
}

/// Compares `snapshot` with the copy (see the module docs). `deleted_here`: the copy's
/// remembered deletes; `watch_at`: the newest revision the watch delivered.
fn plan(
    copy: &HashMap<ConversationId, Held<'_>>,
    deleted_here: impl Fn(ConversationId) -> bool,
    snapshot: &RegistrySnapshot,
    watch_at: u64,
    start: bool,
) -> Plan {
    let covered = snapshot.watch_from.saturating_sub(1);
    let behind_watch = !start && covered < watch_at;
    let mut plan = Plan {
        behind_watch,
        ..Plan::default()
    };
    let mut confirm: HashSet<ConversationId> = HashSet::new();
    let mut removable: HashSet<ConversationId> = HashSet::new();
    // A change above everything the watch delivered is one it has not reached yet.
    let ahead_of_watch = |revision: u64| start || (!behind_watch && revision > watch_at);
    let mut in_snapshot: HashSet<ConversationId> = HashSet::new();
    for (record, revision) in &snapshot.records {
        let id = record.conversation_id;
        in_snapshot.insert(id);
        match copy.get(&id) {
            Some(held) if held.deleting => {}
            Some(held) if held.name == record.name => {
                if *revision > held.revision {
                    plan.bump.push((id, *revision));
                }
            }
            _ if deleted_here(id) => {
                confirm.insert(id);
            }
            // Written after the snapshot's revision (here, or delivered by the watch).
            Some(held) if !behind_watch && held.revision > covered => {}
            _ if ahead_of_watch(*revision) => plan.apply.push((record.clone(), *revision)),
            _ => {
                confirm.insert(id);
            }
        }
    }
    for (id, at) in &snapshot.deleted {
        in_snapshot.insert(*id);
        match copy.get(id) {
            Some(held) if !held.deleting => {
                if ahead_of_watch(*at) && held.revision < *at {
                    plan.remove.push(*id);
                } else {
                    confirm.insert(*id);
                    removable.insert(*id);
                }
            }
            _ => {}
        }
    }
    for (id, held) in copy {
        if held.deleting {
            continue;
        }
        let absent = !in_snapshot.contains(id) && held.revision <= covered;
        // Behind the watch: what it delivered past the snapshot may not exist.
        let past_the_store = behind_watch && held.revision > covered;
        // A snapshot behind the watch is not trusted to prove absence.
        if absent && !behind_watch {
            removable.insert(*id);
        }
        if absent || past_the_store {
            confirm.insert(*id);
        }
    }
    plan.confirm = confirm.into_iter().collect();
    plan.confirm.sort();
    plan.removable = removable.into_iter().collect();
    plan.removable.sort();
    plan
}

impl Handler<SharedSnapshot> for ConversationRegistry {
    type Result = CheckOutcome;

    fn handle(&mut self, msg: SharedSnapshot, ctx: &mut Self::Context) -> CheckOutcome {
        let SharedSnapshot {
            snapshot,
            start,
            watch_at,
            sweep,
        } = msg;
        let covered = snapshot.watch_from.saturating_sub(1);
        let node = self
            .config
            .cluster
            .as_ref()
            .map(|c| c.node().to_string())
            .unwrap_or_default();
        if start {
            // Every node lists in creation-time order: re-key the entries loaded from the file.
            self.order.clear();
            let ids: Vec<ConversationId> = self.entries.keys().copied().collect();
            for id in ids {
                let created_at = self.entries[&id].created_at.to_string();
                let key = self.cluster_order_key(id, &created_at);
                self.entries.get_mut(&id).expect("listed").order = key;
                self.order.insert(key, id);
            }
        }
        let copy: HashMap<ConversationId, Held<'_>> = self
            .entries
            .iter()
            .map(|(id, e)| {
                let held = Held {
                    revision: e.revision,
                    deleting: e.deleting,
                    name: &e.name,
                };
                (*id, held)
            })
            .collect();
        let mut plan = plan(
            &copy,
            |id| self.shared_copy.is_deleted(id),
            &snapshot,
            watch_at,
            start,
        );
        drop(copy);
        let rewind = plan.behind_watch.then(|| {
            log::warn!(
                "cluster node {node}: registry check: the store is at revision {covered}, but \
                 the watch delivered up to {watch_at} (revisions the store does not have); \
                 watching again from {}",
                covered + 1
            );
            self.rewind_catch_up(covered);
            covered + 1
        });
        for (id, revision) in plan.bump.drain(..) {
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.revision = entry.revision.max(revision);
            }
        }
        for (record, revision) in plan.apply.drain(..) {
            self.apply_record(&record, revision);
        }
        for id in plan.remove.drain(..) {
            if start {
                log::info!("cluster: conversation {id} was deleted while this node was away");
            }
            let removal = self.delete_local(id);
            ctx.spawn(removal.map(|_, _, _| ()));
        }
        if !start {
            let live = || -> Vec<ConversationId> {
                self.entries
                    .iter()
                    .filter(|(_, e)| !e.deleting)
                    .map(|(id, _)| *id)
                    .collect()
            };
            if sweep || rewind.is_some() {
                let live = live();
                log::info!(
                    "cluster node {node}: registry check after a fault: asking the store's \
                     leader about all {} conversations",
                    live.len()
                );
                self.shared_copy.start_sweep(live, true);
            }
            let entries = &self.entries;
            self.shared_copy
                .take_sweep(&mut plan.confirm, |id| entries.contains_key(&id), live);
        }
        if plan.confirm.is_empty() {
            self.checked(&snapshot, 0, true, start, ctx);
        } else {
            let removable = plan.removable.into_iter().collect();
            self.confirm_with_leader(plan.confirm, removable, snapshot, start, ctx);
        }
        CheckOutcome {
            rewind,
            sweep_left: self.shared_copy.urgent_left(),
        }
    }
}

impl ConversationRegistry {
    /// A check is applied: counted (`complete`: every conversation it asked the leader about
    /// was answered; one that was not is left to the next check and not counted), its
    /// deletes let go, the reads waiting for its revision go.
    fn checked(
        &mut self,
        snapshot: &RegistrySnapshot,
        repairs: usize,
        complete: bool,
        start: bool,
        ctx: &mut Context<Self>,
    ) {
        let covered = snapshot.watch_from.saturating_sub(1);
        self.shared_copy.forget_shown(snapshot);
        if let (false, Some(cluster)) = (start, &self.config.cluster) {
            cluster.count_reconcile(usize::from(complete), repairs);
            log::debug!(
                "cluster node {}: registry check at revision {covered}: {repairs} repairs",
                cluster.node()
            );
        }
        self.caught_up_to(covered, ctx);
    }

    /// Asks the store's leader for each of `ids` and makes the copy agree with its answers
    /// (an entry that changed here meanwhile is left to the next check; one the leader has no
    /// record of is removed only if it is `removable`), then finishes the check.
    fn confirm_with_leader(
        &mut self,
        mut ids: Vec<ConversationId>,
        removable: HashSet<ConversationId>,
        snapshot: RegistrySnapshot,
        start: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(cluster) = self.config.cluster.clone() else {
            return;
        };
        if ids.len() > MAX_CONFIRMATIONS {
            log::info!(
                "cluster node {}: registry check: {} differences, {MAX_CONFIRMATIONS} asked now",
                cluster.node(),
                ids.len()
            );
            ids.truncate(MAX_CONFIRMATIONS);
        }
        let all_asked = ids.clone();
        // What each entry was when asked: an answer about a changed entry is not applied.
        let asked: Vec<(ConversationId, Option<u64>)> = ids
            .iter()
            .map(|id| (*id, self.entries.get(id).map(|e| e.revision)))
            .collect();
        let leader = cluster.clone();
        let answers = async move {
            let mut answers = Vec::with_capacity(ids.len());
            for id in ids {
                let answer = leader.leader_record(id).await;
                let failed = answer.is_err();
                answers.push((id, answer));
                // The store out of reach: the rest wait for the next check instead of each
                // waiting for its own time-out.
                if failed {
                    break;
                }
            }
            answers
        };
        // Conversations the snapshot shows deleted (a marker): gone for sure once the leader
        // agrees; any other absence must last (see `absence_proof_gap`).
        let marked: HashSet<ConversationId> = snapshot
            .deleted
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| removable.contains(id))
            .collect();
        let gap = absence_proof_gap(cluster.reconcile_time());
        ctx.spawn(answers.into_actor(self).map(move |answers, act, ctx| {
            let node = cluster.node().to_string();
            let mut repairs = 0;
            // Not answered (an error, or not asked after one): asked again by the next check.
            let unanswered: Vec<ConversationId> = answers
                .iter()
                .filter(|(_, answer)| answer.is_err())
                .map(|(id, _)| *id)
                .chain(all_asked[answers.len()..].iter().copied())
                .collect();
            let complete = unanswered.is_empty();
            act.shared_copy.resweep(unanswered.into_iter());
            let unchanged = |act: &Self, id: &ConversationId, held: &Option<u64>| {
                act.entries.get(id).map(|e| e.revision) == *held
                    && !act.entries.get(id).is_some_and(|e| e.deleting)
            };
            // Many conversations gone at once is what a NATS server that is still catching up
            // answers (seen under the nemesis: 966 at once, all back a minute later), not what
            // a watch misses: then nothing is removed.
            let candidates: Vec<ConversationId> = answers
                .iter()
                .zip(&asked)
                .filter(|((id, answer), (_, held))| {
                    matches!(answer, Ok(None))
                        && held.is_some()
                        && removable.contains(id)
                        && unchanged(act, id, held)
                })
                .map(|((id, _), _)| *id)
                .collect();
            let removals = candidates.len();
            let removal_bound = MAX_REMOVALS_PER_CHECK.max(act.entries.len() / 100);
            let hold_removals = removals > removal_bound;
            let unmarked: Vec<ConversationId> = if hold_removals {
                Vec::new()
            } else {
                candidates
                    .into_iter()
                    .filter(|id| !marked.contains(id))
                    .collect()
            };
            let long_absent = act.shared_copy.long_absent(&unmarked, Instant::now(), gap);
            if hold_removals {
                log::warn!(
                    "cluster node {node}: registry check: the store answered without {removals} \
                     conversations this node has (more than {removal_bound} at once: a NATS \
                     server catching up?); none removed"
                );
            }
            for ((id, answer), (_, held)) in answers.into_iter().zip(asked) {
                if !unchanged(act, &id, &held) {
                    continue;
                }
                match answer {
                    Err(e) => log::warn!(
                        "cluster node {node}: registry check: conversation {id}: {e}; left to \
                         the next check"
                    ),
                    Ok(Some((record, revision))) => {
                        let before = act.entries.get(&id).map(|e| e.name.to_string());
                        act.shared_copy.deleted.remove(&id);
                        if act.put_record(&record, revision) {
                            repairs += 1;
                            let was = match before {
                                None => "was missing here".to_string(),
                                Some(old) => format!("was named {old:?} here"),
                            };
                            log::warn!(
                                "cluster node {node}: registry check: conversation {id} {was}; \
                                 the store has {:?} at revision {revision}: repaired",
                                record.name
                            );
                        }
                    }
                    // The leader has no record, the snapshot no delete marker, and this node
                    // holds its files: the store lost it (its revisions may have started lower
                    // again, so the snapshot need not show it absent). Writing it again
                    // removes nothing (and writes only where the leader has no marker either),
                    // so it is done however many look gone.
                    Ok(None) if held.is_some() && !marked.contains(&id) && act.holds_files(id) => {
                        repairs += 1;
                        act.write_record_again(id, ctx);
                    }
                    Ok(None) if held.is_some() && (hold_removals || !removable.contains(&id)) => {
                        log::info!(
                        "cluster node {node}: registry check: the store's leader has no record \
                         of conversation {id}, but the snapshot does not say it is gone; kept"
                    )
                    }
                    Ok(None)
                        if held.is_some()
                            && !marked.contains(&id)
                            && !long_absent.contains(&id) =>
                    {
                        log::info!(
                            "cluster node {node}: registry check: conversation {id} is not in \
                             the store and has no delete marker; removed if a check {gap:?} \
                             from the first such find still finds it gone"
                        )
                    }
                    Ok(None) if held.is_some() => {
                        repairs += 1;
                        if start {
                            log::info!(
                                "cluster: conversation {id} was deleted while this node was away"
                            );
                        } else {
                            log::warn!(
                                "cluster node {node}: registry check: conversation {id} is not \
                                 in the store, but this node had it: removed here"
                            );
                        }
                        act.shared_copy.tombstone(id, 0);
                        let removal = act.delete_local(id);
                        ctx.spawn(removal.map(|_, _, _| ()));
                    }
                    Ok(None) => {}
                }
            }
            act.checked(&snapshot, repairs, complete, start, ctx);
        }));
    }
}

/// What the registry watch (`shared.rs`) and the checks of the copy tell each other.
#[derive(Default)]
pub(super) struct WatchState {
    /// The newest revision the watch delivered and the registry applied.
    pub(super) applied: AtomicU64,
    /// Set by the watch when it had to start again (a check is due).
    pub(super) restarted: AtomicBool,
    /// Set by a check: the watch starts again from this revision (0: no rewind).
    pub(super) rewind: AtomicU64,
}

/// Checks this node's copy against a fresh snapshot for the server's life: every
/// [`SharedStore::reconcile_time`](super::SharedStore::reconcile_time), and soon after the
/// watch started again (`watch.restarted`) or NATS came back. A check that fails (the store
/// out of reach, a replay cut short) is tried again a second later. A check that finds the
/// watch went past the store sets `watch.rewind` to the revision it must start again from.
pub(super) async fn check_the_copy(
    shared: Arc<dyn ClusterServices>,
    registry: Addr<ConversationRegistry>,
    watch: Arc<WatchState>,
) {
    let every = shared.reconcile_time();
    let mut last = Instant::now();
    let mut was_reachable = true;
    let mut due = false;
    // Whether the check due follows a fault (then it sweeps: see `SharedCopy::start_sweep`).
    let mut after_fault = false;
    loop {
        tokio::time::sleep(LOOK_EVERY.min(every)).await;
        if !registry.connected() {
            return;
        }
        let reachable = shared.reachable();
        // The watch may have lost changes while NATS was away, however it resumed.
        after_fault |= reachable && !was_reachable;
        was_reachable = reachable;
        after_fault |= watch.restarted.swap(false, Ordering::SeqCst);
        due |= after_fault || last.elapsed() >= every;
        if !due || !reachable {
            continue;
        }
        let watch_at = watch.applied.load(Ordering::SeqCst);
        match bounded_snapshot(shared.as_ref()).await {
            Ok(snapshot) => {
                let check = SharedSnapshot {
                    snapshot,
                    start: false,
                    watch_at,
                    sweep: after_fault,
                };
                match registry.send(check).await {
                    Ok(outcome) => {
                        if let Some(from) = outcome.rewind {
                            watch.rewind.store(from, Ordering::SeqCst);
                        }
                        // A sweep not finished goes on at the next look.
                        due = outcome.sweep_left;
                        after_fault = false;
                        last = Instant::now();
                    }
                    Err(_) => return,
                }
            }
            Err(e) => log::warn!(
                "cluster node {}: checking the copy of the registry: {e}; trying again",
                shared.node()
            ),
        }
    }
}

#[cfg(test)]
mod tests;
