//! `roundtable connect`: the interactive prompt. A UI thread owns the line editor
//! (rustyline, [`ui_loop`]); the async side owns the connection ([`Prompt`] in `running.rs`).
//! At the prompt, live output from other clients is printed above it; while a command runs,
//! its output streams and its questions are asked at the prompt. A private choice that arrives
//! at the prompt (a client agent's choice outlives its command) is listed and answered with
//! `/answer`, like another client's question. Tab completes `@` commands (`complete.rs`, the
//! server's `getCommandCompletion`). Ctrl-C cancels the running command, Ctrl-D exits.
//!
//! What a typed line does is decided in `line.rs`: the prompt's own commands first
//! (`/history`, `/conversation` and `@conversation`, `/answer`), then TypeAgent's slash
//! commands as the `@system` commands its CLI sends for them (`/help`, `/history N`,
//! `/session`, `/config`, `/agents`, `/trace`, `/clear`, `/exit`), then the text as typed.
//! `/help` lists them, in that order.
//!
//! Joining replays only the newest screenful of the display log (a `getDisplayHistory` page:
//! as many entries as the terminal has rows, 40 when unknown) after a line saying how many
//! earlier entries there are; `/history` (or `@conversation history`) prints the page before
//! the oldest one shown, each time further back, until the first entry. A replayed question
//! that was answered shows the answer chosen ([`HistoryReader`]).
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
use serde_json::Value;
use tokio::sync::mpsc;

use super::complete::CommandCompleter;
use super::conversations::ask_yes_no;
use super::render::HistoryReader;
use super::{
    home_dir, load_state, save_state, terminal_safe, CliError, CliResult, CLI_CONVERSATION,
};
use crate::client::conversation::{
    create_ephemeral, delete_ephemeral, join_named_or_fallback, ManageHost,
};
use crate::client::{ClientIo, Connection, Endpoint, Event, JoinResult};

mod asking;
mod line;
mod running;

use running::Prompt;

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
    /// Print a piece of an answer being written, where the last one stopped (terminal-safe
    /// already), without ending the line.
    Stream(String),
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

/// The conversation the prompt is in, and what it shows of it.
struct Session {
    /// The joined conversation's id.
    conversation_id: String,
    /// Its name, for the prompt.
    name: String,
    /// Our connection id in it: tells our own requests from other clients'.
    connection_id: String,
    /// Remember the conversation in the state file (not for `--memory`).
    persist: bool,
    /// The server sent `exit` for our request (`@system exit`): leave after it completes.
    exit_requested: bool,
    /// The conversation's context meter, for the prompt (`None`: nothing reported).
    meter: Option<ContextMeter>,
    /// Seq of the oldest display entry shown (replayed or paged back to): how many earlier
    /// entries there are, seqs starting at 0; `/history` pages back from it.
    history_start: u64,
    /// Reads the replayed entries: remembers the questions shown, so their answers read as
    /// the labels chosen. Started anew with each replay (join, switch).
    history: HistoryReader,
}

impl Session {
    /// A session in the conversation just joined.
    fn new(joined: &JoinResult, persist: bool) -> Session {
        Session {
            conversation_id: joined.conversation_id.clone(),
            name: joined.name.clone(),
            connection_id: joined.connection_id.clone(),
            persist,
            exit_requested: false,
            meter: None,
            history_start: 0,
            history: HistoryReader::default(),
        }
    }

    /// Keeps the meter of a `contextMeter` notification (the caller checked the conversation).
    fn note_meter(&mut self, call: &ClientIo) {
        if let Some(meter) = running::meter_of(call) {
            self.meter = meter;
        }
    }
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

/// `roundtable connect`: the interactive prompt: join (with the resume fallback), replay,
/// start the UI thread, run the event loop (`prompt_loop`), then leave.
pub async fn connect(server: &Endpoint, options: ConnectOptions) -> CliResult {
    let conn = Arc::new(Connection::connect_to(server).await?);
    let events = conn.take_events().expect("fresh connection");
    // From here Ctrl-C is ours (cancel), not the default (kill).
    let interrupts = interrupt_stream();
    let config = rustyline::Config::builder()
        .completion_type(rustyline::CompletionType::List)
        .build();
    let mut editor =
        LineEditor::with_config(config).map_err(|e| CliError::new(format!("terminal: {e}")))?;
    let printer = editor.create_external_printer().ok();

    let joined = join_initial(&conn, &options).await?;
    let mut session = Session::new(&joined, !options.memory);
    refresh_meter(&conn, &mut session).await;
    if session.persist {
        save_state(&session.conversation_id);
    }
    println!(
        "Joined \"{}\" ({}). Type @help for commands, /help for slash commands, Ctrl-D to exit.",
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
    let (ui_tx, ui_rx) = std_mpsc::channel::<Ui>();
    let (input_tx, input_rx) = mpsc::unbounded_channel::<Input>();
    let ui =
        std::thread::spawn(move || ui_loop(editor, first_prompt, ui_rx, input_tx, history_file));

    let mut state = Prompt {
        conn: conn.clone(),
        session,
        ui: ui_tx,
        input: input_rx,
        events,
        interrupts,
        waiting: Vec::new(),
        lines: Default::default(),
        streaming: false,
    };
    let result = prompt_loop(&mut state, printer, &completed_in).await;
    let conversation_id = state.session.conversation_id.clone();
    drop(state);
    if options.memory {
        delete_ephemeral(&conn, &conversation_id).await;
    }
    conn.close();
    let _ = ui.join();
    result
}

/// Joins what `options` ask for: the given id, a new ephemeral conversation, the saved one
/// (`--resume`, asking before falling back when it is gone), or `CLI`.
async fn join_initial(conn: &Connection, options: &ConnectOptions) -> CliResult<JoinResult> {
    if let Some(id) = &options.conversation {
        return Ok(conn.join_conversation(Some(id), false).await?);
    }
    if options.memory {
        return Ok(create_ephemeral(conn, "cli-ephemeral").await?);
    }
    let saved = if options.resume { load_state() } else { None };
    let Some(id) = saved else {
        return Ok(join_named_or_fallback(conn, None, CLI_CONVERSATION)
            .await?
            .0);
    };
    match conn.join_conversation(Some(&id), false).await {
        Ok(j) => Ok(j),
        Err(e) if e.is_not_found() => {
            let question =
                format!("Conversation {id} no longer exists. Join \"{CLI_CONVERSATION}\" instead?");
            if !std::io::stdin().is_terminal() || !ask_yes_no(&question) {
                return Err(CliError::new(format!("{e}; not falling back")));
            }
            Ok(join_named_or_fallback(conn, None, CLI_CONVERSATION)
                .await?
                .0)
        }
        Err(e) => Err(e.into()),
    }
}

/// The session's loop: each typed line runs to completion; at the prompt, other clients'
/// output is printed above it; until Ctrl-D, `@system exit`, or the server closes.
async fn prompt_loop(
    state: &mut Prompt,
    mut printer: Option<impl rustyline::ExternalPrinter>,
    completed_in: &Mutex<String>,
) -> CliResult {
    loop {
        tokio::select! {
            input = state.input.recv() => match input {
                None | Some(Input::Eof) => return Ok(()),
                Some(Input::Answer(_) | Input::Text(_) | Input::Interrupt) => {}
                Some(Input::Line(line)) => {
                    let line = line.trim();
                    if !line.is_empty() {
                        state.handle_line(line).await;
                        if let Ok(mut id) = completed_in.lock() {
                            id.clone_from(&state.session.conversation_id);
                        }
                    }
                    if state.session.exit_requested {
                        return Ok(());
                    }
                    state.end_stream();
                    let _ = state.ui.send(Ui::Prompt(prompt(&state.session)));
                }
            },
            Some(event) = state.events.recv() => {
                let Event::Call { conversation_id, call } = event else {
                    return Err(CliError::new("the server closed the connection"));
                };
                if conversation_id != state.session.conversation_id {
                    continue;
                }
                state.session.note_meter(&call);
                for text in state.lines_live(call, true) {
                    match printer.as_mut() {
                        Some(p) => { let _ = p.print(text); }
                        None => println!("{text}"),
                    }
                }
            }
            _ = state.interrupts.recv() => {}
        }
    }
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

/// The UI thread: reads a line at the prompt, then serves the command it started
/// ([`serve_command`]) until told to prompt again; saves the history at the end.
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
        match serve_command(&mut editor, &ui_rx, &input_tx) {
            Some(next) => prompt_text = next,
            None => break,
        }
    }
    save_history(&mut editor, &history_file);
}

/// While a command runs: print its output, ask its questions, until told to prompt (the
/// new prompt text) or the async side is gone (`None`).
fn serve_command(
    editor: &mut LineEditor,
    ui_rx: &std_mpsc::Receiver<Ui>,
    input_tx: &mpsc::UnboundedSender<Input>,
) -> Option<String> {
    use rustyline::error::ReadlineError;
    loop {
        let reply = match ui_rx.recv().ok()? {
            Ui::Print(text) => {
                println!("{}", terminal_safe(&text));
                continue;
            }
            Ui::Stream(piece) => {
                use std::io::Write as _;
                print!("{piece}");
                let _ = std::io::stdout().flush();
                continue;
            }
            Ui::Clear => {
                let _ = editor.clear_screen();
                continue;
            }
            Ui::Prompt(next) => return Some(next),
            Ui::Ask(question, choices) => {
                let listed: Vec<String> = choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("[{}] {c}", i + 1))
                    .collect();
                let asked = format!("? {question} {} > ", listed.join(" "));
                match editor.readline(&terminal_safe(&asked)) {
                    // Ctrl-C at a question cancels the command, as it does elsewhere.
                    Err(ReadlineError::Interrupted) => Input::Interrupt,
                    answer => Input::Answer(answer.ok().and_then(|a| pick(&a, &choices))),
                }
            }
            Ui::AskLine(asked) => match editor.readline(&terminal_safe(&asked)) {
                Err(ReadlineError::Interrupted) => Input::Interrupt,
                answer => Input::Text(answer.unwrap_or_default()),
            },
        };
        input_tx.send(reply).ok()?;
    }
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
    session: &mut Session,
    first: u64,
    entries: &[Value],
    replay: bool,
    print: &dyn Fn(String),
) {
    if first > 0 || !replay {
        print(earlier_line(first));
    }
    for e in entries {
        if let Some(line) = session.history.entry(e, &session.connection_id) {
            print(line);
        }
    }
}

/// Replays the newest screenful of the conversation's display log (on joining, on
/// switching), after a line saying how many earlier entries there are.
async fn replay(conn: &Connection, session: &mut Session, print: &dyn Fn(String)) {
    session.history = HistoryReader::default();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The prompt carries the meter only when there is one, in a few characters.
    #[test]
    fn the_prompt_shows_the_meter() {
        let joined = JoinResult {
            connection_id: "0".into(),
            conversation_id: "c".into(),
            name: "Work".into(),
            pending_interactions: Vec::new(),
            queue_snapshot: None,
        };
        let mut session = Session::new(&joined, false);
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
    /// `/history` and `@conversation history` ask for it (`line.rs` tests the rest).
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
            assert!(line::asks_history(typed), "{typed}");
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
