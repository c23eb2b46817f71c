//! The real MCP servers the tests start, installed by `.ci/run` into `tests/mcp/`:
//! `@modelcontextprotocol/server-everything` (npm, `tests/mcp/node_modules`), `mcp-server-time`
//! and the official Python SDK (pip, `tests/mcp/venv`), and `tests/mcp/fixture_server.py`.
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
}

/// The installed servers, or `None` (after saying why) when they are missing outside CI.
pub fn servers() -> Option<McpServers> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    let servers = McpServers {
        everything: dir.join("node_modules/.bin/mcp-server-everything"),
        time: dir.join("venv/bin/mcp-server-time"),
        python: dir.join("venv/bin/python"),
        fixture: dir.join("fixture_server.py"),
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

/// `mcp-server-everything streamableHttp` on a free loopback port; killed on drop.
pub struct EverythingHttp {
    /// The process.
    child: Child,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

impl EverythingHttp {
    /// Starts it and waits for its "listening on port" line.
    pub fn start(servers: &McpServers) -> EverythingHttp {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(&servers.everything)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcp-server-everything starts");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        loop {
            let line = lines
                .next()
                .expect("mcp-server-everything exited before listening")
                .unwrap();
            if line.contains("listening on port") {
                break;
            }
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        EverythingHttp {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
