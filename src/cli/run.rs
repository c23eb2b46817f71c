//! `roundtable run request | explain | translate`: joins (filtered to its own output), submits
//! one command, prints its output until it completes; a failed or cancelled command exits 1.

use super::{render_message, terminal_safe, CliError, CliResult, CLI_CONVERSATION};
use crate::client::conversation::find_or_create_named;
use crate::client::{ClientIo, CommandOutcome, Connection, Endpoint, Event};

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
pub async fn run(
    server: &Endpoint,
    kind: RunKind,
    text: &str,
    conversation: Option<&str>,
) -> CliResult {
    let conn = Connection::connect_to(server).await?;
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
    // An answer is printed as it is written; the line its pieces leave open is ended before
    // anything else.
    let mut open_line = false;
    let mut print_output = |event: Event| {
        use std::io::Write as _;
        let Event::Call {
            call: ClientIo::Display {
                message, inline, ..
            },
            ..
        } = event
        else {
            return;
        };
        if inline {
            let (piece, thinking) = crate::cli::render::stream_piece(&message);
            let safe = terminal_safe(&piece);
            let shown = if thinking {
                crate::cli::render::dim(&safe)
            } else {
                safe.into_owned()
            };
            print!("{shown}");
            let _ = std::io::stdout().flush();
            open_line = !shown.ends_with('\n');
        } else {
            if std::mem::take(&mut open_line) {
                println!();
            }
            println!("{}", terminal_safe(&render_message(&message)));
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
    if open_line {
        println!();
    }
    conn.close();
    match outcome {
        CommandOutcome::Completed(result) if result["cancelled"] == true => {
            Err(CliError::new("cancelled".to_string()))
        }
        CommandOutcome::Completed(result) => match result["lastError"].as_str() {
            Some(e) => Err(CliError::new(format!("error: {e}"))),
            None => Ok(()),
        },
        CommandOutcome::Cancelled(reason) => {
            Err(CliError::new(super::render::cancelled_text(&reason)))
        }
    }
}
