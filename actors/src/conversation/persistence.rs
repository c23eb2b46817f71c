//! What the conversation writes and when it may say so: write barriers (calls held in order
//! until the writer confirms an fsync, see "Acknowledged means durable" in the module above),
//! display-log and request-journal appends, backpressure from the shared log writer, the
//! recovery of requests a crash left open, and closing the files on [`Shutdown`].
//!
//! Who talks to it: every other part of the conversation (through `after_durable`,
//! `journal`, `log_entry`); the [`LogWriter`](crate::storage::log_writer::LogWriter) answers the barriers.
//!
//! [`Shutdown`]: super::Shutdown

use actix::prelude::*;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::outbound_order::Release;
use super::queue::STOPPED_BEFORE_FINISHING;
use super::request_queue::request_id_obj;
use super::routing::DisplayMode;
use super::ConversationEvent;
use super::{Conversation, ShutdownReason};
use crate::client::StopClient;
use crate::ids::RequestId;
use crate::metrics::Metrics;
use crate::storage::display_log;
use crate::storage::requests::{self, OpenRequest, Record};

/// What runs when a write barrier is confirmed (or failed): it may emit, write and queue work;
/// its calls go out at the barrier's place in the order.
pub(super) type Continuation =
    Box<dyn FnOnce(&mut Conversation, Result<(), String>, &mut Context<Conversation>)>;

/// A `Shutdown` in progress.
pub(super) struct PendingStop {
    /// Answered when everything is closed and sent.
    reply: oneshot::Sender<()>,
    /// Clients are told their conversation went away (delete, move).
    notify_connection: bool,
    /// The conversation moved to another node: connections join it again there.
    moved: bool,
    /// The writer has closed (or retired) the files.
    files_closed: bool,
}

/// A display-log entry as the log takes it (an object; anything else is empty).
fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl Conversation {
    /// Queues a write barrier: `then` runs once every write queued so far is durable (or with
    /// the first error one of this conversation's files met), and every call emitted after
    /// this one waits for it.
    pub(super) fn after_durable(
        &mut self,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Self, Result<(), String>, &mut Context<Self>) + 'static,
    ) {
        let mut paths = vec![
            self.chat_path.clone(),
            self.requests_path.clone(),
            self.meter_path.clone(),
        ];
        if let Ok(log) = &self.log {
            paths.push(log.path().clone());
        }
        // A turn runs or waits: another barrier follows soon, and the fsync may wait for it.
        let written = if self.queue.is_busy() {
            self.setup.runtime.log_writer.sync_followed(paths)
        } else {
            self.setup.runtime.log_writer.sync(paths)
        };
        let ticket = self.outbound.barrier(Box::new(then));
        ctx.spawn(
            async move {
                written
                    .await
                    .unwrap_or_else(|_| Err("the log writer has stopped".into()))
            }
            .into_actor(self)
            .map(move |outcome, act, ctx| act.release(ticket, outcome, ctx)),
        );
    }

    /// Records a barrier's outcome, then sends what is no longer held: calls up to the first
    /// unconfirmed barrier, running each confirmed barrier's continuation at its place.
    fn release(&mut self, ticket: u64, result: Result<(), String>, ctx: &mut Context<Self>) {
        self.outbound.confirm(ticket, result);
        while let Some(release) = self.outbound.next_release() {
            match release {
                Release::Calls(calls) => self.deliver(&calls),
                Release::Continue(then, outcome) => {
                    then(self, outcome, ctx);
                    self.outbound.continuation_done();
                }
            }
        }
        self.complete_stop(ctx);
    }

    /// Appends to the request journal (rewriting it with only the open requests once it has
    /// grown past [`requests::COMPACT_AFTER_BYTES`] and past twice what it held after its last
    /// rewrite, so the bytes written stay proportional to the bytes journaled).
    pub(super) fn journal(&mut self, record: Record) {
        let closes_after_durable = false;
        self.journal_record(record, closes_after_durable);
    }

    /// [`journal`](Self::journal) for the `closed` record of a request whose result is
    /// already durable (see [`LogWriter::append_unreported`](crate::storage::log_writer::LogWriter::append_unreported)).
    pub(super) fn journal_closed_after_durable(&mut self, request_id: RequestId) {
        self.journal_record(Record::Closed { request_id }, true);
    }

    /// Keeps `open_requests` in step with the journal, then queues the record.
    fn journal_record(&mut self, record: Record, closes_after_durable: bool) {
        match &record {
            Record::Accepted(accepted) => self.open_requests.push(OpenRequest {
                accepted: accepted.clone(),
                started_seq: None,
            }),
            Record::Started { request_id, seq } => {
                if let Some(open) = self
                    .open_requests
                    .iter_mut()
                    .find(|o| &o.accepted.request_id == request_id)
                {
                    open.started_seq = Some(*seq);
                }
            }
            Record::Closed { request_id } => self
                .open_requests
                .retain(|o| &o.accepted.request_id != request_id),
        }
        if self.writes_closed {
            return;
        }
        let line = record.line();
        self.requests_appended += line.len() as u64;
        let writer = &self.setup.runtime.log_writer;
        if self.requests_appended > requests::COMPACT_AFTER_BYTES.max(2 * self.requests_live) {
            let bytes: Vec<u8> = self
                .open_requests
                .iter()
                .flat_map(OpenRequest::records)
                .collect();
            self.requests_appended = bytes.len() as u64;
            self.requests_live = bytes.len() as u64;
            // The writer logs a failure; the appended journal it would replace stays valid.
            drop(writer.replace(&self.requests_path, bytes));
        } else if closes_after_durable {
            // Its result is already durable: losing this line only costs start-up recovery
            // a look at the log, so its failure must not fail a later acknowledgement.
            writer.append_unreported(&self.requests_path, line);
        } else {
            writer.append(&self.requests_path, line);
        }
    }

    /// Appends a display-log entry; returns its seq (`None` when the log is unavailable or
    /// the conversation is closing its files).
    pub(super) fn log_entry(&mut self, entry: Value) -> Option<u64> {
        if self.writes_closed {
            return None;
        }
        let log = self.log.as_mut().ok()?;
        let before = log.message_count();
        if let Some(search) = &self.setup.runtime.search {
            // Observed before the append moves the entry; a send, never a wait.
            if let crate::search::Observed::Settled { seq, doc } =
                self.search_turn.observe(log.next_seq(), &entry)
            {
                search.add(self.setup.id, seq, doc);
            }
        }
        let seq = log.append(obj(entry));
        let after = log.message_count();
        if after != before {
            self.setup
                .registry
                .events
                .do_send(ConversationEvent::MessageCount {
                    id: self.setup.id,
                    count: after,
                });
        }
        Some(seq)
    }

    /// Pauses this actor (its mailbox and its running turn, not the arbiter thread) while the
    /// log writer's queue is over its bound.
    pub(super) fn throttle(&mut self, ctx: &mut Context<Self>) {
        let writer = &self.setup.runtime.log_writer;
        if writer.backlogged() {
            Metrics::inc(&self.setup.metrics.writer_backpressure);
            log::warn!(
                "conversation {}: log writer backlog ({} bytes); pausing",
                self.setup.id,
                writer.queued_bytes()
            );
            let writer = writer.clone();
            ctx.wait(async move { writer.drained().await }.into_actor(self));
        }
    }

    /// Closes the requests a crash left open: each acknowledged request that never finished
    /// gets its `user-request` (if it never started), an error line and a failed
    /// `command-result`, unless the log already holds its result.
    pub(super) fn recover_requests(&mut self, ctx: &mut Context<Self>) {
        let open = match requests::read_open(&self.requests_path) {
            Ok(open) => open,
            Err(e) => {
                log::error!(
                    "conversation {}: cannot read {}: {e}",
                    self.setup.id,
                    self.requests_path.display()
                );
                return;
            }
        };
        if open.is_empty() {
            return;
        }
        self.open_requests = open.clone();
        let mut closed = 0;
        for request in &open {
            let a = &request.accepted;
            // A `started` is journalled just before its `user-request`: the crash may have
            // come between the two.
            let mut logged = false;
            if let Some(seq) = request.started_seq {
                let (user_request, result) = self.logged_since(seq, &a.request_id);
                if result {
                    continue;
                }
                logged = user_request;
            }
            closed += 1;
            let id = request_id_obj(a.connection_id, &a.request_id, &a.client_request_id);
            if !logged {
                // As a request that starts: `started` first, so that a second recovery (the
                // conversation taken over again before this one's `closed` reached the log
                // stream, which the nemesis did) finds this user-request and its result
                // instead of writing them twice.
                if let Ok(log) = &self.log {
                    let seq = log.next_seq();
                    self.journal(Record::Started {
                        request_id: a.request_id.clone(),
                        seq,
                    });
                }
                self.log_entry(
                    json!({"type": "user-request", "requestId": id, "command": a.command}),
                );
            }
            // What its answer had written, as far as it was checkpointed.
            self.recover_answer(&a.request_id, &id, request.started_seq);
            self.log_entry(json!({
                "type": "append-display",
                "message": {
                    "message": {"type": "text", "content": STOPPED_BEFORE_FINISHING, "kind": "error"},
                    "requestId": id,
                    "source": "system",
                },
                "mode": DisplayMode::Block.as_str(),
            }));
            self.log_entry(json!({
                "type": "command-result",
                "requestId": id,
                "error": STOPPED_BEFORE_FINISHING,
            }));
        }
        if closed > 0 {
            log::warn!(
                "conversation {}: {closed} acknowledged requests never finished before the server stopped; their history now says so",
                self.setup.id
            );
        }
        self.forget_recovered_checkpoints();
        let ids: Vec<RequestId> = open.into_iter().map(|o| o.accepted.request_id).collect();
        self.after_durable(ctx, move |act, written, _| match written {
            Ok(()) => {
                for request_id in ids {
                    act.journal_closed_after_durable(request_id);
                }
            }
            Err(e) => log::error!(
                "conversation {}: could not record the recovery of unfinished requests: {e}",
                act.setup.id
            ),
        });
    }

    /// Whether the display log holds, from `seq` on, `request_id`'s `user-request` (at
    /// `seq`) and its `command-result`.
    fn logged_since(&self, seq: u64, request_id: &RequestId) -> (bool, bool) {
        let Ok(log) = &self.log else {
            return (false, false);
        };
        let entries: Vec<Value> = display_log::read_range(log.path(), seq, log.next_seq())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .collect();
        let is = |e: &Value, kind: &str| {
            e["type"] == kind && e["requestId"]["requestId"] == request_id.as_str()
        };
        let user_request = entries.first().is_some_and(|e| is(e, "user-request"));
        let result = entries.iter().any(|e| is(e, "command-result"));
        (user_request, result)
    }

    /// Stops writing and hands the files to the writer to close; the
    /// [`Shutdown`](super::Shutdown) is answered on `reply` once they are closed and every held
    /// call has gone out. Deleted or moved: the clients' connections are told to drop their
    /// channels for this conversation (moved: and to join it again on the node that took it
    /// over). Evicted has no clients; at server stop the sockets close anyway.
    pub(super) fn close_files(
        &mut self,
        reason: ShutdownReason,
        reply: oneshot::Sender<()>,
        ctx: &mut Context<Self>,
    ) {
        let delete = reason == ShutdownReason::Deleted;
        let moved = reason == ShutdownReason::Moved;
        // Nothing is written after this point: the writer closes the files after every write
        // queued so far, and only then does the actor answer. A delete's directory is retired
        // by the registry once the delete is journaled, so a delete that fails leaves the
        // conversation writable.
        self.writes_closed = true;
        let writer = self.setup.runtime.log_writer.clone();
        let mut closing = vec![
            writer.close(&self.chat_path),
            writer.close(&self.requests_path),
            writer.close(&self.meter_path),
        ];
        if let Ok(log) = &self.log {
            closing.push(writer.close(log.path()));
        }
        self.pending_stop = Some(PendingStop {
            reply,
            notify_connection: delete || moved,
            moved,
            files_closed: false,
        });
        ctx.spawn(
            async move {
                for c in closing {
                    let _ = c.await;
                }
            }
            .into_actor(self)
            .map(|(), act, ctx| {
                if let Some(stop) = act.pending_stop.as_mut() {
                    stop.files_closed = true;
                }
                act.complete_stop(ctx);
            }),
        );
    }

    /// Ends a `Shutdown` once the files are closed and nothing is held any more.
    fn complete_stop(&mut self, ctx: &mut Context<Self>) {
        let done = self
            .pending_stop
            .as_ref()
            .is_some_and(|s| s.files_closed && self.outbound.is_empty());
        if !done {
            return;
        }
        let stop = self.pending_stop.take().expect("checked");
        for (_, slot) in std::mem::take(&mut self.clients) {
            slot.addr.do_send(StopClient {
                notify_connection: stop.notify_connection,
                moved: stop.moved.then(|| slot.output.next_call_id()),
            });
        }
        let _ = stop.reply.send(());
        ctx.stop();
    }
}
