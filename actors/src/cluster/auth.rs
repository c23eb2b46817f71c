//! How a node logs in to NATS (docs/cluster.md, "Credentials and isolation"): its
//! credentials and TLS files ([`ClusterAuth`], from the `--cluster-…` flags), the connect
//! error said once with a hint, and the warning a node gives when NATS takes it (or anyone)
//! without credentials.
//!
//! Who talks to it: [`Cluster::connect`](super::Cluster::connect).

use std::path::PathBuf;

use super::{ClusterError, ClusterSettings};

/// How a node proves itself to NATS, and which certificates it trusts: at most one of user
/// and password, token, `.creds` file (the flags refuse more). Its `Debug` hides the secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClusterAuth {
    /// `--cluster-user` with its password (from `--cluster-password-file` or
    /// `$ROUNDTABLE_CLUSTER_PASSWORD`, never a flag's value).
    pub user_password: Option<(String, String)>,
    /// The token from `--cluster-token-file` or `$ROUNDTABLE_CLUSTER_TOKEN`.
    pub token: Option<String>,
    /// `--cluster-creds`: a NATS `.creds` file (user JWT and nkey seed), read at connect.
    pub creds: Option<PathBuf>,
    /// `--cluster-tls-ca`: PEM certificates to trust for the server's (besides the system's).
    pub tls_ca: Option<PathBuf>,
    /// `--cluster-tls-cert` and `--cluster-tls-key`: the client certificate (PEM) and its key.
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAuth")
            .field("user", &self.user_password.as_ref().map(|(user, _)| user))
            .field("password", &self.user_password.as_ref().map(|_| "***"))
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("creds", &self.creds)
            .field("tls_ca", &self.tls_ca)
            .field("tls_client", &self.tls_client)
            .finish()
    }
}

impl ClusterAuth {
    /// `options` with these credentials and certificates. Reads the `.creds` file (its
    /// errors name the flag and the path).
    pub(super) async fn apply(
        &self,
        mut options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, ClusterError> {
        if let Some((user, password)) = &self.user_password {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(path) = &self.creds {
            options = options.credentials_file(path).await.map_err(|e| {
                ClusterError(format!(
                    "--cluster-creds {}: not a usable NATS credentials file: {e}",
                    path.display()
                ))
            })?;
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.tls_client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }
}

/// Warns, with the word `anonymous` and what it means, when the NATS server accepts clients
/// without credentials (its INFO says `auth_required: false`) or this node logs in without
/// any: then whoever can reach NATS can read every conversation in the log stream and the
/// registry, and write them (the cluster secret keeps them from the nodes' relays, searches
/// and counts, not from JetStream's data).
pub(super) fn warn_if_anonymous(settings: &ClusterSettings, client: &async_nats::Client) {
    let auth = &settings.auth;
    let with_credentials = auth.user_password.is_some()
        || auth.token.is_some()
        || auth.creds.is_some()
        || auth.tls_client.is_some()
        || crate::redact::redact_server_list(&settings.url) != settings.url;
    let server_open = !client.server_info().auth_required;
    if server_open || !with_credentials {
        let why = if server_open {
            "the NATS server accepts anonymous clients"
        } else {
            "this node connects to NATS anonymously (no credentials)"
        };
        log::warn!(
            target: crate::SECURITY_LOG_TARGET,
            "cluster node {}: {why}: anyone who can reach {} can read every conversation in the \
             stream {} and the bucket {}, and change them; give NATS users with passwords and \
             permissions (README, Security: the NATS row; docs/cluster.md, \"Who can do what\")",
            settings.node_name,
            settings.shown_url(),
            settings.names.log_stream(),
            settings.names.registry_bucket(),
        );
    }
}

/// async-nats' connect error, said once and with a hint where the cause is a usual mistake:
/// `authorization violation: nats: authorization violation` becomes `authorization
/// violation`; a certificate the node does not trust, a client certificate the server
/// wants, a `tls://` URL to a server without TLS get a word on the flag to look at.
pub(super) fn connect_error_text(text: &str) -> String {
    let text = match text.split_once(": nats: ") {
        Some((kind, detail)) if kind.eq_ignore_ascii_case(detail) => kind.to_string(),
        _ => text.to_string(),
    };
    let hint = if text.contains("UnknownIssuer") || text.contains("invalid peer certificate") {
        " (the server's certificate is not signed by a trusted CA: --cluster-tls-ca)"
    } else if text.contains("BadCertificate") || text.contains("CertificateRequired") {
        " (the server wants a client certificate it trusts: --cluster-tls-cert and \
         --cluster-tls-key)"
    } else if text.contains("InvalidContentType") {
        " (the server does not speak TLS: a tls:// URL requires it)"
    } else {
        ""
    };
    format!("{text}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_are_said_once_with_a_hint() {
        assert_eq!(
            connect_error_text("authorization violation: nats: authorization violation"),
            "authorization violation"
        );
        assert_eq!(
            connect_error_text("IO error: invalid peer certificate: UnknownIssuer"),
            "IO error: invalid peer certificate: UnknownIssuer (the server's certificate is not \
             signed by a trusted CA: --cluster-tls-ca)"
        );
        assert_eq!(connect_error_text("timed out"), "timed out");
    }

    #[test]
    fn the_auth_debug_hides_secrets() {
        let auth = ClusterAuth {
            user_password: Some(("rt".into(), "pa55word".into())),
            token: Some("t0ken".into()),
            ..Default::default()
        };
        let shown = format!("{auth:?}");
        assert!(shown.contains("\"rt\""), "{shown}");
        assert!(
            !shown.contains("pa55word") && !shown.contains("t0ken"),
            "{shown}"
        );
    }
}
