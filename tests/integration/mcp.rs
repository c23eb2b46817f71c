//! MCP servers against real servers from the package registries (`.ci/run` installs them into
//! `tests/mcp/`): `@modelcontextprotocol/server-everything` over stdio and Streamable HTTP,
//! `mcp-server-time`, and `tests/mcp/fixture_server.py` on the official Python SDK. A scripted
//! OpenAI-compatible model calls their tools end to end over real sockets.

use std::path::Path;

use serde_json::{json, Value};

use crate::harness::{
    binary, clientio, dispatcher, eventually, planned_tool_calls, scripted, tool_results_answer,
    Call, Client, ScriptedHttp, Server,
};
use crate::support::mcp::{servers, EverythingHttp, McpServers};

/// A model that answers a user message by calling the tools `plan` gives for its text (in
/// one response), and anything else (tool results) with `results: <the tool messages as
/// JSON>`. Every request body is kept in `bodies`.
fn model(
    plan: impl Fn(&str) -> Vec<(&'static str, Value)> + Send + Sync + 'static,
) -> ScriptedHttp {
    scripted(move |_, body| {
        planned_tool_calls(body, &plan).unwrap_or_else(|| tool_results_answer(body))
    })
}

/// The names of the tools a model request offered.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `{"mcpServers": servers}` to `dir/mcp.json`; its path.
fn desktop_json(dir: &Path, servers: Value) -> String {
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path.display().to_string()
}

/// The stdio entries of the registry servers and the fixture.
fn stdio_entries(s: &McpServers) -> Value {
    json!({
        "everything": {"command": s.everything, "args": ["stdio"]},
        "time": {"command": s.time, "args": ["--local-timezone", "UTC"], "env": {"MCP_TEST_SECRET": "env-secret-value"}},
        "fixture": {"command": s.python, "args": [s.fixture]},
    })
}

/// The text of the last `appendDisplay` among `calls`.
fn last_text(calls: &[Call]) -> String {
    Client::texts(calls).last().cloned().unwrap_or_default()
}

/// How many times the log says `what`.
fn log_count(server: &Server, what: &str) -> usize {
    server.log().matches(what).count()
}

/// Tools of the registry servers over stdio and Streamable HTTP, called end to end from the
/// desktop JSON config: text, numbers, structured content, an image (passed to the model as
/// an image), resource links; `@system config agents` lists each server with its state,
/// transport and tool count; secrets in env and headers are never shown.
#[test]
fn registry_servers_are_called_over_stdio_and_http() {
    let Some(s) = servers() else { return };
    let web = EverythingHttp::start(&s);
    let dir = tempfile::tempdir().unwrap();
    let mut entries = stdio_entries(&s);
    entries["web"] =
        json!({"url": web.url, "headers": {"Authorization": "Bearer header-secret-value"}});
    entries["broken"] = json!({"command": "/nonexistent/mcp-server"});
    let config = desktop_json(dir.path(), entries);
    let model = model(|text| match text {
        "use the tools" => vec![
            ("everything__echo", json!({"message": "hi there"})),
            ("time__get_current_time", json!({"timezone": "UTC"})),
            ("web__get-sum", json!({"a": 2, "b": 3})),
            (
                "web__get-structured-content",
                json!({"location": "New York"}),
            ),
            ("everything__get-tiny-image", json!({})),
            ("everything__get-resource-links", json!({"count": 2})),
        ],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    for name in ["everything", "time", "web", "fixture"] {
        server.wait_log(&format!("MCP server {name}: connected ("));
    }
    server.wait_log("MCP server broken: cannot start `/nonexistent/mcp-server`");
    let (mut a, id) = server.joined("mcp");
    // `getStatus` lists each MCP server among the agents, active while connected.
    let status = a.invoke(&dispatcher(&id), "getStatus", json!([])).unwrap();
    let active = |name: &str| {
        status["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .map(|a| a["active"].clone())
    };
    assert_eq!(active("chat"), Some(json!(true)), "{status}");
    assert_eq!(active("everything"), Some(json!(true)), "{status}");
    assert_eq!(active("broken"), Some(json!(false)), "{status}");
    let calls = a.run_turn(&id, "use the tools");
    let answer = last_text(&calls);
    assert!(answer.contains("Echo: hi there"), "{answer}");
    assert!(answer.contains(r#"\"timezone\": \"UTC\""#), "{answer}");
    assert!(answer.contains("The sum of 2 and 3 is 5."), "{answer}");
    assert!(answer.contains("temperature"), "{answer}");
    assert!(answer.contains("[image 1 (image/png)]"), "{answer}");
    assert!(answer.contains("[resource link: "), "{answer}");
    let bodies = model.bodies.lock().unwrap().clone();
    let first = offered(&bodies[0]);
    for tool in [
        "everything__echo",
        "time__get_current_time",
        "web__get-sum",
        "fixture__wait",
    ] {
        assert!(first.contains(&tool.to_string()), "{tool} not in {first:?}");
    }
    // The tool's image reaches the model as an image, after the tool messages.
    let second = bodies[1]["messages"].as_array().unwrap();
    let image_part = second
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].is_array())
        .flat_map(|m| m["content"].as_array().unwrap())
        .find(|p| p["type"] == "image_url")
        .expect("the image is sent to the model");
    assert!(image_part["image_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));
    // The schemas are passed as the server gives them.
    let echo = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "everything__echo")
        .unwrap();
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"],
        "string"
    );

    let agents = Client::texts(&a.run_turn(&id, "@system config agents")).join("\n");
    assert!(
        agents.contains("- MCP server `everything`: connected (pid "),
        "{agents}"
    );
    assert!(
        agents.contains(&format!("; stdio: {} stdio; ", s.everything.display())),
        "{agents}"
    );
    assert!(
        agents.contains(&format!(
            "- MCP server `web`: connected; Streamable HTTP: {}; ",
            web.url
        )),
        "{agents}"
    );
    assert!(agents.contains("`time__get_current_time`"), "{agents}");
    assert!(
        agents.contains(
            "- MCP server `broken`: failed: cannot start `/nonexistent/mcp-server`: No such file \
             or directory (os error 2); restarting in "
        ),
        "{agents}"
    );
    assert!(
        agents.contains("; stdio: /nonexistent/mcp-server; 0 tools"),
        "{agents}"
    );
    let config_text = Client::texts(&a.run_turn(&id, "@system config")).join("\n");
    assert!(config_text.contains("- MCP servers:\n"), "{config_text}");
    let log = server.log();
    for secret in ["header-secret-value", "env-secret-value"] {
        assert!(!agents.contains(secret) && !config_text.contains(secret) && !log.contains(secret));
    }
}

/// A stdio server killed in the middle of a call: the model gets an `is_error` result naming
/// the server (the turn goes on and finishes), the server is started again, and the next
/// call works. Progress notifications reach the clients as a temporary status meanwhile.
#[test]
fn killed_stdio_server_restarts_and_the_call_is_an_error_result() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({"everything": {"command": s.everything, "args": ["stdio"]}}),
    );
    let model = model(|text| match text {
        "long" => vec![(
            "everything__trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
        )],
        "echo" => vec![("everything__echo", json!({"message": "back"}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server everything: connected (pid ");
    let log = server.log();
    let pid: i32 = log
        .split("MCP server everything: connected (pid ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (mut a, id) = server.joined("restart");
    let ack = a.submit(&id, "long");
    let rid = Client::request_id(&ack);
    // Progress: a temporary status naming the tool and the step.
    let status = a.expect_call(&clientio(&id), "appendDisplay");
    let status = if status[1] == "temporary" {
        status
    } else {
        loop {
            let c = a.expect_call(&clientio(&id), "appendDisplay");
            if c[1] == "temporary" {
                break c;
            }
        }
    };
    let text = status[0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with("everything__trigger-long-running-operation: 1/60"),
        "{text}"
    );
    assert_eq!(status[0]["message"]["kind"], "status");
    // SAFETY: kill(2) on the server's child, whose pid the server logged.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let calls = a.until_complete(&id, &rid);
    let answer = last_text(&calls);
    assert!(
        answer.contains("ERROR: MCP server `everything` stopped during the call"),
        "{answer}"
    );
    assert!(calls
        .iter()
        .any(|(m, args)| m == "appendDisplay" && args[0]["toolResult"]["isError"] == true));
    assert!(calls
        .iter()
        .any(|(m, args)| m == "notify" && args[1] == "commandComplete"));
    eventually("the server to be started again", || {
        log_count(&server, "MCP server everything: connected (pid ") == 2
    });
    assert!(server
        .log()
        .contains("MCP server everything: the connection closed"));
    let answer = last_text(&a.run_turn(&id, "echo"));
    assert!(answer.contains("Echo: back"), "{answer}");
}

/// Answers the form interaction `q` on `client` with `answers` (a `QuestionFormResponse`).
fn answer_form(client: &mut Client, id: &str, q: &Value, answers: Value) {
    client
        .invoke(
            &dispatcher(id),
            "respondToInteraction",
            json!([{"interactionId": q[0]["interactionId"], "type": "form", "value": answers}]),
        )
        .unwrap();
}

/// An elicitation from a server is asked as one form of every client of the conversation and
/// answered by another client than the one that sent the request; the answer goes back to
/// the server (its tool result says what it got).
#[test]
fn elicitation_is_answered_from_a_second_client() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), stdio_entries(&s));
    let model = model(|text| match text {
        "pick" => vec![("fixture__pick_color", json!({}))],
        "everything" => vec![("everything__trigger-elicitation-request", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server fixture: connected (");
    server.wait_log("MCP server everything: connected (");
    let (mut a, id) = server.joined("elicit");
    let mut b = server.connect();
    b.join(&id);
    let io = clientio(&id);

    // The fixture's enum and boolean: one form, a pick and a yes/no.
    let rid = Client::request_id(&a.submit(&id, "pick"));
    let q = b.expect_call(&io, "requestInteraction");
    assert_eq!(q[0]["type"], "form");
    assert_eq!(q[0]["form"]["message"], "fixture asks: Pick a color");
    assert_eq!(
        q[0]["form"]["fields"],
        json!([
            {"id": "color", "kind": "pick", "prompt": "Which color?", "choices": ["red", "green", "blue"]},
            {"id": "final", "kind": "yesNo", "prompt": "Is that final?"}
        ])
    );
    answer_form(
        &mut b,
        &id,
        &q,
        json!({"answers": {"color": {"kind": "pick", "selected": 2}, "final": {"kind": "yesNo", "value": true}}}),
    );
    let answer = last_text(&a.until_complete(&id, &rid));
    assert!(
        answer.contains("accepted: color=blue final=True"),
        "{answer}"
    );

    // server-everything's form: free text (a required name, an email), a number out of
    // range asked again with what was wrong, defaults for what was left empty.
    let rid = Client::request_id(&a.submit(&id, "everything"));
    let q = b.expect_call(&io, "requestInteraction");
    let fields = q[0]["form"]["fields"].as_array().unwrap().clone();
    assert_eq!(fields.len(), 13, "{fields:?}");
    let name = fields.iter().find(|f| f["id"] == "name").unwrap();
    assert_eq!(
        *name,
        json!({"id": "name", "kind": "pick", "prompt": "Your full, legal name", "choices": [],
               "allowFreeText": true, "freeTextPlaceholder": "text"})
    );
    let integer = fields.iter().find(|f| f["id"] == "integer").unwrap();
    assert!(integer["freeTextPlaceholder"]
        .as_str()
        .unwrap()
        .starts_with("a whole number from 1 to 100 (empty: 42)"));
    let text = |t: &str| json!({"kind": "pick", "selected": -1, "text": t});
    answer_form(
        &mut b,
        &id,
        &q,
        json!({"answers": {"name": text("Ada Lovelace"), "integer": text("500")}}),
    );
    let again = b.expect_call(&io, "requestInteraction");
    let message = again[0]["form"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("Please correct: “Your favorite integer (do not give us your phone number, pin, or other sensitive info)”: 500 is not a whole number from 1 to 100"),
        "{message}"
    );
    answer_form(
        &mut b,
        &id,
        &again,
        json!({"answers": {"name": text("Ada Lovelace"), "integer": text("7"),
                           "email": text("ada@example.org"), "check": {"kind": "yesNo", "value": true}}}),
    );
    let answer = last_text(&a.until_complete(&id, &rid));
    for expected in [
        "User provided the requested information",
        "- Name: Ada Lovelace",
        "- Agreed to terms: true",
        "- Email: ada@example.org",
        "- Favorite Integer: 7",
        "- Favorite Number: 3.14",
        "It was a dark and stormy night.",
        "hero-1",
    ] {
        assert!(answer.contains(expected), "{expected} in {answer}");
    }

    // Dismissed: the server reads `decline`.
    let rid = Client::request_id(&a.submit(&id, "everything"));
    let q = b.expect_call(&io, "requestInteraction");
    b.send_call(
        &dispatcher(&id),
        "cancelInteraction",
        json!([q[0]["interactionId"]]),
    );
    let answer = last_text(&a.until_complete(&id, &rid));
    assert!(
        answer.contains("User declined to provide the requested information"),
        "{answer}"
    );
}

/// Submits `text` with `options.workingDirectory = dir`, as `agent-cli` does; the request id.
fn submit_in(client: &mut Client, id: &str, text: &str, dir: &Path) -> String {
    let ack = client
        .invoke(
            &dispatcher(id),
            "submitCommand",
            json!([text, null, {"workingDirectory": dir}, format!("cr-{}", text.len())]),
        )
        .expect("submitCommand");
    Client::request_id(&ack)
}

/// A request's working directory is the MCP server's root while its call runs: a server
/// that reads its roots (server-everything's `get-roots-list`) sees the directory of the
/// request that called it, percent-encoded as a `file://` URI and named by its last
/// component, and the next request from another directory moves the roots with it.
#[test]
fn the_request_directory_is_the_servers_root() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), stdio_entries(&s));
    let model = model(|text| match text {
        "roots" => vec![("everything__get-roots-list", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    // server-everything asks its roots once after it starts (none: nothing is in flight).
    server.wait_log("MCP server everything: roots/list answered 0 roots");
    let (mut a, id) = server.joined("roots");
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("my project");
    let other = work.path().join("other");
    std::fs::create_dir(&project).unwrap();
    std::fs::create_dir(&other).unwrap();
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();

    let rid = submit_in(&mut a, &id, "roots", &project);
    let answer = last_text(&a.until_complete(&id, &rid));
    let uri = format!("file://{}", canonical(&project).replace(' ', "%20"));
    assert!(answer.contains("Current MCP Roots (1 total)"), "{answer}");
    assert!(answer.contains("1. my project"), "{answer}");
    assert!(answer.contains(&format!("URI: {uri}")), "{uri} in {answer}");

    let rid = submit_in(&mut a, &id, "roots", &other);
    let answer = last_text(&a.until_complete(&id, &rid));
    assert!(answer.contains("1. other"), "{answer}");
    assert!(
        answer.contains(&format!("URI: file://{}", canonical(&other))),
        "{answer}"
    );
}

/// `notifications/tools/list_changed`: a tool the server adds during one turn is offered
/// from the next model call on (seen on the next turn), and can be called; one whose full name
/// would be longer than 64 characters is skipped with a warning naming it.
#[test]
fn list_changed_is_seen_on_the_next_turn() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), stdio_entries(&s));
    let long = "t".repeat(60);
    let long_name = long.clone();
    let model = model(move |text| match text {
        "add" => vec![("fixture__add_tool", json!({"name": "late_tool"}))],
        "add long" => vec![("fixture__add_tool", json!({"name": long_name}))],
        "call it" => vec![("fixture__late_tool", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server fixture: connected (");
    let (mut a, id) = server.joined("changes");
    let answer = last_text(&a.run_turn(&id, "add"));
    assert!(answer.contains("added late_tool"), "{answer}");
    server.wait_log("MCP server fixture: tool list changed: 4 tools offered");
    let answer = last_text(&a.run_turn(&id, "call it"));
    assert!(answer.contains("I am late_tool"), "{answer}");
    let bodies = model.bodies.lock().unwrap().clone();
    assert!(!offered(&bodies[0]).contains(&"fixture__late_tool".to_string()));
    assert!(offered(&bodies[2]).contains(&"fixture__late_tool".to_string()));

    // A tool whose full name would break the 64-character rule is skipped, named in a warning.
    let answer = last_text(&a.run_turn(&id, "add long"));
    assert!(answer.contains(&format!("added {long}")), "{answer}");
    server.wait_log(&format!(
        "MCP server fixture: tool \"{long}\" skipped: \"fixture__{long}\" is not a valid tool name"
    ));
    eventually("the second tool list to be read", || {
        log_count(
            &server,
            "MCP server fixture: tool list changed: 4 tools offered",
        ) == 2
    });
}

/// A cancelled turn sends `notifications/cancelled` for its call (the server sees it), and a
/// call past its server's `timeout` becomes an `is_error` result and is cancelled too.
#[test]
fn cancelled_and_timed_out_calls_are_cancelled_at_the_server() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cancelled = dir.path().join("cancelled-marker");
    let timed = dir.path().join("timed-marker");
    let config = desktop_json(
        dir.path(),
        json!({
            "fixture": {"command": s.python, "args": [s.fixture]},
            "slow": {"command": s.python, "args": [s.fixture], "timeout": 1},
        }),
    );
    let (c, t) = (cancelled.display().to_string(), timed.display().to_string());
    let model = model(move |text| match text {
        "wait" => vec![("fixture__wait", json!({"marker": c}))],
        "slow" => vec![("slow__wait", json!({"marker": t}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server fixture: connected (");
    server.wait_log("MCP server slow: connected (");
    let (mut a, id) = server.joined("cancel");
    let ack = a.submit(&id, "wait");
    let rid = Client::request_id(&ack);
    eventually("the call to start at the server", || cancelled.exists());
    a.invoke(&dispatcher(&id), "cancelCommand", json!([rid]))
        .unwrap();
    let cancelled_at_server = dir.path().join("cancelled-marker.cancelled");
    eventually("the server to see notifications/cancelled", || {
        cancelled_at_server.exists()
    });
    server.wait_log("MCP server fixture: fixture__wait cancelled (the request was cancelled)");

    let answer = last_text(&a.run_turn(&id, "slow"));
    assert!(
        answer.contains(
            "ERROR: slow__wait did not answer within 1 s (the server's `timeout`); the call was \
             cancelled"
        ),
        "{answer}"
    );
    let timed_at_server = dir.path().join("timed-marker.cancelled");
    eventually("the server to see the time-out's cancellation", || {
        timed_at_server.exists()
    });
}

/// The configuration users have: `[mcp.servers.NAME]` in the config file and the desktop
/// JSON, merged; `config show` gives each server's source and hides env and header values; a
/// name in both, and a name too long for its tools, are refused at start with exact errors.
#[test]
fn config_file_tables_and_desktop_json() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("roundtable.toml");
    std::fs::write(
        &toml,
        "port = 0\n\n[mcp.servers.time]\ncommand = \"mcp-server-time\"\nargs = [\"--local-timezone\", \"UTC\"]\nenv = { TZ_TOKEN = \"toml-secret\" }\ntimeout = 5\n",
    )
    .unwrap();
    let json_path = desktop_json(
        dir.path(),
        json!({"remote": {"url": "https://user:pw-secret@example.test/mcp", "headers": {"Authorization": "Bearer json-secret"}}}),
    );
    let bin = binary();
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let instance = dir.path().join("instance");
    let instance = instance.to_str().unwrap();
    let toml_s = toml.to_str().unwrap();
    let out = run(&[
        "config",
        "show",
        "--config",
        toml_s,
        "--instance-dir",
        instance,
        "--mcp-config",
        &json_path,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(shown.contains(
        "mcp.servers.time = { command = \"mcp-server-time\", args = [\"--local-timezone\", \"UTC\"], env = { TZ_TOKEN = \"***\" }, timeout = 5 }"
    ), "{shown}");
    assert!(shown.contains(&format!("# {toml_s}:3")), "{shown}");
    assert!(shown.contains(
        "mcp.servers.remote = { url = \"https://***@example.test/mcp\", headers = { Authorization = \"***\" }, timeout = 60 }"
    ), "{shown}");
    assert!(shown.contains(&format!("# {json_path}")), "{shown}");
    for secret in ["toml-secret", "json-secret", "pw-secret"] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }

    // The same name in both: refused at start, naming both places.
    std::fs::write(
        &json_path,
        json!({"mcpServers": {"time": {"command": "x"}}}).to_string(),
    )
    .unwrap();
    let out = run(&[
        "serve",
        "--config",
        toml_s,
        "--instance-dir",
        instance,
        "--mcp-config",
        &json_path,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .last()
            .unwrap(),
        format!(
            "roundtable: MCP server \"time\" is configured twice: at {toml_s}:3 and in {json_path}"
        )
    );
    // A name that cannot fit NAME__tool in 64 characters.
    let long = "x".repeat(62);
    std::fs::write(
        &json_path,
        json!({"mcpServers": {long.clone(): {"command": "x"}}}).to_string(),
    )
    .unwrap();
    let out = run(&[
        "serve",
        "--instance-dir",
        instance,
        "--mcp-config",
        &json_path,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .last()
            .unwrap(),
        format!(
            "roundtable: --mcp-config {json_path}, server \"{long}\": MCP server name \"{long}\" \
             is 62 characters long; at most 61 fit, as its tools are offered as NAME__tool in at \
             most 64 characters"
        )
    );
    // An unknown key in a [mcp.servers.NAME] table names the file, line and key.
    std::fs::write(&toml, "[mcp.servers.time]\ncommand = \"x\"\nport = 3\n").unwrap();
    let out = run(&["serve", "--config", toml_s, "--instance-dir", instance]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("line 3") && err.contains("unknown field `port`"),
        "{err}"
    );
}

/// Measurements for BENCHMARKS.md (not a pass/fail test; run with
/// `cargo test --release --test integration mcp::measure -- --ignored --nocapture`): the turn
/// latency one MCP tool call adds over stdio and over Streamable HTTP (p50/p99 of N turns
/// against the same turns without a tool call), and the server's RSS per connected stdio
/// server (the children's own RSS is not the server's and is printed apart).
#[test]
#[ignore = "a measurement for BENCHMARKS.md, not a check: run it with --ignored --nocapture"]
fn measure_mcp_call_latency_and_rss() {
    let Some(s) = servers() else { return };
    let web = EverythingHttp::start(&s);
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({
            "everything": {"command": s.everything, "args": ["stdio"]},
            "web": {"url": web.url},
        }),
    );
    let model = model(|text| match text {
        "stdio" => vec![("everything__echo", json!({"message": "x"}))],
        "http" => vec![("web__echo", json!({"message": "x"}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server everything: connected (");
    server.wait_log("MCP server web: connected (");
    let (mut a, id) = server.joined("measure");
    let turns = 300;
    let mut timings = |text: &str| {
        for _ in 0..20 {
            a.run_turn(&id, text);
        }
        let mut ms: Vec<f64> = (0..turns)
            .map(|_| {
                let t = std::time::Instant::now();
                a.run_turn(&id, text);
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        (ms[turns / 2], ms[turns * 99 / 100])
    };
    let none = timings("no tool");
    let stdio = timings("stdio");
    let http = timings("http");
    println!(
        "turn without a tool call: p50 {:.2} ms, p99 {:.2} ms",
        none.0, none.1
    );
    for (name, t) in [("stdio", stdio), ("Streamable HTTP", http)] {
        println!(
            "one MCP call over {name}: turn p50 {:.2} ms (+{:.2}), p99 {:.2} ms (+{:.2})",
            t.0,
            t.0 - none.0,
            t.1,
            t.1 - none.1
        );
    }
    drop(server);

    // RSS: the same server with no MCP server, then with 8 stdio servers connected.
    let base = Server::with_model(&model, "m", &[]);
    let (mut b, bid) = base.joined("rss");
    b.run_turn(&bid, "no tool");
    let base_kb = base.rss_kb();
    drop(base);
    let many: serde_json::Map<String, Value> = (0..8)
        .map(|i| {
            (
                format!("e{i}"),
                json!({"command": s.everything, "args": ["stdio"]}),
            )
        })
        .collect();
    let config = desktop_json(dir.path(), Value::Object(many));
    let loaded = Server::with_model(&model, "m", &["--mcp-config", &config]);
    for i in 0..8 {
        loaded.wait_log(&format!("MCP server e{i}: connected ("));
    }
    let (mut c, cid) = loaded.joined("rss");
    c.run_turn(&cid, "no tool");
    let loaded_kb = loaded.rss_kb();
    let log = loaded.log();
    let child: i32 = log
        .split("MCP server e0: connected (pid ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let child_kb = std::fs::read_to_string(format!("/proc/{child}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap())
        .unwrap();
    println!(
        "server RSS: {base_kb} KiB without MCP servers, {loaded_kb} KiB with 8 stdio servers \
         connected: {:.0} KiB per server (not counting the children; one \
         mcp-server-everything child: {child_kb} KiB)",
        (loaded_kb as f64 - base_kb as f64) / 8.0
    );
}
