//! What people say about the conversation's messages: a rating (`recordUserFeedback`) and
//! hiding or restoring a request's user or agent bubble (`recordUserHide`,
//! `restoreAllHidden`, `flushHidden`). Each is a display-log entry in TypeAgent's shape
//! (`user-feedback`, `user-message-hidden`), durable before it is announced
//! (`onUserFeedback` / `onUserHide` to the conversation's clients, a filtered client only
//! for its own requests) and answered; `getDisplayHistory` replays them and backups carry
//! them, as every logged entry.
//!
//! Restoring and flushing act on the *current* hides: the newest `user-message-hidden` entry
//! per `(requestId, target)` that still hides and is not permanent (TypeAgent's
//! `getCurrentHides`). The conversation keeps those in memory ([`Hides`]), read from its log
//! file the first time any hide method is called after a load (off the actor, once the log
//! writer has written everything logged so far; hide methods arriving meanwhile wait in
//! order), then kept up to date by the methods themselves, the only writers of such entries.
//!
//! Who talks to it: the dispatcher (`dispatcher.rs`) parses the arguments here and runs
//! the methods through [`Conversation::record_feedback`] and [`Conversation::hide`].

use std::collections::HashMap;
use std::path::PathBuf;

use actix::prelude::*;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::Conversation;
use crate::ids::ConnectionId;
use crate::protocol::{invalid, Args, RpcError, RpcResult};
use crate::storage::display_log;

/// Longest feedback comment, in characters: a comment box's worth. Each feedback is a log
/// entry kept for the conversation's life.
pub const MAX_FEEDBACK_COMMENT_CHARS: usize = 4096;
/// Most messages one conversation may have hidden and restorable at once. Each is held in
/// memory for `restoreAllHidden` / `flushHidden`, and those announce one `onUserHide` per
/// message to every client at once: this many must fit a socket's outbound queue (4,096
/// frames) with room to spare, or the flush would close every client as a slow consumer.
/// Past it a new hide is refused until some are restored or flushed.
pub const MAX_HIDDEN_MESSAGES: usize = 1_000;

/// Where the answer of a feedback or hide method goes (`None`: void, else the count).
type Reply = oneshot::Sender<RpcResult<Option<Value>>>;

/// `recordUserFeedback(requestId, rating, category?, comment?, includeContext?)`, checked.
pub(super) struct Feedback {
    /// The rated request (`requestId`, `connectionId?`, `clientRequestId?` as sent).
    request_id: Value,
    /// `"up"`, `"down"` or `null` (clears an earlier rating).
    rating: Value,
    /// One of TypeAgent's four categories.
    category: Option<String>,
    /// The comment, when not empty.
    comment: Option<String>,
}

/// A hide method, checked.
pub(super) enum HideOp {
    /// `recordUserHide(requestId, hidden, target?, permanent?)`.
    Record {
        /// The request whose bubble is hidden or shown.
        request_id: Value,
        /// Hide (`true`) or show again.
        hidden: bool,
        /// `"user"` or `"agent"`; absent hides both (older TypeAgent entries).
        target: Option<String>,
        /// A flushed hide: `restoreAllHidden` leaves it.
        permanent: bool,
    },
    /// `restoreAllHidden()`: shows every restorable hidden message again.
    RestoreAll,
    /// `flushHidden()`: makes every restorable hide permanent.
    Flush,
}

/// The conversation's current restorable hides, by TypeAgent's key.
#[derive(Default)]
pub(super) enum Hides {
    /// Not read since the conversation was loaded.
    #[default]
    Unread,
    /// Being read from the log file; these methods wait for it, in order.
    Reading(Vec<(HideOp, Reply)>),
    /// Read: key → the newest entry for it, which hides and is not permanent.
    Ready(HashMap<String, Value>),
}

/// A `RequestId` argument: an object with a string `requestId`; only the protocol's three
/// fields are kept.
fn request_id_arg(m: &str, args: &Args) -> RpcResult<Value> {
    let obj = args.req_object(m, 0, "requestId")?;
    let mut kept = Map::new();
    match obj.get("requestId") {
        Some(Value::String(id)) if !id.is_empty() => {
            kept.insert("requestId".into(), id.clone().into());
        }
        _ => return Err(invalid(m, 0, "requestId.requestId", "a non-empty string")),
    }
    match obj.get("connectionId") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) => {
            kept.insert("connectionId".into(), c.clone().into());
        }
        Some(_) => return Err(invalid(m, 0, "requestId.connectionId", "a string")),
    }
    if let Some(c) = obj.get("clientRequestId").filter(|c| !c.is_null()) {
        kept.insert("clientRequestId".into(), c.clone());
    }
    Ok(Value::Object(kept))
}

/// An optional boolean argument.
fn opt_bool(m: &str, args: &Args, index: usize, param: &'static str) -> RpcResult<Option<bool>> {
    match args.get(index) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(m, index, param, "a boolean")),
    }
}

/// An optional `target`: `"user"` or `"agent"`.
fn target_arg(m: &str, args: &Args, index: usize) -> RpcResult<Option<String>> {
    match args.opt_str(m, index, "target")? {
        None => Ok(None),
        Some(t @ ("user" | "agent")) => Ok(Some(t.to_string())),
        Some(_) => Err(invalid(m, index, "target", "\"user\" or \"agent\"")),
    }
}

impl Feedback {
    /// Checks `recordUserFeedback`'s arguments.
    pub(super) fn parse(m: &str, args: &Args) -> RpcResult<Feedback> {
        let request_id = request_id_arg(m, args)?;
        let rating = match args.get(1) {
            None => Value::Null,
            Some(Value::String(r)) if r == "up" || r == "down" => r.clone().into(),
            Some(_) => return Err(invalid(m, 1, "rating", "\"up\", \"down\" or null")),
        };
        let category = match args.opt_str(m, 2, "category")? {
            None => None,
            Some(c @ ("wrong-agent" | "didnt-understand" | "bad-response" | "other")) => {
                Some(c.to_string())
            }
            Some(_) => {
                return Err(invalid(
                    m,
                    2,
                    "category",
                    "\"wrong-agent\", \"didnt-understand\", \"bad-response\" or \"other\"",
                ))
            }
        };
        let comment = args.opt_str(m, 3, "comment")?.filter(|c| !c.is_empty());
        if let Some(c) = comment {
            let chars = c.chars().count();
            if chars > MAX_FEEDBACK_COMMENT_CHARS {
                return Err(RpcError::Message(format!(
                    "Feedback comment too long: {chars} characters (at most {MAX_FEEDBACK_COMMENT_CHARS})"
                )));
            }
        }
        // `includeContext` asks TypeAgent to add the request's text to its telemetry event;
        // Roundtable sends no telemetry, so it is only checked.
        opt_bool(m, args, 4, "includeContext")?;
        Ok(Feedback {
            request_id,
            rating,
            category,
            comment: comment.map(str::to_string),
        })
    }
}

impl HideOp {
    /// Checks the arguments of `recordUserHide`, `restoreAllHidden` or `flushHidden`.
    pub(super) fn parse(m: &str, args: &Args) -> RpcResult<HideOp> {
        Ok(match m {
            "restoreAllHidden" => HideOp::RestoreAll,
            "flushHidden" => HideOp::Flush,
            _ => HideOp::Record {
                request_id: request_id_arg(m, args)?,
                hidden: opt_bool(m, args, 1, "hidden")?
                    .ok_or_else(|| invalid(m, 1, "hidden", "a boolean"))?,
                target: target_arg(m, args, 2)?,
                permanent: opt_bool(m, args, 3, "permanent")?.unwrap_or(false),
            },
        })
    }
}

/// TypeAgent's `getCurrentHides` key of a hide entry: `<requestId>::<target or all>`.
fn hide_key(entry: &Value) -> Option<String> {
    let request = entry["requestId"]["requestId"].as_str()?;
    let target = entry["target"].as_str().unwrap_or("all");
    Some(format!("{request}::{target}"))
}

/// Whether a hide entry is one `restoreAllHidden` / `flushHidden` act on.
fn restorable(entry: &Value) -> bool {
    entry["hidden"] == true && entry["permanent"] != true
}

/// Reads the current restorable hides from the log file in `dir`.
fn read_hides(dir: &std::path::Path) -> std::io::Result<HashMap<String, Value>> {
    let mut hides = HashMap::new();
    display_log::for_each_entry(dir, |_, entry| {
        if entry["type"] != "user-message-hidden" {
            return;
        }
        if let Some(key) = hide_key(&entry) {
            if restorable(&entry) {
                hides.insert(key, entry);
            } else {
                hides.remove(&key);
            }
        }
    })?;
    Ok(hides)
}

/// The answer of a method whose reply comes on `rx`.
pub(super) async fn reply_of(
    rx: oneshot::Receiver<RpcResult<Option<Value>>>,
) -> RpcResult<Option<Value>> {
    rx.await.unwrap_or_else(|_| {
        Err(RpcError::Internal(
            "the conversation closed before the change was saved".into(),
        ))
    })
}

impl Conversation {
    /// `recordUserFeedback`: logs a `user-feedback` entry; once it is durable, every client
    /// gets `onUserFeedback(entry)` and the caller its void answer.
    pub(super) fn record_feedback(
        &mut self,
        feedback: Feedback,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RpcResult<Option<Value>>> {
        let (reply, rx) = oneshot::channel();
        let mut entry = json!({
            "type": "user-feedback",
            "timestamp": crate::clock::now_millis(),
            "requestId": feedback.request_id,
            "rating": feedback.rating,
        });
        if let Some(c) = feedback.category {
            entry["category"] = c.into();
        }
        if let Some(c) = feedback.comment {
            entry["comment"] = c.into();
        }
        match self.log_announced(entry) {
            Ok(entry) => {
                self.announce_when_durable(vec![("onUserFeedback", entry)], None, reply, ctx)
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
        rx
    }

    /// A hide method: now if the current hides are known, else once they have been read.
    pub(super) fn hide(
        &mut self,
        op: HideOp,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RpcResult<Option<Value>>> {
        let (reply, rx) = oneshot::channel();
        match &mut self.hides {
            Hides::Ready(_) => self.run_hide(op, reply, ctx),
            Hides::Reading(waiting) => waiting.push((op, reply)),
            Hides::Unread => {
                self.hides = Hides::Reading(vec![(op, reply)]);
                self.read_hides(ctx);
            }
        }
        rx
    }

    /// Reads the current hides from the log file, off the actor, after the log writer has
    /// written everything logged so far; then runs the methods that waited.
    fn read_hides(&mut self, ctx: &mut Context<Self>) {
        let dir: PathBuf = self.setup.dir.clone();
        let written = self.setup.runtime.log_writer.written();
        let read = async move {
            written
                .await
                .map_err(|_| "the log writer has stopped".to_string())?;
            tokio::task::spawn_blocking(move || read_hides(&dir))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("reading the display log: {e}"))
        };
        ctx.spawn(read.into_actor(self).map(|read, act, ctx| {
            let waiting = match std::mem::take(&mut act.hides) {
                Hides::Reading(waiting) => waiting,
                _ => Vec::new(),
            };
            match read {
                Ok(hides) => {
                    log::debug!(
                        "conversation {}: {} restorable hidden messages",
                        act.setup.id,
                        hides.len()
                    );
                    act.hides = Hides::Ready(hides);
                    for (op, reply) in waiting {
                        act.run_hide(op, reply, ctx);
                    }
                }
                Err(e) => {
                    log::error!(
                        "conversation {}: cannot read the hidden messages: {e}",
                        act.setup.id
                    );
                    for (_, reply) in waiting {
                        let _ = reply.send(Err(RpcError::Internal(e.clone())));
                    }
                }
            }
        }));
    }

    /// Runs a hide method against the known current hides.
    fn run_hide(&mut self, op: HideOp, reply: Reply, ctx: &mut Context<Self>) {
        let Hides::Ready(hides) = &mut self.hides else {
            unreachable!("run only once the hides are read");
        };
        let (entries, count) = match op {
            HideOp::Record {
                request_id,
                hidden,
                target,
                permanent,
            } => {
                let mut entry = json!({"requestId": request_id, "hidden": hidden});
                if let Some(t) = target {
                    entry["target"] = t.into();
                }
                if permanent {
                    entry["permanent"] = true.into();
                }
                let key = hide_key(&entry).expect("checked requestId");
                if restorable(&entry)
                    && !hides.contains_key(&key)
                    && hides.len() >= MAX_HIDDEN_MESSAGES
                {
                    let _ = reply.send(Err(RpcError::Message(format!(
                        "Too many hidden messages in this conversation (limit {MAX_HIDDEN_MESSAGES}); restore or flush them first"
                    ))));
                    return;
                }
                (vec![entry], None)
            }
            HideOp::RestoreAll | HideOp::Flush => {
                let flush = matches!(op, HideOp::Flush);
                let mut current: Vec<&Value> = hides.values().collect();
                current.sort_by_key(|e| e["seq"].as_u64());
                let entries: Vec<Value> = current
                    .into_iter()
                    .map(|h| {
                        let mut entry = json!({"requestId": h["requestId"], "hidden": flush});
                        if let Some(t) = h.get("target") {
                            entry["target"] = t.clone();
                        }
                        if flush {
                            entry["permanent"] = true.into();
                        }
                        entry
                    })
                    .collect();
                let count = entries.len();
                (entries, Some(count))
            }
        };
        let mut announced = Vec::with_capacity(entries.len());
        for mut entry in entries {
            entry["type"] = "user-message-hidden".into();
            entry["timestamp"] = crate::clock::now_millis().into();
            match self.log_announced(entry) {
                Ok(entry) => {
                    let Hides::Ready(hides) = &mut self.hides else {
                        unreachable!()
                    };
                    let key = hide_key(&entry).expect("checked requestId");
                    if restorable(&entry) {
                        hides.insert(key, entry.clone());
                    } else {
                        hides.remove(&key);
                    }
                    announced.push(("onUserHide", entry));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        }
        self.announce_when_durable(announced, count.map(Value::from), reply, ctx);
    }

    /// Logs `entry` and returns it as logged (with its `seq`), to be announced.
    fn log_announced(&mut self, mut entry: Value) -> RpcResult<Value> {
        let seq = self.log_entry(entry.clone()).ok_or_else(|| {
            RpcError::Internal(match &self.log {
                Err(e) => e.clone(),
                Ok(_) => "the conversation is closing".into(),
            })
        })?;
        entry["seq"] = seq.into();
        Ok(entry)
    }

    /// Once everything logged so far is durable: each `(method, entry)` goes to the clients
    /// (filtered ones only for their own request), then `reply` gets `answer`; a failed
    /// write answers the storage error and announces nothing.
    fn announce_when_durable(
        &mut self,
        announced: Vec<(&'static str, Value)>,
        answer: Option<Value>,
        reply: Reply,
        ctx: &mut Context<Self>,
    ) {
        self.after_durable(ctx, move |act, written, _| match written {
            Ok(()) => {
                for (method, entry) in announced {
                    let origin = entry["requestId"]["connectionId"]
                        .as_str()
                        .and_then(|c| c.parse::<ConnectionId>().ok());
                    act.broadcast(method, json!([entry]), origin);
                }
                let _ = reply.send(Ok(answer));
            }
            Err(e) => {
                log::error!(
                    "conversation {}: feedback or hide not saved: {e}",
                    act.setup.id
                );
                let _ = reply.send(Err(RpcError::Storage(e)));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Args {
        Args(v.as_array().unwrap().clone())
    }

    #[test]
    fn feedback_and_hide_arguments() {
        let m = "recordUserFeedback";
        let f = Feedback::parse(
            m,
            &args(json!([{"requestId": "r", "connectionId": "2", "extra": 1}, "up", "other", ""])),
        )
        .unwrap();
        assert_eq!(f.request_id, json!({"requestId": "r", "connectionId": "2"}));
        assert_eq!((f.rating, f.comment), (json!("up"), None));
        let err = |m: &str, v: Value| match m {
            "recordUserFeedback" => Feedback::parse(m, &args(v)).err().unwrap().to_string(),
            _ => HideOp::parse(m, &args(v)).err().unwrap().to_string(),
        };
        assert_eq!(
            err(m, json!([{"requestId": ""}, "up"])),
            "Invalid argument 0 (requestId.requestId) of recordUserFeedback: expected a non-empty string"
        );
        assert_eq!(
            err(m, json!([{"requestId": "r"}, "meh"])),
            "Invalid argument 1 (rating) of recordUserFeedback: expected \"up\", \"down\" or null"
        );
        let long = "x".repeat(MAX_FEEDBACK_COMMENT_CHARS + 1);
        assert_eq!(
            err(m, json!([{"requestId": "r"}, null, null, long])),
            "Feedback comment too long: 4097 characters (at most 4096)"
        );
        assert_eq!(
            err("recordUserHide", json!([{"requestId": "r"}])),
            "Invalid argument 1 (hidden) of recordUserHide: expected a boolean"
        );
        assert_eq!(
            err("recordUserHide", json!([{"requestId": "r"}, true, "both"])),
            "Invalid argument 2 (target) of recordUserHide: expected \"user\" or \"agent\""
        );
        assert_eq!(
            hide_key(&json!({"requestId": {"requestId": "r"}, "target": "agent"})).as_deref(),
            Some("r::agent")
        );
        assert_eq!(
            hide_key(&json!({"requestId": {"requestId": "r"}})).as_deref(),
            Some("r::all")
        );
    }
}
