//! The `Conversation` actor's queue and lifecycle, driven by its own messages: clients are
//! attached with an [`Outbox`] the test reads and a connection [`Recipient`] the test counts;
//! the agent is a [`ScriptedProvider`] whose every call waits until the test answers it, so a
//! turn runs exactly as long as the test wants.
//!
//! [`Outbox`]: roundtable_actors::outbox::Outbox

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use roundtable_actors::agent::{
    ContentBlock, LocalBoxFuture, Provider, ProviderError, ProviderRequest, ProviderResponse,
};
use roundtable_actors::client::{ConversationGone, Ready, JOIN_SETTLE};
use roundtable_actors::conversation::{
    Attach, Conversation, ConversationSetup, Detach, DispatcherInvoke, DispatcherReply,
    RegistryHandle, RuntimeConfig, Shutdown, ShutdownReason, MAX_QUEUE_DEPTH,
};
use roundtable_actors::ids::{ConnectionId, ConversationId};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, OutboxLimits, OutboxReceiver, Outgoing};
use roundtable_actors::protocol::Args;
use roundtable_actors::registry::ConversationRegistry;
use roundtable_actors::storage::log_writer::LogWriter;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;

/// Longest wait for an expected event; reaching it means the test failed.
const WAIT: Duration = Duration::from_secs(20);
/// Timers the tests must never see fire (idle eviction, no-clients grace, interactions).
const NEVER: Duration = Duration::from_secs(3600);

/// One provider call waiting for the test: the user's command and where its answer goes.
struct ProviderCall {
    /// The command the turn runs.
    command: String,
    /// The assistant's text; dropping it fails the call.
    answer: oneshot::Sender<String>,
}

/// A provider whose every call is handed to the test and waits for its answer.
struct ScriptedProvider {
    /// Where calls go; closed once the conversation (the only owner) is dropped.
    calls: mpsc::UnboundedSender<ProviderCall>,
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let command = request
            .messages
            .first()
            .map(|m| m.joined_text())
            .unwrap_or_default();
        let (answer, answered) = oneshot::channel();
        let _ = self.calls.send(ProviderCall { command, answer });
        Box::pin(async move {
            let text = answered
                .await
                .map_err(|_| ProviderError::Unreachable("the test dropped the call".into()))?;
            Ok(ProviderResponse {
                content: vec![ContentBlock::Text { text }],
                usage: None,
            })
        })
    }
}

/// What a [`ConnectionProbe`] reports.
#[derive(Debug, PartialEq, Eq)]
enum ProbeEvent {
    /// Its `started` hook ran.
    Started,
    /// It got a `ConversationGone`.
    Gone,
    /// Its `stopped` hook ran (its client, the only holder of its address, is gone).
    Stopped,
}

/// Stands in for a socket's connection: the conversation's client holds it as a
/// `Recipient<ConversationGone>`; it reports its hooks and messages on `events`.
struct ConnectionProbe {
    /// Where the events go.
    events: mpsc::UnboundedSender<ProbeEvent>,
}

impl Actor for ConnectionProbe {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let _ = self.events.send(ProbeEvent::Started);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let _ = self.events.send(ProbeEvent::Stopped);
    }
}

impl Handler<ConversationGone> for ConnectionProbe {
    type Result = ();

    fn handle(&mut self, _msg: ConversationGone, _ctx: &mut Self::Context) {
        let _ = self.events.send(ProbeEvent::Gone);
    }
}

/// A started conversation and what the test observes of it.
struct Harness {
    /// The actor under test.
    conversation: Addr<Conversation>,
    /// Its persist directory.
    dir: PathBuf,
    /// Provider calls, in the order turns made them.
    calls: mpsc::UnboundedReceiver<ProviderCall>,
    /// The counters it shares with its clients.
    metrics: Arc<Metrics>,
    /// The registry's mailbox: the conversation reports idleness and counts there; only the
    /// idle test reads it (an envelope arriving is all it needs to know).
    registry_mailbox: actix::dev::channel::AddressReceiver<ConversationRegistry>,
    /// Holds the instance directory until the test ends.
    _instance: tempfile::TempDir,
}

/// Starts a conversation on a fresh instance directory with the scripted provider.
fn start() -> Harness {
    start_with(NEVER)
}

/// [`start`] with an idle timeout.
fn start_with(idle_timeout: Duration) -> Harness {
    let instance = tempfile::tempdir().expect("temp dir");
    let metrics = Arc::new(Metrics::default());
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let runtime = Arc::new(RuntimeConfig {
        providers: roundtable_actors::agent::providers::Providers::only(
            "scripted",
            Arc::new(ScriptedProvider { calls: calls_tx }),
        ),
        tool_servers: HashMap::new(),
        log_writer: LogWriter::start(metrics.clone(), instance.path().to_path_buf()),
        no_clients_grace: NEVER,
        max_iterations: 4,
        interaction_timeout: NEVER,
        instance_root: instance.path().to_path_buf(),
        log_filter: None,
        search: None,
        working_directory: Default::default(),
        compact_at: 90,
    });
    let id = ConversationId::new_random();
    let dir = instance.path().join("conversations").join(id.to_string());
    let (registry, registry_mailbox) = actix::dev::channel::channel(16);
    let conversation = Conversation::new(ConversationSetup {
        id,
        name: "test".into(),
        generation: 1,
        dir: dir.clone(),
        idle_timeout,
        registry: RegistryHandle::new(&Addr::new(registry)),
        metrics: metrics.clone(),
        runtime,
        client_count: Arc::default(),
        list_watched: Arc::default(),
    })
    .start();
    Harness {
        conversation,
        dir,
        calls,
        metrics,
        registry_mailbox,
        _instance: instance,
    }
}

/// One attached client: what its socket would receive, and its connection's events.
struct TestClient {
    /// Its connection id in the conversation.
    connection_id: ConnectionId,
    /// Frames queued toward its socket.
    frames: OutboxReceiver,
    /// Hooks and messages of its connection probe.
    events: mpsc::UnboundedReceiver<ProbeEvent>,
}

impl Harness {
    /// Attaches a client (not filtered) and marks it ready, as the transport does after the
    /// join answer.
    async fn join(&self) -> TestClient {
        self.attach(false).await.expect("attached")
    }

    /// Attaches a client as the registry does (`direct: false`) or as a connection that
    /// found the conversation in the live directory; `None` when the conversation refused.
    async fn attach(&self, direct: bool) -> Option<TestClient> {
        let (outbox, frames) = outbox(OutboxLimits::default());
        let (events_tx, events) = mpsc::unbounded_channel();
        // Only the client will hold the probe's address: the probe stops when the client does.
        let probe = ConnectionProbe { events: events_tx }.start();
        let (reply, attached) = oneshot::channel();
        self.conversation.do_send(Attach {
            direct,
            outbox,
            filter: false,
            connection: probe.recipient(),
            answer: None,
            reply,
        });
        let attached = within(attached).await.ok()??;
        attached.client.do_send(Ready);
        Some(TestClient {
            connection_id: attached.connection_id,
            frames,
            events,
        })
    }

    /// The client leaves (as its lease does); whether it was joined.
    async fn leave(&self, client: TestClient) -> bool {
        let (reply, left) = oneshot::channel();
        self.conversation.do_send(Detach {
            connection_id: client.connection_id,
            reply: Some(reply),
        });
        within(left)
            .await
            .expect("the conversation answers the leave")
    }

    /// One `dispatcher:<id>` invoke; its answer as JSON.
    async fn invoke(&self, client: &TestClient, method: &str, args: Value) -> Value {
        let Value::Array(args) = args else {
            panic!("args must be an array")
        };
        let reply = within(self.conversation.send(DispatcherInvoke {
            connection_id: client.connection_id,
            method: method.into(),
            args: Args(args),
            trace: None,
            in_line: None,
        }))
        .await
        .expect("the conversation answers")
        .expect("the invoke succeeds");
        match reply {
            DispatcherReply::Value(v) => v.unwrap_or(Value::Null),
            DispatcherReply::Raw(json) => serde_json::from_str(&json).expect("raw JSON"),
            DispatcherReply::Sent => panic!("answered in line without being asked to"),
        }
    }

    /// `submitCommand(text)` with `request_id` as the server-side id; its answer.
    async fn submit(&self, client: &TestClient, text: &str, request_id: &str) -> Value {
        self.invoke(
            client,
            "submitCommand",
            json!([text, null, null, null, request_id]),
        )
        .await
    }

    /// The next provider call a turn makes.
    async fn next_call(&mut self) -> ProviderCall {
        within(self.calls.recv()).await.expect("a provider call")
    }

    /// `cancelCommand(request_id)`'s `kind`.
    async fn cancel(&self, client: &TestClient, request_id: &str) -> Value {
        let answer = self
            .invoke(client, "cancelCommand", json!([request_id]))
            .await;
        assert_eq!(answer["requestId"], request_id);
        answer["kind"].clone()
    }
}

impl TestClient {
    /// Skips `clientio` calls until one named `method` whose args satisfy `wanted`; its args.
    async fn wait_for(&mut self, method: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let frame = within(self.frames.next()).await.expect("a frame");
            if matches!(frame, Outgoing::Pause(_)) {
                continue; // the writer's pause after the join result
            }
            let Some(text) = frame.to_text() else {
                panic!("expected a text frame, got {frame:?}")
            };
            let frame: Value = serde_json::from_str(&text).expect("frame JSON");
            let call = &frame["message"];
            if call["name"] == method && wanted(&call["args"]) {
                return call["args"].clone();
            }
        }
    }

    /// The next event of this client's connection probe.
    async fn next_event(&mut self) -> ProbeEvent {
        within(self.events.recv()).await.expect("a probe event")
    }
}

/// `future`'s output, or a panic after [`WAIT`].
async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    timeout(WAIT, future).await.expect("timed out waiting")
}

/// `notify(requestId, "commandComplete", …)` for `request_id`.
fn completes(request_id: &'static str) -> impl Fn(&Value) -> bool {
    move |args| args[1] == "commandComplete" && args[0]["requestId"] == request_id
}

/// Three submits run one at a time, in the order they arrived: the provider sees the second
/// command only once the first turn has finished, and clients see the completions in order.
#[actix::test]
async fn runs_one_turn_at_a_time_in_fifo_order() {
    let mut h = start();
    let mut client = h.join().await;
    for (text, id) in [("first", "r1"), ("second", "r2"), ("third", "r3")] {
        assert_eq!(h.submit(&client, text, id).await["ok"], true);
    }
    let first = h.next_call().await;
    assert_eq!(first.command, "first");
    let snapshot = h.invoke(&client, "getQueueSnapshot", json!([])).await;
    assert_eq!(snapshot["running"]["requestId"], "r1");
    let queued: Vec<&Value> = snapshot["queued"]
        .as_array()
        .expect("queued")
        .iter()
        .map(|e| &e["requestId"])
        .collect();
    assert_eq!(queued, [&json!("r2"), &json!("r3")]);
    assert!(h.calls.try_recv().is_err(), "a second turn started");

    first.answer.send("one".into()).expect("turn waits");
    client.wait_for("notify", completes("r1")).await;
    let second = h.next_call().await;
    assert_eq!(second.command, "second");
    assert!(h.calls.try_recv().is_err(), "a third turn started");

    second.answer.send("two".into()).expect("turn waits");
    client.wait_for("notify", completes("r2")).await;
    let third = h.next_call().await;
    assert_eq!(third.command, "third");
    third.answer.send("three".into()).expect("turn waits");
    client.wait_for("notify", completes("r3")).await;
}

/// With one request running, `MAX_QUEUE_DEPTH` more are queued; the next is refused with
/// `queue_full` and the queue is unchanged.
#[actix::test]
async fn refuses_submits_past_the_queue_depth_limit() {
    let mut h = start();
    let client = h.join().await;
    assert_eq!(h.submit(&client, "busy", "running").await["ok"], true);
    let _running = h.next_call().await;
    for n in 0..MAX_QUEUE_DEPTH {
        let answer = h.submit(&client, "wait", &format!("q{n}")).await;
        assert_eq!(answer["ok"], true, "{answer}");
    }
    let refused = h.submit(&client, "one too many", "over").await;
    assert_eq!(
        refused,
        json!({"ok": false, "error": "queue_full", "maxDepth": MAX_QUEUE_DEPTH})
    );
    let snapshot = h.invoke(&client, "getQueueSnapshot", json!([])).await;
    assert_eq!(
        snapshot["queued"].as_array().map(Vec::len),
        Some(MAX_QUEUE_DEPTH)
    );
    assert_eq!(snapshot["running"]["requestId"], "running");
}

/// `cancelCommand` removes a queued request (`cancelled_queued`) and stops the running one
/// (`cancelled_running`: its provider call is dropped); both are announced with
/// `requestCancelled`; asking again says `already_completed`, an unknown id `not_found`.
#[actix::test]
async fn cancels_a_queued_and_the_running_request() {
    let mut h = start();
    let mut client = h.join().await;
    assert_eq!(h.submit(&client, "long", "a").await["ok"], true);
    assert_eq!(h.submit(&client, "later", "b").await["ok"], true);
    let mut running = h.next_call().await;
    assert_eq!(running.command, "long");

    assert_eq!(h.cancel(&client, "b").await, "cancelled_queued");
    client
        .wait_for("requestCancelled", |a| a[0] == "b" && a[1] == "user")
        .await;
    assert_eq!(h.cancel(&client, "a").await, "cancelled_running");
    within(running.answer.closed()).await;
    client
        .wait_for("requestCancelled", |a| a[0] == "a" && a[1] == "user")
        .await;

    assert_eq!(h.cancel(&client, "a").await, "already_completed");
    assert_eq!(h.cancel(&client, "nope").await, "not_found");
    let snapshot = h.invoke(&client, "getQueueSnapshot", json!([])).await;
    assert_eq!(snapshot["running"], Value::Null);
    assert_eq!(snapshot["queued"], json!([]));
    assert!(h.calls.try_recv().is_err(), "the cancelled request started");
}

/// `commandComplete` reaches clients only after its `command-result` entry and the turn's
/// chat history are in the files: read at the moment the notification arrives, they hold them.
#[actix::test]
async fn announces_a_completion_only_after_its_records_are_on_disk() {
    let mut h = start();
    let mut client = h.join().await;
    assert_eq!(h.submit(&client, "hello", "h1").await["ok"], true);
    let call = h.next_call().await;
    call.answer.send("hi there".into()).expect("turn waits");
    client.wait_for("notify", completes("h1")).await;

    let log = std::fs::read_to_string(h.dir.join("displayLog.jsonl")).expect("display log");
    let result = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["e"]["type"] == "command-result" && l["e"]["requestId"]["requestId"] == "h1");
    assert!(result.is_some(), "no command-result in the log:\n{log}");
    let chat =
        std::fs::read_to_string(h.dir.join("sessions/chat/history.jsonl")).expect("chat history");
    assert!(chat.contains("hi there"), "{chat}");
    let journal = std::fs::read_to_string(h.dir.join("requests.jsonl")).expect("journal");
    assert!(journal.contains("h1"), "{journal}");
}

/// A delete tells every client (notice, `conversationDeleted`, `ConversationGone` to each
/// connection exactly once), answers, and stops the actor and its clients: each connection
/// probe is started once and stopped once, and the loaded / joined gauges return to zero.
#[actix::test]
async fn a_delete_tells_every_client_then_stops_everything() {
    let mut h = start();
    let mut clients = [h.join().await, h.join().await];
    for c in &mut clients {
        assert_eq!(c.next_event().await, ProbeEvent::Started);
    }
    assert_eq!(Metrics::gauge(&h.metrics.loaded_conversations), 1);

    let (reply, stopped) = oneshot::channel();
    h.conversation.do_send(Shutdown {
        reason: ShutdownReason::Deleted,
        reply,
    });
    within(stopped).await.expect("shutdown answered");
    for c in &mut clients {
        c.wait_for("notify", |a| a[1] == "conversationDeleted")
            .await;
        assert_eq!(c.next_event().await, ProbeEvent::Gone);
        assert_eq!(c.next_event().await, ProbeEvent::Stopped);
        assert!(c.events.recv().await.is_none(), "more probe events");
    }
    // The conversation held the only provider: its channel closes when the actor is dropped,
    // after its `stopped` hook ran.
    assert!(within(h.calls.recv()).await.is_none());
    assert_eq!(Metrics::gauge(&h.metrics.loaded_conversations), 0);
    assert_eq!(Metrics::gauge(&h.metrics.joined_clients), 0);
    let status = h.conversation.send(DispatcherInvoke {
        connection_id: ConnectionId(0),
        method: "getStatus".into(),
        args: Args(Vec::new()),
        trace: None,
        in_line: None,
    });
    assert!(within(status).await.is_err(), "a stopped actor answered");
}

/// A connection that found the conversation in the live directory attaches straight to it,
/// until the conversation has reported idleness to the registry: from then on a direct attach
/// is refused (its joiner asks the registry, which orders the join against the eviction), until
/// the registry's own attach arrives. A stopping conversation refuses one too.
#[actix::test]
async fn direct_attaches_are_refused_once_idleness_was_reported() {
    use futures_util::StreamExt;
    let mut h = start_with(Duration::from_millis(1));
    let first = h.attach(true).await.expect("a direct attach while live");
    assert_eq!(Metrics::get(&h.metrics.direct_joins), 1);
    assert!(h.leave(first).await, "the direct client was joined");
    // Nobody watches the list and no turn ran: the first envelope up is the idle report.
    within(h.registry_mailbox.next())
        .await
        .expect("the idle report");
    assert!(
        h.attach(true).await.is_none(),
        "a direct attach after the idle report must be refused"
    );
    let through_registry = h.attach(false).await.expect("the registry's attach");
    let direct = h
        .attach(true)
        .await
        .expect("a direct attach once the registry's attach arrived");
    assert_eq!(Metrics::get(&h.metrics.direct_joins), 2);
    let (reply, stopped) = oneshot::channel();
    h.conversation.do_send(Shutdown {
        reason: ShutdownReason::ServerStopping,
        reply,
    });
    assert!(
        h.attach(true).await.is_none(),
        "a stopping conversation refuses a direct attach"
    );
    within(stopped).await.expect("stopped");
    drop((through_registry, direct));
}

/// A direct attach with `answer` is answered on the conversation's thread: the answer gets
/// the attachment, and what it queues comes first, then the client is live without `Ready`
/// (its status dismissals follow at once). An answer that finds its joiner gone undoes the
/// join.
#[actix::test]
async fn a_direct_attach_can_be_answered_by_the_conversation_itself() {
    let h = start();
    let (queue, mut frames) = outbox(OutboxLimits::default());
    let probe = ConnectionProbe {
        events: mpsc::unbounded_channel().0,
    }
    .start();
    let answer_queue = queue.clone();
    let (told, attached) = oneshot::channel();
    let (reply, outcome) = oneshot::channel();
    h.conversation.do_send(Attach {
        direct: true,
        outbox: queue,
        filter: false,
        connection: probe.clone().recipient(),
        answer: Some(Box::new(move |attached| {
            answer_queue.push("the join result".into()).unwrap();
            let _ = told.send(attached.connection_id);
            true
        })),
        reply,
    });
    assert!(
        within(outcome).await.expect("answered").is_none(),
        "answered by the conversation: nothing for the connection to answer"
    );
    let connection_id = within(attached)
        .await
        .expect("the answer got the attachment");
    let first = within(frames.next()).await.expect("a frame");
    assert_eq!(first.to_text().as_deref(), Some("the join result"));
    let pause = within(frames.next()).await.expect("a frame");
    assert!(
        matches!(pause, Outgoing::Pause(p) if p == JOIN_SETTLE),
        "the result's write ends before the conversation's first frames: {pause:?}"
    );
    for _ in 0..2 {
        let frame = within(frames.next())
            .await
            .expect("a status dismissal, no Ready sent");
        let frame: Value = serde_json::from_str(&frame.to_text().unwrap()).unwrap();
        assert_eq!(frame["message"]["args"][1], "statusNotice", "{frame}");
    }
    let client = TestClient {
        connection_id,
        frames,
        events: mpsc::unbounded_channel().1,
    };

    // The joiner is gone by the time the conversation answers: nobody stays joined.
    let (queue, _frames) = outbox(OutboxLimits::default());
    let (reply, outcome) = oneshot::channel();
    h.conversation.do_send(Attach {
        direct: true,
        outbox: queue,
        filter: false,
        connection: probe.recipient(),
        answer: Some(Box::new(|_| false)),
        reply,
    });
    assert!(
        within(outcome).await.is_err(),
        "no outcome: the join was undone"
    );
    let undone = TestClient {
        connection_id: ConnectionId(connection_id.0 + 1),
        frames: outbox(OutboxLimits::default()).1,
        events: mpsc::unbounded_channel().1,
    };
    assert!(!h.leave(undone).await, "the second join was undone");
    assert!(h.leave(client).await, "the first client was joined");
}
