//! Skipping a test that needs something this machine lacks (nats-server, the MCP servers,
//! mount permission, a second OS user, systemd-analyze), so that the skip is seen.
//!
//! libtest has no "skipped" outcome: a test that returns early reports `ok`, and what it
//! printed is captured and thrown away. So [`skip`] does two things instead:
//! - under CI (`CI` set, as `.ci/run` sets it) nothing may skip: it panics with the reason,
//!   and the test fails;
//! - elsewhere it records the test's name and the reason, and the first skip registers an
//!   `atexit` handler that prints `N tests skipped: …` with the list on stderr when the test
//!   binary exits, i.e. after libtest's own summary, with or without `--nocapture`.

use std::sync::{Mutex, Once};

/// (test name, reason) of every skip so far in this process.
static SKIPPED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Registers [`report`] with `atexit` once.
static REPORT_AT_EXIT: Once = Once::new();

/// Skips the calling test (it returns right after): panics under CI, otherwise records it
/// for the summary printed at exit and says so on the test's own stderr (shown with
/// `--nocapture`). `reason` says what is missing and how to get it.
pub fn skip(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("nothing may skip under CI, but this test would skip: {reason}");
    }
    // libtest runs each test on a thread named after it; with `--test-threads=1` too.
    let name = std::thread::current()
        .name()
        .unwrap_or("(unnamed test thread)")
        .to_string();
    eprintln!("skipped: {reason}");
    SKIPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name, reason.to_string()));
    REPORT_AT_EXIT.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` that never unwinds (see `report`).
        let registered = unsafe { libc::atexit(report) };
        if registered != 0 {
            eprintln!("warning: the skipped-tests summary cannot be registered");
        }
    });
}

/// The `atexit` handler: `N tests skipped (they fail under CI):` and one `  name: reason`
/// line per skip, on stderr. Must not unwind across the C boundary: nothing here panics (a
/// poisoned lock is read anyway, write errors are ignored).
extern "C" fn report() {
    use std::io::Write;
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        return;
    }
    let mut text = format!(
        "\n{} test{} skipped (missing on this machine; under CI they fail instead):\n",
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" }
    );
    for (name, reason) in skipped.iter() {
        text.push_str(&format!("  {name}: {reason}\n"));
    }
    let _ = std::io::stderr().write_all(text.as_bytes());
}
