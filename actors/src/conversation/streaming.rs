//! A model's answer as it is written (issue 50): the pieces a streaming provider hands the
//! turn ([`AnswerDelta`]) reach every client as `appendDisplay(…, "inline")` while the model
//! is still writing, and the display log keeps the answer as one entry, written when its model
//! call ends, which is what a client joining later replays.
//!
//! - **Frames**: pieces are gathered and sent at most once per [`FRAME_INTERVAL`] per
//!   conversation (the first at once, so the first words cost no wait); every client gets the
//!   same frame, serialized once. The outbound bounds that exist apply to each socket.
//! - **Segments**: a run of pieces of one kind (the model's thinking, its text) within one
//!   model call. Its whole text comes back as a display with `"streamed": true` when the call
//!   ends ([`crate::agent::turn::TurnSink::display`]): logged (with `"segment"`), not sent
//!   again, since every client has its pieces. A client that joins while a segment is open
//!   gets the words sent so far as one piece, then the rest live.
//! - **Durable without an fsync per piece**: the pieces are not logged. Every
//!   [`CHECKPOINT_INTERVAL`] (or [`CHECKPOINT_BYTES`] of new text) what was written since goes
//!   to `answer.partial.jsonl` through the log writer (its next group commit makes it durable);
//!   after a crash, start-up recovery logs each open request's checkpointed text as an
//!   `interrupted` entry (`persistence.rs`). An answer cut short by a cancel, an error or anything
//!   else that ends its segment early is logged as far as it got, marked `cancelled` or
//!   `incomplete`: never a silently truncated "complete" answer.
//!
//! [`AnswerStream`] is the state machine (no actix: plain data, unit-tested here); the
//! `impl Conversation` below applies what it answers.
//!
//! Who talks to it: the turn's events (`turn_events.rs`: pieces, the streamed displays), the queue
//! (`queue.rs`: cancel and finish close it), the join (`mod.rs`: the words so far).

use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::{json, Value};

use super::request_queue::{Request, Running};
use super::routing::{Audience, DisplayMode};
use super::{Conversation, AGENT_SOURCE};
use crate::agent::AnswerDelta;
use crate::client::OutboundCall;
use crate::ids::{ConnectionId, RequestId};

/// At most one frame of pieces per this long per conversation: 20 a second, smooth to read,
/// and what 100 clients of one answer cost stays 20 shared frames a second each.
pub const FRAME_INTERVAL: Duration = Duration::from_millis(50);
/// How often what was written of an answer is checkpointed for crash recovery.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(4);
/// New text past which a checkpoint is written before [`CHECKPOINT_INTERVAL`] is up.
pub const CHECKPOINT_BYTES: usize = 32 * 1024;
/// The file checkpoints go to, in the conversation's directory.
pub const CHECKPOINT_FILE: &str = "answer.partial.jsonl";

/// What a segment became when it ended other than by its own whole text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutShort {
    /// The request was cancelled.
    Cancelled,
    /// Something else ended the model call's output first (an error, the turn's end).
    Incomplete,
}

impl CutShort {
    /// The flag the logged entry carries.
    fn flag(self) -> &'static str {
        match self {
            CutShort::Cancelled => "cancelled",
            CutShort::Incomplete => "incomplete",
        }
    }
}

/// A run of pieces of one kind within one model call.
#[derive(Debug)]
struct Segment {
    /// The model's thinking (else its text).
    thinking: bool,
    /// Its number within the request (what its logged entry and checkpoints name).
    number: u32,
    /// What every client has been sent.
    sent: String,
    /// What is waiting for the next frame.
    pending: String,
    /// How much of `sent` + `pending` is checkpointed.
    checkpointed: usize,
}

impl Segment {
    /// All its text so far.
    fn text(&self) -> String {
        format!("{}{}", self.sent, self.pending)
    }
}

/// What the conversation does for [`AnswerStream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StreamEffect {
    /// Send `piece` to every client, as one inline display.
    Send {
        /// A piece of thinking (else of the answer's text).
        thinking: bool,
        /// The words.
        piece: String,
    },
    /// Call [`AnswerStream::flush`] after this long.
    ArmFlush(Duration),
    /// Append `text` of segment `segment` to the checkpoint file.
    Checkpoint {
        /// The segment.
        segment: u32,
        /// Thinking or text.
        thinking: bool,
        /// What was written since its last checkpoint.
        text: String,
    },
}

/// The streamed answer of the running request (one per request).
#[derive(Debug, Default)]
pub(super) struct AnswerStream {
    /// Open segments, oldest first.
    segments: Vec<Segment>,
    /// The next segment's number.
    next_number: u32,
    /// When the last frame went out.
    last_frame: Option<Instant>,
    /// A flush is armed.
    flush_armed: bool,
    /// When the last checkpoint was written (or the first piece came).
    last_checkpoint: Option<Instant>,
    /// Something was checkpointed: the file is emptied when the request ends.
    checkpointed: bool,
}

impl AnswerStream {
    /// A piece arrived at `now`.
    pub(super) fn piece(&mut self, delta: AnswerDelta, now: Instant) -> Vec<StreamEffect> {
        let (thinking, text) = match delta {
            AnswerDelta::Text(t) => (false, t),
            AnswerDelta::Thinking(t) => (true, t),
        };
        let mut effects = Vec::new();
        if text.is_empty() {
            return effects;
        }
        self.last_checkpoint.get_or_insert(now);
        match self.segments.last_mut() {
            Some(open) if open.thinking == thinking => open.pending.push_str(&text),
            last => {
                if let Some(previous) = last {
                    // What came before goes out first, then a break before the new kind, so a
                    // client writing pieces in a row (TypeAgent's CLI) does not run the
                    // thinking into the answer.
                    let mut piece = std::mem::take(&mut previous.pending);
                    previous.sent.push_str(&piece);
                    piece.push_str("\n\n");
                    effects.push(StreamEffect::Send {
                        thinking: previous.thinking,
                        piece,
                    });
                }
                self.segments.push(Segment {
                    thinking,
                    number: self.next_number,
                    sent: String::new(),
                    pending: text,
                    checkpointed: 0,
                });
                self.next_number += 1;
            }
        }
        let due = self
            .last_frame
            .is_none_or(|last| now.duration_since(last) >= FRAME_INTERVAL);
        if due {
            effects.extend(self.flush(now));
        } else if !self.flush_armed {
            self.flush_armed = true;
            let since = now.duration_since(self.last_frame.expect("not due"));
            effects.push(StreamEffect::ArmFlush(FRAME_INTERVAL.saturating_sub(since)));
        }
        effects.extend(self.checkpoint_if_due(now));
        effects
    }

    /// Sends what waits (the armed flush fired, or a piece came after the interval).
    pub(super) fn flush(&mut self, now: Instant) -> Vec<StreamEffect> {
        self.flush_armed = false;
        let mut effects = Vec::new();
        for segment in &mut self.segments {
            if !segment.pending.is_empty() {
                let piece = std::mem::take(&mut segment.pending);
                segment.sent.push_str(&piece);
                effects.push(StreamEffect::Send {
                    thinking: segment.thinking,
                    piece,
                });
            }
        }
        if !effects.is_empty() {
            self.last_frame = Some(now);
        }
        effects
    }

    /// Checkpoints every open segment's new text when [`CHECKPOINT_INTERVAL`] has passed or
    /// [`CHECKPOINT_BYTES`] of new text wait.
    fn checkpoint_if_due(&mut self, now: Instant) -> Vec<StreamEffect> {
        let new: usize = self
            .segments
            .iter()
            .map(|s| s.sent.len() + s.pending.len() - s.checkpointed)
            .sum();
        let interval_up = self
            .last_checkpoint
            .is_some_and(|last| now.duration_since(last) >= CHECKPOINT_INTERVAL);
        if new == 0 || !(interval_up || new >= CHECKPOINT_BYTES) {
            return Vec::new();
        }
        self.last_checkpoint = Some(now);
        self.checkpointed = true;
        self.segments
            .iter_mut()
            .filter_map(|s| {
                let text = s.text();
                let fresh = text[s.checkpointed..].to_string();
                s.checkpointed = text.len();
                (!fresh.is_empty()).then_some(StreamEffect::Checkpoint {
                    segment: s.number,
                    thinking: s.thinking,
                    text: fresh,
                })
            })
            .collect()
    }

    /// The whole text of a segment of this kind came (its model call ended): what waits is
    /// sent, and the oldest open segment of the kind is closed; its number. `None` when none
    /// is open (nothing of it was streamed).
    pub(super) fn finish(
        &mut self,
        thinking: bool,
        now: Instant,
    ) -> Option<(Vec<StreamEffect>, u32)> {
        let at = self.segments.iter().position(|s| s.thinking == thinking)?;
        let effects = self.flush(now);
        let segment = self.segments.remove(at);
        Some((effects, segment.number))
    }

    /// Something ends the open segments before their whole text came: what waits is sent,
    /// and each segment's text so far is answered, to be logged as cut short.
    pub(super) fn abandon(
        &mut self,
        now: Instant,
    ) -> (Vec<StreamEffect>, Vec<(bool, u32, String)>) {
        let effects = self.flush(now);
        let cut = self
            .segments
            .drain(..)
            .filter(|s| !s.sent.is_empty())
            .map(|s| (s.thinking, s.number, s.sent))
            .collect();
        (effects, cut)
    }

    /// What every client has been sent of each open segment (thinking?, words): what a client
    /// joining now gets first.
    pub(super) fn sent_so_far(&self) -> Vec<(bool, &str)> {
        self.segments
            .iter()
            .filter(|s| !s.sent.is_empty())
            .map(|s| (s.thinking, s.sent.as_str()))
            .collect()
    }

    /// Whether a segment is open.
    pub(super) fn is_open(&self) -> bool {
        !self.segments.is_empty()
    }

    /// Whether this request wrote checkpoints.
    pub(super) fn checkpointed(&self) -> bool {
        self.checkpointed
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn send(thinking: bool, piece: &str) -> StreamEffect {
        StreamEffect::Send {
            thinking,
            piece: piece.into(),
        }
    }

    /// The first piece goes at once; later ones within the interval wait for one armed flush,
    /// which sends them together; a piece after the interval goes at once again.
    #[test]
    fn pieces_are_sent_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut s = AnswerStream::default();
        assert_eq!(
            s.piece(AnswerDelta::Text("a".into()), t0),
            [send(false, "a")]
        );
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(
            s.piece(AnswerDelta::Text("b".into()), t1),
            [StreamEffect::ArmFlush(Duration::from_millis(40))]
        );
        // Armed once.
        assert_eq!(s.piece(AnswerDelta::Text("c".into()), t1), []);
        assert_eq!(s.flush(t0 + FRAME_INTERVAL), [send(false, "bc")]);
        assert_eq!(
            s.piece(AnswerDelta::Text("d".into()), t0 + 2 * FRAME_INTERVAL),
            [send(false, "d")]
        );
        assert_eq!(s.sent_so_far(), [(false, "abcd")]);
    }

    /// Thinking then text: two segments, the thinking's waiting words and a break sent when
    /// the text begins; each closes with its own whole text, numbered in order.
    #[test]
    fn thinking_and_text_are_segments_of_their_own() {
        let t0 = Instant::now();
        let mut s = AnswerStream::default();
        s.piece(AnswerDelta::Thinking("hm".into()), t0);
        let t1 = t0 + Duration::from_millis(1);
        s.piece(AnswerDelta::Thinking("m".into()), t1);
        let effects = s.piece(AnswerDelta::Text("It".into()), t1);
        assert_eq!(effects[0], send(true, "m\n\n"));
        assert_eq!(s.sent_so_far(), [(true, "hmm")]);
        let (effects, number) = s.finish(true, t0 + FRAME_INTERVAL).unwrap();
        assert_eq!((effects, number), (vec![send(false, "It")], 0));
        let (_, number) = s.finish(false, t0 + FRAME_INTERVAL).unwrap();
        assert_eq!(number, 1);
        assert!(!s.is_open());
        assert!(s.finish(false, t0).is_none());
    }

    /// A segment cut short answers what clients were sent (after sending what waited).
    #[test]
    fn a_cut_short_segment_keeps_what_was_sent() {
        let t0 = Instant::now();
        let mut s = AnswerStream::default();
        s.piece(AnswerDelta::Text("Once ".into()), t0);
        s.piece(
            AnswerDelta::Text("upon".into()),
            t0 + Duration::from_millis(1),
        );
        let (effects, cut) = s.abandon(t0 + Duration::from_millis(2));
        assert_eq!(effects, [send(false, "upon")]);
        assert_eq!(cut, [(false, 0, "Once upon".to_string())]);
        assert!(!s.is_open());
    }

    /// New text is checkpointed every interval, or sooner once enough has come; each
    /// checkpoint carries only what came since the last.
    #[test]
    fn checkpoints_carry_what_came_since_the_last() {
        let t0 = Instant::now();
        let mut s = AnswerStream::default();
        let checkpoints = |effects: Vec<StreamEffect>| -> Vec<String> {
            effects
                .into_iter()
                .filter_map(|e| match e {
                    StreamEffect::Checkpoint { text, .. } => Some(text),
                    _ => None,
                })
                .collect()
        };
        assert!(checkpoints(s.piece(AnswerDelta::Text("one ".into()), t0)).is_empty());
        assert_eq!(
            checkpoints(s.piece(AnswerDelta::Text("two ".into()), t0 + CHECKPOINT_INTERVAL)),
            ["one two "]
        );
        let big = "x".repeat(CHECKPOINT_BYTES);
        assert_eq!(
            checkpoints(s.piece(
                AnswerDelta::Text(big.clone()),
                t0 + CHECKPOINT_INTERVAL + Duration::from_millis(1)
            )),
            [big]
        );
        assert!(s.checkpointed());
    }
}
