//! The `ConversationRegistry` lifecycle, driven by its messages: the catalog (create, rename,
//! delete, list, find), lazy load on join, idle eviction and reload, the generation guard
//! against stale idle reports, delete with a joined client, and shutdown.
//!
//! Conversation actors are counted through `Metrics::loaded_conversations`, the gauge their
//! `started` / `stopped` hooks move (as `actix/tests/test_supervisor.rs` counts hooks).
//! Everything waits on an event with a deadline (an answer, a channel, or
//! `Metrics::lifecycle`, which the hooks and the registry's load-state changes bump); nothing
//! sleeps or polls.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::client::ConversationGone;
use roundtable_actors::conversation::RuntimeConfig;
use roundtable_actors::ids::{ConversationId, ConversationRef};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, OutboxLimits, OutboxReceiver};
use roundtable_actors::protocol::{ConversationInfo, RpcError, RpcResult};
use roundtable_actors::registry::{
    join_loaded, CollisionBehavior, ConversationEvent, ConversationExists, ConversationRegistry,
    CreateConversation, DeleteConversation, FindConversations, GetRegistryStats, JoinConversation,
    Joined, ListConversations, LiveConversation, LiveDirectory, RegistryConfig, RegistryStats,
    RenameConversation, ShutdownRegistry,
};
use roundtable_actors::storage::layout::Layout;
use roundtable_actors::storage::log_writer::LogWriter;
use roundtable_actors::storage::registry_file;
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::mpsc;

/// How long any awaited event may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);
/// An idle timeout no test reaches: eviction happens only when a test asks for it.
const NEVER_IDLE: Duration = Duration::from_secs(3600);

/// A registry on its own temporary instance directory.
struct Instance {
    /// Deleted when the test ends.
    _dir: TempDir,
    layout: Layout,
    metrics: Arc<Metrics>,
    registry: Addr<ConversationRegistry>,
    /// The registry's loaded conversations, as the transport reads them.
    directory: Arc<LiveDirectory>,
}

/// Opens and starts a registry the way `src/server/mod.rs` does, with conversations on the
/// registry's own arbiter. Call inside a `System`.
fn start(idle_timeout: Duration) -> Instance {
    let dir = tempfile::tempdir().expect("temp dir");
    let layout = Layout::new(dir.path());
    let metrics = Arc::new(Metrics::default());
    let directory = Arc::new(LiveDirectory::new());
    let registry = ConversationRegistry::open(RegistryConfig {
        layout: layout.clone(),
        idle_timeout,
        repair: false,
        conversation_arbiters: Vec::new(),
        metrics: metrics.clone(),
        runtime: Arc::new(RuntimeConfig {
            providers: roundtable_actors::agent::providers::Providers::only(
                "builtin",
                Arc::new(BuiltinProvider),
            ),
            tool_servers: HashMap::new(),
            log_writer: LogWriter::start(metrics.clone(), layout.root.clone()),
            no_clients_grace: Duration::from_secs(30),
            max_iterations: 10,
            interaction_timeout: Duration::from_secs(60),
            instance_root: layout.root.clone(),
            log_filter: None,
            search: None,
            working_directory: Default::default(),
            compact_at: 90,
        }),
        cluster: None,
        directory: directory.clone(),
    })
    .expect("open the registry");
    Instance {
        _dir: dir,
        layout,
        metrics,
        directory,
        registry: Supervisor::start(move |_| registry),
    }
}

/// Runs one test's body inside its own actix `System`.
fn run<F: Future<Output = ()>>(body: impl FnOnce() -> F) {
    System::new().block_on(async move { body().await });
}

/// Awaits `f`, failing the test after [`WAIT`].
async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The socket side of a join: receives `ConversationGone` into a channel.
struct Socket {
    gone: mpsc::UnboundedSender<ConversationId>,
}

impl Actor for Socket {
    type Context = Context<Self>;
}

impl Handler<ConversationGone> for Socket {
    type Result = ();

    fn handle(&mut self, msg: ConversationGone, _ctx: &mut Self::Context) {
        let _ = self.gone.send(msg.conversation_id);
    }
}

/// One joined client: the join's answer, and what its socket holds.
struct Member {
    joined: Joined,
    /// Kept open: a dropped queue would close the client as a slow consumer.
    _frames: OutboxReceiver,
    /// Conversation ids the registry's side said went away under this socket.
    gone: mpsc::UnboundedReceiver<ConversationId>,
}

/// `joinConversation` from a fresh socket: `None` joins the default conversation.
async fn try_join(inst: &Instance, conversation_id: Option<&str>) -> RpcResult<Member> {
    try_join_ref(inst, conversation_id.map(ConversationRef::parse)).await
}

/// [`try_join`] naming the conversation as the transport does, parsed.
async fn try_join_ref(inst: &Instance, conversation: Option<ConversationRef>) -> RpcResult<Member> {
    let (queue, frames) = outbox(OutboxLimits::default());
    let (gone_tx, gone) = mpsc::unbounded_channel();
    let socket = Socket { gone: gone_tx }.start();
    let pending = inst
        .registry
        .send(JoinConversation {
            conversation_id: conversation,
            filter: false,
            already_joined: Vec::new(),
            outbox: queue,
            connection: socket.recipient(),
        })
        .await
        .expect("registry answers");
    let joined = within("the join", pending).await?;
    Ok(Member {
        joined,
        _frames: frames,
        gone,
    })
}

async fn join(inst: &Instance, conversation_id: Option<ConversationId>) -> Member {
    let named = conversation_id.map(|id| ConversationRef::parse(id.to_string()));
    try_join_ref(inst, named).await.expect("join")
}

/// `leaveConversation` for `member`, as the transport sends it (through its lease).
async fn leave(_inst: &Instance, member: Member) -> RpcResult<()> {
    within("the leave", member.joined.lease.leave()).await
}

/// A join straight to `live`, as the transport makes it when the directory lists the
/// conversation (the conversation answers it and hands over the membership); `None` when the
/// conversation refused (the transport then asks the registry).
async fn join_direct(id: ConversationId, live: LiveConversation) -> Option<Member> {
    let (queue, frames) = outbox(OutboxLimits::default());
    let (gone_tx, gone) = mpsc::unbounded_channel();
    let socket = Socket { gone: gone_tx }.start();
    let handed = Arc::new(std::sync::Mutex::new(None));
    let slot = handed.clone();
    let deliver = Box::new(move |joined| {
        *slot.lock().unwrap() = Some(joined);
        true
    });
    let answered = within(
        "the direct join",
        join_loaded(id, live, false, queue, socket.recipient(), deliver),
    )
    .await;
    if !answered {
        return None;
    }
    let joined = handed
        .lock()
        .unwrap()
        .take()
        .expect("the membership handed over");
    Some(Member {
        joined,
        _frames: frames,
        gone,
    })
}

async fn create(
    inst: &Instance,
    name: &str,
    collision: Option<&str>,
) -> RpcResult<ConversationInfo> {
    inst.registry
        .send(CreateConversation {
            name: name.to_owned(),
            collision: CollisionBehavior::from_option(collision),
        })
        .await
        .expect("registry answers")
}

async fn rename(inst: &Instance, id: &str, new_name: &str) -> RpcResult<()> {
    inst.registry
        .send(RenameConversation {
            id: ConversationRef::parse(id),
            new_name: new_name.to_owned(),
            collision: CollisionBehavior::Error,
        })
        .await
        .expect("registry answers")
}

async fn delete(inst: &Instance, id: &str) -> RpcResult<()> {
    let answer = inst.registry.send(DeleteConversation {
        id: ConversationRef::parse(id),
    });
    within("the delete", answer)
        .await
        .expect("registry answers")
}

/// Names from `listConversations(filter)`, in registry order.
async fn list(inst: &Instance, filter: Option<&str>) -> Vec<String> {
    let text = inst
        .registry
        .send(ListConversations {
            filter: filter.map(str::to_owned),
            answer: None,
        })
        .await
        .expect("registry answers");
    let listed: Vec<Value> = serde_json::from_str(&text).expect("a JSON array");
    listed
        .iter()
        .map(|c| c["name"].as_str().expect("a name").to_owned())
        .collect()
}

async fn stats(inst: &Instance) -> RegistryStats {
    inst.registry
        .send(GetRegistryStats)
        .await
        .expect("registry answers")
}

/// Conversation actors alive: started minus stopped.
fn alive(inst: &Instance) -> i64 {
    Metrics::gauge(&inst.metrics.loaded_conversations)
}

fn evictions(inst: &Instance) -> u64 {
    Metrics::get(&inst.metrics.evictions)
}

/// Waits until the registry counts `loaded` live conversations and `loaded` actors are alive.
/// Both change only with a lifecycle event (a `started` / `stopped` hook, a registry load-state
/// change: an idle timer fires inside the conversation, a `stopped` hook runs just after the
/// actor's last answer), so the counts are read again after each one; fails after [`WAIT`].
async fn until_loaded(inst: &Instance, loaded: usize) {
    let mut changes = inst.metrics.lifecycle.subscribe();
    within("the loaded counts", async {
        loop {
            // Marked seen before reading, so a change during the read wakes the next wait.
            changes.borrow_and_update();
            if stats(inst).await.loaded == loaded && alive(inst) == loaded as i64 {
                return;
            }
            changes
                .changed()
                .await
                .expect("the metrics outlive the test");
        }
    })
    .await;
}

/// A fresh instance has `default`; create, rename, find, list and delete change the catalog
/// (and only it: nothing is loaded), with TypeAgent's collision rules and error texts.
#[test]
fn catalog_create_rename_find_list_delete() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        assert_eq!(list(&inst, None).await, ["default"]);

        let alpha = create(&inst, "Alpha", None).await.expect("create Alpha");
        assert_eq!(alpha.name, "Alpha");
        assert_eq!(alpha.client_count, 0);
        assert_eq!(
            create(&inst, " alpha ", None).await.unwrap_err(),
            RpcError::NameExists("Alpha".into())
        );
        let numbered = create(&inst, "alpha", Some("appendNumber"))
            .await
            .expect("numbered");
        assert_eq!(numbered.name, "alpha (1)");
        assert_eq!(
            create(&inst, "x", Some("overwrite")).await.unwrap_err(),
            RpcError::UnknownCollisionBehavior("overwrite".into())
        );
        assert_eq!(list(&inst, None).await, ["default", "Alpha", "alpha (1)"]);
        assert_eq!(list(&inst, Some("ALP")).await, ["Alpha", "alpha (1)"]);

        let alpha_id = alpha.conversation_id.to_string();
        rename(&inst, &alpha_id, "Beta").await.expect("rename");
        assert_eq!(
            rename(&inst, &alpha_id, "DEFAULT").await.unwrap_err(),
            RpcError::NameExists("default".into())
        );
        // An unknown id, in upper case and braces, is quoted as sent.
        let unknown = format!("{{{}}}", ConversationId::new_random()).to_uppercase();
        assert_eq!(
            rename(&inst, &unknown, "Gamma").await.unwrap_err(),
            RpcError::ConversationNotFound(unknown.clone())
        );
        assert_eq!(
            rename(&inst, "../escape", "Gamma").await.unwrap_err(),
            RpcError::ConversationNotFound("../escape".into())
        );
        let found = inst
            .registry
            .send(FindConversations {
                query: "  beta ".into(),
                max_matches: None,
            })
            .await
            .expect("registry answers");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].conversation.name, "Beta");
        assert_eq!(found[0].score, 1.0);

        // Any UUID form names the conversation.
        delete(&inst, &alpha_id.to_uppercase())
            .await
            .expect("delete");
        assert_eq!(list(&inst, None).await, ["default", "alpha (1)"]);
        let exists = inst.registry.send(ConversationExists {
            id: ConversationRef::parse(alpha_id.as_str()),
        });
        assert!(!exists.await.expect("registry answers"));
        assert_eq!(
            delete(&inst, &alpha_id).await.unwrap_err(),
            RpcError::ConversationNotFound(alpha_id.clone())
        );
        // The name is free again.
        create(&inst, "Beta", None).await.expect("Beta again");

        let figures = stats(&inst).await;
        assert_eq!((figures.conversations, figures.loaded), (3, 0));
        assert_eq!(alive(&inst), 0, "the catalog loads nothing");
    });
}

/// A join starts the conversation's actor (lazily, once: a second client joins the same actor);
/// leaving keeps it loaded until the idle timeout.
#[test]
fn join_loads_the_conversation_once() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        assert_eq!(stats(&inst).await.loaded, 0);
        assert_eq!(alive(&inst), 0);

        let first = join(&inst, None).await;
        assert_eq!(first.joined.result["name"], "default");
        assert_eq!(stats(&inst).await.loaded, 1);
        assert_eq!(alive(&inst), 1, "one actor started by the join");

        let id = first.joined.conversation_id;
        let second = join(&inst, Some(id)).await;
        assert_eq!(second.joined.conversation_id, id);
        assert_ne!(second.joined.connection_id, first.joined.connection_id);
        assert_eq!(alive(&inst), 1, "the second join reuses the actor");
        assert_eq!(list(&inst, None).await, ["default"]);

        let unknown = ConversationId::new_random().to_string();
        assert_eq!(
            try_join(&inst, Some(&unknown)).await.err(),
            Some(RpcError::ConversationNotFound(unknown))
        );
        assert_eq!(
            try_join(&inst, Some("not-a-uuid")).await.err(),
            Some(RpcError::ConversationNotFound("not-a-uuid".into()))
        );

        leave(&inst, first).await.expect("first leaves");
        leave(&inst, second).await.expect("second leaves");
        assert_eq!(
            stats(&inst).await.loaded,
            1,
            "idle, but not past the timeout"
        );
        assert_eq!(alive(&inst), 1);
        assert_eq!(evictions(&inst), 0);
    });
}

/// A loaded conversation is in the live directory under its current name, and a join through
/// it reaches the same actor without the registry; a delete takes it out, and a join through
/// the address it had is refused.
#[test]
fn joins_of_a_loaded_conversation_skip_the_registry() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        let first = join(&inst, None).await;
        let id = first.joined.conversation_id;
        let live = inst.directory.get(&id).expect("listed once loaded");
        assert_eq!(&*live.name, "default");
        assert_eq!(Metrics::get(&inst.metrics.direct_joins), 0);

        let direct = join_direct(id, live.clone()).await.expect("a direct join");
        assert_eq!(direct.joined.conversation_id, id);
        assert_eq!(direct.joined.result["name"], "default");
        assert_ne!(direct.joined.connection_id, first.joined.connection_id);
        assert_eq!(Metrics::get(&inst.metrics.direct_joins), 1);
        assert_eq!(alive(&inst), 1, "the same actor");

        rename(&inst, &id.to_string(), "Renamed")
            .await
            .expect("rename");
        let renamed = inst.directory.get(&id).expect("still listed");
        assert_eq!(&*renamed.name, "Renamed");
        let second = join_direct(id, renamed).await.expect("a direct join");
        assert_eq!(second.joined.result["name"], "Renamed");

        leave(&inst, direct).await.expect("a direct client leaves");
        leave(&inst, second).await.expect("so does the second");
        delete(&inst, &id.to_string()).await.expect("delete");
        assert!(inst.directory.get(&id).is_none(), "a delete takes it out");
        assert!(inst.directory.is_empty());
        assert!(
            join_direct(id, live).await.is_none(),
            "the deleted conversation's actor refuses"
        );
        drop(first);
    });
}

/// With a tiny idle timeout, the last leave lets the conversation's actor stop (evicted); a
/// rejoin starts a fresh one.
#[test]
fn idle_eviction_then_rejoin_reloads() {
    run(|| async {
        let inst = start(Duration::from_millis(20));
        let member = join(&inst, None).await;
        let id = member.joined.conversation_id;
        assert_eq!(alive(&inst), 1);
        leave(&inst, member).await.expect("leave");

        until_loaded(&inst, 0).await;
        assert_eq!(evictions(&inst), 1);
        assert!(
            inst.directory.get(&id).is_none(),
            "an evicted one is not listed"
        );

        let again = join(&inst, Some(id)).await;
        assert!(inst.directory.get(&id).is_some(), "the reloaded one is");
        assert_eq!(again.joined.conversation_id, id);
        assert_eq!(stats(&inst).await.loaded, 1);
        assert_eq!(alive(&inst), 1, "a fresh actor for the rejoin");
        // Joined again: it is not evicted while the client stays.
        assert_eq!(evictions(&inst), 1);
        leave(&inst, again).await.expect("leave again");
        until_loaded(&inst, 0).await;
        assert_eq!(evictions(&inst), 2);
    });
}

/// Idle reports are trusted only when their generation and attach count are the entry's: a
/// join that arrives while the conversation stops waits and reloads it (generation 2), and
/// late reports about generation 1, or about fewer attaches than were sent, evict nothing.
#[test]
fn stale_idle_report_after_a_rejoin_does_not_evict() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        let member = join(&inst, None).await;
        let id = member.joined.conversation_id;
        leave(&inst, member).await.expect("leave");

        // The idle report of the first actor (generation 1, one attach): evicts.
        inst.registry.do_send(ConversationEvent::IdleExpired {
            id,
            generation: 1,
            attaches_seen: 1,
        });
        assert_eq!(stats(&inst).await.loaded, 0, "evicting");
        assert_eq!(evictions(&inst), 1);

        // This join waits for the old actor to flush, then a new one (generation 2) takes it.
        let member = join(&inst, Some(id)).await;
        until_loaded(&inst, 1).await;

        for (generation, attaches_seen) in [(1, 1), (2, 0)] {
            inst.registry.do_send(ConversationEvent::IdleExpired {
                id,
                generation,
                attaches_seen,
            });
        }
        let figures = stats(&inst).await;
        assert_eq!(figures.loaded, 1, "stale reports are ignored");
        assert_eq!(evictions(&inst), 1);
        assert_eq!(alive(&inst), 1);
        leave(&inst, member).await.expect("still joined");
    });
}

/// Deleting a conversation with a joined client stops its actor, tells the client's socket
/// that the conversation went away, and removes it: joins now answer `Conversation not found`.
#[test]
fn delete_with_a_joined_client_closes_it() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        let info = create(&inst, "doomed", None).await.expect("create");
        let id = info.conversation_id;
        let mut member = join(&inst, Some(id)).await;
        assert_eq!(alive(&inst), 1);

        delete(&inst, &id.to_string()).await.expect("delete");
        let gone = within("ConversationGone", member.gone.recv()).await;
        assert_eq!(gone, Some(id));
        member.joined.lease.disarm();

        until_loaded(&inst, 0).await;
        assert_eq!(evictions(&inst), 0, "a delete is not an eviction");
        assert_eq!(list(&inst, None).await, ["default"]);
        assert!(!inst.layout.conversation_dir(&id).exists());
        let id = id.to_string();
        assert_eq!(
            try_join(&inst, Some(&id)).await.err(),
            Some(RpcError::ConversationNotFound(id))
        );
    });
}

/// Shutdown stops every loaded conversation, folds the registry into `conversations.json`,
/// records the clean shutdown, and refuses new work.
#[test]
fn shutdown_stops_conversations_and_saves_the_registry() {
    run(|| async {
        let inst = start(NEVER_IDLE);
        create(&inst, "kept", None).await.expect("create");
        let member = join(&inst, None).await;
        assert_eq!(alive(&inst), 1);

        let stopped = inst.registry.send(ShutdownRegistry);
        within("the shutdown", stopped)
            .await
            .expect("registry answers");
        until_loaded(&inst, 0).await;

        let saved =
            roundtable_actors::storage::registry_load::load_registry(&inst.layout, false, None)
                .expect("a readable registry");
        let names: Vec<_> = saved.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["default", "kept"]);
        assert!(!saved.needs_fold, "the journal was folded");
        assert!(registry_file::take_clean_marker(&inst.layout).expect("marker readable"));

        assert_eq!(
            create(&inst, "late", None).await.unwrap_err(),
            RpcError::ServerStopping
        );
        assert_eq!(
            try_join(&inst, None).await.err(),
            Some(RpcError::ServerStopping)
        );
        member.joined.lease.disarm();
    });
}
