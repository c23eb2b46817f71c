//! The HTTP client of the Streamable HTTP transport ([`BoundedClient`]): rmcp's reqwest
//! client, with what it cannot take turned into an error answer to the request it answered,
//! so the call fails at once with the reason and the transport goes on serving the others.
//!
//! rmcp bounds a JSON answer and an SSE event at [`MAX_HTTP_MESSAGE_BYTES`];
//! past it (or for a JSON answer it cannot parse, e.g. one nested past serde_json's limit) its
//! client fails the POST, and the call got "Transport send error: … HTTP response body
//! exceeded the maximum size", or for an SSE answer "Transport closed", read as the server
//! having stopped. Here such a POST answers its request with Roundtable's refusal
//! ([`wire::refusal`]: "answered more than 16 MiB …"), and each SSE event of an answer is
//! checked as a stdio line is ([`wire::defused`]): one nested too deep has its deep tools
//! stubbed (a `tools/list` page keeps its other tools) or becomes an error answer.
//!
//! Who talks to it: rmcp's Streamable HTTP worker, on the MCP thread (the supervisor builds
//! the transport with it, [`super::server`]).

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::wire;

/// Largest Streamable HTTP answer read (one JSON body or SSE event); a stdio line has the
/// same bound ([`super::stdio::MAX_LINE_BYTES`]).
pub const MAX_HTTP_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Redirects one request follows (rmcp's default client's number).
pub const MAX_REDIRECTS: usize = 10;

/// rmcp's reqwest client, with oversized and unreadable answers refused per request (see the
/// module docs).
#[derive(Clone)]
pub struct BoundedClient(reqwest::Client);

impl BoundedClient {
    /// A client built as rmcp builds its default one: no idle connection pooling (a reused
    /// connection whose last body was not read to its end stalls on delayed ACKs), and only
    /// same-origin 307 / 308 redirects followed, at most [`MAX_REDIRECTS`] (a cross-origin
    /// one would replay the session id and the configured headers to another host; a 301 to
    /// 303 would turn the POST into a GET and lose the message).
    pub fn new() -> Result<BoundedClient, String> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .map(BoundedClient)
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }
}

/// The id of `message` when it is a request (the only message an answer can fail).
fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// [`wire::refusal`] of request `id`, as the message rmcp reads.
fn refusal(id: &RequestId, why: &str) -> ServerJsonRpcMessage {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    serde_json::from_slice(&wire::refusal(&id, why)).expect("a refusal is a valid error answer")
}

/// One SSE event of request `id`'s answer as rmcp should read it: too large (rmcp's bound)
/// becomes a refusal, too deep is defused, anything else passes.
fn checked_event(id: &RequestId, event: Result<Sse, SseError>) -> Result<Sse, SseError> {
    let refused = |why: &str| {
        let message = refusal(id, why);
        Ok(Sse::default()
            .event("message")
            .data(serde_json::to_string(&message).unwrap_or_default()))
    };
    match event {
        Err(e)
            if e.to_string()
                .contains("SSE event exceeded the maximum size") =>
        {
            refused(&format!(
                "answered more than {} MiB (an SSE event past the bound); the answer was \
                 dropped",
                MAX_HTTP_MESSAGE_BYTES >> 20
            ))
        }
        Ok(event) => {
            let Some(data) = event.data.as_deref() else {
                return Ok(event);
            };
            if !wire::may_be_too_deep(data.as_bytes()) {
                return Ok(event);
            }
            let shape = wire::shape(data.as_bytes());
            if shape.depth <= wire::MAX_DEPTH {
                return Ok(event);
            }
            match wire::defused(data.as_bytes(), &shape) {
                Some(out) => Ok(Sse {
                    data: Some(String::from_utf8_lossy(&out).into_owned()),
                    ..event
                }),
                // A request or notification of the server's: nothing rmcp can read.
                None => Ok(Sse {
                    data: None,
                    ..event
                }),
            }
        }
        other => other,
    }
}

impl StreamableHttpClient for BoundedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let id = request_id(&message);
        let answer = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        let Some(id) = id else {
            return answer;
        };
        match answer {
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                let why = format!(
                    "answered more than {} MiB; the answer was dropped",
                    max_size >> 20
                );
                Ok(StreamableHttpPostResponse::Json(refusal(&id, &why), None))
            }
            Err(StreamableHttpError::Deserialize(e)) => {
                let why = format!("answered something that cannot be read ({e})");
                Ok(StreamableHttpPostResponse::Json(refusal(&id, &why), None))
            }
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let events = events.map(move |event| checked_event(&id, event));
                Ok(StreamableHttpPostResponse::Sse(events.boxed(), session))
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
