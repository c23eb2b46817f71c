//! [`Audience`]: who gets an outbound call. Plain data, named by the outbound order's held
//! calls (`outbound_order.rs`) and resolved to clients by `routing.rs`.

use crate::ids::ConnectionId;

/// Who gets an outbound call.
#[derive(Clone)]
pub(super) enum Audience {
    /// Every client, except filtered clients whose connection id differs from `request_conn`.
    Broadcast(Option<ConnectionId>),
    /// Every client, ignoring `filter` (system notices).
    Everyone,
    /// Only this connection (the callback group).
    Only(ConnectionId),
}
