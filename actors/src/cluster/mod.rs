//! The cluster connection (`roundtable serve --cluster nats://HOST:PORT`): one NATS client per
//! node, and what lives in JetStream: the shared registry ([`registry_kv`], bucket
//! `rt_registry`), ownership leases ([`lease`], `rt_owners`), conversation files
//! ([`log_stream`], stream `RT_LOG`), the node list and cross-node search ([`search`],
//! `rt_nodes`, `rt.search`); taking a conversation over ([`takeover`]: its files made to hold
//! every acknowledged write, its subject claimed); the cluster secret's seals on every
//! node-to-node message ([`seal`]); and the node's cluster state for `/health` and `/metrics`. The
//! design as built is `docs/cluster.md`; the relays between nodes live in the transport
//! (`src/transport/relay/`). Those are the names of the default cluster name `rt`; every
//! bucket, stream and subject comes from [`names::Names`] (`--cluster-name`).
//!
//! Dependency direction: this module sits above the storage and the registry and implements
//! the traits they define; they never name it. The log writer's
//! [`Replicator`](crate::storage::replication::Replicator) is a [`log_stream::LogReplicator`];
//! the registry's [`ClusterServices`](crate::registry::ClusterServices) (its shared store and
//! its ownership leases) is a [`RegistryBackend`] (`backend.rs`).
//!
//! Who talks to it: `serve` connects ([`Cluster::connect`]) before the registry opens, starts
//! the log stream's [`LogReplicator`](log_stream::LogReplicator) and hands it to the log
//! writer, and hands a [`RegistryBackend`] to the registry actor (through `RegistryConfig`),
//! which does every create / rename / delete in the bucket first, keeps its in-memory list as
//! a copy fed by the bucket's watch, and takes, renews and gives back leases; the transport's
//! relays use [`Cluster::client`]; `/health` and `/metrics` read [`Cluster::status`].
//!
//! NATS itself reconnects forever (async-nats' default); while it is disconnected `/health`
//! answers 503 and every registry change answers `Cluster unavailable: …` instead of changing
//! only this node's copy.

mod auth;
mod backend;
pub mod lease;
pub mod log_stream;
pub mod names;
pub mod registry_kv;
pub mod seal;
pub mod search;
pub mod takeover;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream;
use futures_util::StreamExt;

pub use auth::ClusterAuth;
use auth::{connect_error_text, warn_if_anonymous};
pub use backend::RegistryBackend;
pub use names::Names;

/// How long one NATS or JetStream request may take before the change it belongs to fails with
/// `Cluster unavailable` (a registry change is a few KV operations).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Most JetStream replicas of a stream (JetStream's own limit).
pub const MAX_REPLICAS: usize = 5;

/// What `--cluster` and `--node-name` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `nats://HOST:PORT` (anything async-nats accepts, comma-separated for several servers).
    pub url: String,
    /// This node's name in the cluster: unique per node, `[A-Za-z0-9_-]`, 1..=64 characters
    /// (it becomes part of NATS subjects and KV values).
    pub node_name: String,
    /// How long an ownership lease lasts without renewal (`--lease-time`; failover takes about
    /// this long).
    pub lease_time: Duration,
    /// How often the node checks its copy of the conversation list against the registry
    /// bucket and repairs what its watch missed (`--reconcile-time`, `registry/reconcile.rs`).
    pub reconcile_time: Duration,
    /// JetStream replicas of every bucket and of the log stream this node creates
    /// (`--cluster-replicas`, 1..=[`MAX_REPLICAS`]); an existing one with another count is
    /// updated to it where JetStream allows.
    pub replicas: usize,
    /// The buckets, stream and subjects of this cluster (`--cluster-name`): clusters with
    /// different names share a NATS account without seeing each other.
    pub names: Names,
    /// How the node authenticates to NATS and checks its TLS certificate (`--cluster-user`,
    /// `--cluster-creds`, `--cluster-tls-ca`, …); credentials in the URL work as well.
    pub auth: ClusterAuth,
    /// The cluster secret (`--cluster-secret-file`, the same on every node): every message
    /// one node sends another is sealed with it ([`seal`]).
    pub secret: seal::ClusterSecret,
}

impl ClusterSettings {
    /// The URL as it may be shown or logged: credentials (`nats://user:pass@…`, a token)
    /// hidden.
    pub fn shown_url(&self) -> String {
        crate::redact::redact_server_list(&self.url)
    }

    /// Checks the node name (it ends up in subjects, so dots and wildcards are refused).
    pub fn validate_node_name(name: &str) -> Result<(), String> {
        if name.is_empty() || name.len() > 64 {
            return Err(format!(
                "node name {name:?} must be 1 to 64 characters long"
            ));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "node name {name:?} may contain only letters, digits, '-' and '_'"
            ));
        }
        Ok(())
    }
}

/// The servers of `--cluster`'s comma-separated list, each trimmed: what the config checks
/// item by item (an empty item is refused there) and what the node connects to.
pub fn server_list(url: &str) -> impl Iterator<Item = &str> {
    url.split(',').map(str::trim)
}

/// Why the cluster could not be reached or a cluster operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ClusterError(pub String);

impl ClusterError {
    fn new(context: &str, error: impl std::fmt::Display) -> ClusterError {
        // The error of a failed connect may repeat the URL it was given.
        ClusterError(crate::redact::redact_url_credentials(&format!(
            "{context}: {error}"
        )))
    }
}

/// Counters of the cluster layer, read by `/health` and `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Registry changes this node wrote to the bucket (create, rename, delete).
    pub registry_writes: AtomicU64,
    /// Writes refused by a compare-and-set (a name taken by another node, a record changed
    /// under a rename): each became the protocol's answer or a retry.
    pub registry_conflicts: AtomicU64,
    /// Changes this node learnt from the bucket's watch (its own included).
    pub watch_events: AtomicU64,
    /// Times this node checked its copy of the list against the whole bucket.
    pub registry_reconciles: AtomicU64,
    /// Changes those checks made to the copy: each one a change the watch had not delivered.
    pub registry_repairs: AtomicU64,
    /// Times the NATS connection was lost.
    pub disconnects: AtomicU64,
    /// Frames relayed between this node and others for cross-node joins (both directions),
    /// one per relayed client: a call this node relays to five clients on another node counts
    /// five.
    pub relayed_frames: AtomicU64,
    /// Copies of frame bytes this node sent toward other nodes' relayed clients: a call that
    /// five clients on one node get is one copy (their relays share one link), a frame for
    /// one client (a reply) is one.
    pub relayed_copies: AtomicU64,
    /// NATS messages this node published on relay links (each carries what its relays had
    /// queued at once).
    pub relay_link_messages: AtomicU64,
    /// Conversations whose ownership lease this node holds.
    pub owned: AtomicU64,
    /// Lease renewals that succeeded.
    pub lease_renewals: AtomicU64,
    /// Leases lost (a renewal failed: the conversation stopped here).
    pub leases_lost: AtomicU64,
    /// Nodes alive in `rt_nodes` at the last count (this one included).
    pub known_nodes: AtomicU64,
    /// Node-to-node messages refused by the cluster's own authentication ([`seal`]): a
    /// wrong or missing seal, a replay, a stale timestamp.
    pub auth_refused: AtomicU64,
}

impl ClusterStats {
    fn count_write(&self) {
        self.registry_writes.fetch_add(1, Ordering::Relaxed);
    }
    fn count_conflict(&self) {
        self.registry_conflicts.fetch_add(1, Ordering::Relaxed);
    }
    fn count_watch_event(&self) {
        self.watch_events.fetch_add(1, Ordering::Relaxed);
    }
    fn count_reconcile(&self, checks: usize, repairs: usize) {
        self.registry_reconciles
            .fetch_add(checks as u64, Ordering::Relaxed);
        self.registry_repairs
            .fetch_add(repairs as u64, Ordering::Relaxed);
    }
    pub(crate) fn set_owned(&self, n: usize) {
        self.owned.store(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn count_renewal(&self) {
        self.lease_renewals.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_lease_lost(&self) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// This node's handle on the cluster: cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    /// From `--cluster` / `--node-name`.
    settings: ClusterSettings,
    /// The NATS connection (reconnects by itself).
    client: async_nats::Client,
    /// The registry bucket (`rt_registry` by default).
    registry: jetstream::kv::Store,
    /// JetStream, for the log stream's publishes.
    js: jetstream::Context,
    /// The log stream (`RT_LOG` by default).
    log_stream: jetstream::stream::Stream,
    /// The ownership leases (`rt_owners` by default).
    owners: jetstream::kv::Store,
    /// The nodes alive (`rt_nodes` by default).
    nodes: jetstream::kv::Store,
    /// Counters (shared with the connection's event callback).
    stats: Arc<ClusterStats>,
    /// The cluster secret's key and what the checks of seals remember ([`seal`]).
    sealing: seal::Sealing,
}

/// A snapshot of the cluster state for `/health`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The cluster's name (`--cluster-name`).
    pub cluster: String,
    /// This node's name.
    pub node: String,
    /// `connected`, `connecting` or `disconnected`.
    pub nats: &'static str,
    /// The NATS URL from `--cluster`, credentials hidden.
    pub url: String,
    /// Registry changes written by this node.
    pub registry_writes: u64,
    /// Compare-and-set refusals.
    pub registry_conflicts: u64,
    /// Changes received from the watch.
    pub watch_events: u64,
    /// Checks of the copy against the whole bucket.
    pub registry_reconciles: u64,
    /// Changes those checks made (each one the watch had missed).
    pub registry_repairs: u64,
    /// Connection losses since start.
    pub disconnects: u64,
    /// Frames relayed for cross-node joins (one per relayed client).
    pub relayed_frames: u64,
    /// Copies of frame bytes sent toward relayed clients (one per call and node).
    pub relayed_copies: u64,
    /// NATS messages published on relay links.
    pub relay_link_messages: u64,
    /// Conversations owned (leases held).
    pub owned: u64,
    /// Lease renewals.
    pub lease_renewals: u64,
    /// Leases lost.
    pub leases_lost: u64,
    /// Nodes alive at the last count.
    pub nodes: u64,
    /// Node-to-node messages refused by the cluster's authentication.
    pub auth_refused: u64,
}

impl Cluster {
    /// Connects to NATS and opens (or creates) the registry bucket. Fails when NATS cannot be
    /// reached at start: a node that has never seen the cluster has nothing to serve.
    pub async fn connect(settings: ClusterSettings) -> Result<Cluster, ClusterError> {
        let stats = Arc::new(ClusterStats::default());
        let events = stats.clone();
        let node = settings.node_name.clone();
        let options = settings
            .auth
            .apply(async_nats::ConnectOptions::new())
            .await?;
        let client = options
            .name(format!("roundtable:{}", settings.node_name))
            .connection_timeout(REQUEST_TIMEOUT)
            .request_timeout(Some(REQUEST_TIMEOUT))
            .event_callback(move |event| {
                let events = events.clone();
                let node = node.clone();
                async move {
                    match event {
                        async_nats::Event::Disconnected => {
                            events.disconnects.fetch_add(1, Ordering::Relaxed);
                            log::warn!("cluster node {node}: NATS connection lost, reconnecting");
                        }
                        async_nats::Event::Connected => {
                            log::info!("cluster node {node}: NATS connected")
                        }
                        other => log::info!("cluster node {node}: NATS event: {other}"),
                    }
                }
            })
            // async-nats reads a `&str` as one URL: a comma-separated list is split here.
            .connect(server_list(&settings.url).collect::<Vec<_>>())
            .await
            .map_err(|e| {
                ClusterError::new(
                    &format!("cannot connect to {}", settings.shown_url()),
                    connect_error_text(&e.to_string()),
                )
            })?;
        let js = jetstream::new(client.clone());
        let (names, replicas) = (&settings.names, settings.replicas);
        let registry = registry_kv::open_bucket(&js, names, replicas).await?;
        let log_stream = Cluster::open_log_stream(&js, names, replicas).await?;
        let owners = lease::open_bucket(&js, names, settings.lease_time, replicas).await?;
        let nodes = search::open_bucket(&js, names, settings.lease_time, replicas).await?;
        warn_if_anonymous(&settings, &client);
        let sealing = seal::Sealing::new(&settings.secret);
        let cluster = Cluster {
            inner: Arc::new(Inner {
                sealing,
                settings,
                client,
                registry,
                js,
                log_stream,
                owners,
                nodes,
                stats,
            }),
        };
        log::info!(
            "cluster node {}: connected to {}",
            cluster.node(),
            cluster.inner.settings.shown_url()
        );
        Ok(cluster)
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.inner.settings.node_name
    }

    /// The cluster's buckets, stream and subjects.
    pub fn names(&self) -> &Names {
        &self.inner.settings.names
    }

    /// Whether NATS is connected right now.
    pub fn connected(&self) -> bool {
        matches!(self.inner.client.connection_state(), State::Connected)
    }

    /// `Err(Cluster unavailable …)` unless connected: writes check this first so that a node
    /// cut off from NATS answers at once instead of after a timeout.
    pub fn require_connected(&self) -> Result<(), ClusterError> {
        if self.connected() {
            Ok(())
        } else {
            Err(ClusterError("NATS is disconnected".into()))
        }
    }

    /// The counters.
    pub fn stats(&self) -> &ClusterStats {
        &self.inner.stats
    }

    /// The NATS connection (the transport's relays publish and subscribe on it).
    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    /// JetStream.
    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.inner.js
    }

    /// The owners bucket.
    pub(crate) fn owners_bucket(&self) -> &jetstream::kv::Store {
        &self.inner.owners
    }

    /// The bucket of live nodes.
    pub(crate) fn nodes_bucket(&self) -> &jetstream::kv::Store {
        &self.inner.nodes
    }

    /// How long a lease lasts without renewal.
    pub fn lease_time(&self) -> Duration {
        self.inner.settings.lease_time
    }

    /// The log stream.
    pub(crate) fn log_stream(&self) -> &jetstream::stream::Stream {
        &self.inner.log_stream
    }

    /// The registry bucket.
    pub(crate) fn registry_bucket(&self) -> &jetstream::kv::Store {
        &self.inner.registry
    }

    /// The cluster state for `/health`.
    pub fn status(&self) -> ClusterStatus {
        let stats = &self.inner.stats;
        ClusterStatus {
            cluster: self.names().cluster().to_string(),
            node: self.node().to_string(),
            nats: match self.inner.client.connection_state() {
                State::Connected => "connected",
                State::Pending => "connecting",
                State::Disconnected => "disconnected",
            },
            url: self.inner.settings.shown_url(),
            registry_writes: stats.registry_writes.load(Ordering::Relaxed),
            registry_conflicts: stats.registry_conflicts.load(Ordering::Relaxed),
            watch_events: stats.watch_events.load(Ordering::Relaxed),
            registry_reconciles: stats.registry_reconciles.load(Ordering::Relaxed),
            registry_repairs: stats.registry_repairs.load(Ordering::Relaxed),
            disconnects: stats.disconnects.load(Ordering::Relaxed),
            relayed_frames: stats.relayed_frames.load(Ordering::Relaxed),
            relayed_copies: stats.relayed_copies.load(Ordering::Relaxed),
            relay_link_messages: stats.relay_link_messages.load(Ordering::Relaxed),
            owned: stats.owned.load(Ordering::Relaxed),
            lease_renewals: stats.lease_renewals.load(Ordering::Relaxed),
            leases_lost: stats.leases_lost.load(Ordering::Relaxed),
            nodes: stats.known_nodes.load(Ordering::Relaxed),
            auth_refused: stats.auth_refused.load(Ordering::Relaxed),
        }
    }
}

/// Opens the KV bucket `bucket`, creating it when the cluster has none yet (another node may
/// create it between the two calls: then it is opened). Every Roundtable bucket keeps one
/// value per key, with `replicas` JetStream replicas (`--cluster-replicas`: an existing bucket
/// with another count is brought to it, see [`ensure_replicas`]); `max_age` zero keeps values
/// until deleted.
async fn open_or_create_bucket(
    js: &jetstream::Context,
    bucket: &str,
    description: &str,
    max_age: Duration,
    storage: jetstream::stream::StorageType,
    replicas: usize,
) -> Result<jetstream::kv::Store, ClusterError> {
    if let Ok(store) = js.get_key_value(bucket).await {
        let config = store.stream.cached_info().config.clone();
        ensure_replicas(js, &format!("bucket {bucket}"), config, replicas).await;
        return Ok(store);
    }
    log::info!("cluster: creating the bucket {bucket} with {replicas} replica(s)");
    // Built per attempt: the client's config type is not `Clone`.
    let config = || jetstream::kv::Config {
        bucket: bucket.into(),
        description: description.into(),
        history: 1,
        max_age,
        storage,
        num_replicas: replicas,
        ..Default::default()
    };
    let what = format!("bucket {bucket}");
    let created = while_placement_pending(&what, || js.create_key_value(config())).await;
    match created {
        Ok(store) => Ok(store),
        Err(create_error) => js.get_key_value(bucket).await.map_err(|_| {
            ClusterError::new(
                &format!("cannot create the bucket {bucket} with {replicas} replicas"),
                create_error,
            )
        }),
    }
}

/// How long a node waits for JetStream to place a new bucket or stream. A NATS cluster that
/// starts together with the nodes has elected its metadata leader before every server has
/// joined it, and until then it answers a create with more than one replica "no suitable
/// peers for placement" (10005) or "JetStream system temporarily unavailable" (10008).
const PLACEMENT_WAIT: Duration = Duration::from_secs(30);

/// Between two attempts while placement is pending.
const PLACEMENT_RETRY: Duration = Duration::from_millis(250);

/// Runs `create` (a bucket's or a stream's creation) again while JetStream answers that it
/// cannot place it yet, for at most [`PLACEMENT_WAIT`]; any other answer, or the last one, is
/// returned as it is. `what` names it in the log.
async fn while_placement_pending<T, E, F, Fut>(what: &str, mut create: F) -> Result<T, E>
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + PLACEMENT_WAIT;
    let mut said = false;
    loop {
        match create().await {
            Err(e) if placement_pending(&e) && tokio::time::Instant::now() < deadline => {
                if !said {
                    log::info!(
                        "cluster: JetStream cannot place the {what} yet ({e}); trying again \
                         for up to {} s while its servers join",
                        PLACEMENT_WAIT.as_secs()
                    );
                    said = true;
                }
                tokio::time::sleep(PLACEMENT_RETRY).await;
            }
            done => return done,
        }
    }
}

/// Whether `error` (or an error under it) is JetStream's "no suitable peers for placement"
/// or "JetStream system temporarily unavailable": a cluster still forming.
fn placement_pending(error: &(dyn std::error::Error + 'static)) -> bool {
    use jetstream::context::{CreateStreamError, CreateStreamErrorKind};
    use jetstream::ErrorCode;
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(create) = e.downcast_ref::<CreateStreamError>() {
            if let CreateStreamErrorKind::JetStream(js) = create.kind() {
                return matches!(
                    js.error_code(),
                    ErrorCode::CLUSTER_NO_PEERS | ErrorCode::CLUSTER_NOT_AVAILABLE
                );
            }
        }
        next = e.source();
    }
    false
}

/// Brings an existing stream (a bucket's, or the log stream; `what` names it in the log) to
/// `replicas` replicas when it has another count: JetStream moves a stream between replica
/// counts on a clustered server; where it refuses (a single server asked for more than one),
/// the node logs a warning and goes on with the stream as it is.
async fn ensure_replicas(
    js: &jetstream::Context,
    what: &str,
    mut config: jetstream::stream::Config,
    replicas: usize,
) {
    // JetStream reports 0 for a stream created without a count: that is one replica.
    let current = config.num_replicas.max(1);
    if current == replicas {
        return;
    }
    config.num_replicas = replicas;
    match js.update_stream(&config).await {
        // A single server answers the update but keeps one replica.
        Ok(info) if info.config.num_replicas.max(1) != replicas => log::warn!(
            "cluster: the {what} has {current} replica(s), not the {replicas} of \
             --cluster-replicas: JetStream kept {} on update; going on with it",
            info.config.num_replicas.max(1)
        ),
        Ok(_) => log::info!(
            "cluster: the {what} had {current} replica(s); updated to {replicas} \
             (--cluster-replicas)"
        ),
        Err(e) => log::warn!(
            "cluster: the {what} has {current} replica(s), not the {replicas} of \
             --cluster-replicas, and cannot be updated ({}); going on with {current}",
            crate::redact::redact_url_credentials(&e.to_string())
        ),
    }
}

impl Cluster {
    /// Reads, in order, every message of `stream` under `filter` that is there when the read
    /// starts (`policy`: all of them, or the last per subject) through an ordered consumer,
    /// handing each to `each`. `context` names the read in errors. `until`: the stream
    /// sequence the read must reach (the last message under `filter` when it started); a read
    /// that ends or stalls short of it fails instead of answering a prefix.
    async fn replay(
        &self,
        stream: &jetstream::stream::Stream,
        filter: String,
        policy: jetstream::consumer::DeliverPolicy,
        until: Option<u64>,
        context: &str,
        mut each: impl FnMut(&jetstream::Message),
    ) -> Result<(), ClusterError> {
        // What is read is counted against what the consumer said was there: under the
        // nemesis (a NATS server restarting) two nodes replaying the same subject up to the
        // same sequence got different numbers of records, and a takeover went on from the
        // shorter copy.
        let consumer = stream
            .create_consumer(jetstream::consumer::push::OrderedConfig {
                deliver_subject: self.client().new_inbox(),
                description: Some(format!("roundtable: {context}")),
                filter_subject: filter,
                deliver_policy: policy,
                replay_policy: jetstream::consumer::ReplayPolicy::Instant,
                ..Default::default()
            })
            .await
            .map_err(|e| ClusterError::new(context, e))?;
        let expected = consumer.cached_info().num_pending;
        let mut pending = expected;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| ClusterError::new(context, e))?;
        let mut reached = 0;
        let mut delivered: u64 = 0;
        while pending > 0 || until.is_some_and(|u| reached < u) {
            // A replay that stops delivering (a consumer lost while a NATS server restarts)
            // fails instead of hanging the caller forever; the caller may try again.
            let next = tokio::time::timeout(REQUEST_TIMEOUT, messages.next())
                .await
                .map_err(|_| {
                    ClusterError(format!(
                        "{context}: no message for {} s with {pending} still to come",
                        REQUEST_TIMEOUT.as_secs()
                    ))
                })?;
            let Some(message) = next else {
                break;
            };
            let message = message.map_err(|e| ClusterError::new(context, e))?;
            let info = message.info().map_err(|e| ClusterError::new(context, e))?;
            pending = info.pending;
            reached = info.stream_sequence;
            delivered += 1;
            each(&message);
        }
        if until.is_some_and(|u| reached < u) || delivered < expected {
            return Err(ClusterError(format!(
                "{context}: the read stopped short (stream sequence {reached} of {}, {delivered} \
                 of {expected} messages)",
                until.unwrap_or(reached)
            )));
        }
        Ok(())
    }
}

/// `key`'s entry in `bucket`, or `None` when it is absent or deleted (a KV delete leaves a
/// marker entry behind); `context` names the read in the error.
async fn live_entry(
    bucket: &jetstream::kv::Store,
    key: impl Into<String>,
    context: &str,
) -> Result<Option<jetstream::kv::Entry>, ClusterError> {
    let entry = bucket
        .entry(key)
        .await
        .map_err(|e| ClusterError::new(context, e))?;
    Ok(entry.filter(|e| matches!(e.operation, jetstream::kv::Operation::Put)))
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.node())
            .finish_non_exhaustive()
    }
}
