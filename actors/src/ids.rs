//! Identifiers as types, parsed once where they enter and carried typed from there on.
//!
//! A [`ConnectionId`] is handed out by a conversation when a client joins (a per-conversation
//! counter, reference section 3.2: "0", "1", …); it travels inside the actors as a number and
//! becomes the protocol's decimal string only where it is written out (join results,
//! `RequestId` objects, the request journal). The transport, the registry's join lease, the
//! conversation and the client actor all name the same client by it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    use super::ConnectionId;

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
