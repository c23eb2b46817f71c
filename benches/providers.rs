//! The providers' HTTP layer, measured against a local endpoint in this process (no network,
//! so only the software is measured); the figures are in `BENCHMARKS.md`, "Providers".
//!
//! - `http-clients`: `awc` against `reqwest` (the providers' HTTP client, as `HttpStack`
//!   builds it), each sending
//!   2,000 small JSON POSTs over one kept-alive connection to the same local HTTP/1.1 server,
//!   in interleaved rounds of 200 (the order swapped every round); latency per request (p50 /
//!   p99) and the client's CPU time per request (its thread's `getrusage`: both clients run
//!   their connection on the calling thread's runtime).
//! - `ttft`: time to first token through `OpenAiProvider::complete_streaming` (request body,
//!   HTTP stack, SSE parser, chunk assembly, the sink) against a direct streaming client of
//!   the same endpoint (the same `reqwest` client posting a prepared body and stopping at the
//!   first `data:` line), 1,000 calls each in interleaved rounds of 100; p50 / p99 and the
//!   difference, which is what the provider layer adds.
//!
//! `cargo bench --bench providers` runs both; `-- http-clients` or `-- ttft` one.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roundtable::providers::http::{HttpSettings, HttpStack};
use roundtable::providers::openai::{OpenAiConfig, OpenAiProvider};
use roundtable::providers::retry::RetryPolicy;
use roundtable_actors::agent::{AnswerDelta, ChatMessage, Provider, ProviderRequest, Role};

/// Requests per client in `http-clients`.
const POSTS: usize = 2_000;
/// Calls per client in `ttft`.
const CALLS: usize = 1_000;
/// Rounds both are split into (interleaved).
const ROUNDS: usize = 10;

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if wants("http-clients") {
        http_clients();
    }
    if wants("ttft") {
        ttft();
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD is Linux's.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// `p50 / p99` of `samples`, in microseconds.
fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1e6
    };
    (at(0.50), at(0.99))
}

/// Reads one request (head, then `Content-Length` bytes); false when the peer closed.
fn read_request(reader: &mut BufReader<TcpStream>) -> bool {
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).is_ok()
}

/// A keep-alive HTTP/1.1 server on a free loopback port answering every request with
/// `answer(stream)`, one thread per connection. Answers its base URL.
fn server(answer: fn(&mut TcpStream) -> std::io::Result<()>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            std::thread::spawn(move || {
                stream.set_nodelay(true).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                while read_request(&mut reader) {
                    if answer(&mut stream).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// `http-clients` (see the module docs).
fn http_clients() {
    fn small_json(stream: &mut TcpStream) -> std::io::Result<()> {
        let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }
    let url = format!("{}/v1/chat/completions", server(small_json));
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}"#;
    let per_round = POSTS / ROUNDS;
    let system = actix_web::rt::System::new();
    let (awc_times, awc_cpu, reqwest_times, reqwest_cpu) = system.block_on(async {
        let awc = awc::Client::builder().finish();
        // The providers' own client (their TLS configuration, no proxy, TCP_NODELAY).
        let reqwest = HttpStack::new(&HttpSettings::default())
            .unwrap()
            .client()
            .unwrap();
        let awc_post = |awc: &awc::Client| {
            let request = awc
                .post(&url)
                .insert_header(("content-type", "application/json"));
            async move {
                let mut response = request.send_body(&body[..]).await.unwrap();
                assert!(response.status().is_success());
                response.body().await.unwrap().len()
            }
        };
        let reqwest_post = |client: &reqwest::Client| {
            let request = client
                .post(&url)
                .header("content-type", "application/json")
                .body(&body[..]);
            async move {
                let response = request.send().await.unwrap();
                assert!(response.status().is_success());
                response.bytes().await.unwrap().len()
            }
        };
        for _ in 0..50 {
            awc_post(&awc).await;
            reqwest_post(&reqwest).await;
        }
        let (mut awc_times, mut reqwest_times) = (Vec::new(), Vec::new());
        let (mut awc_cpu, mut reqwest_cpu) = (Duration::ZERO, Duration::ZERO);
        for round in 0..ROUNDS {
            for turn in 0..2 {
                let use_awc = (round + turn) % 2 == 0;
                let cpu = thread_cpu();
                for _ in 0..per_round {
                    let started = Instant::now();
                    if use_awc {
                        awc_post(&awc).await;
                        awc_times.push(started.elapsed());
                    } else {
                        reqwest_post(&reqwest).await;
                        reqwest_times.push(started.elapsed());
                    }
                }
                let used = thread_cpu() - cpu;
                if use_awc {
                    awc_cpu += used;
                } else {
                    reqwest_cpu += used;
                }
            }
        }
        (awc_times, awc_cpu, reqwest_times, reqwest_cpu)
    });
    println!("## http-clients ({POSTS} POSTs each, {ROUNDS} interleaved rounds, keep-alive)");
    println!("| client | p50 µs | p99 µs | client CPU µs / request |");
    println!("| --- | --- | --- | --- |");
    for (name, mut times, cpu) in [
        ("awc 3", awc_times, awc_cpu),
        ("reqwest 0.13", reqwest_times, reqwest_cpu),
    ] {
        let (p50, p99) = percentiles(&mut times);
        let per = cpu.as_secs_f64() * 1e6 / times.len() as f64;
        println!("| {name} | {p50:.0} | {p99:.0} | {per:.1} |");
    }
}

/// `ttft` (see the module docs).
fn ttft() {
    fn streamed(stream: &mut TcpStream) -> std::io::Result<()> {
        let events = [
            r#"data: {"object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}"#,
            r#"data: {"object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}"#,
            r#"data: {"object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"data: {"object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2}}"#,
            "data: [DONE]",
        ];
        stream.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        )?;
        for event in events {
            let event = format!("{event}\n\n");
            write!(stream, "{:x}\r\n{event}\r\n", event.len())?;
            stream.flush()?;
        }
        stream.write_all(b"0\r\n\r\n")
    }
    let base = format!("{}/v1", server(streamed));
    let stack = Arc::new(HttpStack::new(&HttpSettings::default()).unwrap());
    let provider = OpenAiProvider::new(
        OpenAiConfig {
            name: "openai".into(),
            base_url: base.clone(),
            model: "m".into(),
            api_key: Some("sk-bench".into()),
            timeout: Duration::from_secs(10),
            context_window: None,
            retry: RetryPolicy::default(),
        },
        stack.clone(),
    );
    let request = ProviderRequest::new(
        "You are terse.",
        vec![ChatMessage::text(Role::User, "Say hello")],
        Vec::new(),
    );
    let url = format!("{base}/chat/completions");
    let body = br#"{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let per_round = CALLS / ROUNDS;
    let system = actix_web::rt::System::new();
    let (mut direct, mut layered) = system.block_on(async {
        let client = stack.client().unwrap();
        let direct_call = || async {
            let started = Instant::now();
            let mut response = client
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .header("authorization", "Bearer sk-bench")
                .body(&body[..])
                .send()
                .await
                .unwrap();
            let mut first = None;
            while let Some(bytes) = response.chunk().await.unwrap() {
                if first.is_none() && bytes.windows(6).any(|w| w == b"data: ") {
                    first = Some(started.elapsed());
                }
            }
            first.expect("a data line")
        };
        let provider_call = || {
            let first: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
            let seen = first.clone();
            let started = Instant::now();
            let call = provider.complete_streaming(
                request.clone(),
                Box::new(move |delta| {
                    if matches!(delta, AnswerDelta::Text(_)) && seen.get().is_none() {
                        seen.set(Some(Instant::now()));
                    }
                }),
            );
            async move {
                call.await.unwrap();
                first.get().expect("a first word") - started
            }
        };
        for _ in 0..50 {
            direct_call().await;
            provider_call().await;
        }
        let (mut direct, mut layered) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            for turn in 0..2 {
                for _ in 0..per_round {
                    if (round + turn) % 2 == 0 {
                        direct.push(direct_call().await);
                    } else {
                        layered.push(provider_call().await);
                    }
                }
            }
        }
        (direct, layered)
    });
    let (d50, d99) = percentiles(&mut direct);
    let (p50, p99) = percentiles(&mut layered);
    println!("## ttft ({CALLS} calls each, {ROUNDS} interleaved rounds, keep-alive, plain HTTP)");
    println!("| client | p50 µs | p99 µs |");
    println!("| --- | --- | --- |");
    println!("| direct reqwest stream | {d50:.0} | {d99:.0} |");
    println!("| OpenAiProvider::complete_streaming | {p50:.0} | {p99:.0} |");
    println!(
        "| added by the provider layer | {:.0} | {:.0} |",
        p50 - d50,
        p99 - d99
    );
}
