//! The `metadata` of an invoke (TypeAgent's `RpcMetadataEnvelope`, agent-rpc `rpc.ts`):
//! `{version: 1, traceparent?, tracestate?, typeagent?: {agentName?, actionName?, traceId?,
//! sessionId?, activationId?}}`, checked exactly as TypeAgent's trusting side checks it, and
//! the W3C trace id a request carries in its log lines and its `CommandResult.traceId`.
//!
//! Who uses it: [`Inbound::parse`](super::Inbound::parse) reads the envelope of every invoke
//! (pure, fuzzed with it); the transport logs what it ignored and hands the `traceparent` of a
//! `dispatcher:<id>` invoke to the conversation, which keeps its trace id with the request
//! ([`TraceParent::trace_id`], or [`new_trace_id`] when none came).
//!
//! Metadata never makes an invoke fail: an envelope of the wrong shape is ignored whole (the
//! reason is kept for a debug log), an invalid `traceparent` / `tracestate` / correlation value
//! is dropped alone, as TypeAgent's `extractTrustedRemoteMetadata` does.

use serde_json::{Map, Value};

/// The only `metadata.version` there is (`RPC_METADATA_VERSION`).
pub const METADATA_VERSION: u64 = 1;
/// Longest `traceparent` accepted (`MAX_TRACEPARENT_LENGTH`).
pub const MAX_TRACEPARENT_LENGTH: usize = 512;
/// Longest `tracestate` accepted (`MAX_TRACESTATE_LENGTH`).
pub const MAX_TRACESTATE_LENGTH: usize = 512;
/// Most `tracestate` list members (`MAX_TRACESTATE_MEMBERS`).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;
/// Longest correlation value (`MAX_CORRELATION_LENGTH`).
pub const MAX_CORRELATION_LENGTH: usize = 256;
/// The correlation fields TypeAgent reads from `metadata.typeagent`, in its order.
pub const CORRELATION_FIELDS: [&str; 5] = [
    "agentName",
    "actionName",
    "traceId",
    "sessionId",
    "activationId",
];

/// A valid W3C `traceparent`: `<version>-<trace-id>-<parent-id>-<flags>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits, not all zero: the trace the client's span belongs to.
    pub trace_id: String,
    /// 16 lowercase hex digits, not all zero: the client's span.
    pub parent_id: String,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses `value` as TypeAgent's `validateTraceparent` does (at most 512 characters,
    /// `/^([0-9a-f]{2})-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(.*)$/`, version not `ff`,
    /// nothing after version `00`'s flags, a later version's extra fields after a `-`), plus
    /// the check OpenTelemetry's propagator makes before a context counts
    /// (`isSpanContextValid`): neither id all zeros.
    pub fn parse(value: &str) -> Option<TraceParent> {
        if value.len() > MAX_TRACEPARENT_LENGTH || value.len() < 55 || !value.is_ascii() {
            return None;
        }
        let (head, rest) = value.split_at(55);
        let b = head.as_bytes();
        let lower_hex = |s: &str| s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let (version, trace_id, parent_id, flags) =
            (&head[..2], &head[3..35], &head[36..52], &head[53..55]);
        if ![version, trace_id, parent_id, flags]
            .into_iter()
            .all(lower_hex)
            || version == "ff"
        {
            return None;
        }
        let suffix_ok = if version == "00" {
            rest.is_empty()
        } else {
            rest.is_empty() || rest.starts_with('-')
        };
        let zero = |s: &str| s.bytes().all(|c| c == b'0');
        if !suffix_ok || zero(trace_id) || zero(parent_id) {
            return None;
        }
        Some(TraceParent {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }
}

/// What an invoke's `metadata` holds once checked. Fields that did not pass are absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RpcMetadata {
    /// The client's span, when `traceparent` is valid.
    pub traceparent: Option<TraceParent>,
    /// Vendor trace state, kept only when valid and with a valid `traceparent`.
    pub tracestate: Option<String>,
    /// `metadata.typeagent`'s valid correlation values (agentName, actionName, …).
    pub correlation: Map<String, Value>,
    /// Parts that were present but dropped, and why (for a debug log).
    pub dropped: Vec<String>,
}

/// Why a whole `metadata` was ignored (it never fails the invoke).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataIgnored {
    /// Not a JSON object.
    #[error("metadata is not an object")]
    NotObject,
    /// `version` is missing or not 1.
    #[error("metadata version is {0}, not {METADATA_VERSION}")]
    Version(String),
}

/// Checks an invoke's `metadata` as TypeAgent's trusting side does: an object with
/// `version: 1`; then each part on its own.
pub fn parse_metadata(value: &Value) -> Result<RpcMetadata, MetadataIgnored> {
    let Value::Object(envelope) = value else {
        return Err(MetadataIgnored::NotObject);
    };
    match envelope.get("version") {
        Some(v) if v.as_u64() == Some(METADATA_VERSION) => {}
        Some(v) => return Err(MetadataIgnored::Version(v.to_string())),
        None => return Err(MetadataIgnored::Version("absent".into())),
    }
    let mut metadata = RpcMetadata::default();
    match envelope.get("traceparent") {
        None => {}
        Some(Value::String(s)) => match TraceParent::parse(s) {
            Some(t) => metadata.traceparent = Some(t),
            None => metadata
                .dropped
                .push(format!("traceparent {s:?} is invalid")),
        },
        Some(other) => metadata
            .dropped
            .push(format!("traceparent {other} is not a string")),
    }
    match envelope.get("tracestate") {
        None => {}
        Some(Value::String(s)) if valid_tracestate(s) && metadata.traceparent.is_some() => {
            metadata.tracestate = Some(s.clone())
        }
        Some(Value::String(_)) if metadata.traceparent.is_none() => metadata
            .dropped
            .push("tracestate without a valid traceparent".into()),
        Some(_) => metadata.dropped.push("tracestate is invalid".into()),
    }
    if let Some(fields) = envelope.get("typeagent") {
        let fields = fields.as_object();
        for name in CORRELATION_FIELDS {
            match fields.and_then(|f| f.get(name)) {
                None => {}
                Some(Value::String(v)) if valid_correlation(v) => {
                    metadata.correlation.insert(name.into(), v.clone().into());
                }
                Some(_) => metadata
                    .dropped
                    .push(format!("typeagent.{name} is invalid")),
            }
        }
    }
    Ok(metadata)
}

/// A correlation value: 1 to 256 characters of `[A-Za-z0-9._:@/-]`.
fn valid_correlation(value: &str) -> bool {
    (1..=MAX_CORRELATION_LENGTH).contains(&value.len())
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:@/-".contains(&c))
}

/// A W3C `tracestate` as TypeAgent's `validateTracestate` reads it: at most 512 characters
/// and 32 members, each `key=value` with a simple (`[a-z][a-z0-9_*/-]{0,255}`) or multi-tenant
/// (`[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13}`) key that is not repeated, and a
/// value of printable characters other than `,` and `=` (at most 256, not ending in a space).
fn valid_tracestate(value: &str) -> bool {
    if value.is_empty() || value.len() > MAX_TRACESTATE_LENGTH {
        return false;
    }
    let members: Vec<&str> = value.split(',').collect();
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return false;
    }
    let key_char = |c: u8| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'*' | b'/' | b'-');
    let simple_key = |k: &[u8]| {
        !k.is_empty()
            && k.len() <= 256
            && k[0].is_ascii_lowercase()
            && k.iter().all(|&c| key_char(c))
    };
    let tenant_key = |k: &[u8]| match k.iter().position(|&c| c == b'@') {
        Some(at) => {
            let (tenant, system) = (&k[..at], &k[at + 1..]);
            !tenant.is_empty()
                && tenant.len() <= 241
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && tenant.iter().all(|&c| key_char(c))
                && !system.is_empty()
                && system.len() <= 14
                && system[0].is_ascii_lowercase()
                && system.iter().all(|&c| key_char(c))
        }
        None => false,
    };
    let mut keys = std::collections::HashSet::new();
    members.iter().all(|member| {
        let member = member.trim();
        let Some(eq) = member.find('=').filter(|&i| i > 0 && i < member.len() - 1) else {
            return false;
        };
        let (key, state) = (&member[..eq], &member[eq + 1..]);
        let state_ok = state.len() <= 255
            && state
                .bytes()
                .all(|c| matches!(c, 0x20..=0x2b | 0x2d..=0x3c | 0x3e..=0x7e))
            && !state.ends_with(' ');
        (simple_key(key.as_bytes()) || tenant_key(key.as_bytes())) && state_ok && keys.insert(key)
    })
}

/// A fresh W3C trace id (32 lowercase hex digits, random, never all zeros) for a request
/// whose client sent no valid `traceparent`.
pub fn new_trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";

    #[test]
    fn traceparent_follows_typeagent_and_w3c() {
        let good = format!("00-{TRACE}-{PARENT}-01");
        let t = TraceParent::parse(&good).expect("valid");
        assert_eq!(
            (t.trace_id.as_str(), t.parent_id.as_str(), t.flags),
            (TRACE, PARENT, 1)
        );
        // A later version may carry more fields, after a dash; version 00 may not.
        assert!(TraceParent::parse(&format!("01-{TRACE}-{PARENT}-00-extra")).is_some());
        assert!(TraceParent::parse(&format!("01-{TRACE}-{PARENT}-00")).is_some());
        for bad in [
            format!("00-{TRACE}-{PARENT}-01-extra"),
            format!("01-{TRACE}-{PARENT}-00extra"),
            format!("ff-{TRACE}-{PARENT}-01"),
            format!("00-{}-{PARENT}-01", TRACE.to_uppercase()),
            format!("00-{}-{PARENT}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{TRACE}-{PARENT}-1"),
            format!("00_{TRACE}-{PARENT}-01"),
            format!("01-{TRACE}-{PARENT}-00-{}", "x".repeat(460)),
            "00-é".repeat(20),
            String::new(),
        ] {
            assert_eq!(TraceParent::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn metadata_needs_version_one_and_drops_bad_parts_alone() {
        assert_eq!(parse_metadata(&json!("x")), Err(MetadataIgnored::NotObject));
        assert_eq!(
            parse_metadata(
                &json!({"version": 2, "traceparent": format!("00-{TRACE}-{PARENT}-01")})
            ),
            Err(MetadataIgnored::Version("2".into()))
        );
        assert_eq!(
            parse_metadata(&json!({})),
            Err(MetadataIgnored::Version("absent".into()))
        );
        let m = parse_metadata(&json!({
            "version": 1,
            "traceparent": format!("00-{TRACE}-{PARENT}-01"),
            "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            "typeagent": {"agentName": "player", "traceId": "bad value!", "other": 1}
        }))
        .unwrap();
        assert_eq!(m.traceparent.unwrap().trace_id, TRACE);
        assert_eq!(
            m.tracestate.as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(
            m.correlation,
            json!({"agentName": "player"}).as_object().cloned().unwrap()
        );
        assert_eq!(m.dropped, ["typeagent.traceId is invalid"]);

        let m = parse_metadata(&json!({"version": 1, "traceparent": "nope", "tracestate": "a=b"}))
            .unwrap();
        assert_eq!(m.traceparent, None);
        assert_eq!(m.tracestate, None);
        assert_eq!(m.dropped.len(), 2, "{:?}", m.dropped);
    }

    #[test]
    fn tracestate_rules() {
        assert!(valid_tracestate("a=1"));
        assert!(valid_tracestate("t1@sys=x, b=2"));
        // Members are trimmed before they are read (TypeAgent's `member.trim()`).
        assert!(valid_tracestate("a=1 "));
        for bad in ["", "=1", "a=", "A=1", "a=1,a=2", "a=x,y", "a@=1", "a=b=c"] {
            assert!(!valid_tracestate(bad), "{bad}");
        }
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(!valid_tracestate(&many));
    }

    #[test]
    fn fresh_trace_ids_are_w3c_trace_ids() {
        let a = new_trace_id();
        assert_eq!(a.len(), 32);
        assert!(TraceParent::parse(&format!("00-{a}-{PARENT}-01")).is_some());
        assert_ne!(a, new_trace_id());
    }
}
