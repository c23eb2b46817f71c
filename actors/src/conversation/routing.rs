//! Who gets an outbound call: the `Audience` of each call, `emit` (now, or held behind an
//! unconfirmed write barrier), `deliver` to the client actors, and the system notices (join,
//! leave, deleted). Every other part of the conversation sends through here.

use std::sync::{Arc, LazyLock};

use serde_json::{json, Value};

use super::audience::Audience;
use super::outbound_order::Emitted;
use super::request_queue::Request;
use super::ClientSlot;
use super::{Conversation, AGENT_SOURCE};
use crate::client::{GiveUp, OutboundCall, Sent, SocketGone};
use crate::ids::ConnectionId;
use crate::ids::ConversationId;
use crate::outbox::Wakes;
use crate::protocol::plain_text;

/// Text shown to the others when a client joins.
pub const JOIN_NOTICE: &str = "[A new client has joined this conversation.]";
/// Text shown to the others when a client leaves.
pub const LEAVE_NOTICE: &str = "[A client has left this conversation.]";
/// Text shown to every client when the conversation is deleted under it.
pub const DELETED_NOTICE: &str = "[This conversation was deleted.]";
/// Text shown to every client of a node that lost the conversation to another node
/// (`serve --cluster`): its channels close after it, and joining again reaches the new owner.
pub const MOVED_NOTICE: &str =
    "[This conversation moved to another server node. Join it again to continue.]";

/// How a client shows an `appendDisplay` (TypeAgent's `DisplayAppendMode`); spelled on the wire
/// and in the display log as [`as_str`](DisplayMode::as_str) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisplayMode {
    /// `"inline"`: continues the current line.
    Inline,
    /// `"block"`: a block of its own (everything the server sends today).
    Block,
    /// `"temporary"`: a status that the next display replaces; never logged.
    Temporary,
    /// `"step"`: starts a new, distinct message container (TypeAgent's reasoning shows each
    /// phase so); logged like a block.
    Step,
}

impl DisplayMode {
    /// The protocol's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DisplayMode::Inline => "inline",
            DisplayMode::Block => "block",
            DisplayMode::Temporary => "temporary",
            DisplayMode::Step => "step",
        }
    }

    /// The mode the protocol spells `s`, if it is one of TypeAgent's `DisplayAppendMode`s.
    pub fn parse(s: &str) -> Option<DisplayMode> {
        match s {
            "inline" => Some(DisplayMode::Inline),
            "block" => Some(DisplayMode::Block),
            "temporary" => Some(DisplayMode::Temporary),
            "step" => Some(DisplayMode::Step),
            _ => None,
        }
    }
}

impl Conversation {
    /// A `system` status line for every client (not logged).
    fn system_notice(text: &str) -> Arc<OutboundCall> {
        OutboundCall::new(
            "appendDisplay",
            &json!([{
                "message": {"type": "text", "content": text, "kind": "status"},
                "requestId": {"requestId": "system"},
                "source": "system"
            }, DisplayMode::Block.as_str()]),
        )
    }

    /// The join notice, built once per process (every join sends it).
    pub(super) fn join_notice() -> Arc<OutboundCall> {
        static NOTICE: LazyLock<Arc<OutboundCall>> =
            LazyLock::new(|| Conversation::system_notice(JOIN_NOTICE));
        NOTICE.clone()
    }

    /// The two `statusNotice` dismissals TypeAgent's server sends a joining client (reference
    /// section 4.2, join step 8: `stale-build`, then `config-drift`, each `dismiss: true`), so
    /// its clients clear banners left by an earlier server. Built once per process.
    pub(super) fn status_dismissals() -> [Arc<OutboundCall>; 2] {
        static NOTICES: LazyLock<[Arc<OutboundCall>; 2]> = LazyLock::new(|| {
            ["stale-build", "config-drift"].map(|id| {
                OutboundCall::new(
                    "notify",
                    &json!([null, "statusNotice", {"id": id, "dismiss": true}, "agent-server"]),
                )
            })
        });
        NOTICES.clone()
    }

    /// The leave notice, built once per process (every leave sends it).
    pub(super) fn leave_notice() -> Arc<OutboundCall> {
        static NOTICE: LazyLock<Arc<OutboundCall>> =
            LazyLock::new(|| Conversation::system_notice(LEAVE_NOTICE));
        NOTICE.clone()
    }

    /// The notice a client gets when its node lost the conversation to another node and its
    /// connection could not join it again there (its channels are closed by then, as for a
    /// delete, but nothing is deleted: no `conversationDeleted`). Sent by the transport, on
    /// `clientio:<id>`; built once per process.
    pub fn moved_notice() -> Arc<OutboundCall> {
        static NOTICE: LazyLock<Arc<OutboundCall>> =
            LazyLock::new(|| Conversation::system_notice(MOVED_NOTICE));
        NOTICE.clone()
    }

    /// Tells every client that the conversation was deleted under it (notice, then
    /// `conversationDeleted`).
    pub(super) fn announce_deleted(&mut self) {
        for notice in Self::deleted_notices(self.setup.id) {
            self.emit(notice, &Audience::Everyone);
        }
    }

    /// What a client of a deleted conversation is told on `clientio:<id>`, in order: the
    /// delete notice, then `conversationDeleted`. The transport sends them too, to a client
    /// whose conversation moved off its node and was deleted before it could follow.
    pub fn deleted_notices(id: ConversationId) -> [Arc<OutboundCall>; 2] {
        [
            Self::system_notice(DELETED_NOTICE),
            OutboundCall::new(
                "notify",
                &json!([null, "conversationDeleted", {"conversationId": id}, "agent-server"]),
            ),
        ]
    }

    /// Hands a call to the clients in `audience`, now or, behind an unconfirmed write barrier,
    /// when the barrier is confirmed (see "Acknowledged means durable").
    pub(super) fn emit(&mut self, call: Arc<OutboundCall>, audience: &Audience) {
        let emitted = Emitted {
            call,
            audience: audience.clone(),
            joined_below: self.next_connection_id,
        };
        if let Some(now) = self.outbound.emit(emitted) {
            self.deliver(std::slice::from_ref(&now));
        }
    }

    /// Delivers calls, in order, each to the clients in its audience that joined below its
    /// `joined_below`: client by client, its writer woken once after its last one, so a
    /// client's share of a burst (what an fsync released) is one write, and the first client
    /// is not kept waiting while the burst's first call goes to every other. A client whose
    /// mailbox is full is told to give up (it closes its socket as a slow consumer and leaves
    /// with `ClientLost`).
    pub(super) fn deliver(&mut self, calls: &[Emitted]) {
        let Some(below) = calls.iter().map(|c| c.joined_below).max() else {
            return;
        };
        for (id, slot) in self.clients.range_mut(..ConnectionId(below)) {
            let mut wakes = Wakes::default();
            for emitted in calls {
                if slot.lost {
                    break;
                }
                if id.0 >= emitted.joined_below {
                    continue;
                }
                let wanted = match &emitted.audience {
                    Audience::Everyone => true,
                    Audience::Broadcast(conn) => !slot.filter || *conn == Some(*id),
                    Audience::Only(conn) => conn == id,
                };
                if wanted {
                    let sent = slot.output.send_later(&emitted.call, &mut wakes);
                    settle(self.setup.id, *id, slot, sent);
                }
            }
        }
    }

    /// Emits `method(args)` to every client (filtered clients: only for their own request).
    pub(super) fn broadcast(
        &mut self,
        method: &'static str,
        args: Value,
        request_conn: Option<ConnectionId>,
    ) {
        self.emit(
            OutboundCall::new(method, &args),
            &Audience::Broadcast(request_conn),
        );
    }

    /// `appendDisplay` for a request: logged (unless temporary) and broadcast. Markdown gains
    /// its plain-text alternate ([`plain_text`]), which TypeAgent's console prints instead of
    /// raw marks.
    pub(super) fn display(
        &mut self,
        request: &Request,
        content: Value,
        extra: Option<Value>,
        mode: DisplayMode,
    ) {
        let message = self.log_display(request, content, extra, mode);
        self.broadcast(
            "appendDisplay",
            json!([message, mode.as_str()]),
            Some(request.origin),
        );
    }

    /// The `IAgentMessage` of a display of `request`, logged (unless temporary) and not sent:
    /// what [`display`](Self::display) sends, and what a streamed answer's whole text is
    /// (its clients have its pieces).
    pub(super) fn log_display(
        &mut self,
        request: &Request,
        content: Value,
        extra: Option<Value>,
        mode: DisplayMode,
    ) -> Value {
        let content = plain_text::with_text_alternate(content);
        let mut message =
            json!({"message": content, "requestId": request.id_obj(), "source": AGENT_SOURCE});
        if let Some(Value::Object(extra)) = extra {
            message.as_object_mut().expect("object").extend(extra);
        }
        if mode != DisplayMode::Temporary {
            self.log_entry(
                json!({"type": "append-display", "message": message, "mode": mode.as_str()}),
            );
        }
        message
    }
}

/// Acts on what became of a frame for one client: a slow consumer's socket is closed (1008)
/// and its actor told to give up, a gone socket's actor told to leave; either way the client
/// gets nothing more and leaves with `ClientLost`.
pub(super) fn settle(
    conversation: ConversationId,
    connection_id: ConnectionId,
    slot: &mut ClientSlot,
    sent: Sent,
) {
    match sent {
        Sent::Queued | Sent::Held => {}
        Sent::SlowConsumer => {
            log::debug!(
                "conversation {conversation} connection {connection_id}: outbound queue full"
            );
            slot.lost = true;
            slot.output.abort_slow();
            slot.addr.do_send(GiveUp);
        }
        Sent::SocketGone => {
            slot.lost = true;
            slot.addr.do_send(SocketGone);
        }
    }
}
