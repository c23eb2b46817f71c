//! Paths inside one instance directory ([`Layout`]), and the removal of a conversation's
//! directory. Every other storage module asks a [`Layout`] for its paths, so the tree shown in
//! the [module overview](super) is spelled out here only.

use std::fs;
use std::path::PathBuf;

use crate::ids::ConversationId;

use super::durable::remove_durable;
use super::StoreError;

/// Name prefixes swept at startup: conversations of clients that crashed before cleaning up.
pub const EPHEMERAL_PREFIXES: [&str; 2] = ["cli-ephemeral-", "cli-replay-"];

/// The registry file's name (in `<root>/conversations/`).
pub const REGISTRY_FILE_NAME: &str = "conversations.json";
/// The registry journal's name (beside the registry file).
pub const JOURNAL_FILE_NAME: &str = "conversations.journal";

/// Paths inside one instance directory.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The instance directory itself.
    pub root: PathBuf,
}

impl Layout {
    /// Layout rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }
    /// `<root>/conversations`.
    pub fn conversations_dir(&self) -> PathBuf {
        self.root.join("conversations")
    }
    /// `<root>/conversations/conversations.json`.
    pub fn registry_file(&self) -> PathBuf {
        self.conversations_dir().join(REGISTRY_FILE_NAME)
    }
    /// `<root>/conversations/conversations.journal`.
    pub fn journal_file(&self) -> PathBuf {
        self.conversations_dir().join(JOURNAL_FILE_NAME)
    }
    /// A conversation's persist directory. Only ever built from a parsed UUID.
    pub fn conversation_dir(&self, id: &ConversationId) -> PathBuf {
        self.conversations_dir().join(id.to_string())
    }
}

/// Removes a conversation's persist directory (if any) and makes the removal durable; true
/// when there was one.
pub fn remove_conversation_dir(layout: &Layout, id: &ConversationId) -> Result<bool, StoreError> {
    remove_durable(&layout.conversation_dir(id), |dir| fs::remove_dir_all(dir))
}
