//! The model the agent loop calls: [`openai`], the OpenAI-compatible provider over HTTP
//! (`awc`); the offline `builtin` one lives in `roundtable-actors`. External tools are MCP
//! servers ([`crate::mcp`]).
//!
//! [`crate::server::serve`] builds the provider once at start-up ([`agent_provider`]) and
//! hands it to the registry's runtime config; conversations see only `dyn Provider`.

use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::Provider;
use roundtable_actors::redact::redact_url_credentials;

use crate::config::ProviderChoice;

pub mod openai;

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
