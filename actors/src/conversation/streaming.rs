//! A model's answer as it is written (issue 50): the pieces a streaming provider hands the
//! turn ([`AnswerDelta`]) reach every client as `appendDisplay(…, "inline")` while the model
//! is still writing, and the display log keeps the answer as one entry, written when its model
//! call ends, which is what a client joining later replays.
//!
//! - **Frames**: pieces are gathered and sent at most once per `FRAME_INTERVAL` per
//!   conversation (the first at once, so the first words cost no wait); every client gets the
//!   same frame, serialized once. The outbound bounds that exist apply to each socket.
//! - **Segments**: a run of pieces of one kind (the model's thinking, its text) within one
//!   model call. Its whole text comes back as a display with `"streamed": true` when the call
//!   ends ([`crate::agent::turn::TurnSink::display`]): logged (with `"segment"`), not sent
//!   again, since every client has its pieces. A client that joins while a segment is open
//!   gets the words sent so far as one piece, then the rest live.
//! - **Durable without an fsync per piece**: the pieces are not logged. Every
//!   `CHECKPOINT_INTERVAL` (or `CHECKPOINT_BYTES` of new text) what was written since goes
//!   to `answer.partial.jsonl` through the log writer (its next group commit makes it durable);
//!   after a crash, start-up recovery logs each open request's checkpointed text as an
//!   `interrupted` entry (`persistence.rs`). An answer cut short by a cancel, an error or anything
//!   else that ends its segment early is logged as far as it got, marked `cancelled` or
//!   `incomplete`: never a silently truncated "complete" answer.
//!
//! `AnswerStream` (`answer_stream.rs`) is the state machine (plain data, unit-tested there);
//! this file applies what it answers.
//!
//! Who talks to it: the turn's events (`turn_events.rs`: pieces, the streamed displays), the queue
//! (`queue.rs`: cancel and finish close it), the join (`mod.rs`: the words so far).

use std::time::Instant;

use actix::prelude::*;
use serde_json::{json, Value};

use super::answer_stream::{CutShort, StreamEffect};
use super::audience::Audience;
use super::request_queue::{Request, Running};
use super::routing::DisplayMode;
use super::{Conversation, AGENT_SOURCE};
use crate::agent::AnswerDelta;
use crate::client::OutboundCall;
use crate::ids::{ConnectionId, RequestId};

/// The `IAgentMessage` of a piece of `request`'s answer.
fn piece_message(request: &Request, thinking: bool, piece: &str) -> Value {
    let mut content = json!({"type": "text", "content": piece});
    let mut message = json!({"requestId": request.id_obj(), "source": AGENT_SOURCE});
    if thinking {
        content["kind"] = "info".into();
        message["thinking"] = true.into();
    }
    message["message"] = content;
    message
}

impl Conversation {
    /// A piece of the running turn `turn`'s answer.
    pub(super) fn stream_piece(&mut self, turn: u64, delta: AnswerDelta, ctx: &mut Context<Self>) {
        let Some(running) = self.queue.current_mut(turn) else {
            return;
        };
        let effects = running.stream.piece(delta, Instant::now());
        self.apply_stream(turn, effects, ctx);
    }

    /// The armed flush of turn `turn` fired.
    fn stream_flush(&mut self, turn: u64, ctx: &mut Context<Self>) {
        let Some(running) = self.queue.current_mut(turn) else {
            return;
        };
        let effects = running.stream.flush(Instant::now());
        self.apply_stream(turn, effects, ctx);
    }

    /// Does what the stream answered.
    fn apply_stream(&mut self, turn: u64, effects: Vec<StreamEffect>, ctx: &mut Context<Self>) {
        let Some(request) = self.queue.running().map(|r| r.request.clone()) else {
            return;
        };
        for effect in effects {
            match effect {
                StreamEffect::Send { thinking, piece } => {
                    if !self.outbound.is_empty() {
                        // The piece waits behind a barrier (the request's acceptance) whose
                        // fsync may linger for the turn's completion: someone watches.
                        self.setup.runtime.log_writer.hurry();
                    }
                    self.broadcast(
                        "appendDisplay",
                        json!([
                            piece_message(&request, thinking, &piece),
                            DisplayMode::Inline.as_str()
                        ]),
                        Some(request.origin),
                    )
                }
                StreamEffect::ArmFlush(after) => {
                    ctx.run_later(after, move |act, ctx| act.stream_flush(turn, ctx));
                }
                StreamEffect::Checkpoint {
                    segment,
                    thinking,
                    text,
                } => {
                    if self.writes_closed {
                        continue;
                    }
                    let mut line = serde_json::to_vec(&json!({
                        "requestId": request.request_id.to_string(),
                        "segment": segment,
                        "thinking": thinking,
                        "text": text,
                    }))
                    .expect("a checkpoint serializes");
                    line.push(b'\n');
                    // Harmless to lose (the answer was not acknowledged): it never fails a
                    // later acknowledgement.
                    self.setup
                        .runtime
                        .log_writer
                        .append_unreported(&self.checkpoint_path, line);
                }
            }
        }
    }

    /// The running request's streamed segment of this kind ended with its whole text
    /// (`content`, `extra` with `"streamed": true`): what waits is sent, and the whole is
    /// logged for replay, not sent again. False when nothing of it was streamed (the caller
    /// shows it as any display).
    pub(super) fn stream_finished(
        &mut self,
        request: &Request,
        content: Value,
        mut extra: Value,
        ctx: &mut Context<Self>,
    ) -> bool {
        let thinking = extra["thinking"] == true;
        let Some(running) = self.queue.running_mut() else {
            return false;
        };
        let turn = running.turn;
        let Some((effects, number)) = running.stream.finish(thinking, Instant::now()) else {
            return false;
        };
        self.apply_stream(turn, effects, ctx);
        extra["segment"] = number.into();
        self.log_display(request, content, Some(extra), DisplayMode::Block);
        true
    }

    /// Ends the running request's open segments before their whole text came (an error, a
    /// cancel, another display): each is logged as far as clients got it, marked `why`.
    pub(super) fn stream_cut_short(&mut self, why: CutShort, ctx: &mut Context<Self>) {
        let Some(running) = self.queue.running_mut() else {
            return;
        };
        if !running.stream.is_open() {
            return;
        }
        let turn = running.turn;
        let request = running.request.clone();
        let (effects, cut) = running.stream.abandon(Instant::now());
        self.apply_stream(turn, effects, ctx);
        for (thinking, number, text) in cut {
            let mut content = json!({"type": "markdown", "content": text});
            let mut extra = json!({"streamed": true, "segment": number, why.flag(): true});
            if thinking {
                content = json!({"type": "text", "content": text, "kind": "info"});
                extra["thinking"] = true.into();
            }
            self.log_display(&request, content, Some(extra), DisplayMode::Block);
        }
    }

    /// The words of the running answer every client has been sent, for a client that joins
    /// now (`connection`, not filtered): one piece per open segment, queued before anything
    /// else the answer sends it.
    pub(super) fn stream_so_far_to(&mut self, connection: ConnectionId) {
        let Some(running) = self.queue.running() else {
            return;
        };
        let calls: Vec<_> = running
            .stream
            .sent_so_far()
            .into_iter()
            .map(|(thinking, words)| {
                OutboundCall::new(
                    "appendDisplay",
                    &json!([
                        piece_message(&running.request, thinking, words),
                        DisplayMode::Inline.as_str()
                    ]),
                )
            })
            .collect();
        for call in calls {
            self.emit(call, &Audience::Only(connection));
        }
    }
}

/// Largest checkpoint file read at start-up: the file is emptied when each request that
/// wrote it ends, so after a crash it holds one answer's checkpoints (providers bound an answer
/// well below this).
const MAX_CHECKPOINT_READ: u64 = 64 << 20;

/// The checkpointed text of each segment of `request_id`'s answer, in segment order, from
/// the checkpoint file's lines (a torn last line is skipped).
fn checkpointed_segments(file: &[u8], request_id: &RequestId) -> Vec<(u32, bool, String)> {
    let mut segments: Vec<(u32, bool, String)> = Vec::new();
    for line in file.split(|b| *b == b'\n') {
        let Ok(record) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if record["requestId"] != request_id.as_str() {
            continue;
        }
        let (Some(segment), Some(text)) = (record["segment"].as_u64(), record["text"].as_str())
        else {
            continue;
        };
        let segment = segment as u32;
        match segments.iter_mut().find(|(n, _, _)| *n == segment) {
            Some((_, _, so_far)) => so_far.push_str(text),
            None => segments.push((segment, record["thinking"] == true, text.to_string())),
        }
    }
    segments.sort_by_key(|(n, _, _)| *n);
    segments
}

impl Conversation {
    /// A request that checkpointed its answer has ended (finished or cancelled: its text is
    /// in the display log by then): its checkpoints are of no use any more, the file is
    /// emptied.
    pub(super) fn forget_checkpoints(&mut self, running: &Running) {
        if running.stream.checkpointed() && !self.writes_closed {
            drop(
                self.setup
                    .runtime
                    .log_writer
                    .replace(&self.checkpoint_path, Vec::new()),
            );
        }
    }

    /// Start-up after a crash, for a request that never finished (`request_id`, its log
    /// `id_obj`, its entries from `since`): each answer segment it checkpointed that the log
    /// does not hold whole is logged as far as it was checkpointed, marked `interrupted`.
    pub(super) fn recover_answer(
        &mut self,
        request_id: &RequestId,
        id_obj: &Value,
        since: Option<u64>,
    ) {
        let file = match std::fs::File::open(&self.checkpoint_path) {
            Ok(file) => {
                let mut bytes = Vec::new();
                let _ = std::io::Read::read_to_end(
                    &mut std::io::Read::take(file, MAX_CHECKPOINT_READ),
                    &mut bytes,
                );
                bytes
            }
            Err(_) => return,
        };
        let segments = checkpointed_segments(&file, request_id);
        if segments.is_empty() {
            return;
        }
        let logged = self.logged_segments(request_id, since);
        for (number, thinking, text) in segments {
            if logged.contains(&number) {
                continue;
            }
            let content = if thinking {
                json!({"type": "text", "content": text, "kind": "info"})
            } else {
                json!({"type": "markdown", "content": text})
            };
            let mut message = json!({
                "message": content,
                "requestId": id_obj,
                "source": AGENT_SOURCE,
                "streamed": true,
                "segment": number,
                "interrupted": true,
            });
            if thinking {
                message["thinking"] = true.into();
            }
            log::warn!(
                "conversation {}: request {request_id}: the server stopped while its answer \
                 was being written; what was checkpointed ({} bytes) is kept, marked interrupted",
                self.setup.id,
                text.len()
            );
            self.log_entry(json!({
                "type": "append-display",
                "message": message,
                "mode": DisplayMode::Block.as_str(),
            }));
        }
    }

    /// The answer segments of `request_id` the display log holds whole, from `since` on.
    fn logged_segments(&self, request_id: &RequestId, since: Option<u64>) -> Vec<u32> {
        let Ok(log) = &self.log else {
            return Vec::new();
        };
        let from = since.unwrap_or(0);
        crate::storage::display_log::read_range(log.path(), from, log.next_seq())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .filter(|e| {
                e["type"] == "append-display"
                    && e["message"]["requestId"]["requestId"] == request_id.as_str()
            })
            .filter_map(|e| e["message"]["segment"].as_u64().map(|n| n as u32))
            .collect()
    }

    /// Start-up, once every unfinished request is recovered: the checkpoints are emptied.
    pub(super) fn forget_recovered_checkpoints(&mut self) {
        let has_any = std::fs::metadata(&self.checkpoint_path).is_ok_and(|m| m.len() > 0);
        if has_any && !self.writes_closed {
            drop(
                self.setup
                    .runtime
                    .log_writer
                    .replace(&self.checkpoint_path, Vec::new()),
            );
        }
    }
}
