//! What the agent loop calls outside the process: the model ([`openai`], the
//! OpenAI-compatible provider; the offline `builtin` one lives in `roundtable-actors`) and
//! external tools ([`toolserver`], `--tool-server NAME=URL`). Both speak HTTP through `awc`.
//!
//! [`crate::server::serve`] builds them once at start-up ([`agent_provider`],
//! [`connect_tool_servers`]) and hands them to the registry's runtime config; conversations
//! see only `dyn Provider` / `dyn ToolServer`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::turn::ToolServer;
use roundtable_actors::agent::Provider;
use roundtable_actors::redact::redact_url_credentials;

use crate::config::ProviderChoice;

pub mod openai;
pub mod toolserver;

/// How long start-up waits for a tool server's tool list, and each call to it.
const TOOL_SERVER_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Reads every `(name, url)` tool server's tool list, in order; the first that fails stops
/// start-up with its error. Must run inside an actix `System`.
pub async fn connect_tool_servers(
    servers: &[(String, String)],
) -> Result<HashMap<String, Arc<dyn ToolServer>>, String> {
    let mut connected: HashMap<String, Arc<dyn ToolServer>> = HashMap::new();
    for (name, url) in servers {
        let server = toolserver::HttpToolServer::connect(name, url, TOOL_SERVER_TIMEOUT).await?;
        log::info!(
            "tool server {name} at {}: {} tools",
            redact_url_credentials(url),
            server.tools_count()
        );
        connected.insert(name.clone(), Arc::new(server));
    }
    Ok(connected)
}

/// An `awc` client whose connect, request and response each end within `timeout`. Built per
/// call: `awc::Client` is `!Send`, and a call runs on whichever arbiter asked.
fn http_client(timeout: Duration) -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().timeout(timeout))
        .timeout(timeout)
        .finish()
}
