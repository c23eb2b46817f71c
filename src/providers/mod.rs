//! The model the agent loop calls: [`openai`], the OpenAI-compatible provider over HTTP
//! (`awc`); the offline `builtin` one lives in `roundtable-actors`. External tools are MCP
//! servers ([`crate::mcp`]).
//!
//! [`crate::server::serve`] builds the provider once at start-up ([`agent_provider`]) and
//! hands it to the registry's runtime config; conversations see only `dyn Provider`. The
//! settings (`config.rs`, `config_file.rs`) name the choice ([`ProviderChoice`]); nothing
//! here reads them.

use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::Provider;
use roundtable_actors::redact::redact_url_credentials;

pub mod openai;

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
}

/// The provider `--provider` names. `openai` reads its settings from the environment; the
/// error names the variable that is missing or wrong.
pub fn agent_provider(choice: ProviderChoice) -> Result<Arc<dyn Provider>, String> {
    Ok(match choice {
        ProviderChoice::Builtin => Arc::new(BuiltinProvider),
        ProviderChoice::Openai => {
            let config = openai::OpenAiConfig::from_env()?;
            log::info!(
                "agent provider: openai ({} at {})",
                config.model,
                redact_url_credentials(&config.base_url)
            );
            Arc::new(openai::OpenAiProvider::new(config))
        }
    })
}

/// An `awc` client whose connect, request and response each end within `timeout`. Built per
/// call: `awc::Client` is `!Send`, and a call runs on whichever arbiter asked.
fn http_client(timeout: Duration) -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().timeout(timeout))
        .timeout(timeout)
        .finish()
}
