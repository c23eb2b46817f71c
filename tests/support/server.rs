//! A server under test as a child process, for the integration tests' `Server` and the load
//! harness's `ServerProcess`: building the `roundtable serve` command line, spawning it, reading
//! its port from the `listening on ws://127.0.0.1:<port>/` line on stderr, keeping its stderr
//! lines for error messages, and stopping it (SIGKILL for a crash, SIGTERM then SIGKILL for a
//! clean stop). Also the `/proc` and plain-HTTP reads both make of a running server.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server prints on stderr once it accepts connections; the port follows.
const LISTENING: &str = "listening on ws://127.0.0.1:";

/// How often [`ChildServer::wait_exit`] and [`ChildServer::terminate`] look at the child:
/// there is no event for a child's exit short of blocking in `wait`, which cannot time out.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// `<bin> serve --port 0 --host 127.0.0.1 --instance-dir <dir> <extra…>`, with the environment
/// variables that would override those flags (or turn on a token, a provider, a config file,
/// cluster settings and credentials or the systemd protocol) removed, so the developer's shell
/// cannot change what is under test. A node (`--cluster` in `extra`) gets
/// `--cluster-secret-file` with [`cluster_secret_file`] unless `extra` names one: every node
/// of a test shares it, as a real cluster's nodes do.
pub fn serve_command(bin: &Path, instance_dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "serve",
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--instance-dir",
    ])
    .arg(instance_dir)
    .args(extra);
    if extra.contains(&"--cluster") && !extra.contains(&"--cluster-secret-file") {
        cmd.arg("--cluster-secret-file").arg(cluster_secret_file());
    }
    cmd.env_remove("ROUNDTABLE_TOKEN")
        .env_remove("ROUNDTABLE_PORT")
        .env_remove("ROUNDTABLE_PROVIDER")
        .env_remove("ROUNDTABLE_CONFIG")
        .env_remove("ROUNDTABLE_CLUSTER_NAME")
        .env_remove("ROUNDTABLE_CLUSTER_REPLICAS")
        .env_remove("ROUNDTABLE_CLUSTER_USER")
        .env_remove("ROUNDTABLE_CLUSTER_PASSWORD")
        .env_remove("ROUNDTABLE_CLUSTER_TOKEN")
        .env_remove("ROUNDTABLE_CLUSTER_CREDS")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("JOURNAL_STREAM");
    cmd
}

/// The cluster secret file of the nodes this process starts (mode 0600, in a directory of
/// its own under the system's temporary directory), made once.
pub fn cluster_secret_file() -> &'static Path {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("roundtable-test-secret-")
            .tempdir()
            .expect("a directory for the cluster secret")
            .keep();
        let file = dir.join("cluster-secret");
        std::fs::write(
            &file,
            format!("test cluster secret {}\n", std::process::id()),
        )
        .expect("the cluster secret written");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            .expect("the cluster secret made private");
        file
    })
}

/// What to do with the child's stderr lines besides finding the port.
#[derive(Debug, Clone, Copy)]
pub struct Stderr {
    /// Keep at most this many (the newest); `None` keeps all. The tests search the whole log;
    /// the harness's servers run long and only show a tail when they fail.
    pub keep: Option<usize>,
    /// Also print each line as `server: <line>` (a test run with `ROUNDTABLE_TEST_LOG`).
    pub echo: bool,
}

/// A server child process that printed its listening line.
pub struct ChildServer {
    /// The process; reaped by [`ChildServer::kill`], [`ChildServer::terminate`] or
    /// [`ChildServer::wait_exit`], after which signalling it is a no-op.
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// When `spawn` was called (the harness's startup scenario measures from here).
    pub spawned_at: Instant,
    /// When the listening line was read.
    pub listening_at: Instant,
    /// Its stderr lines so far; the reader thread keeps appending for the server's whole life.
    log: Arc<Mutex<VecDeque<String>>>,
}

impl ChildServer {
    /// Spawns `cmd` (stdin and stdout closed, stderr read) and waits up to `start_timeout` for
    /// the listening line. `Err` names the server (`what`) and carries its output when it exits
    /// or stays silent instead; the child is then killed.
    pub fn spawn(
        mut cmd: Command,
        what: &str,
        start_timeout: Duration,
        stderr: Stderr,
    ) -> Result<ChildServer, String> {
        let spawned_at = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the {what}: {e}"))?;
        let pipe = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (port_tx, port_rx) = mpsc::channel();
        let kept = log.clone();
        // Keep draining stderr for the server's whole life: a full pipe would stall it. The
        // channel closes when the server's stderr does, i.e. when it exits.
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if stderr.echo {
                    eprintln!("server: {line}");
                }
                let port = port_tx.as_ref().and_then(|_| listening_port(&line));
                {
                    let mut kept = kept.lock().expect("log lock");
                    if stderr.keep == Some(kept.len()) {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
                // The line is in the log before the caller learns the port.
                if let (Some(port), Some(tx)) = (port, port_tx.as_ref()) {
                    let _ = tx.send((port, Instant::now()));
                    port_tx = None;
                }
            }
        });
        let outcome = port_rx.recv_timeout(start_timeout);
        let mut server = ChildServer {
            child,
            port: 0,
            spawned_at,
            listening_at: spawned_at,
            log,
        };
        match outcome {
            Ok((port, listening_at)) => {
                server.port = port;
                server.listening_at = listening_at;
                Ok(server)
            }
            Err(why) => {
                server.kill();
                let why = match why {
                    mpsc::RecvTimeoutError::Timeout => "no listening line in time",
                    mpsc::RecvTimeoutError::Disconnected => "it exited",
                };
                Err(format!(
                    "the {what} did not start ({why}):\n{}",
                    server.log()
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

    /// Every kept stderr line, joined with newlines.
    pub fn log(&self) -> String {
        self.log_tail(usize::MAX)
    }

    /// The last `n` kept stderr lines, joined with newlines.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().expect("log lock");
        let skip = log.len().saturating_sub(n);
        log.iter()
            .skip(skip)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits up to `timeout` for the process to exit on its own; `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(EXIT_POLL);
        }
    }

    /// SIGKILL, no chance to save anything (a crash), and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (Roundtable saves its registry and exits), then SIGKILL if it has not exited
    /// after `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        // Reaped already: the pid may belong to someone else now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own, not yet reaped, child's pid; no memory is touched.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        if self.wait_exit(grace).is_none() {
            self.kill();
        }
    }
}

/// The port in a `listening on ws://127.0.0.1:<port>/` line, `None` for any other line.
pub fn listening_port(line: &str) -> Option<u16> {
    let rest = line.split(LISTENING).nth(1)?;
    rest.split('/').next()?.parse().ok()
}

/// `VmRSS` of a process in KB, from `/proc/<pid>/status`; `None` once it is gone.
pub fn rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

/// `VmHWM` of a process in KB (its peak resident set size since it started or was
/// re-executed), from `/proc/<pid>/status`; `None` once it is gone.
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmHWM:")
}

/// The KB figure of `field` (`VmRSS:`) in `/proc/<pid>/status`.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Sends the raw HTTP/1.1 `request` to 127.0.0.1:`port` and reads until the server closes (or
/// `timeout` passes between reads); returns (status, body). Status 0 when the answer does not
/// parse. Only connecting and sending can fail: what was read before a read error is returned.
pub fn http_request(port: u16, request: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// `GET <path>` with `Connection: close`; (status, body).
pub fn http_get(port: u16, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    http_request(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        timeout,
    )
}

/// The value of the sample `name` (no labels) in a Prometheus text body.
pub fn metric_value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}
