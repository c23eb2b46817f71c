//! Wire types of the TypeAgent agent-server protocol: envelopes, agent-rpc messages, the
//! argument rules (`null` means absent, trailing arguments may be missing) and every error text
//! that clients parse.
//!
//! Owned by nobody: the transport (`src/transport/`) decodes inbound frames with
//! [`Inbound::parse`], the actors build outbound frames with [`invoke_result`], [`invoke_error`]
//! and [`call_frame`], and the transport builds its server → client invokes with
//! [`invoke_frame`]. The reference is `shared/reference/typeagent-protocol.md`, sections 2–4.
//!
//! # Layout
//! - [`errors`]: [`RpcError`], every error text.
//! - [`inbound`]: [`Inbound::parse`] and the value budget; [`salvage`] reads the
//!   callId of an invoke that does not parse.
//! - [`args`]: [`Args`] and the argument rules.
//! - [`outbound`]: answers, `call` frames (with callId splicing) and server → client invokes.
//! - [`info`]: [`ConversationInfo`] and friends.
//! - [`frames`]: WebSocket message reassembly and the inbound byte budget.
//! - [`trace`]: an invoke's `metadata` (W3C trace context) and request trace ids.
//! - [`plain_text`]: the plain-text alternate of a markdown display.

pub mod args;
pub mod errors;
pub mod frames;
pub mod inbound;
pub mod info;
pub mod outbound;
pub mod plain_text;
pub mod salvage;
pub mod trace;

pub use args::*;
pub use errors::*;
pub use inbound::*;
pub use info::*;
pub use outbound::*;
pub use salvage::salvage_invoke;

use crate::ids::ConversationId;

/// The control channel every connection has from the start.
pub const AGENT_SERVER_CHANNEL: &str = "agent-server";
/// The read-only port lookup channel.
pub const DISCOVERY_CHANNEL: &str = "discovery";
/// Prefix of the per-conversation server → client channel.
pub const CLIENTIO_PREFIX: &str = "clientio:";
/// Prefix of the per-conversation client → server channel.
pub const DISPATCHER_PREFIX: &str = "dispatcher:";
/// Prefix of a client-hosted agent's channel (server → client invokes, `agent:<name>`).
pub const AGENT_PREFIX: &str = "agent:";
/// Largest callId agent-rpc accepts (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Name of the `clientio` channel of one conversation.
pub fn clientio_channel(conversation_id: ConversationId) -> String {
    format!("{CLIENTIO_PREFIX}{conversation_id}")
}

/// Name of a client-hosted agent's channel.
pub fn agent_channel(agent: &str) -> String {
    format!("{AGENT_PREFIX}{agent}")
}

/// Invokes one socket may have unanswered at once; the next gets
/// [`RpcError::TooManyInFlight`]. Bounds the per-socket work and the registry writer's queue.
pub const MAX_IN_FLIGHT: usize = 256;

/// Every method name the server answers, on any channel. Used to bound metric labels: a name
/// outside this list (clients may send anything) is counted as "other".
pub const KNOWN_METHODS: &[&str] = &[
    "(invalid)",
    // agent-server
    "joinConversation",
    "leaveConversation",
    "createConversation",
    "listConversations",
    "findConversations",
    "renameConversation",
    "deleteConversation",
    "searchConversationContent",
    "getUserIdentity",
    "subscribeConversations",
    "unsubscribeConversations",
    "registerClientAgent",
    "unregisterClientAgent",
    "shutdown",
    "restart",
    // discovery
    "lookupPort",
    // dispatcher
    "submitCommand",
    "interrupt",
    "getDisplayHistory",
    "getQueueSnapshot",
    "cancelCommand",
    "promoteCommand",
    "respondToInteraction",
    "respondToChoice",
    "getStatus",
    "getCommandCompletion",
    "getDeveloperMode",
    "close",
    // issue 26: agent-server extras (no conversation needed)
    "getSpeechToken",
    "armMacroRecording",
    "getMacroRecordingState",
    "claimMacroRecording",
    "cancelMacroRecording",
    "failMacroRecording",
    "finalizeMacroRecording",
    "listMacros",
    "searchMacros",
    "inspectMacro",
    "getMacroRequirements",
    "createMacroFromTrace",
    "validateMacro",
    "approveMacro",
    "disableMacro",
    "deleteMacro",
    "runMacro",
    "submitMacroCandidate",
    "cancelMacroRun",
    "getMacroRun",
    // issue 26: dispatcher extras
    "getDynamicDisplay",
    "getTemplateSchema",
    "getTemplateCompletion",
    "checkCache",
    "getAgentSchemas",
    "recordUserFeedback",
    "recordUserHide",
    "restoreAllHidden",
    "flushHidden",
    // agent:<name>, a client agent's invokes to its host
    "storageRead",
    "storageWrite",
    "storageList",
    "storageExists",
    "storageDelete",
    "tokenCacheRead",
    "tokenCacheWrite",
    "tokenCacheDelete",
    "toggleTransientAgent",
    "addDynamicAgent",
    "removeDynamicAgent",
    "forceCleanupDynamicAgent",
    "getSharedLocalHostPort",
    "setLocalHostPort",
    "registerPort",
    "releasePort",
    "indexes",
    "reloadAgentSchema",
    "notifyReadinessChanged",
    "notifyClientCountChanged",
    "popupQuestion",
    "queueToggleTransientAgent",
];

/// `method` as a `'static` label when the server knows it.
pub fn known_method(method: &str) -> Option<&'static str> {
    KNOWN_METHODS.iter().copied().find(|m| *m == method)
}

#[cfg(test)]
mod tests;
