//! [`OpenAiProvider`]: one `POST <base>/chat/completions` per model call, streamed, through
//! `call.rs` (time limits, retries, error texts naming the URL); the body is built and a whole
//! answer read by [`super::wire`], a streamed one assembled by [`super::stream`]. Also the
//! listing of `GET <base>/models`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use roundtable_actors::agent::{
    AnswerDelta, ContentBlock, DeltaSink, LocalBoxFuture, Provider, ProviderError, ProviderRequest,
    ProviderResponse,
};
use roundtable_actors::redact::redact_url_credentials;
use serde_json::Value;

use super::config::OpenAiConfig;
use super::stream::ChunkStream;
use super::wire::{parse_response, request_body};
use crate::providers::call::{self, Answer, HttpCall};
use crate::providers::http::HttpStack;

/// A [`Provider`] calling an OpenAI-compatible `/chat/completions` endpoint.
///
/// Cheap to share: the configuration and the HTTP stack sit behind `Arc`s.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    /// Shared by every call (and by clones).
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Endpoint, model, key, limits.
    config: OpenAiConfig,
    /// TLS and proxies.
    stack: Arc<HttpStack>,
    /// Whether the endpoint streams: true until it showed it does not (see the module docs
    /// of `openai`); then every call asks for a whole answer.
    streams: AtomicBool,
}

impl OpenAiProvider {
    /// A provider for `config`, calling through `stack`. Nothing is contacted until the
    /// first call.
    pub fn new(config: OpenAiConfig, stack: Arc<HttpStack>) -> Self {
        OpenAiProvider {
            inner: Arc::new(Inner {
                config,
                stack,
                streams: AtomicBool::new(true),
            }),
        }
    }

    /// The configuration this provider was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.inner.config
    }

    /// Whether calls still ask for streamed answers (false once the endpoint showed it does
    /// not stream).
    pub fn streams(&self) -> bool {
        self.inner.streams.load(Ordering::Relaxed)
    }
}

impl Inner {
    /// The request to `url` (headers for a streamed or a whole answer) with `body`.
    fn http_call(
        &self,
        url: String,
        body: Vec<u8>,
        stream: bool,
    ) -> Result<HttpCall, ProviderError> {
        let shown_url = redact_url_credentials(&url);
        let host = call::host_of(&url, &shown_url)?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(if stream {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        if let Some(key) = &self.config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ProviderError::Unreachable(
                    "the API key holds characters a header cannot carry".to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(HttpCall {
            url,
            shown_url,
            host,
            headers,
            body: body.into(),
            timeout: self.config.timeout,
            timeout_hint: self.config.timeout_hint(),
            secret: self.config.api_key.clone(),
            model: self.config.model.clone(),
            policy: self.config.retry,
            who: format!("{} ({})", self.config.name, self.config.model),
        })
    }

    /// One call, streamed or not; the pieces of a whole answer go to `sink` at once.
    async fn call(
        &self,
        request: &ProviderRequest,
        stream: bool,
        sink: &mut dyn FnMut(AnswerDelta),
    ) -> Result<ProviderResponse, ProviderError> {
        let body = request_body(&self.config.model, request, stream);
        let http = self.http_call(
            self.config.chat_completions_url(),
            serde_json::to_vec(&body).expect("a JSON value serializes"),
            stream,
        )?;
        let secret = self.config.api_key.as_deref();
        let answer = call::send(
            &self.stack,
            &http,
            || ChunkStream::new(&http.shown_url, secret),
            sink,
        )
        .await?;
        match answer {
            Answer::Streamed(response) => Ok(response),
            Answer::Whole(bytes) => {
                if stream && self.streams.swap(false, Ordering::Relaxed) {
                    log::info!(
                        "{}: {} answered a streaming request whole; asking it for whole \
                         answers from now on",
                        http.who,
                        http.shown_url
                    );
                }
                let response = parse_response(&bytes)?;
                for block in &response.content {
                    match block {
                        ContentBlock::Thinking { text, .. } => {
                            sink(AnswerDelta::Thinking(text.clone()))
                        }
                        ContentBlock::Text { text } => sink(AnswerDelta::Text(text.clone())),
                        _ => {}
                    }
                }
                Ok(response)
            }
        }
    }
}

/// Whether a 400's reason says the server does not take a streaming request (`stream`,
/// `stream_options` unknown or unsupported).
fn refuses_streaming(error: &ProviderError) -> bool {
    matches!(error, ProviderError::Status { status: 400, body } if body.to_ascii_lowercase().contains("stream"))
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.inner.config.name
    }

    fn model(&self) -> Option<&str> {
        Some(&self.inner.config.model)
    }

    fn context_window(&self) -> Option<u64> {
        self.inner.config.context_window
    }

    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        self.complete_streaming(request, Box::new(|_| {}))
    }

    fn complete_streaming(
        &self,
        request: ProviderRequest,
        mut deltas: DeltaSink,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let stream = inner.streams.load(Ordering::Relaxed);
            match inner.call(&request, stream, &mut *deltas).await {
                Err(e) if stream && refuses_streaming(&e) => {
                    inner.streams.store(false, Ordering::Relaxed);
                    log::info!(
                        "{} ({}): the endpoint refuses streaming requests ({e}); asking it for \
                         whole answers from now on",
                        inner.config.name,
                        inner.config.model
                    );
                    inner.call(&request, false, &mut *deltas).await
                }
                other => other,
            }
        })
    }

    fn list_models(&self) -> LocalBoxFuture<'static, Result<Vec<String>, ProviderError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut http = inner.http_call(inner.config.models_url(), Vec::new(), false)?;
            http.headers.remove(CONTENT_TYPE);
            let listing = call::get_json(&inner.stack, &http).await?;
            model_ids(&listing, &http.shown_url)
        })
    }
}

/// The `id`s of a `/models` listing (`{"data": [{"id": …}, …]}`; Ollama's native `models`
/// too), sorted, each once.
pub(crate) fn model_ids(listing: &Value, shown_url: &str) -> Result<Vec<String>, ProviderError> {
    let entries = listing
        .get("data")
        .or_else(|| listing.get("models"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ProviderError::Invalid(format!(
                "the listing of models from {shown_url} has no `data` array"
            ))
        })?;
    let mut ids: Vec<String> = entries
        .iter()
        .filter_map(|e| {
            e.get("id")
                .or_else(|| e.get("name"))
                .and_then(Value::as_str)
        })
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}
