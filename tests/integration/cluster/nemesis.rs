//! The CI-sized nemesis (issue 31): three nodes on a three-server NATS cluster with every
//! bucket and the log stream replicated three times, clients on every node submitting turns
//! and racing to create, rename and delete conversations, and two faults of each kind
//! (`kill -9` of an owner, `SIGSTOP` past the lease then `SIGCONT`, a NATS server restarted,
//! a node cut off from NATS and healed, two of those at once). Nothing acknowledged may be
//! lost, duplicated, reordered, held twice or resurrected, and every fault must be recovered
//! from. The full run (20 of each) is `cargo bench --bench load -- nemesis`; both are
//! `tests/support/nemesis/`.

use std::time::Duration;

use crate::harness::binary;
use crate::support::nats;
use crate::support::nemesis::{self, Config};

#[test]
fn nothing_acknowledged_is_lost_under_faults() {
    if !nats::available() {
        crate::harness::skip(
            "nats-server is not installed (apt install nats-server; .ci/run does)",
        );
        return;
    }
    let report = nemesis::run(Config {
        bin: binary().into(),
        faults_per_kind: 2,
        conversations: 3,
        lease_seconds: 2.0,
        pace: Duration::from_millis(40),
        node_args: vec!["--cluster-replicas".into(), "3".into()],
        on_fault: Some(Box::new(|n, total, what| {
            eprintln!("nemesis fault {n}/{total}: {what}")
        })),
    })
    .unwrap_or_else(|e| panic!("the nemesis could not run: {e}"));
    eprintln!("{}", report.summary());
    assert!(report.turns_acknowledged > 0, "no turn was acknowledged");
    assert!(
        report.registry_acknowledged > 0,
        "no registry change was acknowledged"
    );
    assert!(
        report.clean(),
        "the nemesis found problems: {:#?}",
        report.problems
    );
}
