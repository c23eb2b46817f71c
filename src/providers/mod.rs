//! The models the agent loop calls: [`openai`] (any OpenAI-compatible
//! `/v1/chat/completions` endpoint) and [`anthropic`] (the Messages API), both streamed over
//! one HTTP stack ([`http`]: rustls with the system's or `SSL_CERT_FILE`'s roots, the
//! environment's proxies); the offline `builtin` one lives in `roundtable-actors`. External
//! tools are MCP servers ([`crate::mcp`]).
//!
//! [`crate::server::serve`] builds the [`ProviderSet`] once at start-up from the
//! [`ProviderSettings`] (`--provider`, the config file's `[providers.NAME]` profiles) and the
//! environment, and hands its default to the registry's runtime config; conversations see
//! only `dyn Provider`. The pieces: [`profiles`] (the settings, checked), `call.rs` (one
//! streamed call: time limits, retries, errors), [`sse`] (the event-stream parser),
//! [`retry`] (backoff, `Retry-After`), [`status`] (error answers in words).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::builtin::BuiltinProvider;
use roundtable_actors::agent::providers::Providers;
use roundtable_actors::agent::Provider;
use roundtable_actors::redact::redact_url_credentials;

pub mod anthropic;
pub(crate) mod call;
pub mod http;
pub mod openai;
pub mod profiles;
pub mod retry;
pub mod sse;
pub mod status;

pub use profiles::{ProviderKind, ProviderProfile, ProviderSettings};

use http::HttpStack;
use profiles::resolve_key;

/// The providers the server offers, by name, and the default: built once at start-up
/// ([`ProviderSet::build`]). `builtin` is always there; `openai` and `anthropic` (the
/// environment's) when their model variable is set or they are the default; every profile
/// that could be built (a profile that cannot, the default aside, is left out with a
/// warning: a missing key for a provider not in use does not stop the server).
#[derive(Clone)]
pub struct ProviderSet {
    /// The default's name.
    default: String,
    /// Every provider, by name.
    providers: BTreeMap<String, Arc<dyn Provider>>,
}

impl std::fmt::Debug for ProviderSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSet")
            .field("default", &self.default)
            .field("names", &self.providers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ProviderSet {
    /// The set of `settings`, keys and endpoints read from this process's environment. The
    /// error names the variable, key or file that is missing or wrong.
    pub fn build(settings: &ProviderSettings) -> Result<ProviderSet, String> {
        // Every provider's TLS uses ring through its own configuration; installing it as
        // the process's default too covers the other rustls users (MCP's HTTP transport).
        let _ = rustls::crypto::ring::default_provider().install_default();
        ProviderSet::build_with(settings, &|name| std::env::var(name).ok(), &|| {
            HttpStack::from_env().map(Arc::new)
        })
    }

    /// [`build`](Self::build) over any variable lookup and HTTP stack (tests). The stack is
    /// made once, when the first provider that calls over HTTP is built: a server with only
    /// the offline provider reads no trust store.
    pub fn build_with(
        settings: &ProviderSettings,
        lookup: &dyn Fn(&str) -> Option<String>,
        make_stack: &dyn Fn() -> Result<Arc<HttpStack>, String>,
    ) -> Result<ProviderSet, String> {
        settings.check_default()?;
        let made_stack = std::cell::OnceCell::new();
        let stack = || -> Result<Arc<HttpStack>, String> {
            if let Some(stack) = made_stack.get() {
                return Ok(Arc::clone(stack));
            }
            let stack = make_stack()?;
            Ok(Arc::clone(made_stack.get_or_init(|| stack)))
        };
        let mut providers: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        providers.insert("builtin".to_owned(), Arc::new(BuiltinProvider));
        let set = |name: &str| lookup(name).is_some_and(|v| !v.trim().is_empty());
        let wanted =
            |name: &str, model_variable: &str| settings.default == name || set(model_variable);
        let mut offer =
            |name: &str, made: Result<Arc<dyn Provider>, String>| -> Result<(), String> {
                match made {
                    Ok(provider) => {
                        providers.insert(name.to_owned(), provider);
                        Ok(())
                    }
                    Err(e) if settings.default == name => Err(e),
                    Err(e) => {
                        log::warn!("provider {name} is not available: {e}");
                        Ok(())
                    }
                }
            };
        if wanted("openai", openai::ENV_MODEL) {
            let made = openai::OpenAiConfig::from_lookup(lookup).and_then(|config| {
                let stack = stack()?;
                log_endpoint("openai", &config.model, &config.base_url, &stack);
                Ok(Arc::new(openai::OpenAiProvider::new(config, stack)) as Arc<dyn Provider>)
            });
            offer("openai", made)?;
        }
        if wanted("anthropic", anthropic::ENV_MODEL) {
            let made = anthropic::AnthropicConfig::from_lookup(lookup).and_then(|config| {
                let stack = stack()?;
                log_endpoint("anthropic", &config.model, &config.base_url, &stack);
                Ok(Arc::new(anthropic::AnthropicProvider::new(config, stack)) as Arc<dyn Provider>)
            });
            offer("anthropic", made)?;
        }
        for profile in &settings.profiles {
            let made = stack().and_then(|stack| from_profile(profile, lookup, &stack));
            offer(&profile.name, made)?;
        }
        log::info!("agent provider: {} (the default)", settings.default);
        Ok(ProviderSet {
            default: settings.default.clone(),
            providers,
        })
    }

    /// The default provider's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// The default provider (what a conversation uses unless it chose another).
    pub fn default_provider(&self) -> Arc<dyn Provider> {
        self.providers
            .get(&self.default)
            .cloned()
            .expect("the default is built or the set is not")
    }

    /// The provider named `name`, if the set has it.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.providers.get(name).cloned()
    }

    /// Every provider's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }

    /// The set as conversations hold it (each may choose one by name).
    pub fn shared(&self) -> Providers {
        Providers::new(&self.default, self.providers.clone())
    }
}

/// Logs which model a provider calls and where, without credentials.
fn log_endpoint(name: &str, model: &str, base_url: &str, stack: &HttpStack) {
    log::info!(
        "agent provider {name} ({model} at {}; {})",
        redact_url_credentials(base_url),
        stack.describe()
    );
}

/// The provider of a profile (its key read now).
fn from_profile(
    profile: &ProviderProfile,
    lookup: &dyn Fn(&str) -> Option<String>,
    stack: &Arc<HttpStack>,
) -> Result<Arc<dyn Provider>, String> {
    let key = resolve_key(profile, lookup)?;
    let name = profile.name.clone();
    Ok(match profile.kind {
        ProviderKind::Openai => {
            let config = openai::OpenAiConfig {
                name,
                base_url: profile
                    .base_url
                    .clone()
                    .unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_owned()),
                model: profile.model.clone(),
                api_key: key,
                timeout: profile
                    .timeout
                    .unwrap_or(Duration::from_secs(openai::DEFAULT_TIMEOUT_SECS)),
                context_window: profile.context_window,
                retry: retry::RetryPolicy::default(),
            };
            log_endpoint(&profile.name, &config.model, &config.base_url, stack);
            Arc::new(openai::OpenAiProvider::new(config, stack.clone()))
        }
        ProviderKind::Anthropic => {
            let api_key = key.ok_or_else(|| {
                format!(
                    "provider `{}`: the Messages API needs a key: set api_key_env or api_key_file",
                    profile.name
                )
            })?;
            let config = anthropic::AnthropicConfig {
                name,
                base_url: profile
                    .base_url
                    .clone()
                    .unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_owned()),
                model: profile.model.clone(),
                api_key,
                timeout: profile
                    .timeout
                    .unwrap_or(Duration::from_secs(anthropic::DEFAULT_TIMEOUT_SECS)),
                context_window: profile.context_window,
                max_tokens: profile.max_tokens.unwrap_or(anthropic::DEFAULT_MAX_TOKENS),
                thinking_budget: profile.thinking_budget,
                retry: retry::RetryPolicy::default(),
            };
            log_endpoint(&profile.name, &config.model, &config.base_url, stack);
            Arc::new(anthropic::AnthropicProvider::new(config, stack.clone()))
        }
    })
}

/// The default provider of `settings` (the server's agent), built with the environment.
pub fn agent_provider(settings: &ProviderSettings) -> Result<Arc<dyn Provider>, String> {
    Ok(ProviderSet::build(settings)?.default_provider())
}

#[cfg(test)]
mod tests;
