//! The HTTP routes: `GET /health` (JSON), `GET /metrics` (Prometheus text), and on every other
//! path a WebSocket upgrade after [`super::guards::upgrade_refusal`] — or, for a plain request,
//! the web client's files ([`super::web::respond`]) or 404. TypeAgent clients connect to `/`;
//! its server upgrades on any path. The conformance echo endpoint, when configured, is an
//! upgrade path served by the same transport.
//!
//! Registered by [`super::serve`]; every handler reads the shared [`AppState`].

use std::fmt::Write as _;
use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Data;
use actix_web::{HttpRequest, HttpResponse};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::registry::{GetRegistryStats, RegistryStats};

use super::{descriptors, guards, web, AppState};
use crate::transport;

/// How long `/health` waits for the registry before calling it unresponsive.
const REGISTRY_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// `/health`: 200 with `"status":"ok"`, or 503 with `"status":"failing"` and `problems` when
/// the registry does not answer, a storage writer has died or storage writes fail. A reader
/// that is not the server's user (nor a token holder: [`guards::trusted_reader`]) gets the
/// status and `tokenRequired` only.
pub async fn health(req: HttpRequest, state: Data<AppState>) -> HttpResponse {
    let stats = tokio::time::timeout(
        REGISTRY_HEALTH_TIMEOUT,
        state.registry.send(GetRegistryStats),
    )
    .await
    .ok()
    .and_then(Result::ok);
    let mut problems: Vec<String> = Vec::new();
    if stats.is_none() {
        problems.push("the conversation registry does not answer".into());
    }
    if Metrics::get(&state.metrics.dead_writers) > 0 {
        problems.push("a storage writer thread has stopped".into());
    }
    if let Some(cause) = state.metrics.storage_failure() {
        // The operator's text, with the file's path (clients get the role-named one).
        problems.push(format!("storage writes fail: {}", cause.operator));
    }
    let cluster = state.cluster.as_ref().map(|c| c.status());
    if let Some(status) = &cluster {
        if status.nats != "connected" {
            problems.push(format!(
                "cluster: NATS {} ({}): writes answer `Cluster unavailable`",
                status.nats, status.url
            ));
        }
    }
    let mut response = if problems.is_empty() {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response.insert_header((header::CACHE_CONTROL, "no-store"));
    if !guards::trusted_reader(&req, &state.config) {
        return response.json(serde_json::json!({
            "status": if problems.is_empty() { "ok" } else { "failing" },
            "tokenRequired": state.config.token.is_some(),
        }));
    }
    response.json(serde_json::json!({
        "status": if problems.is_empty() { "ok" } else { "failing" },
        "problems": problems,
        // The web client asks for a token only when the server needs one.
        "tokenRequired": state.config.token.is_some(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptimeSeconds": state.started.elapsed().as_secs_f64(),
        "conversations": stats.map(|s| s.conversations),
        "loadedConversations": stats.map(|s| s.loaded),
        "connectedSockets": Metrics::gauge(&state.metrics.sockets),
        "joinedClients": Metrics::gauge(&state.metrics.joined_clients),
        "cluster": cluster,
    }))
}

/// What a `/metrics` reader sees: the server state and the registry's figures (`None` when
/// the registry did not answer).
struct Sample<'a> {
    /// Counters, the log writer and the inbound budget.
    state: &'a AppState,
    /// Conversation counts from the registry.
    stats: Option<RegistryStats>,
}

/// One Prometheus metric without labels.
struct MetricSpec {
    /// `roundtable_…`.
    name: &'static str,
    /// `# TYPE` line: `gauge` or `counter`.
    kind: &'static str,
    /// `# HELP` line.
    help: &'static str,
    /// Its current value; `i128` holds every counter (`u64`) and gauge (`i64`) unchanged.
    read: fn(&Sample<'_>) -> i128,
}

/// Every label-free metric, in the order `/metrics` prints them. `roundtable_rpc_errors_total`
/// (labelled by method) follows them.
const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "roundtable_sockets",
        kind: "gauge",
        help: "Open WebSocket connections.",
        read: |s| Metrics::gauge(&s.state.metrics.sockets).into(),
    },
    MetricSpec {
        name: "roundtable_max_sockets",
        kind: "gauge",
        help: "WebSocket connections served at once; an upgrade past it is answered 503.",
        read: |s| s.state.descriptors.sockets as i128,
    },
    MetricSpec {
        name: "roundtable_sockets_refused_total",
        kind: "counter",
        help: "WebSocket upgrades answered 503 because the socket cap was reached.",
        read: |s| Metrics::get(&s.state.metrics.sockets_refused).into(),
    },
    MetricSpec {
        name: "roundtable_descriptor_limit",
        kind: "gauge",
        help: "The process's descriptor limit (RLIMIT_NOFILE, raised to the hard limit at start).",
        read: |s| s.state.descriptors.limit as i128,
    },
    MetricSpec {
        name: "roundtable_descriptors_open",
        kind: "gauge",
        help: "Descriptors the process has open (-1 where /proc/self/fd cannot be read).",
        read: |_| descriptors::open_descriptors().map_or(-1, i128::from),
    },
    MetricSpec {
        name: "roundtable_joined_clients",
        kind: "gauge",
        help: "Clients joined to conversations.",
        read: |s| Metrics::gauge(&s.state.metrics.joined_clients).into(),
    },
    MetricSpec {
        name: "roundtable_loaded_conversations",
        kind: "gauge",
        help: "Conversations loaded in memory.",
        read: |s| Metrics::gauge(&s.state.metrics.loaded_conversations).into(),
    },
    MetricSpec {
        name: "roundtable_conversations",
        kind: "gauge",
        help: "Conversations in the registry.",
        read: |s| s.stats.map_or(0, |s| s.conversations) as i128,
    },
    MetricSpec {
        name: "roundtable_frames_in_total",
        kind: "counter",
        help: "Messages received.",
        read: |s| Metrics::get(&s.state.metrics.frames_in).into(),
    },
    MetricSpec {
        name: "roundtable_frames_out_total",
        kind: "counter",
        help: "Messages queued for sending.",
        read: |s| Metrics::get(&s.state.metrics.frames_out).into(),
    },
    MetricSpec {
        name: "roundtable_frames_dropped_total",
        kind: "counter",
        help: "Inbound frames dropped as malformed.",
        read: |s| Metrics::get(&s.state.metrics.frames_dropped).into(),
    },
    MetricSpec {
        name: "roundtable_slow_client_closes_total",
        kind: "counter",
        help: "Clients closed because their outbound queue was full.",
        read: |s| Metrics::get(&s.state.metrics.slow_client_closes).into(),
    },
    MetricSpec {
        name: "roundtable_evictions_total",
        kind: "counter",
        help: "Conversations unloaded after idling.",
        read: |s| Metrics::get(&s.state.metrics.evictions).into(),
    },
    MetricSpec {
        name: "roundtable_direct_joins_total",
        kind: "counter",
        help: "Joins of a loaded conversation that skipped the registry actor.",
        read: |s| Metrics::get(&s.state.metrics.direct_joins).into(),
    },
    MetricSpec {
        name: "roundtable_storage_errors_total",
        kind: "counter",
        help: "Storage writes (appends, fsyncs, whole-file writes) that failed.",
        read: |s| Metrics::get(&s.state.metrics.storage_errors).into(),
    },
    MetricSpec {
        name: "roundtable_storage_failing",
        kind: "gauge",
        help: "1 while storage writes fail (see /health for the cause).",
        read: |s| s.state.metrics.storage_failure().is_some().into(),
    },
    MetricSpec {
        name: "roundtable_log_writer_queued_bytes",
        kind: "gauge",
        help: "Bytes queued for the log writer and not yet written.",
        read: |s| s.state.log_writer.queued_bytes() as i128,
    },
    MetricSpec {
        name: "roundtable_inbound_reassembly_bytes",
        kind: "gauge",
        help: "Bytes of fragmented messages being reassembled, over every connection.",
        read: |s| s.state.inbound.held() as i128,
    },
    MetricSpec {
        name: "roundtable_log_fsyncs_total",
        kind: "counter",
        help: "fsyncs made by the log writer (one per touched file per batch).",
        read: |s| Metrics::get(&s.state.metrics.log_fsyncs).into(),
    },
    MetricSpec {
        name: "roundtable_wal_checkpoints_total",
        kind: "counter",
        help: "Node log checkpoints (conversation files flushed, covered segments removed).",
        read: |s| Metrics::get(&s.state.metrics.wal_checkpoints).into(),
    },
    MetricSpec {
        name: "roundtable_log_slow_syncs_total",
        kind: "counter",
        help: "Node log syncs (a batch's write and fdatasync) that took over 50 ms: every acknowledgement waited for them.",
        read: |s| Metrics::get(&s.state.metrics.log_slow_syncs).into(),
    },
    MetricSpec {
        name: "roundtable_prepared_files_total",
        kind: "counter",
        help: "Files the log writer created ahead of their first write, while idle.",
        read: |s| Metrics::get(&s.state.metrics.prepared_files).into(),
    },
    MetricSpec {
        name: "roundtable_wal_bytes",
        kind: "gauge",
        help: "Bytes in the node log's segments (what a crash would replay; bounded by about 4 segments).",
        read: |s| Metrics::gauge(&s.state.metrics.wal_bytes).into(),
    },
    MetricSpec {
        name: "roundtable_log_barriers_total",
        kind: "counter",
        help:
            "Write barriers confirmed by the log writer (acknowledgements waiting for durability).",
        read: |s| Metrics::get(&s.state.metrics.log_barriers).into(),
    },
    MetricSpec {
        name: "roundtable_writer_backpressure_total",
        kind: "counter",
        help: "Times a conversation paused because the log writer's queue was over its bound.",
        read: |s| Metrics::get(&s.state.metrics.writer_backpressure).into(),
    },
    MetricSpec {
        name: "roundtable_search_documents_total",
        kind: "counter",
        help: "Documents (a request, or a request's output) added to the content search index.",
        read: |s| Metrics::get(&s.state.metrics.search_documents).into(),
    },
    MetricSpec {
        name: "roundtable_search_queries_total",
        kind: "counter",
        help: "Content searches answered.",
        read: |s| Metrics::get(&s.state.metrics.search_queries).into(),
    },
    MetricSpec {
        name: "roundtable_search_failures_total",
        kind: "counter",
        help: "Content search index reads or writes that failed.",
        read: |s| Metrics::get(&s.state.metrics.search_failures).into(),
    },
    MetricSpec {
        name: "roundtable_search_overflows_total",
        kind: "counter",
        help: "Times the live search queue was full and a conversation went to a log scan instead.",
        read: |s| Metrics::get(&s.state.metrics.search_overflows).into(),
    },
    MetricSpec {
        name: "roundtable_search_pending_scans",
        kind: "gauge",
        help: "Conversations waiting for the search index to scan their logs (0 once caught up).",
        read: |s| Metrics::gauge(&s.state.metrics.search_pending_scans).into(),
    },
];

/// `/metrics`: every label-free metric of the `METRICS` table, then `invokeError` answers by
/// method; 403 for a reader that is not the server's user nor a token holder
/// ([`guards::trusted_reader`]).
pub async fn metrics_text(req: HttpRequest, state: Data<AppState>) -> HttpResponse {
    if !guards::trusted_reader(&req, &state.config) {
        return HttpResponse::Forbidden().body(
            "/metrics is for the server's own OS user (or a holder of its token); \
             /health answers everyone with the status",
        );
    }
    let stats = state.registry.send(GetRegistryStats).await.ok();
    let sample = Sample {
        state: &state,
        stats,
    };
    let mut out = String::new();
    for metric in METRICS {
        let MetricSpec {
            name, kind, help, ..
        } = metric;
        let value = (metric.read)(&sample);
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    if let Some(cluster) = &state.cluster {
        cluster_metrics(&mut out, &cluster.status());
    }
    let _ = writeln!(
        out,
        "# HELP roundtable_rpc_errors_total invokeError answers by method.\n# TYPE roundtable_rpc_errors_total counter"
    );
    for (method, n) in state.metrics.rpc_errors() {
        let method = method
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = writeln!(
            out,
            "roundtable_rpc_errors_total{{method=\"{method}\"}} {n}"
        );
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(out)
}

/// The cluster's metrics (`serve --cluster` only; a single node prints none of them).
fn cluster_metrics(out: &mut String, status: &roundtable_actors::cluster::ClusterStatus) {
    let node = status.node.replace('\\', "\\\\").replace('"', "\\\"");
    let rows: [(&str, &str, &str, u64); 15] = [
        (
            "roundtable_cluster_nats_connected",
            "gauge",
            "1 while this node is connected to NATS (labelled with the node name).",
            u64::from(status.nats == "connected"),
        ),
        (
            "roundtable_cluster_registry_writes_total",
            "counter",
            "Registry changes this node wrote to the cluster's KV bucket.",
            status.registry_writes,
        ),
        (
            "roundtable_cluster_registry_conflicts_total",
            "counter",
            "Registry writes refused by a compare-and-set (names taken on another node).",
            status.registry_conflicts,
        ),
        (
            "roundtable_cluster_watch_events_total",
            "counter",
            "Registry changes received from the KV watch (this node's own included).",
            status.watch_events,
        ),
        (
            "roundtable_cluster_registry_reconciles_total",
            "counter",
            "Checks of this node's copy of the conversation list against the whole registry bucket.",
            status.registry_reconciles,
        ),
        (
            "roundtable_cluster_registry_repairs_total",
            "counter",
            "Changes those checks made to the copy (each one the KV watch had not delivered).",
            status.registry_repairs,
        ),
        (
            "roundtable_cluster_disconnects_total",
            "counter",
            "Times the NATS connection was lost.",
            status.disconnects,
        ),
        (
            "roundtable_cluster_relayed_frames_total",
            "counter",
            "Frames relayed between this node and others for clients of conversations served elsewhere.",
            status.relayed_frames,
        ),
        (
            "roundtable_cluster_relayed_copies_total",
            "counter",
            "Copies of frame bytes sent toward clients on other nodes (a call to many clients of one node is one).",
            status.relayed_copies,
        ),
        (
            "roundtable_cluster_relay_link_messages_total",
            "counter",
            "NATS messages published on relay links toward other nodes.",
            status.relay_link_messages,
        ),
        (
            "roundtable_cluster_nodes",
            "gauge",
            "Nodes alive in the cluster at this node's last count (itself included).",
            status.nodes,
        ),
        (
            "roundtable_cluster_owned_conversations",
            "gauge",
            "Conversations whose ownership lease this node holds (their actors run here).",
            status.owned,
        ),
        (
            "roundtable_cluster_lease_renewals_total",
            "counter",
            "Ownership lease renewals that succeeded.",
            status.lease_renewals,
        ),
        (
            "roundtable_cluster_leases_lost_total",
            "counter",
            "Ownership leases lost (a renewal failed; the conversation stopped here).",
            status.leases_lost,
        ),
        (
            "roundtable_cluster_auth_refused_total",
            "counter",
            "Node-to-node messages refused by the cluster's authentication (no or a wrong seal, a replay, a stale timestamp).",
            status.auth_refused,
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{node}\"}} {value}"
        );
    }
}

/// Any path other than the fixed routes: a WebSocket upgrade, after the security checks.
/// Plain requests get the web client's files ([`web::respond`]) or 404.
pub async fn upgrade(req: HttpRequest, state: Data<AppState>) -> HttpResponse {
    let config = &state.config;
    let is_upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_upgrade {
        if let Some(page) = web::respond(&req) {
            return page;
        }
        return HttpResponse::NotFound()
            .body("Roundtable speaks WebSocket here; see /health and /metrics");
    }
    if let Some(refusal) = guards::upgrade_refusal(&req, config) {
        return refusal;
    }
    let cap = state.descriptors.sockets;
    let Some(slot) = transport::SocketSlot::take(&state.metrics, cap) else {
        // The first refusal of a run of them is logged, then one in a thousand.
        if Metrics::get(&state.metrics.sockets_refused).is_multiple_of(1000) {
            log::warn!(
                "WebSocket upgrade from {} refused: {cap} WebSocket connections are open, the \
                 most this server serves at once (--max-sockets; descriptor limit {})",
                guards::peer_text(&req),
                state.descriptors.limit
            );
        }
        Metrics::inc(&state.metrics.sockets_refused);
        return HttpResponse::ServiceUnavailable()
            .insert_header((header::RETRY_AFTER, "5"))
            .body(descriptors::at_capacity_text(cap));
    };
    let echo = config.echo_path.as_deref() == Some(req.path());
    transport::start(&req, state.into_inner(), echo, slot)
}
