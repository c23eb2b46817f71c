//! TypeAgent's own CLI, command for command (issue 15): the exact strings `agent-cli` sends
//! with `submitCommand` on `dispatcher:<id>` for `run request | translate | explain` (the
//! `@dispatcher` family) and for `/help`, `/history`, `/session`, `/config`, `/agents` and
//! `/trace` (the `@system` family), each answer's text, their completion, and a request sent
//! after another client deleted the conversation.

use serde_json::{json, Value};

use crate::harness::*;

/// A 1×1 PNG, base64, as `agent-cli run request <text> <file>` attaches a file.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// Submits `text` as TypeAgent's client library does (all five arguments) and collects the
/// clientio calls until it completes.
fn cli_submit(c: &mut Client, id: &str, text: &str, attachments: Value) -> Vec<Call> {
    let ack = c
        .invoke(
            &dispatcher(id),
            "submitCommand",
            json!([text, attachments, null, format!("cli-{}", text.len()), null]),
        )
        .expect("submitCommand");
    c.until_complete(id, &Client::request_id(&ack))
}

/// What the request showed, one display per line.
fn shown(calls: &[Call]) -> String {
    Client::texts(calls).join("\n")
}

/// The `lastError` of the request's `commandComplete` (Null when it succeeded).
fn last_error(calls: &[Call]) -> Value {
    calls.last().expect("calls").1[2]["result"]["lastError"].clone()
}

/// The `kind` of the request's displays.
fn kinds(calls: &[Call]) -> Vec<Value> {
    calls
        .iter()
        .filter(|(m, a)| m == "appendDisplay" && a[0]["requestId"]["requestId"] != "system")
        .map(|(_, a)| a[0]["message"]["kind"].clone())
        .collect()
}

/// `@dispatcher request <text>` runs `<text>` exactly as if it were submitted bare (a turn, an
/// `@` command); `translate` / `explain` are dry runs; the turn's messages then show in
/// `@system history`, and a bad count is a clear error.
#[test]
fn dispatcher_family_runs_requests_and_dry_runs() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("CLI");
    let calls = cli_submit(&mut a, &id, "@dispatcher request what is 2+3", Value::Null);
    // The result once: the builtin does not repeat it as its answer (issue 50 (b)).
    assert_eq!(shown(&calls), "calculate({\"expression\":\"2+3\"})\n5");
    assert_eq!(last_error(&calls), Value::Null);
    let user = calls.iter().find(|(m, _)| m == "setUserRequest").unwrap();
    assert_eq!(user.1[1], "@dispatcher request what is 2+3");

    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher request @conversation list",
        Value::Null,
    );
    let action = calls
        .iter()
        .find(|(m, _)| m == "takeAction")
        .expect("takeAction");
    assert_eq!(action.1[1], "manage-conversation");
    assert_eq!(action.1[2], json!({"subcommand": "list"}));

    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher translate what is 2+3",
        Value::Null,
    );
    let text = shown(&calls);
    assert!(text.contains("\"tool\": \"calculate\""), "{text}");
    assert!(text.contains("\"expression\": \"2+3\""), "{text}");
    let calls = cli_submit(&mut a, &id, "@dispatcher explain what is 2+3", Value::Null);
    let text = shown(&calls);
    assert!(
        text.starts_with(
            "To handle \"what is 2+3\", the assistant would first:\n- call `calculate`"
        ),
        "{text}"
    );
    // TypeAgent's own form (agent-cli's `run explain "<request> => <action>"`): the given
    // translation is explained, each value traced to the request's words; malformed input
    // gets TypeAgent's text, as an error.
    let calls = cli_submit(
        &mut a,
        &id,
        r#"@dispatcher explain Time in tokyo, twice => [chat.get_current_time({"timezone":"Tokyo"}), phone.ring({"times":2})]"#,
        Value::Null,
    );
    assert_eq!(
        shown(&calls),
        "Explanation of \"Time in tokyo, twice\":\n\
         - `chat.get_current_time`: the tool `get_current_time` (offered in this conversation)\n\
         \x20 - `timezone` = \"Tokyo\": from the request's words \"tokyo\"\n\
         - `phone.ring`: the tool `phone__ring` (not offered in this conversation)\n\
         \x20 - `times` = 2: not in the request's words (inferred)\n"
    );
    assert_eq!(last_error(&calls), Value::Null);
    // TypeAgent's explain flags (its `ExplainCommandHandler`): taken off the text, never
    // explained as words of the request; a bad value is an exact error.
    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher explain --repeat 2 --filterValueInRequest what is 2+3 --concurrency 1",
        Value::Null,
    );
    let text = shown(&calls);
    assert!(
        text.starts_with(
            "Repeated 2 times with concurrency 1: 2 of 2 succeeded.\n\nTo handle \"what is \
             2+3\", the assistant would first:\n- call `calculate`"
        ),
        "{text}"
    );
    let calls = cli_submit(
        &mut a,
        &id,
        r#"@dispatcher explain Time in tokyo => chat.get_current_time({"timezone":"Tokyo"}) --filterReference"#,
        Value::Null,
    );
    assert!(
        shown(&calls).starts_with("Explanation of \"Time in tokyo\":\n"),
        "{}",
        shown(&calls)
    );
    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher explain what is 2+3 --repeat lots",
        Value::Null,
    );
    assert_eq!(
        last_error(&calls),
        "Invalid value 'lots' for flag '--repeat': expected a positive integer"
    );
    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher explain stop => pause",
        Value::Null,
    );
    let text = shown(&calls);
    assert!(
        text.starts_with("Missing '('. Input must be in the form of"),
        "{text}"
    );
    assert_eq!(last_error(&calls), json!(text));
    let calls = cli_submit(&mut a, &id, "@dispatcher request", Value::Null);
    assert_eq!(
        shown(&calls),
        "Give a request: @dispatcher request <request>"
    );
    assert_eq!(kinds(&calls), [json!("warning")]);

    // Only the request that ran is in the agent's history: user, tool call, result (the
    // builtin says nothing more, and an empty answer is not kept).
    let calls = cli_submit(&mut a, &id, "@system history", Value::Null);
    assert_eq!(
        shown(&calls),
        "Chat history: the last 3 of 3 messages\n\
         #1 user: what is 2+3\n\
         #2 assistant: → calculate {\"expression\":\"2+3\"}\n\
         #3 tool calculate: 5"
    );
    let calls = cli_submit(&mut a, &id, "@system history 1", Value::Null);
    assert_eq!(
        shown(&calls),
        "Chat history: the last 1 of 3 messages\n#3 tool calculate: 5"
    );
    let calls = cli_submit(&mut a, &id, "@system history lots", Value::Null);
    let error = "@system history: N must be a whole number above 0, got \"lots\"";
    assert_eq!(shown(&calls), error);
    assert_eq!(kinds(&calls), [json!("error")]);
    assert_eq!(last_error(&calls), error);
}

/// `agent-cli run request <text> <file>`: the attachment reaches the model with the text; the
/// history keeps a note of it, not the image. `@system config` names the provider and model.
#[test]
fn dispatcher_request_passes_attachments_to_the_model() {
    let model = scripted(|_, _| {
        (
            200,
            completion(json!({"role": "assistant", "content": "a small square"})),
        )
    });
    let server = Server::with_model(&model, "vision-model", &["--max-iterations", "7"]);
    let (mut a, id) = server.joined("CLI");
    let calls = cli_submit(
        &mut a,
        &id,
        "@dispatcher request what is in this picture?",
        json!([PNG]),
    );
    assert_eq!(shown(&calls), "a small square");
    let body = model.bodies.lock().unwrap().last().cloned().unwrap();
    let user = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        user,
        json!({"role": "user", "content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
        ]})
    );
    let calls = cli_submit(&mut a, &id, "@system history", Value::Null);
    let text = shown(&calls);
    assert!(
        text.contains(
            "#1 user: what is in this picture?\n    \
             [image attachment (image/png, 70 bytes), not kept in the history]"
        ),
        "{text}"
    );

    let calls = cli_submit(&mut a, &id, "@system config", Value::Null);
    let text = shown(&calls);
    for part in [
        "- Provider: openai, model `vision-model`",
        "- Max model calls per turn: 7",
        "- MCP servers: none",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    let calls = cli_submit(&mut a, &id, "@system config show", Value::Null);
    assert_eq!(shown(&calls), text);
}

/// `/session`: id, name (after a rename too), persist directory, creation time, messages,
/// the joined clients and the provider.
#[test]
fn system_session_is_true_after_a_rename() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("before");
    let mut b = server.connect();
    b.join(&id);
    let created = a.agent("listConversations", json!(["before"])).unwrap()[0]["createdAt"]
        .as_str()
        .unwrap()
        .to_string();
    a.run_turn(&id, "hello");
    let calls = cli_submit(&mut a, &id, "@system session", Value::Null);
    let text = shown(&calls);
    let dir = server.dir.join("conversations").join(&id);
    for part in [
        format!("- Id: `{id}`"),
        "- Name: \"before\"".to_string(),
        format!("- Persist directory: `{}`", dir.display()),
        format!("- Created: {created}"),
        "- Messages: 2 requests in the display log, 2 in the chat history".to_string(),
        "- Clients joined: 2 (connections 0, 1)".to_string(),
        "- Provider: builtin (offline rules, no model)".to_string(),
    ] {
        assert!(text.contains(&part), "{part:?} not in {text}");
    }
    b.agent("renameConversation", json!([id, "after", null]))
        .unwrap();
    b.close();
    // The leave is known to the conversation once the others see its notice.
    while a.expect_call(&clientio(&id), "appendDisplay")[0]["message"]["content"]
        != "[A client has left this conversation.]"
    {}
    let calls = cli_submit(&mut a, &id, "@system session info", Value::Null);
    let text = shown(&calls);
    assert!(text.contains("- Name: \"after\""), "{text}");
    assert!(
        text.contains("- Clients joined: 1 (connections 0)"),
        "{text}"
    );
}

/// `/help`, `/config`, `/agents` and an unknown `/…`: the command list (the same as `@help`),
/// the settings, the tools with their availability, and a clear "not supported" line.
#[test]
fn system_help_config_agents_and_unsupported() {
    let server = Server::start(&["--idle-timeout", "42"]);
    let (mut a, id) = server.joined("CLI");
    let help = shown(&cli_submit(&mut a, &id, "@system help", Value::Null));
    for command in [
        "@dispatcher",
        "@system",
        "@conversation",
        "@compact",
        "history [N]",
    ] {
        assert!(help.contains(command), "{command} not in {help}");
    }
    assert_eq!(shown(&cli_submit(&mut a, &id, "@help", Value::Null)), help);

    let text = shown(&cli_submit(&mut a, &id, "@system config", Value::Null));
    for part in [
        "- Provider: builtin (offline rules, no model)",
        "- Max model calls per turn: 10",
        "- Idle timeout (unload with no clients): 42 s",
        "- MCP servers: none",
        "- Log filter: `",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    let text = shown(&cli_submit(
        &mut a,
        &id,
        "@system config agents",
        Value::Null,
    ));
    for part in [
        "- Agent `chat` (the assistant): available",
        "  - `calculate`: available.",
        "  - `get_current_time`: available.",
        "  - `get_weather`: available.",
        "  - `ask_user`: available.",
        "- MCP servers: none configured",
        "- Client-hosted agents: none",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }

    for (sent, line) in [
        (
            "@system shell",
            "@system shell: not supported by Roundtable",
        ),
        (
            "@system session list",
            "@system session list: not supported by Roundtable",
        ),
        (
            "@dispatcher replay x",
            "@dispatcher replay: not supported by Roundtable",
        ),
    ] {
        let calls = cli_submit(&mut a, &id, sent, Value::Null);
        assert_eq!(shown(&calls), line);
        assert_eq!(last_error(&calls), line);
        // A failed command says so as TypeAgent's `disposition` does.
        assert_eq!(
            calls.last().unwrap().1[2]["result"]["disposition"],
            json!({"status": "failed", "path": "command", "mayHaveSideEffects": false})
        );
    }
    // A command that worked carries none.
    let calls = cli_submit(&mut a, &id, "@system session", Value::Null);
    assert_eq!(
        calls.last().unwrap().1[2]["result"]["disposition"],
        Value::Null
    );
}

/// `@system clear` and `@system exit` (agent-cli's `/clear`, `/exit`): clientio `clear` /
/// `exit` with the request id go to the requesting client alone, the command completes, the
/// history stays; `clear deep` (TypeAgent wipes the display log) is refused.
#[test]
fn system_clear_and_exit_reach_only_the_requester() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("CLI");
    let mut b = server.connect();
    b.join(&id);
    let before = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    for (sent, method) in [("@system clear", "clear"), ("@system exit", "exit")] {
        let calls = cli_submit(&mut a, &id, sent, Value::Null);
        let request = calls.iter().find(|(m, _)| m == "setUserRequest").unwrap().1[0].clone();
        let (_, args) = calls.iter().find(|(m, _)| m == method).expect(method);
        assert_eq!(args, &json!([request]));
        assert_eq!(last_error(&calls), Value::Null);
        // The other client sees the request complete, and no `clear` / `exit`.
        let rid = request["requestId"].as_str().unwrap().to_string();
        let seen = b.until_complete(&id, &rid);
        assert!(!seen.iter().any(|(m, _)| m == method), "{seen:?}");
    }
    let after = a
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    assert!(after.as_array().unwrap().len() > before.as_array().unwrap().len());
    for (sent, line) in [
        (
            "@system clear deep",
            "@system clear deep: not supported by Roundtable",
        ),
        ("@system exit now", "@system exit takes no arguments"),
    ] {
        let calls = cli_submit(&mut a, &id, sent, Value::Null);
        assert_eq!(last_error(&calls), line);
    }
}

/// `/trace <filter>` changes the running server's log filter (debug lines appear), a
/// following `/trace` shows it, and an invalid filter is refused with the reason.
#[test]
fn system_trace_sets_the_server_log_filter() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("CLI");
    let started = std::env::var("ROUNDTABLE_TEST_RUST_LOG").unwrap_or_else(|_| "info".to_string());
    let calls = cli_submit(&mut a, &id, "@system trace", Value::Null);
    assert_eq!(shown(&calls), format!("Log filter: {started}"));

    let calls = cli_submit(
        &mut a,
        &id,
        "@system trace roundtable_actors=debug info",
        Value::Null,
    );
    assert_eq!(
        shown(&calls),
        format!("Log filter: roundtable_actors=debug,info (was {started})")
    );
    let ack = a.submit(&id, "@system trace");
    let rid = Client::request_id(&ack);
    let calls = a.until_complete(&id, &rid);
    assert_eq!(shown(&calls), "Log filter: roundtable_actors=debug,info");
    // A debug line of the actors crate, which the filter at start did not let through.
    server.wait_log(&format!("conversation {id}: request {rid} started"));

    let calls = cli_submit(&mut a, &id, "@system trace roundtable=loud", Value::Null);
    let text = shown(&calls);
    assert!(
        text.starts_with("@system trace: invalid log filter \"roundtable=loud\""),
        "{text}"
    );
    assert_eq!(kinds(&calls), [json!("error")]);
    let calls = cli_submit(&mut a, &id, "@system trace", Value::Null);
    assert_eq!(shown(&calls), "Log filter: roundtable_actors=debug,info");
}

/// `getCommandCompletion` offers the new families and their sub-commands in TypeAgent's
/// shape: names without `@`, `startIndex` where they attach (the whole contract is
/// `completion.rs`).
#[test]
fn completion_offers_the_cli_commands() {
    let server = Server::start(&[]);
    let (mut a, id) = server.joined("CLI");
    let d = dispatcher(&id);
    let mut complete = |prefix: &str| {
        a.invoke(&d, "getCommandCompletion", json!([prefix, "forward"]))
            .unwrap()
    };
    let names = |c: &Value, group: usize| c["completions"][group]["completions"].clone();
    let c = complete("@");
    assert_eq!(c["startIndex"], 1);
    assert_eq!(
        names(&c, 0),
        json!(["conversation", "help", "compact", "explain", "translate"])
    );
    assert_eq!(names(&c, 1), json!(["dispatcher", "system"]));
    let c = complete("@dispatcher ");
    assert_eq!(names(&c, 0), json!(["request", "translate", "explain"]));
    assert_eq!(c["startIndex"], 12);
    let c = complete("@system h");
    assert_eq!(
        names(&c, 0),
        json!(["help", "history", "session", "config", "trace", "clear", "exit", "meter", "model"])
    );
    assert_eq!(c["startIndex"], 8);
    assert_eq!(
        names(&complete("@system config "), 0),
        json!(["show", "agents"])
    );
    assert_eq!(names(&complete("@system session "), 0), json!(["info"]));
    let c = complete("@dispatcher request @sys");
    assert_eq!(c["startIndex"], 21);
    assert!(names(&c, 1).as_array().unwrap().contains(&json!("system")));
    // Backspacing onto a complete sub-command reconsiders it: its siblings, at its start.
    let c = a
        .invoke(
            &d,
            "getCommandCompletion",
            json!(["@system config agents", "backward"]),
        )
        .unwrap();
    assert_eq!(c["startIndex"], 15);
    assert_eq!(c["directionSensitive"], true);
    assert_eq!(names(&c, 0), json!(["show", "agents"]));
    // Anything but a string is the empty result, never an RPC error.
    let c = a.invoke(&d, "getCommandCompletion", json!([42])).unwrap();
    assert_eq!(
        c,
        json!({"startIndex": 0, "completions": [], "closedSet": false,
            "directionSensitive": false, "afterWildcard": "none"})
    );
}

/// A request from the CLI after another client deleted its conversation gets the exact
/// `Conversation not found: <id>` error (the CLI prints it and returns to its prompt).
#[test]
fn request_after_delete_gets_conversation_not_found() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("CLI");
    cli_submit(&mut cli, &id, "@dispatcher request hello", Value::Null);
    let mut other = server.connect();
    other.agent("deleteConversation", json!([id])).unwrap();
    for text in ["@dispatcher request what is 2+3", "@system help"] {
        let error = cli
            .invoke(
                &dispatcher(&id),
                "submitCommand",
                json!([text, null, null, "cli-after-delete", null]),
            )
            .unwrap_err();
        assert_eq!(error, format!("Conversation not found: {id}"));
    }
    // The socket stays usable: the CLI goes on.
    assert!(cli.names().contains(&"default".to_string()));
}
