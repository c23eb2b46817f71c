//! Wire types of the TypeAgent agent-server protocol: envelopes, agent-rpc messages, the
//! argument rules (`null` means absent, trailing arguments may be missing) and every error text
//! that clients parse.
//!
//! Owned by nobody: the transport (`src/transport.rs`) decodes inbound frames with
//! [`Inbound::parse`], the actors build outbound frames with [`invoke_result`], [`invoke_error`]
//! and [`call_frame`]. The reference is `shared/reference/typeagent-protocol.md`, sections 2–4.

use serde::Serialize;
use serde_json::{Map, Value};

/// The control channel every connection has from the start.
pub const AGENT_SERVER_CHANNEL: &str = "agent-server";
/// The read-only port lookup channel.
pub const DISCOVERY_CHANNEL: &str = "discovery";
/// Prefix of the per-conversation server → client channel.
pub const CLIENTIO_PREFIX: &str = "clientio:";
/// Prefix of the per-conversation client → server channel.
pub const DISPATCHER_PREFIX: &str = "dispatcher:";
/// Largest callId agent-rpc accepts (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Name of the `clientio` channel of one conversation.
pub fn clientio_channel(conversation_id: &str) -> String {
    format!("{CLIENTIO_PREFIX}{conversation_id}")
}

/// Name of the `dispatcher` channel of one conversation.
pub fn dispatcher_channel(conversation_id: &str) -> String {
    format!("{DISPATCHER_PREFIX}{conversation_id}")
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
    "registerClientAgent",
    "unregisterClientAgent",
    "shutdown",
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
];

/// `method` as a `'static` label when the server knows it.
pub fn known_method(method: &str) -> Option<&'static str> {
    KNOWN_METHODS.iter().copied().find(|m| *m == method)
}

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
    /// Method not implemented on this channel.
    #[error("No invoke handler {0}")]
    NoHandler(String),
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
    /// The socket has [`MAX_IN_FLIGHT`] invokes unanswered; this one was not run.
    #[error("Too many requests in flight on this connection (limit {0}); wait for answers before sending more")]
    TooManyInFlight(usize),
    /// A durable write failed; the change was not made.
    #[error("Storage error: {0}")]
    Storage(String),
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
    /// An answer to a server → client invoke (we never send any): logged and dropped.
    Response {
        /// Channel the envelope named.
        channel: String,
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
            "invokeResult" | "invokeError" if call_id.is_some() => {
                Ok(Inbound::Response { channel })
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

/// A conversation id in its one canonical form (lower-case, hyphenated UUID), whatever form
/// the client sent (upper case, braces, `urn:uuid:`, no hyphens): every method and channel
/// name accepts what `joinConversation` accepts. Other strings are returned as they are (they
/// name no conversation; errors echo them).
pub fn canonical_conversation_id(raw: &str) -> std::borrow::Cow<'_, str> {
    match uuid::Uuid::parse_str(raw) {
        Ok(id) => {
            let canonical = id.to_string();
            if canonical == raw {
                std::borrow::Cow::Borrowed(raw)
            } else {
                std::borrow::Cow::Owned(canonical)
            }
        }
        Err(_) => std::borrow::Cow::Borrowed(raw),
    }
}

/// Reads the channel and callId of an invoke from text that does not parse as JSON, without
/// building values and without recursion (the text may nest arbitrarily deep). `None` unless
/// the top level is an object whose `name` is a valid string and whose `message` object says
/// `"type":"invoke"` with a valid callId.
pub fn salvage_invoke(text: &str) -> Option<(String, u64)> {
    let mut sc = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    let (mut channel, mut kind, mut call_id) = (None, None, None);
    sc.object(|sc, key| {
        match key {
            b"name" if sc.peek() == Some(b'"') => {
                channel = Some(sc.string()?);
            }
            b"message" if sc.peek() == Some(b'{') => {
                sc.object(|sc, key| {
                    match key {
                        b"type" if sc.peek() == Some(b'"') => kind = Some(sc.string()?),
                        b"callId" => call_id = Some(sc.number()?),
                        _ => sc.skip_value()?,
                    }
                    Some(())
                })?;
            }
            _ => sc.skip_value()?,
        }
        Some(())
    })?;
    let channel: String = serde_json::from_slice(channel?).ok()?;
    let call_id = call_id
        .and_then(|n: &[u8]| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
        .filter(|n| *n <= MAX_SAFE_INTEGER)?;
    (kind? == b"\"invoke\"").then_some((channel, call_id))
}

/// A forward-only JSON tokenizer for [`salvage_invoke`]: strings come back raw (quotes
/// included), containers are skipped with a depth counter.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string token, quotes included (escapes are skipped, not checked).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i]);
                }
                _ => self.i += 1,
            }
        }
    }

    fn number(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        while self.i < self.b.len()
            && matches!(
                self.b[self.i],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            self.i += 1;
        }
        (self.i > start).then(|| &self.b[start..self.i])
    }

    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self.i < self.b.len() && !matches!(self.b[self.i], b',' | b'}' | b']') {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// `{ "key": value, … }`, calling `field` with each key (unquoted) to consume its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, &key[1..key.len() - 1])?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

fn valid_call_id(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}

/// Positional arguments with the protocol's rule that `null` and "missing" are the same.
#[derive(Debug, Clone, Default)]
pub struct Args(pub Vec<Value>);

impl Args {
    /// The argument at `index`, or `None` when it is missing or JSON `null`.
    pub fn get(&self, index: usize) -> Option<&Value> {
        self.0.get(index).filter(|v| !v.is_null())
    }

    /// An optional string argument; any other JSON type is an [`RpcError::InvalidArgument`].
    pub fn opt_str(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<&str>> {
        match self.get(index) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(method, index, param, "a string")),
        }
    }

    /// A required string argument.
    pub fn req_str(&self, method: &str, index: usize, param: &'static str) -> RpcResult<&str> {
        self.opt_str(method, index, param)?
            .ok_or_else(|| invalid(method, index, param, "a string"))
    }

    /// An optional object argument.
    pub fn opt_object(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<&Map<String, Value>>> {
        match self.get(index) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(_) => Err(invalid(method, index, param, "an object")),
        }
    }

    /// An optional non-negative integer argument (JSON numbers like `10.0` are accepted).
    pub fn opt_count(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<u64>> {
        match self.get(index) {
            None => Ok(None),
            Some(v) => as_count(v)
                .map(Some)
                .ok_or_else(|| invalid(method, index, param, "a non-negative integer")),
        }
    }

    /// An optional integer argument that may be negative (`afterSeq` can be -1).
    pub fn opt_int(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<i64>> {
        match self.get(index) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| f as i64)
                })
                .map(Some)
                .ok_or_else(|| invalid(method, index, param, "an integer")),
        }
    }
}

fn as_count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15)
            .map(|f| f as u64)
    })
}

/// Builds an [`RpcError::InvalidArgument`].
pub fn invalid(
    method: &str,
    index: usize,
    param: &'static str,
    expected: &'static str,
) -> RpcError {
    RpcError::InvalidArgument {
        method: method.to_string(),
        index,
        param,
        expected,
    }
}

/// Reads an optional string field of an options object, with the same type check as arguments.
pub fn opt_field_str<'a>(
    obj: Option<&'a Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<&'a str>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(method, index, field, "a string")),
    }
}

/// Reads an optional boolean field of an options object.
pub fn opt_field_bool(
    obj: Option<&Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<bool>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(method, index, field, "a boolean")),
    }
}

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
    let channel = serde_json::to_string(channel).expect("string serializes");
    let mut out = String::with_capacity(channel.len() + result_json.len() + 64);
    out.push_str("{\"name\":");
    out.push_str(&channel);
    out.push_str(",\"message\":{\"type\":\"invokeResult\",\"callId\":");
    out.push_str(&call_id.to_string());
    out.push_str(",\"result\":");
    out.push_str(result_json);
    out.push_str("}}");
    out
}

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

/// One conversation as listed to clients (`ConversationInfo` in the reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfo {
    /// UUIDv4, lower-case hyphenated.
    pub conversation_id: String,
    /// The name exactly as stored (untrimmed).
    pub name: String,
    /// Clients joined right now (0 when not loaded).
    pub client_count: usize,
    /// ISO-8601 with milliseconds, UTC (`new Date().toISOString()`).
    pub created_at: String,
    /// Number of `user-request` entries in the display log.
    pub message_count: u64,
    /// Present in list/find results (always 0: no content index), absent in create results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed_message_count: Option<u64>,
}

/// [`ConversationInfo`] borrowing its strings, for serializing long lists without copies.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationInfoRef<'a> {
    /// UUIDv4.
    pub conversation_id: &'a str,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_invoke_and_treats_null_as_absent() {
        let f = r#"{"name":"agent-server","message":{"type":"invoke","callId":3,"name":"listConversations","args":[null]}}"#;
        let Inbound::Invoke {
            call_id,
            method,
            args,
            ..
        } = Inbound::parse(f).unwrap()
        else {
            panic!("not an invoke")
        };
        assert_eq!((call_id, method.as_str()), (3, "listConversations"));
        assert_eq!(
            args.opt_str("listConversations", 0, "filter").unwrap(),
            None
        );
    }

    #[test]
    fn invalid_invoke_needs_a_valid_call_id() {
        let bad_args =
            r#"{"name":"x","message":{"type":"invoke","callId":1,"name":"m","args":{}}}"#;
        assert!(matches!(
            Inbound::parse(bad_args),
            Ok(Inbound::InvalidInvoke { call_id: 1, .. })
        ));
        let bad_id = r#"{"name":"x","message":{"type":"invoke","callId":-1,"name":"m","args":[]}}"#;
        assert!(Inbound::parse(bad_id).is_err());
        let huge = r#"{"name":"x","message":{"type":"invoke","callId":9007199254740992,"name":"m","args":[]}}"#;
        assert!(Inbound::parse(huge).is_err());
    }

    #[test]
    fn void_result_has_no_result_key() {
        assert_eq!(
            invoke_result("agent-server", 7, None),
            r#"{"name":"agent-server","message":{"type":"invokeResult","callId":7}}"#
        );
        let call = call_frame("clientio:a", 2, "notify", "[null]");
        let v: Value = serde_json::from_str(&call).unwrap();
        assert_eq!(v["message"]["callId"], 2);
        assert_eq!(v["message"]["args"][0], Value::Null);
    }

    #[test]
    fn unparsable_invokes_keep_their_call_id() {
        let deep = format!(
            r#"{{"name":"agent-server","message":{{"type":"invoke","callId":7,"name":"x","args":[{}1{}]}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        match Inbound::parse(&deep) {
            Ok(Inbound::Unparsable {
                channel, call_id, ..
            }) => assert_eq!((channel.as_str(), call_id), ("agent-server", 7)),
            other => panic!("{other:?}"),
        }
        let surrogate = r#"{"message":{"callId":3,"args":["\ud800"],"type":"invoke","name":"m"},"name":"dispatcher:x"}"#;
        match Inbound::parse(surrogate) {
            Ok(Inbound::Unparsable {
                channel,
                call_id,
                reason,
            }) => {
                assert_eq!((channel.as_str(), call_id), ("dispatcher:x", 3));
                assert!(reason.contains("escape"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // A call, a bad callId or an unreadable channel stay unanswered.
        for text in [
            r#"{"name":"a","message":{"type":"call","callId":1,"args":["\ud800"]}}"#,
            r#"{"name":"a","message":{"type":"invoke","callId":-1,"args":["\ud800"]}}"#,
            r#"{"name":"\ud800","message":{"type":"invoke","callId":1}}"#,
            r#"{"name":"a","message":{"type":"invoke","callId":1"#,
        ] {
            assert!(Inbound::parse(text).is_err(), "{text}");
        }
        assert_eq!(
            canonical_conversation_id("6F1C1B1E-0000-4000-8000-000000000000"),
            "6f1c1b1e-0000-4000-8000-000000000000"
        );
        assert_eq!(canonical_conversation_id("nope"), "nope");
        // Parse amplification: refused before a tree is built, still answered.
        let bomb = format!(
            r#"{{"name":"agent-server","message":{{"type":"invoke","callId":9,"name":"x","args":[{}[]]}}}}"#,
            "[],".repeat(MAX_INBOUND_VALUES)
        );
        match Inbound::parse(&bomb) {
            Ok(Inbound::Unparsable {
                call_id, reason, ..
            }) => {
                assert_eq!(call_id, 9);
                assert!(
                    reason.starts_with("more than 200000 JSON values"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(count_values(r#"{"a":[1,2],"b":"x,[{"}"#), 5);
    }

    #[test]
    fn error_texts_are_exact() {
        assert_eq!(
            RpcError::NameExists("CLI".into()).to_string(),
            "A conversation named \"CLI\" already exists. Pick a different name."
        );
        assert_eq!(
            RpcError::AlreadyJoined("x".into()).to_string(),
            "Already joined conversation 'x'. Call leaveConversation() before joining again."
        );
    }
}
