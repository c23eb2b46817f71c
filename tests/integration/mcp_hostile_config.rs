//! MCP servers that misbehave on purpose, the configuration and process side (issue 49's
//! finding 8): tool definitions that cannot be offered (too deep, nameless, twice, a schema
//! that is no object) skip that tool only; stdio servers get an allowlisted environment; no
//! child is left a zombie. The resource bounds are `mcp_hostile.rs`.

use serde_json::{json, Value};

use super::mcp_hostile::{desktop_json, hostile, last_text, mcp_status, model};
use crate::harness::{eventually, Server};
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
