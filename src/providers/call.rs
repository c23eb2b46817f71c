//! One model call over HTTP, as both providers make it: [`send`] posts the request through
//! the [`HttpStack`], reads a streamed answer event by event into the provider's
//! [`Assembler`] (which hands each piece of text or thinking to the turn's sink as it
//! arrives), retries what may be retried, and maps every failure to a [`ProviderError`] whose
//! text names the URL. A provider builds the [`HttpCall`] (URL, headers, body) and the
//! assembler of its API's events; everything about time limits, retries and bounds is here.
//!
//! Time limits (from the provider's configured `timeout`, see [`HttpCall::timeout`]):
//! - the response head and the first event must arrive within `timeout` of the request (a
//!   model reading a long prompt may take a while before its first token);
//! - after that, the stream may go silent for at most [`idle_limit`] (`timeout`, at most
//!   [`MAX_IDLE`]) between two reads: a long answer that keeps coming is never cut, a server
//!   that died mid-answer is noticed;
//! - an answer that is not streamed (a server that ignores `"stream": true`) must arrive
//!   whole within `timeout` of the request, as before streaming.
//!
//! Retries ([`RetryPolicy`]): a 408, 429 or 5xx answer, or a connection reset or closed
//! before the answer began, is tried again after the server's `Retry-After` (at most
//! [`MAX_RETRY_AFTER`]) or a jittered backoff, up to the policy's attempts, and only while no
//! word of the answer has been shown: a call that has shown text is never repeated (the turn
//! would show it twice). A refused connection, an unknown host, a certificate, a time-out and
//! the other statuses fail at once.
//!
//! Cancellation: dropping the future drops the response, and `reqwest` closes an HTTP/1.1
//! connection whose answer was not read to its end, so the server sees the connection close
//! and stops generating (the HTTP stack offers only HTTP/1.1, see `http.rs`).

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use roundtable_actors::agent::{AnswerDelta, ProviderError, ProviderResponse};
use tokio::time::{timeout_at, Instant};

use super::http::{transport_error, HttpStack};
use super::retry::{retry_after, RetryPolicy, MAX_RETRY_AFTER};
use super::sse::{SseEvent, SseParser};
use super::status::{is_retryable, status_error};

/// Longest silence between two reads of a streamed answer, whatever the configured timeout:
/// servers stream tokens every few tens of milliseconds and Anthropic pings every few
/// seconds; a minute without a byte is a dead connection, not a slow model.
pub const MAX_IDLE: Duration = Duration::from_secs(60);

/// Largest answer read whole (a non-streamed answer, or a listing of models): 16 MiB, far
/// above a long answer with many tool calls.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Most of an error answer's body read: 64 KiB (only its first 500 characters are shown).
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// How long the rest of a stream is read after its last event, so that the connection ends
/// cleanly and is kept for the next call: the end of the body follows the last event at
/// once on every server; one that holds the response open has its connection closed
/// instead.
pub const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// The silence allowed between two reads of a stream that has begun (see the module docs).
pub fn idle_limit(timeout: Duration) -> Duration {
    timeout.min(MAX_IDLE)
}

/// One request, as a provider builds it.
#[derive(Debug, Clone)]
pub(crate) struct HttpCall {
    /// Where it goes (may hold credentials: only for the request).
    pub url: String,
    /// The URL as errors and logs show it (credentials removed).
    pub shown_url: String,
    /// The URL's host, as certificate errors name it.
    pub host: String,
    /// The headers (key, version, content type, accept).
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Bytes,
    /// The configured time limit (see the module docs for what it limits).
    pub timeout: Duration,
    /// What to do about a time-out, for its error (`raise ROUNDTABLE_OPENAI_TIMEOUT_SECS for
    /// slow models`).
    pub timeout_hint: String,
    /// The API key, scrubbed from error texts.
    pub secret: Option<String>,
    /// The configured model, for the unknown-model error.
    pub model: String,
    /// Retries.
    pub policy: RetryPolicy,
    /// Who calls, for the log (`openai (qwen2.5)`).
    pub who: String,
}

/// Whether the stream goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read on.
    More,
    /// The answer is complete (`[DONE]`, `message_stop`).
    Done,
}

/// An error the stream itself reported (an `error` event), and whether it may be retried
/// (an overloaded server; only while nothing was shown).
#[derive(Debug)]
pub(crate) struct StreamFailure {
    /// What the user reads.
    pub error: ProviderError,
    /// True for the server's transient errors (overloaded, rate limited).
    pub retryable: bool,
}

/// A provider's reader of its API's events: builds the answer and hands each piece of text
/// and thinking to the sink as it arrives.
pub(crate) trait Assembler {
    /// One event of the stream.
    fn event(
        &mut self,
        event: SseEvent,
        sink: &mut dyn FnMut(AnswerDelta),
    ) -> Result<Flow, StreamFailure>;
    /// The whole answer, once the stream ended (with its end marker or without: an answer
    /// that broke off before its end is an error here).
    fn finish(self) -> Result<ProviderResponse, ProviderError>;
}

/// What came back.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A streamed answer, assembled.
    Streamed(ProviderResponse),
    /// A body that is not an event stream (a server that does not stream): the provider
    /// parses it.
    Whole(Bytes),
}

/// A failure of one attempt: the error, and `Some(server's wait)` when it may be retried.
struct Failure {
    /// What the user reads if no retry follows.
    error: ProviderError,
    /// `None`: final. `Some(None)`: retry after the backoff. `Some(Some(d))`: the server
    /// asked to wait `d`.
    retry: Option<Option<Duration>>,
}

impl Failure {
    fn last(error: ProviderError) -> Failure {
        Failure { error, retry: None }
    }
}

/// Makes the call (see the module docs): `new_assembler` gives a fresh reader per attempt;
/// `sink` gets the answer's pieces.
pub(crate) async fn send<A: Assembler>(
    stack: &HttpStack,
    call: &HttpCall,
    mut new_assembler: impl FnMut() -> A,
    sink: &mut dyn FnMut(AnswerDelta),
) -> Result<Answer, ProviderError> {
    let mut shown = false;
    let mut attempt = 1;
    loop {
        let failure = match attempt_once(stack, call, new_assembler(), sink, &mut shown).await {
            Ok(answer) => return Ok(answer),
            Err(failure) => failure,
        };
        let Some(asked) = failure.retry else {
            return Err(failure.error);
        };
        if shown || attempt >= call.policy.max_attempts {
            return Err(failure.error);
        }
        if asked.is_some_and(|wait| wait > MAX_RETRY_AFTER) {
            log::warn!(
                "{}: {} (the server asks to wait {:?}, longer than the {MAX_RETRY_AFTER:?} a \
                 call waits)",
                call.who,
                failure.error,
                asked.unwrap_or_default()
            );
            return Err(failure.error);
        }
        let wait = call.policy.delay(attempt, asked);
        log::warn!(
            "{}: {} (attempt {attempt} of {}); trying again in {wait:?}",
            call.who,
            failure.error,
            call.policy.max_attempts
        );
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// One attempt.
async fn attempt_once<A: Assembler>(
    stack: &HttpStack,
    call: &HttpCall,
    mut assembler: A,
    sink: &mut dyn FnMut(AnswerDelta),
    shown: &mut bool,
) -> Result<Answer, Failure> {
    let client = stack.client().map_err(Failure::last)?;
    let deadline = Instant::now() + call.timeout;
    let request = client
        .post(&call.url)
        .headers(call.headers.clone())
        .body(call.body.clone());
    let mut response = match timeout_at(deadline, request.send()).await {
        Err(_) => return Err(Failure::last(timeout_error(call))),
        Ok(Err(e)) => {
            let failure = transport_error(&e, &call.host, &call.shown_url, stack);
            return Err(Failure {
                error: failure.error,
                retry: failure.retryable.then_some(None),
            });
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    if !response.status().is_success() {
        let asked = retry_after(response.headers());
        let body = read_text(&mut response, MAX_ERROR_BYTES, deadline).await;
        let error = status_error(
            status,
            &body,
            &call.model,
            &call.shown_url,
            call.secret.as_deref(),
        );
        return Err(Failure {
            error,
            retry: is_retryable(status).then_some(asked),
        });
    }
    let streamed = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if !streamed {
        return read_whole(&mut response, call, deadline)
            .await
            .map(Answer::Whole);
    }

    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut began = false;
    let mut limit = deadline;
    loop {
        let chunk = match timeout_at(limit, response.chunk()).await {
            Err(_) if began => return Err(Failure::last(idle_error(call))),
            Err(_) => return Err(Failure::last(timeout_error(call))),
            Ok(Err(e)) => {
                return Err(Failure {
                    error: ProviderError::Unreachable(format!(
                        "the answer from {} broke off: {}",
                        call.shown_url,
                        innermost(&e)
                    )),
                    retry: Some(None),
                })
            }
            Ok(Ok(chunk)) => chunk,
        };
        let parsed = match &chunk {
            Some(bytes) => parser.push(bytes, &mut events),
            None => parser.finish(&mut events),
        };
        parsed.map_err(|e| {
            Failure::last(ProviderError::Invalid(format!(
                "the answer stream from {}: {e}",
                call.shown_url
            )))
        })?;
        for event in events.drain(..) {
            began = true;
            let mut tracked = |delta: AnswerDelta| {
                *shown = true;
                sink(delta);
            };
            match assembler.event(event, &mut tracked) {
                Ok(Flow::More) => {}
                Ok(Flow::Done) => {
                    drain(&mut response).await;
                    return assembler
                        .finish()
                        .map(Answer::Streamed)
                        .map_err(Failure::last);
                }
                Err(failure) => {
                    return Err(Failure {
                        error: failure.error,
                        retry: failure.retryable.then_some(None),
                    })
                }
            }
        }
        if chunk.is_none() {
            return assembler
                .finish()
                .map(Answer::Streamed)
                .map_err(Failure::last);
        }
        if began {
            limit = Instant::now() + idle_limit(call.timeout);
        }
    }
}

/// `no answer from URL within 2m (raise … for slow models)`.
fn timeout_error(call: &HttpCall) -> ProviderError {
    ProviderError::Timeout(format!(
        "no answer from {} within {:?} ({})",
        call.shown_url, call.timeout, call.timeout_hint
    ))
}

/// A stream that went silent after it began.
fn idle_error(call: &HttpCall) -> ProviderError {
    ProviderError::Timeout(format!(
        "the answer from {} stopped for {:?} before its end ({})",
        call.shown_url,
        idle_limit(call.timeout),
        call.timeout_hint
    ))
}

/// Reads a body that is not streamed, whole, by `deadline`, at most [`MAX_RESPONSE_BYTES`].
async fn read_whole(
    response: &mut reqwest::Response,
    call: &HttpCall,
    deadline: Instant,
) -> Result<Bytes, Failure> {
    let mut body = Vec::new();
    loop {
        match timeout_at(deadline, response.chunk()).await {
            Err(_) => return Err(Failure::last(timeout_error(call))),
            Ok(Err(e)) => {
                return Err(Failure {
                    error: ProviderError::Unreachable(format!(
                        "reading the answer from {} failed: {}",
                        call.shown_url,
                        innermost(&e)
                    )),
                    retry: Some(None),
                })
            }
            Ok(Ok(None)) => return Ok(Bytes::from(body)),
            Ok(Ok(Some(bytes))) => {
                if body.len() + bytes.len() > MAX_RESPONSE_BYTES {
                    return Err(Failure::last(ProviderError::Invalid(format!(
                        "the answer from {} is larger than {} MiB",
                        call.shown_url,
                        MAX_RESPONSE_BYTES / (1024 * 1024)
                    ))));
                }
                body.extend_from_slice(&bytes);
            }
        }
    }
}

/// Up to `max` bytes of a body, by `deadline`, as text (what arrived, if the rest does not).
async fn read_text(response: &mut reqwest::Response, max: usize, deadline: Instant) -> String {
    let mut body = Vec::new();
    while body.len() < max {
        match timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                body.extend_from_slice(&bytes[..bytes.len().min(max - body.len())])
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) if body.is_empty() => {
                return format!("(the body could not be read: {})", innermost(&e))
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Reads what follows the last event for at most [`DRAIN_GRACE`] (see there).
async fn drain(response: &mut reqwest::Response) {
    let until = Instant::now() + DRAIN_GRACE;
    let mut left = MAX_ERROR_BYTES;
    while let Ok(Ok(Some(bytes))) = timeout_at(until, response.chunk()).await {
        if bytes.len() >= left {
            break;
        }
        left -= bytes.len();
    }
}

/// A GET whose answer is JSON (a listing of models), one attempt, whole within `timeout`.
pub(crate) async fn get_json(
    stack: &HttpStack,
    call: &HttpCall,
) -> Result<serde_json::Value, ProviderError> {
    let client = stack.client()?;
    let deadline = Instant::now() + call.timeout;
    let request = client.get(&call.url).headers(call.headers.clone());
    let mut response = match timeout_at(deadline, request.send()).await {
        Err(_) => return Err(timeout_error(call)),
        Ok(Err(e)) => return Err(transport_error(&e, &call.host, &call.shown_url, stack).error),
        Ok(Ok(response)) => response,
    };
    if !response.status().is_success() {
        let status = response.status().as_u16();
        let body = read_text(&mut response, MAX_ERROR_BYTES, deadline).await;
        return Err(status_error(
            status,
            &body,
            &call.model,
            &call.shown_url,
            call.secret.as_deref(),
        ));
    }
    let bytes = read_whole(&mut response, call, deadline)
        .await
        .map_err(|f| f.error)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ProviderError::Invalid(format!(
            "the answer from {} is not JSON: {e}",
            call.shown_url
        ))
    })
}

/// The text of the deepest error of `error`'s chain (what happened, not where).
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut last = error;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// The host of `url` (for certificate errors), or an exact error when it is not a URL.
pub(crate) fn host_of(url: &str, shown: &str) -> Result<String, ProviderError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ProviderError::Unreachable(format!("invalid endpoint URL {shown}: {e}")))?;
    match parsed.scheme() {
        "http" | "https" => {}
        other => {
            return Err(ProviderError::Unreachable(format!(
                "invalid endpoint URL {shown}: the scheme must be http or https, not {other}"
            )))
        }
    }
    parsed
        .host_str()
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::Unreachable(format!("invalid endpoint URL {shown}: no host")))
}
