//! Keeping a conversation within its model's context: `@compact`, and the same done by the
//! conversation itself before a model call once the context meter reaches
//! `--compact-at` percent of the model's window (default 90) — the model gets a summary of the
//! history it held instead of the history. The summary is appended to `history.jsonl` marked
//! as a compaction (`storage::chat_history::encode_compaction`): what the agent reads begins
//! there, and every line before it stays on disk (`@system history N` still reads them); the
//! display log is never touched. Every client is told, and the meter starts over (the next
//! turn's report is its new baseline).
//!
//! Who talks to it: the commands (`@compact`), the agent turn's start (`turn_events.rs`: the
//! automatic compaction), the turn's events ([`TurnEvent::Compacted`]).

use std::sync::Arc;

use actix::prelude::*;
use serde_json::json;

use super::routing::DisplayMode;
use super::turn_messages::{AfterCompact, TurnEvent};
use super::Conversation;
use crate::agent::{ChatMessage, Provider, ProviderRequest, Role};

/// Longest local (provider-less) compact summary, in characters.
const LOCAL_SUMMARY_CHARS: usize = 4000;

impl Conversation {
    /// Whether the context meter says the model's window is at least `--compact-at` percent
    /// full (never without a known window, a meter, or with the setting at 0).
    pub(super) fn context_nearly_full(&self) -> bool {
        let threshold = self.setup.runtime.compact_at;
        threshold > 0
            && self
                .meter
                .as_ref()
                .and_then(|m| m.percent())
                .is_some_and(|p| p >= threshold)
    }

    /// Summarizes the history the assistant holds (see [`summarize`]), then does `then`.
    /// Not the whole file: the summary is what a model reads in place of the history, and a
    /// model cannot take more than the window (reading all of a long file into memory to
    /// summarize it would undo the window's bound).
    pub(super) fn start_compact(&mut self, turn: u64, then: AfterCompact, ctx: &mut Context<Self>) {
        let history = self.chat_history();
        let total_before = self.chat_message_count();
        let provider = self.provider();
        let addr = ctx.address();
        self.spawn_for_running(
            async move {
                let replaced = history.len();
                let summary = summarize(provider.as_ref(), history).await;
                addr.do_send(TurnEvent::Compacted {
                    turn,
                    summary,
                    replaced,
                    total_before,
                    then,
                });
            },
            ctx,
        );
    }

    /// The summary of `replaced` messages (of `total_before` in the file) is written, then
    /// shown, and the request goes on as `then` says.
    pub(super) fn compacted(
        &mut self,
        turn: u64,
        summary: String,
        (replaced, total_before): (usize, usize),
        then: AfterCompact,
        ctx: &mut Context<Self>,
    ) {
        if !self.is_current(turn) {
            return;
        }
        let compacted = self.compacted_chat(&summary, total_before);
        let total_at_write = self.chat_message_count();
        let written = self.append_compaction(&compacted);
        ctx.spawn(
            async move {
                written
                    .await
                    .unwrap_or_else(|_| Err("log writer stopped".into()))
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                // The file is compacted even if the request was cancelled meanwhile: the
                // window follows it.
                let error = match result {
                    Ok(()) => {
                        act.chat_compacted(compacted, total_at_write);
                        // The history the meter measured is summarized: the next turn's
                        // report is the new baseline.
                        act.clear_meter();
                        None
                    }
                    Err(e) => Some(format!("could not compact the history: {e}")),
                };
                if !act.is_current(turn) {
                    return;
                }
                let request = act.queue.running().expect("current").request.clone();
                let heading = match then {
                    AfterCompact::Finish => "Conversation compacted",
                    AfterCompact::RunTurn(_) => {
                        "Conversation compacted to stay within the model's context window"
                    }
                    AfterCompact::AfterOverflow(_) => {
                        "Conversation compacted: the model said it was longer than its context \
                         window"
                    }
                };
                let text = match &error {
                    None => format!(
                        "**{heading}** ({replaced} messages → 1 summary; the history file keeps \
                         them all)\n\n{summary}"
                    ),
                    Some(e) => e.clone(),
                };
                let kind = if error.is_some() { "error" } else { "info" };
                act.display(
                    &request,
                    json!({"type": "markdown", "content": text, "kind": kind}),
                    Some(json!({"compactSummary": error.is_none()})),
                    DisplayMode::Block,
                );
                match then {
                    AfterCompact::Finish => act.finish(turn, error, ctx),
                    // The turn runs on the summary (or, if it could not be written, on the
                    // history as it was: the model says if it is too long).
                    AfterCompact::RunTurn(text) | AfterCompact::AfterOverflow(text) => {
                        act.run_agent_turn(turn, text, ctx)
                    }
                }
            }),
        );
    }
}

/// The `@compact` summary: the provider's, when it gives a real one, else a bounded local one.
async fn summarize(provider: &dyn Provider, history: Arc<Vec<ChatMessage>>) -> String {
    if history.is_empty() {
        return "(nothing to summarize)".to_string();
    }
    if provider.name() != "builtin" {
        let request = ProviderRequest {
            system: "You write faithful, compact summaries.".into(),
            history: history.clone(),
            messages: vec![ChatMessage::text(
                Role::User,
                "Summarize our conversation so far in a short paragraph, keeping names, numbers and decisions.",
            )],
            tools: Vec::new(),
        };
        if let Ok(r) = provider.complete(request).await {
            let text = ChatMessage {
                role: Role::Assistant,
                content: r.content,
            }
            .joined_text();
            if !text.trim().is_empty() {
                return text;
            }
        }
    }
    local_summary(&history)
}

/// The summary written without a model (the `builtin` provider's, and `@compact`'s when the
/// model gives none): how many messages, and what the user asked, at most
/// [`LOCAL_SUMMARY_CHARS`].
pub(super) fn local_summary(history: &[ChatMessage]) -> String {
    let mut out = format!(
        "Summary of {} earlier messages. The user asked:",
        history.len()
    );
    for m in history.iter().filter(|m| m.role == Role::User) {
        let t = m.joined_text();
        if t.is_empty() {
            continue;
        }
        let line: String = t.chars().take(200).collect();
        if out.chars().count() + line.chars().count() + 4 > LOCAL_SUMMARY_CHARS {
            out.push_str("\n- …");
            break;
        }
        out.push_str("\n- ");
        out.push_str(&line);
    }
    out
}
