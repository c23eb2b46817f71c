//! The checks every request passes before it reaches a route or becomes a WebSocket: the
//! `Host` check (DNS rebinding, loopback binds only) for every request, then, for an upgrade,
//! the `Origin` check (a browser connection only from the server's own origin or an
//! `--allow-origin` entry: pages on other loopback ports are other people's pages) and either
//! the token or, without one, the same-user rule ([`super::peer`]). README's Security section
//! is the threat model these implement.
//!
//! Every refusal is logged on the [`SECURITY`] target, which no
//! run-time log filter silences.
//!
//! Called by [`super::serve`]'s middleware ([`host_allowed`]), by the upgrade route
//! ([`upgrade_refusal`]), by `GET /backup` ([`client_refusal`], [`backup_refusal`]) and by
//! `/health` and `/metrics` ([`trusted_reader`]); nothing here keeps state.

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

use super::peer;
use crate::config::ServerConfig;
use crate::logging::SECURITY;

/// False when the server is bound to loopback only and the request's `Host` is not a
/// loopback name: a rebinding DNS name must not reach a local-only server.
pub fn host_allowed(req: &HttpRequest, config: &ServerConfig) -> bool {
    !config.loopback_only() || host_is_loopback(req)
}

/// The refusal for a WebSocket upgrade that fails a check (logged here), or `None` to upgrade:
/// an `Origin` that is not allowed gets 403; with a token, a missing or wrong one gets 401;
/// without one, a loopback peer of another OS user gets 403.
pub fn upgrade_refusal(req: &HttpRequest, config: &ServerConfig) -> Option<HttpResponse> {
    client_refusal(req, config, "WebSocket upgrade")
}

/// The same checks as [`upgrade_refusal`] for any request that acts as a client (`what`
/// names it in the log: `GET /backup` reads every conversation, so it passes them too).
pub fn client_refusal(
    req: &HttpRequest,
    config: &ServerConfig,
    what: &str,
) -> Option<HttpResponse> {
    let peer = peer_text(req);
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, request_host(req), &config.allowed_origins) {
            log::warn!(target: SECURITY, "refused {what} from {peer}: Origin {origin:?} is not this server's own origin nor an --allow-origin entry");
            return Some(HttpResponse::Forbidden().body("Origin not allowed"));
        }
    }
    if let Err(refusal) = identity_refusal(req, config) {
        log::warn!(target: SECURITY, "refused {what} from {peer}: {}", refusal.reason());
        return Some(refusal.response());
    }
    None
}

/// Why a request is not the server's user (nor a token holder).
enum Refusal {
    /// A token is configured and the request has no valid one: 401.
    NoToken,
    /// Without a token, the same-user rule refused it (why): 403.
    NotTheServersUser(String),
}

impl Refusal {
    /// For the log.
    fn reason(&self) -> &str {
        match self {
            Refusal::NoToken => "no valid token",
            Refusal::NotTheServersUser(why) => why,
        }
    }

    /// The answer the request gets.
    fn response(self) -> HttpResponse {
        match self {
            Refusal::NoToken => HttpResponse::Unauthorized()
                .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
                .body("missing or wrong token"),
            Refusal::NotTheServersUser(why) => HttpResponse::Forbidden().body(why),
        }
    }
}

/// The identity part of the checks: with a token, the token; without one, the same-user rule.
fn identity_refusal(req: &HttpRequest, config: &ServerConfig) -> Result<(), Refusal> {
    match &config.token {
        Some(token) if !token_presented(req, token) => Err(Refusal::NoToken),
        Some(_) => Ok(()),
        None => same_user_only(req).map_err(Refusal::NotTheServersUser),
    }
}

/// True when the request may read the server's figures (`/health` in full, `/metrics`): it
/// passes the token or, without one, the same-user rule. Other OS users get `/health`'s status
/// only and no `/metrics` (counts of conversations, clients and errors are the server user's
/// business). Refusals are not logged: monitoring polls, and answering is not a breach.
pub fn trusted_reader(req: &HttpRequest, config: &ServerConfig) -> bool {
    identity_refusal(req, config).is_ok()
}

/// The header every `GET /backup` must carry: a custom request header, which a web page cannot
/// add to a request without script, and script cannot add to a cross-origin request without a
/// CORS preflight that this server never grants. `roundtable backup` sends it.
pub const BACKUP_REQUEST_HEADER: &str = "x-roundtable-backup";

/// The refusal for a `GET /backup` a web page could have made without script (a link, a
/// redirect, a form, an `<img>`): it must carry [`BACKUP_REQUEST_HEADER`], and when the
/// browser says where it came from (`Sec-Fetch-Site`), it must not be another site. Checked
/// before the client checks ([`client_refusal`]).
pub fn backup_refusal(req: &HttpRequest) -> Option<HttpResponse> {
    let peer = peer_text(req);
    let site = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok());
    if let Some(site) = site {
        if !matches!(site, "same-origin" | "none") {
            log::warn!(target: SECURITY, "refused backup from {peer}: Sec-Fetch-Site {site:?} (a request made by another site's page)");
            return Some(
                HttpResponse::Forbidden().body("a backup cannot be asked for by another site"),
            );
        }
    }
    if !req.headers().contains_key(BACKUP_REQUEST_HEADER) {
        log::warn!(target: SECURITY, "refused backup from {peer}: no {BACKUP_REQUEST_HEADER} header (a page's link or redirect cannot send one)");
        return Some(HttpResponse::Forbidden().body(format!(
            "a backup request must carry the header `{BACKUP_REQUEST_HEADER}: 1` (roundtable backup sends it)"
        )));
    }
    None
}

/// The peer's address for the log.
pub fn peer_text(req: &HttpRequest) -> String {
    req.peer_addr()
        .map_or_else(|| "an unknown peer".into(), |a| a.to_string())
}

/// The request's `Host` header, if it has a readable one.
fn request_host(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::trim)
}

/// True for `localhost`, `127.x.x.x` and `[::1]`, with any port.
fn is_loopback_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Splits `host[:port]` / `[v6][:port]` and returns the host.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split(']')
            .next()
            .map_or(authority, |h| &authority[..h.len() + 1]);
    }
    authority.rsplit_once(':').map_or(authority, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            authority
        }
    })
}

/// The request's `Host` names a loopback address (or there is none).
fn host_is_loopback(req: &HttpRequest) -> bool {
    match req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        Some(h) => is_loopback_host(strip_port(h.trim())),
        // HTTP/1.0 without Host: nothing to rebind.
        None => true,
    }
}

/// The server's own origin, or one listed with `--allow-origin`.
///
/// The own origin is the one the page that opens the socket was served from by this server:
/// an `http://` origin whose host and port are the request's `Host` (what the browser connected
/// to), when that host is a loopback name or an IP address. A page on another port — another
/// program's page, even on 127.0.0.1 — has another origin and is refused; so is a DNS name,
/// which could be rebound to this machine (list it with `--allow-origin` to serve it).
pub fn origin_allowed(origin: &str, host: Option<&str>, allowed: &[String]) -> bool {
    let origin = origin.trim();
    if allowed.iter().any(|a| {
        a.trim_end_matches('/')
            .eq_ignore_ascii_case(origin.trim_end_matches('/'))
    }) {
        return true;
    }
    let Some(host) = host else {
        return false;
    };
    // The server speaks plain HTTP: its pages' origins are `http://` (a TLS proxy in front
    // of it names its origin with `--allow-origin`).
    let Some(rest) = origin
        .split_once("://")
        .and_then(|(scheme, rest)| scheme.eq_ignore_ascii_case("http").then_some(rest))
    else {
        return false;
    };
    let default_port = "80";
    // An origin is scheme://host[:port], nothing after.
    if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
        return false;
    }
    let (origin_host, origin_port) = split_authority(rest, default_port);
    let (host_name, host_port) = split_authority(host, default_port);
    let literal = origin_host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok();
    origin_host.eq_ignore_ascii_case(host_name)
        && origin_port == host_port
        && (literal || is_loopback_host(origin_host))
}

/// `host[:port]` / `[v6][:port]` as (host, port), with `default_port` when none is given.
fn split_authority<'a>(authority: &'a str, default_port: &'a str) -> (&'a str, &'a str) {
    let host = strip_port(authority);
    let port = authority[host.len()..]
        .strip_prefix(':')
        .filter(|p| !p.is_empty())
        .unwrap_or(default_port);
    (host, port)
}

/// Without a token, a loopback connection is served only when the OS user that opened it is
/// the server's own (so other users of a shared machine cannot read, delete or stop anything).
/// A connection from another address is allowed (the server only listens beyond loopback when
/// told to with `--host`, and warns at start when it does so without a token).
fn same_user_only(req: &HttpRequest) -> Result<(), String> {
    let Some(peer) = req.peer_addr() else {
        return Err("the connection has no peer address".into());
    };
    if !peer.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    let local = req.app_config().local_addr();
    let own = peer::own_uid().map_err(|e| format!("cannot read this process's uid: {e}"))?;
    match peer::loopback_peer_uid(peer, local) {
        Ok(Some(uid)) if uid == own => Ok(()),
        Ok(Some(uid)) => Err(format!(
            "connection from another OS user (uid {uid}); this server serves only uid {own} \
             without a token (start it with --token-file to share it)"
        )),
        Ok(None) => Err(format!(
            "cannot tell which OS user opened the connection from {peer}"
        )),
        Err(e) => Err(format!(
            "cannot read the socket table to check the peer's user: {e}"
        )),
    }
}

/// The token came as `Authorization: Bearer <token>` or as `?token=<token>`.
fn token_presented(req: &HttpRequest, expected: &str) -> bool {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if bearer.is_some_and(|b| constant_time_eq(b.as_bytes(), expected.as_bytes())) {
        return true;
    }
    actix_web::web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.get("token").cloned())
        .is_some_and(|t| constant_time_eq(t.as_bytes(), expected.as_bytes()))
}

/// Compares without an early exit, so timing does not reveal how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let own = |origin: &str, host: &str| origin_allowed(origin, Some(host), &[]);
        // The server's own origin, however the browser named it.
        assert!(own("http://localhost:8999", "localhost:8999"));
        assert!(own("http://127.0.0.1:8999", "127.0.0.1:8999"));
        assert!(own("http://[::1]:8999", "[::1]:8999"));
        assert!(own("http://LOCALHOST:8999", "localhost:8999"));
        assert!(own("http://127.0.0.1", "127.0.0.1:80"));
        assert!(own("http://192.168.1.5:8999", "192.168.1.5:8999"));
        // Pages on other loopback ports are other programs' pages.
        assert!(!own("http://127.0.0.1:9000", "127.0.0.1:8999"));
        assert!(!own("http://localhost:3000", "localhost:8999"));
        assert!(!own("http://foo.localhost:1234", "localhost:8999"));
        assert!(!own("http://localhost:8999", "127.0.0.1:8999"));
        assert!(!own("https://127.0.0.1:8999", "127.0.0.1:8999"));
        // A DNS name may be rebound to this machine: only with --allow-origin.
        assert!(!own("http://mybox.example:8999", "mybox.example:8999"));
        assert!(origin_allowed(
            "http://mybox.example:8999",
            Some("mybox.example:8999"),
            &["http://mybox.example:8999".into()]
        ));
        assert!(!own("https://evil.example", "127.0.0.1:8999"));
        assert!(!own("http://user@127.0.0.1:8999", "127.0.0.1:8999"));
        assert!(!own("http://127.0.0.1:8999/x", "127.0.0.1:8999"));
        assert!(!own("chrome-extension://abc", "127.0.0.1:8999"));
        assert!(origin_allowed(
            "chrome-extension://abc",
            Some("127.0.0.1:8999"),
            &["chrome-extension://abc".into()]
        ));
        assert!(!own("null", "127.0.0.1:8999"));
        assert!(!origin_allowed("http://127.0.0.1:8999", None, &[]));
    }

    #[test]
    fn hosts_and_tokens() {
        assert!(is_loopback_host(strip_port("localhost:8999")));
        assert!(is_loopback_host(strip_port("[::1]:8999")));
        assert!(is_loopback_host(strip_port("127.0.0.2")));
        assert!(!is_loopback_host(strip_port("attacker.example:8999")));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
