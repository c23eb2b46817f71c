//! Tests of the checks' rules ([`plan`](super::plan)) and of what [`SharedCopy`](super::SharedCopy)
//! keeps between checks (remembered deletes, absences, the audit).

use super::*;

fn id(n: u8) -> ConversationId {
    ConversationId::parse(&format!("{n:08x}-0000-4000-8000-000000000000")).expect("a uuid")
}

fn record(n: u8, name: &str) -> RegistryRecord {
    RegistryRecord {
        conversation_id: id(n),
        name: name.into(),
        created_at: "2026-12-04T00:00:00Z".into(),
    }
}

/// A snapshot current to revision 100: 1 "one" at 40, 2 deleted at 60, 3 "three" at 95.
fn snapshot() -> RegistrySnapshot {
    RegistrySnapshot {
        records: vec![(record(1, "one"), 40), (record(3, "three"), 95)],
        deleted: vec![(id(2), 60)],
        watch_from: 101,
    }
}

fn held(revision: u64, name: &str) -> Held<'_> {
    Held {
        revision,
        deleting: false,
        name,
    }
}

fn plan_for(copy: &[(u8, Held<'_>)], watch_at: u64, start: bool) -> Plan {
    let copy: HashMap<ConversationId, Held<'_>> = copy.iter().map(|(n, h)| (id(*n), *h)).collect();
    plan(&copy, |i| i == id(9), &snapshot(), watch_at, start)
}

#[test]
fn what_the_watch_passed_over_is_asked_of_the_leader() {
    // The watch got to 100: 3 missing, 2 still here and 1 under an old name are
    // differences it passed over.
    let plan = plan_for(&[(1, held(30, "uno")), (2, held(20, "two"))], 100, false);
    assert_eq!(plan.confirm, {
        let mut ids = vec![id(1), id(2), id(3)];
        ids.sort();
        ids
    });
    assert!(plan.apply.is_empty() && plan.remove.is_empty());
    // Only 2, which the snapshot shows deleted, may go on the leader's word.
    assert_eq!(plan.removable, vec![id(2)]);
}

#[test]
fn what_a_lagging_watch_has_not_reached_is_applied_at_once() {
    // The watch got to 50 only: 2's delete (60) and 3 (95) are ahead of it.
    let plan = plan_for(&[(1, held(40, "one")), (2, held(20, "two"))], 50, false);
    assert_eq!(plan.apply, vec![(record(3, "three"), 95)]);
    assert_eq!(plan.remove, vec![id(2)]);
    assert!(plan.confirm.is_empty());
}

#[test]
fn newer_writes_and_deletes_under_way_are_left_alone() {
    let deleting = Held {
        deleting: true,
        ..held(10, "one")
    };
    // 3 renamed here at 120, after the snapshot; 1 being deleted; 4 created at 130.
    let plan = plan_for(
        &[
            (1, deleting),
            (3, held(120, "trois")),
            (4, held(130, "four")),
        ],
        100,
        false,
    );
    assert_eq!(plan, Plan::default());
}

#[test]
fn absent_from_the_snapshot_is_asked_unless_newer() {
    // 5 at 90 is covered but absent; 6 was never confirmed (0, from the file); 7 is newer.
    let plan = plan_for(
        &[
            (1, held(40, "one")),
            (3, held(95, "three")),
            (5, held(90, "five")),
            (6, held(0, "six")),
            (7, held(120, "seven")),
        ],
        100,
        false,
    );
    assert_eq!(plan.confirm, vec![id(5), id(6)]);
    assert_eq!(plan.removable, vec![id(5), id(6)]);
}

#[test]
fn a_snapshot_older_than_the_watch_puts_what_the_watch_brought_past_it_in_doubt() {
    // The watch delivered up to 140, the store is at 100: 8 (held at 130) may not exist.
    let plan = plan_for(
        &[
            (1, held(40, "one")),
            (3, held(95, "three")),
            (8, held(130, "eight")),
        ],
        140,
        false,
    );
    assert!(plan.behind_watch);
    assert_eq!(plan.confirm, vec![id(8)]);
    assert!(
        plan.removable.is_empty(),
        "asked, but never removed on one word"
    );
}

#[test]
fn a_record_deleted_here_comes_back_only_on_the_leaders_word() {
    // 9 was deleted here; a snapshot (read before that delete) still has it, ahead of
    // the watch: the leader decides, not the snapshot.
    let snapshot = RegistrySnapshot {
        records: vec![(record(9, "nine"), 80)],
        watch_from: 101,
        ..RegistrySnapshot::default()
    };
    let decided = plan(&HashMap::new(), |i| i == id(9), &snapshot, 10, false);
    assert_eq!(decided.confirm, vec![id(9)]);
    assert!(decided.apply.is_empty());
    assert!(decided.removable.is_empty());
}

#[test]
fn at_start_the_snapshot_is_applied_and_only_absence_is_asked() {
    let plan = plan_for(&[(2, held(0, "two")), (6, held(0, "six"))], 0, true);
    assert_eq!(plan.apply.len(), 2);
    assert_eq!(plan.remove, vec![id(2)]);
    assert_eq!(plan.confirm, vec![id(6)]);
}

#[test]
fn remembered_deletes_go_once_a_snapshot_shows_or_covers_them() {
    let mut copy = SharedCopy::default();
    copy.tombstone(id(2), 0); // shown as deleted by the snapshot
    copy.tombstone(id(7), 80); // covered by revision 100
    copy.tombstone(id(8), 150); // newer than the snapshot
    copy.tombstone(id(9), 0); // not known and not shown
    copy.forget_shown(&snapshot());
    assert!(!copy.is_deleted(id(2)));
    assert!(!copy.is_deleted(id(7)));
    assert!(copy.is_deleted(id(8)));
    assert!(copy.is_deleted(id(9)));
}

/// An absence without a delete marker counts only when a check at least the gap after the
/// first find still sees it; a check that does not repeat a find forgets it.
#[test]
fn an_absence_without_a_marker_must_last() {
    let mut copy = SharedCopy::default();
    let gap = Duration::from_secs(20);
    let t0 = Instant::now();
    assert!(copy.long_absent(&[id(1), id(2)], t0, gap).is_empty());
    let t1 = t0 + Duration::from_secs(10);
    assert!(copy.long_absent(&[id(1), id(2)], t1, gap).is_empty());
    // 2 is back at the third check: its earlier finds are forgotten.
    let t2 = t0 + gap;
    assert_eq!(copy.long_absent(&[id(1)], t2, gap), HashSet::from([id(1)]));
    let t3 = t2 + Duration::from_secs(1);
    assert!(copy.long_absent(&[id(2)], t3, gap).is_empty());
    assert!(copy.long_absent(&[id(2)], t3 + gap, gap).contains(&id(2)));
}

#[test]
fn every_conversation_is_asked_of_the_leader_in_turn() {
    let mut copy = SharedCopy::default();
    // The copy: MAX_CONFIRMATIONS + 10 conversations, in no order; one goes meanwhile.
    let n = MAX_CONFIRMATIONS + 10;
    let ids: Vec<ConversationId> = (0..n)
        .rev()
        .map(|i| ConversationId::parse(&format!("{i:08x}-0000-4000-8000-000000000000")).unwrap())
        .collect();
    copy.start_sweep(ids.clone(), true);
    let gone = ids[0];
    let in_copy = |i: ConversationId| i != gone;
    // The check's own differences come first and are not asked twice (this one is among
    // the first the audit takes: ids are taken in order, and `ids` runs backwards).
    let difference = ids[n - 6];
    let mut confirm = vec![difference];
    copy.take_sweep(&mut confirm, in_copy, Vec::new);
    assert!(copy.urgent_left(), "10 more to ask");
    assert_eq!(confirm.len(), MAX_CONFIRMATIONS);
    assert_eq!(confirm[0], difference);
    assert_eq!(confirm.iter().filter(|&&i| i == difference).count(), 1);
    assert!(confirm[1..].windows(2).all(|w| w[0] < w[1]), "in id order");
    // Two were not answered: they are asked first by the next check, then the rest.
    copy.resweep([confirm[1], confirm[2]].into_iter());
    let mut next = Vec::new();
    copy.take_sweep(&mut next, in_copy, Vec::new);
    assert_eq!(&next[..2], &confirm[1..3]);
    let mut asked: HashSet<ConversationId> = confirm.iter().copied().collect();
    asked.extend(next.iter().copied());
    assert!(
        ids.iter().all(|i| asked.contains(i) || *i == gone),
        "every one asked"
    );
    assert!(!asked.contains(&gone), "not one no longer in the copy");
    assert!(!copy.urgent_left());
    // Without a fault the audit goes on in rounds, one slice per check.
    let mut third = Vec::new();
    copy.take_sweep(&mut third, in_copy, || ids[..3].to_vec());
    assert_eq!(third.len(), 2, "a new round: {third:?}");
    assert!(!copy.urgent_left(), "not urgent");
}
