//! Identifiers as types, parsed once where they enter and carried typed from there on.
//!
//! A [`ConnectionId`] is handed out by a conversation when a client joins (a per-conversation
//! counter, reference section 3.2: "0", "1", …); it travels inside the actors as a number and
//! becomes the protocol's decimal string only where it is written out (join results,
//! `RequestId` objects, the request journal). The transport, the registry's join lease, the
//! conversation and the client actor all name the same client by it.
//!
//! A [`ConversationId`] is a UUID: the transport parses what the client sent (any form the
//! `uuid` crate reads: upper case, braces, `urn:uuid:`, no hyphens) into a
//! [`ConversationRef`], which keeps the client's own text for error messages (the reference's
//! `Conversation not found: <id>` echoes what was sent). From the registry inward only the
//! typed id travels; it is written in its canonical lower-case hyphenated form.
//!
//! A [`RequestId`] names one submitted request: a UUID the conversation hands out, or the
//! client's own text when `submitCommand` names one. It is opaque text, typed so it cannot be
//! mixed up with the other ids a conversation carries (interaction and choice ids).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// One conversation, for as long as it exists (its directory is `conversations/<id>/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationId(Uuid);

impl ConversationId {
    /// A fresh random (v4) id, for a conversation being created.
    pub fn new_random() -> Self {
        ConversationId(Uuid::new_v4())
    }

    /// The id in any form the `uuid` crate reads; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Self> {
        Uuid::parse_str(raw).ok().map(ConversationId)
    }

    /// The UUID itself.
    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

/// The canonical form: lower case, hyphenated (what `joinConversation` answers).
impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

/// Written as its canonical string.
impl Serialize for ConversationId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reads any UUID form; anything else is an error quoting it.
impl<'de> Deserialize<'de> for ConversationId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        ConversationId::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("conversation id is not a UUID: {text:?}"))
        })
    }
}

/// A conversation named by a client: parsed once where it enters, with the client's own text
/// kept because errors quote it (`Conversation not found: <what was sent>`). A text that is
/// not a UUID names no conversation; the registry answers it as not found, in the same order
/// of checks as for an unknown UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationRef {
    /// Exactly what the client sent.
    raw: String,
    /// The parsed id, when `raw` is a UUID.
    id: Option<ConversationId>,
}

impl ConversationRef {
    /// Parses the client's text.
    pub fn parse(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let id = ConversationId::parse(&raw);
        ConversationRef { raw, id }
    }

    /// The id it names, if it is a UUID.
    pub fn id(&self) -> Option<ConversationId> {
        self.id
    }

    /// The client's text, for error messages.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The client's text, for an error that takes ownership.
    pub fn into_raw(self) -> String {
        self.raw
    }
}

/// The server-side id of one submitted request (`RequestId.requestId` on the wire, the key of
/// the request journal). Opaque text: a UUID the conversation generates, or the client's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

impl RequestId {
    /// A fresh random id, for a request whose client named none.
    pub fn new_random() -> Self {
        RequestId(Uuid::new_v4().to_string())
    }

    /// The text as sent or generated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for RequestId {
    fn from(text: &str) -> Self {
        RequestId(text.to_string())
    }
}

impl From<String> for RequestId {
    fn from(text: String) -> Self {
        RequestId(text)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One joined client within its conversation. Unique per loaded conversation only: another
/// conversation (or this one after eviction and reload) hands out the same numbers again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for ConnectionId {
    type Err = std::num::ParseIntError;

    /// The protocol's decimal string (what clients echo back in `RequestId.connectionId`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(ConnectionId)
    }
}

/// On the wire and on disk a connection id is a decimal *string* (`"connectionId":"0"`).
impl Serialize for ConnectionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reads the decimal string written by [`Serialize`]; anything else is an error naming it.
impl<'de> Deserialize<'de> for ConnectionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        text.parse().map_err(|_| {
            serde::de::Error::custom(format!("connection id is not a decimal number: {text:?}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectionId, ConversationId, ConversationRef, RequestId};

    /// Every UUID form names the same conversation, written back in the canonical form; other
    /// text keeps what the client sent for the error message.
    #[test]
    fn conversation_ids_parse_every_uuid_form_once() {
        let canonical = "6f1c1b1e-0000-4000-8000-000000000000";
        for form in [
            canonical,
            "6F1C1B1E-0000-4000-8000-000000000000",
            "{6f1c1b1e-0000-4000-8000-000000000000}",
            "urn:uuid:6f1c1b1e-0000-4000-8000-000000000000",
            "6f1c1b1e000040008000000000000000",
        ] {
            let r = ConversationRef::parse(form);
            assert_eq!(r.id().map(|id| id.to_string()).as_deref(), Some(canonical));
            assert_eq!(r.raw(), form);
        }
        let nope = ConversationRef::parse("../etc");
        assert_eq!(nope.id(), None);
        assert_eq!(nope.into_raw(), "../etc");
        let id = ConversationId::parse(canonical).unwrap();
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            format!("\"{canonical}\"")
        );
        let back: ConversationId = serde_json::from_str(&format!("\"{canonical}\"")).unwrap();
        assert_eq!(back, id);
        let err = serde_json::from_str::<ConversationId>(r#""x""#).unwrap_err();
        assert!(err.to_string().contains("\"x\""), "{err}");
        assert_ne!(ConversationId::new_random(), ConversationId::new_random());
    }

    /// A request id is the text itself on the wire, whatever the client chose.
    #[test]
    fn request_id_is_transparent_text() {
        let id = RequestId::from("my-own id");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""my-own id""#);
        assert_eq!(id.to_string(), "my-own id");
        assert_eq!(RequestId::new_random().as_str().len(), 36);
    }

    /// The id is a string on the wire, exactly as TypeAgent's dispatcher writes it, and reads
    /// back; a non-number is refused with a message that quotes it.
    #[test]
    fn connection_id_is_a_decimal_string_on_the_wire() {
        let json = serde_json::to_string(&ConnectionId(17)).unwrap();
        assert_eq!(json, r#""17""#);
        let back: ConnectionId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ConnectionId(17));
        let err = serde_json::from_str::<ConnectionId>(r#""x1""#).unwrap_err();
        assert!(err.to_string().contains("\"x1\""), "{err}");
        assert!(serde_json::from_str::<ConnectionId>("17").is_err());
    }
}
