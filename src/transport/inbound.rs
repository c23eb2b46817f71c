//! What a socket's messages do: each text frame parsed once, its invoke or call routed by
//! channel (`agent-server`, a joined conversation's `dispatcher:<id>` or `clientio:<id>`, a
//! relayed one, a hosted agent's `agent:<name>`), with the in-flight bound and the trace
//! context of each invoke.

use actix::prelude::*;
use roundtable_actors::conversation::{
    deleted_status, DispatcherCall, DispatcherInvoke, DispatcherReply, InvokeOrigin,
};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::protocol::trace::{MetadataIgnored, RpcMetadata, TraceParent};
use roundtable_actors::protocol::{
    self, Args, Inbound, RpcError, AGENT_SERVER_CHANNEL, DISCOVERY_CHANNEL, DISPATCHER_PREFIX,
};
use roundtable_actors::registry::ConversationExists;

use super::*;

impl Connection {
    /// One complete inbound message: echoed on the echo endpoint, else parsed as one envelope
    /// and routed by its kind.
    pub(super) fn on_message(&mut self, text: &str, ctx: &mut Context<Self>) {
        Metrics::inc(&self.state.metrics.frames_in);
        if text.len() > LARGE_ANSWER {
            // Its buffers (frame, reassembly, parse) are freed by now or soon: give them back.
            roundtable_actors::memory::trim_soon();
        }
        if self.echo {
            self.send(text.to_string());
            return;
        }
        self.take_inline_joins();
        let parsed = Inbound::parse(text);
        if !self.remote.is_empty() {
            let channel = parsed.as_ref().ok().map(Inbound::channel);
            if let Some(remote) = channel.and_then(|c| self.remote_on(c)) {
                if let Ok(Inbound::Invoke {
                    channel,
                    call_id,
                    method,
                    ..
                }) = &parsed
                {
                    let mut unanswered =
                        remote.unanswered.lock().unwrap_or_else(|e| e.into_inner());
                    if unanswered.len() >= protocol::MAX_IN_FLIGHT {
                        drop(unanswered);
                        let error = RpcError::TooManyInFlight(protocol::MAX_IN_FLIGHT);
                        self.state.metrics.rpc_error(method);
                        let frame = protocol::invoke_error(channel, *call_id, &error.to_string());
                        self.send(frame);
                        return;
                    }
                    unanswered.insert((channel.clone(), *call_id), method.clone());
                }
                if !remote.publisher.text(text.to_string()) {
                    log::warn!("socket {}: relay queue full, closing", self.socket_id);
                    self.close(1013, "cluster relay overloaded");
                }
                return;
            }
        }
        match parsed {
            Err(reason) => {
                Metrics::inc(&self.state.metrics.frames_dropped);
                log::warn!("socket {}: dropped inbound frame: {reason}", self.socket_id);
            }
            Ok(Inbound::Invoke {
                channel,
                call_id,
                method,
                args,
                metadata,
            }) => {
                let trace = self.trace_of(&channel, &method, metadata);
                self.on_invoke(channel, call_id, method, args, trace, ctx)
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
            }) => self.on_call(&channel, method, args),
            Ok(Inbound::Response {
                channel,
                call_id,
                outcome,
            }) => self.on_response(channel, call_id, outcome, text, ctx),
        }
    }

    /// The trace context an invoke's `metadata` gives its request: accepted on every channel
    /// and never an error (an envelope or a part of the wrong shape is ignored, with a debug
    /// line); trusted only on `dispatcher:<id>`, as TypeAgent's server trusts it only there.
    pub(super) fn trace_of(
        &self,
        channel: &str,
        method: &str,
        metadata: Option<Result<RpcMetadata, MetadataIgnored>>,
    ) -> Option<TraceParent> {
        let metadata = match metadata? {
            Ok(m) => m,
            Err(ignored) => {
                log::debug!(
                    "socket {}: {channel} {method}: {ignored}; ignored",
                    self.socket_id
                );
                return None;
            }
        };
        if !metadata.dropped.is_empty() {
            log::debug!(
                "socket {}: {channel} {method}: metadata parts ignored: {}",
                self.socket_id,
                metadata.dropped.join("; ")
            );
        }
        if !channel.starts_with(DISPATCHER_PREFIX) {
            return None;
        }
        metadata.traceparent
    }

    /// An invoke: dropped on an unknown channel (other than `dispatcher:<id>`), refused past
    /// [`protocol::MAX_IN_FLIGHT`], dropped when its callId is already in flight, answered
    /// `Not joined` / `Conversation not found` on a dispatcher channel this socket has not
    /// joined; otherwise run.
    pub(super) fn on_invoke(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        args: Args,
        trace: Option<TraceParent>,
        ctx: &mut Context<Self>,
    ) {
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
        self.invoke(channel, call_id, method, args, trace, ctx);
    }

    /// A `call` (never answered) on a joined `dispatcher:<id>`: forwarded to the conversation,
    /// dropped when its mailbox is full; on a hosted agent's channel, the agent's call
    /// (`hosted_agents.rs`); ignored on any other channel.
    pub(super) fn on_call(&mut self, channel: &str, method: String, args: Args) {
        if self.hosts_channel(channel) {
            return self.on_agent_call(channel, &method, &args);
        }
        match self.joined_on(channel) {
            Some(joined) => {
                // Bounded: a conversation whose mailbox is full drops the call.
                let call = DispatcherCall {
                    connection_id: joined.connection_id,
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

    /// Answers an invoke on a `dispatcher:<id>` channel this socket has not joined:
    /// `Conversation not found: <id>` when it does not exist (any more), else
    /// `Not joined to conversation: <id>`. `getStatus` on a conversation that no longer
    /// exists answers an empty status instead ([`deleted_status`]): `agent-cli` asks it
    /// before every prompt, outside any `catch`, and an error there ends it (reference K.5).
    pub(super) fn not_joined(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        ctx: &mut Context<Self>,
    ) {
        let named = ConversationRef::parse(&channel[DISPATCHER_PREFIX.len()..]);
        let id = named.raw().to_string();
        let exists = self.state.registry.send(ConversationExists { id: named });
        let status = method == "getStatus";
        self.answer(ctx, channel, call_id, method, async move {
            match exists.await {
                Ok(true) => Err(RpcError::NotJoined(id)),
                Ok(false) if status => Ok(Some(deleted_status(&id))),
                Ok(false) => Err(RpcError::ConversationNotFound(id)),
                Err(e) => Err(RpcError::Internal(format!("registry unavailable: {e}"))),
            }
        });
    }

    /// `agent-server`, `discovery`, a dispatcher or clientio channel of a conversation this
    /// socket has joined, or the channel of a client agent it hosts.
    pub(super) fn channel_exists(&self, channel: &str) -> bool {
        channel == AGENT_SERVER_CHANNEL
            || channel == DISCOVERY_CHANNEL
            || self.joined_on(channel).is_some()
            || self.joined_clientio(channel)
            || self.hosts_channel(channel)
    }

    /// Whether `channel` is the `clientio:<id>` channel of a conversation this socket joined.
    pub(super) fn joined_clientio(&self, channel: &str) -> bool {
        channel
            .strip_prefix(protocol::CLIENTIO_PREFIX)
            .and_then(ConversationId::parse)
            .is_some_and(|id| self.joined.contains_key(&id))
    }

    /// The joined conversation a `dispatcher:<id>` channel names, in any id form.
    pub(super) fn joined_on(&self, channel: &str) -> Option<&JoinedConversation> {
        let id = ConversationId::parse(channel.strip_prefix(DISPATCHER_PREFIX)?)?;
        self.joined.get(&id)
    }

    /// Runs an admitted invoke: `agent-server` and `discovery` here, `dispatcher:<id>` in the
    /// joined conversation, a hosted agent's invokes to its host in `hosted_agents.rs`; on
    /// `clientio:<id>` the server handles no invoke, and answers `No invoke handler <m>` as
    /// TypeAgent's server does (its side of that channel has no invoke handlers).
    pub(super) fn invoke(
        &mut self,
        channel: String,
        call_id: u64,
        method: String,
        args: Args,
        trace: Option<TraceParent>,
        ctx: &mut Context<Self>,
    ) {
        if channel == AGENT_SERVER_CHANNEL {
            self.agent_server(call_id, method, args, ctx);
        } else if channel == DISCOVERY_CHANNEL {
            let result = agent_server::lookup_port(&method, &args, self.state.port);
            self.reply(&channel, call_id, &method, result);
        } else if let Some(joined) = self.joined_on(&channel) {
            let req = joined.conversation.send(DispatcherInvoke {
                connection_id: joined.connection_id,
                method: method.clone(),
                args,
                trace,
                in_line: Some(InvokeOrigin {
                    channel: channel.clone(),
                    call_id,
                }),
            });
            ctx.spawn(req.into_actor(self).map(move |res, act, ctx| {
                match res {
                    // Queued on this socket by the conversation, in line with its calls.
                    Ok(Ok(DispatcherReply::Sent)) => act.answered_in_line(&channel, call_id),
                    Ok(Ok(DispatcherReply::Raw(json))) => act.reply_raw(&channel, call_id, &json),
                    Ok(Ok(DispatcherReply::Value(v))) => {
                        act.reply(&channel, call_id, &method, Ok(v))
                    }
                    Ok(Err(e)) => act.reply(&channel, call_id, &method, Err(e)),
                    // The conversation stopped under this join: deleted (`Conversation not
                    // found`), or moved to another node (`Not joined` until the connection
                    // has joined it again there), as `not_joined` answers.
                    Err(_) => act.not_joined(channel, call_id, method, ctx),
                }
            }));
        } else if self.hosts_channel(&channel) {
            self.agent_context_invoke(channel, call_id, method, args, ctx);
        } else {
            let error = RpcError::NoHandler(method.clone());
            self.reply(&channel, call_id, &method, Err(error));
        }
    }
}
