//! MCP servers that misbehave on purpose, the configuration and process side (issue 49's
//! finding 8): tool definitions that cannot be offered (too deep, nameless, twice, a schema
//! that is no object) skip that tool only; a server name that could be routed wrongly is
//! refused; stdio servers get an allowlisted environment; no child is left a zombie. The
//! resource bounds are `mcp_hostile.rs`.

use serde_json::{json, Value};

use super::mcp_hostile::{desktop_json, hostile, last_text, mcp_status, model};
use crate::harness::{binary, eventually, Server, WAIT};
use crate::support::mcp::servers;

/// A tools/list with a tool nested 120 levels deep (past serde_json's recursion limit), a
/// tool listed twice, one without a name and one whose schema is not an object: each of them
/// is skipped with a warning naming it, the rest are offered and called.
#[test]
fn bad_tool_definitions_skip_that_tool_only() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), json!({"hostile": hostile(&s, "schemas", &[])}));
    let model = model(|text| match text {
        "echo" => vec![("hostile__echo", json!({"text": "fine"}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    for warning in [
        "MCP server hostile: tool \"deep\" skipped: it is nested more than 100 levels deep",
        "MCP server hostile: tool \"dup\" skipped: listed twice",
        "MCP server hostile: a tool without a name skipped",
        "MCP server hostile: tool \"notobject\" skipped: its input schema is not a JSON object",
    ] {
        server.wait_log(warning);
    }
    let (mut a, id) = server.joined("schemas");
    let answer = last_text(&a.run_turn(&id, "echo"));
    assert!(answer.contains("echo: fine"), "{answer}");
    let bodies = model.bodies.lock().unwrap().clone();
    let mut offered: Vec<String> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .filter(|n| n.starts_with("hostile__"))
        .collect();
    offered.sort();
    assert_eq!(
        offered,
        [
            "hostile__dup",
            "hostile__echo",
            "hostile__env",
            "hostile__ok",
            "hostile__stats"
        ]
    );
    assert_eq!(mcp_status(&mut a, &id, "hostile")["tools"], 5);
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
