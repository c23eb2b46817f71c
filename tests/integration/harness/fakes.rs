//! Stand-ins for the HTTP services the server calls: ONE scripted HTTP fake, [`ScriptedHttp`],
//! that plays an OpenAI-compatible model (`POST …/chat/completions`) as well as a tool server
//! (`GET /tools`, `POST /call`): it records each request body and answers with what the test's
//! script returns for it. [`Server::with_model`] starts the server wired to such a model;
//! [`Gate`] holds a scripted answer back until the test lets it go.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};

use serde_json::{json, Value};

use super::Server;

/// What a script answers to the `n`th request (from 0) whose JSON body is given (Null for a
/// bodyless GET): (HTTP status, body).
pub trait Script: Fn(usize, &Value) -> (u16, String) + Send + Sync + 'static {}
impl<F: Fn(usize, &Value) -> (u16, String) + Send + Sync + 'static> Script for F {}

/// A scripted HTTP/1.1 server on 127.0.0.1, keep-alive, one thread per connection; it lives
/// as long as the test process (the server under test is killed at the end of the test).
pub struct ScriptedHttp {
    /// `http://127.0.0.1:<port>/v1`: a model's base URL (the tool server client ignores the
    /// path prefix it does not need).
    pub url: String,
    /// Every request body so far, in arrival order (Null for a bodyless request).
    pub bodies: Arc<Mutex<Vec<Value>>>,
}

/// Starts a [`ScriptedHttp`] answering with `script`.
pub fn scripted(script: impl Script) -> ScriptedHttp {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/v1",
        listener.local_addr().unwrap().port()
    );
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let recorded = bodies.clone();
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let recorded = recorded.clone();
            let script = script.clone();
            std::thread::spawn(move || serve_connection(stream, &recorded, &*script));
        }
    });
    ScriptedHttp { url, bodies }
}

/// Answers the requests of one connection until the peer closes it.
fn serve_connection(stream: TcpStream, recorded: &Mutex<Vec<Value>>, script: &dyn Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    while let Some(body) = read_request(&mut reader) {
        let n = {
            let mut r = recorded.lock().unwrap();
            r.push(body.clone());
            r.len() - 1
        };
        let (status, answer) = script(n, &body);
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads one request: headers up to the blank line, then `Content-Length` bytes of JSON body.
/// `None` when the peer closed the connection.
fn read_request(reader: &mut impl BufRead) -> Option<Value> {
    let mut len = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    Some(if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    })
}

/// An OpenAI chat-completion response body carrying `message`.
pub fn completion(message: Value) -> String {
    json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).to_string()
}

/// A scripted model's answer to a request whose newest message is the user's text: the tool
/// calls `plan` gives for that text (ids `c0`, `c1`, …), all in one response. `None` when the
/// newest message is not the user's text or `plan` gives no calls.
pub fn planned_tool_calls(
    body: &Value,
    plan: &dyn Fn(&str) -> Vec<(&'static str, Value)>,
) -> Option<(u16, String)> {
    let last = body["messages"].as_array()?.last()?;
    if last["role"] != "user" {
        return None;
    }
    let calls: Vec<Value> = plan(last["content"].as_str()?)
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    (!calls.is_empty()).then(|| {
        (
            200,
            completion(json!({"role": "assistant", "content": null, "tool_calls": calls})),
        )
    })
}

/// A scripted model's answer after tool calls: `results: <the tool messages since the last
/// assistant message, as JSON>`, so a test reads every result from the final answer.
pub fn tool_results_answer(body: &Value) -> (u16, String) {
    let results: Vec<&Value> = body["messages"]
        .as_array()
        .map(|m| m.as_slice())
        .unwrap_or_default()
        .iter()
        .rev()
        .take_while(|m| m["role"] != "assistant")
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["content"])
        .collect();
    let text = format!("results: {}", json!(results));
    (
        200,
        completion(json!({"role": "assistant", "content": text})),
    )
}

/// Holds scripted answers back: made closed, a script calls [`Gate::pass`] (which waits while
/// the gate is closed), the test calls [`Gate::open`] to let every waiting answer go. This is
/// how a test keeps a turn running for as long as it needs to. Clones share one gate.
#[derive(Clone)]
pub struct Gate {
    /// `true` once opened, and the condition scripts wait on until then.
    state: Arc<(Mutex<bool>, Condvar)>,
}

impl Gate {
    /// A closed gate.
    pub fn closed() -> Gate {
        Gate {
            state: Arc::new((Mutex::new(false), Condvar::new())),
        }
    }

    /// Waits while the gate is closed (called from a script).
    pub fn pass(&self) {
        let (open, changed) = &*self.state;
        let _open = changed
            .wait_while(open.lock().unwrap(), |open| !*open)
            .unwrap();
    }

    /// Opens the gate for good: every answer waiting on it goes.
    pub fn open(&self) {
        let (open, changed) = &*self.state;
        *open.lock().unwrap() = true;
        changed.notify_all();
    }
}

/// A model that answers every request with the text `done`, but holds back the answer to a
/// request whose body `holds` picks until `gate` opens: a turn that runs as long as the test
/// needs.
pub fn model_held_by(
    gate: &Gate,
    holds: impl Fn(&Value) -> bool + Send + Sync + 'static,
) -> ScriptedHttp {
    let gate = gate.clone();
    scripted(move |_, body| {
        if holds(body) {
            gate.pass();
        }
        (
            200,
            completion(json!({"role": "assistant", "content": "done"})),
        )
    })
}

impl Server {
    /// A server whose agent is the OpenAI provider talking to `model` (a [`ScriptedHttp`]) as
    /// `model_name`, started with `extra` flags besides `--provider openai`.
    pub fn with_model(model: &ScriptedHttp, model_name: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--provider", "openai"];
        args.extend_from_slice(extra);
        Server::start_env(
            &args,
            &[
                ("ROUNDTABLE_OPENAI_BASE_URL", &model.url),
                ("ROUNDTABLE_OPENAI_MODEL", model_name),
            ],
        )
    }
}
