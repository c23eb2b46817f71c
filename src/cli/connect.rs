//! `roundtable connect`: the interactive prompt. A UI thread owns the line editor
//! (rustyline); the async side owns the connection. At the prompt, live output from other
//! clients is printed above it; while a command runs, its output streams and its questions are
//! asked at the prompt. A private choice that arrives at the prompt (a client agent's choice
//! outlives its command) is listed and answered with `/answer`, like another client's
//! question. Tab completes `@` commands (`complete.rs`, the server's
//! `getCommandCompletion`). Ctrl-C cancels the running command, Ctrl-D exits.
//!
//! Joining replays only the newest screenful of the display log (a `getDisplayHistory` page:
//! as many entries as the terminal has rows, 40 when unknown) after a line saying how many
//! earlier entries there are; `/history` (or `@conversation history`) prints the page before
//! the oldest one shown, each time further back, until the first entry.
//!
//! The prompt shows the conversation's context meter when it has one (`Work [ctx 1.2k/8.2k
//! 15%]> `): read with `getStatus` on joining, then kept from the server's `contextMeter`
//! notifications. The line editor cannot redraw a prompt while it reads a line, so a change
//! made by another client shows at the next prompt.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use roundtable_actors::agent::usage::ContextMeter;
use roundtable_actors::conversation::commands::{self, Command};
use roundtable_actors::conversation::METER_EVENT;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::complete::CommandCompleter;
use super::conversations::ask_yes_no;
use super::{
    home_dir, load_state, render_action, render_history_entry, render_message, save_state,
    terminal_safe, CliError, CliResult, CLI_CONVERSATION,
};
use crate::client::conversation::{
    create_ephemeral, delete_ephemeral, join_named_or_fallback, manage_conversation, ActionResult,
    ManageHost,
};
use crate::client::{Connection, Endpoint, Event, JoinResult};

mod asking;

/// Options of `roundtable connect`.
pub struct ConnectOptions {
    /// Join this conversation id.
    pub conversation: Option<String>,
    /// Rejoin the id saved in the state file.
    pub resume: bool,
    /// Use an ephemeral conversation deleted on exit.
    pub memory: bool,
}

/// The prompt's line editor, with Tab completion.
type LineEditor = rustyline::Editor<CommandCompleter, rustyline::history::DefaultHistory>;

/// From the async side to the UI thread.
enum Ui {
    /// Print a block of text.
    Print(String),
    /// Ask a question; answer with `Input::Answer`.
    Ask(String, Vec<String>),
    /// Read one line at this prompt (a form field…); answer with `Input::Text`.
    AskLine(String),
    /// The command finished: prompt again (with this prompt text).
    Prompt(String),
    /// Clear the screen (the server's `clear` for `@system clear`).
    Clear,
}

/// From the UI thread to the async side.
enum Input {
    /// A line typed at the prompt.
    Line(String),
    /// Ctrl-C while answering a question: cancel the running command.
    Interrupt,
    /// The chosen index (None: no answer).
    Answer(Option<usize>),
    /// The line typed at an `Ui::AskLine` prompt (empty at Ctrl-D).
    Text(String),
    /// Ctrl-D.
    Eof,
}

struct Session {
    conversation_id: String,
    name: String,
    connection_id: String,
    persist: bool,
    /// The server sent `exit` for our request (`@system exit`): leave after it completes.
    exit_requested: bool,
    /// The conversation's context meter, for the prompt (`None`: nothing reported).
    meter: Option<ContextMeter>,
    /// Seq of the oldest display entry shown (replayed or paged back to): how many earlier
    /// entries there are, seqs starting at 0; `/history` pages back from it.
    history_start: u64,
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

/// `roundtable connect`: the interactive prompt. Long because it is the session's whole
/// life in order: join (with the resume fallback), replay, start the UI thread, the event
/// loop, then leave.
pub async fn connect(server: &Endpoint, options: ConnectOptions) -> CliResult {
    let conn = Arc::new(Connection::connect_to(server).await?);
    let mut events = conn.take_events().expect("fresh connection");
    // From here Ctrl-C is ours (cancel), not the default (kill).
    let mut interrupts = interrupt_stream();

    let (ui_tx, ui_rx) = std_mpsc::channel::<Ui>();
    let (input_tx, mut input_rx) = mpsc::unbounded_channel::<Input>();
    let config = rustyline::Config::builder()
        .completion_type(rustyline::CompletionType::List)
        .build();
    let mut editor =
        LineEditor::with_config(config).map_err(|e| CliError::new(format!("terminal: {e}")))?;
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
        exit_requested: false,
        meter: None,
        history_start: 0,
    };
    refresh_meter(&conn, &mut session).await;
    if session.persist {
        save_state(&session.conversation_id);
    }
    println!(
        "Joined \"{}\" ({}). Type @help for commands, Ctrl-D to exit.",
        terminal_safe(&session.name),
        session.conversation_id
    );
    let print_now = |text: String| println!("{}", terminal_safe(&text));
    replay(&conn, &mut session, &print_now).await;

    // Tab asks the server of the conversation the prompt is in.
    let completed_in = Arc::new(Mutex::new(session.conversation_id.clone()));
    editor.set_helper(Some(CommandCompleter {
        conn: conn.clone(),
        runtime: tokio::runtime::Handle::current(),
        conversation: completed_in.clone(),
    }));
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
                    Some(Input::Answer(_) | Input::Text(_) | Input::Interrupt) => {}
                    Some(Input::Line(line)) => {
                        let line = line.trim().to_string();
                        if !line.is_empty() {
                            handle_line(&conn, &mut session, &line, &ui_tx, &mut input_rx, &mut events, &mut interrupts, &mut pending_questions).await;
                            if let Ok(mut id) = completed_in.lock() {
                                id.clone_from(&session.conversation_id);
                            }
                        }
                        if session.exit_requested {
                            break Ok(());
                        }
                        let _ = ui_tx.send(Ui::Prompt(prompt(&session)));
                    }
                }
            }
            Some(event) = events.recv() => {
                if let Event::Closed { .. } = event {
                    break Err(CliError::new("the server closed the connection"));
                }
                note_meter(&event, &mut session);
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

/// `Work> `, or with the context meter `Work [ctx 1.2k/8.2k 15%]> `.
fn prompt(session: &Session) -> String {
    match &session.meter {
        Some(meter) => format!(
            "{} [{}]> ",
            terminal_safe(&session.name),
            meter_badge(meter)
        ),
        None => format!("{}> ", terminal_safe(&session.name)),
    }
}

/// The meter in a few characters: `ctx 1.2k/8.2k 15%`, or `ctx 950` without a window.
fn meter_badge(meter: &ContextMeter) -> String {
    let mut out = format!("ctx {}", compact(meter.context_tokens));
    if let Some(window) = meter.context_window {
        out.push_str(&format!("/{}", compact(window)));
    }
    if let Some(percent) = meter.percent() {
        out.push_str(&format!(" {percent}%"));
    }
    out
}

/// `950`, `1.2k`, `12k`, `1.2M`, `128M`: a token count for the prompt.
fn compact(n: u64) -> String {
    let scaled = |n: u64, unit: u64, suffix: &str| {
        if n < 10 * unit {
            format!("{}.{}{suffix}", n / unit, n % unit * 10 / unit)
        } else {
            format!("{}{suffix}", n / unit)
        }
    };
    match n {
        0..1000 => n.to_string(),
        1000..1_000_000 => scaled(n, 1000, "k"),
        _ => scaled(n, 1_000_000, "M"),
    }
}

/// Reads the meter of the session's conversation (`getStatus`); none when it cannot.
async fn refresh_meter(conn: &Connection, session: &mut Session) {
    session.meter = conn
        .context_meter(&session.conversation_id)
        .await
        .unwrap_or_else(|e| {
            log::debug!("no context meter: {e}");
            None
        });
}

/// Keeps the meter of a `contextMeter` notification for the session's conversation.
fn note_meter(event: &Event, session: &mut Session) {
    if let Event::Call {
        conversation_id,
        method,
        args,
    } = event
    {
        if *conversation_id == session.conversation_id
            && method == "notify"
            && args[1] == METER_EVENT
        {
            session.meter = serde_json::from_value(args[2].clone()).unwrap_or(None);
        }
    }
}

fn ui_loop(
    mut editor: LineEditor,
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
                Ok(Ui::Clear) => {
                    let _ = editor.clear_screen();
                }
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
                Ok(Ui::AskLine(asked)) => {
                    let reply = match editor.readline(&terminal_safe(&asked)) {
                        Err(ReadlineError::Interrupted) => Input::Interrupt,
                        answer => Input::Text(answer.unwrap_or_default()),
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
fn save_history(editor: &mut LineEditor, file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = file.parent() {
        let _ = roundtable_actors::storage::durable::private_dir_builder()
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

/// Display entries in a screenful: the terminal's rows (stdout's window size), 40 when
/// unknown (not a terminal, or a pseudo-terminal never given a size); at most 1,000, the
/// largest `getDisplayHistory` page.
fn screen_entries() -> u32 {
    // SAFETY: TIOCGWINSZ only writes a `winsize` into the struct it is given.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let rows = match unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } {
        0 if size.ws_row > 0 => u32::from(size.ws_row),
        _ => 40,
    };
    rows.min(1000)
}

/// `24990` → `24,990`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The line printed before a page of history: how many entries come before it (its first
/// seq: seqs start at 0), or that it starts the conversation.
fn earlier_line(first_seq: u64) -> String {
    match first_seq {
        0 => "(the conversation starts here)".to_string(),
        1 => "… 1 earlier entry: /history to see more".to_string(),
        n => format!("… {} earlier entries: /history to see more", thousands(n)),
    }
}

/// One page of the session's display log: the newest `limit` entries before `before` (all
/// when `None`); the seq of its first entry (`before`, or 0, when it is empty).
async fn history_page(
    conn: &Connection,
    session: &Session,
    before: Option<u64>,
    limit: u32,
) -> crate::client::ClientResult<(u64, Vec<Value>)> {
    let mut entries = conn
        .display_page(&session.conversation_id, None, before, limit)
        .await?;
    // A server without pages answers the whole log: keep its newest entries.
    let extra = entries.len().saturating_sub(limit as usize);
    entries.drain(..extra);
    let first = entries
        .first()
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(before.unwrap_or(0));
    Ok((first, entries))
}

/// Prints a page of entries after its [`earlier_line`] (none before a replay that starts the
/// conversation: nothing is missing there).
fn print_page(
    session: &Session,
    first: u64,
    entries: &[Value],
    replay: bool,
    print: &dyn Fn(String),
) {
    if first > 0 || !replay {
        print(earlier_line(first));
    }
    for e in entries {
        if let Some(line) = render_history_entry(e, &session.connection_id) {
            print(line);
        }
    }
}

/// Replays the newest screenful of the conversation's display log (on joining, on
/// switching), after a line saying how many earlier entries there are.
async fn replay(conn: &Connection, session: &mut Session, print: &dyn Fn(String)) {
    match history_page(conn, session, None, screen_entries()).await {
        Ok((first, entries)) => {
            session.history_start = first;
            print_page(session, first, &entries, true, print);
        }
        Err(e) => print(format!("warning: could not replay the history: {e}")),
    }
}

/// `/history` / `@conversation history`: the screenful before the oldest entry shown.
async fn page_back(conn: &Connection, session: &mut Session, print: &dyn Fn(String)) {
    if session.history_start == 0 {
        print("Already at the first entry of the conversation.".into());
        return;
    }
    let before = Some(session.history_start);
    match history_page(conn, session, before, screen_entries()).await {
        Ok((first, entries)) => {
            session.history_start = first;
            print_page(session, first, &entries, false, print);
        }
        Err(e) => print(format!("error: {e}")),
    }
}

/// Whether a typed line asks for earlier history: `/history`, `@conversation history` (or
/// `@conv history`).
fn asks_history(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    matches!(
        words.as_slice(),
        ["/history"] | ["@conversation" | "@conv", "history"]
    )
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
            "(request {})",
            super::render::cancelled_text(args[1].as_str().unwrap_or(""))
        )),
        "requestInteraction" if at_prompt && args[0]["type"] != "question" => {
            let q = &args[0];
            let what = match q["type"].as_str() {
                Some("form") => format!(
                    "a form{}",
                    q["form"]["message"]
                        .as_str()
                        .map_or(String::new(), |m| format!(": {m}"))
                ),
                _ => "to confirm an action".to_string(),
            };
            Some(format!(
                "? [client {}] asks {what} (answer it in that client)",
                q["requestId"]["connectionId"].as_str().unwrap_or("?")
            ))
        }
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
        // A private choice that came while no command of ours waits (a client agent's
        // choice asked again after an answer, or one whose command completed first).
        "requestChoice" | "requestForm" => {
            let id = args.get(1)?.as_str()?.to_string();
            questions.retain(|(q, _)| *q != id);
            questions.push((id, json!({"choice": method, "args": args})));
            Some(choice_line(method, args))
        }
        _ => None,
    }
}

/// The choices a `requestChoice` offers: its `choices`, or Yes and No for a `yesNo` sent
/// with none (as TypeAgent sends it).
fn choice_labels(args: &[Value]) -> Vec<String> {
    let listed: Vec<String> = args
        .get(4)
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if listed.is_empty() && args.get(2).and_then(Value::as_str) == Some("yesNo") {
        return vec!["Yes".into(), "No".into()];
    }
    listed
}

/// The line announcing a private choice (`requestChoice` / `requestForm`) at the prompt.
fn choice_line(method: &str, args: &[Value]) -> String {
    let text = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or("");
    if method == "requestForm" {
        let form = args.get(2).unwrap_or(&Value::Null);
        let heading = form["message"]
            .as_str()
            .map_or(String::new(), |m| format!(": {m}"));
        return format!("? {} asks a form{heading} (answer with /answer)", text(3));
    }
    if text(2) == "pickRemember" {
        return format!("? {} (answer with /answer)", text(3));
    }
    let listed: Vec<String> = choice_labels(args)
        .iter()
        .enumerate()
        .map(|(i, c)| format!("[{}] {c}", i + 1))
        .collect();
    format!(
        "? {} {} (answer with /answer <n>)",
        text(3),
        listed.join(" ")
    )
}

/// `/answer` for a private choice waiting at the prompt (`method` and `args` of its
/// `requestChoice` / `requestForm`): read the answer, send `respondToChoice`. False when it
/// was not answered (Ctrl-C, or a text that names no choice): it stays waiting.
async fn answer_choice(
    conn: &Connection,
    session: &Session,
    (method, args): (&str, &[Value]),
    typed: &str,
    ui: &std_mpsc::Sender<Ui>,
    input: &mut mpsc::UnboundedReceiver<Input>,
) -> bool {
    let print = |t: String| {
        let _ = ui.send(Ui::Print(t));
    };
    let response = if method == "requestForm" {
        asking::fill_form(args.get(2).unwrap_or(&Value::Null), ui, input).await
    } else if args.get(2).and_then(Value::as_str) == Some("pickRemember") {
        asking::pick_remember(args, ui, input).await
    } else {
        let labels = choice_labels(args);
        match pick(typed, &labels) {
            Some(i) if args[2] == "yesNo" => Some(json!(i == 0)),
            Some(i) => Some(json!([i])),
            None => {
                print(format!("Answer with a number from 1 to {}.", labels.len()));
                return false;
            }
        }
    };
    let Some(response) = response else {
        return false;
    };
    let id = args.get(1).and_then(Value::as_str).unwrap_or("");
    if let Err(e) = conn
        .respond_to_choice(&session.conversation_id, id, response)
        .await
    {
        print(format!("error: {e}"));
    }
    true
}

/// One line typed at the prompt: a local `/conversation` or `/answer`, else a command that
/// is submitted and followed (output, questions, choices, Ctrl-C) until it completes. Long,
/// and with many arguments, because it is one `select!` loop over the prompt's channels;
/// splitting it is left for a follow-up that does not change behaviour.
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
    if asks_history(line) {
        page_back(conn, session, &print).await;
        return;
    }
    // `/conversation …` is the same as `@conversation …`, run locally.
    let local = line
        .strip_prefix("/conversation")
        .map(|rest| format!("@conversation{rest}"));
    let line = match commands::parse(local.as_deref().unwrap_or(line)) {
        Some(Command::Conversation(payload)) => {
            manage_locally(conn, session, &payload, &print).await;
            return;
        }
        // `handoff` is the server's work: `/conversation handoff …` goes as `@conversation …`.
        Some(Command::Handoff(_)) => local.as_deref().unwrap_or(line),
        _ => line,
    };
    if let Some(rest) = line.strip_prefix("/answer") {
        let Some((id, q)) = questions.first().cloned() else {
            print("There is no question waiting.".into());
            return;
        };
        if let (Some(method), Some(args)) = (q["choice"].as_str(), q["args"].as_array()) {
            if answer_choice(conn, session, (method, args), rest, ui, input).await {
                questions.retain(|(q, _)| *q != id);
            }
            return;
        }
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
                // Output that arrived with the completion is still in the queue: show it, and
                // carry out the action a request in words asked for (its `takeAction` comes
                // just before the completion, so it is often still queued here).
                while let Ok(event) = events.try_recv() {
                    note_meter(&event, session);
                    if let Event::Call { conversation_id, method, args } = &event {
                        if *conversation_id == session.conversation_id
                            && method == "takeAction"
                            && args[1] == "manage-conversation"
                        {
                            let payload = args[2].clone();
                            manage_locally(conn, session, &payload, &print).await;
                            continue;
                        }
                    }
                    if own_control(&event, session, &request_id, ui) {
                        continue;
                    }
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
                note_meter(&event, session);
                match &event {
                    Event::Closed { .. } => { print("the server closed the connection".into()); return; }
                    Event::Call { conversation_id, method, args } if *conversation_id == session.conversation_id => {
                        let ours = |v: &Value| v["requestId"]["requestId"] == request_id.as_str();
                        if method == "requestInteraction" && ours(&args[0]) && args[0]["type"] != "question" {
                            let q = &args[0];
                            let response = if q["type"] == "form" {
                                asking::fill_form(&q["form"], ui, input).await.map(|value| json!({"interactionId": q["interactionId"], "type": "form", "value": value}))
                            } else {
                                asking::decide_proposal(q, ui, input).await
                            };
                            match response {
                                Some(response) => {
                                    if let Err(e) = conn.respond_to_interaction_with(&session.conversation_id, response).await {
                                        print(format!("error: {e}"));
                                    }
                                }
                                None => cancel(conn, session, &request_id, &print).await,
                            }
                            continue;
                        }
                        if method == "requestForm" || (method == "requestChoice" && args[2] == "pickRemember") {
                            let response = if method == "requestForm" {
                                asking::fill_form(&args[2], ui, input).await
                            } else {
                                asking::pick_remember(args, ui, input).await
                            };
                            match response {
                                Some(response) => {
                                    let id = args[1].as_str().unwrap_or("");
                                    if let Err(e) = conn.respond_to_choice(&session.conversation_id, id, response).await {
                                        print(format!("error: {e}"));
                                    }
                                }
                                None => cancel(conn, session, &request_id, &print).await,
                            }
                            continue;
                        }
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
                            let choices = choice_labels(args);
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
                        if own_control(&event, session, &request_id, ui) {
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

/// `@system clear` / `@system exit`, sent to us alone with our request's id: clears the
/// screen, or ends the session once the request completes. Checked both while the request
/// runs and on the events still queued when its completion is seen first (both may be ready
/// at once: a busy machine delivers the `exit` and the completion together).
fn own_control(
    event: &Event,
    session: &mut Session,
    request_id: &str,
    ui: &std_mpsc::Sender<Ui>,
) -> bool {
    let Event::Call {
        conversation_id,
        method,
        args,
    } = event
    else {
        return false;
    };
    if *conversation_id != session.conversation_id
        || !(method == "clear" || method == "exit")
        || args[0]["requestId"] != request_id
    {
        return false;
    }
    if method == "clear" {
        let _ = ui.send(Ui::Clear);
    } else {
        session.exit_requested = true;
    }
    true
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
        refresh_meter(conn, session).await;
        // Joined the new one and left the old: replay the new conversation's history.
        replay(conn, session, print).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prompt carries the meter only when there is one, in a few characters.
    #[test]
    fn the_prompt_shows_the_meter() {
        let mut session = Session {
            conversation_id: "c".into(),
            name: "Work".into(),
            connection_id: "0".into(),
            persist: false,
            exit_requested: false,
            meter: None,
            history_start: 0,
        };
        assert_eq!(prompt(&session), "Work> ");
        session.meter = Some(ContextMeter {
            context_tokens: 1234,
            context_window: Some(8192),
            model: Some("m".into()),
        });
        assert_eq!(prompt(&session), "Work [ctx 1.2k/8.1k 15%]> ");
        session.meter = Some(ContextMeter {
            context_tokens: 950,
            context_window: None,
            model: None,
        });
        assert_eq!(prompt(&session), "Work [ctx 950]> ");
        let counts: Vec<String> = [0, 999, 1000, 12_345, 999_999, 1_500_000, 128_000_000]
            .into_iter()
            .map(compact)
            .collect();
        assert_eq!(counts, ["0", "999", "1.0k", "12k", "999k", "1.5M", "128M"]);
    }

    /// The line before a page counts earlier entries with separators, or marks the start;
    /// only `/history` and `@conversation history` ask for it.
    #[test]
    fn history_lines_and_commands() {
        let counts: Vec<String> = [0, 7, 999, 1000, 24_990, 1_234_567]
            .into_iter()
            .map(thousands)
            .collect();
        assert_eq!(counts, ["0", "7", "999", "1,000", "24,990", "1,234,567"]);
        assert_eq!(
            earlier_line(24_990),
            "… 24,990 earlier entries: /history to see more"
        );
        assert_eq!(earlier_line(1), "… 1 earlier entry: /history to see more");
        assert_eq!(earlier_line(0), "(the conversation starts here)");
        for typed in ["/history", " @conversation  history ", "@conv history"] {
            assert!(asks_history(typed), "{typed}");
        }
        for typed in [
            "/history 5",
            "@conversation list",
            "history",
            "@system history",
        ] {
            assert!(!asks_history(typed), "{typed}");
        }
        assert!((1..=1000).contains(&screen_entries()));
    }

    #[test]
    fn choices_by_number_or_initial() {
        assert_eq!(pick("2", &["Yes".into(), "No".into()]), Some(1));
        assert_eq!(pick("y", &["Yes".into(), "No".into()]), Some(0));
        assert_eq!(pick("9", &["Yes".into(), "No".into()]), None);
    }
}
