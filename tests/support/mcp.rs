//! The real MCP servers the tests start, installed by `.ci/run` into `tests/mcp/`:
//! `@modelcontextprotocol/server-everything` (npm, `tests/mcp/node_modules`), `mcp-server-time`
//! and the official Python SDK (pip, `tests/mcp/venv`), `tests/mcp/fixture_server.py`, and
//! `tests/mcp/hostile_server.py` (the standard library only: a server that misbehaves on
//! purpose, one mode per misbehaviour).
//! Missing under CI (`CI` set) is a failure; elsewhere the test is skipped with the reason
//! (see [`skip`](super::skip)).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Paths of the installed servers.
pub struct McpServers {
    /// `mcp-server-everything` (argument `stdio` or `streamableHttp`).
    pub everything: PathBuf,
    /// `mcp-server-time`.
    pub time: PathBuf,
    /// The venv's Python, to run [`McpServers::fixture`].
    pub python: PathBuf,
    /// `tests/mcp/fixture_server.py`.
    pub fixture: PathBuf,
    /// `tests/mcp/hostile_server.py` (run with [`McpServers::python`]).
    pub hostile: PathBuf,
}

/// The installed servers, or `None` (after saying why) when they are missing outside CI.
pub fn servers() -> Option<McpServers> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    let servers = McpServers {
        everything: dir.join("node_modules/.bin/mcp-server-everything"),
        time: dir.join("venv/bin/mcp-server-time"),
        python: dir.join("venv/bin/python"),
        fixture: dir.join("fixture_server.py"),
        hostile: dir.join("hostile_server.py"),
    };
    let missing: Vec<String> = [&servers.everything, &servers.time, &servers.python]
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return Some(servers);
    }
    let how = "install them: (cd tests/mcp && npm ci && python3 -m venv venv && \
               venv/bin/pip install -r requirements.txt)";
    super::skip::skip(&format!(
        "MCP test servers missing ({}); {how}",
        missing.join(", ")
    ));
    None
}

/// An MCP server over Streamable HTTP on a loopback port, started by the test (not by the
/// server under test); killed on drop.
pub struct HttpServer {
    /// The process.
    child: Child,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

/// `mcp-server-everything streamableHttp`.
pub type EverythingHttp = HttpServer;

impl HttpServer {
    /// `mcp-server-everything streamableHttp` on a free loopback port, once it listens.
    pub fn start(servers: &McpServers) -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut command = Command::new(&servers.everything);
        command.arg("streamableHttp").env("PORT", port.to_string());
        let (child, _) = HttpServer::spawn(command, "mcp-server-everything");
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    /// `hostile_server.py MODE --http PARAMS…` on the port it picks, once it listens.
    pub fn hostile(servers: &McpServers, mode: &str, params: &[&str]) -> HttpServer {
        let mut command = Command::new(&servers.python);
        command
            .arg(&servers.hostile)
            .arg(mode)
            .arg("--http")
            .args(params);
        let (child, line) = HttpServer::spawn(command, "hostile_server.py");
        let port: u16 = line
            .rsplit(' ')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    /// Spawns `command` and waits for its "listening on port" line on stderr (returned);
    /// its stderr is drained from then on, so it never blocks on a full pipe.
    fn spawn(mut command: Command, what: &str) -> (Child, String) {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let listening = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("{what} exited before listening"))
                .unwrap();
            if line.contains("listening on port") {
                break line;
            }
        };
        std::thread::spawn(move || for _ in lines {});
        (child, listening)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
