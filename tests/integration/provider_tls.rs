//! TLS and proxies of the providers' HTTP stack against the scripted endpoint over TLS: a
//! certificate from an unknown authority and one for another host are refused with their
//! exact texts (nothing downgrades), `HTTPS_PROXY` tunnels through a `CONNECT` proxy and
//! `NO_PROXY` bypasses it; in-process (the variables handed to the stack as the server reads
//! its environment), then through the real binary with the variables in its environment.

use std::time::Duration;

use roundtable::providers::http::HttpStack;
use roundtable::providers::openai::{OpenAiConfig, OpenAiProvider};
use roundtable::providers::retry::RetryPolicy;
use roundtable_actors::agent::{ChatMessage, ContentBlock, Provider, ProviderRequest, Role};
use serde_json::json;
use std::sync::Arc;

use crate::harness::*;

/// A provider for `endpoint` over `stack`.
fn provider(endpoint: &ScriptedSse, stack: Arc<HttpStack>) -> OpenAiProvider {
    OpenAiProvider::new(
        OpenAiConfig {
            name: "openai".into(),
            base_url: endpoint.url("/v1"),
            model: "tls-model".into(),
            api_key: None,
            timeout: Duration::from_secs(10),
            context_window: None,
            retry: RetryPolicy::default(),
        },
        stack,
    )
}

fn hello() -> ProviderRequest {
    ProviderRequest::new("", vec![ChatMessage::text(Role::User, "hi")], Vec::new())
}

/// An endpoint that streams "Hello" to every request.
fn hello_endpoint() -> ScriptedSse {
    ScriptedSse::tls(|_, _| streamed_text(&["Hel", "lo"], (3, 1)))
}

/// Without the test CA among the roots, its certificate is from an unknown authority: the
/// exact error, no request sent, no retry.
#[test]
fn an_unknown_authority_is_refused_with_the_exact_error() {
    let endpoint = hello_endpoint();
    // The system's store (or whatever this machine's SSL_CERT_FILE names): not the test CA.
    let err = run_local(provider(&endpoint, http_stack(&[])).complete(hello()))
        .expect_err("an untrusted certificate");
    assert_eq!(
        err.to_string(),
        "provider unreachable: the TLS certificate of 127.0.0.1 is not trusted: issued by an \
         unknown authority (set SSL_CERT_FILE to a file holding its CA)"
    );
    assert!(endpoint.requests().is_empty());
    assert_eq!(
        endpoint
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// A trusted CA's certificate for another host name is refused with the exact error.
#[test]
fn a_certificate_for_another_host_is_refused() {
    let endpoint = ScriptedSse::tls_for_another_host(|_, _| streamed_text(&["no"], (1, 1)));
    let err = run_local(provider(&endpoint, trusting_test_ca()).complete(hello()))
        .expect_err("a certificate for another host");
    assert_eq!(
        err.to_string(),
        "provider unreachable: the TLS certificate of 127.0.0.1 is not trusted: it is for \
         another host name"
    );
    assert!(endpoint.requests().is_empty());
}

/// With `HTTPS_PROXY` the call goes through the proxy's `CONNECT` tunnel (TLS end to end,
/// so the answer still verifies); with `NO_PROXY` naming the endpoint's host it goes
/// direct.
#[test]
fn https_proxy_tunnels_and_no_proxy_bypasses() {
    let endpoint = hello_endpoint();
    let proxy = ConnectProxy::start();
    let ca = test_ca().ca.to_str().unwrap();
    let proxied = http_stack(&[("SSL_CERT_FILE", ca), ("HTTPS_PROXY", &proxy.url)]);
    let direct = http_stack(&[
        ("SSL_CERT_FILE", ca),
        ("HTTPS_PROXY", &proxy.url),
        ("NO_PROXY", "localhost,127.0.0.1"),
    ]);
    let hello_text = vec![ContentBlock::Text {
        text: "Hello".into(),
    }];
    let through = run_local(provider(&endpoint, proxied).complete(hello())).expect("proxied");
    assert_eq!(through.content, hello_text);
    assert_eq!(
        *proxy.targets.lock().unwrap(),
        vec![format!("127.0.0.1:{}", endpoint.port)]
    );
    let around = run_local(provider(&endpoint, direct).complete(hello())).expect("direct");
    assert_eq!(around.content, hello_text);
    assert_eq!(
        proxy.targets.lock().unwrap().len(),
        1,
        "NO_PROXY: not proxied"
    );
    assert_eq!(endpoint.requests().len(), 2);
}

/// The server, with the variables in its own environment: `SSL_CERT_FILE` makes the https
/// model trusted and `HTTPS_PROXY` carries its calls (the turn shows the streamed words);
/// without the CA the turn fails with the exact certificate error as output and `lastError`.
#[test]
fn the_server_reaches_an_https_model_through_its_environment() {
    let endpoint = hello_endpoint();
    let proxy = ConnectProxy::start();
    let base = endpoint.url("/v1");
    let ca = test_ca().ca.to_str().unwrap().to_owned();
    let server = Server::start_env(
        &["--provider", "openai"],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &base),
            ("ROUNDTABLE_OPENAI_MODEL", "tls-model"),
            ("SSL_CERT_FILE", &ca),
            ("SSL_CERT_DIR", ""),
            ("HTTPS_PROXY", &proxy.url),
            ("NO_PROXY", ""),
        ],
    );
    let (mut a, id) = server.joined("over-tls");
    let calls = a.run_turn(&id, "say hello");
    assert!(
        Client::texts(&calls).contains(&"Hello".to_string()),
        "{calls:?}"
    );
    assert_eq!(
        *proxy.targets.lock().unwrap(),
        vec![format!("127.0.0.1:{}", endpoint.port)]
    );
    assert_eq!(endpoint.requests()[0].body["stream"], true);

    let untrusting = Server::start_env(
        &["--provider", "openai"],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &base),
            ("ROUNDTABLE_OPENAI_MODEL", "tls-model"),
        ],
    );
    let (mut b, id) = untrusting.joined("untrusted");
    let calls = b.run_turn(&id, "say hello");
    let expected = "provider unreachable: the TLS certificate of 127.0.0.1 is not trusted: \
                    issued by an unknown authority (set SSL_CERT_FILE to a file holding its CA)";
    let done = &calls.last().unwrap().1;
    assert_eq!(done[2]["result"]["lastError"], json!(expected), "{done}");
    assert!(Client::texts(&calls).contains(&expected.to_string()));
}
