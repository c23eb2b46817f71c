//! The client side of the wire protocol that the test client (`tests/integration/harness/
//! client.rs`, blocking) and the load client (`benches/load/client.rs`, async and lean) share:
//! channel names, callId numbering, the text of `invoke` / `call` frames, and telling an answer
//! (`invokeResult` / `invokeError`) from everything else. No I/O here: each client owns its
//! socket and its way of waiting.

use serde_json::{json, Value};

/// The control channel: create, join, leave, list, delete, shutdown.
pub const AGENT_SERVER: &str = "agent-server";

/// Prefix of a conversation's request channel (`dispatcher:<conversationId>`).
pub const DISPATCHER_PREFIX: &str = "dispatcher:";

/// Prefix of a conversation's server → client channel (`clientio:<conversationId>`).
pub const CLIENTIO_PREFIX: &str = "clientio:";

/// `dispatcher:<conversation>`: where submits, cancels and history requests go.
pub fn dispatcher(conversation: &str) -> String {
    format!("{DISPATCHER_PREFIX}{conversation}")
}

/// `clientio:<conversation>`: where the server's calls for that conversation arrive.
pub fn clientio(conversation: &str) -> String {
    format!("{CLIENTIO_PREFIX}{conversation}")
}

/// The next callId per channel: each channel numbers its invokes from 0, as TypeAgent's clients
/// do. A client talks on a handful of channels, so a short vector beats a map.
#[derive(Debug, Default)]
pub struct CallIds {
    /// (channel, next callId on it).
    next: Vec<(String, u64)>,
}

impl CallIds {
    /// Takes the next callId on `channel`.
    pub fn next(&mut self, channel: &str) -> u64 {
        if let Some((_, n)) = self.next.iter_mut().find(|(c, _)| c == channel) {
            *n += 1;
            *n - 1
        } else {
            self.next.push((channel.to_string(), 1));
            0
        }
    }
}

/// The text of an `invoke` (answered with `invokeResult` or `invokeError`).
pub fn invoke_frame(channel: &str, call_id: u64, method: &str, args: Value) -> String {
    rpc_frame("invoke", channel, call_id, method, args)
}

/// The text of a `call` (never answered).
pub fn call_frame(channel: &str, call_id: u64, method: &str, args: Value) -> String {
    rpc_frame("call", channel, call_id, method, args)
}

fn rpc_frame(kind: &str, channel: &str, call_id: u64, method: &str, args: Value) -> String {
    json!({"name": channel, "message": {"type": kind, "callId": call_id, "name": method, "args": args}})
        .to_string()
}

/// Channel and callId of `frame` when it answers an invoke (`invokeResult` or
/// `invokeError`); `None` for anything else.
pub fn answer_id(frame: &Value) -> Option<(&str, u64)> {
    let message = &frame["message"];
    if message["type"] != "invokeResult" && message["type"] != "invokeError" {
        return None;
    }
    Some((frame["name"].as_str()?, message["callId"].as_u64()?))
}

/// The outcome an answer carries: its `result` (Null when absent, i.e. a void method) or the
/// `invokeError` text.
pub fn answer_result(mut frame: Value) -> Result<Value, String> {
    let message = &mut frame["message"];
    if message["type"] == "invokeError" {
        Err(message["error"].as_str().unwrap_or("?").to_string())
    } else {
        // Taken, not copied: a 10,000-entry list answer is a tree of 60,000 values.
        Ok(message
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }
}
