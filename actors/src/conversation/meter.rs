//! The conversation's context meter: how much of the model's context its chat history
//! occupies, after the rules of [`crate::agent::usage`]. Read from its file
//! (`sessions/chat/contextMeter.jsonl`, [`crate::storage::context_meter`]) when the
//! conversation loads, so a restarted server, a reloaded conversation and a node that took it
//! over show the same meter; changed by a turn that reports usage ([`record_usage`]), and
//! cleared by `@compact` and `@system meter reset` ([`clear_meter`]).
//!
//! Every change is appended to the file through the shared log writer before the request
//! that made it finishes; the request's write barrier covers it, and the change is announced
//! to every client in that barrier's continuation, just before `commandComplete`:
//! `notify(null, "contextMeter", <meter or null>, "agent-server")` (a Roundtable extension;
//! TypeAgent's clients ignore notify events they do not know). `getStatus` carries the
//! current meter as `contextMeter`, which is how a client that joins learns it.
//!
//! Who talks to it: the turn (`turn_events.rs`: a finished agent turn, `@compact`), `@system` (`system.rs`),
//! the queue (`queue.rs`: the announcement) and `dispatcher.rs` (`getStatus`).
//!
//! [`record_usage`]: Conversation::record_usage
//! [`clear_meter`]: Conversation::clear_meter

use std::sync::Arc;

use serde_json::{json, Value};

use super::Conversation;
use crate::agent::usage::{ContextMeter, Usage};
use crate::client::OutboundCall;
use crate::storage::context_meter::{self, REWRITE_AFTER_BYTES};

/// The `notify` event that announces a change of the meter (Roundtable extension).
pub const METER_EVENT: &str = "contextMeter";

impl Conversation {
    /// A turn reported `usage`: the meter follows it (see [`ContextMeter::after_turn`]),
    /// capped at the provider's context window.
    pub(super) fn record_usage(&mut self, usage: &Usage) {
        let provider = self.provider();
        let meter = ContextMeter::after_turn(
            self.meter.as_ref(),
            usage,
            provider.context_window(),
            provider.model(),
        );
        self.set_meter(Some(meter));
    }

    /// `@compact` or `@system meter reset`: no meter until the next turn reports usage.
    pub(super) fn clear_meter(&mut self) {
        self.set_meter(None);
    }

    /// Records a new meter: appended to its file (rewritten with only this line once the
    /// file has grown past [`REWRITE_AFTER_BYTES`]) and announced at the running request's
    /// finish. An unchanged meter writes and announces nothing.
    fn set_meter(&mut self, meter: Option<ContextMeter>) {
        if self.meter == meter {
            return;
        }
        self.meter = meter;
        if self.writes_closed {
            return;
        }
        let line = context_meter::line(self.meter.as_ref());
        let writer = &self.setup.runtime.log_writer;
        self.meter_file_bytes += line.len() as u64;
        // The append is what the request's barrier reports on; the rewrite after it only
        // shortens the file, and if it fails the appended file still ends with this line.
        writer.append(&self.meter_path, line.clone());
        if self.meter_file_bytes > REWRITE_AFTER_BYTES {
            self.meter_file_bytes = line.len() as u64;
            drop(writer.replace(&self.meter_path, line));
        }
        self.meter_changed = true;
    }

    /// The meter as `getStatus` and the notification carry it: the object, or `null`.
    pub(super) fn meter_json(&self) -> Value {
        serde_json::to_value(&self.meter).expect("a meter serializes")
    }

    /// The announcement of a change made since the last one, if any (taken by the queue when
    /// the request that made it finishes, and sent once its barrier is confirmed).
    pub(super) fn take_meter_notice(&mut self) -> Option<Arc<OutboundCall>> {
        std::mem::take(&mut self.meter_changed).then(|| {
            OutboundCall::new(
                "notify",
                &json!([null, METER_EVENT, self.meter_json(), "agent-server"]),
            )
        })
    }

    /// The meter in words, for `@system session` and `@system meter`.
    pub(super) fn meter_text(&self) -> String {
        match &self.meter {
            Some(meter) => meter.describe(),
            None if self.provider().name() == "builtin" => {
                "not reported (the builtin provider reports no token usage)".to_string()
            }
            None => "nothing reported since the conversation began or was last reset".to_string(),
        }
    }
}
