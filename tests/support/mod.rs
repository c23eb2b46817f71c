//! What the integration tests (`tests/integration/`) and the load harness (`benches/load/`)
//! both do, written once: [`server`] starts `roundtable serve` as a child process and stops it,
//! [`protocol`] builds invoke frames, recognises answers and names the channels, [`skip`]
//! skips a test that needs what the machine lacks so that the run's output says so.
//!
//! Both targets include this directory with `#[path = "…/tests/support/mod.rs"] mod support;`
//! rather than depending on a workspace crate of its own: it is two small files of test
//! plumbing, it needs nothing beyond the dev-dependencies both targets already have, and a crate
//! would add a manifest, a lockfile entry and a publish decision for no gain.
//!
//! Neither target uses every item (the tests never read the start time, the harness never
//! reads a `call` frame's args), hence the `allow(dead_code)`.

#![allow(dead_code)]

pub mod mcp;
pub mod nats;
pub mod nats_auth;
pub mod nats_cluster;
pub mod nemesis;
pub mod protocol;
pub mod proxy;
pub mod server;
pub mod skip;
