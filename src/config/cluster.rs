//! The cluster flags of `roundtable serve` (docs/cluster.md): `--cluster` and its server list,
//! the node's name, lease and check times, replicas, the cluster's name, the cluster secret,
//! and the NATS credentials and TLS files. [`from_flags`] checks them into the [`ClusterSettings`] the
//! server connects with; secrets come from files or the environment, never from a flag, and
//! no error shows one. `config.rs` calls it from `ServerConfig::try_from`.

use std::path::{Path, PathBuf};

use roundtable_actors::cluster::seal::ClusterSecret;
use roundtable_actors::cluster::{ClusterAuth, ClusterSettings, Names};

use super::{positive_seconds, warn_if_readable_by_others, ConfigError};

/// The cluster flags of `serve`, as given.
pub(super) struct ClusterFlags {
    /// `--cluster`: the NATS server list.
    pub(super) url: Option<String>,
    /// `--node-name`.
    pub(super) node_name: Option<String>,
    /// `--lease-time`, seconds.
    pub(super) lease_time: f64,
    /// `--reconcile-time`, seconds.
    pub(super) reconcile_time: f64,
    /// `--cluster-replicas`.
    pub(super) replicas: usize,
    /// `--cluster-name`.
    pub(super) name: String,
    /// `--cluster-secret-file`.
    pub(super) secret_file: Option<PathBuf>,
    /// The credential and TLS flags.
    pub(super) auth: ClusterAuthArgs,
}

/// The cluster settings `flags` ask for, checked: `None` without `--cluster` (and then any
/// other cluster flag that would be ignored is refused).
pub(super) fn from_flags(flags: ClusterFlags) -> Result<Option<ClusterSettings>, ConfigError> {
    let auth = cluster_auth(flags.auth, flags.url.as_deref(), |var| {
        std::env::var(var).ok()
    })?;
    let clustered = flags.url.is_some();
    let secret = match (flags.secret_file, clustered) {
        (Some(file), true) => Some(cluster_secret(&file)?),
        (Some(_), false) => {
            return Err(ConfigError::Invalid {
                flag: "cluster-secret-file",
                message: "is for a cluster node: it needs --cluster".into(),
            })
        }
        (None, true) => return Err(ConfigError::Cluster(NO_SECRET.into())),
        (None, false) => None,
    };
    let Some(mut cluster) = cluster_settings(flags.url, flags.node_name, secret)? else {
        return Ok(None);
    };
    cluster.auth = auth;
    cluster.lease_time = positive_seconds("lease-time", flags.lease_time)?;
    cluster.reconcile_time = positive_seconds("reconcile-time", flags.reconcile_time)?;
    cluster.replicas = replicas(flags.replicas)?;
    cluster.names = Names::new(&flags.name).map_err(|message| ConfigError::Invalid {
        flag: "cluster-name",
        message: format!("{:?} {message}", flags.name),
    })?;
    Ok(Some(cluster))
}

/// `--cluster URL [--node-name N]`: the URL must name NATS (`nats://` or `tls://`, or a bare
/// `host:port`); the node name defaults to the host name, with characters a NATS subject
/// cannot carry replaced by `-`.
fn cluster_settings(
    url: Option<String>,
    node_name: Option<String>,
    secret: Option<ClusterSecret>,
) -> Result<Option<ClusterSettings>, ConfigError> {
    let Some(url) = url else {
        return match node_name {
            Some(_) => Err(ConfigError::Cluster(
                "--node-name names a cluster node: it needs --cluster".into(),
            )),
            None => Ok(None),
        };
    };
    for server in roundtable_actors::cluster::server_list(&url) {
        let rest = server
            .strip_prefix("nats://")
            .or_else(|| server.strip_prefix("tls://"))
            .unwrap_or(server);
        if rest.is_empty() || rest.contains("://") {
            return Err(ConfigError::Cluster(format!(
                "--cluster {:?}: expected nats://HOST:PORT",
                roundtable_actors::redact::redact_server_list(&url)
            )));
        }
    }
    let node_name = match node_name {
        Some(name) => name,
        None => host_name()
            .map(|h| {
                h.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '_' {
                            c
                        } else {
                            '-'
                        }
                    })
                    .take(64)
                    .collect()
            })
            .ok_or_else(|| {
                ConfigError::Cluster("no host name to name this node; pass --node-name".into())
            })?,
    };
    ClusterSettings::validate_node_name(&node_name)
        .map_err(|e| ConfigError::Cluster(format!("--node-name: {e}")))?;
    Ok(Some(ClusterSettings {
        url,
        node_name,
        lease_time: roundtable_actors::cluster::lease::DEFAULT_LEASE_TIME,
        reconcile_time: roundtable_actors::registry::DEFAULT_RECONCILE_TIME,
        replicas: 1,
        names: Default::default(),
        auth: Default::default(),
        secret: secret.expect("from_flags refuses --cluster without a secret"),
    }))
}

/// What `--cluster` without `--cluster-secret-file` says.
const NO_SECRET: &str = "--cluster needs --cluster-secret-file FILE: a secret every node of \
     the cluster shares, which authenticates their messages to each other (access to NATS \
     alone must not reach the conversations). Make one and give the same file to every node: \
     head -c 32 /dev/urandom | base64 > cluster-secret; chmod 600 cluster-secret";

/// The cluster secret in the first line of `path` (trimmed). Refused, naming the flag and
/// the path and never the content, when the file cannot be read, can be read by its group or
/// others (whoever reads it can act as a node), or holds fewer than
/// [`MIN_SECRET_BYTES`](roundtable_actors::cluster::seal::MIN_SECRET_BYTES).
fn cluster_secret(path: &Path) -> Result<ClusterSecret, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let flag = "cluster-secret-file";
    let invalid = |message: String| ConfigError::Invalid {
        flag,
        message: format!("{}: {message}", path.display()),
    };
    let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
    let mode = std::fs::metadata(path)
        .map_err(|e| invalid(e.to_string()))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o044 != 0 {
        return Err(invalid(format!(
            "other users can read it (mode {mode:o}), and whoever reads it can act as a node \
             of the cluster: run chmod 600 {}",
            path.display()
        )));
    }
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        return Err(invalid("the file is empty".into()));
    }
    ClusterSecret::new(secret).map_err(invalid)
}

/// The cluster's credential and TLS flags as given.
#[derive(Default)]
pub(super) struct ClusterAuthArgs {
    /// `--cluster-user`.
    pub(super) user: Option<String>,
    /// `--cluster-password-file`.
    pub(super) password_file: Option<PathBuf>,
    /// `--cluster-token-file`.
    pub(super) token_file: Option<PathBuf>,
    /// `--cluster-creds`.
    pub(super) creds: Option<PathBuf>,
    /// `--cluster-tls-ca`.
    pub(super) tls_ca: Option<PathBuf>,
    /// `--cluster-tls-cert`.
    pub(super) tls_cert: Option<PathBuf>,
    /// `--cluster-tls-key`.
    pub(super) tls_key: Option<PathBuf>,
}

/// Environment variable of the password of `--cluster-user` (a flag would show in `ps`).
pub const CLUSTER_PASSWORD_ENV: &str = "ROUNDTABLE_CLUSTER_PASSWORD";
/// Environment variable of the cluster's NATS token.
pub const CLUSTER_TOKEN_ENV: &str = "ROUNDTABLE_CLUSTER_TOKEN";

/// The secret in the first line of `path` (`flag`'s file), trimmed; errors name the flag and
/// the path, never the content.
fn read_secret_file(flag: &'static str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
        flag,
        message: format!("{}: {e}", path.display()),
    })?;
    warn_if_readable_by_others(path, &format!("the --{flag} file"));
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        return Err(ConfigError::Invalid {
            flag,
            message: format!("{}: the file is empty", path.display()),
        });
    }
    Ok(secret)
}

/// Checks that `flag`'s file can be opened now (it is read at connect), naming flag and path.
fn readable(flag: &'static str, path: &Path) -> Result<PathBuf, ConfigError> {
    std::fs::File::open(path)
        .map(|_| path.to_path_buf())
        .map_err(|e| ConfigError::Invalid {
            flag,
            message: format!("{}: {e}", path.display()),
        })
}

/// The cluster's credentials and TLS files: secrets read from their files (or from the
/// environment, through `env`), the other files checked readable, at most one way to
/// authenticate, a client certificate with its key. Any of them without `--cluster` is
/// refused (it would be silently ignored).
fn cluster_auth(
    args: ClusterAuthArgs,
    url: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ClusterAuth, ConfigError> {
    let clustered = url.is_some();
    let env_password = env(CLUSTER_PASSWORD_ENV).filter(|p| !p.is_empty());
    let env_token = env(CLUSTER_TOKEN_ENV).filter(|t| !t.is_empty());
    let given = [
        ("cluster-user", args.user.is_some()),
        ("cluster-password-file", args.password_file.is_some()),
        ("cluster-token-file", args.token_file.is_some()),
        ("cluster-creds", args.creds.is_some()),
        ("cluster-tls-ca", args.tls_ca.is_some()),
        ("cluster-tls-cert", args.tls_cert.is_some()),
        ("cluster-tls-key", args.tls_key.is_some()),
    ];
    if !clustered {
        return match given.iter().find(|(_, set)| *set) {
            Some((flag, _)) => Err(ConfigError::Invalid {
                flag,
                message: "is for a cluster node: it needs --cluster".into(),
            }),
            None => Ok(ClusterAuth::default()),
        };
    }
    let mut auth = ClusterAuth::default();
    match (args.user, args.password_file) {
        (Some(user), Some(file)) => {
            auth.user_password = Some((user, read_secret_file("cluster-password-file", &file)?))
        }
        (Some(user), None) => match env_password.clone() {
            Some(password) => auth.user_password = Some((user, password)),
            None => {
                return Err(ConfigError::Invalid {
                    flag: "cluster-user",
                    message: format!(
                        "needs a password: --cluster-password-file FILE or ${CLUSTER_PASSWORD_ENV}"
                    ),
                })
            }
        },
        (None, Some(_)) => {
            return Err(ConfigError::Invalid {
                flag: "cluster-password-file",
                message: "is the password of --cluster-user, which is not given".into(),
            })
        }
        (None, None) => {}
    }
    auth.token = match args.token_file {
        Some(file) => Some(read_secret_file("cluster-token-file", &file)?),
        None => env_token,
    };
    auth.creds = args
        .creds
        .map(|path| readable("cluster-creds", &path))
        .transpose()?;
    let ways = [
        auth.user_password.is_some(),
        auth.token.is_some(),
        auth.creds.is_some(),
    ];
    if let Some(in_url) = url.map(url_credentials).transpose()?.flatten() {
        if ways.iter().any(|w| *w) {
            return Err(ConfigError::Cluster(
                "--cluster: the URL holds credentials and a flag or the environment gives \
                 others: give them once"
                    .into(),
            ));
        }
        match (in_url, env_password) {
            ((user, Some(password)), _) => auth.user_password = Some((user, password)),
            // `nats://user@host` with the password in the environment (not in the URL).
            ((user, None), Some(password)) => auth.user_password = Some((user, password)),
            ((token, None), None) => auth.token = Some(token),
        }
    }
    if ways.iter().filter(|w| **w).count() > 1 {
        return Err(ConfigError::Invalid {
            flag: "cluster-user",
            message: format!(
                "and the token (--cluster-token-file or ${CLUSTER_TOKEN_ENV}) and --cluster-creds \
                 are three ways to log in to NATS: give one"
            ),
        });
    }
    auth.tls_ca = args
        .tls_ca
        .map(|path| readable("cluster-tls-ca", &path))
        .transpose()?;
    auth.tls_client = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some((
            readable("cluster-tls-cert", &cert)?,
            readable("cluster-tls-key", &key)?,
        )),
        (Some(_), None) => {
            return Err(ConfigError::Invalid {
                flag: "cluster-tls-cert",
                message: "needs its key: --cluster-tls-key".into(),
            })
        }
        (None, Some(_)) => {
            return Err(ConfigError::Invalid {
                flag: "cluster-tls-key",
                message: "is the key of --cluster-tls-cert, which is not given".into(),
            })
        }
        (None, None) => None,
    };
    Ok(auth)
}

/// The credentials in the `--cluster` server list (`nats://user:pass@host`, or
/// `nats://token@host`, or `nats://user@host` with `$ROUNDTABLE_CLUSTER_PASSWORD`),
/// percent-decoded: `(user, Some(password))` or `(user or token, None)`.
/// async-nats does not read them from the URL itself. Servers that name different ones are
/// refused (one node logs in one way).
fn url_credentials(list: &str) -> Result<Option<(String, Option<String>)>, ConfigError> {
    let mut found: Option<(String, Option<String>)> = None;
    for server in roundtable_actors::cluster::server_list(list) {
        let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap_or("");
        let Some((userinfo, _)) = authority.rsplit_once('@') else {
            continue;
        };
        let these = match userinfo.split_once(':') {
            Some((user, password)) => (percent_decode(user), Some(percent_decode(password))),
            None => (percent_decode(userinfo), None),
        };
        match &found {
            Some(earlier) if *earlier != these => {
                return Err(ConfigError::Cluster(
                    "--cluster: the servers' URLs hold different credentials; give one set".into(),
                ))
            }
            _ => found = Some(these),
        }
    }
    Ok(found)
}

/// `%XX` escapes decoded (a URL's user and password); anything else kept.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `--cluster-replicas`: 1 to [`MAX_REPLICAS`](roundtable_actors::cluster::MAX_REPLICAS)
/// (JetStream's own limit).
fn replicas(n: usize) -> Result<usize, ConfigError> {
    let max = roundtable_actors::cluster::MAX_REPLICAS;
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(ConfigError::Invalid {
            flag: "cluster-replicas",
            message: format!("must be 1 to {max} (JetStream replicas), not {n}"),
        })
    }
}

/// The machine's host name (Linux: the kernel's UTS name).
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_credentials_come_from_files_the_environment_or_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "pa55\nignored\n").unwrap();
        let url = Some("nats://127.0.0.1:4222");
        let no_env = |_: &str| None;
        let user = |password_file: Option<PathBuf>| ClusterAuthArgs {
            user: Some("rt".into()),
            password_file,
            ..Default::default()
        };
        let auth = cluster_auth(user(Some(file.clone())), url, no_env).unwrap();
        assert_eq!(auth.user_password, Some(("rt".into(), "pa55".into())));
        assert!(!format!("{auth:?}").contains("pa55"), "{auth:?}");
        let env = |var: &str| (var == CLUSTER_PASSWORD_ENV).then(|| "from-env".to_string());
        let auth = cluster_auth(user(None), url, env).unwrap();
        assert_eq!(auth.user_password, Some(("rt".into(), "from-env".into())));
        let err = cluster_auth(user(None), url, no_env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--cluster-user needs a password: --cluster-password-file FILE or \
             $ROUNDTABLE_CLUSTER_PASSWORD"
        );
        let err =
            cluster_auth(user(Some(PathBuf::from("/nonexistent/pw"))), url, no_env).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--cluster-password-file /nonexistent/pw: No such file"),
            "{err}"
        );
        assert_eq!(err.flag(), Some("cluster-password-file"));
        // The URL's credentials, percent-decoded; a token alone; not twice.
        let url_auth = |url: &str| cluster_auth(ClusterAuthArgs::default(), Some(url), no_env);
        assert_eq!(
            url_auth("nats://rt:p%40ss@127.0.0.1:4222")
                .unwrap()
                .user_password,
            Some(("rt".into(), "p@ss".into()))
        );
        assert_eq!(
            url_auth("tls://tok@h:1,tls://tok@h:2").unwrap().token,
            Some("tok".into())
        );
        assert!(url_auth("nats://a@h:1,nats://b@h:2").is_err());
        assert_eq!(
            cluster_auth(ClusterAuthArgs::default(), Some("nats://rt@h:1"), env)
                .unwrap()
                .user_password,
            Some(("rt".into(), "from-env".into()))
        );
        assert!(cluster_auth(user(Some(file.clone())), Some("nats://t@h:1"), no_env).is_err());
        // One way to log in; a certificate with its key; nothing without --cluster.
        let token_too = ClusterAuthArgs {
            token_file: Some(file.clone()),
            ..user(Some(file.clone()))
        };
        assert!(cluster_auth(token_too, url, no_env).is_err());
        let cert_alone = ClusterAuthArgs {
            tls_cert: Some(file.clone()),
            ..Default::default()
        };
        assert_eq!(
            cluster_auth(cert_alone, url, no_env)
                .unwrap_err()
                .to_string(),
            "--cluster-tls-cert needs its key: --cluster-tls-key"
        );
        let creds = ClusterAuthArgs {
            creds: Some(PathBuf::from("/nonexistent/user.creds")),
            ..Default::default()
        };
        assert!(cluster_auth(creds, url, no_env)
            .unwrap_err()
            .to_string()
            .starts_with("--cluster-creds /nonexistent/user.creds: "));
        assert_eq!(
            cluster_auth(user(Some(file)), None, no_env)
                .unwrap_err()
                .to_string(),
            "--cluster-user is for a cluster node: it needs --cluster"
        );
    }

    /// `--cluster` needs the secret; a secret file others can read, an empty or a short one
    /// is refused, naming the flag and the path and never the content.
    #[test]
    fn the_cluster_secret_is_required_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let flags = |secret_file: Option<PathBuf>| ClusterFlags {
            url: Some("nats://127.0.0.1:4222".into()),
            node_name: Some("a".into()),
            lease_time: 6.0,
            reconcile_time: 30.0,
            replicas: 1,
            name: "rt".into(),
            secret_file,
            auth: ClusterAuthArgs::default(),
        };
        let err = from_flags(flags(None)).unwrap_err().to_string();
        assert!(
            err.starts_with("--cluster needs --cluster-secret-file FILE")
                && err.contains("head -c 32 /dev/urandom | base64 > cluster-secret"),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        let write = |text: &str, mode: u32| {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("a long enough cluster secret\n", 0o644);
        let err = from_flags(flags(Some(file.clone())))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("other users can read it (mode 644)") && !err.contains("long enough"),
            "{err}"
        );
        write("\n", 0o600);
        assert!(from_flags(flags(Some(file.clone())))
            .unwrap_err()
            .to_string()
            .ends_with("the file is empty"));
        write("short\n", 0o600);
        assert!(from_flags(flags(Some(file.clone())))
            .unwrap_err()
            .to_string()
            .contains("at least 16 are needed"));
        write("a long enough cluster secret\nignored\n", 0o600);
        let settings = from_flags(flags(Some(file.clone()))).unwrap().unwrap();
        assert!(!format!("{settings:?}").contains("long enough"));
        let alone = ClusterFlags {
            url: None,
            node_name: None,
            ..flags(Some(file))
        };
        assert_eq!(
            from_flags(alone).unwrap_err().to_string(),
            "--cluster-secret-file is for a cluster node: it needs --cluster"
        );
    }
}
