//! The `roundtable` command-line client, driven as a real process against a real server
//! (the interactive prompt through a pseudo-terminal).

use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::harness::*;

/// Runs `roundtable <args> --port <port>` with its own home directory (state file).
fn cli(server_port: u16, home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .args(["--port", &server_port.to_string()])
        .env("ROUNDTABLE_HOME", home)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run roundtable")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// `conversations create | list | rename | delete`, text and `--json`.
#[test]
fn conversations_subcommands() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let out = cli(
        server.port,
        home.path(),
        &["conversations", "create", "Project X", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let created: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let id = created["conversationId"].as_str().unwrap().to_string();
    assert_eq!(created["name"], "Project X");

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "create", "project x"],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));

    let out = cli(server.port, home.path(), &["conversations", "list"]);
    let text = stdout(&out);
    let header = text.lines().next().unwrap();
    for col in [
        "CONVERSATION ID",
        "NAME",
        "CLIENTS",
        "MESSAGES",
        "CREATED AT",
    ] {
        assert!(header.contains(col), "{header}");
    }
    // Newest first: Project X before the startup `default`.
    assert!(
        text.find("Project X").unwrap() < text.find("default").unwrap(),
        "{text}"
    );

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "list", "--name", "proj", "--json"],
    );
    let list: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["conversationId"], id.as_str());

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "rename", &id, "Project Y", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()["name"],
        "Project Y"
    );

    // stdin is not a terminal: no question asked.
    let out = cli(server.port, home.path(), &["conversations", "delete", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(
        server.port,
        home.path(),
        &["conversations", "delete", &id, "--yes"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("Conversation not found: {id}")),
        "{}",
        stderr(&out)
    );
    let out = cli(
        server.port,
        home.path(),
        &["conversations", "list", "--json"],
    );
    let list: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(list.iter().all(|c| c["conversationId"] != id.as_str()));
}

/// `run request` prints the agent output and exits 0; failures exit non-zero with one line;
/// `run explain` / `run translate` describe without running.
#[test]
fn run_request_exit_codes() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let out = cli(
        server.port,
        home.path(),
        &["run", "request", "what", "is", "2+3"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).lines().any(|l| l.trim() == "[result] 5"),
        "{}",
        stdout(&out)
    );
    let out = cli(
        server.port,
        home.path(),
        &["run", "translate", "what is 2+3"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("\"tool\": \"calculate\""),
        "{}",
        stdout(&out)
    );
    let out = cli(server.port, home.path(), &["run", "explain", "what is 2+3"]);
    assert!(
        stdout(&out).contains("call `calculate`"),
        "{}",
        stdout(&out)
    );
    // The translate did not run the tool: no new tool result in the history.
    let mut c = server.connect();
    let list = c.agent("listConversations", json!(["CLI"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);

    let ghost = uuid::Uuid::new_v4().to_string();
    let out = cli(
        server.port,
        home.path(),
        &["run", "request", "hi", "-c", &ghost],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        format!("roundtable: Conversation not found: {ghost}")
    );
    let out = cli(
        server.port,
        home.path(),
        &["run", "request", "@nosuchcommand"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Unknown command @nosuchcommand"),
        "{}",
        stderr(&out)
    );

    // Unreachable server: one clear line naming the URL and how to start it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = cli(dead, home.path(), &["run", "request", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("ws://127.0.0.1:{dead}/")) && err.contains("roundtable serve"),
        "{err}"
    );
}

/// Ten processes find-or-create `CLI` at once: exactly one conversation named CLI exists.
#[test]
fn find_or_create_race_from_ten_processes() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..10)
        .map(|i| {
            Command::new(binary())
                .args([
                    "run",
                    "request",
                    &format!("hello {i}"),
                    "--port",
                    &server.port.to_string(),
                ])
                .env("ROUNDTABLE_HOME", home.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let mut c = server.connect();
    let names = c.names();
    assert_eq!(
        names.iter().filter(|n| n.as_str() == "CLI").count(),
        1,
        "{names:?}"
    );
    let list = c.agent("listConversations", json!(["CLI"])).unwrap();
    assert_eq!(list[0]["messageCount"], 10);
}

/// `server status` and `server stop`.
#[test]
fn server_status_and_stop() {
    let mut server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let out = cli(server.port, home.path(), &["server", "status"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("running at"), "{}", stdout(&out));
    let out = cli(server.port, home.path(), &["server", "stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(server.wait_exit().success());
    let out = cli(server.port, home.path(), &["server", "status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not running"), "{}", stderr(&out));
}

pub(crate) fn pty(
    port: u16,
    home: &std::path::Path,
    args: &[&str],
) -> rexpect::session::PtySession {
    pty_on(port, home, args, "dumb", true)
}

/// [`pty`] on terminal `term`, with its escape sequences stripped or as written.
pub(crate) fn pty_on(
    port: u16,
    home: &std::path::Path,
    args: &[&str],
    term: &str,
    strip_ansi_escape_codes: bool,
) -> rexpect::session::PtySession {
    let mut cmd = Command::new(binary());
    cmd.args(["connect", "--port", &port.to_string()])
        .args(args)
        .env("ROUNDTABLE_HOME", home)
        .env("RUST_LOG", "warn")
        .env("TERM", term);
    rexpect::session::spawn_with_options(
        cmd,
        rexpect::session::Options {
            timeout_ms: Some(15_000),
            strip_ansi_escape_codes,
        },
    )
    .expect("spawn in a pty")
}

/// The interactive prompt in a pseudo-terminal: join CLI, send, see another client's message
/// arrive, answer a question inline, switch, and exit with Ctrl-D.
#[test]
fn interactive_prompt_in_a_pty() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = pty(server.port, home.path(), &[]);
    p.exp_string("Joined \"CLI\"").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("what is 2+3").unwrap();
    p.exp_string("[tool] calculate").unwrap();
    p.exp_string("[result] 5").unwrap();
    p.exp_string("CLI> ").unwrap();

    // Another client in the same conversation: its turn shows up live at the prompt.
    let mut other = server.connect();
    let id = other.agent("listConversations", json!(["CLI"])).unwrap()[0]["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    other.join(&id);
    other.run_turn(&id, "hello from elsewhere");
    p.exp_string("[client 1] hello from elsewhere").unwrap();
    p.exp_string("echo: hello from elsewhere").unwrap();

    // A question for our own request, answered inline.
    p.send_line("ask me Continue?").unwrap();
    p.exp_string("? Continue? [1] Yes [2] No").unwrap();
    p.send_line("1").unwrap();
    p.exp_string("You answered Yes.").unwrap();
    p.exp_string("CLI> ").unwrap();

    // Switch away and back: the old history is replayed.
    p.send_line("@conversation new Elsewhere").unwrap();
    p.exp_string("Created \"Elsewhere\" and switched to it.")
        .unwrap();
    p.exp_string("Elsewhere> ").unwrap();
    // Content search from here finds what was said in CLI, snippet and all; a switch whose
    // words name no conversation falls back to the best content match.
    p.send_line("@conversation search ELSEWHERE").unwrap();
    p.exp_string("user: hello from **elsewhere**").unwrap();
    p.exp_string("Elsewhere> ").unwrap();
    p.send_line("/conversation switch hello from").unwrap();
    p.exp_string("Switched to \"CLI\".").unwrap();
    p.exp_string("] what is 2+3").unwrap();
    // The replayed question reads with the answer chosen (its label), not the index.
    p.exp_string("? Continue?").unwrap();
    p.exp_string("  -> answered Yes\r\n").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    // The state file remembers the last conversation.
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("cli-state.json")).unwrap())
            .unwrap();
    assert_eq!(state["conversationId"], id.as_str());
}

/// Conversations in words at the prompt: "switch to my research conversation" is the
/// builtin provider's `manage_conversation` call, which the CLI carries out as it does
/// `@conversation switch` (and replays the history); `/conversation handoff` goes to the server,
/// and so do the words "hand off …".
#[test]
fn conversations_in_words_at_the_prompt() {
    let server = Server::start(&[]);
    let mut other = server.connect();
    let research = other.create("Research");
    other.join(&research);
    other.run_turn(&research, "the venue is booked");
    let home = tempfile::tempdir().unwrap();
    let mut p = pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    p.send_line("what is 2+3").unwrap();
    p.exp_string("[result] 5").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("switch to my research conversation").unwrap();
    p.exp_string("[tool] manage_conversation").unwrap();
    p.exp_string("Switched to \"Research\".").unwrap();
    p.exp_string("] the venue is booked").unwrap();
    p.exp_string("Research> ").unwrap();
    p.send_line("/conversation handoff CLI").unwrap();
    p.exp_string("Handoff from \"CLI\"").unwrap();
    p.exp_string("- what is 2+3").unwrap();
    p.exp_string("Research> ").unwrap();
    p.send_line("go to my CLI conversation").unwrap();
    p.exp_string("Switched to \"CLI\".").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("hand off my research conversation here")
        .unwrap();
    p.exp_string("Handoff from \"Research\"").unwrap();
    p.exp_string("- the venue is booked").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// TypeAgent's slash commands are the `@system` commands its CLI sends for them, answered by
/// the server (not sent to the agent as text): `/help` lists the slash commands, then the
/// server's command list; `/session` and `/agents` are `@system session` and `@system config
/// agents`. `/history` alone stays the prompt's own paging; an unknown `/word` is said here.
#[test]
fn slash_commands_are_typeagents_system_commands() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    p.send_line("/help").unwrap();
    p.exp_string("Slash commands").unwrap();
    p.exp_string("`@conversation <sub>`: manage conversations")
        .unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("/session").unwrap();
    p.exp_string("**Session** (this conversation)").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("/agents").unwrap();
    p.exp_string("Agents and tools of this conversation")
        .unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("/history").unwrap();
    p.exp_string("Already at the first entry of the conversation.")
        .unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("/nosuch thing").unwrap();
    p.exp_string("Unknown command: /nosuch.").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    // What the conversation logged: the @system commands, never a slash sent as text.
    let mut c = server.connect();
    let id = c.agent("listConversations", json!(["CLI"])).unwrap()[0]["conversationId"]
        .as_str()
        .unwrap()
        .to_string();
    c.join(&id);
    let log = c
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let typed: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["command"].as_str())
        .collect();
    assert_eq!(
        typed,
        ["@system help", "@system session", "@system config agents"],
        "{log}"
    );
}

/// `@system clear` clears the screen and prompts again; `@system exit` ends the CLI (the
/// server's `clear` / `exit` for our request).
#[test]
fn system_clear_and_exit_at_the_prompt() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    // The output as written: the clear's escape sequence is the observable effect.
    let mut p = pty_on(server.port, home.path(), &[], "dumb", false);
    p.exp_string("CLI> ").unwrap();
    p.send_line("@system clear").unwrap();
    // Cursor home, then erase to the end of the screen (rustyline's clear_screen).
    p.exp_string("\x1b[H\x1b[J").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("what is 2+3").unwrap();
    p.exp_string("[result] 5").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_line("@system exit").unwrap();
    p.exp_eof().unwrap();
}

/// `conversations search <text>`: what a request said, as text with snippets and as JSON.
#[test]
fn conversations_search_subcommand() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let out = cli(
        server.port,
        home.path(),
        &["run", "request", "tell me about the lighthouse keeper"],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "search", "Lighthouse"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let first = text.lines().next().unwrap();
    assert!(first.ends_with("  CLI"), "{text}");
    assert!(
        text.contains("      user: tell me about the **lighthouse** keeper"),
        "{text}"
    );

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "--json", "search", "keep*", "-n", "1"],
    );
    let hits: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(hits.as_array().unwrap().len(), 1, "{hits}");
    assert_eq!(hits[0]["conversation"]["name"], "CLI");
    assert!(hits[0]["snippets"][0]
        .as_str()
        .unwrap()
        .contains("**keeper**"));

    let out = cli(
        server.port,
        home.path(),
        &["conversations", "search", "zeppelin"],
    );
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        "No conversation content matches \"zeppelin\"."
    );
}

/// `--resume` rejoins the saved conversation; when it was deleted, the CLI asks before
/// falling back to CLI (and refuses without a terminal). `--memory` cleans up after itself.
#[test]
fn resume_and_memory() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut admin = server.connect();
    let id = admin.create("Saved");
    let mut p = pty(server.port, home.path(), &["--conversation", &id]);
    p.exp_string("Joined \"Saved\"").unwrap();
    p.exp_string("Saved> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();

    let mut p = pty(server.port, home.path(), &["--resume"]);
    p.exp_string("Joined \"Saved\"").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();

    admin.agent("deleteConversation", json!([id])).unwrap();
    let out = Command::new(binary())
        .args(["connect", "--resume", "--port", &server.port.to_string()])
        .env("ROUNDTABLE_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("Conversation not found: {id}")),
        "{}",
        stderr(&out)
    );

    let mut p = pty(server.port, home.path(), &["--resume"]);
    p.exp_string(&format!(
        "Conversation {id} no longer exists. Join \"CLI\" instead? [y/N]"
    ))
    .unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Joined \"CLI\"").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();

    let mut p = pty(server.port, home.path(), &["--memory"]);
    p.exp_string("Joined \"cli-ephemeral-").unwrap();
    assert!(admin
        .names()
        .iter()
        .any(|n| n.starts_with("cli-ephemeral-")));
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    eventually("ephemeral deleted", || {
        !admin
            .names()
            .iter()
            .any(|n| n.starts_with("cli-ephemeral-"))
    });
}

/// Ctrl-C while a command runs cancels it (the model here is held until the test releases it);
/// the prompt comes back and the session goes on.
#[test]
fn ctrl_c_cancels_the_running_command() {
    let gate = Gate::closed();
    let model = model_held_by(&gate, |body| body.to_string().contains("slow please"));
    let server = Server::with_model(&model, "m", &[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = pty(server.port, home.path(), &[]);
    p.exp_string("CLI> ").unwrap();
    p.send_line("slow please").unwrap();
    eventually("the model is asked", || {
        !model.bodies.lock().unwrap().is_empty()
    });
    p.send_control('c').unwrap();
    p.exp_string("(request cancelled)").unwrap();
    p.exp_string("CLI> ").unwrap();
    gate.open();
    p.send_line("quick one").unwrap();
    p.exp_string("done").unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// Tab at the prompt completes `@` commands from the server's `getCommandCompletion`, key by
/// key as typed: `@sys` Tab is `@system`, then ` config ag` Tab is `@system config agents`,
/// which runs. (A real terminal type: a dumb one has no line editing.)
#[test]
fn tab_completes_commands_at_the_prompt() {
    let server = Server::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(binary());
    cmd.args(["connect", "--port", &server.port.to_string()])
        .env("ROUNDTABLE_HOME", home.path())
        .env("RUST_LOG", "warn")
        .env("TERM", "xterm");
    let mut p = rexpect::session::spawn_with_options(
        cmd,
        rexpect::session::Options {
            timeout_ms: Some(15_000),
            strip_ansi_escape_codes: true,
        },
    )
    .expect("spawn in a pty");
    p.exp_string("CLI> ").unwrap();
    // One key at a time, each after its echo, as a person types (rustyline reads keys that
    // arrive together in one read only when the next read comes).
    let type_keys = |p: &mut rexpect::session::PtySession, keys: &str| {
        for key in keys.chars() {
            p.send(&key.to_string()).unwrap();
            p.flush().unwrap();
            p.exp_string(&key.to_string()).unwrap();
        }
    };
    type_keys(&mut p, "@sys");
    p.send("\t").unwrap();
    p.flush().unwrap();
    p.exp_string("CLI> @system").unwrap();
    type_keys(&mut p, " config ag");
    p.send("\t").unwrap();
    p.flush().unwrap();
    p.exp_string("CLI> @system config agents").unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("Agents and tools of this conversation")
        .unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}

/// Joining a conversation longer than a screen (120 entries written before the server starts;
/// the pty was never given a size, so a screenful is 40 entries) replays only its newest 40,
/// after a line counting the earlier ones; `/history` and `@conversation history` page back a
/// screenful at a time and say when the first entry is reached.
#[test]
fn joining_a_long_conversation_replays_a_screenful() {
    let temp = tempfile::tempdir().unwrap();
    // Turn t is seqs 3t (its request), 3t + 1 (its echo), 3t + 2: turns 0 to 39.
    write_long_conversation(temp.path(), "CLI", 120);
    let server = Server::start_in(temp.path(), &[]);
    let home = tempfile::tempdir().unwrap();
    let mut p = pty(server.port, home.path(), &[]);
    p.exp_string("Joined \"CLI\"").unwrap();
    // rexpect reads bytes as Latin-1: the line's leading `…` does not compare; the rest does.
    p.exp_string(" 80 earlier entries: /history to see more\r\n")
        .unwrap();
    // Seqs 80 to 119: turn 26 ends at seq 80 (its request and echo are earlier).
    let shown = p.exp_string("CLI> ").unwrap();
    assert!(shown.contains("fixture turn 27\r\n"), "{shown}");
    assert!(shown.contains("echo: fixture turn 39"), "{shown}");
    assert!(!shown.contains("fixture turn 26"), "{shown}");
    p.send_line("/history").unwrap();
    p.exp_string(" 40 earlier entries: /history to see more\r\n")
        .unwrap();
    // Seqs 40 to 79: from turn 13's echo to turn 26.
    let shown = p.exp_string("CLI> ").unwrap();
    assert!(shown.contains("echo: fixture turn 13"), "{shown}");
    assert!(shown.contains("echo: fixture turn 26"), "{shown}");
    assert!(
        !shown.contains("fixture turn 12") && !shown.contains("turn 27"),
        "{shown}"
    );
    p.send_line("@conversation history").unwrap();
    p.exp_string("(the conversation starts here)").unwrap();
    let shown = p.exp_string("CLI> ").unwrap();
    assert!(shown.contains("fixture turn 0\r\n"), "{shown}");
    assert!(shown.contains("echo: fixture turn 12"), "{shown}");
    assert!(!shown.contains("echo: fixture turn 13"), "{shown}");
    p.send_line("/history").unwrap();
    p.exp_string("Already at the first entry of the conversation.")
        .unwrap();
    p.exp_string("CLI> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
