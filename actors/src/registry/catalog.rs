//! The catalog of conversations: create, rename, delete, list and find, whether an id
//! exists, and one conversation's record ([`GetConversationInfo`]). Names follow [`naming`](crate::naming); every change is journaled and answered
//! only once it is durable.
//!
//! Talks to: the transport's connections (the messages below) and, for a delete, the
//! conversation being deleted (`Shutdown{Deleted}`) and the writer thread.

use crate::ids::{ConversationId, ConversationRef};
use actix::prelude::*;
use tokio::sync::oneshot;

use super::watchers::ChangeKind;
use super::{new_stored, storage_error, ConversationRegistry, Entry, LoadState};
use crate::conversation::{GetConversationInfo, Shutdown, ShutdownReason};
use crate::naming;
use crate::protocol::{ContentMatch, ConversationInfo, ConversationMatch, RpcError, RpcResult};
use crate::search::ContentHit;
use crate::storage::journal::JournalRecord;

/// `nameCollisionBehavior` of `createConversation` / `renameConversation`, read once from the
/// options object by the transport. An unknown spelling is kept (not refused at the edge) so
/// the registry answers it at the same point as before: after the name's own checks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CollisionBehavior {
    /// `error` (and absent): a taken name is refused with `NameExists`.
    #[default]
    Error,
    /// `appendNumber`: a taken name becomes `name (2)`, `name (3)`, …
    AppendNumber,
    /// Any other text: answered with `Unknown name collision behavior: <text>`.
    Unknown(String),
}

impl CollisionBehavior {
    /// The option as the client sent it (`None`: absent or `null`).
    pub fn from_option(option: Option<&str>) -> CollisionBehavior {
        match option {
            None | Some("error") => CollisionBehavior::Error,
            Some("appendNumber") => CollisionBehavior::AppendNumber,
            Some(other) => CollisionBehavior::Unknown(other.to_string()),
        }
    }

    /// `self`, or the protocol's error for an unknown spelling.
    fn checked(&self) -> RpcResult<&CollisionBehavior> {
        match self {
            CollisionBehavior::Unknown(text) => {
                Err(RpcError::UnknownCollisionBehavior(text.clone()))
            }
            known => Ok(known),
        }
    }
}

/// `createConversation(name, {nameCollisionBehavior})`.
#[derive(Message)]
#[rtype(result = "RpcResult<ConversationInfo>")]
pub struct CreateConversation {
    /// Requested name (raw).
    pub name: String,
    /// What to do when the name is taken.
    pub collision: CollisionBehavior,
}

impl Handler<CreateConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<ConversationInfo>>;

    fn handle(&mut self, msg: CreateConversation, _ctx: &mut Self::Context) -> Self::Result {
        let prepared = (|| {
            if self.stopping {
                return Err(RpcError::ServerStopping);
            }
            naming::validate_name(&msg.name)?;
            let collision = msg.collision.checked()?;
            self.resolve_name(&msg.name, collision, None)
        })();
        let name = match prepared {
            Ok(n) => n,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        if let Some(cluster) = self.config.cluster.clone() {
            let append = msg.collision == CollisionBehavior::AppendNumber;
            return self.create_in_cluster(cluster, msg.name, name, append);
        }
        let (id, ack) = self.create_entry(name);
        Box::pin(
            async move { storage_error(ack.await) }
                .into_actor(self)
                .map(move |res, act, _| match res {
                    Ok(()) => {
                        act.maybe_fold();
                        let entry = act
                            .entries
                            .get(&id)
                            .ok_or_else(|| RpcError::ConversationNotFound(id.to_string()))?;
                        log::info!("created conversation {id} ({:?})", entry.name);
                        let info = act.info(id, entry, false);
                        act.publish(ChangeKind::Created, id);
                        Ok(info)
                    }
                    Err(e) => {
                        act.remove_entry(&id);
                        Err(e)
                    }
                }),
        )
    }
}

/// `listConversations(filter)`: case-insensitive untrimmed substring, registry order. Answers
/// the JSON array text, serialized straight from the entries (no copy of 100,000 names), or
/// the whole `invokeResult` frame holding it when `answer` says which call it answers.
#[derive(Message)]
#[rtype(result = "String")]
pub struct ListConversations {
    /// Substring filter; `None` lists everything.
    pub filter: Option<String>,
    /// The channel and callId of the invoke this answers: the list is then written straight
    /// into its `invokeResult` frame, so 1.7 MB of 10,000 entries are not copied into one
    /// afterwards. `None`: the bare array.
    pub answer: Option<(String, u64)>,
}

impl Handler<ListConversations> for ConversationRegistry {
    type Result = MessageResult<ListConversations>;

    fn handle(&mut self, msg: ListConversations, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.list_json(msg.filter.as_deref(), msg.answer.as_ref()))
    }
}

impl ConversationRegistry {
    /// The `listConversations` answer as JSON text (serialized straight from the entries:
    /// long lists are not built as a value tree first). `filter`: a case-insensitive substring
    /// of the name. `answer`: the channel and callId whose `invokeResult` frame to write
    /// around it.
    pub(super) fn list_json(&self, filter: Option<&str>, answer: Option<&(String, u64)>) -> String {
        let filter = filter.map(str::to_lowercase);
        let room = 160 * self.entries.len().min(1 << 16) + 2;
        let mut out = match answer {
            Some((channel, call_id)) => {
                crate::protocol::invoke_result_start(channel, *call_id, room).into_bytes()
            }
            None => Vec::with_capacity(room),
        };
        out.push(b'[');
        let listed = self.in_order().filter(|(_, e)| {
            filter
                .as_ref()
                .is_none_or(|f| e.name.to_lowercase().contains(f.as_str()))
        });
        for (i, (id, e)) in listed.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let info = crate::protocol::ConversationInfoRef {
                conversation_id: id,
                name: &e.name,
                client_count: e.clients(),
                created_at: &e.created_at,
                message_count: e.message_count,
                indexed_message_count: Some(0),
            };
            info.write_json(&mut out);
        }
        out.push(b']');
        if answer.is_some() {
            out.extend_from_slice(crate::protocol::INVOKE_RESULT_END.as_bytes());
        }
        String::from_utf8(out).expect("the list is written from UTF-8 strings")
    }
}

/// `findConversations(query, maxMatches)`: lexical scoring, best first.
#[derive(Message)]
#[rtype(result = "Vec<ConversationMatch>")]
pub struct FindConversations {
    /// The query (trimmed here).
    pub query: String,
    /// At most this many (default 10).
    pub max_matches: Option<u64>,
}

impl Handler<FindConversations> for ConversationRegistry {
    type Result = MessageResult<FindConversations>;

    fn handle(&mut self, msg: FindConversations, _ctx: &mut Self::Context) -> Self::Result {
        let query = naming::js_trim(&msg.query).to_lowercase();
        if query.is_empty() {
            return MessageResult(Vec::new());
        }
        let mut matches: Vec<ConversationMatch> = self
            .in_order()
            .filter_map(|(id, e)| {
                let score = naming::score(&query, &e.name);
                (score > 0.0).then(|| ConversationMatch {
                    conversation: self.info(id, e, true),
                    score,
                })
            })
            .collect();
        // Stable sort keeps registry order on ties.
        matches.sort_by(|a, b| {
            b.score
                .partial_cmp(&a.score)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        matches.truncate(msg.max_matches.unwrap_or(10).min(usize::MAX as u64) as usize);
        MessageResult(matches)
    }
}

/// `searchConversationContent(query, maxMatches)`: the content index's best conversations,
/// each with its info as `listConversations` shows it.
#[derive(Message)]
#[rtype(result = "RpcResult<Vec<ContentMatch>>")]
pub struct SearchConversationContent {
    /// The user's text.
    pub query: String,
    /// At most this many (default 10, at most 100).
    pub max_matches: Option<u64>,
}

impl Handler<SearchConversationContent> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<Vec<ContentMatch>>>;

    fn handle(&mut self, msg: SearchConversationContent, _ctx: &mut Self::Context) -> Self::Result {
        let Some(search) = self.config.runtime.search.clone() else {
            return Box::pin(fut::ready(Ok(Vec::new())));
        };
        // In a cluster the other nodes' indexes are asked too (each holds what it wrote).
        let others = self
            .config
            .cluster
            .as_ref()
            .map(|cluster| cluster.search_others(msg.query.clone(), msg.max_matches));
        let max = msg.max_matches;
        let asked = search.query(msg.query, msg.max_matches);
        let asked =
            futures_util::future::join(asked, futures_util::future::OptionFuture::from(others));
        Box::pin(asked.into_actor(self).map(move |(res, remote), act, _| {
            let remote = remote.unwrap_or_default();
            let hits = match res {
                Ok(Ok(hits)) => hits,
                Ok(Err(e)) => return Err(RpcError::Message(e.to_string())),
                Err(_) => {
                    return Err(RpcError::Internal(
                        "the search query thread has stopped".into(),
                    ))
                }
            };
            let hits = if remote.is_empty() {
                hits
            } else {
                merge_hits(vec![hits, remote], crate::search::effective_max(max))
            };
            // Names and counts are the registry's, as of now; a conversation deleted since it
            // was indexed is not named.
            Ok(hits
                .into_iter()
                .filter_map(|hit| {
                    let entry = act.entries.get(&hit.conversation).filter(|e| !e.deleting)?;
                    Some(ContentMatch {
                        conversation: act.info(hit.conversation, entry, true),
                        score: hit.score,
                        snippets: hit.snippets,
                        seq: hit.seq,
                    })
                })
                .collect())
        }))
    }
}

/// Merges hit lists (this node's and the other nodes'): the best hit per conversation, best
/// first, at most `max`.
fn merge_hits(lists: Vec<Vec<ContentHit>>, max: usize) -> Vec<ContentHit> {
    let mut best: std::collections::HashMap<ConversationId, ContentHit> = Default::default();
    for hit in lists.into_iter().flatten() {
        match best.get(&hit.conversation) {
            Some(kept) if kept.score >= hit.score => {}
            _ => {
                best.insert(hit.conversation, hit);
            }
        }
    }
    let mut merged: Vec<ContentHit> = best.into_values().collect();
    merged.sort_by(|a, b| b.score.total_cmp(&a.score));
    merged.truncate(max);
    merged
}

/// `renameConversation(id, newName, options)`.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct RenameConversation {
    /// The conversation the client named.
    pub id: ConversationRef,
    /// New name (raw).
    pub new_name: String,
    /// What to do when the name is taken.
    pub collision: CollisionBehavior,
}

impl Handler<RenameConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<()>>;

    fn handle(&mut self, msg: RenameConversation, _ctx: &mut Self::Context) -> Self::Result {
        let prepared = (|| {
            if self.stopping {
                return Err(RpcError::ServerStopping);
            }
            naming::validate_name(&msg.new_name)?;
            let id = self
                .lookup(&msg.id)
                .ok_or_else(|| RpcError::ConversationNotFound(msg.id.raw().to_string()))?;
            let collision = msg.collision.checked()?;
            let name = self.resolve_name(&msg.new_name, collision, Some(id))?;
            Ok((id, name))
        })();
        let (id, name) = match prepared {
            Ok(p) => p,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        if let Some(cluster) = self.config.cluster.clone() {
            return self.rename_in_cluster(cluster, id, name);
        }
        let entry = self.entries.get_mut(&id).expect("looked up");
        let old = std::mem::replace(&mut entry.name, name.as_str().into());
        let record = JournalRecord::Put {
            entry: entry.stored(id),
        };
        self.unindex_name(&id, &old);
        self.index_name(id, &name);
        self.config.directory.rename(&id, &name);
        let ack = self.journal(vec![record]);
        Box::pin(
            async move { storage_error(ack.await) }
                .into_actor(self)
                .map(move |res, act, _| {
                    match &res {
                        Ok(()) => {
                            log::info!("renamed conversation {id} from {old:?} to {name:?}");
                            act.maybe_fold();
                            act.publish(ChangeKind::Renamed, id);
                        }
                        Err(_) => {
                            if let Some(entry) = act.entries.get_mut(&id) {
                                entry.name = old.clone();
                            }
                            act.config.directory.rename(&id, &old);
                            act.unindex_name(&id, &name);
                            act.index_name(id, &old);
                        }
                    }
                    res
                }),
        )
    }
}

/// `deleteConversation(id)`.
#[derive(Message)]
#[rtype(result = "RpcResult<()>")]
pub struct DeleteConversation {
    /// The conversation the client named.
    pub id: ConversationRef,
}

impl Handler<DeleteConversation> for ConversationRegistry {
    type Result = ResponseActFuture<Self, RpcResult<()>>;

    fn handle(&mut self, msg: DeleteConversation, _ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(fut::ready(Err(RpcError::ServerStopping)));
        }
        let Some(id) = self.lookup(&msg.id) else {
            return Box::pin(fut::ready(Err(RpcError::ConversationNotFound(
                msg.id.into_raw(),
            ))));
        };
        let Some(cluster) = self.config.cluster.clone() else {
            return self.delete_local(id);
        };
        // In a cluster the record goes from the shared store first; joins here already answer
        // `Conversation not found`, and the watch's echo of the delete is ignored (`deleting`).
        self.entries.get_mut(&id).expect("looked up").deleting = true;
        Box::pin(cluster.delete(id).into_actor(self).then(
            move |res, act, _| -> ResponseActFuture<Self, RpcResult<()>> {
                match res {
                    Ok(()) => {
                        // Its revision is not known here; the next check of the copy that
                        // shows the delete lets this go.
                        act.shared_copy.tombstone(id, 0);
                        act.delete_local(id)
                    }
                    Err(e) => {
                        if let Some(entry) = act.entries.get_mut(&id) {
                            entry.deleting = false;
                        }
                        Box::pin(fut::ready(Err(RpcError::ClusterUnavailable(e.0))))
                    }
                }
            },
        ))
    }
}

impl ConversationRegistry {
    /// Deletes `id` here: shuts its actor down (clients told), journals the delete, removes its
    /// directory and search documents, then drops the entry. Answers once the delete is durable.
    pub(super) fn delete_local(
        &mut self,
        id: ConversationId,
    ) -> ResponseActFuture<Self, RpcResult<()>> {
        let Some(entry) = self.entries.get_mut(&id) else {
            return Box::pin(fut::ready(Ok(())));
        };
        entry.deleting = true;
        self.config.directory.remove(&id);
        let stopped = match std::mem::replace(&mut entry.state, LoadState::Unloaded) {
            LoadState::Live(addr) => {
                let (tx, rx) = oneshot::channel();
                addr.do_send(Shutdown {
                    reason: ShutdownReason::Deleted,
                    reply: tx,
                });
                Some(rx)
            }
            // Waiting joins are dropped: their joiners get `Conversation not found`.
            LoadState::Evicting(_) | LoadState::Unloaded => None,
        };
        self.config.metrics.lifecycle_changed();
        entry.client_count = None;
        let writer = self.writer.clone();
        let search = self.config.runtime.search.clone();
        // The directory is retired once the delete is journaled (a loaded conversation has
        // closed its files by then), so a failed delete leaves it writable. The retire marker
        // keeps a replay after a crash from bringing back files whose records are still in
        // the node log.
        let log_writer = self.config.runtime.log_writer.clone();
        let dir = self.config.layout.conversation_dir(&id);
        self.journal_len += 1;
        let work = async move {
            if let Some(rx) = stopped {
                let _ = rx.await;
            }
            storage_error(
                writer
                    .append(vec![JournalRecord::Delete {
                        conversation_id: id.to_string(),
                    }])
                    .await,
            )?;
            let _ = log_writer.retire(dir).await;
            if let Ok(Err(e)) = writer.remove_dir(id).await {
                log::error!(
                    "conversation {id}: deleted from the registry but its directory remains: {e}"
                );
            }
            // Its content leaves the search index before the delete answers (searches only
            // ever name registry entries, so a failure here cannot show it either).
            if let Some(search) = search {
                match search.delete(id).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        log::error!("conversation {id}: not removed from the search index: {e}")
                    }
                    Err(_) => log::error!("conversation {id}: the search writer has stopped"),
                }
            }
            Ok(())
        };
        Box::pin(
            work.into_actor(self)
                .map(move |res: RpcResult<()>, act, _| {
                    match &res {
                        Ok(()) => {
                            act.publish(ChangeKind::Deleted, id);
                            act.release_lease(id);
                            act.remove_entry(&id);
                            act.maybe_fold();
                            log::info!("deleted conversation {id}");
                        }
                        Err(e) => {
                            log::error!("conversation {id}: delete failed: {e}");
                            if let Some(entry) = act.entries.get_mut(&id) {
                                entry.deleting = false;
                            }
                        }
                    }
                    res
                }),
        )
    }
}

/// Whether a conversation exists (and is not being deleted), for the answer to an invoke on a
/// `dispatcher:<id>` channel the socket has not joined.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct ConversationExists {
    /// The conversation the channel name names.
    pub id: ConversationRef,
}

impl Handler<ConversationExists> for ConversationRegistry {
    type Result = bool;

    fn handle(&mut self, msg: ConversationExists, _ctx: &mut Self::Context) -> bool {
        self.lookup(&msg.id)
            .and_then(|id| self.entries.get(&id))
            .is_some_and(|e| !e.deleting)
    }
}

impl Handler<GetConversationInfo> for ConversationRegistry {
    type Result = Option<ConversationInfo>;

    fn handle(&mut self, msg: GetConversationInfo, _ctx: &mut Self::Context) -> Self::Result {
        let entry = self.entries.get(&msg.id).filter(|e| !e.deleting)?;
        Some(self.info(msg.id, entry, false))
    }
}

impl ConversationRegistry {
    /// The existing conversation (other than `except`) whose normalized name is `key`.
    fn name_owner(&self, key: &str, except: Option<ConversationId>) -> Option<&Entry> {
        self.named(key)
            .filter(|id| Some(*id) != except)
            .filter_map(|id| self.entries.get(&id).map(|e| &**e))
            .find(|e| !e.deleting && naming::normalize(&e.name) == key)
    }

    /// Applies the naming rules: the name to store, or the collision error.
    fn resolve_name(
        &self,
        requested: &str,
        collision: &CollisionBehavior,
        except: Option<ConversationId>,
    ) -> RpcResult<String> {
        let Some(owner) = self.name_owner(&naming::normalize(requested), except) else {
            return Ok(requested.to_string());
        };
        match collision {
            CollisionBehavior::AppendNumber => {
                let others = self
                    .in_order()
                    .filter(|(id, _)| Some(*id) != except)
                    .map(|(_, e)| &*e.name);
                let name = naming::append_number(requested, others);
                naming::validate_length(&name)?;
                match self.name_owner(&naming::normalize(&name), except) {
                    None => Ok(name),
                    Some(o) => Err(RpcError::NameExists(o.name.to_string())),
                }
            }
            _ => Err(RpcError::NameExists(owner.name.to_string())),
        }
    }

    /// Creates an entry in memory and journals it. Answers with the journal acknowledgement.
    pub(super) fn create_entry(
        &mut self,
        name: String,
    ) -> (ConversationId, oneshot::Receiver<Result<(), String>>) {
        let id = ConversationId::new_random();
        let stored = new_stored(id, name);
        let ack = self.journal(vec![JournalRecord::Put {
            entry: stored.clone(),
        }]);
        self.insert_entry(id, stored);
        (id, ack)
    }
}
