//! A real `nats-server -js` (Debian's package) on loopback for the cluster tests and the load
//! harness's `cluster` scenario: its own JetStream store in a temporary directory, a port the
//! kernel picks at first start and the same port (and store) on restart, killed on drop.

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

/// Whether `nats-server` can be run here.
pub fn available() -> bool {
    Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl NatsServer {
    /// Starts `nats-server -js` on a free port. Panics with what to install when the binary is
    /// missing (CI installs Debian's `nats-server`; the cluster tests are not optional).
    pub fn start() -> NatsServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let store = temp.path().join("jetstream");
        let mut server = NatsServer {
            child: None,
            port: 0,
            store,
            log: Arc::default(),
            config: None,
            _temp: temp,
        };
        server.spawn(None);
        server
    }

    /// Like [`NatsServer::start`], with `config` as its config file (`nats_auth.rs` writes
    /// authorization, TLS and operator settings).
    pub fn start_with_config(config: &str) -> NatsServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let store = temp.path().join("jetstream");
        let file = temp.path().join("nats.conf");
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
        let mut command = Command::new("nats-server");
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
                panic!("cannot run nats-server ({e}): install Debian's nats-server package")
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

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
