//! `stream`: answers a model streams (issue 50). A scripted OpenAI-compatible endpoint in this
//! process writes an answer as server-sent events, one token per chunk, at a set pace; the
//! server under test (`--provider openai`, pointed at it) streams it to every joined client.
//!
//! - **Time to first token**: from the submit to the first piece a client receives, against a
//!   direct streaming client of the same endpoint (its request to its first token), with 1 and
//!   with 100 clients joined (every client's first piece counts); the added time is
//!   Roundtable's percentile less the direct client's.
//! - **A long answer to many clients**: a 2,000-token answer at 100 tokens a second to 100
//!   clients (`--quick`: 200 tokens at 1,000 a second to 10): the server's CPU per delivered
//!   token, the frames each client got (the pieces are sent at most 20 times a second), the
//!   node log's fsyncs for the answer (it is logged once, checkpointed every 4 s: a handful,
//!   not one per token), and the server's RSS before, at its peak and after.
//!
//! No baseline: the direct client is the reference for latency, and the costs are absolute.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::{Client, Incoming};
use crate::report::{self, Figure, ScenarioReport};
use crate::scenarios::{mb, Ctx};
use crate::server::{metric, RssSampler, ServerProcess};

/// The scripted endpoint: the text of a request's last user message says what to answer,
/// `stream <tokens> <microseconds between tokens>`; each answer's first-token write time goes
/// to `first`.
struct Endpoint {
    /// `http://127.0.0.1:<port>/v1`.
    url: String,
    /// Its port.
    port: u16,
    /// When each answer's first token was written.
    first: Arc<Mutex<mpsc::Receiver<Instant>>>,
}

impl Endpoint {
    fn start() -> Result<Endpoint, String> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("endpoint bind: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (first_tx, first_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let first = first_tx.clone();
                std::thread::spawn(move || serve(stream, &first));
            }
        });
        Ok(Endpoint {
            url: format!("http://127.0.0.1:{port}/v1"),
            port,
            first: Arc::new(Mutex::new(first_rx)),
        })
    }

    /// The first-token time of the next answer written.
    fn next_first(&self) -> Result<Instant, String> {
        self.first
            .lock()
            .expect("endpoint lock")
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the endpoint wrote no answer within 30 s".to_string())
    }
}

/// Answers one connection's requests (keep-alive).
fn serve(stream: TcpStream, first: &mpsc::Sender<Instant>) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let text = request["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string();
        let mut words = text.split_whitespace().skip(1);
        let tokens: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(5);
        let pace = Duration::from_micros(words.next().and_then(|w| w.parse().ok()).unwrap_or(0));
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: \
                    chunked\r\n\r\n";
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        let chunk = |out: &mut TcpStream, data: &str| {
            let event = format!("data: {data}\n\n");
            out.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
        };
        for i in 0..tokens {
            let delta = json!({"object": "chat.completion.chunk", "choices": [{"index": 0,
                "delta": {"content": format!("tok{i} ")}, "finish_reason": null}]});
            if chunk(&mut out, &delta.to_string()).is_err() {
                return;
            }
            if i == 0 {
                let _ = first.send(Instant::now());
            }
            if !pace.is_zero() {
                std::thread::sleep(pace);
            }
        }
        let end = json!({"object": "chat.completion.chunk", "choices": [{"index": 0,
            "delta": {}, "finish_reason": "stop"}]});
        let _ = chunk(&mut out, &end.to_string());
        let _ = chunk(&mut out, "[DONE]");
        if out.write_all(b"0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// The direct client: one streaming request, from its send to its first token.
fn direct_ttft(endpoint: &Endpoint) -> Result<Duration, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", endpoint.port)).map_err(|e| format!("direct: {e}"))?;
    let _ = stream.set_nodelay(true);
    let body = json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": "stream 5 0"}]})
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let sent = Instant::now();
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("direct: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("direct: the answer ended without a token".into());
        }
        if line.starts_with("data: {") && line.contains("\"content\"") {
            let _ = endpoint.next_first();
            return Ok(sent.elapsed());
        }
    }
}

/// Runs the scenario (Roundtable only).
pub async fn run(ctx: &Ctx) -> Result<ScenarioReport, String> {
    let mut report = ScenarioReport::new("stream");
    let endpoint = Endpoint::start()?;
    let (rounds, many) = if ctx.quick { (10, 10) } else { (100, 100) };
    let many = many.min(ctx.max_clients().saturating_sub(2)).max(1);
    let (long_tokens, long_pace_us, long_clients) = if ctx.quick {
        (200, 1_000, many)
    } else {
        (2_000, 10_000, many)
    };
    report.param("ttft_rounds", rounds);
    report.param("clients", many);
    report.param("long_answer_tokens", long_tokens);
    report.param("long_answer_tokens_per_s", 1_000_000 / long_pace_us);
    let dir = ctx.tempdir()?;
    let server = ServerProcess::roundtable_env(
        &ctx.launch,
        dir.path(),
        &["--provider", "openai"],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", endpoint.url.as_str()),
            ("ROUNDTABLE_OPENAI_MODEL", "stream-bench"),
        ],
    )?;
    let result = measure(
        &server,
        &endpoint,
        rounds,
        many,
        (long_tokens, long_pace_us, long_clients),
    )
    .await;
    drop(server);
    let (figures, notes) = result?;
    report.figures = figures;
    report.notes.extend(notes);
    report.target(
        "ttft_added_1_client_p50_ms",
        "time to first token added over a direct client p50 <= 1 ms (1 client)",
        false,
        |v| v <= 1.0,
    );
    report.target(
        "ttft_added_1_client_p99_ms",
        "time to first token added p99 <= 5 ms (1 client)",
        false,
        |v| v <= 5.0,
    );
    report.target(
        "ttft_added_many_clients_p50_ms",
        "time to first token added p50 <= 1 ms (100 clients joined, the asker served last)",
        false,
        |v| v <= 1.0,
    );
    report.target(
        "ttft_added_many_clients_p99_ms",
        "time to first token added p99 <= 5 ms (100 clients joined, the asker served last)",
        false,
        |v| v <= 5.0,
    );
    if many < 100 {
        for t in report.targets.iter_mut().skip(2) {
            t.met = None;
            t.note = format!("{} (run had {many} clients, not 100)", t.note);
        }
    }
    Ok(report)
}

/// Joins `n` clients to `conversation`; the last is the submitter (the server serves clients
/// in the order they joined, so its pieces go out after every other client's).
async fn join(url: &str, conversation: &str, n: usize) -> Result<Vec<Client>, String> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = Client::connect(url).await?;
        c.join(conversation, |_| {}).await?;
        clients.push(c);
    }
    Ok(clients)
}

/// What one client saw of one answer: when its first piece came, how many pieces, whether
/// the request completed.
async fn watch(client: &mut Client, marker: &str) -> Result<(Instant, usize), String> {
    let mut first = None;
    let mut pieces = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(60), client.recv()).await {
            Err(_) => return Err("no frame within 60 s".into()),
            Ok(Incoming::Call(text)) => {
                let text = text.as_str();
                if text.contains("\"appendDisplay\"") && text.contains("\"inline\"") {
                    first.get_or_insert_with(Instant::now);
                    pieces += 1;
                } else if text.contains("\"commandComplete\"") && text.contains(marker) {
                    return first
                        .map(|f| (f, pieces))
                        .ok_or_else(|| "the answer completed without a piece".to_string());
                }
            }
            Ok(Incoming::Closed(code)) => return Err(format!("closed ({code:?})")),
            Ok(_) => {}
        }
    }
}

/// One answer of `text` submitted by the last of `clients`: every client's first-piece delay
/// from the submit (the submitter's last), and the pieces each got.
async fn one_answer(
    conversation: &str,
    clients: &mut [Client],
    text: &str,
    marker: &str,
) -> Result<(Vec<Duration>, Vec<usize>), String> {
    let channel = format!("dispatcher:{conversation}");
    let submitted = Instant::now();
    let submitter = clients.len() - 1;
    clients[submitter]
        .send_invoke(
            &channel,
            "submitCommand",
            json!([text, null, null, marker, null]),
        )
        .await?;
    let watched =
        futures_util::future::join_all(clients.iter_mut().map(|c| watch(c, marker))).await;
    let mut delays = Vec::new();
    let mut pieces = Vec::new();
    for w in watched {
        let (first, n) = w?;
        delays.push(first.duration_since(submitted));
        pieces.push(n);
    }
    Ok((delays, pieces))
}

async fn measure(
    server: &ServerProcess,
    endpoint: &Endpoint,
    rounds: usize,
    many: usize,
    (long_tokens, long_pace_us, long_clients): (usize, u64, usize),
) -> Result<(Vec<Figure>, Vec<String>), String> {
    let url = server.url();
    let mut control = Client::connect(&url).await?;
    let mut figures = Vec::new();
    let notes = vec![
        "the endpoint answers at once, so the added time includes the fsync of the request's \
         acceptance, which the first piece follows; a hosted model's own time to first token \
         (hundreds of ms) hides it"
            .to_string(),
        "every_client: each joined client's first piece, taken as this one process reads all \
         the sockets in turn on the machine the server runs on, so the later ones include the \
         harness's own reading of the others"
            .to_string(),
    ];
    // The direct client: the reference.
    let mut direct = report::latency_histogram();
    for _ in 0..rounds {
        report::record(&mut direct, direct_ttft(endpoint)?);
    }
    figures.extend(report::percentiles("ttft_direct", &direct));
    let mut added = Vec::new();
    for (label, n) in [("1_client", 1), ("many_clients", many)] {
        let conversation = control
            .create_conversation(&format!("stream-ttft-{label}"))
            .await?;
        let mut clients = join(&url, &conversation, n).await?;
        // The submitter's first piece, and (with many) every client's.
        let mut hist = report::latency_histogram();
        let mut every = report::latency_histogram();
        for round in 0..rounds {
            let marker = format!("ttft-{label}-{round}");
            let (delays, _) =
                one_answer(&conversation, &mut clients, "stream 5 0", &marker).await?;
            let _ = endpoint.next_first();
            report::record(&mut hist, *delays.last().expect("one client at least"));
            for d in delays {
                report::record(&mut every, d);
            }
        }
        for c in clients {
            c.close().await;
        }
        figures.extend(report::percentiles(&format!("ttft_{label}"), &hist));
        let mut measured = vec![(String::new(), &hist)];
        if n > 1 {
            figures.extend(report::percentiles(
                &format!("ttft_{label}_every_client"),
                &every,
            ));
            measured.push(("_every_client".to_string(), &every));
        }
        for (which, h) in measured {
            for (tag, q) in [("p50", 0.5), ("p99", 0.99)] {
                let ours = h.value_at_quantile(q) as f64 / 1000.0;
                let theirs = direct.value_at_quantile(q) as f64 / 1000.0;
                added.push(Figure::new(
                    format!("ttft_added_{label}{which}_{tag}_ms"),
                    (ours - theirs).max(0.0),
                    "ms",
                ));
            }
        }
    }
    figures.extend(added);

    // A long answer to many clients.
    let conversation = control.create_conversation("stream-long").await?;
    let mut clients = join(&url, &conversation, long_clients).await?;
    let rss_before = server.rss_kb();
    let fsyncs_before = metric(server.port, "roundtable_log_fsyncs_total");
    let cpu_before = crate::server::cpu_seconds(server.pid());
    let sampler = RssSampler::start(Some(server.pid()));
    let text = format!("stream {long_tokens} {long_pace_us}");
    let started = Instant::now();
    let (_, pieces) = one_answer(&conversation, &mut clients, &text, "long-answer").await?;
    let elapsed = started.elapsed();
    let _ = endpoint.next_first();
    let cpu = crate::server::cpu_seconds(server.pid())
        .zip(cpu_before)
        .map(|(a, b)| a - b);
    let fsyncs = metric(server.port, "roundtable_log_fsyncs_total")
        .zip(fsyncs_before)
        .map(|(a, b)| a - b);
    let peak = sampler.finish();
    for c in clients {
        c.close().await;
    }
    let rss_after = server.rss_kb();
    control.close().await;
    let delivered = (long_tokens * long_clients) as f64;
    figures.push(Figure::new("long_answer_s", elapsed.as_secs_f64(), "s"));
    if let Some(cpu) = cpu {
        figures.push(Figure::new(
            "cpu_us_per_delivered_token",
            cpu * 1e6 / delivered,
            "µs",
        ));
        figures.push(Figure::new(
            "server_cpu_percent",
            cpu * 100.0 / elapsed.as_secs_f64(),
            "%",
        ));
    }
    let frames = pieces.iter().sum::<usize>() as f64 / pieces.len().max(1) as f64;
    figures.push(Figure::new("frames_per_client", frames, "frames"));
    figures.push(Figure::new(
        "frames_per_client_per_s",
        frames / elapsed.as_secs_f64(),
        "frames/s",
    ));
    if let Some(fsyncs) = fsyncs {
        figures.push(Figure::new("fsyncs_per_answer", fsyncs, "fsyncs"));
    }
    for (name, kb) in [
        ("rss_before_mb", rss_before),
        ("rss_peak_mb", peak),
        ("rss_after_mb", rss_after),
    ] {
        if let Some(kb) = kb {
            figures.push(Figure::new(name, mb(kb), "MB"));
        }
    }
    Ok((figures, notes))
}
