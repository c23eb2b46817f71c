//! The server under test: the real `roundtable serve` on `127.0.0.1:0` and a temporary (or
//! given) instance directory, killed when the test drops it. Spawning, the port, the log and
//! stopping are `tests/support/server.rs`, shared with the load harness; this adds the test's
//! ways to start it, its HTTP endpoints and a connected [`Client`].

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use serde_json::json;

use super::{eventually, Client, WAIT};
use crate::support::server::{self as child, ChildServer, Stderr};

/// A running server process.
pub struct Server {
    /// The child process, its port and its stderr.
    process: ChildServer,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its instance directory.
    pub dir: PathBuf,
    /// The temporary instance directory, deleted after the process is killed (fields drop in
    /// order, after `Drop::drop`).
    _temp: Option<tempfile::TempDir>,
}

/// Path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_roundtable")
}

impl Server {
    /// Starts a server on a fresh temporary instance directory.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_env(extra, &[])
    }

    /// Starts a server on `dir` and waits for its startup line.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Server {
        Server::try_start_in(dir, extra).unwrap_or_else(|log| panic!("{log}"))
    }

    /// Like `start_in`, but returns the server's output when it exits instead of listening.
    pub fn try_start_in(dir: &Path, extra: &[&str]) -> Result<Server, String> {
        Server::try_start_env(dir, extra, &[])
    }

    /// Starts a server on a fresh temporary directory with extra environment variables.
    pub fn start_env(extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let temp = tempfile::tempdir().unwrap();
        let mut s =
            Server::try_start_env(temp.path(), extra, envs).unwrap_or_else(|log| panic!("{log}"));
        s._temp = Some(temp);
        s
    }

    /// A server on `dir` with the storage layer's fault switch at `dir/fault` (returned):
    /// while that file names an errno (`ENOSPC`, `EROFS`, `EIO`), every storage write, fsync,
    /// rename and directory creation fails with it; removing the file is the disk recovering.
    pub fn start_with_fault_switch(dir: &Path) -> (Server, PathBuf) {
        let switch = dir.join("fault");
        let server = Server::try_start_env(
            dir,
            &[],
            &[(
                "ROUNDTABLE_TEST_FAULT_FILE",
                switch.to_str().expect("UTF-8 path"),
            )],
        )
        .unwrap_or_else(|log| panic!("{log}"));
        (server, switch)
    }

    /// Like `try_start_in`, with extra environment variables for the server process.
    /// `ROUNDTABLE_TEST_RUST_LOG` sets the server's `RUST_LOG` (default `info`) unless `envs`
    /// sets it (a test that waits on a `debug` line); `ROUNDTABLE_TEST_LOG` echoes its log on
    /// the test's stderr.
    pub fn try_start_env(
        dir: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Server, String> {
        Server::try_start_with(dir, extra, envs, |_| {})
    }

    /// Like [`Server::try_start_env`], with `customize` given the server's command last (a
    /// test that starts it under a resource limit).
    pub fn try_start_with(
        dir: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
        customize: impl FnOnce(&mut std::process::Command),
    ) -> Result<Server, String> {
        let mut cmd = child::serve_command(Path::new(binary()), dir, extra);
        cmd.env(
            "RUST_LOG",
            std::env::var("ROUNDTABLE_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .envs(envs.iter().copied());
        customize(&mut cmd);
        let stderr = Stderr {
            keep: None,
            echo: std::env::var_os("ROUNDTABLE_TEST_LOG").is_some(),
        };
        let process = ChildServer::spawn(cmd, "roundtable server", WAIT, stderr)?;
        Ok(Server {
            port: process.port,
            process,
            dir: dir.to_path_buf(),
            _temp: None,
        })
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Waits until the server logs a line containing `what`: for an event it reports only
    /// in its log (a grace timer firing). The harness runs it at `info` unless
    /// `ROUNDTABLE_TEST_RUST_LOG` says otherwise.
    pub fn wait_log(&self, what: &str) {
        eventually(&format!("the server to log {what:?}"), || {
            self.log().contains(what)
        });
    }

    /// Waits until the server's log holds `what` at least `n` times: for an event it reports
    /// only in its log that happens once per socket (each of `n` connections closing its
    /// channels).
    pub fn wait_log_count(&self, what: &str, n: usize) {
        eventually(&format!("the server to log {what:?} {n} times"), || {
            self.log().matches(what).count() >= n
        });
    }

    /// `ws://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        self.process.url()
    }

    /// A connected protocol client.
    pub fn connect(&self) -> Client {
        Client::connect(&self.url())
    }

    /// A client joined to a conversation it just created as `name`; with the new id.
    pub fn joined(&self, name: &str) -> (Client, String) {
        let mut client = self.connect();
        let id = client.create(name);
        client.join(&id);
        (client, id)
    }

    /// Sends `shutdown` and waits for the process to exit.
    pub fn shutdown(mut self) -> ExitStatus {
        self.stop()
    }

    /// Like [`Server::shutdown`], keeping the handle: its log can be read afterwards.
    pub fn stop(&mut self) -> ExitStatus {
        let mut c = self.connect();
        let _ = c.agent("shutdown", json!([]));
        self.wait_exit()
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self) -> ExitStatus {
        match self.process.wait_exit(WAIT) {
            Some(status) => status,
            None => {
                self.process.kill();
                panic!("server did not exit; log:\n{}", self.log());
            }
        }
    }

    /// Kills the process without any shutdown (a crash).
    pub fn kill(mut self) {
        self.process.kill();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The server's resident set size in KiB (from `/proc/<pid>/status`).
    pub fn rss_kb(&self) -> u64 {
        child::rss_kb(self.pid()).expect("VmRSS")
    }

    /// The server's peak resident set size in KiB (`VmHWM`, since it started).
    pub fn peak_rss_kb(&self) -> u64 {
        child::peak_rss_kb(self.pid()).expect("VmHWM")
    }

    /// A plain HTTP GET; returns (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        child::http_get(self.port, path, WAIT).unwrap()
    }

    /// Reads one Prometheus figure from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.http_get("/metrics");
        child::metric_value(&body, name)
            .unwrap_or_else(|| panic!("metric {name} missing in\n{body}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// Sends a raw HTTP request and returns (status, body).
pub fn http_request(port: u16, request: &str) -> (u16, String) {
    child::http_request(port, request, WAIT).unwrap()
}
