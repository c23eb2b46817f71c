//! The servers under test as child processes: the real `roundtable serve` on a temporary
//! instance directory, or the baseline (this bench executable re-run as `__baseline`, with
//! `--durable DIR` for the durable baseline).
//! Spawning, reading the port from the `listening on ws://127.0.0.1:<port>/` line on stderr and
//! stopping (SIGTERM, then SIGKILL) are `tests/support/server.rs`, shared with the integration
//! tests; this module adds the two kinds of server, the server's RSS and CPU time from `/proc`,
//! `/metrics` counters, and the loopback-only rule for `--url`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::server::{self as child, rss_kb, ChildServer, Stderr};

/// Stderr lines kept for error messages.
const LOG_LINES_KEPT: usize = 200;
/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopped server may take to save and exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Which server a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `roundtable serve`.
    Roundtable,
    /// The actor-free reference server.
    Baseline,
    /// The same, fsyncing each turn's log entries before its completion (`durable.rs`).
    DurableBaseline,
}

impl Kind {
    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Roundtable => "roundtable",
            Kind::Baseline => "baseline",
            Kind::DurableBaseline => "durable baseline",
        }
    }
}

/// How to start a Roundtable server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `roundtable` binary.
    pub bin: PathBuf,
    /// `RUST_LOG` for the server (`None`: inherit the environment, i.e. the server's default).
    pub log_filter: Option<String>,
}

/// A running server child process, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct ServerProcess {
    /// The child, its port, its start times and its stderr tail.
    process: ChildServer,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// When `exec` was called.
    pub spawned_at: Instant,
    /// When the listening line was read.
    pub listening_at: Instant,
}

impl ServerProcess {
    /// Starts `roundtable serve --port 0 --host 127.0.0.1 --instance-dir <dir> <extra…>`.
    pub fn roundtable(
        launch: &Launch,
        instance_dir: &Path,
        extra: &[&str],
    ) -> Result<ServerProcess, String> {
        let mut cmd = child::serve_command(&launch.bin, instance_dir, extra);
        if let Some(filter) = &launch.log_filter {
            cmd.env("RUST_LOG", filter);
        }
        ServerProcess::spawn(cmd, Kind::Roundtable)
    }

    /// Like [`roundtable`](ServerProcess::roundtable), with extra environment variables (the
    /// storage test seams).
    pub fn roundtable_env(
        launch: &Launch,
        instance_dir: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<ServerProcess, String> {
        let mut cmd = child::serve_command(&launch.bin, instance_dir, extra);
        if let Some(filter) = &launch.log_filter {
            cmd.env("RUST_LOG", filter);
        }
        cmd.envs(envs.iter().copied());
        ServerProcess::spawn(cmd, Kind::Roundtable)
    }

    /// Starts the baseline: this executable with `__baseline`; with `durable`, the durable
    /// baseline writing its logs under that directory.
    pub fn baseline(durable: Option<&Path>) -> Result<ServerProcess, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("__baseline");
        let kind = match durable {
            Some(dir) => {
                cmd.arg("--durable").arg(dir);
                Kind::DurableBaseline
            }
            None => Kind::Baseline,
        };
        ServerProcess::spawn(cmd, kind)
    }

    fn spawn(cmd: Command, kind: Kind) -> Result<ServerProcess, String> {
        let stderr = Stderr {
            keep: Some(LOG_LINES_KEPT),
            echo: false,
        };
        let what = format!("{} server", kind.name());
        let process = ChildServer::spawn(cmd, &what, START_TIMEOUT, stderr)?;
        Ok(ServerProcess {
            port: process.port,
            spawned_at: process.spawned_at,
            listening_at: process.listening_at,
            process,
        })
    }

    /// `ws://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        self.process.url()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Resident set size in KB, while it runs.
    pub fn rss_kb(&self) -> Option<u64> {
        rss_kb(self.pid())
    }

    /// The last stderr lines, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// Crashes it: SIGKILL, no chance to save anything (the `crash` scenario).
    pub fn kill_9(mut self) {
        self.process.kill();
    }

    /// Stops it: SIGTERM (Roundtable saves its registry), SIGKILL after [`STOP_GRACE`].
    pub fn stop(mut self) {
        self.process.terminate(STOP_GRACE);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.process.terminate(STOP_GRACE);
    }
}

/// CPU time (user + system) a process has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the ')'.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / if hz > 0 { hz as f64 } else { 100.0 })
}

/// Samples a process's RSS every 50 ms on a thread until finished or dropped; keeps the peak.
pub struct RssSampler {
    peak: Arc<Mutex<u64>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling `pid` (`None`: nothing to sample, the peak stays 0).
    pub fn start(pid: Option<u32>) -> RssSampler {
        let peak = Arc::new(Mutex::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = pid.map(|pid| {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(kb) = rss_kb(pid) {
                        let mut p = peak.lock().expect("peak lock");
                        *p = (*p).max(kb);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        });
        RssSampler { peak, stop, thread }
    }

    /// Stops and returns the peak in KB (`None` if nothing was sampled).
    pub fn finish(mut self) -> Option<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let peak = *self.peak.lock().expect("peak lock");
        (peak > 0).then_some(peak)
    }
}

impl Drop for RssSampler {
    /// A sampler abandoned without [`RssSampler::finish`] (a scenario that failed) stops too.
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One counter from the server's Prometheus `/metrics` (blocking; loopback only).
pub fn metric(port: u16, name: &str) -> Option<f64> {
    let (_, body) = child::http_get(port, "/metrics", Duration::from_secs(5)).ok()?;
    child::metric_value(&body, name)
}

/// Checks that `url` is `ws://` to a loopback address (127.0.0.0/8, `localhost`, `[::1]`) and
/// returns the port. Load goes nowhere else.
pub fn check_loopback(url: &str) -> Result<u16, String> {
    let rest = url
        .strip_prefix("ws://")
        .ok_or_else(|| format!("--url must start with ws:// (got {url:?})"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!("--url must not carry credentials (got {url:?})"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("bad IPv6 address in --url {url:?}"))?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(format!(
            "refusing --url {url:?}: the load harness only targets loopback addresses \
             (127.0.0.0/8, localhost, [::1])"
        ));
    }
    match port {
        None | Some("") => Ok(80),
        Some(p) => p.parse().map_err(|_| format!("bad port in --url {url:?}")),
    }
}
