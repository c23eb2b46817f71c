//! The 19 macro methods of the `agent-server` channel (TypeAgent's Copilot macros:
//! record an interaction, turn it into a macro, approve, run). Roundtable keeps no macro
//! store, so each method answers as TypeAgent's server does when its store is empty, which
//! is what TypeAgent's callers (the Copilot plugin's hooks, the browser extension's adapter)
//! already handle; the one method that would need a store to succeed
//! (`armMacroRecording`) answers that Roundtable does not support it.
//!
//! | method | answer |
//! | --- | --- |
//! | `getMacroRecordingState(sessionId)` | `{"status":"idle"}`: nothing is ever armed |
//! | `claimMacroRecording(request)` | void: nothing armed to claim (the plugin then lets the prompt through) |
//! | `cancelMacroRecording(sessionId)`, `failMacroRecording(sessionId, tokenId, error)` | void (TypeAgent: no-ops for an unknown session or token) |
//! | `listMacros(request?)`, `searchMacros(request?)` | `[]` (a `null` request is taken, unlike TypeAgent's server, which throws on the `[null]` its own client sends) |
//! | `armMacroRecording(request)` | `Macro recording is not supported by Roundtable`: a token would promise a trace that is never stored; the plugin's `@typeagent macro record` shows the error |
//! | `finalizeMacroRecording(request)` | `The macro recording token is not active.` (no token ever is) |
//! | `createMacroFromTrace(request)` | `Macro name is required.` / `Invalid macro identifier.` / `Trace not found: <traceId>` |
//! | `inspectMacro`, `getMacroRequirements`, `validateMacro`, `approveMacro` (`{macroId, version?}`) | `Macro not found: <macroId>`, or with a version `Macro version not found: <macroId>@<version>` |
//! | `disableMacro({macroId})` | `Macro not found: <macroId>` |
//! | `deleteMacro({macroId})` | void (TypeAgent: deleting an absent macro is no error) |
//! | `runMacro(request)` | `Macro not found: <macroId>` (or the version form), after the `runId` check |
//! | `submitMacroCandidate(request)` | `A bounded candidate reason is required.` / `Invalid macro identifier.` / `Macro version not found: <sourceMacroId>@<sourceVersion>` |
//! | `cancelMacroRun(runId)` | void (no run is active) |
//! | `getMacroRun(runId)` | `Macro run not found: <runId>` |
//!
//! Every identifier TypeAgent checks (`macroId`, `runId`, `traceId`, `handoffRunId`) must
//! match `^[a-zA-Z0-9-]+$`, else `Invalid macro identifier.`, in TypeAgent's order. Argument
//! shapes are checked first, with the protocol's `Invalid argument <n> (<param>) of
//! <method>: expected <type>` texts. None of these needs a joined conversation.
//!
//! Who talks to it: [`super`]'s request parser (one variant per macro method) and runner.

use roundtable_actors::protocol::{self, Args, RpcError, RpcResult};
use serde_json::{json, Map, Value};

/// The error of the one method Roundtable refuses outright.
pub const RECORDING_NOT_SUPPORTED: &str = "Macro recording is not supported by Roundtable";
/// TypeAgent's text for an identifier outside `^[a-zA-Z0-9-]+$`.
pub const INVALID_IDENTIFIER: &str = "Invalid macro identifier.";
/// TypeAgent's `submitMacroCandidate` bound on `reason`, in UTF-16 code units.
const MAX_CANDIDATE_REASON: usize = 2_000;

/// One macro method with its arguments checked; [`answer`](MacroRequest::answer) gives the
/// reply.
#[derive(Debug, PartialEq)]
pub(super) enum MacroRequest {
    /// `armMacroRecording({sessionId, ttlMs?})`.
    Arm,
    /// `getMacroRecordingState(sessionId)`.
    RecordingState,
    /// `claimMacroRecording({sessionId, cwd, promptHash})`.
    Claim,
    /// `cancelMacroRecording(sessionId)`.
    CancelRecording,
    /// `failMacroRecording(sessionId, tokenId, error)`.
    FailRecording,
    /// `finalizeMacroRecording({tokenId, trace})`.
    Finalize,
    /// `listMacros(request?)` / `searchMacros(request?)`.
    List,
    /// `createMacroFromTrace({traceId, name, description?})`.
    CreateFromTrace {
        /// The trace asked for.
        trace_id: String,
    },
    /// `inspectMacro`, `getMacroRequirements`, `validateMacro`, `approveMacro`,
    /// `disableMacro`, `runMacro` and `submitMacroCandidate`: all read a macro first.
    Macro {
        /// The macro.
        macro_id: String,
        /// The version asked for (`None`: the latest).
        version: Option<u64>,
    },
    /// `deleteMacro({macroId})` and `cancelMacroRun(runId)`: void once the id is valid.
    Void,
    /// `getMacroRun(runId)`.
    Run {
        /// The run.
        run_id: String,
    },
    /// An identifier failed TypeAgent's check.
    InvalidIdentifier,
    /// An argument failed one of TypeAgent's own value checks (its exact text).
    Refused(&'static str),
}

/// Whether `method` is one of the 19 macro methods.
pub(super) fn is_macro_method(method: &str) -> bool {
    matches!(
        method,
        "armMacroRecording"
            | "getMacroRecordingState"
            | "claimMacroRecording"
            | "cancelMacroRecording"
            | "failMacroRecording"
            | "finalizeMacroRecording"
            | "listMacros"
            | "searchMacros"
            | "inspectMacro"
            | "getMacroRequirements"
            | "createMacroFromTrace"
            | "validateMacro"
            | "approveMacro"
            | "disableMacro"
            | "deleteMacro"
            | "runMacro"
            | "submitMacroCandidate"
            | "cancelMacroRun"
            | "getMacroRun"
    )
}

/// TypeAgent's identifier rule (`validateMacroId`).
fn valid_identifier(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A required string field of the request object at argument `index`.
fn req_field_str<'a>(
    obj: &'a Map<String, Value>,
    m: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<&'a str> {
    protocol::opt_field_str(Some(obj), m, index, field)?
        .ok_or_else(|| protocol::invalid(m, index, field, "a string"))
}

/// An optional non-negative integer field (`version`, `limit`, `ttlMs`).
fn opt_field_count(
    obj: Option<&Map<String, Value>>,
    m: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<u64>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| protocol::invalid(m, index, field, "a non-negative integer")),
    }
}

/// `{macroId, version?}` of the inspect family.
fn macro_ref(obj: &Map<String, Value>, m: &str) -> RpcResult<MacroRequest> {
    let macro_id = req_field_str(obj, m, 0, "macroId")?;
    let version = opt_field_count(Some(obj), m, 0, "version")?;
    Ok(checked(macro_id, || MacroRequest::Macro {
        macro_id: macro_id.to_string(),
        version,
    }))
}

/// `then()` when `id` passes TypeAgent's identifier rule.
fn checked(id: &str, then: impl FnOnce() -> MacroRequest) -> MacroRequest {
    if valid_identifier(id) {
        then()
    } else {
        MacroRequest::InvalidIdentifier
    }
}

impl MacroRequest {
    /// Checks the arguments of macro method `m` (one [`is_macro_method`] accepts).
    pub(super) fn parse(m: &str, args: &Args) -> RpcResult<MacroRequest> {
        Ok(match m {
            "armMacroRecording" => {
                let request = args.req_object(m, 0, "request")?;
                req_field_str(request, m, 0, "sessionId")?;
                opt_field_count(Some(request), m, 0, "ttlMs")?;
                MacroRequest::Arm
            }
            "getMacroRecordingState" => {
                args.req_str(m, 0, "sessionId")?;
                MacroRequest::RecordingState
            }
            "claimMacroRecording" => {
                let request = args.req_object(m, 0, "request")?;
                req_field_str(request, m, 0, "sessionId")?;
                for field in ["cwd", "promptHash"] {
                    protocol::opt_field_str(Some(request), m, 0, field)?;
                }
                MacroRequest::Claim
            }
            "cancelMacroRecording" => {
                args.req_str(m, 0, "sessionId")?;
                MacroRequest::CancelRecording
            }
            "failMacroRecording" => {
                args.req_str(m, 0, "sessionId")?;
                args.req_str(m, 1, "tokenId")?;
                args.req_str(m, 2, "error")?;
                MacroRequest::FailRecording
            }
            "finalizeMacroRecording" => {
                let request = args.req_object(m, 0, "request")?;
                req_field_str(request, m, 0, "tokenId")?;
                match request.get("trace") {
                    Some(Value::Object(_)) => MacroRequest::Finalize,
                    _ => return Err(protocol::invalid(m, 0, "trace", "an object")),
                }
            }
            "listMacros" => {
                let request = args.opt_object(m, 0, "request")?;
                protocol::opt_field_str(request, m, 0, "state")?;
                opt_field_count(request, m, 0, "limit")?;
                MacroRequest::List
            }
            "searchMacros" => {
                let request = args.opt_object(m, 0, "request")?;
                protocol::opt_field_str(request, m, 0, "query")?;
                opt_field_count(request, m, 0, "limit")?;
                MacroRequest::List
            }
            "createMacroFromTrace" => {
                let request = args.req_object(m, 0, "request")?;
                let trace_id = req_field_str(request, m, 0, "traceId")?;
                let name = req_field_str(request, m, 0, "name")?;
                protocol::opt_field_str(Some(request), m, 0, "description")?;
                if name.trim().is_empty() {
                    MacroRequest::Refused("Macro name is required.")
                } else {
                    checked(trace_id, || MacroRequest::CreateFromTrace {
                        trace_id: trace_id.to_string(),
                    })
                }
            }
            "inspectMacro" | "getMacroRequirements" | "validateMacro" | "approveMacro" => {
                macro_ref(args.req_object(m, 0, "request")?, m)?
            }
            "disableMacro" => {
                let macro_id = req_field_str(args.req_object(m, 0, "request")?, m, 0, "macroId")?;
                checked(macro_id, || MacroRequest::Macro {
                    macro_id: macro_id.to_string(),
                    version: None,
                })
            }
            "deleteMacro" => {
                let macro_id = req_field_str(args.req_object(m, 0, "request")?, m, 0, "macroId")?;
                checked(macro_id, || MacroRequest::Void)
            }
            "runMacro" => {
                let request = args.req_object(m, 0, "request")?;
                let run_id = req_field_str(request, m, 0, "runId")?;
                let target = macro_ref(request, m)?;
                checked(run_id, || target)
            }
            "submitMacroCandidate" => Self::candidate(m, args.req_object(m, 0, "request")?)?,
            "cancelMacroRun" => checked(args.req_str(m, 0, "runId")?, || MacroRequest::Void),
            "getMacroRun" => {
                let run_id = args.req_str(m, 0, "runId")?;
                checked(run_id, || MacroRequest::Run {
                    run_id: run_id.to_string(),
                })
            }
            _ => return Err(RpcError::NoHandler(m.to_string())),
        })
    }

    /// `submitMacroCandidate`: TypeAgent checks the reason, then the handoff id, then (after
    /// bounds on steps that only matter once the source exists) reads the source version.
    fn candidate(m: &str, request: &Map<String, Value>) -> RpcResult<MacroRequest> {
        let source = req_field_str(request, m, 0, "sourceMacroId")?;
        let version = opt_field_count(Some(request), m, 0, "sourceVersion")?
            .ok_or_else(|| protocol::invalid(m, 0, "sourceVersion", "a non-negative integer"))?;
        let handoff = req_field_str(request, m, 0, "handoffRunId")?;
        let reason = req_field_str(request, m, 0, "reason")?;
        for field in ["inputs", "steps"] {
            if !matches!(request.get(field), Some(Value::Array(_))) {
                return Err(protocol::invalid(m, 0, field, "an array"));
            }
        }
        if !matches!(request.get("executionEvidence"), Some(Value::Object(_))) {
            return Err(protocol::invalid(m, 0, "executionEvidence", "an object"));
        }
        if reason.trim().is_empty() || reason.encode_utf16().count() > MAX_CANDIDATE_REASON {
            return Ok(MacroRequest::Refused(
                "A bounded candidate reason is required.",
            ));
        }
        if !valid_identifier(handoff) {
            return Ok(MacroRequest::InvalidIdentifier);
        }
        Ok(checked(source, || MacroRequest::Macro {
            macro_id: source.to_string(),
            version: Some(version),
        }))
    }

    /// The reply: what TypeAgent's server answers with an empty macro store.
    pub(super) fn answer(self) -> RpcResult<Option<Value>> {
        let refused = |text: String| Err(RpcError::Message(text));
        match self {
            MacroRequest::Arm => refused(RECORDING_NOT_SUPPORTED.to_string()),
            MacroRequest::RecordingState => Ok(Some(json!({"status": "idle"}))),
            MacroRequest::Claim
            | MacroRequest::CancelRecording
            | MacroRequest::FailRecording
            | MacroRequest::Void => Ok(None),
            MacroRequest::Finalize => {
                refused("The macro recording token is not active.".to_string())
            }
            MacroRequest::List => Ok(Some(json!([]))),
            MacroRequest::CreateFromTrace { trace_id } => {
                refused(format!("Trace not found: {trace_id}"))
            }
            MacroRequest::Macro {
                macro_id,
                version: None,
            } => refused(format!("Macro not found: {macro_id}")),
            MacroRequest::Macro {
                macro_id,
                version: Some(v),
            } => refused(format!("Macro version not found: {macro_id}@{v}")),
            MacroRequest::Run { run_id } => refused(format!("Macro run not found: {run_id}")),
            MacroRequest::InvalidIdentifier => refused(INVALID_IDENTIFIER.to_string()),
            MacroRequest::Refused(text) => refused(text.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(m: &str, args: Value) -> RpcResult<Option<Value>> {
        let Value::Array(a) = args else { panic!() };
        MacroRequest::parse(m, &Args(a)).and_then(MacroRequest::answer)
    }

    fn err(m: &str, args: Value) -> String {
        run(m, args).unwrap_err().to_string()
    }

    /// TypeAgent's identifier rule and its order against the other checks.
    #[test]
    fn identifiers_and_order_of_checks() {
        assert!(valid_identifier("a-B-9"));
        for bad in ["", "a_b", "../x", "a b", "é"] {
            assert!(!valid_identifier(bad), "{bad:?}");
        }
        assert_eq!(
            err("runMacro", json!([{"runId": "r/1", "macroId": "m"}])),
            INVALID_IDENTIFIER
        );
        assert_eq!(
            err(
                "runMacro",
                json!([{"runId": "r1", "macroId": "m", "version": 2}])
            ),
            "Macro version not found: m@2"
        );
        assert_eq!(
            err(
                "createMacroFromTrace",
                json!([{"traceId": "../t", "name": " "}])
            ),
            "Macro name is required."
        );
        let candidate = |reason: &str, handoff: &str| {
            json!([{"sourceMacroId": "m", "sourceVersion": 3, "handoffRunId": handoff,
                "reason": reason, "inputs": [], "steps": [], "executionEvidence": {}}])
        };
        assert_eq!(
            err("submitMacroCandidate", candidate(" ", "h!")),
            "A bounded candidate reason is required."
        );
        assert_eq!(
            err(
                "submitMacroCandidate",
                candidate(&"é".repeat(MAX_CANDIDATE_REASON + 1), "h")
            ),
            "A bounded candidate reason is required."
        );
        assert_eq!(
            err("submitMacroCandidate", candidate("why", "h!")),
            INVALID_IDENTIFIER
        );
        assert_eq!(
            err("submitMacroCandidate", candidate("why", "h")),
            "Macro version not found: m@3"
        );
        assert_eq!(
            err("deleteMacro", json!([{"macroId": "a.b"}])),
            INVALID_IDENTIFIER
        );
        assert_eq!(run("deleteMacro", json!([{"macroId": "ab"}])), Ok(None));
    }
}
