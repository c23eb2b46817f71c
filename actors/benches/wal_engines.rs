//! Which engine makes conversation writes durable: the node log (Roundtable's own write-ahead
//! log, `storage::node_log`), the per-file fsync it replaced (`--no-wal`), and SQLite in WAL
//! mode (`synchronous=FULL`, the project already builds it), on the same workload.
//!
//! The workload is a turn as a conversation writes it: three appends (a display-log entry of
//! 400 bytes, a chat-history line of 300, a request-journal record of 120) to the
//! conversation's own three files, then a write barrier it waits on before its next turn.
//! `CONVERSATIONS` conversations run turns at once for `SECONDS` seconds per engine (a closed
//! loop, like a server's busy conversations). Every engine writes the same three files per
//! conversation (unsynced: the engine's log is what makes them durable) plus its log. Printed
//! per engine: turns per second, fsyncs per turn (the engine's own count; run under
//! `strace -f -c -e trace=fsync,fdatasync,syncfs` for the kernel's), barrier latency p50 /
//! p99 / max, and the recovery time: opening the engine after a crash that left 100,000
//! records not checkpointed, writing them back into their files.
//!
//! `cargo bench -p roundtable-actors --bench wal_engines [-- ENGINE…]` (engines: node-log,
//! per-file, sqlite-wal; default all). Ratios are printed against the node log of the same run.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use roundtable_actors::metrics::Metrics;
use roundtable_actors::storage::log_writer::LogWriter;
use roundtable_actors::storage::node_log::{NodeLog, NodeLogConfig};
use tokio::sync::oneshot;

/// Conversations running turns at once.
const CONVERSATIONS: usize = 64;
/// How long each engine runs.
const SECONDS: u64 = 8;
/// Records left in the log for the recovery measurement.
const RECOVERY_RECORDS: usize = 100_000;
/// The three appends of a turn: (file name, bytes).
const TURN: [(&str, usize); 3] = [
    ("displayLog.jsonl", 400),
    ("history.jsonl", 300),
    ("requests.jsonl", 120),
];

/// What one engine run measured.
struct Outcome {
    engine: &'static str,
    turns: u64,
    seconds: f64,
    fsyncs: u64,
    latencies_us: Vec<u64>,
    recovery: Duration,
}

impl Outcome {
    fn turns_per_s(&self) -> f64 {
        self.turns as f64 / self.seconds
    }
    fn fsyncs_per_turn(&self) -> f64 {
        self.fsyncs as f64 / self.turns.max(1) as f64
    }
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.latencies_us.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0.0;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i] as f64 / 1000.0
    }
}

fn line(size: usize, turn: u64) -> Vec<u8> {
    let mut l = format!("{{\"turn\":{turn},\"text\":\"").into_bytes();
    l.resize(size - 3, b'x');
    l.extend_from_slice(b"\"}\n");
    l
}

fn conversation_paths(root: &Path, c: usize) -> Vec<Arc<Path>> {
    let dir = root.join("conversations").join(format!("c{c}"));
    std::fs::create_dir_all(&dir).expect("conversation dir");
    TURN.iter().map(|(name, _)| dir.join(name).into()).collect()
}

/// Runs `CONVERSATIONS` conversations for `SECONDS`, each running `turn(conversation, n)`
/// and waiting for it before the next: (turns, seconds, each turn's latency in µs).
fn closed_loop<F, Fut>(turn: F) -> (u64, f64, Vec<u64>)
where
    F: Fn(usize, u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let stop = Instant::now() + Duration::from_secs(SECONDS);
        let started = Instant::now();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let start_turn = |c: usize, n: u64| {
            let done = done_tx.clone();
            let work = turn(c, n);
            tokio::spawn(async move {
                let t = Instant::now();
                work.await;
                let _ = done.send((c, t.elapsed().as_micros() as u64));
            });
        };
        let mut turns_done = vec![0u64; CONVERSATIONS];
        for c in 0..CONVERSATIONS {
            start_turn(c, 0);
        }
        let mut latencies = Vec::new();
        let mut running = CONVERSATIONS;
        while running > 0 {
            let (c, took) = done_rx.recv().await.expect("a turn finished");
            latencies.push(took);
            turns_done[c] += 1;
            if Instant::now() >= stop {
                running -= 1;
            } else {
                start_turn(c, turns_done[c]);
            }
        }
        (
            latencies.len() as u64,
            started.elapsed().as_secs_f64(),
            latencies,
        )
    })
}

/// Runs the closed loop against a [`LogWriter`] (node log or per-file fsync).
fn run_log_writer(engine: &'static str, with_log: bool) -> Outcome {
    let dir = tempfile::tempdir_in(bench_dir()).expect("tempdir");
    let root = dir.path().to_path_buf();
    let metrics = Arc::new(Metrics::default());
    let writer = if with_log {
        LogWriter::start_with_log(metrics.clone(), root.clone(), NodeLogConfig::default())
            .expect("open the node log")
            .0
    } else {
        LogWriter::start(metrics.clone(), root.clone())
    };
    let paths: Vec<Vec<Arc<Path>>> = (0..CONVERSATIONS)
        .map(|c| conversation_paths(&root, c))
        .collect();
    let (turns, seconds, latencies_us) = closed_loop(|c, turn| {
        let writer = writer.clone();
        let paths = paths[c].clone();
        async move {
            for (path, (_, size)) in paths.iter().zip(TURN) {
                writer.append(path, line(size, turn));
            }
            writer
                .sync(paths)
                .await
                .expect("writer alive")
                .expect("durable");
        }
    });
    let fsyncs = Metrics::get(&metrics.log_fsyncs);
    drop(writer);
    Outcome {
        engine,
        turns,
        seconds,
        fsyncs,
        latencies_us,
        recovery: if with_log {
            recover_node_log()
        } else {
            Duration::ZERO
        },
    }
}

/// Where the engines write: `$WAL_BENCH_DIR`, else the target directory (a real disk, not
/// a tmpfs `/tmp`).
fn bench_dir() -> PathBuf {
    let dir = std::env::var_os("WAL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wal-bench"));
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}

/// Leaves `RECOVERY_RECORDS` records in a node log (writer dropped without its checkpoint,
/// as `kill -9` leaves it) and times opening it again.
fn recover_node_log() -> Duration {
    let dir = tempfile::tempdir_in(bench_dir()).expect("tempdir");
    let root = dir.path().to_path_buf();
    let (writer, _) =
        LogWriter::start_with_log(Default::default(), root.clone(), NodeLogConfig::default())
            .expect("open");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let paths: Vec<Vec<Arc<Path>>> = (0..CONVERSATIONS)
        .map(|c| conversation_paths(&root, c))
        .collect();
    for i in 0..RECOVERY_RECORDS / 3 {
        let files = &paths[i % CONVERSATIONS];
        for (path, (_, size)) in files.iter().zip(TURN) {
            writer.append(path, line(size, i as u64));
        }
    }
    runtime
        .block_on(writer.sync(Vec::new()))
        .expect("alive")
        .expect("durable");
    drop(writer);
    let started = Instant::now();
    let (_log, replayed) =
        NodeLog::open(&root, NodeLogConfig::default(), Default::default()).expect("replay");
    let took = started.elapsed();
    assert_eq!(replayed.appends, RECOVERY_RECORDS / 3 * 3);
    took
}

/// One batch job for the SQLite writer: a turn's appends and who waits.
struct SqliteJob {
    appends: Vec<(usize, usize, Vec<u8>)>,
    ack: oneshot::Sender<()>,
}

/// SQLite in WAL mode as the node log: a writer thread takes what queued up, appends it to
/// the files (unsynced), inserts the records in one transaction and commits (one WAL fsync
/// with `synchronous=FULL`), then answers.
fn sqlite_writer(root: PathBuf, jobs: mpsc::Receiver<SqliteJob>, commits: Arc<AtomicU64>) {
    let db = rusqlite::Connection::open(root.join("log.sqlite")).expect("open sqlite");
    db.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE IF NOT EXISTS log (id INTEGER PRIMARY KEY, conversation INTEGER,
           file INTEGER, offset INTEGER, bytes BLOB);",
    )
    .expect("schema");
    let mut files: HashMap<(usize, usize), (File, u64)> = HashMap::new();
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while let Ok(more) = jobs.try_recv() {
            batch.push(more);
        }
        let tx = db.unchecked_transaction().expect("begin");
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO log (conversation, file, offset, bytes) VALUES (?1, ?2, ?3, ?4)",
                )
                .expect("prepare");
            for job in &batch {
                for (c, f, bytes) in &job.appends {
                    let (file, len) = files.entry((*c, *f)).or_insert_with(|| {
                        let path = root
                            .join("conversations")
                            .join(format!("c{c}"))
                            .join(TURN[*f].0);
                        let file = OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .expect("open");
                        (file, 0)
                    });
                    file.write_all(bytes).expect("append");
                    insert
                        .execute(rusqlite::params![*c as i64, *f as i64, *len as i64, bytes])
                        .expect("insert");
                    *len += bytes.len() as u64;
                }
            }
        }
        tx.commit().expect("commit");
        commits.fetch_add(1, Ordering::Relaxed);
        for job in batch {
            let _ = job.ack.send(());
        }
    }
}

fn run_sqlite() -> Outcome {
    let dir = tempfile::tempdir_in(bench_dir()).expect("tempdir");
    let root = dir.path().to_path_buf();
    for c in 0..CONVERSATIONS {
        conversation_paths(&root, c);
    }
    let (tx, rx) = mpsc::channel();
    let commits = Arc::new(AtomicU64::new(0));
    let thread = {
        let (root, commits) = (root.clone(), commits.clone());
        std::thread::spawn(move || sqlite_writer(root, rx, commits))
    };
    let (turns, seconds, latencies_us) = closed_loop(|c, turn| {
        let tx = tx.clone();
        async move {
            let (ack, done) = oneshot::channel();
            let appends = TURN
                .iter()
                .enumerate()
                .map(|(f, (_, size))| (c, f, line(*size, turn)))
                .collect();
            tx.send(SqliteJob { appends, ack }).expect("writer alive");
            done.await.expect("committed");
        }
    });
    drop(tx);
    thread.join().expect("sqlite writer");
    Outcome {
        engine: "sqlite-wal",
        turns,
        seconds,
        fsyncs: commits.load(Ordering::Relaxed),
        latencies_us,
        recovery: recover_sqlite(),
    }
}

/// Leaves `RECOVERY_RECORDS` rows not applied and times opening the database (SQLite's own
/// WAL recovery) and writing every row back into its file at its offset.
fn recover_sqlite() -> Duration {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir_in(bench_dir()).expect("tempdir");
    let root = dir.path().to_path_buf();
    for c in 0..CONVERSATIONS {
        conversation_paths(&root, c);
    }
    {
        let db = rusqlite::Connection::open(root.join("log.sqlite")).expect("open");
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE log (id INTEGER PRIMARY KEY, conversation INTEGER, file INTEGER,
               offset INTEGER, bytes BLOB);",
        )
        .expect("schema");
        let tx = db.unchecked_transaction().expect("begin");
        let mut lens = vec![[0u64; 3]; CONVERSATIONS];
        for i in 0..RECOVERY_RECORDS / 3 {
            let c = i % CONVERSATIONS;
            for (f, (_, size)) in TURN.iter().enumerate() {
                let bytes = line(*size, i as u64);
                tx.execute(
                    "INSERT INTO log (conversation, file, offset, bytes) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![c as i64, f as i64, lens[c][f] as i64, bytes],
                )
                .expect("insert");
                lens[c][f] += bytes.len() as u64;
            }
        }
        tx.commit().expect("commit");
        // Dropped without a checkpoint of the files: the crash.
    }
    let started = Instant::now();
    let db = rusqlite::Connection::open(root.join("log.sqlite")).expect("reopen");
    let mut files: HashMap<(i64, i64), File> = HashMap::new();
    let mut rows = 0;
    {
        let mut select = db
            .prepare("SELECT conversation, file, offset, bytes FROM log ORDER BY id")
            .expect("select");
        let mut cursor = select.query([]).expect("query");
        while let Some(row) = cursor.next().expect("row") {
            let (c, f, offset, bytes): (i64, i64, i64, Vec<u8>) = (
                row.get(0).expect("c"),
                row.get(1).expect("f"),
                row.get(2).expect("offset"),
                row.get(3).expect("bytes"),
            );
            let file = files.entry((c, f)).or_insert_with(|| {
                OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(
                        root.join("conversations")
                            .join(format!("c{c}"))
                            .join(TURN[f as usize].0),
                    )
                    .expect("open")
            });
            file.write_all_at(&bytes, offset as u64)
                .expect("write back");
            rows += 1;
        }
    }
    for file in files.values() {
        file.sync_data().expect("fsync");
    }
    let took = started.elapsed();
    assert_eq!(rows, RECOVERY_RECORDS / 3 * 3);
    took
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    println!(
        "wal_engines: {CONVERSATIONS} conversations, turns of 3 appends (820 bytes) + a barrier, {SECONDS} s each, in {}",
        bench_dir().display()
    );
    let mut outcomes = Vec::new();
    if want("node-log") {
        outcomes.push(run_log_writer("node-log", true));
    }
    if want("per-file") {
        outcomes.push(run_log_writer("per-file", false));
    }
    if want("sqlite-wal") {
        outcomes.push(run_sqlite());
    }
    let base = outcomes
        .iter()
        .find(|o| o.engine == "node-log")
        .map(|o| (o.turns_per_s(), o.percentile(0.99)));
    println!(
        "{:<11} {:>9} {:>12} {:>9} {:>9} {:>9} {:>12} {:>18}",
        "engine",
        "turns/s",
        "fsyncs/turn",
        "p50 ms",
        "p99 ms",
        "max ms",
        "recovery ms",
        "vs node-log (rate, p99)"
    );
    for o in &outcomes {
        let ratio = base.map_or(String::new(), |(rate, p99)| {
            format!(
                "{:.2}x, {:.2}x",
                o.turns_per_s() / rate,
                o.percentile(0.99) / p99.max(1e-9)
            )
        });
        println!(
            "{:<11} {:>9.0} {:>12.3} {:>9.2} {:>9.2} {:>9.2} {:>12} {:>18}",
            o.engine,
            o.turns_per_s(),
            o.fsyncs_per_turn(),
            o.percentile(0.5),
            o.percentile(0.99),
            o.percentile(1.0),
            if o.recovery.is_zero() {
                "-".to_string()
            } else {
                format!("{:.0}", o.recovery.as_secs_f64() * 1000.0)
            },
            ratio
        );
    }
}
