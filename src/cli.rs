//! The client side of the `roundtable` binary: `connect` (the interactive prompt),
//! `conversations`, `run` and `server`. Everything goes through [`crate::client`] over the
//! real protocol; nothing here reads the server's files.
//!
//! The interactive prompt runs two halves: a UI thread that owns the line editor (rustyline),
//! and the async side that owns the connection. While the user is at the prompt, live output
//! from other clients is printed above it through rustyline's external printer; while a
//! command runs, the async side streams its output and asks the UI thread for answers to
//! questions. Ctrl-C cancels the running command, Ctrl-D exits.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use roundtable_actors::commands::{self, Command};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::client::conversation::{
    create_ephemeral, delete_ephemeral, find_or_create_named, join_named_or_fallback,
    manage_conversation, sort_newest_first, ActionResult, ManageHost,
};
use crate::client::{ClientError, CommandOutcome, Connection, ConversationInfo, Event, JoinResult};

/// Name of the conversation the CLI uses by default (as TypeAgent's CLI does).
pub const CLI_CONVERSATION: &str = "CLI";

/// A CLI failure: one line for the user, and the exit code.
#[derive(Debug)]
pub struct CliError {
    /// What to print.
    pub message: String,
    /// Process exit code.
    pub code: u8,
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError {
            message: e.to_string(),
            code: 1,
        }
    }
}

impl CliError {
    fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 1,
        }
    }
}

/// Result of a CLI command.
pub type CliResult<T = ()> = Result<T, CliError>;

/// The directory holding `cli-state.json` (`$ROUNDTABLE_HOME` or `~/.roundtable`).
pub fn home_dir() -> PathBuf {
    std::env::var_os("ROUNDTABLE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::home_dir().map(|h| h.join(".roundtable")))
        .unwrap_or_else(|| PathBuf::from(".roundtable"))
}

/// The conversation id saved by the last successful join.
pub fn load_state() -> Option<String> {
    let text = std::fs::read_to_string(home_dir().join("cli-state.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["conversationId"].as_str().map(str::to_string)
}

/// Saves the joined conversation (durably: temp file + rename).
pub fn save_state(conversation_id: &str) {
    let dir = home_dir();
    let _ = roundtable_actors::store::private_dir_builder()
        .recursive(true)
        .create(&dir);
    let body = json!({"conversationId": conversation_id}).to_string();
    if let Err(e) =
        roundtable_actors::store::write_atomic(&dir.join("cli-state.json"), body.as_bytes())
    {
        log::warn!("cannot save the CLI state: {e}");
    }
}

// ---- rendering ----------------------------------------------------------------------------

/// `text` made safe for a terminal: C0 and C1 control characters other than newline and tab
/// (ESC starts sequences that set the window title, write the clipboard, move the cursor…)
/// and DEL are shown escaped (`\u{1b}`), never sent raw. Every string the server supplies
/// (names, messages, errors, questions) passes through here before it is printed.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char =
        |c: char| (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c);
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Text of a `DisplayContent`.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(rows) if rows.iter().all(Value::is_array) => rows
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(content_text)
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Array(items) => items
            .iter()
            .map(content_text)
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => o.get("content").map(content_text).unwrap_or_default(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One line (or block) for an `IAgentMessage`.
pub fn render_message(message: &Value) -> String {
    if message["requestId"]["requestId"] == "system" {
        return content_text(&message["message"]);
    }
    if let Some(call) = message.get("toolCall") {
        return format!(
            "  [tool] {}({})",
            call["name"].as_str().unwrap_or("?"),
            call["input"]
        );
    }
    if let Some(result) = message.get("toolResult") {
        let mark = if result["isError"] == true {
            "error"
        } else {
            "result"
        };
        return format!("  [{mark}] {}", result["content"].as_str().unwrap_or(""));
    }
    let text = content_text(&message["message"]);
    match message["message"]["kind"].as_str() {
        Some("error") => format!("error: {text}"),
        Some("warning") => format!("warning: {text}"),
        _ => text,
    }
}

/// How a replayed display-log entry reads.
pub fn render_history_entry(entry: &Value, my_connection: &str) -> Option<String> {
    match entry["type"].as_str()? {
        "user-request" => {
            let who = entry["requestId"]["connectionId"].as_str().unwrap_or("");
            let tag = if who == my_connection {
                String::new()
            } else {
                format!("[client {who}] ")
            };
            Some(format!(
                "> {tag}{}",
                entry["command"].as_str().unwrap_or("")
            ))
        }
        "append-display" | "set-display" => Some(render_message(&entry["message"])),
        "pending-interaction" => Some(format!("? {}", entry["message"].as_str().unwrap_or(""))),
        "interaction-resolved" => Some(format!("  -> answered {}", entry["response"])),
        "interaction-cancelled" => Some("  -> question cancelled".into()),
        _ => None,
    }
}

/// Renders a `manage-conversation` result.
pub fn render_action(result: &ActionResult) -> String {
    match result {
        ActionResult::Ok { message, .. } => message.clone(),
        ActionResult::Warning(m) => format!("warning: {m}"),
        ActionResult::Error(m) => format!("error: {m}"),
        ActionResult::Cancelled(name) => format!("Kept \"{name}\"."),
        ActionResult::Info {
            conversation_id,
            name,
        } => format!("{name} ({conversation_id})"),
        ActionResult::Help => commands::help_text().replace("**", "").replace('`', ""),
        ActionResult::List {
            conversations,
            current,
        } => table(conversations, current.as_deref()),
        ActionResult::Matches { query, matches, .. } => {
            if matches.is_empty() {
                return format!("No conversation matches \"{query}\".");
            }
            matches
                .iter()
                .map(|m| {
                    format!(
                        "{:.2}  {}  {}",
                        m.score, m.conversation.conversation_id, m.conversation.name
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
        ActionResult::ContentMatches { query, matches } => {
            if matches.is_empty() {
                format!("No conversation content matches \"{query}\".")
            } else {
                matches
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        }
    }
}

/// The `conversations list` table.
pub fn table(list: &[ConversationInfo], current: Option<&str>) -> String {
    let headers = [
        "CONVERSATION ID",
        "NAME",
        "CLIENTS",
        "MESSAGES",
        "CREATED AT",
    ];
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|c| {
            let marker = if Some(c.conversation_id.as_str()) == current {
                " *"
            } else {
                ""
            };
            [
                c.conversation_id.clone(),
                format!("{}{marker}", c.name),
                c.client_count.to_string(),
                c.message_count.to_string(),
                c.created_at.clone(),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

// ---- one-shot commands --------------------------------------------------------------------

/// `roundtable conversations …` (parsed by clap in `main.rs`).
#[derive(Debug, clap::Subcommand)]
pub enum ConversationsCommand {
    /// Create a conversation.
    Create {
        /// Its name.
        name: String,
    },
    /// List conversations, newest first.
    List {
        /// Only names containing this (case-insensitive).
        #[arg(long)]
        name: Option<String>,
    },
    /// Rename a conversation.
    Rename {
        /// Conversation id.
        id: String,
        /// New name.
        new_name: String,
    },
    /// Delete a conversation (asks first unless --yes or stdin is not a terminal).
    Delete {
        /// Conversation id.
        id: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Runs `roundtable conversations …`.
pub async fn conversations(url: &str, command: ConversationsCommand, as_json: bool) -> CliResult {
    let conn = Connection::connect(url).await?;
    match command {
        ConversationsCommand::Create { name } => {
            let info = conn.create_conversation(&name).await?;
            if as_json {
                println!("{}", serde_json::to_string(&info).expect("serializes"));
            } else {
                println!(
                    "Created \"{}\" ({})",
                    terminal_safe(&info.name),
                    info.conversation_id
                );
            }
        }
        ConversationsCommand::List { name } => {
            let mut list = conn.list_conversations(name.as_deref()).await?;
            sort_newest_first(&mut list);
            if as_json {
                println!("{}", serde_json::to_string(&list).expect("serializes"));
            } else if list.is_empty() {
                println!("No conversations found.");
            } else {
                println!("{}", terminal_safe(&table(&list, None)));
            }
        }
        ConversationsCommand::Rename { id, new_name } => {
            conn.rename_conversation(&id, &new_name).await?;
            if as_json {
                println!("{}", json!({"conversationId": id, "name": new_name}));
            } else {
                println!(
                    "Renamed {} to \"{}\"",
                    terminal_safe(&id),
                    terminal_safe(&new_name)
                );
            }
        }
        ConversationsCommand::Delete { id, yes } => {
            if !yes
                && std::io::stdin().is_terminal()
                && !ask_yes_no(&format!("Delete conversation {id}?"))
            {
                return Err(CliError::new("not deleted"));
            }
            conn.delete_conversation(&id).await?;
            if as_json {
                println!("{}", json!({"conversationId": id, "deleted": true}));
            } else {
                println!("Deleted {}", terminal_safe(&id));
            }
        }
    }
    conn.close();
    Ok(())
}

fn ask_yes_no(question: &str) -> bool {
    eprint!("{} [y/N] ", terminal_safe(question));
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok()
        && matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
}

/// What `run` does with the text.
#[derive(Debug, Clone, Copy)]
pub enum RunKind {
    /// Run it.
    Request,
    /// Explain how it would be handled (`@explain`).
    Explain,
    /// Show the actions it translates to, without running them (`@translate`).
    Translate,
}

/// `roundtable run …`: prints the agent output; `Err` (non-zero exit) when the command failed.
pub async fn run(url: &str, kind: RunKind, text: &str, conversation: Option<&str>) -> CliResult {
    let conn = Connection::connect(url).await?;
    let mut events = conn.take_events().expect("fresh connection");
    let id = match conversation {
        Some(id) => id.to_string(),
        None => {
            find_or_create_named(&conn, CLI_CONVERSATION)
                .await?
                .conversation_id
        }
    };
    // filter: only this connection's own output.
    conn.join_conversation(Some(&id), true).await?;
    let command = match kind {
        RunKind::Request => text.to_string(),
        RunKind::Explain => format!("@explain {text}"),
        RunKind::Translate => format!("@translate {text}"),
    };
    let request_id = conn
        .submit_command(&id, &command, &uuid::Uuid::new_v4().to_string())
        .await?;
    let wait = conn.wait_command(&request_id);
    tokio::pin!(wait);
    let print_output = |event: Event| {
        if let Event::Call { method, args, .. } = event {
            if method == "appendDisplay" || method == "setDisplay" {
                println!("{}", terminal_safe(&render_message(&args[0])));
            }
        }
    };
    let outcome = loop {
        tokio::select! {
            outcome = &mut wait => break outcome?,
            Some(event) = events.recv() => print_output(event),
        }
    };
    // Output sent just before the completion is still queued.
    while let Ok(event) = events.try_recv() {
        print_output(event);
    }
    conn.close();
    match outcome {
        CommandOutcome::Completed(result) => match result["lastError"].as_str() {
            Some(e) => Err(CliError::new(format!("error: {e}"))),
            None => Ok(()),
        },
        CommandOutcome::Cancelled(reason) => Err(CliError::new(format!("cancelled: {reason}"))),
    }
}

/// `roundtable server status`: is a server answering at `url`?
pub async fn server_status(url: &str) -> CliResult {
    match tokio::time::timeout(Duration::from_secs(2), Connection::connect(url)).await {
        Ok(Ok(conn)) => {
            let count = conn
                .list_conversations(None)
                .await
                .map(|l| l.len())
                .unwrap_or(0);
            println!("running at {url} ({count} conversations)");
            conn.close();
            Ok(())
        }
        _ => Err(CliError::new(format!(
            "not running at {url}; start it with `roundtable serve`"
        ))),
    }
}

/// `roundtable server stop`: sends `shutdown` and waits for the socket to close.
pub async fn server_stop(url: &str) -> CliResult {
    let conn = Connection::connect(url).await?;
    let mut events = conn.take_events().expect("fresh connection");
    conn.shutdown_server().await?;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = events.recv().await {
            if matches!(e, Event::Closed { .. }) {
                return;
            }
        }
    })
    .await;
    match closed {
        Ok(()) => {
            println!("stopped the server at {url}");
            Ok(())
        }
        Err(_) => Err(CliError::new(
            "the server did not close the connection within 10 s",
        )),
    }
}

// ---- interactive --------------------------------------------------------------------------

/// Options of `roundtable connect`.
pub struct ConnectOptions {
    /// Join this conversation id.
    pub conversation: Option<String>,
    /// Rejoin the id saved in the state file.
    pub resume: bool,
    /// Use an ephemeral conversation deleted on exit.
    pub memory: bool,
}

/// From the async side to the UI thread.
enum Ui {
    /// Print a block of text.
    Print(String),
    /// Ask a question; answer with `Input::Answer`.
    Ask(String, Vec<String>),
    /// The command finished: prompt again (with this prompt text).
    Prompt(String),
}

/// From the UI thread to the async side.
enum Input {
    /// A line typed at the prompt.
    Line(String),
    /// Ctrl-C while answering a question: cancel the running command.
    Interrupt,
    /// The chosen index (None: no answer).
    Answer(Option<usize>),
    /// Ctrl-D.
    Eof,
}

struct Session {
    conversation_id: String,
    name: String,
    connection_id: String,
    persist: bool,
}

impl ManageHost for Session {
    fn current(&self) -> Option<(String, String)> {
        Some((self.conversation_id.clone(), self.name.clone()))
    }
    fn rebind(&mut self, joined: &JoinResult) -> Result<(), String> {
        self.conversation_id = joined.conversation_id.clone();
        self.name = joined.name.clone();
        self.connection_id = joined.connection_id.clone();
        Ok(())
    }
    fn persist(&mut self, joined: &JoinResult) {
        if self.persist {
            save_state(&joined.conversation_id);
        }
    }
    fn confirm(&mut self, _question: &str) -> bool {
        // Typed `@conversation delete <name>` is itself the confirmation at this prompt.
        true
    }
}

/// `roundtable connect`: the interactive prompt.
pub async fn connect(url: &str, options: ConnectOptions) -> CliResult {
    let conn = Connection::connect(url).await?;
    let mut events = conn.take_events().expect("fresh connection");
    // From here Ctrl-C is ours (cancel), not the default (kill).
    let mut interrupts = interrupt_stream();

    let (ui_tx, ui_rx) = std_mpsc::channel::<Ui>();
    let (input_tx, mut input_rx) = mpsc::unbounded_channel::<Input>();
    let mut editor =
        rustyline::DefaultEditor::new().map_err(|e| CliError::new(format!("terminal: {e}")))?;
    let mut printer = editor.create_external_printer().ok();

    let joined = match (&options.conversation, options.memory) {
        (Some(id), _) => conn.join_conversation(Some(id), false).await?,
        (None, true) => create_ephemeral(&conn, "cli-ephemeral").await?,
        (None, false) => {
            let saved = if options.resume { load_state() } else { None };
            match (&saved, options.resume) {
                (Some(id), true) => match conn.join_conversation(Some(id), false).await {
                    Ok(j) => j,
                    Err(e) if e.is_not_found() => {
                        let question = format!("Conversation {id} no longer exists. Join \"{CLI_CONVERSATION}\" instead?");
                        if !std::io::stdin().is_terminal() || !ask_yes_no(&question) {
                            return Err(CliError::new(format!("{e}; not falling back")));
                        }
                        join_named_or_fallback(&conn, None, CLI_CONVERSATION)
                            .await?
                            .0
                    }
                    Err(e) => return Err(e.into()),
                },
                _ => {
                    join_named_or_fallback(&conn, None, CLI_CONVERSATION)
                        .await?
                        .0
                }
            }
        }
    };
    let mut session = Session {
        conversation_id: joined.conversation_id.clone(),
        name: joined.name.clone(),
        connection_id: joined.connection_id.clone(),
        persist: !options.memory,
    };
    if session.persist {
        save_state(&session.conversation_id);
    }
    println!(
        "Joined \"{}\" ({}). Type @help for commands, Ctrl-D to exit.",
        terminal_safe(&session.name),
        session.conversation_id
    );
    replay(&conn, &session).await;

    // The UI thread owns the editor.
    let history_file = home_dir().join("cli-history.txt");
    let _ = editor.load_history(&history_file);
    let first_prompt = prompt(&session);
    let ui =
        std::thread::spawn(move || ui_loop(editor, first_prompt, ui_rx, input_tx, history_file));

    let mut pending_questions: Vec<(String, Value)> = Vec::new();
    let result: CliResult = loop {
        tokio::select! {
            input = input_rx.recv() => {
                match input {
                    None | Some(Input::Eof) => break Ok(()),
                    Some(Input::Answer(_) | Input::Interrupt) => {}
                    Some(Input::Line(line)) => {
                        let line = line.trim().to_string();
                        if !line.is_empty() {
                            handle_line(&conn, &mut session, &line, &ui_tx, &mut input_rx, &mut events, &mut interrupts, &mut pending_questions).await;
                        }
                        let _ = ui_tx.send(Ui::Prompt(prompt(&session)));
                    }
                }
            }
            Some(event) = events.recv() => {
                if let Event::Closed { .. } = event {
                    break Err(CliError::new("the server closed the connection"));
                }
                if let Some(text) = render_live(&event, &session, &mut pending_questions, true) {
                    let text = terminal_safe(&text).into_owned();
                    match printer.as_mut() {
                        Some(p) => { let _ = rustyline::ExternalPrinter::print(p, text); }
                        None => println!("{text}"),
                    }
                }
            }
            _ = interrupts.recv() => {}
        }
    };
    drop(ui_tx);
    if options.memory {
        delete_ephemeral(&conn, &session.conversation_id).await;
    }
    conn.close();
    let _ = ui.join();
    result
}

fn interrupt_stream() -> mpsc::UnboundedReceiver<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    rx
}

fn prompt(session: &Session) -> String {
    format!("{}> ", terminal_safe(&session.name))
}

fn ui_loop(
    mut editor: rustyline::DefaultEditor,
    mut prompt_text: String,
    ui_rx: std_mpsc::Receiver<Ui>,
    input_tx: mpsc::UnboundedSender<Input>,
    history_file: PathBuf,
) {
    use rustyline::error::ReadlineError;
    loop {
        match editor.readline(&prompt_text) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                if input_tx.send(Input::Line(line)).is_err() {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => {
                let _ = input_tx.send(Input::Eof);
                break;
            }
        }
        // The command runs: print its output, answer its questions, until told to prompt.
        loop {
            match ui_rx.recv() {
                Ok(Ui::Print(text)) => println!("{}", terminal_safe(&text)),
                Ok(Ui::Ask(question, choices)) => {
                    let listed: Vec<String> = choices
                        .iter()
                        .enumerate()
                        .map(|(i, c)| format!("[{}] {c}", i + 1))
                        .collect();
                    let asked = format!("? {question} {} > ", listed.join(" "));
                    let reply = match editor.readline(&terminal_safe(&asked)) {
                        // Ctrl-C at a question cancels the command, as it does elsewhere.
                        Err(ReadlineError::Interrupted) => Input::Interrupt,
                        answer => Input::Answer(answer.ok().and_then(|a| pick(&a, &choices))),
                    };
                    if input_tx.send(reply).is_err() {
                        return;
                    }
                }
                Ok(Ui::Prompt(p)) => {
                    prompt_text = p;
                    break;
                }
                Err(_) => {
                    save_history(&mut editor, &history_file);
                    return;
                }
            }
        }
    }
    save_history(&mut editor, &history_file);
}

/// Saves the prompt history, readable by its owner only (it holds what the user typed).
fn save_history(editor: &mut rustyline::DefaultEditor, file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = file.parent() {
        let _ = roundtable_actors::store::private_dir_builder()
            .recursive(true)
            .create(dir);
    }
    if editor.save_history(file).is_ok() {
        let _ = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600));
    }
}

/// Reads a choice: its number (1-based) or its text.
fn pick(answer: &str, choices: &[String]) -> Option<usize> {
    let a = answer.trim();
    if let Ok(n) = a.parse::<usize>() {
        return (1..=choices.len()).contains(&n).then(|| n - 1);
    }
    choices.iter().position(|c| {
        c.eq_ignore_ascii_case(a)
            || c.chars()
                .next()
                .is_some_and(|f| a.eq_ignore_ascii_case(&f.to_string()))
    })
}

async fn replay(conn: &Connection, session: &Session) {
    match conn.display_history(&session.conversation_id, None).await {
        Ok(entries) => {
            for e in &entries {
                if let Some(line) = render_history_entry(e, &session.connection_id) {
                    println!("{}", terminal_safe(&line));
                }
            }
        }
        Err(e) => eprintln!("warning: could not replay the history: {e}"),
    }
}

/// The text of a live event, if it is for the current conversation and worth showing.
/// `others_only`: at the prompt, our own request echoes are skipped.
fn render_live(
    event: &Event,
    session: &Session,
    questions: &mut Vec<(String, Value)>,
    at_prompt: bool,
) -> Option<String> {
    let Event::Call {
        conversation_id,
        method,
        args,
    } = event
    else {
        return None;
    };
    if *conversation_id != session.conversation_id {
        return None;
    }
    match method.as_str() {
        "setUserRequest" => {
            let who = args[0]["connectionId"].as_str().unwrap_or("");
            (who != session.connection_id)
                .then(|| format!("> [client {who}] {}", args[1].as_str().unwrap_or("")))
        }
        "appendDisplay" | "setDisplay" => {
            if args.get(1).and_then(Value::as_str) == Some("temporary") {
                return None;
            }
            Some(render_message(&args[0]))
        }
        "notify" if args[1] == "commandComplete" => args[2]["result"]["lastError"]
            .as_str()
            .map(|e| format!("error: {e}")),
        "requestCancelled" => Some(format!(
            "(request cancelled: {})",
            args[1].as_str().unwrap_or("")
        )),
        "requestInteraction" if at_prompt => {
            let q = &args[0];
            questions.push((
                q["interactionId"].as_str().unwrap_or("").to_string(),
                q.clone(),
            ));
            let choices: Vec<String> = q["choices"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .map(|(i, c)| format!("[{}] {}", i + 1, c.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            Some(format!(
                "? {} {} (answer with /answer <n>)",
                q["message"].as_str().unwrap_or(""),
                choices.join(" ")
            ))
        }
        "interactionResolved" | "interactionCancelled" => {
            let id = args[0].as_str().unwrap_or("");
            questions.retain(|(q, _)| q != id);
            None
        }
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn handle_line(
    conn: &Connection,
    session: &mut Session,
    line: &str,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
    events: &mut mpsc::UnboundedReceiver<Event>,
    interrupts: &mut mpsc::UnboundedReceiver<()>,
    questions: &mut Vec<(String, Value)>,
) {
    let print = |t: String| {
        let _ = ui.send(Ui::Print(t));
    };
    // `/conversation …` is the same as `@conversation …`, run locally.
    let local = line
        .strip_prefix("/conversation")
        .map(|rest| format!("@conversation{rest}"));
    if let Some(Command::Conversation(payload)) = commands::parse(local.as_deref().unwrap_or(line))
    {
        manage_locally(conn, session, &payload, &print).await;
        return;
    }
    if let Some(rest) = line.strip_prefix("/answer") {
        let Some((id, q)) = questions.first().cloned() else {
            print("There is no question waiting.".into());
            return;
        };
        let choices: Vec<String> = q["choices"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        match pick(rest, &choices) {
            Some(i) => {
                if let Err(e) = conn
                    .respond_to_interaction(&session.conversation_id, &id, i)
                    .await
                {
                    print(format!("error: {e}"));
                }
                questions.retain(|(q, _)| *q != id);
            }
            None => print(format!("Answer with a number from 1 to {}.", choices.len())),
        }
        return;
    }
    let request_id = match conn
        .submit_command(
            &session.conversation_id,
            line,
            &uuid::Uuid::new_v4().to_string(),
        )
        .await
    {
        Ok(id) => id,
        Err(e) => {
            print(format!("error: {e}"));
            return;
        }
    };
    let wait = conn.wait_command(&request_id);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            outcome = &mut wait => {
                // Output that arrived with the completion is still in the queue: show it.
                while let Ok(event) = events.try_recv() {
                    if let Some(text) = render_live(&event, session, questions, false) {
                        print(text);
                    }
                }
                if let Err(e) = outcome {
                    print(format!("error: {e}"));
                }
                return;
            }
            _ = interrupts.recv() => cancel(conn, session, &request_id, &print).await,
            Some(event) = events.recv() => {
                match &event {
                    Event::Closed { .. } => { print("the server closed the connection".into()); return; }
                    Event::Call { conversation_id, method, args } if *conversation_id == session.conversation_id => {
                        let ours = |v: &Value| v["requestId"]["requestId"] == request_id.as_str();
                        if method == "requestInteraction" && ours(&args[0]) {
                            let q = &args[0];
                            let choices: Vec<String> = q["choices"].as_array().map(|c| c.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
                            let _ = ui.send(Ui::Ask(q["message"].as_str().unwrap_or("").to_string(), choices));
                            match input.recv().await {
                                Some(Input::Answer(Some(i))) => {
                                    let id = q["interactionId"].as_str().unwrap_or("");
                                    if let Err(e) = conn.respond_to_interaction(&session.conversation_id, id, i).await {
                                        print(format!("error: {e}"));
                                    }
                                }
                                Some(Input::Interrupt) => cancel(conn, session, &request_id, &print).await,
                                _ => {}
                            }
                            continue;
                        }
                        if method == "requestChoice" {
                            let choices: Vec<String> = args[4].as_array().map(|c| c.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
                            let _ = ui.send(Ui::Ask(args[3].as_str().unwrap_or("").to_string(), choices.clone()));
                            match input.recv().await {
                                Some(Input::Answer(Some(i))) => {
                                    let response = if args[2] == "yesNo" { json!(i == 0) } else { json!([i]) };
                                    let id = args[1].as_str().unwrap_or("");
                                    if let Err(e) = conn.respond_to_choice(&session.conversation_id, id, response).await {
                                        print(format!("error: {e}"));
                                    }
                                }
                                Some(Input::Interrupt) => cancel(conn, session, &request_id, &print).await,
                                _ => {}
                            }
                            continue;
                        }
                        if method == "takeAction" && args[1] == "manage-conversation" {
                            manage_locally(conn, session, &args[2], &print).await;
                            continue;
                        }
                        if let Some(text) = render_live(&event, session, questions, false) {
                            print(text);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Ctrl-C: cancel the running command (its `requestCancelled` then ends the wait).
async fn cancel(conn: &Connection, session: &Session, request_id: &str, print: &dyn Fn(String)) {
    match conn
        .cancel_command(&session.conversation_id, request_id)
        .await
    {
        Ok(kind) => log::debug!("cancel: {kind}"),
        Err(e) => print(format!("error: {e}")),
    }
}

async fn manage_locally(
    conn: &Connection,
    session: &mut Session,
    payload: &Value,
    print: &dyn Fn(String),
) {
    let result = manage_conversation(conn, session, payload).await;
    print(render_action(&result));
    if let ActionResult::Ok {
        switched: Some(_), ..
    } = result
    {
        // Joined the new one and left the old: replay the new conversation's history.
        match conn.display_history(&session.conversation_id, None).await {
            Ok(entries) => {
                for e in &entries {
                    if let Some(line) = render_history_entry(e, &session.connection_id) {
                        print(line);
                    }
                }
            }
            Err(e) => print(format!("warning: could not replay the history: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_content_kinds() {
        assert_eq!(content_text(&json!("hi")), "hi");
        assert_eq!(content_text(&json!(["a", "b"])), "a\nb");
        assert_eq!(
            content_text(&json!([["a", "b"], ["c", "d"]])),
            "a | b\nc | d"
        );
        assert_eq!(
            content_text(&json!({"type": "markdown", "content": "**x**"})),
            "**x**"
        );
        let m = json!({"message": {"type": "text", "content": "5"}, "toolResult": {"content": "5", "isError": false}});
        assert_eq!(render_message(&m), "  [result] 5");
        assert_eq!(pick("2", &["Yes".into(), "No".into()]), Some(1));
        assert_eq!(pick("y", &["Yes".into(), "No".into()]), Some(0));
        assert_eq!(pick("9", &["Yes".into(), "No".into()]), None);
    }

    #[test]
    fn table_has_the_columns() {
        let t = table(
            &[ConversationInfo {
                conversation_id: "id-1".into(),
                name: "CLI".into(),
                client_count: 2,
                created_at: "2026-01-01T00:00:00.000Z".into(),
                message_count: 3,
            }],
            None,
        );
        assert!(
            t.starts_with("CONVERSATION ID  NAME  CLIENTS  MESSAGES  CREATED AT"),
            "{t}"
        );
        assert!(t.contains("id-1") && t.contains("2026-01-01"));
    }
}

/// Runs a client command on a small tokio runtime; an error is one line on stderr, and its
/// code the exit code.
pub fn block_on(work: impl std::future::Future<Output = CliResult>) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("roundtable: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roundtable: {}", terminal_safe(&e.message));
            std::process::ExitCode::from(e.code)
        }
    }
}
