//! The servers under test as child processes: the real `roundtable serve` on a temporary
//! instance directory, or the baseline (this bench executable re-run as `__baseline`). Owns
//! spawning, reading the port from the `listening on ws://127.0.0.1:<port>/` line on stderr,
//! the server's RSS from `/proc/<pid>/status`, `/metrics` counters, and stopping (SIGTERM, then
//! SIGKILL). Also owns the loopback-only rule for `--url`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Stderr lines kept for error messages.
const LOG_LINES_KEPT: usize = 200;
/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Which server a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `roundtable serve`.
    Roundtable,
    /// The actor-free reference server.
    Baseline,
}

impl Kind {
    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Roundtable => "roundtable",
            Kind::Baseline => "baseline",
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

/// A running server child process.
pub struct ServerProcess {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// When `exec` was called.
    pub spawned_at: Instant,
    /// When the listening line was read.
    pub listening_at: Instant,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl ServerProcess {
    /// Starts `roundtable serve --port 0 --host 127.0.0.1 --instance-dir <dir> <extra…>`.
    pub fn roundtable(
        launch: &Launch,
        instance_dir: &Path,
        extra: &[&str],
    ) -> Result<ServerProcess, String> {
        let mut cmd = Command::new(&launch.bin);
        cmd.args([
            "serve",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--instance-dir",
        ])
        .arg(instance_dir)
        .args(extra)
        .env_remove("ROUNDTABLE_TOKEN")
        .env_remove("ROUNDTABLE_PORT")
        .env_remove("ROUNDTABLE_PROVIDER");
        if let Some(filter) = &launch.log_filter {
            cmd.env("RUST_LOG", filter);
        }
        ServerProcess::spawn(cmd, Kind::Roundtable)
    }

    /// Starts the baseline: this executable with `__baseline`.
    pub fn baseline() -> Result<ServerProcess, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("__baseline");
        ServerProcess::spawn(cmd, Kind::Baseline)
    }

    fn spawn(mut cmd: Command, kind: Kind) -> Result<ServerProcess, String> {
        let spawned_at = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the {} server: {e}", kind.name()))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (port_tx, port_rx) = mpsc::channel();
        let log2 = log.clone();
        // Keep draining stderr for the server's whole life: a full pipe would stall it.
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on ws://127.0.0.1:").nth(1) {
                    if let (Some(tx), Some(port)) = (
                        port_tx.as_ref(),
                        rest.split('/').next().and_then(|p| p.parse::<u16>().ok()),
                    ) {
                        let _ = tx.send((port, Instant::now()));
                        port_tx = None;
                    }
                }
                let mut log = log2.lock().expect("log lock");
                if log.len() == LOG_LINES_KEPT {
                    log.pop_front();
                }
                log.push_back(line);
            }
        });
        match port_rx.recv_timeout(START_TIMEOUT) {
            Ok((port, listening_at)) => Ok(ServerProcess {
                child,
                port,
                spawned_at,
                listening_at,
                log,
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let log = log.lock().expect("log lock");
                Err(format!(
                    "the {} server did not start:\n{}",
                    kind.name(),
                    log.iter().cloned().collect::<Vec<_>>().join("\n")
                ))
            }
        }
    }

    /// `ws://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in KB, while it runs.
    pub fn rss_kb(&self) -> Option<u64> {
        rss_kb(self.pid())
    }

    /// The last stderr lines, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().expect("log lock");
        let skip = log.len().saturating_sub(n);
        log.iter()
            .skip(skip)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Crashes it: SIGKILL, no chance to save anything (the `crash` scenario).
    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it: SIGTERM (Roundtable saves its registry), SIGKILL after 10 s.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// `VmRSS` of a process in KB.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
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

/// Samples a process's RSS every 50 ms on a thread until dropped; keeps the peak.
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

/// One counter from the server's Prometheus `/metrics` (blocking; loopback only).
pub fn metric(port: u16, name: &str) -> Option<f64> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
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
