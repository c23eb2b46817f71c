//! `ConversationInfo` and `findConversations` results as clients see them (reference
//! section 3). Built by the registry's catalog.

use serde::Serialize;

use crate::ids::ConversationId;

/// One conversation as listed to clients (`ConversationInfo` in the reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfo {
    /// Written lower-case hyphenated.
    pub conversation_id: ConversationId,
    /// The name exactly as stored (untrimmed).
    pub name: String,
    /// Clients joined right now (0 when not loaded).
    pub client_count: usize,
    /// ISO-8601 with milliseconds, UTC (`new Date().toISOString()`).
    pub created_at: String,
    /// Number of `user-request` entries in the display log.
    pub message_count: u64,
    /// Present in list/find results, absent in create results. Always 0: TypeAgent counts the
    /// messages of its conversation memory here, which Roundtable does not have (content
    /// search keeps its own index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed_message_count: Option<u64>,
}

/// [`ConversationInfo`] borrowing its strings, for serializing long lists without copies.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfoRef<'a> {
    /// Written lower-case hyphenated.
    pub conversation_id: ConversationId,
    /// Name as stored.
    pub name: &'a str,
    /// Clients joined right now.
    pub client_count: usize,
    /// ISO-8601.
    pub created_at: &'a str,
    /// `user-request` entries.
    pub message_count: u64,
    /// Present in list/find results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed_message_count: Option<u64>,
}

/// One `findConversations` hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1, best first.
    pub score: f64,
}

/// One `searchConversationContent` hit (`ConversationContentMatch` in the reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentMatch {
    /// The conversation.
    pub conversation: ConversationInfo,
    /// 0..1, best first.
    pub score: f64,
    /// The best passages, `"user: …"` / `"agent: …"`, matched words in `**…**`.
    pub snippets: Vec<String>,
    /// Roundtable extension: the seq of the best passage's display-log entry (the
    /// `user-request`, or the `command-result` ending the output), for opening the
    /// conversation there. Absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}
