//! Credentials and TLS for `--cluster`, against real `nats-server`s that demand them: user and
//! password (from a file, the environment or the URL), a token, TLS with the test's own CA
//! (`tls://` and `nats://` URLs, a client certificate), and an operator-mode server with a
//! `.creds` file. The right credentials let two nodes share a conversation; wrong or missing
//! ones stop the node at start with a clear message and a non-zero exit; no secret reaches
//! the node's log, `/health` or its error.

use std::process::{ExitStatus, Stdio};

use super::*;
use crate::support::nats_auth::{self, Operator, Tls};

/// `nats_or_skip` for a server with `config`.
fn nats_with(config: &str) -> Option<NatsServer> {
    if nats::available() {
        return Some(NatsServer::start_with_config(config));
    }
    skip("nats-server is not installed (apt install nats-server; .ci/run does)");
    None
}

/// `roundtable serve extra…` that must fail at start: its exit status and stderr. Bounded:
/// a server that starts instead is killed and the test fails.
fn start_fails(extra: &[&str], envs: &[(&str, &str)]) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd =
        crate::support::server::serve_command(std::path::Path::new(binary()), dir.path(), extra);
    cmd.envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(out) => {
            let out = out.unwrap();
            (
                out.status,
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(_) => {
            // SAFETY: kill(2) on our own child, still running (its waiter has not returned).
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            panic!("roundtable serve {extra:?} did not fail at start");
        }
    }
}

/// Nodes `a` and `b` share a conversation (a new one, named `name`): a client on b joins
/// the one a serves (relayed through NATS) and both see a turn.
fn two_nodes_share_a_conversation(a: &Server, b: &Server, name: &str) {
    let (mut on_a, id) = a.joined(name);
    let mut on_b = b.connect();
    on_b.join(&id);
    let rid = Client::request_id(&on_b.submit(&id, "what is 20+22"));
    assert_eq!(answer(&on_b.until_complete(&id, &rid)), "42");
    assert_eq!(answer(&on_a.until_complete(&id, &rid)), "42");
}

/// `/health` of `node`, checked not to hold `secret`.
fn assert_not_shown(node: &Server, secret: &str) {
    let (status, health) = node.http_get("/health");
    assert_eq!(status, 200, "{health}");
    assert!(!health.contains(secret), "/health shows it: {health}");
    let log = node.log();
    assert!(!log.contains(secret), "the log shows it:\n{log}");
}

/// User and password: from `--cluster-password-file` on one node, from
/// `$ROUNDTABLE_CLUSTER_PASSWORD` on another, in the URL on a third (and the user in the URL
/// with the password in the environment on a fourth); they share conversations. A wrong password stops the node with NATS' reason; no password shows.
#[test]
fn user_and_password_from_a_file_the_environment_or_the_url() {
    let password = "s3cret-Pa55word";
    let Some(nats) = nats_with(&nats_auth::user_password_config("rt", password)) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let file = nats_auth::write_private(secrets.path(), "password", &format!("{password}\n"));
    let file = file.to_str().unwrap();
    let url = nats.url();
    let a = Server::start(&[
        "--cluster",
        &url,
        "--node-name",
        "a",
        "--cluster-user",
        "rt",
        "--cluster-password-file",
        file,
    ]);
    let b = Server::start_env(
        &[
            "--cluster",
            &url,
            "--node-name",
            "b",
            "--cluster-user",
            "rt",
        ],
        &[("ROUNDTABLE_CLUSTER_PASSWORD", password)],
    );
    let in_url = url.replace("nats://", &format!("nats://rt:{password}@"));
    let c = Server::start(&["--cluster", &in_url, "--node-name", "c"]);
    two_nodes_share_a_conversation(&a, &b, "secured");
    two_nodes_share_a_conversation(&b, &c, "secured again");
    // The user in the URL, the password in the environment.
    let user_url = url.replace("nats://", "nats://rt@");
    let g = Server::start_env(
        &["--cluster", &user_url, "--node-name", "g"],
        &[("ROUNDTABLE_CLUSTER_PASSWORD", password)],
    );
    assert_not_shown(&g, password);
    for node in [&a, &b, &c] {
        assert_not_shown(node, password);
    }
    let (_, health) = c.http_get("/health");
    assert!(health.contains("nats://***@127.0.0.1:"), "{health}");
    let (mut client, id) = a.joined("config");
    let shown = Client::texts(&client.run_turn(&id, "@system config")).join("\n");
    assert!(
        !shown.contains(password),
        "@system config shows it:\n{shown}"
    );
    // `config show` names the user and the file, never the password.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(binary())
        .args(["config", "show", "--instance-dir"])
        .arg(dir.path())
        .args(["--cluster", &in_url, "--cluster-password-file", file])
        .env("ROUNDTABLE_CLUSTER_PASSWORD", password)
        .env_remove("ROUNDTABLE_CONFIG")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!("cluster-password-file = \"{file}\"")),
        "{shown}"
    );
    assert!(!shown.contains(password), "config show shows it:\n{shown}");

    let wrong = nats_auth::write_private(secrets.path(), "wrong", "not-the-password\n");
    let (status, stderr) = start_fails(
        &[
            "--cluster",
            &url,
            "--node-name",
            "d",
            "--cluster-user",
            "rt",
            "--cluster-password-file",
            wrong.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "roundtable: cluster: cannot connect to {url}: authorization violation\n"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
    // No password at all: the server refuses too.
    let (status, stderr) = start_fails(&["--cluster", &url, "--node-name", "e"], &[]);
    assert!(!status.success());
    assert!(stderr.contains("authorization violation"), "{stderr}");
    // A password file that cannot be read: the flag and the path.
    let (status, stderr) = start_fails(
        &[
            "--cluster",
            &url,
            "--node-name",
            "f",
            "--cluster-user",
            "rt",
            "--cluster-password-file",
            "/nonexistent/password",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cluster-password-file /nonexistent/password: No such file"),
        "{stderr}"
    );
}

/// A token, from `--cluster-token-file` or `$ROUNDTABLE_CLUSTER_TOKEN`; a wrong one is
/// refused with NATS' reason, and no token shows.
#[test]
fn a_token_from_a_file_or_the_environment() {
    let token = "t0ken-for-the-cluster";
    let Some(nats) = nats_with(&nats_auth::token_config(token)) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let file = nats_auth::write_private(secrets.path(), "token", token);
    let url = nats.url();
    let a = Server::start(&[
        "--cluster",
        &url,
        "--node-name",
        "a",
        "--cluster-token-file",
        file.to_str().unwrap(),
    ]);
    let b = Server::start_env(
        &["--cluster", &url, "--node-name", "b"],
        &[("ROUNDTABLE_CLUSTER_TOKEN", token)],
    );
    two_nodes_share_a_conversation(&a, &b, "secured");
    for node in [&a, &b] {
        assert_not_shown(node, token);
    }
    let (status, stderr) = start_fails(
        &["--cluster", &url, "--node-name", "c"],
        &[("ROUNDTABLE_CLUSTER_TOKEN", "a-wrong-token")],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot connect to {url}: authorization violation")),
        "{stderr}"
    );
    assert!(!stderr.contains("a-wrong-token"), "{stderr}");
}

/// A server that serves TLS only, with a certificate of the test's own CA: a `tls://` URL
/// with `--cluster-tls-ca` works, and so does `nats://` (TLS because the server demands
/// it); without the CA the node refuses the server's certificate and stops.
#[test]
fn tls_with_the_clusters_own_ca() {
    let tls = Tls::generate();
    let Some(nats) = nats_with(&tls.server_config(false)) else {
        return;
    };
    let ca = tls.ca.to_str().unwrap();
    let tls_url = format!("tls://127.0.0.1:{}", nats.port);
    let a = Server::start(&[
        "--cluster",
        &tls_url,
        "--node-name",
        "a",
        "--cluster-tls-ca",
        ca,
    ]);
    let b = Server::start(&[
        "--cluster",
        &nats.url(),
        "--node-name",
        "b",
        "--cluster-tls-ca",
        ca,
    ]);
    two_nodes_share_a_conversation(&a, &b, "secured");
    let (status, stderr) = start_fails(&["--cluster", &tls_url, "--node-name", "c"], &[]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "roundtable: cluster: cannot connect to {tls_url}: "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--cluster-tls-ca"), "{stderr}");
    // A tls:// URL demands TLS: a server without it is refused.
    let Some(plain) = nats_or_skip() else { return };
    let plain_tls_url = format!("tls://127.0.0.1:{}", plain.port);
    let (status, stderr) = start_fails(
        &[
            "--cluster",
            &plain_tls_url,
            "--node-name",
            "d",
            "--cluster-tls-ca",
            ca,
        ],
        &[],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot connect to {plain_tls_url}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("the server does not speak TLS"), "{stderr}");
}

/// A server that demands a client certificate: `--cluster-tls-cert` and `--cluster-tls-key`
/// get the node in; without them it is refused.
#[test]
fn tls_with_a_client_certificate() {
    let tls = Tls::generate();
    let Some(nats) = nats_with(&tls.server_config(true)) else {
        return;
    };
    let url = format!("tls://127.0.0.1:{}", nats.port);
    let with_cert = |node: &'static str| {
        vec![
            "--cluster".to_string(),
            url.clone(),
            "--node-name".into(),
            node.into(),
            "--cluster-tls-ca".into(),
            tls.ca.display().to_string(),
            "--cluster-tls-cert".into(),
            tls.client_cert.display().to_string(),
            "--cluster-tls-key".into(),
            tls.client_key.display().to_string(),
        ]
    };
    let args = |v: &'static str| with_cert(v);
    let a_args = args("a");
    let b_args = args("b");
    let a = Server::start(&a_args.iter().map(String::as_str).collect::<Vec<_>>());
    let b = Server::start(&b_args.iter().map(String::as_str).collect::<Vec<_>>());
    two_nodes_share_a_conversation(&a, &b, "secured");
    let without: Vec<String> = args("c").into_iter().take(6).collect();
    let (status, stderr) =
        start_fails(&without.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot connect to {url}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("--cluster-tls-cert"), "{stderr}");
}

/// Operator mode (JWTs, a memory resolver, JetStream enabled for the account): two nodes
/// with the user's `.creds` file share a conversation; a node without it is refused, and a
/// missing or broken `.creds` file is named with its flag. The seed never shows.
#[test]
fn a_creds_file_in_operator_mode() {
    let operator = Operator::generate();
    let Some(nats) = nats_with(&operator.config) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let creds = nats_auth::write_private(secrets.path(), "user.creds", &operator.creds);
    let creds = creds.to_str().unwrap();
    let url = nats.url();
    let node = |name: &str| {
        Server::start(&[
            "--cluster",
            &url,
            "--node-name",
            name,
            "--cluster-creds",
            creds,
        ])
    };
    let (a, b) = (node("a"), node("b"));
    two_nodes_share_a_conversation(&a, &b, "secured");
    let seed = operator
        .creds
        .lines()
        .find(|l| l.starts_with("SU"))
        .expect("the seed line")
        .to_string();
    for node in [&a, &b] {
        assert_not_shown(node, &seed);
    }
    let (status, stderr) = start_fails(&["--cluster", &url, "--node-name", "c"], &[]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot connect to {url}: ")),
        "{stderr}"
    );
    let (status, stderr) = start_fails(
        &[
            "--cluster",
            &url,
            "--node-name",
            "d",
            "--cluster-creds",
            "/nonexistent/user.creds",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cluster-creds /nonexistent/user.creds: No such file"),
        "{stderr}"
    );
    let broken = nats_auth::write_private(secrets.path(), "broken.creds", "not a creds file\n");
    let broken = broken.to_str().unwrap();
    let (status, stderr) = start_fails(
        &[
            "--cluster",
            &url,
            "--node-name",
            "e",
            "--cluster-creds",
            broken,
        ],
        &[],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "--cluster-creds {broken}: not a usable NATS credentials file: "
        )),
        "{stderr}"
    );
}

/// README's NATS permissions (Security, the NATS row): nodes whose NATS users may use only the
/// cluster's subjects (and listen only to their own relays) run the whole cluster (a relayed turn, search across nodes, create,
/// rename, delete, a takeover after `kill -9`) without a single permissions violation, and
/// another user of the same NATS server can neither read the log stream nor listen to the
/// nodes' subjects.
#[test]
fn a_cluster_runs_with_nats_permissions_limited_to_its_subjects() {
    let config = nats_auth::cluster_permissions_config(
        &[("a", "a-pass"), ("b", "b-pass")],
        ("app", "app-pass"),
    );
    let Some(nats) = nats_with(&config) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let node = |name: &str| {
        let password = nats_auth::write_private(secrets.path(), name, &format!("{name}-pass"));
        Server::start(&[
            "--cluster",
            &nats.url(),
            "--node-name",
            name,
            "--cluster-user",
            name,
            "--cluster-password-file",
            password.to_str().unwrap(),
            "--lease-time",
            "2",
        ])
    };
    let a = node("a");
    let b = node("b");
    two_nodes_share_a_conversation(&a, &b, "permitted");
    let (mut on_a, id) = a.joined("platypus facts");
    on_a.run_turn(&id, "tell me about the platypus");
    eventually("b to find a's conversation", || {
        b.connect()
            .agent("searchConversationContent", json!(["platypus", null]))
            .unwrap()
            .to_string()
            .contains("platypus facts")
    });
    let mut on_b = b.connect();
    on_b.agent("renameConversation", json!([id, "monotremes"]))
        .unwrap();
    let gone = on_b.create("to delete");
    on_b.agent("deleteConversation", json!([gone])).unwrap();
    // a dies; b takes its conversation over from the stream.
    drop(on_a);
    a.kill();
    eventually("b to take the conversation over", || {
        let mut client = b.connect();
        client
            .agent("joinConversation", json!([{"conversationId": id}]))
            .is_ok()
            && client
                .history(&id)
                .iter()
                .any(|e| e["command"] == "tell me about the platypus")
    });
    let log = nats.log();
    assert!(
        !log.contains("Violation"),
        "the nodes' user lacked a permission:\n{log}"
    );
    // Another user of the same server: no stream read, no listening to the nodes.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = runtime.enter();
    runtime.block_on(async {
        let app =
            async_nats::ConnectOptions::with_user_and_password("app".into(), "app-pass".into())
                .connect(nats.url())
                .await
                .expect("the other user connects");
        let js = async_nats::jetstream::new(app.clone());
        let read = tokio::time::timeout(WAIT, js.get_stream("RT_LOG")).await;
        assert!(!matches!(read, Ok(Ok(_))), "the other user read the stream");
        let _ = app.subscribe("rt.>").await;
        app.flush().await.unwrap();
    });
    let violations = || nats.log().matches("Violation").count();
    eventually("NATS to refuse the other user twice", || violations() >= 2);
    let log = nats.log();
    assert!(
        log.lines()
            .filter(|l| l.contains("Violation"))
            .all(|l| l.contains("app")),
        "{log}"
    );
}
