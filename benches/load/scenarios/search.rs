//! `search`: content search over an instance of 10,000 conversations × 100 display entries
//! (`--search-conversations`; quick: 300), written straight to disk with varied text
//! ([`Corpus`]: a Zipf vocabulary, some accented words). Three server runs on the same
//! registry:
//!
//! 1. **registry only** (no logs, so an empty index): idle RSS, the reference;
//! 2. **rebuild**: the logs are there and the index is not; time until every document is
//!    indexed (`/metrics`' `roundtable_search_documents_total` reaches the count the fixture
//!    wrote) and the peak RSS meanwhile;
//! 3. **indexed**: a restart on the built index: idle RSS (its growth over run 1 is what the
//!    index costs at rest), then `searchConversationContent` latency per kind of query
//!    (common word, rare word, two words, prefix, phrase, accent-free spelling of an accented
//!    word), RSS after the queries, and the index's size on disk.
//!
//! Baseline: a linear scan of every display log for the query's word (what answering without
//! an index costs), measured in the same run on the same files.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::{Client, AGENT_SERVER};
use crate::fixtures::{write_registry, write_text_log, Corpus, FixtureConversation, FixtureRng};
use crate::report::{self, latency_histogram, Figure, ScenarioReport};
use crate::scenarios::{mb, wait_indexed, Ctx};
use crate::server::{RssSampler, ServerProcess};

/// Display entries per conversation.
const LOG_ENTRIES: u64 = 100;
/// Distinct words of the corpus.
const VOCABULARY: usize = 20_000;
/// Seconds the rebuild may take before the scenario fails.
const REBUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// One kind of query and how to make one.
struct QueryKind {
    /// Figure prefix.
    name: &'static str,
    /// A query text of this kind.
    make: fn(&Corpus, &mut FixtureRng) -> String,
}

const KINDS: &[QueryKind] = &[
    QueryKind {
        name: "common",
        make: |c, r| c.words[r.below(10)].clone(),
    },
    QueryKind {
        name: "rare",
        make: |c, r| c.words[2_000 + r.below(c.words.len() - 2_000)].clone(),
    },
    QueryKind {
        name: "two_words",
        make: |c, r| {
            format!(
                "{} {}",
                c.words[20 + r.below(200)],
                c.words[20 + r.below(200)]
            )
        },
    },
    QueryKind {
        name: "prefix",
        make: |c, r| {
            let w = &c.words[100 + r.below(1_000)];
            format!("{}*", w.chars().take(3).collect::<String>())
        },
    },
    QueryKind {
        name: "phrase",
        make: |c, r| format!("\"{} {}\"", c.words[r.below(30)], c.words[r.below(30)]),
    },
    QueryKind {
        name: "accent",
        make: |c, r| {
            // Ranks 7, 47, 87…: the accented ones; typed without the accent.
            let rank = 7 + 40 * r.below(50);
            strip_accents(&c.words[rank.min(c.words.len() - 1)])
        },
    },
];

/// Runs the scenario (Roundtable only: it starts its own server processes).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let s = &ctx.sizes;
    let mut report = ScenarioReport::new("search");
    if ctx.url.is_some() {
        report
            .notes
            .push("skipped: it starts its own server processes (not with --url)".into());
        return Ok(report);
    }
    let n = s.search_conversations.max(1);
    let per_kind = s.search_queries_per_kind.max(1);
    report.param("conversations", n);
    report.param("log_entries_each", LOG_ENTRIES);
    report.param("vocabulary", VOCABULARY);
    report.param("queries_per_kind", per_kind);
    let dir = ctx.tempdir()?;
    let corpus = Corpus::new(VOCABULARY);

    // Run 1: the registry alone.
    let conversations: Vec<_> = (0..n)
        .map(|i| FixtureConversation::new(format!("conversation {i}")))
        .collect();
    write_registry(dir.path(), &conversations).map_err(fixture_error)?;
    let bar = report::progress(3, "search: registry only, rebuild, queries".into());
    let server = ServerProcess::roundtable(&ctx.launch, dir.path(), &[])?;
    let client = listed(&server, n).await?;
    let empty_rss = settled_rss(ctx, &server).await;
    client.close().await;
    server.stop();
    bar.inc(1);

    // The logs.
    let t = Instant::now();
    let mut rng = FixtureRng::new(0x5eed);
    let mut documents = 0u64;
    let mut with_counts = conversations.clone();
    for c in &mut with_counts {
        let wrote = write_text_log(dir.path(), &c.id, LOG_ENTRIES, &corpus, &mut rng)
            .map_err(fixture_error)?;
        c.message_count = wrote.requests;
        documents += wrote.documents;
    }
    write_registry(dir.path(), &with_counts).map_err(fixture_error)?;
    let _ = std::fs::remove_dir_all(dir.path().join("search"));
    report.param("documents", documents);
    report.notes.push(format!(
        "fixture written in {:.1} s ({} MB of display logs)",
        t.elapsed().as_secs_f64(),
        fmt_mb(dir_bytes(&dir.path().join("conversations")))
    ));

    // Run 2: the rebuild.
    let server = ServerProcess::roundtable(&ctx.launch, dir.path(), &[])?;
    let sampler = RssSampler::start(Some(server.pid()));
    let t = Instant::now();
    wait_indexed(&server, documents, REBUILD_TIMEOUT).await?;
    report
        .figures
        .push(Figure::new("rebuild_s", t.elapsed().as_secs_f64(), "s"));
    if let Some(kb) = sampler.finish() {
        report
            .figures
            .push(Figure::new("rebuild_peak_rss_mb", mb(kb), "MB"));
    }
    server.stop();
    let index = dir.path().join("search");
    report.figures.push(Figure::new(
        "index_size_mb",
        dir_bytes(&index) as f64 / 1_048_576.0,
        "MB",
    ));
    bar.inc(1);

    // Run 3: at rest on the built index, then the queries.
    let server = ServerProcess::roundtable(&ctx.launch, dir.path(), &[])?;
    let mut client = listed(&server, n).await?;
    if let (Some(indexed), Some(empty)) = (settled_rss(ctx, &server).await, empty_rss) {
        report
            .figures
            .push(Figure::new("idle_rss_mb", mb(indexed), "MB"));
        report.figures.push(Figure::new(
            "idle_rss_growth_mb",
            mb(indexed) - mb(empty),
            "MB",
        ));
    }
    let mut all = latency_histogram();
    let mut qrng = FixtureRng::new(0xfeed);
    let mut empty_answers = 0usize;
    let mut per_kind_figures = Vec::new();
    for kind in KINDS {
        let mut hist = latency_histogram();
        for _ in 0..per_kind {
            let text = (kind.make)(&corpus, &mut qrng);
            let t = Instant::now();
            let answer = client
                .invoke(
                    AGENT_SERVER,
                    "searchConversationContent",
                    json!([text, 10]),
                    |_| {},
                )
                .await?;
            let took = t.elapsed();
            report::record(&mut hist, took);
            report::record(&mut all, took);
            if answer.as_array().is_none_or(Vec::is_empty) {
                empty_answers += 1;
            }
        }
        let p = report::percentiles(&format!("{}_query", kind.name), &hist);
        per_kind_figures.extend(p.into_iter().take(2));
    }
    report.figures.extend(report::percentiles("query", &all));
    report.figures.extend(per_kind_figures);
    if let Some(kb) = server.rss_kb() {
        report
            .figures
            .push(Figure::new("rss_after_queries_mb", mb(kb), "MB"));
    }
    if empty_answers > 0 {
        report.notes.push(format!(
            "{empty_answers} of {} queries found nothing",
            per_kind * KINDS.len()
        ));
    }
    client.close().await;
    server.stop();
    bar.finish_and_clear();

    // The baseline: a scan of every log for a rare word, as a server without an index would.
    let scans = if ctx.quick { 3 } else { 5 };
    let mut scan_times = Vec::new();
    for _ in 0..scans {
        let word = (KINDS[1].make)(&corpus, &mut qrng);
        let t = Instant::now();
        scan_logs(&dir.path().join("conversations"), &word);
        scan_times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    scan_times.sort_by(f64::total_cmp);
    let scan_ms = scan_times[scan_times.len() / 2];
    report.attach_baseline(&[Figure::new("query_p50_ms", scan_ms, "ms")]);
    report.notes.push(
        "baseline: one linear scan of every display log for a rare word (no index), median".into(),
    );

    report.target(
        "idle_rss_growth_mb",
        "idle RSS grows by at most 5 MB with 10,000 indexed conversations",
        false,
        |v| v <= 5.0,
    );
    report.target(
        "query_p50_ms",
        "a query over 10,000 conversations × 100 entries answers in tens of milliseconds (p50)",
        false,
        |v| v < 100.0,
    );
    report.target("query_p99_ms", "… and at p99", false, |v| v < 100.0);
    if n < 10_000 {
        for t in report.targets.iter_mut() {
            t.met = None;
            t.note = format!("{} (run had {n} conversations, not 10,000)", t.note);
        }
    }
    Ok(report)
}

/// Connects and waits for `listConversations` to list all `n` (the server is up and the
/// registry loaded).
async fn listed(server: &ServerProcess, n: usize) -> Result<Client, String> {
    let mut client = Client::connect(&server.url()).await?;
    let v = client
        .invoke(AGENT_SERVER, "listConversations", json!([null]), |_| {})
        .await?;
    let got = v.as_array().map_or(0, Vec::len);
    if got != n {
        return Err(format!(
            "listConversations returned {got} conversations, expected {n}:\n{}",
            server.log_tail(20)
        ));
    }
    Ok(client)
}

/// RSS after start-up work has settled (the same pause as `startup`).
async fn settled_rss(ctx: &Ctx, server: &ServerProcess) -> Option<u64> {
    tokio::time::sleep(Duration::from_millis(if ctx.quick { 200 } else { 1000 })).await;
    server.rss_kb()
}

/// Reads every display log under `conversations` and looks for `word` (lower case).
fn scan_logs(conversations: &Path, word: &str) -> usize {
    let mut found = 0;
    let Ok(dirs) = std::fs::read_dir(conversations) else {
        return 0;
    };
    for d in dirs.flatten() {
        if let Ok(text) = std::fs::read_to_string(d.path().join("displayLog.jsonl")) {
            if text.to_lowercase().contains(word) {
                found += 1;
            }
        }
    }
    found
}

/// `é` → `e` and the like, for the corpus's accented vowels.
fn strip_accents(w: &str) -> String {
    w.chars()
        .map(|c| match c {
            'á' => 'a',
            'é' => 'e',
            'í' => 'i',
            'ö' => 'o',
            'ü' => 'u',
            c => c,
        })
        .collect()
}

/// Bytes of the files under `dir` (recursively).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn fmt_mb(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / 1_048_576.0)
}

fn fixture_error(e: std::io::Error) -> String {
    format!("cannot write the fixture: {e}")
}
