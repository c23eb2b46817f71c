//! Criterion micro-benches for the hot paths of `roundtable-actors`, through the public API:
//! envelope decode (`Inbound::parse`) and encode (`invoke_result`, `call_frame`), routing one
//! call to N clients' outputs (as `Conversation::deliver` does: `ClientOutput::send` for each,
//! then every socket's outbox receiver drained), the per-recipient splice alone
//! (`OutboundCall::new` once + `call_frame` per client), display-log append
//! (`DisplayLog::append` on a `LogWriter`), and history reads (`read_range`: the last 10
//! entries, the first 100) on a 100,000-entry log, and the cluster secret's seal of a relay
//! message (sealed and opened). Run with
//! `cargo bench -p roundtable-actors --bench hotpaths`.

use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use roundtable_actors::client::{ClientOutput, OutboundCall, Sent};
use roundtable_actors::metrics::Metrics;
use roundtable_actors::outbox::{outbox, OutboxLimits, OutboxReceiver, Outgoing};
use roundtable_actors::protocol::{call_frame, call_prefix, invoke_result, Inbound};
use roundtable_actors::storage::display_log::{read_range, DisplayLog};
use roundtable_actors::storage::log_writer::LogWriter;
use serde_json::{json, Map, Value};

const CONVERSATION: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn submit_frame() -> String {
    json!({"name": format!("dispatcher:{CONVERSATION}"), "message": {"type": "invoke", "callId": 7,
        "name": "submitCommand", "args": ["hello from the load harness", null, null, "lt7", null]}})
    .to_string()
}

fn echo_args() -> Value {
    json!([{"message": {"content": "echo: hello from the load harness", "type": "markdown"},
        "requestId": {"clientRequestId": "lt7", "connectionId": "0",
                      "requestId": "f1492404-b410-401a-960a-ad50ef2ca842"},
        "source": "chat"}, "block"])
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("envelope");
    let submit = submit_frame();
    let join = json!({"name": "agent-server", "message": {"type": "invoke", "callId": 3,
        "name": "joinConversation", "args": [{"conversationId": CONVERSATION}]}})
    .to_string();
    g.throughput(Throughput::Bytes(submit.len() as u64));
    g.bench_function("decode_submitCommand", |b| {
        b.iter(|| Inbound::parse(black_box(&submit)).expect("valid"))
    });
    g.throughput(Throughput::Bytes(join.len() as u64));
    g.bench_function("decode_joinConversation", |b| {
        b.iter(|| Inbound::parse(black_box(&join)).expect("valid"))
    });
    let ack = json!({"ok": true, "entry": {"attachmentCount": 0, "clientRequestId": "lt7",
        "originatorConnectionId": "0", "requestId": "f1492404-b410-401a-960a-ad50ef2ca842",
        "startedAt": 1796002202503u64, "state": "running", "submittedAt": 1796002202503u64,
        "text": "hello from the load harness"}});
    let channel = format!("dispatcher:{CONVERSATION}");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_invoke_result_submit_ack", |b| {
        b.iter(|| invoke_result(black_box(&channel), 7, Some(black_box(&ack))))
    });
    let clientio = format!("clientio:{CONVERSATION}");
    let args = serde_json::to_string(&echo_args()).expect("serializes");
    g.bench_function("encode_call_frame_appendDisplay", |b| {
        b.iter(|| call_frame(black_box(&clientio), 42, "appendDisplay", black_box(&args)))
    });
    g.finish();
}

fn routing(c: &mut Criterion) {
    let mut g = c.benchmark_group("route_one_call");
    for n in [1usize, 10, 100, 1000] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("client_outputs", n), &n, |b, &n| {
            let metrics = Arc::new(Metrics::default());
            let prefix: Arc<str> = call_prefix(&format!("clientio:{CONVERSATION}")).into();
            let mut outputs = Vec::new();
            let mut receivers: Vec<OutboxReceiver> = Vec::new();
            for _ in 0..n {
                let (tx, rx) = outbox(OutboxLimits::default());
                let mut output = ClientOutput::new(prefix.clone(), tx, metrics.clone());
                assert_eq!(output.go_live(), Sent::Queued);
                outputs.push(output);
                receivers.push(rx);
            }
            let call = OutboundCall::new("appendDisplay", &echo_args());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        for output in outputs.iter_mut() {
                            assert_eq!(output.send(&call), Sent::Queued);
                        }
                        for rx in receivers.iter_mut() {
                            match rx.next().await {
                                Some(frame @ Outgoing::Spliced { .. }) => {
                                    black_box(frame);
                                }
                                other => panic!("unexpected {other:?}"),
                            }
                        }
                    }
                    start.elapsed()
                })
            });
        });
        g.bench_with_input(BenchmarkId::new("splice_only", n), &n, |b, &n| {
            // What each Client does: its channel prefix is built once, the call's tail once.
            let prefix = call_prefix(&format!("clientio:{CONVERSATION}"));
            let args = echo_args();
            b.iter(|| {
                let call = OutboundCall::new("appendDisplay", black_box(&args));
                for id in 0..n as u64 {
                    black_box(call.frame(&prefix, id));
                }
            })
        });
    }
    g.finish();
}

fn entry() -> Map<String, Value> {
    match json!({"type": "append-display", "message": {"message": {"content":
        "echo: hello from the load harness", "type": "markdown"}, "requestId":
        {"clientRequestId": "lt7", "connectionId": "0",
         "requestId": "f1492404-b410-401a-960a-ad50ef2ca842"}, "source": "chat"}, "mode": "block"})
    {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn display_log(c: &mut Criterion) {
    let mut g = c.benchmark_group("display_log");
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let mut log = DisplayLog::open(dir.path(), writer.clone()).expect("open");
    let template = entry();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    g.throughput(Throughput::Elements(1));
    g.bench_function("append", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(log.append(template.clone()));
            }
            let took = start.elapsed();
            // Let the writer thread catch up (untimed) so its queue stays bounded.
            runtime
                .block_on(writer.sync(vec![log.path().clone()]))
                .expect("writer alive")
                .expect("written");
            took
        })
    });
    // A 100,000-entry log: the tail read costs what it returns, not the log's size.
    let big = tempfile::tempdir().expect("tempdir");
    let path = big.path().join("displayLog.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    for s in 0..100_000u64 {
        writeln!(
            f,
            "{{\"s\":{s},\"u\":{},\"e\":{{\"type\":\"append-display\",\"seq\":{s},\"timestamp\":1,\"message\":{{\"message\":{{\"content\":\"echo: hello\",\"type\":\"markdown\"}},\"source\":\"chat\"}},\"mode\":\"block\"}}}}",
            s / 3
        )
        .expect("write");
    }
    f.flush().expect("flush");
    drop(f);
    g.bench_function("read_range_tail10_of_100k", |b| {
        b.iter(|| {
            let v = read_range(black_box(&path), 99_990, 100_000).expect("read");
            assert_eq!(v.len(), 10);
            v
        })
    });
    // A page of 100 at the start of the same log (what a client paging back to the first
    // entry asks last): found by bisection, not by reading the file from its end.
    g.bench_function("read_range_first100_of_100k", |b| {
        b.iter(|| {
            let v = read_range(black_box(&path), 0, 100).expect("read");
            assert_eq!(v.len(), 100);
            v
        })
    });
    g.finish();
}

/// The cluster secret's seal on one relay message (`cluster/seal.rs`): what every NATS message
/// of a relay or link costs on top of its publish, sender and receiver together, for a small
/// link message (one frame) and a large one (many clients' frames at once).
fn cluster_seal(c: &mut Criterion) {
    use roundtable_actors::cluster::seal::{ClusterSecret, Sealing, StreamOpener, StreamSealer};
    let sealing =
        Sealing::new(&ClusterSecret::new("a cluster secret for the bench".into()).unwrap());
    let subject = "rt.node.b.link.0f8fad5b-d9cb-469f-a165-70867728950e.out";
    let mut g = c.benchmark_group("cluster_seal");
    for size in [256usize, 16 << 10] {
        let body = vec![b'x'; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("seal_and_open", size), &body, |b, body| {
            let mut sender = StreamSealer::default();
            let mut receiver = StreamOpener::default();
            b.iter(|| {
                let sealed = sealing.seal_stream(&mut sender, subject, black_box(body));
                let opened = sealing.open_stream(&mut receiver, subject, &sealed);
                assert_eq!(opened.map(<[u8]>::len), Ok(body.len()));
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = codec, routing, display_log, cluster_seal
}
criterion_main!(benches);
