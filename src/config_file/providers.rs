//! The providers in `config show`: the environment's `openai` and `anthropic` (each value
//! with the variable that set it, or `default`) and each `[providers.NAME]` profile (each
//! key with its file and line). A key is never printed: the environment's shows as
//! `"(set, hidden)"`, a profile's as the variable or file it is read from, with whether that
//! variable is set.

use crate::providers::profiles::KeySource;
use crate::providers::{anthropic, openai, ProviderProfile};

/// One setting read from the environment: (key shown, the variables that may set it in the
/// order they are read, the default as shown, whether it is a secret).
type EnvSetting = (&'static str, &'static [&'static str], Option<String>, bool);

/// The settings of the environment's providers.
fn env_settings() -> [(&'static str, Vec<EnvSetting>); 2] {
    [
        (
            "openai",
            vec![
                (
                    "base_url",
                    &[openai::ENV_BASE_URL],
                    Some(quoted(openai::DEFAULT_BASE_URL)),
                    false,
                ),
                ("model", &[openai::ENV_MODEL], None, false),
                (
                    "api_key",
                    &[openai::ENV_API_KEY, openai::ENV_API_KEY_FALLBACK],
                    None,
                    true,
                ),
                (
                    "timeout_secs",
                    &[openai::ENV_TIMEOUT_SECS],
                    Some(openai::DEFAULT_TIMEOUT_SECS.to_string()),
                    false,
                ),
                ("context_window", &[openai::ENV_CONTEXT_WINDOW], None, false),
            ],
        ),
        (
            "anthropic",
            vec![
                (
                    "base_url",
                    &[anthropic::ENV_BASE_URL],
                    Some(quoted(anthropic::DEFAULT_BASE_URL)),
                    false,
                ),
                ("model", &[anthropic::ENV_MODEL], None, false),
                (
                    "api_key",
                    &[anthropic::ENV_API_KEY, anthropic::ENV_API_KEY_FALLBACK],
                    None,
                    true,
                ),
                (
                    "timeout_secs",
                    &[anthropic::ENV_TIMEOUT_SECS],
                    Some(anthropic::DEFAULT_TIMEOUT_SECS.to_string()),
                    false,
                ),
                (
                    "context_window",
                    &[anthropic::ENV_CONTEXT_WINDOW],
                    None,
                    false,
                ),
                (
                    "max_tokens",
                    &[anthropic::ENV_MAX_TOKENS],
                    Some(anthropic::DEFAULT_MAX_TOKENS.to_string()),
                    false,
                ),
                (
                    "thinking_budget",
                    &[anthropic::ENV_THINKING_BUDGET],
                    None,
                    false,
                ),
            ],
        ),
    ]
}

/// `text` as a TOML string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// A value as it is shown: a whole number bare, anything else quoted, URLs without their
/// credentials.
fn shown(raw: &str) -> String {
    if raw.parse::<u64>().is_ok() {
        return raw.to_owned();
    }
    roundtable_actors::redact::redact_url_credentials(&quoted(raw))
}

/// Every provider setting as (`key = value`, where it came from).
pub(super) fn lines(
    profiles: &[ProviderProfile],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let get = |var: &str| {
        lookup(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let mut out = Vec::new();
    for (provider, settings) in env_settings() {
        for (key, vars, default, secret) in settings {
            let found = vars.iter().find_map(|var| get(var).map(|v| (*var, v)));
            let (value, source) = match (found, default) {
                (Some((var, _)), _) if secret => (
                    "\"(set, hidden)\"".to_owned(),
                    format!("environment ${var}"),
                ),
                (Some((var, v)), _) => (shown(&v), format!("environment ${var}")),
                (None, Some(d)) => (d, "default".to_owned()),
                (None, None) => ("(unset)".to_owned(), "default".to_owned()),
            };
            out.push((format!("{provider}.{key} = {value}"), source));
        }
    }
    for profile in profiles {
        let name = &profile.name;
        let origin = |key: &str| {
            profile
                .origins
                .get(key)
                .cloned()
                .unwrap_or_else(|| "default".to_owned())
        };
        let mut line = |key: &str, value: String| {
            out.push((format!("providers.{name}.{key} = {value}"), origin(key)));
        };
        line("kind", quoted(profile.kind.as_str()));
        line("model", quoted(&profile.model));
        let default_url = match profile.kind {
            crate::providers::ProviderKind::Openai => openai::DEFAULT_BASE_URL,
            crate::providers::ProviderKind::Anthropic => anthropic::DEFAULT_BASE_URL,
        };
        line(
            "base_url",
            shown(profile.base_url.as_deref().unwrap_or(default_url)),
        );
        match &profile.key {
            KeySource::None => line("api_key_env", "(unset)".to_owned()),
            KeySource::Env(var) => {
                let state = if get(var).is_some() { "set" } else { "not set" };
                line("api_key_env", format!("{} ({state})", quoted(var)));
            }
            KeySource::File(path) => line("api_key_file", quoted(&path.display().to_string())),
        }
        let number = |n: Option<u64>| n.map_or("(unset)".to_owned(), |n| n.to_string());
        line("context_window", number(profile.context_window));
        line(
            "timeout",
            profile
                .timeout
                .map_or("(default)".to_owned(), |t| t.as_secs_f64().to_string()),
        );
        if profile.kind == crate::providers::ProviderKind::Anthropic {
            line(
                "max_tokens",
                number(Some(
                    profile.max_tokens.unwrap_or(anthropic::DEFAULT_MAX_TOKENS),
                )),
            );
            line("thinking_budget", number(profile.thinking_budget));
        }
    }
    out
}
