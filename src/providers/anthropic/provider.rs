//! [`AnthropicProvider`]: one `POST <base>/v1/messages` per model call, streamed, through
//! `call.rs` (time limits, retries, error texts naming the URL); the body is built by
//! [`super::wire`], the events assembled by [`super::stream`]. Also the listing of
//! `GET <base>/v1/models`.

use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use roundtable_actors::agent::{
    AnswerDelta, ContentBlock, DeltaSink, LocalBoxFuture, Provider, ProviderError, ProviderRequest,
    ProviderResponse,
};
use roundtable_actors::redact::redact_url_credentials;

use super::config::{AnthropicConfig, API_VERSION};
use super::stream::{MessageStream, Origin};
use super::wire::{parse_message, request_body};
use crate::providers::call::{self, Answer, HttpCall};
use crate::providers::http::HttpStack;

/// Most pages of `/v1/models` read (1,000 models each): a listing that never ends stops.
const MAX_MODEL_PAGES: usize = 10;

/// A [`Provider`] calling the Anthropic Messages API. Cheap to share (`Arc`s inside).
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    /// Shared by every call.
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Endpoint, model, key, limits, thinking.
    config: AnthropicConfig,
    /// TLS and proxies.
    stack: Arc<HttpStack>,
}

impl AnthropicProvider {
    /// A provider for `config`, calling through `stack`. Nothing is contacted until the
    /// first call.
    pub fn new(config: AnthropicConfig, stack: Arc<HttpStack>) -> Self {
        AnthropicProvider {
            inner: Arc::new(Inner { config, stack }),
        }
    }

    /// The configuration this provider was built with.
    pub fn config(&self) -> &AnthropicConfig {
        &self.inner.config
    }
}

impl Inner {
    /// A request to `url` with `body` (none for a GET).
    fn http_call(&self, url: String, body: Vec<u8>) -> Result<HttpCall, ProviderError> {
        let shown_url = redact_url_credentials(&url);
        let host = call::host_of(&url, &shown_url)?;
        let mut headers = HeaderMap::new();
        let mut key = HeaderValue::from_str(&self.config.api_key).map_err(|_| {
            ProviderError::Unreachable("the API key holds characters a header cannot carry".into())
        })?;
        key.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        if !body.is_empty() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        Ok(HttpCall {
            url,
            shown_url,
            host,
            headers,
            body: body.into(),
            timeout: self.config.timeout,
            timeout_hint: self.config.timeout_hint(),
            secret: Some(self.config.api_key.clone()),
            model: self.config.model.clone(),
            policy: self.config.retry,
            who: format!("{} ({})", self.config.name, self.config.model),
        })
    }

    /// One streamed call.
    async fn call(
        &self,
        request: &ProviderRequest,
        sink: &mut dyn FnMut(AnswerDelta),
    ) -> Result<ProviderResponse, ProviderError> {
        let body = request_body(&self.config, request, true);
        let http = self.http_call(
            self.config.messages_url(),
            serde_json::to_vec(&body).expect("a JSON value serializes"),
        )?;
        let origin = Origin {
            who: http.who.clone(),
            shown_url: http.shown_url.clone(),
            model: self.config.model.clone(),
            secret: Some(self.config.api_key.clone()),
        };
        let answer = call::send(
            &self.stack,
            &http,
            || MessageStream::new(origin.clone()),
            sink,
        )
        .await?;
        match answer {
            Answer::Streamed(response) => Ok(response),
            Answer::Whole(bytes) => {
                let response = parse_message(&bytes)?;
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

impl Provider for AnthropicProvider {
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
        Box::pin(async move { inner.call(&request, &mut *deltas).await })
    }

    fn list_models(&self) -> LocalBoxFuture<'static, Result<Vec<String>, ProviderError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut ids = Vec::new();
            let mut after: Option<String> = None;
            for _ in 0..MAX_MODEL_PAGES {
                let mut url = format!("{}?limit=1000", inner.config.models_url());
                if let Some(last) = &after {
                    url.push_str(&format!("&after_id={last}"));
                }
                let http = inner.http_call(url, Vec::new())?;
                let page = call::get_json(&inner.stack, &http).await?;
                let data = page["data"].as_array().ok_or_else(|| {
                    ProviderError::Invalid(format!(
                        "the listing of models from {} has no `data` array",
                        http.shown_url
                    ))
                })?;
                ids.extend(
                    data.iter()
                        .filter_map(|m| m["id"].as_str())
                        .map(str::to_owned),
                );
                match (page["has_more"].as_bool(), page["last_id"].as_str()) {
                    (Some(true), Some(last)) => after = Some(last.to_owned()),
                    _ => break,
                }
            }
            ids.sort();
            ids.dedup();
            Ok(ids)
        })
    }
}
