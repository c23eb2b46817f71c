//! [`ClientError`]: what a client call can fail with. `invokeError` texts are kept as the
//! server sent them; `Conversation not found` is told apart by its prefix, as TypeAgent's
//! clients do.

/// Errors of the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the URL.
    #[error(
        "cannot reach the Roundtable server at {url} ({reason}); start it with `roundtable serve`"
    )]
    Unreachable {
        /// The URL tried.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server wants a token this client did not give (or gave wrong).
    #[error(
        "the Roundtable server at {url} refused the connection (401 Unauthorized): it wants its \
         token; pass --token-file FILE or set ROUNDTABLE_TOKEN"
    )]
    Unauthorized {
        /// The URL tried (credentials hidden).
        url: String,
    },
    /// The server's `Conversation not found: <id>` (the full text).
    #[error("{0}")]
    ConversationNotFound(String),
    /// Any other `invokeError` text, as the server sent it.
    #[error("{0}")]
    Rpc(String),
    /// The socket closed before the answer came.
    #[error("the connection to the Roundtable server was lost")]
    Disconnected,
    /// The server sent something this client cannot read.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// Builds the error for an `invokeError` text.
    pub fn from_rpc(text: &str) -> ClientError {
        if text.trim_start().starts_with("Conversation not found") {
            ClientError::ConversationNotFound(text.to_string())
        } else {
            ClientError::Rpc(text.to_string())
        }
    }

    /// True for the error clients fall back on.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::ConversationNotFound(_))
    }
}

/// Result type of the client.
pub type ClientResult<T> = Result<T, ClientError>;
