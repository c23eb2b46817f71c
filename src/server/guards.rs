//! The checks every request passes before it reaches a route or becomes a WebSocket: the
//! `Host` check (DNS rebinding, loopback binds only) for every request, then, for an upgrade,
//! the `Origin` check (web pages other than loopback ones cannot drive the server) and either
//! the token or, without one, the same-user rule ([`super::peer`]). README's Security section
//! is the threat model these implement.
//!
//! Called by [`super::serve`]'s middleware ([`host_allowed`]) and by the upgrade route
//! ([`upgrade_refusal`]); nothing here keeps state.

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

use super::peer;
use crate::config::ServerConfig;

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
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &config.allowed_origins) {
            log::warn!("refused {what} from Origin {origin:?}");
            return Some(HttpResponse::Forbidden().body("Origin not allowed"));
        }
    }
    match &config.token {
        Some(token) => {
            if !token_presented(req, token) {
                log::warn!("refused {what} without a valid token");
                return Some(
                    HttpResponse::Unauthorized()
                        .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
                        .body("missing or wrong token"),
                );
            }
        }
        None => {
            if let Err(refusal) = same_user_only(req) {
                log::warn!("refused {what}: {refusal}");
                return Some(HttpResponse::Forbidden().body(refusal));
            }
        }
    }
    None
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

/// Loopback http(s) origins, or one listed with `--allow-origin`.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim();
    if allowed.iter().any(|a| {
        a.trim_end_matches('/')
            .eq_ignore_ascii_case(origin.trim_end_matches('/'))
    }) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return false;
    }
    let authority = rest.split('/').next().unwrap_or("");
    !authority.contains('@') && is_loopback_host(strip_port(authority))
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
        assert!(origin_allowed("http://localhost:3000", &[]));
        assert!(origin_allowed("https://127.0.0.1", &[]));
        assert!(origin_allowed("http://[::1]:8999", &[]));
        assert!(!origin_allowed("https://evil.example", &[]));
        assert!(!origin_allowed("http://localhost.evil.example", &[]));
        assert!(!origin_allowed("http://user@evil.example", &[]));
        assert!(!origin_allowed("chrome-extension://abc", &[]));
        assert!(origin_allowed(
            "chrome-extension://abc",
            &["chrome-extension://abc".into()]
        ));
        assert!(!origin_allowed("null", &[]));
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
