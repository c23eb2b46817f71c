//! The model the agent loop calls: [`openai`] (any OpenAI-compatible `/v1/chat/completions`
//! endpoint) or [`anthropic`] (the Messages API), streamed over one HTTP stack ([`http`]: rustls with the system's or
//! `SSL_CERT_FILE`'s roots, the environment's proxies); the offline `builtin` one lives in
//! `roundtable-actors`. External tools are MCP servers ([`crate::mcp`]).
//!
//! [`crate::server::serve`] builds the provider once at start-up ([`agent_provider`]) and
//! hands it to the registry's runtime config; conversations see only `dyn Provider`. The
//! settings (`config.rs`, `config_file.rs`) name the choice ([`ProviderChoice`]). The pieces:
//! `call.rs` (one streamed call: time limits, retries, errors), [`sse`] (the event-stream
//! parser), [`retry`] (backoff, `Retry-After`), [`status`] (error answers in words).

use std::sync::Arc;

use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::Provider;
use roundtable_actors::redact::redact_url_credentials;

pub mod anthropic;
pub(crate) mod call;
pub mod http;
pub mod openai;
pub mod retry;
pub mod sse;
pub mod status;

/// The agent's model backend, as `--provider` (and the config file's `provider`) names it:
/// defined here, with the providers it chooses between; the settings read it from here.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderChoice {
    /// Offline and deterministic: tools for arithmetic, time and weather, otherwise echo.
    Builtin,
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint (`ROUNDTABLE_OPENAI_*` env).
    Openai,
    /// The Anthropic Messages API (`ROUNDTABLE_ANTHROPIC_*` env).
    Anthropic,
}

/// The provider `--provider` names. `openai` and `anthropic` read their settings from the
/// environment (the endpoint, and the HTTP stack's roots and proxies); the error names the
/// variable that is missing or wrong.
pub fn agent_provider(choice: ProviderChoice) -> Result<Arc<dyn Provider>, String> {
    if choice == ProviderChoice::Builtin {
        return Ok(Arc::new(BuiltinProvider));
    }
    // The providers' TLS uses ring through their own configuration; installing it as the
    // process's default too covers the other rustls users.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let stack = Arc::new(http::HttpStack::from_env()?);
    let log = |name: &str, model: &str, base_url: &str| {
        log::info!(
            "agent provider: {name} ({model} at {}; {})",
            redact_url_credentials(base_url),
            stack.describe()
        )
    };
    Ok(match choice {
        ProviderChoice::Builtin => unreachable!("answered above"),
        ProviderChoice::Openai => {
            let config = openai::OpenAiConfig::from_env()?;
            log("openai", &config.model, &config.base_url);
            Arc::new(openai::OpenAiProvider::new(config, stack.clone()))
        }
        ProviderChoice::Anthropic => {
            let config = anthropic::AnthropicConfig::from_env()?;
            log("anthropic", &config.model, &config.base_url);
            Arc::new(anthropic::AnthropicProvider::new(config, stack.clone()))
        }
    })
}
