//! [`OpenAiProvider`]: one `POST <base>/chat/completions` per model call, under the
//! configured time limit, with every transport failure mapped to a [`ProviderError`] whose
//! text names the URL. The body and the answer are built and read by [`super::wire`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use awc::error::{PayloadError, SendRequestError};
use awc::http::header;
use roundtable_actors::agent::{
    LocalBoxFuture, Provider, ProviderError, ProviderRequest, ProviderResponse,
};
use roundtable_actors::redact::redact_url_credentials;
use serde_json::Value;

use crate::providers::http_client;

use super::config::{OpenAiConfig, ENV_TIMEOUT_SECS};
use super::wire::{parse_response, request_body, truncate};

/// Largest response body accepted (a long answer with many tool calls still fits easily).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A [`Provider`] calling an OpenAI-compatible `/chat/completions` endpoint.
///
/// Cheap to share: the configuration sits behind an `Arc`, and every call builds its own
/// (`!Send`) `awc` client inside the returned future.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: Arc<OpenAiConfig>,
}

impl OpenAiProvider {
    /// A provider for `config`. Nothing is contacted until the first call.
    pub fn new(config: OpenAiConfig) -> Self {
        OpenAiProvider {
            config: Arc::new(config),
        }
    }

    /// The configuration this provider was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> Option<&str> {
        Some(&self.config.model)
    }

    fn context_window(&self) -> Option<u64> {
        self.config.context_window
    }

    fn complete(
        &self,
        request: ProviderRequest,
    ) -> LocalBoxFuture<'static, Result<ProviderResponse, ProviderError>> {
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let body = request_body(&config.model, &request);
            let url = config.chat_completions_url();
            // awc's own timeout covers connect + response head + body; the outer one is a
            // guarantee that the whole call, whatever stage it is stuck in, ends in time.
            match tokio::time::timeout(config.timeout, send(&config, &url, &body)).await {
                Ok(result) => result,
                Err(_) => Err(timeout_error(&redact_url_credentials(&url), config.timeout)),
            }
        })
    }
}

/// One HTTP round trip: POST the body, check the status, parse the answer.
async fn send(
    config: &OpenAiConfig,
    url: &str,
    body: &Value,
) -> Result<ProviderResponse, ProviderError> {
    let client = http_client(config.timeout);
    let mut req = client
        .post(url)
        .insert_header((header::ACCEPT, "application/json"));
    if let Some(key) = &config.api_key {
        req = req.bearer_auth(key);
    }
    // Errors reach the conversation's clients and the log: never with credentials.
    let shown = redact_url_credentials(url);
    let mut response = req
        .send_json(body)
        .await
        .map_err(|e| send_error(&shown, config.timeout, e))?;
    let status = response.status();
    let bytes = response.body().limit(MAX_RESPONSE_BYTES).await;
    if !status.is_success() {
        let body = match bytes {
            Ok(bytes) => truncate(&String::from_utf8_lossy(&bytes)),
            Err(e) => format!("(response body unreadable: {e})"),
        };
        return Err(ProviderError::Status {
            status: status.as_u16(),
            body,
        });
    }
    let bytes = bytes.map_err(|e| payload_error(&shown, config.timeout, e))?;
    parse_response(&bytes)
}

fn timeout_error(url: &str, timeout: Duration) -> ProviderError {
    ProviderError::Unreachable(format!(
        "no complete answer from {url} within {timeout:?} (raise {ENV_TIMEOUT_SECS} for slow models)"
    ))
}

fn send_error(url: &str, timeout: Duration, error: SendRequestError) -> ProviderError {
    match error {
        SendRequestError::Timeout => timeout_error(url, timeout),
        SendRequestError::Connect(e) => {
            ProviderError::Unreachable(format!("cannot connect to {url}: {e}"))
        }
        SendRequestError::Url(e) => {
            ProviderError::Unreachable(format!("invalid endpoint URL {url}: {e}"))
        }
        other => ProviderError::Unreachable(format!("request to {url} failed: {other}")),
    }
}

fn payload_error(url: &str, timeout: Duration, error: PayloadError) -> ProviderError {
    match error {
        PayloadError::Overflow => ProviderError::Invalid(format!(
            "response from {url} is larger than {} MiB",
            MAX_RESPONSE_BYTES / (1024 * 1024)
        )),
        PayloadError::Io(e) if e.kind() == io::ErrorKind::TimedOut => timeout_error(url, timeout),
        other => {
            ProviderError::Unreachable(format!("reading the response from {url} failed: {other}"))
        }
    }
}
