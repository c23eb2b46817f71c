//! The `agent-server` and `discovery` channels of one [`Connection`]: each invoke is parsed
//! once from (method, args) into an [`AgentServerRequest`] — argument errors carry the exact
//! texts of `roundtable_actors::protocol` — and then run by one function per method. The
//! registry does the work (the joined conversation, for client agents: see
//! `hosted_agents.rs`); this side only forwards, awaits on the socket's own thread and
//! answers through [`Connection::reply`]. The macro methods, which need no conversation,
//! are answered in [`macros`].

mod macros;

use std::sync::Arc;

use actix::prelude::*;
use roundtable_actors::client::{ConversationGone, Ready};
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::outbox::Outgoing;
use roundtable_actors::protocol::{self, Args, RpcError, RpcResult, AGENT_SERVER_CHANNEL};
use roundtable_actors::registry::{
    join_loaded, CaughtUp, CollisionBehavior, CreateConversation, DeleteConversation,
    FindConversations, JoinConversation, Joined, ListConversations, PanicForTest,
    RenameConversation, SearchConversationContent, SubscribeConversations,
    UnsubscribeConversations,
};
use serde_json::{json, Value};

use super::hosted_agents::ClientAgentRequest;
use super::relay::JoinFor;
use super::{Connection, JoinedConversation};
use macros::MacroRequest;

/// One `agent-server` invoke with its arguments checked.
enum AgentServerRequest {
    /// `joinConversation({conversationId?, filter?, clientType?})`.
    Join {
        /// The conversation to join; `None` joins the default one.
        conversation: Option<ConversationRef>,
        /// Only this connection's own output.
        filter: bool,
    },
    /// `leaveConversation(conversationId)`.
    Leave {
        /// The conversation to leave.
        conversation: ConversationRef,
    },
    /// `createConversation(name?, {nameCollisionBehavior?})`.
    Create(CreateConversation),
    /// `listConversations(filter?)`.
    List(ListConversations),
    /// `renameConversation(conversationId, newName?, {nameCollisionBehavior?})`.
    Rename(RenameConversation),
    /// `deleteConversation(conversationId)`.
    Delete(DeleteConversation),
    /// `findConversations(query?, maxMatches?)`.
    Find(FindConversations),
    /// `searchConversationContent(query?, maxMatches?)`: the content index.
    SearchContent(SearchConversationContent),
    /// `getUserIdentity()`.
    GetUserIdentity,
    /// `subscribeConversations()` (Roundtable extension): the list now, changes as calls.
    Subscribe,
    /// `unsubscribeConversations()` (Roundtable extension): no more changes.
    Unsubscribe,
    /// `testPanic()`, only when the fault seam is enabled (crash tests).
    TestPanic,
    /// `shutdown()`.
    Shutdown,
    /// `restart()`: stop as for `shutdown`, then start again in place (same arguments, port
    /// and instance; under systemd the unit restarts). Answered void first, as TypeAgent does.
    Restart,
    /// `registerClientAgent({name, manifest, agentInterface, conversationId?})`.
    RegisterClientAgent(ClientAgentRequest),
    /// `unregisterClientAgent({name, conversationId?})`.
    UnregisterClientAgent {
        /// The agent.
        name: String,
        /// The conversation; `None` means the only one this socket joined.
        conversation: Option<ConversationRef>,
    },
    /// `getSpeechToken()`: void, as TypeAgent's server answers without speech configured
    /// (Roundtable has no speech service to hand out tokens for).
    GetSpeechToken,
    /// One of the 19 macro methods (see [`macros`]).
    Macro(MacroRequest),
}

impl AgentServerRequest {
    /// Checks `args` for `method`; an unknown method is `No invoke handler <method>`.
    fn parse(method: &str, args: &Args) -> RpcResult<AgentServerRequest> {
        let m = method;
        Ok(match m {
            "joinConversation" => {
                let options = args.opt_object(m, 0, "options")?;
                let conversation = protocol::opt_field_str(options, m, 0, "conversationId")?
                    .map(ConversationRef::parse);
                let filter = protocol::opt_field_bool(options, m, 0, "filter")?.unwrap_or(false);
                protocol::opt_field_str(options, m, 0, "clientType")?;
                AgentServerRequest::Join {
                    conversation,
                    filter,
                }
            }
            "leaveConversation" => AgentServerRequest::Leave {
                conversation: ConversationRef::parse(args.req_str(m, 0, "conversationId")?),
            },
            "createConversation" => {
                let name = args.opt_str(m, 0, "name")?.unwrap_or_default().to_string();
                let options = args.opt_object(m, 1, "options")?;
                let collision = protocol::opt_field_str(options, m, 1, "nameCollisionBehavior")?;
                AgentServerRequest::Create(CreateConversation {
                    name,
                    collision: CollisionBehavior::from_option(collision),
                })
            }
            "listConversations" => AgentServerRequest::List(ListConversations {
                filter: args.opt_str(m, 0, "filter")?.map(str::to_string),
                answer: None,
            }),
            "renameConversation" => {
                let id = ConversationRef::parse(args.req_str(m, 0, "conversationId")?);
                let new_name = args
                    .opt_str(m, 1, "newName")?
                    .unwrap_or_default()
                    .to_string();
                let options = args.opt_object(m, 2, "options")?;
                let collision = protocol::opt_field_str(options, m, 2, "nameCollisionBehavior")?;
                AgentServerRequest::Rename(RenameConversation {
                    id,
                    new_name,
                    collision: CollisionBehavior::from_option(collision),
                })
            }
            "deleteConversation" => AgentServerRequest::Delete(DeleteConversation {
                id: ConversationRef::parse(args.req_str(m, 0, "conversationId")?),
            }),
            "findConversations" | "searchConversationContent" => {
                let query = args.opt_str(m, 0, "query")?.unwrap_or_default().to_string();
                let max_matches = args.opt_count(m, 1, "maxMatches")?;
                if m == "searchConversationContent" {
                    AgentServerRequest::SearchContent(SearchConversationContent {
                        query,
                        max_matches,
                    })
                } else {
                    AgentServerRequest::Find(FindConversations { query, max_matches })
                }
            }
            "getUserIdentity" => AgentServerRequest::GetUserIdentity,
            "subscribeConversations" => AgentServerRequest::Subscribe,
            "unsubscribeConversations" => AgentServerRequest::Unsubscribe,
            "testPanic" if roundtable_actors::storage::faults::test_panic_enabled() => {
                AgentServerRequest::TestPanic
            }
            "shutdown" => AgentServerRequest::Shutdown,
            "restart" => AgentServerRequest::Restart,
            "registerClientAgent" => {
                AgentServerRequest::RegisterClientAgent(ClientAgentRequest::parse(m, args)?)
            }
            "unregisterClientAgent" => {
                let param = Some(args.req_object(m, 0, "param")?);
                AgentServerRequest::UnregisterClientAgent {
                    name: protocol::opt_field_str(param, m, 0, "name")?
                        .ok_or_else(|| protocol::invalid(m, 0, "name", "a string"))?
                        .to_string(),
                    conversation: protocol::opt_field_str(param, m, 0, "conversationId")?
                        .map(ConversationRef::parse),
                }
            }
            "getSpeechToken" => AgentServerRequest::GetSpeechToken,
            m if macros::is_macro_method(m) => {
                AgentServerRequest::Macro(MacroRequest::parse(m, args)?)
            }
            _ => return Err(RpcError::NoHandler(method.to_string())),
        })
    }
}

/// The error for a registry that did not take or answer a message.
fn registry_lost(e: MailboxError) -> RpcError {
    RpcError::Internal(format!("registry unavailable: {e}"))
}

impl Connection {
    /// An invoke on `agent-server`: parse it, then run it.
    pub(super) fn agent_server(
        &mut self,
        call_id: u64,
        method: String,
        args: Args,
        ctx: &mut Context<Self>,
    ) {
        let request = match AgentServerRequest::parse(&method, &args) {
            Ok(request) => request,
            Err(e) => return self.reply(AGENT_SERVER_CHANNEL, call_id, &method, Err(e)),
        };
        let ch = AGENT_SERVER_CHANNEL.to_string();
        let registry = self.state.registry.clone();
        match request {
            AgentServerRequest::Join {
                conversation,
                filter,
            } => self.join(call_id, conversation, filter, ctx),
            AgentServerRequest::Leave { conversation } => {
                self.leave(call_id, method, conversation, ctx)
            }
            AgentServerRequest::Create(msg) => {
                let req = registry.send(CaughtUp(msg));
                self.answer(ctx, ch, call_id, method, async move {
                    let info = req.await.map_err(registry_lost)???;
                    Ok(Some(serde_json::to_value(info).expect("info serializes")))
                });
            }
            AgentServerRequest::List(mut msg) => {
                // Serialized straight into its answer's frame: a 100,000-entry list is one big
                // frame, built once.
                msg.answer = Some((ch.clone(), call_id));
                let req = registry.send(CaughtUp(msg));
                ctx.spawn(req.into_actor(self).map(move |res, act, _| match res {
                    Ok(Ok(frame)) => act.reply_frame(&ch, call_id, frame),
                    Ok(Err(e)) => act.reply(&ch, call_id, &method, Err(e)),
                    Err(e) => act.reply(&ch, call_id, &method, Err(registry_lost(e))),
                }));
            }
            AgentServerRequest::Rename(msg) => {
                let req = registry.send(CaughtUp(msg));
                self.answer(ctx, ch, call_id, method, async move {
                    req.await.map_err(registry_lost)??.map(|()| None)
                });
            }
            AgentServerRequest::Delete(msg) => {
                let req = registry.send(CaughtUp(msg));
                self.answer(ctx, ch, call_id, method, async move {
                    req.await.map_err(registry_lost)??.map(|()| None)
                });
            }
            AgentServerRequest::Find(msg) => {
                let req = registry.send(CaughtUp(msg));
                self.answer(ctx, ch, call_id, method, async move {
                    Ok(Some(
                        serde_json::to_value(req.await.map_err(registry_lost)??)
                            .expect("matches serialize"),
                    ))
                });
            }
            AgentServerRequest::SearchContent(msg) => {
                let req = registry.send(CaughtUp(msg));
                self.answer(ctx, ch, call_id, method, async move {
                    let hits = req.await.map_err(registry_lost)???;
                    Ok(Some(serde_json::to_value(hits).expect("matches serialize")))
                });
            }
            AgentServerRequest::GetUserIdentity => {
                self.reply(&ch, call_id, &method, Ok(Some(user_identity())))
            }
            AgentServerRequest::Subscribe => {
                self.subscription = super::Subscription::Answering(Vec::new());
                let req = registry.send(CaughtUp(SubscribeConversations {
                    socket: self.socket_id,
                    recipient: ctx.address().recipient(),
                }));
                ctx.spawn(req.into_actor(self).map(move |res, act, _| match res {
                    Ok(Ok(json)) => {
                        act.reply_raw(&ch, call_id, &json);
                        act.list_answered();
                    }
                    Ok(Err(e)) => act.reply(&ch, call_id, &method, Err(e)),
                    Err(e) => act.reply(&ch, call_id, &method, Err(registry_lost(e))),
                }));
            }
            AgentServerRequest::Unsubscribe => {
                self.subscription = super::Subscription::None;
                let req = registry.send(UnsubscribeConversations {
                    socket: self.socket_id,
                });
                self.answer(ctx, ch, call_id, method, async move {
                    req.await.map_err(registry_lost).map(|_| None)
                });
            }
            // Never answered: the process aborts.
            AgentServerRequest::TestPanic => {
                log::warn!("socket {}: testPanic requested", self.socket_id);
                registry.do_send(PanicForTest);
            }
            AgentServerRequest::Shutdown => {
                log::info!("socket {}: shutdown requested", self.socket_id);
                self.reply(&ch, call_id, &method, Ok(None));
                let _ = self.state.stop.send(true);
            }
            AgentServerRequest::Restart => {
                log::info!("socket {}: restart requested", self.socket_id);
                self.reply(&ch, call_id, &method, Ok(None));
                self.state
                    .restarting
                    .store(true, std::sync::atomic::Ordering::Release);
                let _ = self.state.stop.send(true);
            }
            AgentServerRequest::RegisterClientAgent(request) => {
                self.register_client_agent(call_id, request, ctx)
            }
            AgentServerRequest::UnregisterClientAgent { name, conversation } => {
                self.unregister_client_agent(call_id, name, conversation, ctx)
            }
            AgentServerRequest::GetSpeechToken => self.reply(&ch, call_id, &method, Ok(None)),
            AgentServerRequest::Macro(request) => {
                log::debug!("socket {}: {method}: {request:?}", self.socket_id);
                self.reply(&ch, call_id, &method, request.answer())
            }
        }
    }

    /// `leaveConversation`: `Not joined to conversation` unless this socket joined it; the
    /// lease is disarmed so the explicit leave is the only one.
    fn leave(
        &mut self,
        call_id: u64,
        method: String,
        conversation: ConversationRef,
        ctx: &mut Context<Self>,
    ) {
        let ch = AGENT_SERVER_CHANNEL;
        let id = conversation.id();
        if let Some(id) = id.filter(|id| self.remote.contains_key(id)) {
            // The serving node answers (the client's callId), then its virtual connection,
            // left with nothing, ends the relay.
            self.relay_invoke(id, call_id, "leaveConversation", json!([id]));
            let remote = self.remote.remove(&id).expect("checked");
            self.remote_agents
                .retain(|_, agent| agent.conversation != id);
            log::info!(
                "socket {}: leaving conversation {id} on node {}",
                self.socket_id,
                remote.node
            );
            return;
        }
        let Some((conversation_id, joined)) = id.and_then(|id| self.joined.remove_entry(&id))
        else {
            // A UUID is quoted in its canonical form, anything else as sent.
            let quoted = id.map_or_else(|| conversation.into_raw(), |id| id.to_string());
            return self.reply(ch, call_id, &method, Err(RpcError::NotJoined(quoted)));
        };
        self.drop_agents_of(conversation_id, ctx);
        // Straight to the conversation actor the client joined; awaited on this socket's thread.
        let left = joined.lease.leave();
        self.answer(ctx, ch.to_string(), call_id, method, async move {
            left.await.map(|()| None)
        });
    }

    /// Keeps a join made elsewhere: by the registry (a transparent rejoin, `relay/`; the
    /// caller marks its client ready) or by the conversation that answered it
    /// ([`Connection::take_inline_joins`]; its client is live already).
    pub(super) fn adopt(&mut self, joined: Joined, filter: bool) {
        self.joined.insert(
            joined.conversation_id,
            JoinedConversation {
                connection_id: joined.connection_id,
                conversation: joined.conversation,
                lease: joined.lease,
                filter,
            },
        );
    }

    /// The conversations this socket has joined, here or on another node, or is joining
    /// straight ([`join_loaded`]): a join of one of them is refused as already joined.
    fn joined_or_joining(&self) -> impl Iterator<Item = ConversationId> + '_ {
        self.joined
            .keys()
            .chain(self.remote.keys())
            .copied()
            .chain(self.joining_inline.iter().map(|(id, _)| *id))
    }

    /// Attaches a client of this socket to `conversation` through the registry (a loaded
    /// conversation named by id was tried straight first, in [`Connection::join`]). The
    /// answer is a future awaited on this socket's thread.
    pub(super) fn join_request(
        &self,
        conversation: Option<ConversationRef>,
        filter: bool,
        ctx: &mut Context<Self>,
    ) -> impl std::future::Future<Output = RpcResult<Joined>> + 'static {
        let already_joined: Vec<ConversationId> = self.joined_or_joining().collect();
        let outbox = self.outbox.clone();
        let connection: Recipient<ConversationGone> = ctx.address().recipient();
        let registry = self.state.registry.clone();
        async move {
            let req = registry.send(CaughtUp(JoinConversation {
                conversation_id: conversation,
                filter,
                already_joined,
                outbox,
                connection,
            }));
            match req.await {
                Ok(Ok(pending)) => pending.await,
                Ok(Err(e)) => Err(e),
                Err(e) => Err(RpcError::Internal(e.to_string())),
            }
        }
    }

    /// `joinConversation`. A loaded conversation named by id answers the join itself
    /// ([`join_loaded`]); otherwise, or when it refuses, [`Connection::join_answered_here`].
    pub(super) fn join(
        &mut self,
        call_id: u64,
        conversation: Option<ConversationRef>,
        filter: bool,
        ctx: &mut Context<Self>,
    ) {
        let inline = conversation
            .as_ref()
            .and_then(ConversationRef::id)
            .filter(|id| !self.relay && !self.joined_or_joining().any(|j| j == *id))
            .and_then(|id| Some((id, self.state.directory.get(&id)?)));
        let Some((id, live)) = inline else {
            self.join_answered_here(call_id, conversation, filter, ctx);
            return;
        };
        let slot = InlineSlot::default();
        let deliver = deliver_inline_join(&slot, &self.outbox, &self.state, call_id, filter);
        self.joining_inline.push((id, slot));
        let joining = join_loaded(
            id,
            live,
            filter,
            self.outbox.clone(),
            ctx.address().recipient(),
            deliver,
        );
        ctx.spawn(joining.into_actor(self).map(move |answered, act, ctx| {
            act.take_inline_joins();
            act.joining_inline.retain(|(joining, _)| *joining != id);
            if act.joining_inline.is_empty() {
                act.joining_inline = Vec::new();
            }
            if !answered {
                // Refused (it reported idleness, or is stopping): the registry decides.
                act.join_answered_here(call_id, conversation, filter, ctx);
            }
        }));
    }

    /// Takes up the joins conversations answered themselves since the last call: called
    /// before anything that reads `joined` can run on behalf of the client (each inbound
    /// message, a conversation gone, the join's own completion).
    pub(super) fn take_inline_joins(&mut self) {
        if self.joining_inline.is_empty() {
            return;
        }
        let taken: Vec<InlineJoin> = self
            .joining_inline
            .iter()
            .filter_map(|(_, slot)| slot.lock().unwrap_or_else(|e| e.into_inner()).take())
            .collect();
        for InlineJoin {
            call_id,
            filter,
            joined,
        } in taken
        {
            self.in_flight
                .remove(&(AGENT_SERVER_CHANNEL.to_string(), call_id));
            log::debug!(
                "socket {}: joined conversation {} as connection {} (answered by the conversation)",
                self.socket_id,
                joined.conversation_id,
                joined.connection_id
            );
            self.adopt(joined, filter);
        }
    }

    /// `joinConversation` answered by this connection: the registry attaches a client (not yet
    /// ready); the join result is queued, then the client is marked ready, so nothing reaches
    /// `clientio:<id>` before it.
    fn join_answered_here(
        &mut self,
        call_id: u64,
        conversation: Option<ConversationRef>,
        filter: bool,
        ctx: &mut Context<Self>,
    ) {
        let m = "joinConversation";
        let ch = AGENT_SERVER_CHANNEL;
        let joining = self.join_request(conversation, filter, ctx);
        ctx.spawn(joining.into_actor(self).map(move |joined, act, ctx| {
            act.take_inline_joins();
            let joined: RpcResult<Joined> = joined;
            match joined {
                Err(RpcError::OnOtherNode { id, node }) if !act.relay => {
                    match ConversationId::parse(&id) {
                        Some(id) => act.join_remote(JoinFor::Client(call_id), id, node, filter, ctx),
                        None => act.reply(ch, call_id, m, Err(RpcError::ConversationNotFound(id))),
                    }
                }
                Err(e) => {
                    act.reply(ch, call_id, m, Err(e));
                    act.end_idle_relay();
                }
                Ok(joined) if act.joined.contains_key(&joined.conversation_id) => {
                    // A concurrent duplicate join finished first; this one undoes itself (its
                    // lease leaves on drop).
                    let channel = protocol::clientio_channel(joined.conversation_id);
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
                            filter,
                        },
                    );
                    // The result is queued before the client may send anything on clientio.
                    act.reply(ch, call_id, m, Ok(Some(result)));
                    client.do_send(Ready);
                }
            }
        }));
    }
}

/// Where a conversation leaves a join it answered itself ([`deliver_inline_join`]) for the
/// connection to take up.
pub(super) type InlineSlot = Arc<std::sync::Mutex<Option<InlineJoin>>>;

/// What a conversation that answers a join itself does with the [`Joined`], on its own
/// thread: leaves it in `slot`, where the connection takes it up
/// ([`Connection::take_inline_joins`]) before it handles the next frame the client sends
/// (the client can only use the conversation's channels after it has read the result), then
/// queues the join result on the socket. `false` when the connection is gone (it held the
/// only other reference to `slot`).
fn deliver_inline_join(
    slot: &InlineSlot,
    outbox: &roundtable_actors::outbox::Outbox,
    state: &crate::transport::AppState,
    call_id: u64,
    filter: bool,
) -> Box<dyn FnOnce(Joined) -> bool + Send> {
    let slot = Arc::downgrade(slot);
    let outbox = outbox.clone();
    let metrics = state.metrics.clone();
    Box::new(move |joined| {
        let Some(slot) = slot.upgrade() else {
            return false;
        };
        let frame = protocol::invoke_result(AGENT_SERVER_CHANNEL, call_id, Some(&joined.result));
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(InlineJoin {
            call_id,
            filter,
            joined,
        });
        super::queue_frame(&outbox, &metrics, Outgoing::Text(frame), false);
        true
    })
}

/// A join a conversation answered itself, waiting in its [`InlineSlot`].
pub(super) struct InlineJoin {
    /// The `joinConversation` invoke it answered.
    call_id: u64,
    /// Its `filter` option.
    filter: bool,
    /// The membership.
    joined: Joined,
}

/// The `discovery` channel's one method: `lookupPort({agentName, role?, remote?})` answers
/// this server's port for `agent-server`, `{"port": null}` for anything else. No `url`: as
/// TypeAgent's head answers a local caller (a `url` is only for a remote caller through a
/// tunnel, which Roundtable does not have; `remote` is accepted and ignored).
pub(super) fn lookup_port(method: &str, args: &Args, port: u16) -> RpcResult<Option<Value>> {
    if method != "lookupPort" {
        return Err(RpcError::NoHandler(method.to_string()));
    }
    let options = args.opt_object(method, 0, "options")?;
    let agent = protocol::opt_field_str(options, method, 0, "agentName")?;
    Ok(Some(if agent == Some("agent-server") {
        json!({"port": port})
    } else {
        json!({"port": null})
    }))
}

/// `getUserIdentity`: the OS user name (`$USER`, `$USERNAME`, else `user`) and its initial.
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
