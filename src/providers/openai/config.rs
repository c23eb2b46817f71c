//! Where the OpenAI-compatible endpoint is: [`OpenAiConfig`], read from the
//! `ROUNDTABLE_OPENAI_*` environment at start-up (`--provider openai`), or made from a
//! `[providers.NAME]` profile of the config file, by [`crate::providers::ProviderSet`].

use std::fmt;
use std::time::Duration;

use crate::providers::retry::RetryPolicy;

/// Base URL used when `ROUNDTABLE_OPENAI_BASE_URL` is not set (a local llama.cpp server).
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080/v1";

/// Request timeout, in seconds, used when `ROUNDTABLE_OPENAI_TIMEOUT_SECS` is not set.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;

/// Environment variable holding the base URL (up to and including `/v1`).
pub const ENV_BASE_URL: &str = "ROUNDTABLE_OPENAI_BASE_URL";
/// Environment variable holding the model name (required).
pub const ENV_MODEL: &str = "ROUNDTABLE_OPENAI_MODEL";
/// Environment variable holding the API key (optional).
pub const ENV_API_KEY: &str = "ROUNDTABLE_OPENAI_API_KEY";
/// Fallback environment variable for the API key, read when [`ENV_API_KEY`] is not set.
pub const ENV_API_KEY_FALLBACK: &str = "OPENAI_API_KEY";
/// Environment variable holding the request timeout in whole seconds.
pub const ENV_TIMEOUT_SECS: &str = "ROUNDTABLE_OPENAI_TIMEOUT_SECS";
/// Environment variable holding the model's context window in tokens (optional): each
/// conversation's context meter is capped at it and shows its share. Chat-completions answers
/// do not say it, so without it the meter shows tokens only.
pub const ENV_CONTEXT_WINDOW: &str = "ROUNDTABLE_OPENAI_CONTEXT_WINDOW";

/// Where and how to reach an OpenAI-compatible endpoint.
///
/// `Debug` never prints the API key, nor credentials in the base URL.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The provider's name (`openai`, or the profile's): what logs, `@system config` and the
    /// time-out's advice call it.
    pub name: String,
    /// Base URL up to and including the API version, e.g. `http://127.0.0.1:8080/v1`;
    /// requests go to `<base_url without trailing slash>/chat/completions`.
    pub base_url: String,
    /// Model name sent as `"model"` (llama.cpp ignores it, Ollama and vLLM need it).
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// The time limit of a call: for its first event (or, not streamed, its whole answer),
    /// and, capped at a minute, for each silence after (see `providers/call.rs`).
    pub timeout: Duration,
    /// The model's context window in tokens, when configured (see [`ENV_CONTEXT_WINDOW`]).
    pub context_window: Option<u64>,
    /// How failed calls are retried (the default; tests shorten it).
    pub retry: RetryPolicy,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("name", &self.name)
            .field(
                "base_url",
                &roundtable_actors::redact::redact_url_credentials(&self.base_url),
            )
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("context_window", &self.context_window)
            .field("retry", &self.retry)
            .finish()
    }
}

impl OpenAiConfig {
    /// Reads the configuration from the environment:
    /// `ROUNDTABLE_OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]),
    /// `ROUNDTABLE_OPENAI_MODEL` (required),
    /// `ROUNDTABLE_OPENAI_API_KEY` falling back to `OPENAI_API_KEY` (optional),
    /// `ROUNDTABLE_OPENAI_TIMEOUT_SECS` (default [`DEFAULT_TIMEOUT_SECS`]) and
    /// `ROUNDTABLE_OPENAI_CONTEXT_WINDOW` (optional, a positive whole number of tokens).
    /// Empty values count as unset. The error text names the offending variable.
    pub fn from_env() -> Result<OpenAiConfig, String> {
        OpenAiConfig::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (tests use a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<OpenAiConfig, String> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let base_url = get(ENV_BASE_URL).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let model = get(ENV_MODEL).ok_or_else(|| {
            format!("{ENV_MODEL} is not set: name the model the OpenAI-compatible endpoint serves")
        })?;
        let api_key = get(ENV_API_KEY).or_else(|| get(ENV_API_KEY_FALLBACK));
        let timeout = match get(ENV_TIMEOUT_SECS) {
            None => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            Some(raw) => match raw.parse::<u64>() {
                Ok(secs) if secs > 0 => Duration::from_secs(secs),
                _ => {
                    return Err(format!(
                        "{ENV_TIMEOUT_SECS} must be a positive whole number of seconds, got {raw:?}"
                    ))
                }
            },
        };
        let context_window = match get(ENV_CONTEXT_WINDOW) {
            None => None,
            Some(raw) => match raw.parse::<u64>() {
                Ok(tokens) if tokens > 0 => Some(tokens),
                _ => {
                    return Err(format!(
                    "{ENV_CONTEXT_WINDOW} must be a positive whole number of tokens, got {raw:?}"
                ))
                }
            },
        };
        Ok(OpenAiConfig {
            name: "openai".to_owned(),
            base_url,
            model,
            api_key,
            timeout,
            context_window,
            retry: RetryPolicy::default(),
        })
    }

    /// The request URL: `<base_url without trailing slash>/chat/completions`.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    /// The listing of models: `<base_url without trailing slash>/models`.
    pub fn models_url(&self) -> String {
        format!("{}/models", self.base_url.trim_end_matches('/'))
    }

    /// What to change when calls time out, for the time-out's error.
    pub fn timeout_hint(&self) -> String {
        if self.name == "openai" {
            format!("raise {ENV_TIMEOUT_SECS} for slow models")
        } else {
            format!(
                "raise `timeout` in [providers.{}] for slow models",
                self.name
            )
        }
    }
}
