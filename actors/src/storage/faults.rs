//! Test seams of the storage layer, off unless the server is started with their environment
//! variables (read once, at the first storage operation):
//!
//! - `ROUNDTABLE_TEST_FAULT_FILE=<path>`: before every write, fsync, rename and directory
//!   creation the storage layer reads `<path>`; while it exists and names an errno (`ENOSPC`,
//!   `EROFS`, `EIO`), the operation fails with that error, exactly as the kernel would report
//!   it. Removing the file is the disk recovering. Tests flip it to inject disk faults into a
//!   running server without root or a special file system. `SLOW <ms>` instead makes each
//!   of those operations take that much longer and succeed: a slow disk.
//! - `ROUNDTABLE_TEST_WRITER_DELAY_MS=<n>`: the log writer sleeps `n` ms before each batch, so
//!   a test can hold appends in its queue and make races with delete, eviction and shutdown
//!   deterministic instead of load-dependent.
//! - `ROUNDTABLE_TEST_SYNC_LINGER_MS=<n>`: a batch whose barriers all expect a successor waits
//!   up to `n` ms for it instead of [`SYNC_LINGER`](super::log_writer::SYNC_LINGER), so a
//!   test can check which barriers wait without depending on how fast the machine is.
//! - `ROUNDTABLE_TEST_WAL_HOLD=<stage>:<marker>`: when the node log reaches `<stage>`
//!   (`checkpoint`: the file systems are flushed and the covered segments not removed yet;
//!   `replay`: start-up has written the replayed records into their files and not removed the
//!   segments yet), it creates the file `<marker>` and stops there for good, so a test can
//!   `kill -9` the server exactly inside a checkpoint or a replay.
//! - `ROUNDTABLE_TEST_PANIC=1`: the `agent-server` method `testPanic` makes the registry actor
//!   panic, to test the panic policy (the process aborts; see `abort_on_panic` in `main.rs`).
//!
//! Production code calls [`check`], [`writer_delay`] and [`sync_linger`]; with the variables
//! unset each is one load of an initialised `OnceLock`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

struct Hooks {
    /// `testPanic` is answered.
    panic_method: bool,
    /// The fault switch file.
    fault_file: Option<PathBuf>,
    /// Sleep before each log-writer batch.
    writer_delay: Option<Duration>,
    /// How long a batch may wait for an expected barrier, instead of `SYNC_LINGER`.
    sync_linger: Option<Duration>,
    /// The node log stage to stop at, and the marker file to create there.
    wal_hold: Option<(String, PathBuf)>,
}

/// The environment variable `name` as a number of milliseconds; `None` when unset or not one.
fn millis_var(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_millis)
}

fn hooks() -> &'static Hooks {
    static HOOKS: OnceLock<Hooks> = OnceLock::new();
    HOOKS.get_or_init(|| Hooks {
        panic_method: std::env::var("ROUNDTABLE_TEST_PANIC").is_ok_and(|v| v == "1"),
        fault_file: std::env::var_os("ROUNDTABLE_TEST_FAULT_FILE").map(PathBuf::from),
        writer_delay: millis_var("ROUNDTABLE_TEST_WRITER_DELAY_MS"),
        sync_linger: millis_var("ROUNDTABLE_TEST_SYNC_LINGER_MS"),
        wal_hold: std::env::var("ROUNDTABLE_TEST_WAL_HOLD")
            .ok()
            .and_then(|v| {
                let (stage, marker) = v.split_once(':')?;
                Some((stage.to_string(), PathBuf::from(marker)))
            }),
    })
}

/// Fails with the injected error while the fault switch is on; `Ok` otherwise (always, in
/// production). `what` and `path` only go into the log line.
pub fn check(what: &str, path: &Path) -> io::Result<()> {
    let Some(switch) = &hooks().fault_file else {
        return Ok(());
    };
    let Ok(text) = std::fs::read_to_string(switch) else {
        return Ok(());
    };
    let text = text.trim();
    if let Some(ms) = text.strip_prefix("SLOW ") {
        let ms = ms.trim().parse().unwrap_or(0);
        log::debug!(
            "test delay of {ms} ms injected into {what} of {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(ms));
        return Ok(());
    }
    let code = match text {
        "ENOSPC" => libc::ENOSPC,
        "EROFS" => libc::EROFS,
        "EDQUOT" => libc::EDQUOT,
        _ => libc::EIO,
    };
    log::debug!("test fault injected into {what} of {}", path.display());
    Err(io::Error::from_raw_os_error(code))
}

/// Sleeps before a log-writer batch when the slow-writer seam is on.
pub fn writer_delay() {
    if let Some(d) = hooks().writer_delay {
        std::thread::sleep(d);
    }
}

/// How long a batch may wait for an expected barrier: `linger`, unless the seam says otherwise.
pub fn sync_linger(linger: Duration) -> Duration {
    hooks().sync_linger.unwrap_or(linger)
}

/// Stops the calling thread for good at node log stage `stage` when the hold seam names it,
/// after creating its marker file (the test then kills the process).
pub fn wal_hold(stage: &str) {
    let Some((held, marker)) = &hooks().wal_hold else {
        return;
    };
    if held != stage {
        return;
    }
    log::warn!("test hold: node log stopped at {stage}");
    let _ = std::fs::write(marker, stage);
    loop {
        std::thread::park();
    }
}

/// Whether the `testPanic` method is enabled.
pub fn test_panic_enabled() -> bool {
    hooks().panic_method
}
