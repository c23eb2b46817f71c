//! Providers as users configure them, through the real binary: `[providers.NAME]` profiles
//! of the config file (one the default, its key from a key file), `config show` listing every
//! provider setting with where it came from and never a key, `roundtable models` listing a
//! profile's models over TLS, and a default that names no provider refused at start with its
//! line.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::harness::*;

/// Runs the binary with `args` and extra environment (the developer's provider variables
/// removed).
fn roundtable(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary());
    command.args(args);
    for var in [
        "ROUNDTABLE_CONFIG",
        "ROUNDTABLE_PROVIDER",
        "ROUNDTABLE_HOME",
        "ROUNDTABLE_OPENAI_MODEL",
        "ROUNDTABLE_OPENAI_API_KEY",
        "OPENAI_API_KEY",
        "ROUNDTABLE_ANTHROPIC_MODEL",
        "ROUNDTABLE_ANTHROPIC_API_KEY",
        "ANTHROPIC_API_KEY",
    ] {
        command.env_remove(var);
    }
    command
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `config show` line of `key`.
fn shown<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

/// `config show` lists the environment's providers (each value with its variable, or
/// default) and each profile (each key with its file and line), the default's name with its
/// source, and never a key.
#[test]
fn config_show_lists_the_providers_with_their_sources() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rt.toml");
    let key_file = dir.path().join("work.key");
    std::fs::write(&key_file, "sk-ant-in-a-file\n").unwrap();
    std::fs::write(
        &file,
        format!(
            "provider = \"work\"\n\n[providers.work]\nkind = \"anthropic\"\nmodel = \"claude-x\"\n\
             api_key_file = \"{}\"\nthinking_budget = 2048\n\n[providers.local]\nkind = \"openai\"\n\
             base_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"qwen\"\napi_key_env = \"LOCAL_KEY\"\n",
            key_file.display()
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = roundtable(
        &["config", "show", "--config", path],
        &[
            ("ROUNDTABLE_OPENAI_MODEL", "llama"),
            ("OPENAI_API_KEY", "sk-env-secret"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = text(&out.stdout);
    let line = |key: &str| {
        shown(&out, key)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("provider"), format!("provider = \"work\" # {path}:1"));
    assert_eq!(
        line("openai.model"),
        "openai.model = \"llama\" # environment $ROUNDTABLE_OPENAI_MODEL"
    );
    assert_eq!(
        line("openai.api_key"),
        "openai.api_key = \"(set, hidden)\" # environment $OPENAI_API_KEY"
    );
    assert_eq!(
        line("openai.base_url"),
        "openai.base_url = \"http://127.0.0.1:8080/v1\" # default"
    );
    assert_eq!(
        line("anthropic.model"),
        "anthropic.model = (unset) # default"
    );
    assert_eq!(
        line("providers.work.kind"),
        format!("providers.work.kind = \"anthropic\" # {path}:4")
    );
    assert_eq!(
        line("providers.work.api_key_file"),
        format!(
            "providers.work.api_key_file = \"{}\" # {path}:6",
            key_file.display()
        )
    );
    assert_eq!(
        line("providers.work.thinking_budget"),
        format!("providers.work.thinking_budget = 2048 # {path}:7")
    );
    assert_eq!(
        line("providers.work.base_url"),
        "providers.work.base_url = \"https://api.anthropic.com\" # default"
    );
    assert_eq!(
        line("providers.local.api_key_env"),
        format!("providers.local.api_key_env = \"LOCAL_KEY\" (not set) # {path}:13")
    );
    assert!(
        !out.contains("sk-env-secret") && !out.contains("sk-ant-in-a-file"),
        "{out}"
    );
}

/// A profile as the default: `roundtable models` lists its endpoint's models over TLS (the
/// key read from its key file, which is warned about while others can read it), and the
/// server's turns go to it.
#[test]
fn a_profile_is_the_default_and_lists_its_models() {
    let endpoint = ScriptedSse::tls(|_, request| {
        if request.method == "GET" {
            Reply::json(
                200,
                json!({"object": "list", "data": [{"id": "qwen3-8b"}, {"id": "llama-3.1-8b"}]})
                    .to_string(),
            )
        } else {
            streamed_text(&["from ", "the profile"], (9, 3))
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("local.key");
    std::fs::write(&key_file, "sk-local-file-key\n").unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = dir.path().join("rt.toml");
    std::fs::write(
        &file,
        format!(
            "provider = \"local-tls\"\n[providers.local-tls]\nkind = \"openai\"\n\
             base_url = \"{}\"\nmodel = \"qwen3-8b\"\napi_key_file = \"{}\"\ncontext_window = 32768\n",
            endpoint.url("/v1"),
            key_file.display()
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    let warning = format!(
        "the API key file {} of provider `local-tls` is readable by other users (mode 644): \
         run chmod 600 {}",
        key_file.display(),
        key_file.display()
    );
    let out = roundtable(&["models", "--config", path], &[("SSL_CERT_FILE", &ca)]);
    assert!(
        text(&out.stderr).contains(&warning),
        "{}",
        text(&out.stderr)
    );
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = roundtable(&["models", "--config", path], &[("SSL_CERT_FILE", &ca)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("readable by other users"));
    assert_eq!(text(&out.stdout), "llama-3.1-8b\nqwen3-8b\n");
    let listing = &endpoint.requests()[1];
    assert_eq!(listing.path, "/v1/models");
    assert_eq!(
        listing.header("authorization"),
        Some("Bearer sk-local-file-key")
    );

    let server = Server::start_env(&["--config", path], &[("SSL_CERT_FILE", &ca)]);
    let (mut a, id) = server.joined("profiled");
    let calls = a.run_turn(&id, "hello");
    assert!(
        Client::texts(&calls).contains(&"from the profile".to_string()),
        "{calls:?}"
    );
    let status = a.invoke(&dispatcher(&id), "getStatus", json!([])).unwrap();
    assert_eq!(status["contextMeter"]["contextWindow"], 32768, "{status}");
    let chat = endpoint.requests().last().unwrap().clone();
    assert_eq!(chat.body["model"], "qwen3-8b");
    assert_eq!(
        chat.header("authorization"),
        Some("Bearer sk-local-file-key")
    );
}

/// A default that names no provider stops `serve` with exit code 2, the file's line and
/// the names there are; so does a profile with a fault.
#[test]
fn a_default_that_names_no_provider_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rt.toml");
    std::fs::write(
        &file,
        "port = 0\nprovider = \"wrok\"\n[providers.work]\nkind = \"openai\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = roundtable(&["serve", "--config", path], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "roundtable: config file {path}, line 2, key `provider`: \"wrok\" names no provider: \
             give one of builtin, openai, anthropic, work (a name of your own is a \
             [providers.NAME] table of the config file)"
        )
    );
    std::fs::write(&file, "[providers.w]\nkind = \"openai\"\n").unwrap();
    let out = roundtable(&["serve", "--config", path], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "roundtable: config file {path}: line 2, [providers.w]: `model` is required (the \
             model the endpoint serves; `roundtable models --provider w` lists them)"
        )
    );
}
