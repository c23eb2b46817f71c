//! Test harness: [`server`] starts the real `roundtable` binary on a temporary instance
//! directory, [`client`] speaks the protocol over a blocking WebSocket, [`fakes`] stands in for
//! the HTTP services the server calls (a model, a tool server), [`fixtures`] writes instance
//! directories (a long conversation) before a server starts, [`sse`] is a scripted model
//! endpoint that streams (over TLS with [`tls`]'s test CA, or plain), with a `CONNECT` proxy.
//! The process plumbing and the frame building shared with the load harness live in
//! `tests/support/`.

// Every test module takes what it needs from here; no one module uses all of it.
#![allow(dead_code)]

mod client;
mod fakes;
mod fixtures;
mod server;
mod sse;
mod tls;

use std::process::Command;
use std::time::{Duration, Instant};

pub use client::*;
pub use fakes::*;
pub use fixtures::*;
pub use server::*;
pub use sse::*;
pub use tls::*;

pub use crate::support::protocol::{clientio, dispatcher, AGENT_SERVER};
pub use crate::support::skip::skip;

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// Runs a setup command a test needs from the machine (mount, useradd…). `false` after
/// [`skip`]ping with `cannot <what> (<why>)` when the machine refuses: the test then returns.
/// Under CI the refusal fails the test instead (see [`skip`]).
pub fn machine_allows(command: &mut Command, what: &str) -> bool {
    match command.output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            skip(&format!(
                "cannot {what} ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            false
        }
        Err(e) => {
            skip(&format!("cannot {what} ({e})"));
            false
        }
    }
}

/// Polls `f` until it returns true or the wait runs out: for state the server exposes only
/// by being asked (metrics, files, listings), with no event to wait on.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out waiting for: {what}");
}
