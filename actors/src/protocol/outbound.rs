//! Building outbound frames: `invokeResult` / `invokeError` answers, `call` frames and the
//! server → client `invoke`s of client-hosted agents. A
//! broadcast serializes its arguments once ([`call_tail`]) and each client only splices its
//! own callId between its channel's prefix ([`call_prefix`]) and that tail.

use serde::Serialize;
use serde_json::Value;

/// `{"name":channel,"message":{"type":"invokeResult","callId":n[,"result":…]}}`. `None` means a
/// void method: the `result` key is left out, as the TS server does.
pub fn invoke_result(channel: &str, call_id: u64, result: Option<&Value>) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Msg<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a Value>,
    }
    envelope(
        channel,
        &Msg {
            kind: "invokeResult",
            call_id,
            result,
        },
    )
}

/// Like [`invoke_result`] with `result` given as ready-made JSON text (large history answers
/// are spliced, not re-parsed).
pub fn invoke_result_raw(channel: &str, call_id: u64, result_json: &str) -> String {
    let mut out = invoke_result_start(channel, call_id, result_json.len());
    out.push_str(result_json);
    out.push_str(INVOKE_RESULT_END);
    out
}

/// `{"name":channel,"message":{"type":"invokeResult","callId":n,"result":`: the start of an
/// `invokeResult` frame whose result JSON is written after it, then [`INVOKE_RESULT_END`].
/// `room`: bytes reserved for that result (a long list is written straight into the frame).
pub fn invoke_result_start(channel: &str, call_id: u64, room: usize) -> String {
    let channel = serde_json::to_string(channel).expect("string serializes");
    let mut out = String::with_capacity(channel.len() + room + 64);
    out.push_str("{\"name\":");
    out.push_str(&channel);
    out.push_str(",\"message\":{\"type\":\"invokeResult\",\"callId\":");
    out.push_str(&call_id.to_string());
    out.push_str(",\"result\":");
    out
}

/// What closes a frame begun with [`invoke_result_start`] once its result is written.
pub const INVOKE_RESULT_END: &str = "}}";

/// `{"name":channel,"message":{"type":"invokeError","callId":n,"error":text}}`.
pub fn invoke_error(channel: &str, call_id: u64, error: &str) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Msg<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: u64,
        error: &'a str,
    }
    envelope(
        channel,
        &Msg {
            kind: "invokeError",
            call_id,
            error,
        },
    )
}

/// `{"name":channel,"message":{"type":"invoke","callId":n,"name":method,"args":args}}`: a
/// server → client invoke (`executeAction` on a client agent's `agent:<name>` channel).
pub fn invoke_frame(channel: &str, call_id: u64, method: &str, args: &Value) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Msg<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: u64,
        name: &'a str,
        args: &'a Value,
    }
    envelope(
        channel,
        &Msg {
            kind: "invoke",
            call_id,
            name: method,
            args,
        },
    )
}

/// A `call` frame whose args are already serialized as a JSON array (`args_json`), so a
/// broadcast serializes its arguments once and only splices the per-client callId.
pub fn call_frame(channel: &str, call_id: u64, method: &str, args_json: &str) -> String {
    splice_call(
        &call_prefix(channel),
        call_id,
        &call_tail(method, args_json),
    )
}

/// The part of a `call` frame before the callId; a client computes it once for its channel.
pub fn call_prefix(channel: &str) -> String {
    let channel = serde_json::to_string(channel).expect("string serializes");
    format!("{{\"name\":{channel},\"message\":{{\"type\":\"call\",\"callId\":")
}

/// The part of a `call` frame after the callId; a broadcast computes it once for everyone.
pub fn call_tail(method: &str, args_json: &str) -> String {
    let method = serde_json::to_string(method).expect("string serializes");
    let mut out = String::with_capacity(method.len() + args_json.len() + 20);
    out.push_str(",\"name\":");
    out.push_str(&method);
    out.push_str(",\"args\":");
    out.push_str(args_json);
    out.push_str("}}");
    out
}

/// `prefix` + callId + `tail`, in one allocation.
pub fn splice_call(prefix: &str, call_id: u64, tail: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 20 + tail.len());
    out.push_str(prefix);
    out.push_str(&call_id.to_string());
    out.push_str(tail);
    out
}

fn envelope<T: Serialize>(channel: &str, message: &T) -> String {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        name: &'a str,
        message: &'a T,
    }
    serde_json::to_string(&Envelope {
        name: channel,
        message,
    })
    .expect("envelope serializes")
}
