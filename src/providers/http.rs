//! The HTTP stack every model call goes through: [`HttpStack`] holds one rustls client
//! configuration (ring, TLS 1.2 and 1.3, HTTP/1.1) with the trusted roots, and the proxies, and
//! hands each thread its `reqwest` client ([`HttpStack::client`]); `transport_error` turns
//! what `reqwest` reports into a [`ProviderError`] whose text names the URL and, for a
//! certificate, the host and the reason.
//!
//! Read once at start-up from the environment ([`HttpSettings::from_env`]), the way
//! OpenSSL-based tools (curl, Python, git) read it:
//! - trust: `SSL_CERT_FILE` (a PEM file of CA certificates) and `SSL_CERT_DIR` (directories
//!   of them, `:`-separated); when either is set only they are trusted, else the system's
//!   store (`rustls-native-certs`, which probes the same places OpenSSL does);
//! - proxies: `HTTPS_PROXY` for `https://` endpoints, `HTTP_PROXY` for `http://` ones,
//!   `ALL_PROXY` for both when the specific one is unset (each also in lower case), and
//!   `NO_PROXY` (host names, `.domain` suffixes, IP addresses and CIDR ranges, `*`) for the
//!   endpoints reached directly. An `https://` endpoint goes through its proxy as a `CONNECT`
//!   tunnel, so the proxy never sees the request or the key.
//!
//! A certificate that does not verify fails the call with an exact text; nothing downgrades to
//! plain HTTP or skips verification.
//!
//! Who uses it: [`crate::providers::ProviderSet`] builds one stack for the server and gives it
//! to every provider; `call.rs` sends each request through [`HttpStack::client`].
//!
//! Why a client per thread: a `reqwest` client keeps its connections (keep-alive, so a
//! conversation's next model call skips the TCP and TLS handshakes) on tasks of the runtime
//! that opened them. Conversations run on several arbiters, each with its own runtime, so each
//! thread keeps its own client for the actix system it runs (a stopped system's are dropped
//! with it); outside an actix system (the CLI) every call builds one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roundtable_actors::agent::ProviderError;
use roundtable_actors::redact::redact_url_credentials;
use rustls::pki_types::CertificateDer;

/// How long opening a connection may take (DNS, TCP, a proxy's tunnel, the TLS handshake):
/// well under a second to any reachable endpoint; 30 s still lets a slow proxy answer, and an
/// endpoint that drops packets says `cannot connect` instead of waiting out the whole call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an idle kept-alive connection is kept for the next call: a conversation's next
/// turn usually comes within a minute; hosted APIs close idle connections after about that.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where trusted roots come from: `SSL_CERT_FILE` and `SSL_CERT_DIR`, or the system's store
/// when neither is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustSettings {
    /// `SSL_CERT_FILE`: a PEM file of CA certificates.
    pub cert_file: Option<PathBuf>,
    /// `SSL_CERT_DIR`: directories of PEM files.
    pub cert_dirs: Vec<PathBuf>,
}

/// The proxies of the environment (see the module docs). URLs may carry credentials
/// (`http://user:pass@proxy:3128`); they are never logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProxySettings {
    /// `HTTPS_PROXY`: for `https://` endpoints.
    pub https: Option<String>,
    /// `HTTP_PROXY`: for `http://` endpoints.
    pub http: Option<String>,
    /// `ALL_PROXY`: for either when its own is unset.
    pub all: Option<String>,
    /// `NO_PROXY`: the endpoints reached directly.
    pub no_proxy: Option<String>,
}

impl std::fmt::Debug for ProxySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |v: &Option<String>| v.as_deref().map(redact_url_credentials);
        f.debug_struct("ProxySettings")
            .field("https", &shown(&self.https))
            .field("http", &shown(&self.http))
            .field("all", &shown(&self.all))
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

/// What the stack is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpSettings {
    /// Trusted roots.
    pub trust: TrustSettings,
    /// Proxies.
    pub proxies: ProxySettings,
}

impl HttpSettings {
    /// The settings of this process's environment.
    pub fn from_env() -> HttpSettings {
        HttpSettings::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (tests use a map). Empty values
    /// count as unset; the upper-case name wins over the lower-case one.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> HttpSettings {
        let get = |names: &[&str]| {
            names
                .iter()
                .filter_map(|n| lookup(n))
                .map(|v| v.trim().to_owned())
                .find(|v| !v.is_empty())
        };
        HttpSettings {
            trust: TrustSettings {
                cert_file: get(&["SSL_CERT_FILE"]).map(PathBuf::from),
                cert_dirs: get(&["SSL_CERT_DIR"])
                    .map(|dirs| {
                        std::env::split_paths(&dirs)
                            .filter(|p| !p.as_os_str().is_empty())
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            proxies: ProxySettings {
                https: get(&["HTTPS_PROXY", "https_proxy"]),
                http: get(&["HTTP_PROXY", "http_proxy"]),
                all: get(&["ALL_PROXY", "all_proxy"]),
                no_proxy: get(&["NO_PROXY", "no_proxy"]),
            },
        }
    }
}

/// Numbers the stacks, so a thread's clients are told apart.
static NEXT_STACK_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's clients: the actix system they belong to, and one client per stack.
    static CLIENTS: RefCell<(Option<usize>, HashMap<u64, reqwest::Client>)> =
        RefCell::new((None, HashMap::new()));
}

/// The stack: TLS configuration and proxies, shared by every provider (see the module docs).
#[derive(Debug)]
pub struct HttpStack {
    /// Tells this stack's clients apart in a thread's cache.
    id: u64,
    /// Trusted roots, protocol versions, ALPN `http/1.1`.
    tls: Arc<rustls::ClientConfig>,
    /// The proxies, in the order they are tried (`https`, `http`, then `all`).
    proxies: Vec<reqwest::Proxy>,
    /// How many roots were loaded, and from where (for the start-up log).
    roots: String,
    /// What could not be read of `SSL_CERT_FILE` / `SSL_CERT_DIR` (added to the error of a
    /// certificate from an unknown authority).
    trust_problems: Vec<String>,
}

impl HttpStack {
    /// Loads the roots and checks the proxy URLs. Roots that cannot be read are not an
    /// error here (the server serves without any model call); they are logged, and named in
    /// the error of a call they would have let through. A proxy URL that does not parse is
    /// an error naming its variable.
    pub fn new(settings: &HttpSettings) -> Result<HttpStack, String> {
        let (certs, trust_problems, from) = load_roots(&settings.trust);
        let mut store = rustls::RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(certs);
        let roots = format!(
            "{added} trusted roots from {from}{}",
            if ignored > 0 {
                format!(" ({ignored} unusable certificates ignored)")
            } else {
                String::new()
            }
        );
        for problem in &trust_problems {
            log::warn!("TLS roots: {problem}");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS configuration: {e}"))?
            .with_root_certificates(store)
            .with_no_client_auth();
        // reqwest is built without HTTP/2: a dropped answer closes its connection, which
        // is how a cancelled turn stops the model.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpStack {
            id: NEXT_STACK_ID.fetch_add(1, Ordering::Relaxed),
            tls: Arc::new(tls),
            proxies: proxies(&settings.proxies)?,
            roots,
            trust_problems,
        })
    }

    /// The stack of this process's environment ([`HttpSettings::from_env`]).
    pub fn from_env() -> Result<HttpStack, String> {
        HttpStack::new(&HttpSettings::from_env())
    }

    /// `N trusted roots from …; proxies …` for the start-up log (no credentials).
    pub fn describe(&self) -> String {
        format!(
            "{}; {}",
            self.roots,
            if self.proxies.is_empty() {
                "no proxy".to_owned()
            } else {
                format!("{} proxy rules from the environment", self.proxies.len())
            }
        )
    }

    /// The `reqwest` client of this thread for this stack (built on first use; see the
    /// module docs).
    pub fn client(&self) -> Result<reqwest::Client, ProviderError> {
        let Some(system) = actix_web::rt::System::try_current().map(|s| s.id()) else {
            return self.build();
        };
        CLIENTS.with(|cell| {
            let mut cache = cell.borrow_mut();
            if cache.0 != Some(system) {
                // A new actix system on this thread (a restart in place, a test): the old
                // one's connections died with its runtime.
                *cache = (Some(system), HashMap::new());
            }
            if let Some(client) = cache.1.get(&self.id) {
                return Ok(client.clone());
            }
            let client = self.build()?;
            cache.1.insert(self.id, client.clone());
            Ok(client)
        })
    }

    /// A new client over this stack's TLS configuration and proxies.
    fn build(&self) -> Result<reqwest::Client, ProviderError> {
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.tls).clone())
            // The environment was read once into `proxies`: never again behind our back.
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(concat!("roundtable/", env!("CARGO_PKG_VERSION")));
        for proxy in &self.proxies {
            builder = builder.proxy(proxy.clone());
        }
        builder
            .build()
            .map_err(|e| ProviderError::Unreachable(format!("cannot build the HTTP client: {e}")))
    }

    /// What could not be read of the configured roots, for an error about trust.
    pub(crate) fn trust_problems(&self) -> &[String] {
        &self.trust_problems
    }
}

/// The certificates to trust, what went wrong reading them, and where they came from.
fn load_roots(trust: &TrustSettings) -> (Vec<CertificateDer<'static>>, Vec<String>, String) {
    if trust.cert_file.is_none() && trust.cert_dirs.is_empty() {
        let result = rustls_native_certs::load_native_certs();
        let problems = result
            .errors
            .iter()
            .map(|e| format!("the system's trust store: {e}"))
            .collect();
        return (result.certs, problems, "the system's store".to_owned());
    }
    let mut certs = Vec::new();
    let mut problems = Vec::new();
    let mut from = Vec::new();
    if let Some(file) = &trust.cert_file {
        from.push(format!("SSL_CERT_FILE {}", file.display()));
        let result = rustls_native_certs::load_certs_from_paths(Some(file), None);
        problems.extend(
            result
                .errors
                .iter()
                .map(|e| format!("SSL_CERT_FILE {}: {e}", file.display())),
        );
        certs.extend(result.certs);
    }
    for dir in &trust.cert_dirs {
        from.push(format!("SSL_CERT_DIR {}", dir.display()));
        let result = rustls_native_certs::load_certs_from_paths(None, Some(dir));
        problems.extend(
            result
                .errors
                .iter()
                .map(|e| format!("SSL_CERT_DIR {}: {e}", dir.display())),
        );
        certs.extend(result.certs);
    }
    (certs, problems, from.join(" and "))
}

/// The proxy rules of `settings`, each with the `NO_PROXY` exceptions.
fn proxies(settings: &ProxySettings) -> Result<Vec<reqwest::Proxy>, String> {
    let no_proxy = || {
        settings
            .no_proxy
            .as_deref()
            .and_then(reqwest::NoProxy::from_string)
    };
    let mut rules = Vec::new();
    let checked = |variable: &str, url: &str, made: reqwest::Result<reqwest::Proxy>| {
        made.map_err(|e| {
            format!(
                "{variable} {} is not a proxy URL: {e}",
                redact_url_credentials(url)
            )
        })
    };
    if let Some(url) = &settings.https {
        rules.push(checked("HTTPS_PROXY", url, reqwest::Proxy::https(url))?.no_proxy(no_proxy()));
    }
    if let Some(url) = &settings.http {
        rules.push(checked("HTTP_PROXY", url, reqwest::Proxy::http(url))?.no_proxy(no_proxy()));
    }
    if let Some(url) = &settings.all {
        rules.push(checked("ALL_PROXY", url, reqwest::Proxy::all(url))?.no_proxy(no_proxy()));
    }
    Ok(rules)
}

/// A transport failure as the user reads it, and whether trying again may help.
#[derive(Debug)]
pub(crate) struct TransportFailure {
    /// The error (its text names the URL).
    pub error: ProviderError,
    /// True for a connection reset or closed mid-request; false for a refused connection,
    /// an unknown host, a certificate, a time-out (trying again gives the same answer).
    pub retryable: bool,
}

/// The failure of a request to `shown_url` (credentials removed) on `host`.
pub(crate) fn transport_error(
    error: &reqwest::Error,
    host: &str,
    shown_url: &str,
    stack: &HttpStack,
) -> TransportFailure {
    if let Some(tls) = find_tls_error(error) {
        let mut text = tls_failure_text(host, tls);
        if matches!(
            tls,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
        ) && !stack.trust_problems().is_empty()
        {
            text.push_str(&format!("; besides, {}", stack.trust_problems().join("; ")));
        }
        return TransportFailure {
            error: ProviderError::Unreachable(text),
            retryable: false,
        };
    }
    let cause = innermost(error);
    if error.is_connect() {
        let io_kind = find_io_kind(error);
        return TransportFailure {
            error: ProviderError::Unreachable(format!("cannot connect to {shown_url}: {cause}")),
            retryable: matches!(
                io_kind,
                Some(
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::UnexpectedEof
                )
            ),
        };
    }
    TransportFailure {
        error: ProviderError::Unreachable(format!("request to {shown_url} failed: {cause}")),
        // Sent, then the connection broke (reset, closed before the answer): the request may
        // go again, nothing of the answer was shown.
        retryable: !error.is_builder() && !error.is_redirect(),
    }
}

/// `the TLS certificate of HOST is not trusted: <reason>`: the exact texts for the
/// certificate errors people meet (an unknown authority, another host's certificate, an
/// expired one); rustls's own text for the rest.
pub(crate) fn tls_failure_text(host: &str, error: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let reason = match error {
        rustls::Error::InvalidCertificate(cert) => match cert {
            C::UnknownIssuer => {
                "issued by an unknown authority (set SSL_CERT_FILE to a file holding its CA)"
                    .to_owned()
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "it is for another host name".to_owned()
            }
            C::Expired | C::ExpiredContext { .. } => "it has expired".to_owned(),
            C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".to_owned(),
            C::Revoked => "it has been revoked".to_owned(),
            C::BadSignature => "its signature does not verify".to_owned(),
            other => format!("{other:?}"),
        },
        other => return format!("the TLS handshake with {host} failed: {other}"),
    };
    format!("the TLS certificate of {host} is not trusted: {reason}")
}

/// The rustls error somewhere in `error`'s chain (inside an `io::Error`, as tokio-rustls
/// reports it, or on its own).
fn find_tls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut current: Option<&'e (dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            // `io::Error::source` skips the error it wraps: look inside it.
            if let Some(inner) = io.get_ref() {
                if let Some(found) = find_tls_error(inner) {
                    return Some(found);
                }
            }
        }
        current = e.source();
    }
    None
}

/// The kind of the first `io::Error` in `error`'s chain.
fn find_io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = e.source();
    }
    None
}

/// The text of the deepest error in the chain (`Connection refused (os error 111)`, not
/// `error sending request for url (…)`), which says what happened.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut last = error;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// The variables as OpenSSL-based tools read them: the upper-case name first, empty
    /// values unset, `SSL_CERT_DIR` split on `:`.
    #[test]
    fn settings_from_the_environment() {
        let settings = HttpSettings::from_lookup(lookup(&[
            ("SSL_CERT_FILE", "/etc/corp-ca.pem"),
            ("SSL_CERT_DIR", "/a::/b"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("https_proxy", "http://lower:1"),
            ("http_proxy", "http://plain:8080"),
            ("ALL_PROXY", " "),
            ("no_proxy", "localhost,.internal"),
        ]));
        assert_eq!(
            settings.trust,
            TrustSettings {
                cert_file: Some("/etc/corp-ca.pem".into()),
                cert_dirs: vec!["/a".into(), "/b".into()],
            }
        );
        assert_eq!(settings.proxies.https.as_deref(), Some("http://proxy:3128"));
        assert_eq!(settings.proxies.http.as_deref(), Some("http://plain:8080"));
        assert_eq!(settings.proxies.all, None);
        assert_eq!(
            settings.proxies.no_proxy.as_deref(),
            Some("localhost,.internal")
        );
        assert_eq!(
            HttpSettings::from_lookup(lookup(&[])),
            HttpSettings::default()
        );
    }

    /// A proxy URL that does not parse stops the stack with its variable named, and its
    /// credentials never shown; roots that cannot be read are kept as problems, not errors.
    #[test]
    fn bad_proxies_and_missing_roots() {
        let settings = HttpSettings {
            trust: TrustSettings {
                cert_file: Some("/nonexistent/ca.pem".into()),
                cert_dirs: Vec::new(),
            },
            proxies: ProxySettings {
                https: Some("http://user:secret@[::1".into()),
                ..ProxySettings::default()
            },
        };
        let err = HttpStack::new(&settings).unwrap_err();
        assert!(
            err.starts_with("HTTPS_PROXY http://***@[::1 is not a proxy URL"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
        assert!(!format!("{:?}", settings.proxies).contains("secret"));

        let stack = HttpStack::new(&HttpSettings {
            proxies: ProxySettings::default(),
            ..settings
        })
        .expect("unreadable roots are not fatal");
        assert_eq!(stack.trust_problems().len(), 1);
        assert!(
            stack.trust_problems()[0].starts_with("SSL_CERT_FILE /nonexistent/ca.pem: "),
            "{:?}",
            stack.trust_problems()
        );
        assert!(
            stack
                .describe()
                .starts_with("0 trusted roots from SSL_CERT_FILE /nonexistent/ca.pem; no proxy"),
            "{}",
            stack.describe()
        );
    }

    /// The exact texts of the certificate errors (the unknown authority and the other host
    /// are also met for real by the TLS tests in `tests/integration/provider_tls.rs`).
    #[test]
    fn certificate_error_texts() {
        use rustls::CertificateError as C;
        let text =
            |e: C| tls_failure_text("api.example.com", &rustls::Error::InvalidCertificate(e));
        assert_eq!(
            text(C::UnknownIssuer),
            "the TLS certificate of api.example.com is not trusted: issued by an unknown \
             authority (set SSL_CERT_FILE to a file holding its CA)"
        );
        assert_eq!(
            text(C::NotValidForName),
            "the TLS certificate of api.example.com is not trusted: it is for another host name"
        );
        assert_eq!(
            text(C::Expired),
            "the TLS certificate of api.example.com is not trusted: it has expired"
        );
        assert_eq!(
            text(C::NotValidYet),
            "the TLS certificate of api.example.com is not trusted: it is not valid yet"
        );
        // Found inside an io::Error, as tokio-rustls reports it.
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(C::Expired),
        );
        assert!(matches!(
            find_tls_error(&io),
            Some(rustls::Error::InvalidCertificate(C::Expired))
        ));
    }
}
