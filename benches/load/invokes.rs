//! What the harness answers when the server under test invokes a client (server → client
//! `invoke` frames, which need a reply). Roundtable invokes only clients that registered
//! agents (`executeAction` on `agent:<name>`), which the harness never does; TypeAgent's own
//! server invokes `question`, `proposeAction`, `openLocalView`, `closeLocalView` and
//! `getUserContext` on `clientio:<id>` (protocol reference, section 6.1). A client that never
//! answers would leave the server's turn waiting, and the harness would measure that wait, so
//! every invoke gets an answer at once:
//!
//! - `getUserContext`, `takeAction`, `openLocalView`, `closeLocalView`: `null` (void; Android
//!   answers `getUserContext` with `null` too);
//! - `question` / `popupQuestion`: the question's `defaultId`, else choice 0; `askYesNo`: its
//!   `defaultValue`, else `false` (the answer that changes nothing);
//! - anything else (`proposeAction`, `requestChoice`, `executeAction`, …): an `invokeError`
//!   `<method>: not supported by the load harness`;
//! - a malformed invoke (no method name, `args` not an array) with a valid callId:
//!   `Invalid invoke message`, as TypeAgent's rpc layer answers; without a valid callId it
//!   cannot be answered and is dropped.
//!
//! Pure functions over parsed frames: [`Client::recv`](crate::client::Client::recv) sends the
//! reply, `selftest.rs` checks the answers.

use serde_json::{json, Value};

/// Methods answered with `null`.
const VOID: [&str; 4] = [
    "getUserContext",
    "takeAction",
    "openLocalView",
    "closeLocalView",
];

/// A server → client invoke and the reply the harness sends.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The channel it came on (`clientio:<id>`, `agent:<name>`, …).
    pub channel: String,
    /// The invoked method (empty when the frame had none).
    pub method: String,
    /// What the harness answered: a result, or the `invokeError` text.
    pub answer: Result<Value, String>,
    /// The reply frame's text.
    pub frame: String,
}

/// The reply to `frame` when it is a server → client invoke with a valid callId; `None` for
/// anything else (answers, calls, invokes that cannot be answered).
pub fn reply_to(frame: &Value) -> Option<Reply> {
    let message = frame.get("message")?;
    if message.get("type")? != "invoke" {
        return None;
    }
    let channel = frame.get("name")?.as_str()?.to_string();
    let call_id = message.get("callId")?.as_u64()?;
    let method = message.get("name").and_then(Value::as_str);
    let args = message.get("args").and_then(Value::as_array);
    let answer = match (method, args) {
        (Some(m), Some(args)) if !m.is_empty() => default_answer(m, args),
        _ => Err("Invalid invoke message".to_string()),
    };
    let reply = match &answer {
        Ok(result) => json!({"type": "invokeResult", "callId": call_id, "result": result}),
        Err(e) => json!({"type": "invokeError", "callId": call_id, "error": e}),
    };
    Some(Reply {
        frame: json!({"name": channel, "message": reply}).to_string(),
        channel,
        method: method.unwrap_or_default().to_string(),
        answer,
    })
}

/// The harness's answer to `method(args…)`.
pub fn default_answer(method: &str, args: &[Value]) -> Result<Value, String> {
    if VOID.contains(&method) {
        return Ok(Value::Null);
    }
    match method {
        "question" | "popupQuestion" => Ok(json!(default_choice(args))),
        "askYesNo" => Ok(json!(default_yes_no(args))),
        other => Err(format!("{other}: not supported by the load harness")),
    }
}

/// A question's `defaultId`: a field of an object argument (the request-object form), else the
/// integer right after the choices array (the positional form), else 0.
fn default_choice(args: &[Value]) -> u64 {
    if let Some(id) = args.iter().find_map(|a| a.get("defaultId")?.as_u64()) {
        return id;
    }
    args.iter()
        .position(Value::is_array)
        .and_then(|i| args.get(i + 1))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// `askYesNo`'s `defaultValue` (a field of an object argument, or the only boolean
/// argument), else `false`.
fn default_yes_no(args: &[Value]) -> bool {
    args.iter()
        .find_map(|a| a.get("defaultValue")?.as_bool())
        .or_else(|| args.iter().find_map(Value::as_bool))
        .unwrap_or(false)
}
