//! Decoding one inbound frame's text into an [`Inbound`]: the envelope rules, the callId
//! range, the value budget checked before parsing, and canonical conversation ids. Called by
//! the transport for every text message; pure and fuzzed (`actors/fuzz`).

use serde_json::Value;

use super::salvage::salvage_invoke;
use super::trace::{parse_metadata, MetadataIgnored, RpcMetadata};
use super::{Args, MAX_SAFE_INTEGER};

/// One decoded inbound frame.
#[derive(Debug)]
pub enum Inbound {
    /// A request that needs an answer.
    Invoke {
        /// Channel the envelope named.
        channel: String,
        /// Echoed in the answer.
        call_id: u64,
        /// Method name.
        method: String,
        /// Positional arguments.
        args: Args,
        /// `message.metadata` checked ([`parse_metadata`]): `None` when absent, `Err` when
        /// ignored whole (it never fails the invoke).
        metadata: Option<Result<RpcMetadata, MetadataIgnored>>,
    },
    /// A request that is never answered.
    Call {
        /// Channel the envelope named.
        channel: String,
        /// Method name.
        method: String,
        /// Positional arguments.
        args: Args,
    },
    /// An invoke we must answer with `Invalid invoke message` (valid callId, bad body).
    InvalidInvoke {
        /// Channel the envelope named.
        channel: String,
        /// Echoed in the answer.
        call_id: u64,
    },
    /// Text that does not parse as JSON (nesting too deep, a lone surrogate, …) but whose
    /// channel and invoke callId could still be read: answered with why.
    Unparsable {
        /// Channel the envelope named.
        channel: String,
        /// Echoed in the answer.
        call_id: u64,
        /// The parser's complaint.
        reason: String,
    },
    /// An answer to a server → client invoke (`executeAction` on `agent:<name>`): matched by
    /// (channel, callId) against the socket's pending invokes; an unknown one is dropped.
    Response {
        /// Channel the envelope named.
        channel: String,
        /// The callId the answer echoes.
        call_id: u64,
        /// `invokeResult.result` (`None` when absent: a void answer), or `invokeError.error`.
        outcome: Result<Option<Value>, String>,
    },
}

/// Why an inbound frame was dropped without an answer (the protocol gives no way to answer it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    /// Not JSON at all.
    #[error("frame is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not `{"name": string, "message": object}`.
    #[error("frame is not an envelope {{\"name\",\"message\"}}")]
    NotEnvelope,
    /// Unknown `message.type`, or a missing / invalid callId.
    #[error("message on channel {0} has no valid type or callId")]
    BadMessage(String),
}

impl Inbound {
    /// The channel the envelope named (every kind has one).
    pub fn channel(&self) -> &str {
        match self {
            Inbound::Invoke { channel, .. }
            | Inbound::Call { channel, .. }
            | Inbound::InvalidInvoke { channel, .. }
            | Inbound::Unparsable { channel, .. }
            | Inbound::Response { channel, .. } => channel,
        }
    }

    /// Decodes one frame's text. `Err` means: drop it and log why.
    pub fn parse(text: &str) -> Result<Inbound, DropReason> {
        // Parsing builds a tree ~10x the text's size when it is all tiny values ("[[],[],…]"):
        // count first (linear, no allocation) and refuse what no client sends.
        let values = count_values(text);
        if values > MAX_INBOUND_VALUES {
            let reason = format!("more than {MAX_INBOUND_VALUES} JSON values ({values})");
            return match salvage_invoke(text) {
                Some((channel, call_id)) => Ok(Inbound::Unparsable {
                    channel,
                    call_id,
                    reason,
                }),
                None => Err(DropReason::NotJson(reason)),
            };
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return match salvage_invoke(text) {
                    Some((channel, call_id)) => Ok(Inbound::Unparsable {
                        channel,
                        call_id,
                        reason: e.to_string(),
                    }),
                    None => Err(DropReason::NotJson(e.to_string())),
                }
            }
        };
        let Value::Object(mut envelope) = value else {
            return Err(DropReason::NotEnvelope);
        };
        let channel = match envelope.remove("name") {
            Some(Value::String(s)) => s,
            _ => return Err(DropReason::NotEnvelope),
        };
        let Some(Value::Object(mut message)) = envelope.remove("message") else {
            return Err(DropReason::NotEnvelope);
        };
        let kind = match message.get("type") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(DropReason::BadMessage(channel)),
        };
        let call_id = message.get("callId").and_then(valid_call_id);
        match kind.as_str() {
            "invoke" | "call" => {
                let name = match message.remove("name") {
                    Some(Value::String(s)) if !s.is_empty() => Some(s),
                    _ => None,
                };
                let args = match message.remove("args") {
                    Some(Value::Array(a)) => Some(Args(a)),
                    _ => None,
                };
                match (kind.as_str(), call_id, name, args) {
                    ("invoke", Some(call_id), Some(method), Some(args)) => Ok(Inbound::Invoke {
                        channel,
                        call_id,
                        method,
                        args,
                        metadata: message
                            .get("metadata")
                            .filter(|m| !m.is_null())
                            .map(parse_metadata),
                    }),
                    ("invoke", Some(call_id), _, _) => {
                        Ok(Inbound::InvalidInvoke { channel, call_id })
                    }
                    ("call", Some(_), Some(method), Some(args)) => Ok(Inbound::Call {
                        channel,
                        method,
                        args,
                    }),
                    _ => Err(DropReason::BadMessage(channel)),
                }
            }
            "invokeResult" | "invokeError" => {
                let Some(call_id) = call_id else {
                    return Err(DropReason::BadMessage(channel));
                };
                let outcome = if kind == "invokeResult" {
                    Ok(message.remove("result").filter(|v| !v.is_null()))
                } else {
                    Err(match message.remove("error") {
                        Some(Value::String(s)) => s,
                        Some(other) => other.to_string(),
                        None => "(no error text)".to_string(),
                    })
                };
                Ok(Inbound::Response {
                    channel,
                    call_id,
                    outcome,
                })
            }
            _ => Err(DropReason::BadMessage(channel)),
        }
    }
}

/// JSON values one inbound message may hold. A `submitCommand` with many attachments holds a
/// few thousand; past this the message is refused before it is parsed (see [`count_values`]).
pub const MAX_INBOUND_VALUES: usize = 200_000;

/// An upper bound of the number of JSON values in `text`: one, plus one per `,` `[` `{`
/// outside strings. Linear and allocation-free.
pub fn count_values(text: &str) -> usize {
    let mut count = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'[' | b'{' => count += 1,
                _ => {}
            }
        }
    }
    count
}

fn valid_call_id(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}
