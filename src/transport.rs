//! The WebSocket transport: one `Connection` actor per socket. It is the only user of
//! `actix-ws`, chosen over the deprecated `actix-web-actors` for backpressure, by measurement:
//! a `WebsocketContext` actor is only polled when its socket is writable, so with a peer that
//! stops reading it stalls — it cannot run its heartbeat or close the socket — while producers'
//! `do_send`s pile up in its mailbox. A test server pushing 10 KB frames at 100 MB/s to a
//! non-reading peer grew from 5 MB to 440 MB RSS in 10 s. Here the socket writer is a separate
//! task fed by a bounded [`Outbox`]: the same non-reading peer is closed with 1008 within about
//! a second and RSS stays flat (the load harness's `slow` scenario).
//!
//! Inbound: frames are reassembled (continuations, capped at `max_frame_bytes`, close 1009
//! beyond), text is UTF-8 checked as fragments arrive (close 1007), other protocol errors close
//! with 1002 (1009 for oversize), pings are answered, and a ping goes out every
//! `ping_interval`; a peer that has not answered the previous one is dropped. Each complete
//! message is one envelope: `agent-server` and `discovery` invokes are handled here (the
//! registry does the work), `dispatcher:<id>` goes to the joined conversation.
//!
//! Outbound: everything goes through the socket's bounded [`Outbox`]; one writer task drains
//! it into the `Session`. A full outbox closes the socket as a slow consumer.
//!
//! # Implementation notes
//! States: **Open** → (**Closing**: a close frame was queued; inbound is ignored) → **Stopped**
//! when the inbound stream ends. Stopping drops every [`JoinLease`], which leaves each joined
//! conversation.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason, Item, ProtocolError};
use actix_ws::{Message, Session};
use roundtable_actors::client::{ConversationGone, Ready};
use roundtable_actors::conversation::{
    Conversation, DispatcherCall, DispatcherInvoke, DispatcherReply,
};
use roundtable_actors::frames::{Piece, Reassembled, Reassembler};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, Budget, Outbox, OutboxReceiver, Outgoing, PushError};
use roundtable_actors::protocol::{
    self, Args, Inbound, RpcError, RpcResult, AGENT_SERVER_CHANNEL, DISCOVERY_CHANNEL,
    DISPATCHER_PREFIX,
};
use roundtable_actors::registry::{
    ConversationExists, CreateConversation, DeleteConversation, FindConversations,
    JoinConversation, JoinLease, Joined, LeaveConversation, ListConversations, PanicForTest,
    RenameConversation,
};
use serde_json::{json, Value};

use crate::server::AppState;

/// Upgrades the request and starts a [`Connection`] (or the echo endpoint when `echo`).
pub fn start(
    req: &HttpRequest,
    body: web::Payload,
    state: Arc<AppState>,
    echo: bool,
) -> HttpResponse {
    let (response, session, stream) = match actix_ws::handle(req, body) {
        Ok(parts) => parts,
        Err(e) => return HttpResponse::from_error(e),
    };
    let max = state.config.max_frame_bytes;
    let stream = stream.max_frame_size(max);
    let (tx, rx) = outbox(state.config.outbox.clone());
    let inbound = state.inbound.clone();
    let socket_id = state.next_socket.fetch_add(1, Ordering::Relaxed);
    let peer = req.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let connection = Connection {
        socket_id,
        state,
        outbox: tx,
        echo,
        joined: HashMap::new(),
        in_flight: HashSet::new(),
        fragments: Reassembler::with_budget(max, inbound),
        awaiting_pong: false,
        closing: false,
    };
    log::debug!("socket {socket_id}: connected from {peer}");
    Connection::create(move |ctx| {
        ctx.add_stream(stream);
        actix::spawn(write_loop(session, rx));
        connection
    });
    response
}

/// How long a close frame may wait for a peer that does not read before TCP is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Drains the outbox into the socket, one frame at a time; returns after a close frame or when
/// the peer is gone. Dropping the session then ends the HTTP response, which closes TCP. A
/// priority close (slow consumer) interrupts a write the peer is not reading.
async fn write_loop(mut session: Session, mut rx: OutboxReceiver) {
    while let Some((item, budget)) = rx.next_with_budget().await {
        let send = async {
            match item {
                Outgoing::Text(text) => session
                    .text(budgeted_text(text, budget))
                    .await
                    .map(|()| None),
                Outgoing::Binary(bytes) => session.binary(bytes).await.map(|()| None),
                Outgoing::Ping(bytes) => session.ping(&bytes).await.map(|()| None),
                Outgoing::Pong(bytes) => session.pong(&bytes).await.map(|()| None),
                Outgoing::Close(reason) => Ok(Some(reason)),
            }
        };
        let outcome = tokio::select! {
            biased;
            sent = send => sent,
            Some(Outgoing::Close(reason)) = rx.abort_requested() => Ok(Some(reason)),
        };
        match outcome {
            Ok(None) => {}
            Ok(Some(reason)) => {
                rx.close();
                let reason = reason.map(|(code, text)| CloseReason {
                    code: CloseCode::from(code),
                    description: (!text.is_empty()).then_some(text),
                });
                // A peer that reads nothing would never take the close frame: give up on it.
                let _ = tokio::time::timeout(CLOSE_GRACE, session.close(reason)).await;
                return;
            }
            Err(_) => break,
        }
    }
    rx.close();
}

/// A text frame whose share of the socket's byte budget is released only when actix-ws has
/// encoded it for the socket and dropped it (not when it enters actix-ws's 32-frame channel),
/// so the budget bounds everything queued toward a peer.
fn budgeted_text(text: String, budget: Option<Budget>) -> bytestring::ByteString {
    struct Budgeted {
        text: String,
        _budget: Option<Budget>,
    }
    impl AsRef<[u8]> for Budgeted {
        fn as_ref(&self) -> &[u8] {
            self.text.as_bytes()
        }
    }
    let bytes = bytes::Bytes::from_owner(Budgeted {
        text,
        _budget: budget,
    });
    // SAFETY: the bytes are those of a `String`, hence valid UTF-8.
    unsafe { bytestring::ByteString::from_bytes_unchecked(bytes) }
}

/// What this socket has joined.
struct JoinedConversation {
    /// The client's connection id in the conversation.
    connection_id: String,
    /// The conversation, for dispatcher calls.
    conversation: Addr<Conversation>,
    /// Leaves on drop.
    lease: JoinLease,
}

/// One WebSocket.
pub struct Connection {
    /// Sequence number, for logs.
    socket_id: u64,
    /// Shared server state.
    state: Arc<AppState>,
    /// This socket's bounded outbound queue.
    outbox: Outbox,
    /// Conformance echo endpoint: echo every message, speak no protocol.
    echo: bool,
    /// Conversations this socket has joined, by id.
    joined: HashMap<String, JoinedConversation>,
    /// (channel, callId) of invokes being handled; a duplicate is dropped unanswered.
    in_flight: HashSet<(String, u64)>,
    /// Joins continuation frames into messages (capped at `max_frame_bytes`).
    fragments: Reassembler,
    /// A ping went out and no pong came back yet.
    awaiting_pong: bool,
    /// A close frame has been queued; everything inbound is ignored.
    closing: bool,
}

/// Answers above this size are followed by a heap trim (see `roundtable_actors::memory`).
const LARGE_ANSWER: usize = 1 << 20;

/// Close codes (RFC 6455 section 7.4.1).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_INVALID_DATA: u16 = 1007;
const CLOSE_TOO_BIG: u16 = 1009;

impl Connection {
    fn close(&mut self, code: u16, reason: &str) {
        if !self.closing {
            self.closing = true;
            log::debug!("socket {}: closing with {code} {reason}", self.socket_id);
            self.outbox.close(code, reason);
        }
    }

    fn send(&mut self, frame: String) {
        self.send_frame(Outgoing::Text(frame));
    }

    /// Queues a frame; a full queue closes the socket as a slow consumer (counted once).
    fn send_frame(&mut self, frame: Outgoing) {
        match self.outbox.push_frame(frame) {
            Ok(()) => Metrics::inc(&self.state.metrics.frames_out),
            Err(PushError::Full) if !self.closing => {
                Metrics::inc(&self.state.metrics.slow_client_closes);
                log::warn!(
                    "socket {}: outbound queue full, closing slow client",
                    self.socket_id
                );
                self.closing = true;
                self.outbox.abort(
                    roundtable_actors::client::SLOW_CONSUMER_CLOSE_CODE,
                    roundtable_actors::client::SLOW_CONSUMER_REASON,
                );
            }
            Err(_) => {}
        }
    }

    fn reply(
        &mut self,
        channel: &str,
        call_id: u64,
        method: &str,
        result: RpcResult<Option<Value>>,
    ) {
        self.in_flight.remove(&(channel.to_string(), call_id));
        let frame = match result {
            Ok(value) => protocol::invoke_result(channel, call_id, value.as_ref()),
            Err(e) => {
                self.state.metrics.rpc_error(method);
                log::debug!(
                    "socket {}: {channel} {method} #{call_id} failed: {e}",
                    self.socket_id
                );
                protocol::invoke_error(channel, call_id, &e.to_string())
            }
        };
        self.send(frame);
    }

    /// Answers with ready-made JSON text as the `result` (large answers are serialized once).
    fn reply_raw(&mut self, channel: &str, call_id: u64, result_json: &str) {
        self.in_flight.remove(&(channel.to_string(), call_id));
        self.send(protocol::invoke_result_raw(channel, call_id, result_json));
        if result_json.len() > LARGE_ANSWER {
            roundtable_actors::memory::trim_soon();
        }
    }

    /// Runs `work` and answers the invoke with its result.
    fn answer<F>(
        &mut self,
        ctx: &mut Context<Self>,
        channel: String,
        call_id: u64,
        method: String,
        work: F,
    ) where
        F: std::future::Future<Output = RpcResult<Option<Value>>> + 'static,
    {
        ctx.spawn(
            work.into_actor(self)
                .map(move |res, act, _| act.reply(&channel, call_id, &method, res)),
        );
    }

    fn on_message(&mut self, text: &str, ctx: &mut Context<Self>) {
        Metrics::inc(&self.state.metrics.frames_in);
        if text.len() > LARGE_ANSWER {
            // Its buffers (frame, reassembly, parse) are freed by now or soon: give them back.
            roundtable_actors::memory::trim_soon();
        }
        if self.echo {
            self.send(text.to_string());
            return;
        }
        match Inbound::parse(text) {
            Err(reason) => {
                Metrics::inc(&self.state.metrics.frames_dropped);
                log::warn!("socket {}: dropped inbound frame: {reason}", self.socket_id);
            }
            Ok(Inbound::Invoke {
                channel,
                call_id,
                method,
                args,
            }) => {
                let dispatcher = channel.starts_with(DISPATCHER_PREFIX);
                if !dispatcher && !self.channel_exists(&channel) {
                    log::debug!(
                        "socket {}: invoke {method} on unknown channel {channel} dropped",
                        self.socket_id
                    );
                    return;
                }
                if self.in_flight.len() >= protocol::MAX_IN_FLIGHT {
                    let error = RpcError::TooManyInFlight(protocol::MAX_IN_FLIGHT);
                    // Not in `in_flight`: answered here, without running it.
                    self.state.metrics.rpc_error(&method);
                    self.send(protocol::invoke_error(
                        &channel,
                        call_id,
                        &error.to_string(),
                    ));
                    return;
                }
                if !self.in_flight.insert((channel.clone(), call_id)) {
                    log::debug!(
                        "socket {}: duplicate in-flight callId {call_id} on {channel} dropped",
                        self.socket_id
                    );
                    return;
                }
                if dispatcher && !self.channel_exists(&channel) {
                    self.not_joined(channel, call_id, method, ctx);
                    return;
                }
                self.invoke(channel, call_id, method, args, ctx);
            }
            Ok(Inbound::InvalidInvoke { channel, call_id }) => {
                if self.channel_exists(&channel) || channel.starts_with(DISPATCHER_PREFIX) {
                    self.reply(&channel, call_id, "(invalid)", Err(RpcError::InvalidInvoke));
                }
            }
            Ok(Inbound::Unparsable {
                channel,
                call_id,
                reason,
            }) => {
                Metrics::inc(&self.state.metrics.frames_dropped);
                log::debug!(
                    "socket {}: unparsable invoke #{call_id} on {channel}: {reason}",
                    self.socket_id
                );
                if self.channel_exists(&channel) || channel.starts_with(DISPATCHER_PREFIX) {
                    self.reply(
                        &channel,
                        call_id,
                        "(invalid)",
                        Err(RpcError::Unparsable(reason)),
                    );
                }
            }
            Ok(Inbound::Call {
                channel,
                method,
                args,
            }) => {
                match self.joined_on(&channel) {
                    Some(joined) => {
                        // Bounded: a conversation whose mailbox is full drops the call.
                        let call = DispatcherCall {
                            connection_id: joined.connection_id.clone(),
                            method,
                            args,
                        };
                        if joined.conversation.try_send(call).is_err() {
                            log::warn!(
                                "socket {}: conversation busy, call on {channel} dropped",
                                self.socket_id
                            );
                        }
                    }
                    None => log::debug!(
                        "socket {}: call {method} on {channel} ignored",
                        self.socket_id
                    ),
                }
            }
            Ok(Inbound::Response { channel }) => {
                log::debug!(
                    "socket {}: response on {channel} to no request, dropped",
                    self.socket_id
                );
            }
        }
    }

    /// Answers an invoke on a `dispatcher:<id>` channel this socket has not joined:
    /// `Conversation not found: <id>` when it does not exist (any more), else
    /// `Not joined to conversation: <id>`.
    fn not_joined(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        ctx: &mut Context<Self>,
    ) {
        let id = channel[DISPATCHER_PREFIX.len()..].to_string();
        let exists = self
            .state
            .registry
            .send(ConversationExists { id: id.clone() });
        self.answer(ctx, channel, call_id, method, async move {
            match exists.await {
                Ok(true) => Err(RpcError::NotJoined(id)),
                Ok(false) => Err(RpcError::ConversationNotFound(id)),
                Err(e) => Err(RpcError::Internal(format!("registry unavailable: {e}"))),
            }
        });
    }

    fn channel_exists(&self, channel: &str) -> bool {
        channel == AGENT_SERVER_CHANNEL
            || channel == DISCOVERY_CHANNEL
            || self.joined_on(channel).is_some()
    }

    /// The joined conversation a `dispatcher:<id>` channel names, in any id form.
    fn joined_on(&self, channel: &str) -> Option<&JoinedConversation> {
        let id = channel.strip_prefix(DISPATCHER_PREFIX)?;
        self.joined
            .get(protocol::canonical_conversation_id(id).as_ref())
    }

    fn invoke(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        args: Args,
        ctx: &mut Context<Self>,
    ) {
        if channel == AGENT_SERVER_CHANNEL {
            self.agent_server(call_id, method, args, ctx);
        } else if channel == DISCOVERY_CHANNEL {
            let result = lookup_port(&method, &args, self.state.port);
            self.reply(&channel, call_id, &method, result);
        } else if let Some(joined) = self.joined_on(&channel) {
            let req = joined.conversation.send(DispatcherInvoke {
                connection_id: joined.connection_id.clone(),
                method: method.clone(),
                args,
            });
            ctx.spawn(req.into_actor(self).map(move |res, act, _| {
                let res = res.unwrap_or_else(|_| {
                    Err(RpcError::ConversationNotFound(
                        channel[DISPATCHER_PREFIX.len()..].to_string(),
                    ))
                });
                match res {
                    Ok(DispatcherReply::Raw(json)) => act.reply_raw(&channel, call_id, &json),
                    Ok(DispatcherReply::Value(v)) => act.reply(&channel, call_id, &method, Ok(v)),
                    Err(e) => act.reply(&channel, call_id, &method, Err(e)),
                }
            }));
        }
    }

    fn agent_server(&mut self, call_id: u64, method: String, args: Args, ctx: &mut Context<Self>) {
        let ch = AGENT_SERVER_CHANNEL.to_string();
        let registry = self.state.registry.clone();
        let m = method.as_str();
        let lost = |e: MailboxError| RpcError::Internal(format!("registry unavailable: {e}"));
        match m {
            "joinConversation" => self.join(call_id, args, ctx),
            "leaveConversation" => {
                let id = match args.req_str(m, 0, "conversationId") {
                    Ok(id) => protocol::canonical_conversation_id(id).into_owned(),
                    Err(e) => return self.reply(&ch, call_id, m, Err(e)),
                };
                let Some(joined) = self.joined.remove(&id) else {
                    return self.reply(&ch, call_id, m, Err(RpcError::NotJoined(id)));
                };
                joined.lease.disarm();
                let req = registry.send(LeaveConversation {
                    conversation_id: id,
                    connection_id: joined.connection_id,
                });
                // The registry answers with a future awaited here, on this socket's thread.
                self.answer(ctx, ch, call_id, method, async move {
                    req.await.map_err(lost)?.await.map(|()| None)
                });
            }
            "createConversation" => {
                let parsed = (|| {
                    let name = args.opt_str(m, 0, "name")?.unwrap_or_default().to_string();
                    let options = args.opt_object(m, 1, "options")?;
                    let collision =
                        protocol::opt_field_str(options, m, 1, "nameCollisionBehavior")?;
                    Ok(CreateConversation {
                        name,
                        collision: collision.map(str::to_string),
                    })
                })();
                match parsed {
                    Ok(msg) => {
                        let req = registry.send(msg);
                        self.answer(ctx, ch, call_id, method, async move {
                            let info = req.await.map_err(lost)??;
                            Ok(Some(serde_json::to_value(info).expect("info serializes")))
                        });
                    }
                    Err(e) => self.reply(&ch, call_id, m, Err(e)),
                }
            }
            "listConversations" => match args.opt_str(m, 0, "filter") {
                Ok(filter) => {
                    let req = registry.send(ListConversations {
                        filter: filter.map(str::to_string),
                    });
                    // Serialized straight to text: a 100,000-entry list is one big frame.
                    ctx.spawn(req.into_actor(self).map(move |res, act, _| match res {
                        Ok(json) => act.reply_raw(&ch, call_id, &json),
                        Err(e) => act.reply(&ch, call_id, &method, Err(lost(e))),
                    }));
                }
                Err(e) => self.reply(&ch, call_id, m, Err(e)),
            },
            "renameConversation" => {
                let parsed = (|| {
                    let id = args.req_str(m, 0, "conversationId")?.to_string();
                    let new_name = args
                        .opt_str(m, 1, "newName")?
                        .unwrap_or_default()
                        .to_string();
                    let options = args.opt_object(m, 2, "options")?;
                    let collision =
                        protocol::opt_field_str(options, m, 2, "nameCollisionBehavior")?;
                    Ok(RenameConversation {
                        id,
                        new_name,
                        collision: collision.map(str::to_string),
                    })
                })();
                match parsed {
                    Ok(msg) => {
                        let req = registry.send(msg);
                        self.answer(ctx, ch, call_id, method, async move {
                            req.await.map_err(lost)?.map(|()| None)
                        });
                    }
                    Err(e) => self.reply(&ch, call_id, m, Err(e)),
                }
            }
            "deleteConversation" => match args.req_str(m, 0, "conversationId") {
                Ok(id) => {
                    let req = registry.send(DeleteConversation { id: id.to_string() });
                    self.answer(ctx, ch, call_id, method, async move {
                        req.await.map_err(lost)?.map(|()| None)
                    });
                }
                Err(e) => self.reply(&ch, call_id, m, Err(e)),
            },
            "findConversations" | "searchConversationContent" => {
                let parsed = (|| {
                    let query = args.opt_str(m, 0, "query")?.unwrap_or_default().to_string();
                    let max_matches = args.opt_count(m, 1, "maxMatches")?;
                    Ok((query, max_matches))
                })();
                match parsed {
                    // No content index yet: content search finds nothing, as a lexical-only
                    // TypeAgent server does.
                    Ok(_) if m == "searchConversationContent" => {
                        self.reply(&ch, call_id, m, Ok(Some(json!([]))))
                    }
                    Ok((query, max_matches)) => {
                        let req = registry.send(FindConversations { query, max_matches });
                        self.answer(ctx, ch, call_id, method, async move {
                            Ok(Some(
                                serde_json::to_value(req.await.map_err(lost)?)
                                    .expect("matches serialize"),
                            ))
                        });
                    }
                    Err(e) => self.reply(&ch, call_id, m, Err(e)),
                }
            }
            "getUserIdentity" => self.reply(&ch, call_id, m, Ok(Some(user_identity()))),
            "testPanic" if roundtable_actors::faults::test_panic_enabled() => {
                log::warn!("socket {}: testPanic requested", self.socket_id);
                registry.do_send(PanicForTest);
            }
            "shutdown" => {
                log::info!("socket {}: shutdown requested", self.socket_id);
                self.reply(&ch, call_id, m, Ok(None));
                let _ = self.state.stop.send(true);
            }
            _ => self.reply(&ch, call_id, m, Err(RpcError::NoHandler(method.clone()))),
        }
    }

    fn join(&mut self, call_id: u64, args: Args, ctx: &mut Context<Self>) {
        let m = "joinConversation";
        let ch = AGENT_SERVER_CHANNEL;
        let parsed = (|| {
            let options = args.opt_object(m, 0, "options")?;
            let conversation_id =
                protocol::opt_field_str(options, m, 0, "conversationId")?.map(str::to_string);
            let filter = protocol::opt_field_bool(options, m, 0, "filter")?.unwrap_or(false);
            protocol::opt_field_str(options, m, 0, "clientType")?;
            Ok((conversation_id, filter))
        })();
        let (conversation_id, filter) = match parsed {
            Ok(p) => p,
            Err(e) => return self.reply(ch, call_id, m, Err(e)),
        };
        let req = self.state.registry.send(JoinConversation {
            conversation_id,
            filter,
            already_joined: self.joined.keys().cloned().collect(),
            outbox: self.outbox.clone(),
            connection: ctx.address().recipient(),
        });
        // The registry answers with a future awaited here, on this socket's thread.
        let joining = async move {
            match req.await {
                Ok(pending) => pending.await,
                Err(e) => Err(RpcError::Internal(e.to_string())),
            }
        };
        ctx.spawn(joining.into_actor(self).map(move |joined, act, _| {
            let joined: RpcResult<Joined> = joined;
            match joined {
                Err(e) => act.reply(ch, call_id, m, Err(e)),
                Ok(joined) if act.joined.contains_key(&joined.conversation_id) => {
                    // A concurrent duplicate join finished first; this one undoes itself (its
                    // lease leaves on drop).
                    let channel = protocol::clientio_channel(&joined.conversation_id);
                    act.reply(ch, call_id, m, Err(RpcError::ChannelExists(channel)));
                }
                Ok(Joined {
                    conversation_id,
                    result,
                    connection_id,
                    client,
                    conversation,
                    lease,
                }) => {
                    log::debug!(
                        "socket {}: joined conversation {conversation_id} as connection {connection_id}",
                        act.socket_id
                    );
                    act.joined.insert(
                        conversation_id,
                        JoinedConversation {
                            connection_id,
                            conversation,
                            lease,
                        },
                    );
                    // The result is queued before the client may send anything on clientio.
                    act.reply(ch, call_id, m, Ok(Some(result)));
                    client.do_send(Ready);
                }
            }
        }));
    }

    fn protocol_error(&mut self, err: ProtocolError) {
        let (code, reason) = match &err {
            ProtocolError::Overflow => (CLOSE_TOO_BIG, "message too big"),
            // A text frame that is not UTF-8. (Reserved bits also arrive as InvalidData, but
            // they are a protocol error: 1002.)
            ProtocolError::Io(e)
                if e.kind() == std::io::ErrorKind::InvalidData
                    && e.to_string().to_lowercase().contains("utf-8") =>
            {
                (CLOSE_INVALID_DATA, "invalid UTF-8")
            }
            _ => (CLOSE_PROTOCOL_ERROR, "protocol error"),
        };
        log::debug!("socket {}: {err}", self.socket_id);
        self.close(code, reason);
    }

    fn fragment(&mut self, item: Item, ctx: &mut Context<Self>) {
        let (piece, bytes) = match item {
            Item::FirstText(b) => (Piece::FirstText, b),
            Item::FirstBinary(b) => (Piece::FirstBinary, b),
            Item::Continue(b) => (Piece::Continue, b),
            Item::Last(b) => (Piece::Last, b),
        };
        match self.fragments.push(piece, &bytes) {
            Ok(Reassembled::Pending) => {}
            Ok(Reassembled::Text(text)) => self.on_message(&text, ctx),
            Ok(Reassembled::Binary(bytes)) => self.on_binary(bytes, ctx),
            Err(e) => self.close(e.close_code(), e.reason()),
        }
    }

    fn on_binary(&mut self, bytes: Vec<u8>, ctx: &mut Context<Self>) {
        if self.echo {
            Metrics::inc(&self.state.metrics.frames_in);
            self.send_frame(Outgoing::Binary(bytes));
            return;
        }
        // TypeAgent's server accepts binary frames carrying UTF-8 JSON.
        match String::from_utf8(bytes) {
            Ok(text) => self.on_message(&text, ctx),
            Err(_) => {
                Metrics::inc(&self.state.metrics.frames_dropped);
                log::warn!(
                    "socket {}: dropped a binary frame that is not UTF-8",
                    self.socket_id
                );
            }
        }
    }
}

impl Actor for Connection {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        Metrics::add(&self.state.metrics.sockets, 1);
        ctx.run_interval(self.state.config.ping_interval, |act, ctx| {
            if act.closing {
                return;
            }
            if act.awaiting_pong {
                log::info!(
                    "socket {}: no pong to the previous ping, dropping",
                    act.socket_id
                );
                // Abort, not a polite close behind what is queued: the peer reads nothing.
                act.closing = true;
                act.outbox.abort(CLOSE_GOING_AWAY, "ping timeout");
                ctx.stop();
                return;
            }
            act.awaiting_pong = true;
            let _ = act.outbox.push_frame(Outgoing::Ping(Vec::new()));
        });
        // Graceful shutdown: close with 1001.
        let mut closing = self.state.closing.clone();
        ctx.spawn(
            async move {
                while !*closing.borrow_and_update() {
                    if closing.changed().await.is_err() {
                        return false;
                    }
                }
                true
            }
            .into_actor(self)
            .map(|stop, act, _| {
                if stop {
                    act.close(CLOSE_GOING_AWAY, "server shutting down");
                }
            }),
        );
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        Metrics::add(&self.state.metrics.sockets, -1);
        // Dropping the leases leaves every joined conversation.
        let n = self.joined.len();
        self.joined.clear();
        // The writer task ends with the connection: a close already queued (the peer's close,
        // echoed) goes out; otherwise what is still queued is dropped ahead of it.
        if !self.closing {
            self.outbox.abort(CLOSE_GOING_AWAY, "");
        }
        log::debug!("socket {}: closed (left {n} conversations)", self.socket_id);
    }
}

impl StreamHandler<Result<Message, ProtocolError>> for Connection {
    fn handle(&mut self, item: Result<Message, ProtocolError>, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        match item {
            Err(e) => self.protocol_error(e),
            Ok(Message::Text(_) | Message::Binary(_)) if self.fragments.in_progress() => {
                self.close(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
            }
            Ok(Message::Text(text)) => self.on_message(&text, ctx),
            Ok(Message::Binary(bytes)) => self.on_binary(bytes.to_vec(), ctx),
            Ok(Message::Continuation(item)) => self.fragment(item, ctx),
            Ok(Message::Ping(bytes)) => {
                let _ = self.outbox.push_frame(Outgoing::Pong(bytes.to_vec()));
            }
            Ok(Message::Pong(_)) => self.awaiting_pong = false,
            Ok(Message::Close(reason)) => {
                self.closing = true;
                match reason {
                    Some(r) => self
                        .outbox
                        .close(r.code.into(), r.description.unwrap_or_default()),
                    None => self.outbox.close_empty(),
                }
            }
            Ok(Message::Nop) => {}
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<ConversationGone> for Connection {
    type Result = ();

    fn handle(&mut self, msg: ConversationGone, _ctx: &mut Self::Context) {
        if let Some(joined) = self.joined.remove(&msg.conversation_id) {
            joined.lease.disarm();
            log::info!(
                "socket {}: conversation {} is gone; its channels are closed",
                self.socket_id,
                msg.conversation_id
            );
        }
    }
}

fn lookup_port(method: &str, args: &Args, port: u16) -> RpcResult<Option<Value>> {
    if method != "lookupPort" {
        return Err(RpcError::NoHandler(method.to_string()));
    }
    let options = args.opt_object(method, 0, "options")?;
    let agent = protocol::opt_field_str(options, method, 0, "agentName")?;
    Ok(Some(if agent == Some("agent-server") {
        json!({"port": port, "url": format!("ws://localhost:{port}")})
    } else {
        json!({"port": null})
    }))
}

fn user_identity() -> Value {
    let username = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "user".to_string());
    let initial = username
        .chars()
        .next()
        .map(|c| c.to_uppercase().next().unwrap_or(c))
        .unwrap_or('U');
    json!({"username": username, "displayName": username, "initial": initial.to_string()})
}
