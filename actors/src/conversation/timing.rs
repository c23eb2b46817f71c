//! How long one request took, phase by phase: its `CommandResult.metrics` (TypeAgent's
//! `RequestMetrics`, `{parse?, command?, actions, duration}`, every duration in fractional
//! milliseconds), sent with `commandComplete` and kept in the `command-result` log entry.
//!
//! The phases as Roundtable has them:
//! - an `@` command: `parse` is resolving the command text (from the request's start to its
//!   handler), `command` the handler until the request finished, `actions` is empty;
//! - an agent turn: `parse` is the time spent in model calls (TypeAgent's translation of the
//!   request into actions), `actions` one `{duration}` per tool call, in call order, and
//!   there is no `command` phase.
//!
//! `duration` is the whole request, from its start to its finish (or cancellation). Owned by
//! the running request (`Running::timing`); the turn reports its model calls and tool calls
//! as [`TurnStep`](crate::agent::turn::TurnStep)s.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Fractional milliseconds, as TypeAgent's `performance.now()` durations.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One tool call's timing.
#[derive(Debug, Clone, Copy)]
struct ActionTiming {
    /// When the conversation heard it started (for a call cut short by a cancel).
    started: Instant,
    /// Its duration as the turn measured it, once it finished.
    duration: Option<Duration>,
}

/// The phases of the running request.
#[derive(Debug, Clone)]
pub(super) struct RequestTiming {
    /// The request started (left the queue).
    started: Instant,
    /// The parse phase: resolving the text, plus (agent turn) every model call.
    parse: Duration,
    /// When the command phase began; `None` before it and for an agent turn.
    command_started: Option<Instant>,
    /// The request is an agent turn (no command phase).
    agent_turn: bool,
    /// Tool calls by their index in the turn.
    actions: Vec<ActionTiming>,
}

impl RequestTiming {
    /// The request starts now.
    pub(super) fn start() -> RequestTiming {
        RequestTiming {
            started: Instant::now(),
            parse: Duration::ZERO,
            command_started: None,
            agent_turn: false,
            actions: Vec::new(),
        }
    }

    /// The request's text is resolved; what it asks for starts now.
    pub(super) fn parsed(&mut self) {
        let now = Instant::now();
        self.parse = now - self.started;
        self.command_started = Some(now);
    }

    /// What it asks for is an agent turn: no command phase; model calls count as parsing.
    pub(super) fn agent_turn(&mut self) {
        self.agent_turn = true;
        self.command_started = None;
    }

    /// A model call of the turn took `duration`.
    pub(super) fn model_call(&mut self, duration: Duration) {
        self.parse += duration;
    }

    /// Tool call `index` started.
    pub(super) fn action_started(&mut self, index: usize) {
        if self.actions.len() <= index {
            let started = Instant::now();
            self.actions.resize(
                index + 1,
                ActionTiming {
                    started,
                    duration: None,
                },
            );
        }
    }

    /// Tool call `index` finished after `duration`.
    pub(super) fn action_finished(&mut self, index: usize, duration: Duration) {
        self.action_started(index);
        self.actions[index].duration = Some(duration);
    }

    /// `RequestMetrics` as of now: a call still running counts until now.
    pub(super) fn metrics(&self) -> Value {
        let now = Instant::now();
        let actions: Vec<Value> = self
            .actions
            .iter()
            .map(|a| json!({"duration": ms(a.duration.unwrap_or(now - a.started))}))
            .collect();
        let mut metrics = json!({
            "parse": {"duration": ms(self.parse)},
            "actions": actions,
            "duration": ms(now - self.started),
        });
        if !self.agent_turn {
            let command = self.command_started.map_or(Duration::ZERO, |c| now - c);
            metrics["command"] = json!({"duration": ms(command)});
        }
        metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_turn_shapes() {
        let mut command = RequestTiming::start();
        command.parsed();
        let m = command.metrics();
        assert!(m["parse"]["duration"].is_f64());
        assert!(m["command"]["duration"].is_f64());
        assert_eq!(m["actions"], json!([]));
        assert!(m["duration"].as_f64().unwrap() >= m["command"]["duration"].as_f64().unwrap());

        let mut turn = RequestTiming::start();
        turn.parsed();
        turn.agent_turn();
        turn.model_call(Duration::from_millis(3));
        turn.action_started(0);
        turn.action_finished(0, Duration::from_micros(1500));
        turn.action_started(1);
        let m = turn.metrics();
        assert!(m.get("command").is_none(), "{m}");
        assert!(m["parse"]["duration"].as_f64().unwrap() >= 3.0);
        assert_eq!(m["actions"][0], json!({"duration": 1.5}));
        assert!(m["actions"][1]["duration"].is_f64());
        assert_eq!(m["actions"].as_array().unwrap().len(), 2);
    }
}
