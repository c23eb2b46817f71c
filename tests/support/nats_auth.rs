//! What a `nats-server` needs to demand credentials or TLS, made in a temporary directory for
//! the cluster tests (`tests/integration/cluster/auth.rs`): config text for user and password
//! or a token, a CA with server and client certificates made by the `openssl` command, and an
//! operator-mode setup (operator, system account, account and user JWTs signed with `nkeys`, the server's
//! memory resolver preloaded with the account) with the user's `.creds` file. Each config is
//! passed to [`NatsServer::start_with_config`](super::nats::NatsServer::start_with_config).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `text` to `dir/name`, readable by its owner only (a secret), and answers the path.
pub fn write_private(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("file written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// A `nats-server` config that admits one user with a password.
pub fn user_password_config(user: &str, password: &str) -> String {
    format!("authorization {{ user: \"{user}\", password: \"{password}\" }}\n")
}

/// A `nats-server` config that admits clients with a token.
pub fn token_config(token: &str) -> String {
    format!("authorization {{ token: \"{token}\" }}\n")
}

/// A test CA and the certificates it signed (PEM files in a temporary directory).
pub struct Tls {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The server's certificate (for 127.0.0.1 and localhost) and key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate and key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    _dir: tempfile::TempDir,
}

/// Runs `openssl args…` in `dir`, panicking with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl ({e}): install Debian's openssl"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Tls {
    /// Makes a CA, then a server and a client certificate it signs (P-256 keys, one day).
    pub fn generate() -> Tls {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=roundtable test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(d, &ca);
        for (name, usage, san) in [
            (
                "server",
                "serverAuth",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
            ),
            ("client", "clientAuth", ""),
        ] {
            let mut req = vec!["req"];
            req.extend(ec);
            let (key, csr, cert, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("{name}.ext"),
            );
            let subject = format!("/CN=roundtable test {name}");
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(d, &req);
            std::fs::write(
                d.join(&ext),
                format!(
                    "{san}basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                     extendedKeyUsage={usage}\n"
                ),
            )
            .unwrap();
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &cert,
                    "-days",
                    "1",
                    "-extfile",
                    &ext,
                ],
            );
        }
        Tls {
            ca: d.join("ca.pem"),
            server_cert: d.join("server.pem"),
            server_key: d.join("server.key"),
            client_cert: d.join("client.pem"),
            client_key: d.join("client.key"),
            _dir: dir,
        }
    }

    /// A `nats-server` config that serves TLS only; `verify` also demands a client certificate
    /// signed by the CA.
    pub fn server_config(&self, verify: bool) -> String {
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: {verify}\n  \
             timeout: 5\n}}\n",
            self.server_cert.display(),
            self.server_key.display(),
            self.ca.display()
        )
    }
}

/// base64url without padding (JWT's encoding).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A NATS JWT: `claims` signed by `issuer` (ed25519 over `header.payload`).
fn jwt(issuer: &nkeys::KeyPair, claims: &serde_json::Value) -> String {
    let header = base64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let payload = base64url(claims.to_string().as_bytes());
    let signed = format!("{header}.{payload}");
    let signature = issuer.sign(signed.as_bytes()).expect("signed");
    format!("{signed}.{}", base64url(&signature))
}

/// The claims every NATS JWT has, for `subject` issued by `issuer`, with `nats` its part.
fn claims(
    name: &str,
    issuer: &nkeys::KeyPair,
    subject: &str,
    nats: serde_json::Value,
) -> serde_json::Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    serde_json::json!({
        "jti": base64url(format!("{name}-{subject}-{now}").as_bytes()),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    })
}

/// Operator mode: an operator, one account with JetStream (no limits) and one user of it.
pub struct Operator {
    /// The `nats-server` config: the operator, the memory resolver preloaded with the account.
    pub config: String,
    /// The user's `.creds` file text (its JWT and nkey seed).
    pub creds: String,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Makes the keys and the JWTs.
    pub fn generate() -> Operator {
        let dir = tempfile::tempdir().expect("temp dir");
        let operator = nkeys::KeyPair::new_operator();
        let account = nkeys::KeyPair::new_account();
        // JetStream needs a system account in operator mode.
        let system = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let system_jwt = jwt(
            &operator,
            &claims(
                "SYS",
                &operator,
                &system.public_key(),
                serde_json::json!({
                    "limits": {
                        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                        "wildcards": true, "conn": -1, "leaf": -1
                    },
                    "default_permissions": {"pub": {}, "sub": {}},
                    "type": "account",
                    "version": 2
                }),
            ),
        );
        let operator_jwt = jwt(
            &operator,
            &claims(
                "roundtable-test-operator",
                &operator,
                &operator.public_key(),
                serde_json::json!({
                    "type": "operator",
                    "version": 2,
                    "system_account": system.public_key()
                }),
            ),
        );
        let account_jwt = jwt(
            &operator,
            &claims(
                "roundtable-test-account",
                &operator,
                &account.public_key(),
                serde_json::json!({
                    "limits": {
                        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                        "wildcards": true, "conn": -1, "leaf": -1,
                        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1
                    },
                    "default_permissions": {"pub": {}, "sub": {}},
                    "type": "account",
                    "version": 2
                }),
            ),
        );
        let user_jwt = jwt(
            &account,
            &claims(
                "roundtable-test-user",
                &account,
                &user.public_key(),
                serde_json::json!({
                    "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                    "type": "user", "version": 2
                }),
            ),
        );
        let operator_file = dir.path().join("operator.jwt");
        std::fs::write(&operator_file, &operator_jwt).unwrap();
        let config = format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  \
             {}: \"{account_jwt}\"\n  {}: \"{system_jwt}\"\n}}\n",
            operator_file.display(),
            system.public_key(),
            account.public_key(),
            system.public_key(),
        );
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            user.seed().expect("a seed")
        );
        Operator {
            config,
            creds,
            _dir: dir,
        }
    }
}

/// The `nats-server` config README's Security section gives (docs/cluster.md, "Who can do
/// what"): each of `nodes` (user, password) is a node of cluster `rt` whose NATS user may
/// publish only the cluster's subjects (relays, searches, counts, its log stream, its three
/// KV buckets and the JetStream API calls on them, the inboxes of answers and replays) and
/// subscribe only to its own relays (`rt.node.<user>.>`), searches, counts and inboxes (so
/// the node users are the node names); `app` (user, password) stands for any other client
/// of the same NATS server, which gets none of them. JetStream syncs every write on 2.10
/// and later (tests/support/nats.rs adds it).
pub fn cluster_permissions_config(nodes: &[(&str, &str)], app: (&str, &str)) -> String {
    let streams = ["RT_LOG", "KV_rt_registry", "KV_rt_owners", "KV_rt_nodes"];
    let mut publish = vec![
        "rt.>".to_string(),
        "$KV.rt_registry.>".into(),
        "$KV.rt_owners.>".into(),
        "$KV.rt_nodes.>".into(),
        "$JS.API.INFO".into(),
        "_INBOX.>".into(),
    ];
    for stream in streams {
        publish.extend([
            format!("$JS.API.STREAM.*.{stream}"),
            format!("$JS.API.STREAM.MSG.*.{stream}"),
            format!("$JS.API.CONSUMER.*.{stream}"),
            format!("$JS.API.CONSUMER.*.{stream}.>"),
            format!("$JS.API.DIRECT.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
            format!("$JS.FC.{stream}.>"),
        ]);
    }
    let list = |subjects: &[String]| {
        subjects
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut users: Vec<String> = nodes
        .iter()
        .map(|(user, password)| {
            let subscribe = [
                format!("rt.node.{user}.>"),
                "rt.search".into(),
                "rt.counts".into(),
                "_INBOX.>".into(),
            ];
            format!(
                "    {{ user: \"{user}\", password: \"{password}\", permissions: {{\n      \
                 publish: {{ allow: [{}] }},\n      subscribe: {{ allow: [{}] }}\n    }} }}",
                list(&publish),
                list(&subscribe)
            )
        })
        .collect();
    let (app_user, app_password) = app;
    users.push(format!(
        "    {{ user: \"{app_user}\", password: \"{app_password}\", permissions: {{\n      \
         publish: {{ allow: [\"app.>\", \"_INBOX.>\"] }},\n      subscribe: {{ allow: \
         [\"app.>\", \"_INBOX.>\"] }}\n    }} }}"
    ));
    format!(
        "authorization {{\n  users = [\n{}\n  ]\n}}\n",
        users.join(",\n")
    )
}
