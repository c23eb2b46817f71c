//! Providers as users configure them: named profiles of the config file
//! (`[providers.NAME]`: kind, base URL, model, where the key is, context window, time limit,
//! and for Anthropic `max_tokens` and the thinking budget), checked when the file is read
//! ([`from_toml`]); the choice of the default ([`ProviderSettings`]); and the keys resolved
//! when the providers are built (the variable a profile names, or its key file).
//!
//! ```toml
//! provider = "work"                    # the default: builtin, openai, anthropic or a profile
//! [providers.work]
//! kind = "anthropic"                   # or "openai"
//! model = "claude-sonnet-4-5"
//! api_key_env = "ANTHROPIC_API_KEY"    # or api_key_file = "/path" (its first line)
//! context_window = 200000
//! [providers.local]
//! kind = "openai"
//! base_url = "http://127.0.0.1:8080/v1"
//! model = "qwen"
//! ```
//!
//! Who uses it: `config_file.rs` reads the tables into the `serve` settings and shows them
//! (`config show`, with the line each value came from); [`super::ProviderSet`] builds a
//! provider of each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::anthropic::{positive, MIN_THINKING_BUDGET};

/// The names `--provider` takes without a profile: a profile may not take one of them.
pub const BUILTIN_NAMES: [&str; 3] = ["builtin", "openai", "anthropic"];

/// Longest profile name: it is shown in `@system config` and chosen by `@system model NAME`.
pub const MAX_NAME_CHARS: usize = 64;

/// Which API a profile speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// `/v1/chat/completions` (OpenAI and every compatible server).
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

impl ProviderKind {
    /// `openai` / `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

/// Where a profile's API key comes from. The key itself is read only when the provider is
/// built, never kept in the settings (so never shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// No key (a local server).
    None,
    /// This environment variable (`api_key_env`).
    Env(String),
    /// The first line of this file (`api_key_file`).
    File(PathBuf),
}

/// One `[providers.NAME]` table as written: unknown keys refused (with their line).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEntry {
    /// `openai` or `anthropic`.
    kind: Spanned<ProviderKind>,
    /// The endpoint (default: the kind's).
    base_url: Option<Spanned<String>>,
    /// The model (required).
    model: Option<Spanned<String>>,
    /// The variable holding the key.
    api_key_env: Option<Spanned<String>>,
    /// The file holding the key.
    api_key_file: Option<Spanned<PathBuf>>,
    /// The model's context window in tokens.
    context_window: Option<Spanned<u64>>,
    /// The time limit in seconds.
    timeout: Option<Spanned<f64>>,
    /// Anthropic: `max_tokens`.
    max_tokens: Option<Spanned<u64>>,
    /// Anthropic: extended thinking's budget.
    thinking_budget: Option<Spanned<u64>>,
}

/// A checked profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderProfile {
    /// Its name (the table's).
    pub name: String,
    /// Its API.
    pub kind: ProviderKind,
    /// The endpoint; `None`: the kind's default.
    pub base_url: Option<String>,
    /// The model.
    pub model: String,
    /// Where the key is.
    pub key: KeySource,
    /// The model's context window in tokens.
    pub context_window: Option<u64>,
    /// The time limit; `None`: the kind's default.
    pub timeout: Option<Duration>,
    /// Anthropic's `max_tokens`; `None`: the default.
    pub max_tokens: Option<u64>,
    /// Anthropic's thinking budget; `None`: no extended thinking.
    pub thinking_budget: Option<u64>,
    /// `FILE:LINE` of the table and of each key it sets (`""` for the table), for
    /// `config show`.
    pub origins: BTreeMap<&'static str, String>,
}

/// Whether `name` may name a profile: 1 to [`MAX_NAME_CHARS`] letters, digits, `-` and `_`,
/// and not one of [`BUILTIN_NAMES`]. The error says why not.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "[providers.{name}]: a profile's name is 1 to {MAX_NAME_CHARS} letters, digits, '-' \
             and '_'"
        ));
    }
    if BUILTIN_NAMES.contains(&name) {
        return Err(format!(
            "[providers.{name}]: `{name}` is the name of a built-in provider; give the profile \
             another name"
        ));
    }
    Ok(())
}

/// Checks one `[providers.NAME]` table of `path`; `line` turns a byte offset of the file
/// into its line. The error names the table, and the key and line when one is at fault.
pub fn from_toml(
    name: &str,
    entry: ProfileEntry,
    path: &Path,
    line: &dyn Fn(usize) -> usize,
) -> Result<ProviderProfile, String> {
    check_name(name)?;
    let at = |span: std::ops::Range<usize>| format!("{}:{}", path.display(), line(span.start));
    let fault = |key: &str, span: std::ops::Range<usize>, message: String| {
        format!(
            "line {}, key `providers.{name}.{key}`: {message}",
            line(span.start)
        )
    };
    let mut origins = BTreeMap::new();
    let kind_span = entry.kind.span();
    origins.insert("kind", at(kind_span.clone()));
    let kind = entry.kind.into_inner();
    macro_rules! take {
        ($field:ident) => {
            entry.$field.map(|v| {
                origins.insert(stringify!($field), at(v.span()));
                (v.span(), v.into_inner())
            })
        };
    }
    let model = take!(model);
    let base_url = take!(base_url);
    let api_key_env = take!(api_key_env);
    let api_key_file = take!(api_key_file);
    let context_window = take!(context_window);
    let timeout = take!(timeout);
    let max_tokens = take!(max_tokens);
    let thinking_budget = take!(thinking_budget);

    let model = match model {
        Some((span, m)) if m.trim().is_empty() => {
            return Err(fault("model", span, "must not be empty".into()))
        }
        Some((_, m)) => m.trim().to_owned(),
        None => {
            return Err(format!(
                "line {}, [providers.{name}]: `model` is required (the model the endpoint \
                 serves; `roundtable models --provider {name}` lists them)",
                line(kind_span.start)
            ))
        }
    };
    if let Some((span, url)) = &base_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(fault(
                "base_url",
                span.clone(),
                format!(
                    "{} is not an http:// or https:// URL",
                    roundtable_actors::redact::redact_url_credentials(url)
                ),
            ));
        }
    }
    let key = match (api_key_env, api_key_file) {
        (Some((span, _)), Some(_)) => {
            return Err(fault(
                "api_key_file",
                span,
                "give api_key_env or api_key_file, not both".into(),
            ))
        }
        (Some((span, var)), None) if var.trim().is_empty() => {
            return Err(fault("api_key_env", span, "must name a variable".into()))
        }
        (Some((_, var)), None) => KeySource::Env(var.trim().to_owned()),
        (None, Some((_, file))) => KeySource::File(file),
        (None, None) => KeySource::None,
    };
    if let Some((span, 0)) = context_window {
        return Err(fault(
            "context_window",
            span,
            "must be a positive whole number of tokens".into(),
        ));
    }
    let timeout = match timeout {
        None => None,
        Some((span, secs)) => match Duration::try_from_secs_f64(secs) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                return Err(fault(
                    "timeout",
                    span,
                    "must be a positive number of seconds".into(),
                ))
            }
        },
    };
    if kind == ProviderKind::Openai {
        for (key, value) in [
            ("max_tokens", &max_tokens),
            ("thinking_budget", &thinking_budget),
        ] {
            if let Some((span, _)) = value {
                return Err(fault(
                    key,
                    span.clone(),
                    "is for kind = \"anthropic\" only".into(),
                ));
            }
        }
    }
    if let Some((span, n)) = &max_tokens {
        positive("max_tokens", &n.to_string(), "tokens")
            .map_err(|m| fault("max_tokens", span.clone(), m))?;
    }
    if let Some((span, budget)) = &thinking_budget {
        let max = max_tokens
            .as_ref()
            .map_or(super::anthropic::DEFAULT_MAX_TOKENS, |(_, m)| *m);
        if *budget < MIN_THINKING_BUDGET {
            return Err(fault(
                "thinking_budget",
                span.clone(),
                format!("must be at least {MIN_THINKING_BUDGET} tokens (the API's minimum)"),
            ));
        }
        if *budget >= max {
            return Err(fault(
                "thinking_budget",
                span.clone(),
                format!("must be below max_tokens ({max}): the thinking is part of the answer"),
            ));
        }
    }
    Ok(ProviderProfile {
        name: name.to_owned(),
        kind,
        base_url: base_url.map(|(_, u)| u),
        model,
        key,
        context_window: context_window.map(|(_, w)| w),
        timeout,
        max_tokens: max_tokens.map(|(_, m)| m),
        thinking_budget: thinking_budget.map(|(_, b)| b),
        origins,
    })
}

/// The providers the server offers: the default's name and the profiles.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderSettings {
    /// `--provider` / `provider =`: `builtin`, `openai`, `anthropic` or a profile's name.
    pub default: String,
    /// The config file's `[providers.NAME]` tables.
    pub profiles: Vec<ProviderProfile>,
}

impl ProviderSettings {
    /// Only the offline provider (the built-in default).
    pub fn builtin() -> ProviderSettings {
        ProviderSettings {
            default: "builtin".to_owned(),
            profiles: Vec::new(),
        }
    }

    /// Whether `name` names a provider these settings offer (a built-in or a profile); the
    /// error lists what would.
    pub fn check_default(&self) -> Result<(), String> {
        let name = self.default.as_str();
        if BUILTIN_NAMES.contains(&name) || self.profiles.iter().any(|p| p.name == name) {
            return Ok(());
        }
        let mut known: Vec<String> = BUILTIN_NAMES.iter().map(|n| n.to_string()).collect();
        known.extend(self.profiles.iter().map(|p| p.name.clone()));
        Err(format!(
            "{name:?} names no provider: give one of {} (a name of your own is a \
             [providers.NAME] table of the config file)",
            known.join(", ")
        ))
    }
}

/// The key of `profile`, read now: the variable's value or the file's first line (a file
/// readable by others is warned about). `Ok(None)` when it has none.
pub fn resolve_key(
    profile: &ProviderProfile,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    let name = &profile.name;
    match &profile.key {
        KeySource::None => Ok(None),
        KeySource::Env(var) => match lookup(var).map(|v| v.trim().to_owned()) {
            Some(key) if !key.is_empty() => Ok(Some(key)),
            _ => Err(format!(
                "provider `{name}`: ${var} (its api_key_env) is not set"
            )),
        },
        KeySource::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("provider `{name}`: api_key_file {}: {e}", path.display()))?;
            warn_if_others_can_read(path, name);
            let key = text.lines().next().unwrap_or("").trim().to_owned();
            if key.is_empty() {
                return Err(format!(
                    "provider `{name}`: api_key_file {} is empty",
                    path.display()
                ));
            }
            Ok(Some(key))
        }
    }
}

/// Warns (`log::warn!`) when the key file `path` of provider `name` can be read by its group
/// or by everyone: whoever reads it can spend the account's money.
fn warn_if_others_can_read(path: &Path, name: &str) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        log::warn!(
            "the API key file {} of provider `{name}` is readable by other users (mode {mode:o}): \
             run chmod 600 {}",
            path.display(),
            path.display()
        );
    }
}
