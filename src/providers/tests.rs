//! Profiles as the config file writes them (checked, with the line and key of a fault) and
//! the set of providers built from the settings and an environment.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use serde::Deserialize;

use super::http::{HttpSettings, HttpStack};
use super::profiles::{from_toml, KeySource, ProfileEntry};
use super::*;

/// The `[providers.*]` tables of `text` as the config file reader checks them.
fn profiles(text: &str) -> Result<Vec<ProviderProfile>, String> {
    #[derive(Deserialize)]
    struct File {
        providers: BTreeMap<String, ProfileEntry>,
    }
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let line = |offset: usize| text[..offset].matches('\n').count() + 1;
    file.providers
        .into_iter()
        .map(|(name, entry)| from_toml(&name, entry, Path::new("/etc/rt.toml"), &line))
        .collect()
}

fn stack() -> Arc<HttpStack> {
    Arc::new(HttpStack::new(&HttpSettings::default()).unwrap())
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

/// Both kinds, every key, and where each came from.
#[test]
fn profiles_are_read_with_their_lines() {
    let read = profiles(
        "[providers.work]\nkind = \"anthropic\"\nmodel = \"claude-x\"\n\
         api_key_env = \"WORK_KEY\"\ncontext_window = 200000\ntimeout = 30\n\
         max_tokens = 16000\nthinking_budget = 4096\n\
         [providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n\
         model = \"qwen\"\napi_key_file = \"/etc/key\"\n",
    )
    .unwrap();
    let (local, work) = (&read[0], &read[1]);
    assert_eq!(work.kind, ProviderKind::Anthropic);
    assert_eq!(work.key, KeySource::Env("WORK_KEY".into()));
    assert_eq!(work.context_window, Some(200_000));
    assert_eq!(work.timeout, Some(Duration::from_secs(30)));
    assert_eq!(
        (work.max_tokens, work.thinking_budget),
        (Some(16000), Some(4096))
    );
    assert_eq!(work.origins["kind"], "/etc/rt.toml:2");
    assert_eq!(work.origins["thinking_budget"], "/etc/rt.toml:8");
    assert_eq!(local.kind, ProviderKind::Openai);
    assert_eq!(local.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
    assert_eq!(local.key, KeySource::File("/etc/key".into()));
    assert_eq!(local.origins["model"], "/etc/rt.toml:12");
}

/// Each fault's exact text, naming the line and key.
#[test]
fn profile_faults_name_the_line_and_key() {
    let fault = |text: &str| profiles(text).unwrap_err();
    assert_eq!(
        fault("[providers.work]\nkind = \"openai\"\n"),
        "line 2, [providers.work]: `model` is required (the model the endpoint serves; \
         `roundtable models --provider work` lists them)"
    );
    assert_eq!(
        fault("[providers.openai]\nkind = \"openai\"\nmodel = \"m\"\n"),
        "[providers.openai]: `openai` is the name of a built-in provider; give the profile \
         another name"
    );
    assert_eq!(
        fault("[providers.\"a b\"]\nkind = \"openai\"\nmodel = \"m\"\n"),
        "[providers.a b]: a profile's name is 1 to 64 letters, digits, '-' and '_'"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"openai\"\nmodel = \"m\"\nthinking_budget = 2048\n"),
        "line 4, key `providers.w.thinking_budget`: is for kind = \"anthropic\" only"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"anthropic\"\nmodel = \"m\"\nthinking_budget = 512\n"),
        "line 4, key `providers.w.thinking_budget`: must be at least 1024 tokens (the API's \
         minimum)"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"anthropic\"\nmodel = \"m\"\nmax_tokens = 2000\nthinking_budget = 2048\n"),
        "line 5, key `providers.w.thinking_budget`: must be below max_tokens (2000): the \
         thinking is part of the answer"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"openai\"\nmodel = \"m\"\napi_key_env = \"A\"\napi_key_file = \"/k\"\n"),
        "line 4, key `providers.w.api_key_file`: give api_key_env or api_key_file, not both"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"ftp://x\"\n"),
        "line 4, key `providers.w.base_url`: ftp://x is not an http:// or https:// URL"
    );
    assert_eq!(
        fault("[providers.w]\nkind = \"openai\"\nmodel = \"m\"\ntimeout = 0\n"),
        "line 4, key `providers.w.timeout`: must be a positive number of seconds"
    );
    // Unknown keys and kinds are the toml crate's errors, with their line.
    let unknown = fault("[providers.w]\nkind = \"openai\"\nmodel = \"m\"\nkey = \"sk\"\n");
    assert!(
        unknown.contains("line 4") && unknown.contains("unknown field `key`"),
        "{unknown}"
    );
    let kind = fault("[providers.w]\nkind = \"gemini\"\nmodel = \"m\"\n");
    assert!(
        kind.contains("line 2") && kind.contains("unknown variant `gemini`"),
        "{kind}"
    );
}

/// The set: builtin always; a profile per table, its key from the variable it names; the
/// environment's openai when its model is set; a profile that cannot be built is left out
/// unless it is the default, whose error names what is missing; an unknown default is
/// refused with the names there are; the HTTP stack is made only when a provider needs it.
#[test]
fn the_set_of_providers() {
    let read = profiles(
        "[providers.work]\nkind = \"anthropic\"\nmodel = \"claude-x\"\napi_key_env = \"WORK_KEY\"\n\
         context_window = 200000\n[providers.local]\nkind = \"openai\"\nmodel = \"qwen\"\n",
    )
    .unwrap();
    let settings = |default: &str| ProviderSettings {
        default: default.into(),
        profiles: read.clone(),
    };
    let set = ProviderSet::build_with(
        &settings("work"),
        &env(&[
            ("WORK_KEY", "sk-ant-1"),
            ("ROUNDTABLE_OPENAI_MODEL", "llama"),
        ]),
        &|| Ok(stack()),
    )
    .unwrap();
    assert_eq!(
        set.names().collect::<Vec<_>>(),
        vec!["builtin", "local", "openai", "work"]
    );
    assert_eq!(set.default_name(), "work");
    let work = set.default_provider();
    assert_eq!(
        (work.name(), work.model(), work.context_window()),
        ("work", Some("claude-x"), Some(200_000))
    );
    assert_eq!(set.get("openai").unwrap().model(), Some("llama"));
    assert!(
        set.get("anthropic").is_none(),
        "no ROUNDTABLE_ANTHROPIC_MODEL"
    );

    let without_key =
        ProviderSet::build_with(&settings("local"), &env(&[]), &|| Ok(stack())).unwrap();
    assert!(without_key.get("work").is_none(), "left out: no key");
    assert_eq!(without_key.default_provider().name(), "local");
    let err = ProviderSet::build_with(&settings("work"), &env(&[]), &|| Ok(stack())).unwrap_err();
    assert_eq!(
        err,
        "provider `work`: $WORK_KEY (its api_key_env) is not set"
    );
    let err = ProviderSet::build_with(&settings("wrok"), &env(&[]), &|| Ok(stack())).unwrap_err();
    assert_eq!(
        err,
        "\"wrok\" names no provider: give one of builtin, openai, anthropic, local, work (a \
         name of your own is a [providers.NAME] table of the config file)"
    );
    let err = ProviderSet::build_with(&settings("openai"), &env(&[]), &|| Ok(stack())).unwrap_err();
    assert!(
        err.starts_with("ROUNDTABLE_OPENAI_MODEL is not set"),
        "{err}"
    );
    // Only the offline provider: no HTTP stack is made (no trust store read at start).
    let offline = ProviderSet::build_with(&ProviderSettings::builtin(), &env(&[]), &|| {
        panic!("an HTTP stack for the builtin provider alone")
    })
    .unwrap();
    assert_eq!(offline.names().collect::<Vec<_>>(), vec!["builtin"]);
}

/// A key file's first line is the key; an empty or missing file is an exact error.
#[test]
fn keys_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    let mut file = std::fs::File::create(&path).unwrap();
    writeln!(file, "  sk-from-file  \nsecond line").unwrap();
    let mut profile =
        profiles("[providers.f]\nkind = \"openai\"\nmodel = \"m\"\n").unwrap()[0].clone();
    profile.key = KeySource::File(path.clone());
    assert_eq!(
        profiles::resolve_key(&profile, &env(&[]))
            .unwrap()
            .as_deref(),
        Some("sk-from-file")
    );
    std::fs::write(&path, "\n").unwrap();
    assert_eq!(
        profiles::resolve_key(&profile, &env(&[])).unwrap_err(),
        format!("provider `f`: api_key_file {} is empty", path.display())
    );
    profile.key = KeySource::File(dir.path().join("missing"));
    let err = profiles::resolve_key(&profile, &env(&[])).unwrap_err();
    assert!(err.starts_with("provider `f`: api_key_file "), "{err}");
}
