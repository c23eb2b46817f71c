//! `AnswerStream`: the plain state machine of a model's answer as it is written (issue 50).
//! Pieces go in ([`AnswerStream::piece`]), effects come out in order ([`StreamEffect`]: send a
//! frame, arm the flush, write a checkpoint); frames are coalesced to one per
//! [`FRAME_INTERVAL`], checkpoints to one per [`CHECKPOINT_INTERVAL`] or
//! [`CHECKPOINT_BYTES`]. No actix, no I/O: `streaming.rs` applies the effects; unit-tested
//! below.
//!
//! Who talks to it: the running request (`Running::stream`), through `streaming.rs`.

use std::time::{Duration, Instant};

use crate::agent::AnswerDelta;

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
    pub(super) fn flag(self) -> &'static str {
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
