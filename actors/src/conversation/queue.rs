//! The command queue: one request runs at a time, the others wait FIFO (an `interrupt` goes
//! first). Submit, start, finish, cancel, promote and the snapshot every queue event carries.
//!
//! Who talks to it: the dispatcher (client requests), the turn (finish), the timers and
//! `Shutdown` (cancel everything). What a started request does is decided in `commands.rs`.
//! The queue's state and rules are the plain machine `RequestQueue` (`request_queue.rs`);
//! this file applies what it decides: the calls, the journal records, the barriers, the
//! snapshot timer.
//!
//! # What clients see of one request
//! In TypeAgent's order (`dispatcher` `commandHandlerContext.ts`, `requestQueue.ts`):
//! `requestQueued`, `requestStarted`, `setUserRequest`, `setDisplayInfo` (what runs: the
//! command's words, or `dispatcher request` for an agent turn, then one per tool call), its
//! displays, `notify contextMeter` to everyone when the request changed the context meter
//! (Roundtable's extension, `meter.rs`), `notify commandComplete` with `{result: {metrics,
//! traceId, lastError?}}`, and the
//! queue's snapshot in `queueStateChanged`, sent at most once per [`SNAPSHOT_COALESCE`]
//! (the newest state wins), so a quick request gets one, after its completion.
//!
//! A queued request that is cancelled gets `requestCancelled` only; a running one gets
//! `requestCancelled`, then `commandComplete` with `{result: {cancelled: true, metrics,
//! traceId}}` (and its `command-result` log entry). The `reason` on the wire is TypeAgent's
//! `QueueCancelReason` ([`CancelReason::wire`]); the conversation's own, finer reason goes
//! into the chat note and the logs.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::audience::Audience;
use super::dispatcher::InvokeOrigin;
use super::request_queue::{
    AfterEnqueue, CancelOutcome, CancelReason, Location, Promotion, Request, Start, STORAGE_ERROR,
};
use super::routing::{self, DisplayMode};
use super::Conversation;
use crate::agent::{ChatMessage, Role};
use crate::ids::{ConnectionId, RequestId};
use crate::storage::requests::{AcceptedRequest, Record};

/// What the history says of a request that was acknowledged but never finished (crash).
pub const STOPPED_BEFORE_FINISHING: &str =
    "The server stopped before this request finished; it did not complete.";
/// At most one `queueStateChanged` per this long, carrying the newest snapshot (TypeAgent's
/// snapshot coalescer, `queue/snapshotCoalescer.ts`): a request that starts and finishes
/// within it costs its clients one snapshot, not three.
pub const SNAPSHOT_COALESCE: Duration = Duration::from_millis(100);

impl Conversation {
    /// The queue changed: every client gets the snapshot in a `queueStateChanged`, at most
    /// once per [`SNAPSHOT_COALESCE`] (the first change arms the timer; the snapshot is
    /// taken when it fires, so the newest state wins).
    pub(super) fn queue_changed(&mut self, ctx: &mut Context<Self>) {
        if !self.queue.snapshot_due() {
            return;
        }
        ctx.run_later(SNAPSHOT_COALESCE, |act, _| {
            let snapshot = act.queue.snapshot_fired();
            act.broadcast("queueStateChanged", json!([snapshot]), None);
        });
    }

    /// A new snapshot is due when the running request started or stopped waiting on a
    /// question since the last one went out (its `blockedOn` changed).
    pub(super) fn announce_blocked_change(&mut self, ctx: &mut Context<Self>) {
        if self.queue.blocked_change_unannounced() {
            self.queue_changed(ctx);
        }
    }

    /// Where `request` works: its `options.workingDirectory` (else the directory its client
    /// used last) through the working-directory policy. The options then carry the resolved
    /// directory (or none), as TypeAgent's server rewrites them before queueing.
    fn resolve_working_directory(&mut self, request: &mut Request) {
        let requested = request
            .options
            .as_ref()
            .and_then(|o| o.get("workingDirectory"))
            .filter(|w| !w.is_null());
        let slot = self.clients.get_mut(&request.origin);
        let proposed = match requested {
            Some(Value::String(dir)) => Some(dir.clone()),
            // Not a path at all: rejected, like a path that is no directory.
            Some(_) => Some(String::new()),
            None => slot
                .as_ref()
                .and_then(|s| s.working_directory.as_ref())
                .map(|d| d.to_string_lossy().into_owned()),
        };
        let resolution = self
            .setup
            .runtime
            .working_directory
            .resolve(proposed.as_deref());
        if resolution.rejected {
            log::info!(
                "conversation {}: request {} trace={}: working directory {:?} is not an allowed \
                 directory; using {:?}",
                self.setup.id,
                request.request_id,
                request.trace_id,
                proposed.unwrap_or_default(),
                resolution.working_directory
            );
        }
        if let (Some(slot), Some(dir)) = (slot, &resolution.working_directory) {
            slot.working_directory = Some(dir.clone());
        }
        let mut options = match request.options.take() {
            Some(Value::Object(o)) => o,
            _ => serde_json::Map::new(),
        };
        options.remove("workingDirectory");
        if let Some(dir) = &resolution.working_directory {
            options.insert(
                "workingDirectory".into(),
                dir.to_string_lossy().into_owned().into(),
            );
        }
        request.options = (!options.is_empty()).then_some(Value::Object(options));
        request.working_directory = resolution.working_directory;
    }

    /// Queues a request (`front`: an `interrupt`, which goes first and then cancels the
    /// running request, as TypeAgent's `interrupt` does). `Err` is a refusal to answer at
    /// once; `Ok` resolves once the acceptance is durable (a failed write cancels the request
    /// and turns the answer into a `storage_error` refusal) with the answer, or with `None`
    /// when it was queued on the requester's socket at the barrier's place (`in_line`: ahead
    /// of every call of the request).
    pub(super) fn submit(
        &mut self,
        mut request: Request,
        front: bool,
        in_line: Option<InvokeOrigin>,
        ctx: &mut Context<Self>,
    ) -> Result<oneshot::Receiver<Option<Value>>, Value> {
        if self.stopping {
            return Err(json!({"ok": false, "error": "server_stopping"}));
        }
        if let Err(e) = &self.log {
            return Err(json!({"ok": false, "error": e}));
        }
        if let Some(refusal) = self.queue.refusal(request.size) {
            return Err(refusal);
        }
        if let Some(cause) = self.setup.metrics.storage_failure() {
            return Err(json!({"ok": false, "error": STORAGE_ERROR, "message": cause.client}));
        }
        // A new submit supersedes a turn stalled on an interaction.
        if self.queue.supersedes(front) {
            self.cancel_running(CancelReason::Superseded, ctx);
        }
        self.resolve_working_directory(&mut request);
        self.journal(Record::Accepted(AcceptedRequest {
            request_id: request.request_id.clone(),
            connection_id: request.origin,
            client_request_id: request.client_request_id.clone(),
            command: request.text.clone(),
            submitted_at: request.submitted_at,
        }));
        let (accepted_tx, accepted_rx) = oneshot::channel();
        // The answer depends on whether this submit started the request (below); the barrier
        // resolves later, when it is known.
        let answer_slot: Rc<RefCell<Option<Value>>> = Rc::default();
        let answer_later = answer_slot.clone();
        let origin = request.origin;
        let request_id = request.request_id.clone();
        let trace_id = request.trace_id.clone();
        let enqueued = self.queue.enqueue(request, front);
        // The acceptance's barrier, registered once the request is queued: a barrier follows
        // soon (its completion's), so with the node log the fsync may wait for it, and an
        // idle conversation's fast turn (a command, an echo) makes one fsync, not two in a
        // row. A slow turn's answer waits at most `SYNC_LINGER` more.
        self.after_durable(ctx, move |act, written, ctx| {
            let answer = match &written {
                Ok(()) => answer_later.borrow_mut().take().expect("set by submit"),
                Err(cause) => json!({"ok": false, "error": STORAGE_ERROR, "message": cause}),
            };
            let answer = match in_line {
                Some(invoke) => {
                    act.answer_in_line(origin, &invoke, &answer);
                    None
                }
                None => Some(answer),
            };
            if let Err(e) = &written {
                log::error!(
                    "conversation {}: request {request_id} could not be recorded: {e}",
                    act.setup.id
                );
                act.cancel_by_id(&request_id, CancelReason::StorageError, ctx);
            }
            let _ = accepted_tx.send(answer);
        });
        log::debug!(
            "conversation {}: request {} trace={trace_id} queued{}",
            self.setup.id,
            enqueued.entry["requestId"].as_str().unwrap_or_default(),
            if front { " first (interrupt)" } else { "" }
        );
        self.broadcast(
            "requestQueued",
            json!([enqueued.entry, enqueued.version]),
            None,
        );
        self.queue_changed(ctx);
        match enqueued.then {
            // The interrupt is at the head: cancelling the running request starts it.
            AfterEnqueue::InterruptRunning => self.cancel_running(CancelReason::Interrupted, ctx),
            AfterEnqueue::StartNext => self.start_next(ctx),
        }
        // Started by this submit (and perhaps already finished, as an `@` command does):
        // `running` with its `startedAt`, as TypeAgent answers on an idle queue.
        *answer_slot.borrow_mut() = Some(self.queue.submit_answer(enqueued.entry));
        Ok(accepted_rx)
    }

    /// Queues the answer to `invoke` on the socket of `origin` (when it is still here), in
    /// line with the calls this conversation sends it.
    fn answer_in_line(&mut self, origin: ConnectionId, invoke: &InvokeOrigin, answer: &Value) {
        let id = self.setup.id;
        if let Some(slot) = self.clients.get_mut(&origin).filter(|s| !s.lost) {
            let frame =
                crate::protocol::invoke_result(&invoke.channel, invoke.call_id, Some(answer));
            let sent = slot.output.send_frame(frame);
            routing::settle(id, origin, slot, sent);
        }
    }

    /// Starts the first queued request when nothing runs (`requestStarted`, `user-request`,
    /// `setUserRequest`, `setDisplayInfo`, then the command or agent turn it asks for).
    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let (request, turn, version) = match self.queue.start_next(crate::clock::now_millis()) {
            Start::Busy => return,
            Start::Empty => {
                self.queue_changed(ctx);
                return;
            }
            Start::Started {
                request,
                turn,
                version,
            } => (request, turn, version),
        };
        self.broadcast(
            "requestStarted",
            json!([request.entry("running"), version]),
            None,
        );
        self.queue_changed(ctx);
        log::debug!(
            "conversation {}: request {} started (trace={})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        // The journal's `started` goes before the `user-request` it names: whatever prefix of
        // the writes survives a crash (or reaches another node through the log stream), a
        // `user-request` on disk always has its `started`, so recovery never writes a second
        // one (the nemesis found that duplicate after a kill -9 between the two).
        if let Ok(log) = &self.log {
            self.journal(Record::Started {
                request_id: request.request_id.clone(),
                seq: log.next_seq(),
            });
        }
        self.log_entry(
            json!({"type": "user-request", "requestId": request.id_obj(), "command": request.text}),
        );
        self.broadcast(
            "setUserRequest",
            json!([request.id_obj(), request.text]),
            Some(request.origin),
        );
        if let Some((source, words)) = super::grammar::display_info(&request.text) {
            self.set_display_info(&request, source, None, json!(words));
        }
        if let Some(r) = self.queue.running_mut() {
            r.timing.parsed();
        }
        self.run_request(turn, &request, ctx);
    }

    /// `setDisplayInfo(requestId, source, actionIndex, action)` to every client (what the
    /// request runs now: its command's words, or one tool call), logged as a
    /// `set-display-info` entry (`actionIndex` / `action` only when given).
    pub(super) fn set_display_info(
        &mut self,
        request: &Request,
        source: &str,
        action_index: Option<usize>,
        action: Value,
    ) {
        let mut entry =
            json!({"type": "set-display-info", "requestId": request.id_obj(), "source": source});
        if let Some(i) = action_index {
            entry["actionIndex"] = i.into();
        }
        if !action.is_null() {
            entry["action"] = action.clone();
        }
        self.log_entry(entry);
        self.broadcast(
            "setDisplayInfo",
            json!([request.id_obj(), source, action_index, action]),
            Some(request.origin),
        );
    }

    /// Completes the running request: `command-result`, then `commandComplete` with its
    /// `CommandResult` (`metrics`, `traceId`, `lastError` when it failed).
    pub(super) fn finish(&mut self, turn: u64, error: Option<String>, ctx: &mut Context<Self>) {
        if self.is_current(turn) {
            self.stream_cut_short(super::answer_stream::CutShort::Incomplete, ctx);
        }
        let Some(running) = self.queue.finish(turn) else {
            return;
        };
        self.forget_checkpoints(&running);
        let metrics = running.timing.metrics();
        let request = running.request;
        log::debug!(
            "conversation {}: request {} trace={} finished{} in {:.1} ms",
            self.setup.id,
            request.request_id,
            request.trace_id,
            if error.is_some() {
                " with an error"
            } else {
                ""
            },
            metrics["duration"].as_f64().unwrap_or_default()
        );
        self.log_entry(json!({
            "type": "command-result",
            "requestId": request.id_obj(),
            "metrics": metrics,
            "traceId": request.trace_id,
        }));
        // A meter change the request made (its line is queued before the barrier below) is
        // announced with it, before commandComplete.
        let meter_notice = self.take_meter_notice();
        // commandComplete only once the result is on disk; the journal closes it after that.
        self.after_durable(ctx, move |act, written, _| {
            let error = match (error, written) {
                (error, Ok(())) => {
                    act.journal_closed_after_durable(request.request_id.clone());
                    if let Some(notice) = meter_notice {
                        act.emit(notice, &Audience::Everyone);
                    }
                    error
                }
                (error, Err(w)) => {
                    log::error!(
                        "conversation {}: result of {} not saved: {w}",
                        act.setup.id,
                        request.request_id
                    );
                    let saved = format!("the result could not be saved: {w}");
                    Some(error.map_or(saved.clone(), |e| format!("{e} ({saved})")))
                }
            };
            let mut result = json!({"metrics": metrics, "traceId": request.trace_id});
            if let Some(e) = &error {
                result["lastError"] = e.clone().into();
                result["disposition"] = failure_disposition(&request.text, &metrics);
            }
            act.broadcast(
                "notify",
                json!([
                    request.id_obj(),
                    "commandComplete",
                    {"result": result},
                    "system",
                    null,
                    null
                ]),
                Some(request.origin),
            );
        });
        self.start_next(ctx);
    }

    /// Shows `content` for the running request (one block), then completes it.
    pub(super) fn finish_showing(
        &mut self,
        turn: u64,
        request: &Request,
        content: Value,
        error: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        self.display(request, content, None, DisplayMode::Block);
        self.finish(turn, error, ctx);
    }

    /// Cancels a queued request; false when it is not queued.
    fn cancel_queued(
        &mut self,
        request_id: &RequestId,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Some((request, version)) = self.queue.cancel_queued(request_id) else {
            return false;
        };
        self.journal(Record::Closed {
            request_id: request.request_id.clone(),
        });
        log::debug!(
            "conversation {}: queued request {} trace={} cancelled ({reason})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        self.announce_cancel(request.request_id, reason, version, None, ctx);
        self.queue_changed(ctx);
        true
    }

    /// Cancels every queued request (not the running one); returns how many.
    pub(super) fn cancel_all_queued(
        &mut self,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> usize {
        let queued = self.queue.waiting_ids();
        for id in &queued {
            self.cancel_queued(id, reason, ctx);
        }
        queued.len()
    }

    /// `requestCancelled`, once the cancellation is on disk; for a request that was running,
    /// `completed` is its `commandComplete` (`{result: {cancelled: true, …}}`, to its
    /// originator's audience), which follows at once.
    fn announce_cancel(
        &mut self,
        request_id: RequestId,
        reason: CancelReason,
        version: u64,
        completed: Option<(Value, ConnectionId)>,
        ctx: &mut Context<Self>,
    ) {
        self.after_durable(ctx, move |act, written, _| {
            if let Err(e) = written {
                log::error!(
                    "conversation {}: cancellation of {request_id} not saved: {e}",
                    act.setup.id
                );
            }
            log::info!(
                "conversation {}: {request_id} cancelled ({reason}), saved and announced \
                 (requestCancelled reason {})",
                act.setup.id,
                reason.wire()
            );
            act.broadcast(
                "requestCancelled",
                json!([request_id, reason.wire(), version]),
                None,
            );
            if let Some((complete, origin)) = completed {
                act.broadcast("notify", complete, Some(origin));
            }
        });
    }

    /// Stops the running request (its turn, its questions), notes it in the chat history,
    /// logs its `command-result`, announces it (`requestCancelled`, then `commandComplete`
    /// with `cancelled: true`) and starts the next one. Nothing happens when nothing runs.
    pub(super) fn cancel_running(&mut self, reason: CancelReason, ctx: &mut Context<Self>) {
        // The answer so far stays, marked cancelled.
        self.stream_cut_short(super::answer_stream::CutShort::Cancelled, ctx);
        let Some((running, version)) = self.queue.take_running() else {
            return;
        };
        self.forget_checkpoints(&running);
        let metrics = running.timing.metrics();
        if let Some(h) = running.handle {
            ctx.cancel_future(h);
        }
        self.cancel_questions_of(&running.request.request_id, ctx);
        // Keep the chat history coherent: the user's message and a note, no dangling tool use.
        self.commit_chat(vec![
            ChatMessage::text(Role::User, running.request.text.clone()),
            ChatMessage::text(Role::Assistant, format!("(request cancelled: {reason})")),
        ]);
        let request = running.request;
        self.log_entry(json!({
            "type": "command-result",
            "requestId": request.id_obj(),
            "metrics": metrics,
            "traceId": request.trace_id,
        }));
        let complete = json!([
            request.id_obj(),
            "commandComplete",
            {"result": {"cancelled": true, "metrics": metrics, "traceId": request.trace_id}},
            "system",
            null,
            null
        ]);
        self.journal(Record::Closed {
            request_id: request.request_id.clone(),
        });
        self.announce_cancel(
            request.request_id.clone(),
            reason,
            version,
            Some((complete, request.origin)),
            ctx,
        );
        log::info!(
            "conversation {}: running request {} trace={} cancelled ({reason})",
            self.setup.id,
            request.request_id,
            request.trace_id
        );
        self.start_next(ctx);
    }

    /// Cancels a request wherever it is.
    pub(super) fn cancel_by_id(
        &mut self,
        request_id: &RequestId,
        reason: CancelReason,
        ctx: &mut Context<Self>,
    ) -> CancelOutcome {
        match self.queue.locate(request_id) {
            Location::Queued => {
                self.cancel_queued(request_id, reason, ctx);
                CancelOutcome::CancelledQueued
            }
            Location::Running => {
                self.cancel_running(reason, ctx);
                CancelOutcome::CancelledRunning
            }
            Location::Finished => CancelOutcome::AlreadyCompleted,
            Location::Unknown => CancelOutcome::NotFound,
        }
    }

    /// Moves a queued request to the front; false when it is not queued (running, finished
    /// or unknown). Already first: true and nothing changes (no new version, no
    /// `queueStateChanged`), as TypeAgent's `requestQueue.promote`.
    pub(super) fn promote(&mut self, request_id: &RequestId, ctx: &mut Context<Self>) -> bool {
        match self.queue.promote(request_id) {
            Promotion::NotQueued => false,
            Promotion::AlreadyFirst => true,
            Promotion::Moved => {
                self.queue_changed(ctx);
                true
            }
        }
    }
}

/// Where a failed request failed, as TypeAgent's `CommandResult.disposition`: an `@` command
/// (`command`; `@dispatcher request <text>` is the agent turn it runs), or an agent turn
/// (`action`), with side effects possible once a tool ran (`metrics.actions`).
fn failure_disposition(text: &str, metrics: &Value) -> Value {
    let path = match super::commands::parse(text) {
        Some(super::commands::Command::Request(inner))
            if super::commands::parse(&inner).is_none() =>
        {
            "action"
        }
        Some(_) => "command",
        None => "action",
    };
    json!({
        "status": "failed",
        "path": path,
        "mayHaveSideEffects": metrics["actions"].as_array().is_some_and(|a| !a.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_path_and_whether_tools_ran() {
        let none = json!({"actions": []});
        let ran = json!({"actions": [{"tool": "calculate"}]});
        let path = |text: &str| failure_disposition(text, &none)["path"].clone();
        assert_eq!(path("@system bogus"), "command");
        assert_eq!(path("@dispatcher request @system bogus"), "command");
        assert_eq!(path("@dispatcher request what is 2+3"), "action");
        assert_eq!(path("what is 2+3"), "action");
        assert_eq!(
            failure_disposition("what is 2+3", &ran),
            json!({"status": "failed", "path": "action", "mayHaveSideEffects": true})
        );
    }
}
