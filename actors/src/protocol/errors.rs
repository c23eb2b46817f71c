//! Every error an agent-server or dispatcher method can answer with, and its exact text.
//! Clients match several of these by prefix (reference section 4.3): change a text here and a
//! TypeAgent client stops recognising it. Built by the actors and the transport; turned into
//! `invokeError` frames by [`invoke_error`](super::invoke_error).

/// Every error a method can answer with. The `Display` text is exactly what goes into
/// `invokeError.error`; clients match several of these by prefix (reference section 4.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The id is not in the registry (or is being deleted). Clients match the prefix.
    #[error("Conversation not found: {0}")]
    ConversationNotFound(String),
    /// Name outside 1..=256 UTF-16 code units.
    #[error("Conversation name must be between 1 and 256 characters")]
    NameLength,
    /// A name with a control character (C0, DEL or C1).
    #[error("Conversation name must not contain control characters")]
    NameControlCharacters,
    /// A name with a character that changes the text's direction (U+202E) or shows nothing
    /// (a zero-width space): two names that look alike could differ, and a name could make
    /// the text after it read backwards. Names the character by its code point.
    #[error("Conversation name must not contain invisible or direction-changing characters ({0})")]
    NameInvisibleCharacters(String),
    /// Another conversation already has this name (trimmed, case-insensitive); quotes the
    /// existing name as stored.
    #[error("A conversation named \"{0}\" already exists. Pick a different name.")]
    NameExists(String),
    /// `nameCollisionBehavior` other than `error` / `appendNumber`.
    #[error("Unknown name collision behavior: {0}")]
    UnknownCollisionBehavior(String),
    /// This socket already joined the conversation.
    #[error("Already joined conversation '{0}'. Call leaveConversation() before joining again.")]
    AlreadyJoined(String),
    /// A second join for the same conversation is still in flight on this socket.
    #[error("Channel '{0}' already exists")]
    ChannelExists(String),
    /// `leaveConversation` for a conversation this socket never joined.
    #[error("Not joined to conversation: {0}")]
    NotJoined(String),
    /// `registerClientAgent` / `unregisterClientAgent` without `conversationId` on a socket
    /// that joined nothing (TypeAgent uses this text for both methods).
    #[error("Cannot register client agent: no conversation joined")]
    ClientAgentNoConversation,
    /// The same, on a socket joined to several conversations.
    #[error("Cannot register client agent: multiple conversations joined; specify conversationId")]
    ClientAgentAmbiguousConversation,
    /// This socket already hosts the agent in that conversation.
    #[error("Client agent '{name}' is already registered on conversation '{conversation}'")]
    ClientAgentAlreadyRegistered {
        /// The agent's name.
        name: String,
        /// The conversation, as the canonical id.
        conversation: String,
    },
    /// The name is a built-in agent or tool prefix, or another socket's agent in that
    /// conversation. Android matches this phrase to recover a registration left by its dead
    /// socket (it unregisters, then registers again).
    #[error("App agent '{0}' already exists")]
    AppAgentExists(String),
    /// A client agent name that cannot prefix tool names.
    #[error("Invalid client agent name '{0}': use 1 to 32 letters, digits, '-' or '_', not ending in '_' and without '__'")]
    ClientAgentName(String),
    /// A manifest whose schema cannot be read; says what and where.
    #[error("Invalid manifest for client agent '{name}': {reason}")]
    ClientAgentManifest {
        /// The agent's name.
        name: String,
        /// What is wrong (schema errors name the line and column).
        reason: String,
    },
    /// A manifest over the size bound.
    #[error("Manifest of client agent '{name}' is too large ({bytes} bytes; limit {limit})")]
    ClientAgentManifestTooLarge {
        /// The agent's name.
        name: String,
        /// The manifest's size as JSON text.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The socket hosts the most client agents it may.
    #[error("Too many client agents on this connection (limit {0})")]
    TooManyClientAgentsOnConnection(usize),
    /// The conversation has the most client agents it may.
    #[error("Too many client agents in conversation '{conversation}' (limit {limit})")]
    TooManyClientAgentsInConversation {
        /// The conversation, as the canonical id.
        conversation: String,
        /// The bound.
        limit: usize,
    },
    /// The agent's `initializeAgentContext` failed (its `invokeError` text) or got no answer
    /// (time-out, disconnection): the registration fails.
    #[error("Client agent '{name}' failed to initialize: {error}")]
    ClientAgentInitialize {
        /// The agent's name.
        name: String,
        /// The agent's error text, or why there was no answer.
        error: String,
    },
    /// Method not implemented on this channel.
    #[error("No invoke handler {0}")]
    NoHandler(String),
    /// A client agent's storage or token-cache invoke: Roundtable offers it no storage
    /// (`hasInstanceStorage` / `hasSessionStorage` are false). TypeAgent's text.
    #[error("Storage not available")]
    StorageNotAvailable,
    /// A client agent named a session context (`contextId`) other than its one (0), or an
    /// action context that is not open (`used out of scope`: it was, once). TypeAgent's text.
    #[error("Internal error: Invalid contextId {id}{}", if *.out_of_scope { " used out of scope" } else { "" })]
    InvalidContextId {
        /// The id named.
        id: u64,
        /// It named an action context that has closed.
        out_of_scope: bool,
    },
    /// `toggleTransientAgent` / `queueToggleTransientAgent` with a name that is not
    /// `<agent>.<sub>`. TypeAgent's text.
    #[error("Invalid sub agent name: {0}")]
    InvalidSubAgentName(String),
    /// The same with a well-formed name: Roundtable's client agents have no transient
    /// sub-agents. TypeAgent's text.
    #[error("Transient sub agent not found: {0}")]
    TransientSubAgentNotFound(String),
    /// A protocol method Roundtable answers deliberately without doing it (a feature it does
    /// not have); names the method.
    #[error("{0}: not supported by Roundtable")]
    NotSupported(String),
    /// An invoke with a valid callId but a bad name or non-array args.
    #[error("Invalid invoke message")]
    InvalidInvoke,
    /// An invoke whose text does not parse as JSON; says why (the parser's words).
    #[error("Invalid invoke message: {0}")]
    Unparsable(String),
    /// An argument of the wrong JSON type.
    #[error("Invalid argument {index} ({param}) of {method}: expected {expected}")]
    InvalidArgument {
        /// Method being called.
        method: String,
        /// Zero-based argument position.
        index: usize,
        /// Parameter name, as in the reference.
        param: &'static str,
        /// What the parameter must be.
        expected: &'static str,
    },
    /// The socket has [`MAX_IN_FLIGHT`](super::MAX_IN_FLIGHT) invokes unanswered; this one was not run.
    #[error("Too many requests in flight on this connection (limit {0}); wait for answers before sending more")]
    TooManyInFlight(usize),
    /// `submitCommand` / `interrupt` with more attachments than one request may carry
    /// ([`MAX_ATTACHMENTS`](crate::agent::attachments::MAX_ATTACHMENTS)); nothing was queued.
    #[error("Too many attachments: {count} (at most {limit})")]
    TooManyAttachments {
        /// Attachments sent.
        count: usize,
        /// The bound.
        limit: usize,
    },
    /// `submitCommand` / `interrupt` whose attachments together are larger than one request
    /// may carry ([`MAX_ATTACHMENT_BYTES`](crate::agent::attachments::MAX_ATTACHMENT_BYTES),
    /// as sent); nothing was queued.
    #[error("Attachments too large: {bytes} bytes (at most {limit})")]
    AttachmentsTooLarge {
        /// Their size as sent.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// A durable write failed; the change was not made.
    #[error("Storage error: {0}")]
    Storage(String),
    /// `serve --cluster`: NATS is unreachable or a cluster write failed; the change was not
    /// made anywhere (a node never changes only its own copy of shared state).
    #[error("Cluster unavailable: {0}")]
    ClusterUnavailable(String),
    /// `serve --cluster`: another node holds the conversation's ownership lease. The registry
    /// answers this to the transport, which relays the join there (`src/transport/relay/`);
    /// a client sees it only when a relayed join reaches a node that has just lost the
    /// conversation in turn.
    #[error("Conversation {id} is served by cluster node {node}: connect to that node to join it")]
    OnOtherNode {
        /// The conversation.
        id: String,
        /// The node whose disk holds it.
        node: String,
    },
    /// The server is shutting down and takes no new work.
    #[error("Server is shutting down")]
    ServerStopping,
    /// A message defined by the method itself (e.g. `Choice not found or expired`).
    #[error("{0}")]
    Message(String),
    /// A bug or a lost actor; the text says which.
    #[error("Internal error: {0}")]
    Internal(String),
}

/// Result type of every RPC handler.
pub type RpcResult<T> = Result<T, RpcError>;
