//! MCP servers that misbehave on purpose (`tests/mcp/hostile_server.py`, one mode per way of
//! hurting a client, from issue 49's review): each test runs the real server against one mode
//! and checks that the server's peak RSS stays under [`PEAK_RSS_KB`], that it still serves
//! (another conversation's turn, the server's other tools) and that the status says what
//! happened. The configuration and process side (names, secrets, environment, children) is
//! `mcp_hostile_config.rs`.

use serde_json::{json, Value};

use crate::harness::{
    clientio, dispatcher, eventually, planned_tool_calls, scripted, tool_results_answer, Client,
    ScriptedHttp, Server,
};
use crate::support::mcp::{servers, HttpServer, McpServers};

/// The peak RSS the server may reach against any hostile mode (the review's modes grew it
/// to gigabytes; a server with a conversation and an MCP server connected stays well under
/// 100 MB).
pub const PEAK_RSS_KB: u64 = 300 * 1024;

/// The stdio entry of `hostile_server.py MODE PARAMS…`.
pub fn hostile(s: &McpServers, mode: &str, params: &[&str]) -> Value {
    let mut args = vec![json!(s.hostile), json!(mode)];
    args.extend(params.iter().map(|p| json!(p)));
    json!({"command": s.python, "args": args})
}

/// Writes `{"mcpServers": servers}` to `dir/mcp.json`; its path.
pub fn desktop_json(dir: &std::path::Path, servers: Value) -> String {
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path.display().to_string()
}

/// A model that calls the tools `plan` gives for a user message's text (in one response),
/// and answers anything else with `results: <the tool messages>`.
pub fn model(
    plan: impl Fn(&str) -> Vec<(&'static str, Value)> + Send + Sync + 'static,
) -> ScriptedHttp {
    scripted(move |_, body| {
        planned_tool_calls(body, &plan).unwrap_or_else(|| tool_results_answer(body))
    })
}

/// The `getStatus` entry (`mcpServers`) of MCP server `name`, asked in conversation `id`.
pub fn mcp_status(client: &mut Client, id: &str, name: &str) -> Value {
    let status = client
        .invoke(&dispatcher(id), "getStatus", json!([]))
        .unwrap();
    status["mcpServers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no MCP server {name} in {status}"))
}

/// The text of the last `appendDisplay` of a turn.
pub fn last_text(calls: &[(String, Value)]) -> String {
    Client::texts(calls).last().cloned().unwrap_or_default()
}

/// The server still serves: a turn in a new conversation is answered, and its peak RSS
/// stayed under [`PEAK_RSS_KB`].
pub fn still_serves_within_bounds(server: &Server) {
    let (mut c, id) = server.joined("bystander");
    let answer = last_text(&c.run_turn(&id, "are you there?"));
    assert!(answer.starts_with("results: "), "{answer}");
    let peak = server.peak_rss_kb();
    assert!(
        peak < PEAK_RSS_KB,
        "peak RSS {peak} KiB, more than {PEAK_RSS_KB} KiB"
    );
}

/// Endless `tools/list` pages: the listing stops at 256 tools (the server connects with
/// them), memory stays bounded.
#[test]
fn endless_tool_pages_stop_at_the_tool_cap() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), json!({"hostile": hostile(&s, "pages", &[])}));
    let model = model(|_| vec![]);
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    server.wait_log(
        "MCP server hostile: tools past the first 256 not read: at most 256 tools per server",
    );
    let (mut a, id) = server.joined("pages");
    let status = mcp_status(&mut a, &id, "hostile");
    assert_eq!(status["tools"], 256, "{status}");
    still_serves_within_bounds(&server);
}

/// `tools/list_changed`, then a `tools/list` that never ends (endless pages) or never
/// answers: the refresh stops at the tool cap, or times out after the server's `timeout`
/// and says so in the status; the tools listed before stay offered.
#[test]
fn a_tool_list_change_into_endless_pages_is_bounded() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut hang = hostile(&s, "changed_pages", &["hang=1"]);
    hang["timeout"] = json!(2);
    let config = desktop_json(
        dir.path(),
        json!({"pages": hostile(&s, "changed_pages", &[]), "hang": hang}),
    );
    let model = model(|text| match text {
        "change" => vec![("pages__change", json!({})), ("hang__change", json!({}))],
        "echo" => vec![("hang__echo", json!({"text": "still here"}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server pages: connected (");
    server.wait_log("MCP server hang: connected (");
    let (mut a, id) = server.joined("changes");
    let answer = last_text(&a.run_turn(&id, "change"));
    assert!(answer.contains("changed"), "{answer}");
    eventually("the endless refresh to stop at the tool cap", || {
        mcp_status(&mut a, &id, "pages")["tools"] == 256
    });
    eventually("the unanswered refresh to time out", || {
        let state = mcp_status(&mut a, &id, "hang")["state"].clone();
        state
            .as_str()
            .unwrap()
            .contains("; the tool list was not refreshed: tools/list gave no answer within 2 s")
    });
    // The tools listed before are still offered and called.
    assert_eq!(mcp_status(&mut a, &id, "hang")["tools"], 4);
    let answer = last_text(&a.run_turn(&id, "echo"));
    assert!(answer.contains("echo: still here"), "{answer}");
    still_serves_within_bounds(&server);
}

/// 100,000 `tools/list_changed` at once: one refresh runs at a time, the notifications that
/// come meanwhile ask for one more, so the server sees a few `tools/list`, not 100,000.
#[test]
fn a_flood_of_list_changed_is_coalesced() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({"hostile": hostile(&s, "changed_flood", &["count=100000"])}),
    );
    let model = model(|text| match text {
        "flood" => vec![("hostile__flood", json!({}))],
        "stats" => vec![("hostile__stats", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("flood");
    let answer = last_text(&a.run_turn(&id, "flood"));
    assert!(answer.contains("flooded"), "{answer}");
    // The server counts the tools/list requests it got.
    let stats = last_text(&a.run_turn(&id, "stats"));
    let key = "{\\\"lists\\\": ";
    let start = stats.find(key).expect("the counts") + key.len();
    let end = start + stats[start..].find(',').unwrap();
    let lists: u64 = stats[start..end].parse().unwrap();
    assert!(
        lists < 1_000,
        "{lists} tools/list for 100,000 notifications"
    );
    still_serves_within_bounds(&server);
}

/// A server that writes hundreds of MB to stderr without a newline, as a `\r` progress bar
/// does: the reader keeps a bounded line (each `\r` starts it over), the server connects
/// and its tools work.
#[test]
fn stderr_without_newlines_is_read_in_bounded_lines() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bytes = format!("stderr_bytes={}", 350 << 20);
    let config = desktop_json(
        dir.path(),
        json!({"hostile": hostile(&s, "stderr", &[&bytes, "cr=1"])}),
    );
    let model = model(|text| match text {
        "echo" => vec![("hostile__echo", json!({"text": "after the bar"}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("stderr");
    let answer = last_text(&a.run_turn(&id, "echo"));
    assert!(answer.contains("echo: after the bar"), "{answer}");
    // Each `\r` overwrote the line: no line was logged, none grew past the bound.
    assert!(!server.log().contains("MCP server hostile stderr: "));
    still_serves_within_bounds(&server);
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

/// How many of the server's elicitations were answered `cancel` (its `stats` tool).
fn cancelled_elicitations(client: &mut Client, id: &str) -> u64 {
    let stats = last_text(&client.run_turn(id, "stats"));
    let key = "\\\"cancel\\\": ";
    stats.find(key).map_or(0, |at| {
        let rest = &stats[at + key.len()..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()]
            .parse()
            .unwrap()
    })
}

/// 400 elicitations of 400 KB during one call (160 MB): past the few a call may have waiting
/// they are cancelled at once, so nothing of them is held (the peak RSS grows by far less
/// than was sent); the call's time-out closes the open form (`interactionCancelled`) and
/// cancels the rest, and the turn ends.
#[test]
fn an_elicitation_flood_is_cancelled_past_the_per_call_cap() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut flood = hostile(&s, "elicit_flood", &["count=400", "message_bytes=400000"]);
    flood["timeout"] = json!(3);
    let config = desktop_json(dir.path(), json!({"hostile": flood}));
    let model = model(|text| match text {
        "flood" => vec![("hostile__flood", json!({}))],
        "stats" => vec![("hostile__stats", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("elicit");
    let before = server.peak_rss_kb();
    let rid = Client::request_id(&a.submit(&id, "flood"));
    let io = clientio(&id);
    let q = a.expect_call(&io, "requestInteraction");
    let asked = q[0]["interactionId"].clone();
    // The message is cut to what a form shows.
    let message = q[0]["form"]["message"].as_str().unwrap();
    assert!(message.chars().count() <= 1000, "{}", message.len());
    let withdrawn = a.expect_call(&io, "interactionCancelled");
    assert_eq!(withdrawn[0], asked);
    let answer = last_text(&a.until_complete(&id, &rid));
    assert!(answer.contains("did not answer within 3 s"), "{answer}");
    let snapshot = a
        .invoke(&dispatcher(&id), "getQueueSnapshot", json!([]))
        .unwrap();
    assert_eq!(snapshot["running"], Value::Null, "{snapshot}");
    eventually("every elicitation to be answered `cancel`", || {
        cancelled_elicitations(&mut a, &id) == 400
    });
    let grown = server.peak_rss_kb().saturating_sub(before);
    assert!(
        grown < 40 * 1024,
        "the peak RSS grew by {grown} KiB during a 160 MB flood"
    );
    still_serves_within_bounds(&server);
}

/// A server that elicits and never answers the call: the form goes when the call times out
/// (every client gets `interactionCancelled`), the turn is not left blocked on it, and the
/// next request runs at once.
#[test]
fn an_open_elicitation_ends_with_its_call() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut ask = hostile(&s, "elicit_hang", &["count=6"]);
    ask["timeout"] = json!(2);
    let config = desktop_json(dir.path(), json!({"hostile": ask}));
    let model = model(|text| match text {
        "ask" => vec![("hostile__ask", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("hang");
    let mut b = server.connect();
    b.join(&id);
    let io = clientio(&id);
    let rid = Client::request_id(&a.submit(&id, "ask"));
    let q = b.expect_call(&io, "requestInteraction");
    assert_eq!(q[0]["form"]["message"], "hostile asks: question 1");
    let started = std::time::Instant::now();
    let withdrawn = b.expect_call(&io, "interactionCancelled");
    assert_eq!(withdrawn[0], q[0]["interactionId"]);
    let answer = last_text(&a.until_complete(&id, &rid));
    assert!(
        answer.contains("hostile__ask did not answer within 2 s"),
        "{answer}"
    );
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    // A late answer to the withdrawn form changes nothing.
    answer_form(
        &mut b,
        &id,
        &q,
        json!({"answers": {"ok": {"kind": "yesNo", "value": true}}}),
    );
    let next = last_text(&a.run_turn(&id, "next"));
    assert!(next.starts_with("results: "), "{next}");
    still_serves_within_bounds(&server);
}

/// 100,000 progress notifications in one call: every client gets at most one status frame
/// per coalescing interval (the newest text), and a client that reads nothing meanwhile is
/// not closed as a slow consumer.
#[test]
fn progress_floods_are_coalesced() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({"hostile": hostile(&s, "progress", &["count=100000"])}),
    );
    let model = model(|text| match text {
        "progress" => vec![("hostile__progress", json!({}))],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("progress");
    // `b` reads nothing while the call runs.
    let mut b = server.connect();
    b.join(&id);
    let started = std::time::Instant::now();
    let rid = Client::request_id(&a.submit(&id, "progress"));
    let calls = a.until_complete(&id, &rid);
    let elapsed = started.elapsed();
    let statuses: Vec<&Value> = calls
        .iter()
        .filter(|(m, args)| m == "appendDisplay" && args[1] == "temporary")
        .map(|(_, args)| args)
        .collect();
    // One per 100 ms at most, and the first one at once.
    let bound = (elapsed.as_millis() / 100) as usize + 2;
    assert!(
        statuses.len() <= bound,
        "{} status frames in {elapsed:?}",
        statuses.len()
    );
    let text = statuses.last().unwrap()[0]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(text.starts_with("hostile__progress: "), "{text}");
    // `b` reads everything now, and was never closed.
    let answer = last_text(&b.until_complete(&id, &rid));
    assert!(answer.contains("done"), "{answer}");
    assert_eq!(b.close_code(), None);
    still_serves_within_bounds(&server);
}

/// The total length of the `image_url`s of a model request body.
fn image_bytes(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter_map(|p| p["image_url"]["url"].as_str())
        .map(str::len)
        .sum()
}

/// A tool that answers 3 × 4 MiB images every time, called at each of a turn's 5 model calls:
/// each model request carries at most the turn's image budget, 16 MiB (older images are
/// dropped from later calls, the model and the clients are told; before, the requests grew
/// by 12 MiB a call), memory stays bounded.
#[test]
fn tool_images_have_a_per_turn_budget() {
    let Some(s) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(dir.path(), json!({"hostile": hostile(&s, "images", &[])}));
    // A turn that asked to "look" calls the tool at every model call; others are answered.
    let model = scripted(|_, body| {
        let messages = body["messages"].as_array().unwrap();
        let asked = messages.iter().find(|m| m["role"] == "user").unwrap();
        if asked["content"] != "look" {
            return tool_results_answer(body);
        }
        let calls = json!([{"id": format!("c{}", messages.len()), "type": "function",
            "function": {"name": "hostile__images", "arguments": "{}"}}]);
        (
            200,
            crate::harness::completion(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
            ),
        )
    });
    let server = Server::with_model(
        &model,
        "m",
        &["--mcp-config", &config, "--max-iterations", "5"],
    );
    server.wait_log("MCP server hostile: connected (");
    let (mut a, id) = server.joined("images");
    let calls = a.run_turn(&id, "look");
    let texts = Client::texts(&calls).join("\n");
    assert!(texts.contains("Stopped after 5 model calls"), "{texts}");
    assert!(
        texts.contains("older images of this turn are not sent to the model again"),
        "{texts}"
    );
    let bodies = model.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 5);
    for (i, body) in bodies.iter().enumerate() {
        let bytes = image_bytes(body);
        assert!(
            bytes <= 16 << 20,
            "request {i} carries {bytes} bytes of images"
        );
    }
    // The newest images are the ones sent; the dropped ones are named in their place.
    let last = bodies.last().unwrap().to_string();
    assert!(
        last.contains("not sent again: the turn's images passed"),
        "…"
    );
    drop(bodies);
    still_serves_within_bounds(&server);
}

/// A result over the 16 MiB message bound, over Streamable HTTP (a JSON answer, an SSE event)
/// and over stdio (a line): that call is an error result saying so at once, and the next
/// call on the same transport works; no server is restarted.
#[test]
fn a_result_over_the_bound_fails_that_call_only() {
    let Some(s) = servers() else { return };
    let big = format!("result_bytes={}", 20 << 20);
    let json_web = HttpServer::hostile(&s, "big", &[&big]);
    let sse_web = HttpServer::hostile(&s, "big", &[&big, "sse=1"]);
    let dir = tempfile::tempdir().unwrap();
    let config = desktop_json(
        dir.path(),
        json!({"web": {"url": json_web.url}, "sse": {"url": sse_web.url},
               "pipe": hostile(&s, "big", &[&big])}),
    );
    let model = model(|text| match text {
        "big" => vec![
            ("web__big", json!({})),
            ("web__echo", json!({"text": "json after"})),
            ("sse__big", json!({})),
            ("sse__echo", json!({"text": "sse after"})),
            ("pipe__big", json!({})),
            ("pipe__echo", json!({"text": "stdio after"})),
        ],
        _ => vec![],
    });
    let server = Server::with_model(&model, "m", &["--mcp-config", &config]);
    for name in ["web", "sse", "pipe"] {
        server.wait_log(&format!("MCP server {name}: connected ("));
    }
    let (mut a, id) = server.joined("big");
    let started = std::time::Instant::now();
    let answer = last_text(&a.run_turn(&id, "big"));
    for name in ["web", "sse", "pipe"] {
        assert!(
            answer.contains(&format!(
                "ERROR: MCP server `{name}` answered more than 16 MiB"
            )),
            "{answer}"
        );
        assert_eq!(
            server
                .log()
                .matches(&format!("MCP server {name}: connected ("))
                .count(),
            1
        );
        assert!(mcp_status(&mut a, &id, name)["state"]
            .as_str()
            .unwrap()
            .starts_with("connected"));
    }
    for after in ["echo: json after", "echo: sse after", "echo: stdio after"] {
        assert!(answer.contains(after), "{answer}");
    }
    // At once, not at the call's time-out (60 s).
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    still_serves_within_bounds(&server);
}
