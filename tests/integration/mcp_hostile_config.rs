//! MCP servers that misbehave on purpose, the configuration and process side (issue 49's
//! finding 8): tool definitions that cannot be offered (too deep, nameless, twice, a schema
//! that is no object) skip that tool only; a server name that could be routed wrongly is
//! refused; secrets in `args` and URLs are never shown; stdio servers get an allowlisted
//! environment; no child is left a zombie. The resource bounds are `mcp_hostile.rs`.

use serde_json::{json, Value};

use super::mcp_hostile::{desktop_json, hostile, last_text, mcp_status, model};
use crate::harness::{binary, eventually, Client, Server, WAIT};
use crate::support::mcp::{servers, HttpServer};

/// A tools/list with a tool nested 120 levels deep (past serde_json's recursion limit), a
/// tool listed twice, one without a name and one whose schema is not an object, from a stdio
/// server and from a Streamable HTTP one answering in SSE: each of them is skipped with a
/// warning naming it, the rest are offered and called.
#[test]
fn bad_tool_definitions_skip_that_tool_only() {
    let Some(s) = servers() else { return };
    let web = HttpServer::hostile(&s, "schemas", &["sse=1"]);
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({"hostile": hostile(&s, "schemas", &[]), "web": {"url": web.url}}),
    );
    let model = model(|text| match text {
        "echo" => vec![
            ("hostile__echo", json!({"text": "fine"})),
            ("web__echo", json!({"text": "fine too"})),
        ],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    for name in ["hostile", "web"] {
        server.wait_log(&format!("MCP server {name}: connected ("));
        for warning in [
            "tool \"deep\" skipped: it is nested more than 100 levels deep",
            "tool \"dup\" skipped: listed twice",
            "a tool without a name skipped",
            "tool \"notobject\" skipped: its input schema is not a JSON object",
        ] {
            server.wait_log(&format!("MCP server {name}: {warning}"));
        }
    }
    let (mut a, id) = server.joined("schemas");
    let answer = last_text(&a.run_turn(&id, "echo"));
    assert!(answer.contains("echo: fine"), "{answer}");
    assert!(answer.contains("echo: fine too"), "{answer}");
    let bodies = model.bodies.lock().unwrap().clone();
    for name in ["hostile", "web"] {
        let prefix = format!("{name}__");
        let mut offered: Vec<String> = bodies[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .filter_map(|n| n.strip_prefix(&prefix).map(str::to_string))
            .collect();
        offered.sort();
        assert_eq!(offered, ["dup", "echo", "env", "ok", "stats"]);
        assert_eq!(mcp_status(&mut a, &id, name)["tools"], 5);
    }
}

/// `serve` with `--mcp-config FILE`, expected to refuse it: its exit code and the last line
/// of its stderr. A `serve` that starts instead is killed and fails the test.
fn serve_refused(config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(binary())
        .args(["serve", "--port", "0", "--instance-dir"])
        .arg(dir.path())
        .args(["--mcp-config", config])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve started with {config} instead of refusing it");
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let last = stderr.trim_end().lines().last().unwrap_or("").to_string();
    (status.code(), last)
}

/// A server named `h_` would offer its tool `echo` as `h___echo`, which reads as server `h`'s
/// tool `_echo`: refused at start, naming the server.
#[test]
fn server_names_ending_in_an_underscore_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), json!({"h_": {"command": "x"}}));
    let (code, last) = serve_refused(&config);
    assert_eq!(code, Some(2));
    assert_eq!(
        last,
        format!(
            "roundtable: --mcp-config {config}, server \"h_\": MCP server name \"h_\" must match \
             ^[a-zA-Z0-9_-]+$ without \"__\" and not end in \"_\" (its tools are offered as \
             NAME__tool)"
        )
    );
}

/// Secrets in a stdio server's `args` (`--api-key VALUE`, `--token=VALUE`, `KEY=VALUE`) and
/// in an HTTP server's URL (`?api_key=`) appear nowhere: not in `getStatus`, `@system
/// config`, `@system config agents`, `config show`, nor the log (rmcp's own lines included).
#[test]
fn secrets_in_args_and_urls_are_never_shown() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut stdio = hostile(
        &s,
        "plain",
        &[
            "--api-key",
            "sk-arg-secret-1",
            "--token=tok-arg-secret-2",
            "API_KEY=env-style-secret-3",
        ],
    );
    stdio["env"] = json!({"GIVEN": "given-secret-5"});
    let config = desktop_json(
        dir.path(),
        json!({
            "hostile": stdio,
            "remote": {"url": format!("http://127.0.0.1:{closed}/mcp?api_key=url-secret-4")},
        }),
    );
    let model = model(|_| vec![]);
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    server.wait_log("MCP server remote: ");
    let (mut a, id) = server.joined("secrets");
    eventually("the unreachable server to fail", || {
        mcp_status(&mut a, &id, "remote")["state"]
            .as_str()
            .unwrap()
            .starts_with("failed: ")
    });
    let status = mcp_status(&mut a, &id, "hostile");
    assert_eq!(
        status["transport"],
        format!(
            "stdio: {} {} plain --api-key *** --token=*** API_KEY=***",
            s.python.display(),
            s.hostile.display()
        )
    );
    let status = a
        .invoke(&crate::harness::dispatcher(&id), "getStatus", json!([]))
        .unwrap()
        .to_string();
    let agents = Client::texts(&a.run_turn(&id, "@system config agents")).join("\n");
    let config_text = Client::texts(&a.run_turn(&id, "@system config")).join("\n");
    let out = std::process::Command::new(binary())
        .args(["config", "show", "--instance-dir"])
        .arg(dir.path().join("other"))
        .args(["--mcp-config", &config])
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        shown.contains("--api-key\", \"***\", \"--token=***\", \"API_KEY=***\""),
        "{shown}"
    );
    let log = server.log();
    for (what, text) in [
        ("getStatus", &status),
        ("@system config agents", &agents),
        ("@system config", &config_text),
        ("config show", &shown),
        ("the log", &log),
    ] {
        for secret in [
            "sk-arg-secret-1",
            "tok-arg-secret-2",
            "env-style-secret-3",
            "url-secret-4",
            "given-secret-5",
        ] {
            assert!(!text.contains(secret), "{secret} in {what}:\n{text}");
        }
    }
}

/// A stdio server gets HOME, PATH and the like and its own `env`, not the server's
/// environment (its token, the model's key, anything else set there).
#[test]
fn stdio_servers_get_an_allowlisted_environment() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut entry = hostile(&s, "plain", &[]);
    entry["env"] = json!({"GIVEN_TO_IT": "yes"});
    let config = desktop_json(dir.path(), json!({"hostile": entry}));
    let model = model(|text| match text {
        "env" => vec![("hostile__env", json!({}))],
        _ => vec![],
    });
    let server = Server::start_env(
        &["--provider", "openai", "--mcp-config", &config],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &model.url),
            ("ROUNDTABLE_OPENAI_MODEL", "m"),
            ("ROUNDTABLE_OPENAI_API_KEY", "model-key-secret"),
            ("MCP_TEST_CANARY", "not for children"),
            ("LANG", "C.UTF-8"),
        ],
    );
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("env");
    let answer = last_text(&a.run_turn(&id, "env"));
    let start = answer.find("[\\\"").expect("a list of names");
    let end = start + answer[start..].find(']').unwrap() + 1;
    let names: Vec<String> =
        serde_json::from_str(&answer[start..end].replace("\\\"", "\"")).unwrap();
    for needed in ["PATH", "HOME", "LANG", "GIVEN_TO_IT"] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} not in {names:?}"
        );
    }
    for kept in [
        "ROUNDTABLE_OPENAI_API_KEY",
        "ROUNDTABLE_OPENAI_BASE_URL",
        "MCP_TEST_CANARY",
        "RUST_LOG",
    ] {
        assert!(!names.iter().any(|n| n == kept), "{kept} in {names:?}");
    }
}

/// The server's children that are zombies (exited, never waited for).
fn zombies_of(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after its `)`.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split(' ').collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&pid.to_string().as_str()) {
            found.push(stat.clone());
        }
    }
    found
}

/// A stdio server killed (and started again by its supervisor), then the whole server, with
/// four stdio servers, restarted in place (`restart`): every child that went is waited for,
/// none is left a zombie of the re-executed process (which knows nothing of them).
#[test]
fn restarts_leave_no_zombies() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Node servers too: they take longer to go than the stopping image used to wait.
    let mut many = serde_json::Map::new();
    many.insert("hostile".into(), hostile(&s, "plain", &[]));
    for i in 0..3 {
        many.insert(
            format!("e{i}"),
            json!({"command": s.everything, "args": ["stdio"]}),
        );
    }
    let config = desktop_json(dir.path(), Value::Object(many));
    let model = model(|_| vec![]);
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (pid ");
    for i in 0..3 {
        server.wait_log(&format!("MCP server e{i}: connected (pid "));
    }
    let child_pid = |n: usize| -> i32 {
        server
            .log()
            .split("MCP server hostile: connected (pid ")
            .nth(n)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // SAFETY: kill(2) on the server's child, whose pid the server logged.
    assert_eq!(unsafe { libc::kill(child_pid(1), libc::SIGKILL) }, 0);
    server.wait_log_count("MCP server hostile: connected (pid ", 2);
    eventually("the killed child to be waited for", || {
        zombies_of(server.pid()).is_empty()
    });
    let mut c = server.connect();
    assert_eq!(c.agent("restart", json!([])), Ok(Value::Null));
    server.wait_log("restarted: serving on the 1 listening socket(s)");
    server.wait_log_count("MCP server hostile: connected (pid ", 3);
    for i in 0..3 {
        server.wait_log_count(&format!("MCP server e{i}: connected (pid "), 2);
    }
    eventually("the children of the stopped image to be waited for", || {
        zombies_of(server.pid()).is_empty()
    });
}
