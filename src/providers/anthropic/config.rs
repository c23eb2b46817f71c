//! Where the Anthropic Messages API is and how it is called: [`AnthropicConfig`], read from
//! the `ROUNDTABLE_ANTHROPIC_*` environment at start-up (`--provider anthropic`), or made from
//! a `kind = "anthropic"` profile of the config file, by [`crate::providers::ProviderSet`].

use std::fmt;
use std::time::Duration;

use crate::providers::retry::RetryPolicy;

/// Base URL used when `ROUNDTABLE_ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Time limit, in seconds, when `ROUNDTABLE_ANTHROPIC_TIMEOUT_SECS` is not set: of the first
/// event, and (capped at a minute) of each silence after it.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;

/// Most tokens an answer may have (`max_tokens`, which the API requires) when not
/// configured: 8,192 lets a long answer with tool calls through on every current model
/// (the oldest Claude 3 models take at most 4,096: set it lower for them).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The smallest thinking budget the API accepts.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// The `anthropic-version` header every request carries: the version whose events and
/// fields this provider reads.
pub const API_VERSION: &str = "2023-06-01";

/// Environment variable holding the base URL (`https://api.anthropic.com`; a gateway's).
pub const ENV_BASE_URL: &str = "ROUNDTABLE_ANTHROPIC_BASE_URL";
/// Environment variable holding the model name (required).
pub const ENV_MODEL: &str = "ROUNDTABLE_ANTHROPIC_MODEL";
/// Environment variable holding the API key.
pub const ENV_API_KEY: &str = "ROUNDTABLE_ANTHROPIC_API_KEY";
/// Fallback for the API key, read when [`ENV_API_KEY`] is not set (the SDKs' variable).
pub const ENV_API_KEY_FALLBACK: &str = "ANTHROPIC_API_KEY";
/// Environment variable holding the time limit in whole seconds.
pub const ENV_TIMEOUT_SECS: &str = "ROUNDTABLE_ANTHROPIC_TIMEOUT_SECS";
/// Environment variable holding the model's context window in tokens (optional).
pub const ENV_CONTEXT_WINDOW: &str = "ROUNDTABLE_ANTHROPIC_CONTEXT_WINDOW";
/// Environment variable holding `max_tokens` (optional, [`DEFAULT_MAX_TOKENS`]).
pub const ENV_MAX_TOKENS: &str = "ROUNDTABLE_ANTHROPIC_MAX_TOKENS";
/// Environment variable holding the extended-thinking budget in tokens (optional; off when
/// unset).
pub const ENV_THINKING_BUDGET: &str = "ROUNDTABLE_ANTHROPIC_THINKING_BUDGET";

/// How to reach the Messages API. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// The provider's name (`anthropic`, or the profile's).
    pub name: String,
    /// Base URL; requests go to `<base>/v1/messages` (`/v1` is not doubled when the base
    /// already ends with it).
    pub base_url: String,
    /// Model name (`claude-…`).
    pub model: String,
    /// Sent as `x-api-key`.
    pub api_key: String,
    /// Time limit of a call's first event (and, capped at a minute, of each silence after).
    pub timeout: Duration,
    /// The model's context window in tokens, when configured.
    pub context_window: Option<u64>,
    /// `max_tokens` of every request.
    pub max_tokens: u64,
    /// Extended thinking's `budget_tokens`, when asked for (at least
    /// [`MIN_THINKING_BUDGET`], below `max_tokens`).
    pub thinking_budget: Option<u64>,
    /// How failed calls are retried.
    pub retry: RetryPolicy,
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("name", &self.name)
            .field(
                "base_url",
                &roundtable_actors::redact::redact_url_credentials(&self.base_url),
            )
            .field("model", &self.model)
            .field("api_key", &"<redacted>")
            .field("timeout", &self.timeout)
            .field("context_window", &self.context_window)
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget", &self.thinking_budget)
            .field("retry", &self.retry)
            .finish()
    }
}

/// A positive whole number from `raw`, or the error naming `what` (a variable or a key).
pub(crate) fn positive(what: &str, raw: &str, unit: &str) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "{what} must be a positive whole number of {unit}, got {raw:?}"
        )),
    }
}

impl AnthropicConfig {
    /// Reads the configuration from the environment (see the `ENV_*` constants). Empty
    /// values count as unset; the error names the offending variable.
    pub fn from_env() -> Result<AnthropicConfig, String> {
        AnthropicConfig::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (tests use a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<AnthropicConfig, String> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let model = get(ENV_MODEL).ok_or_else(|| {
            format!("{ENV_MODEL} is not set: name the Claude model (`roundtable models --provider anthropic` lists them)")
        })?;
        let api_key = get(ENV_API_KEY)
            .or_else(|| get(ENV_API_KEY_FALLBACK))
            .ok_or_else(|| format!("{ENV_API_KEY} (or {ENV_API_KEY_FALLBACK}) is not set: the Messages API needs a key"))?;
        let number = |name: &str, unit: &str| -> Result<Option<u64>, String> {
            get(name).map(|raw| positive(name, &raw, unit)).transpose()
        };
        let config = AnthropicConfig {
            name: "anthropic".to_owned(),
            base_url: get(ENV_BASE_URL).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            model,
            api_key,
            timeout: Duration::from_secs(
                number(ENV_TIMEOUT_SECS, "seconds")?.unwrap_or(DEFAULT_TIMEOUT_SECS),
            ),
            context_window: number(ENV_CONTEXT_WINDOW, "tokens")?,
            max_tokens: number(ENV_MAX_TOKENS, "tokens")?.unwrap_or(DEFAULT_MAX_TOKENS),
            thinking_budget: number(ENV_THINKING_BUDGET, "tokens")?,
            retry: RetryPolicy::default(),
        };
        config.check(ENV_THINKING_BUDGET)?;
        Ok(config)
    }

    /// Whether the thinking budget fits the API's rules (`what` names where it was set).
    pub fn check(&self, what: &str) -> Result<(), String> {
        match self.thinking_budget {
            Some(budget) if budget < MIN_THINKING_BUDGET => Err(format!(
                "{what} must be at least {MIN_THINKING_BUDGET} tokens (the API's minimum), got {budget}"
            )),
            Some(budget) if budget >= self.max_tokens => Err(format!(
                "{what} ({budget}) must be below max_tokens ({}): the thinking is part of the answer",
                self.max_tokens
            )),
            _ => Ok(()),
        }
    }

    /// `<base>/v1/<path>`, `/v1` not doubled.
    fn url(&self, path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        format!("{base}/v1/{path}")
    }

    /// The request URL: `<base>/v1/messages`.
    pub fn messages_url(&self) -> String {
        self.url("messages")
    }

    /// The listing of models: `<base>/v1/models`.
    pub fn models_url(&self) -> String {
        self.url("models")
    }

    /// What to change when calls time out, for the time-out's error.
    pub fn timeout_hint(&self) -> String {
        if self.name == "anthropic" {
            format!("raise {ENV_TIMEOUT_SECS} for slow answers")
        } else {
            format!(
                "raise `timeout` in [providers.{}] for slow answers",
                self.name
            )
        }
    }
}
