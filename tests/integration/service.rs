//! Running as a service, through the real binary: the config file (precedence, errors with
//! line and key, `config show` / `config init`), the systemd notify protocol against a real
//! unix datagram socket standing in for systemd, journald-style log lines, the unit written by
//! `service install` (checked with `systemd-analyze verify`), shell completions and the man
//! page.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::harness::*;

/// Runs the binary with `args` and extra environment (the developer's config-related
/// variables removed); returns its output.
fn roundtable(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("ROUNDTABLE_CONFIG")
        .env_remove("ROUNDTABLE_PROVIDER")
        .env_remove("ROUNDTABLE_PORT")
        .env_remove("ROUNDTABLE_HOME")
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

/// Flags beat the environment, which beats the file, which beats the defaults; `config show`
/// says which gave each value (a file value with its line).
#[test]
fn config_precedence_and_show() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rt.toml");
    std::fs::write(
        &file,
        "# test\nport = 5000\nprovider = \"builtin\"\nidle-timeout = 7.5\nhost = [\"127.0.0.1\"]\n",
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let out = roundtable(
        &["config", "show", "--config", config, "--port", "6000"],
        &[("ROUNDTABLE_PROVIDER", "openai")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = text(&out.stdout);
    assert!(
        shown(&out, "port").starts_with("port = 6000 ") && shown(&out, "port").ends_with("# flag")
    );
    assert!(shown(&out, "provider").contains("\"openai\""), "{out}");
    assert!(shown(&out, "provider").ends_with("# environment $ROUNDTABLE_PROVIDER"));
    assert!(shown(&out, "idle-timeout").contains("7.5"), "{out}");
    assert!(
        shown(&out, "idle-timeout").ends_with(&format!("# {config}:4")),
        "{out}"
    );
    assert!(
        shown(&out, "host").ends_with(&format!("# {config}:5")),
        "{out}"
    );
    assert!(
        shown(&out, "max-iterations").ends_with("# default"),
        "{out}"
    );
}

/// Whether `path` on the server is the echo endpoint (the protocol endpoint drops a frame that
/// is not an envelope; the echo endpoint sends it back).
fn echoes(port: u16, path: &str) -> bool {
    let mut ws = try_upgrade(port, path, &[]).unwrap_or_else(|code| panic!("upgrade: {code}"));
    ws.send_text(r#"{"echo":1}"#);
    ws.read_frame(WAIT) == Some(json!({"echo": 1}))
}

/// A running server takes its settings from the instance directory's `roundtable.toml`
/// without a flag, and from `--config` when given (here: the echo endpoint's path).
#[test]
fn serve_reads_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("roundtable.toml"),
        "echo-path = \"/from-instance\"\n",
    )
    .unwrap();
    let server = Server::start_in(dir.path(), &[]);
    assert!(echoes(server.port, "/from-instance"));
    drop(server);

    let other = tempfile::tempdir().unwrap();
    let file = other.path().join("explicit.toml");
    std::fs::write(&file, "echo-path = \"/from-flag-file\"\n").unwrap();
    let server = Server::start_in(dir.path(), &["--config", file.to_str().unwrap()]);
    assert!(echoes(server.port, "/from-flag-file"));
}

/// Unknown keys, wrong types and out-of-range values stop `serve` (exit 2) with the file, the
/// line and the key; a missing `--config` file too. An instance's own file may not move the
/// instance.
#[test]
fn config_errors_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let instance = dir.path().join("instance");
    let cases = [
        (
            "port = 9001\nbogus = 1\n",
            "line 2, column 1",
            "unknown field `bogus`",
        ),
        ("port = \"x\"\n", "line 1, column 8", "expected u16"),
        (
            "port = 9001\n\nidle-timeout = -5\n",
            "line 3, key `idle-timeout`",
            "must be a non-negative number of seconds",
        ),
        (
            "port = 9001\n[mcp.servers.a]\nargs = []\n",
            "[mcp.servers.a]",
            "needs `command` (stdio) or `url` (Streamable HTTP)",
        ),
    ];
    for (body, place, what) in cases {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, body).unwrap();
        let out = roundtable(
            &[
                "serve",
                "--port",
                "0",
                "--instance-dir",
                instance.to_str().unwrap(),
                "--config",
                file.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{body}");
        let err = text(&out.stderr);
        assert!(
            err.contains(file.to_str().unwrap()) && err.contains(place) && err.contains(what),
            "{body}: {err}"
        );
    }
    let missing = dir.path().join("missing.toml");
    let out = roundtable(&["serve", "--config", missing.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("missing.toml"),
        "{}",
        text(&out.stderr)
    );

    std::fs::create_dir_all(&instance).unwrap();
    std::fs::write(
        instance.join("roundtable.toml"),
        "instance-dir = \"/elsewhere\"\n",
    )
    .unwrap();
    let out = roundtable(
        &["serve", "--instance-dir", instance.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`instance-dir` cannot be set"),
        "{}",
        text(&out.stderr)
    );
}

/// `config init` writes every key at its default (so `config show` reports them from the
/// file), privately, and refuses to replace a file without `--force`.
#[test]
fn config_init_writes_every_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sub/rt.toml");
    let path = file.to_str().unwrap();
    let out = roundtable(&["config", "init", "--config", path], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let out = roundtable(&["config", "show", "--config", path], &[]);
    let out = text(&out.stdout);
    assert!(
        shown(&out, "idle-timeout").starts_with("idle-timeout = 300.0 "),
        "{out}"
    );
    assert!(
        shown(&out, "idle-timeout").contains(&format!("# {path}:")),
        "{out}"
    );
    assert!(shown(&out, "token").ends_with("# default"), "{out}");
    let again = roundtable(&["config", "init", "--config", path], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("pass --force"));
    assert!(
        roundtable(&["config", "init", "--config", path, "--force"], &[])
            .status
            .success()
    );
}

/// Reads datagrams from the stand-in for systemd until one contains `want`, failing after
/// [`WAIT`]. Returns every message read.
fn until_notified(socket: &UnixDatagram, want: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(deadline - Instant::now()))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = msg.lines().any(|l| l == want);
                seen.push(msg);
                if done {
                    return;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break
            }
            Err(e) => panic!("notify socket: {e}"),
        }
    }
    panic!("no {want} from the server; got {seen:?}");
}

/// With NOTIFY_SOCKET and WATCHDOG_USEC set, `serve` says READY=1 once it listens, pings
/// WATCHDOG=1 while alive, and says STOPPING=1 when asked to stop.
#[test]
fn systemd_notify_ready_watchdog_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let server = Server::start_env(
        &[],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let mut seen = Vec::new();
    until_notified(&socket, "READY=1", &mut seen);
    assert!(
        seen[0].contains(&format!("STATUS=listening on port {}", server.port)),
        "{seen:?}"
    );
    until_notified(&socket, "WATCHDOG=1", &mut seen);
    until_notified(&socket, "WATCHDOG=1", &mut seen);
    // A clean stop (the shutdown RPC; SIGTERM takes the same path): STOPPING=1 on the way out.
    assert!(server.shutdown().success());
    until_notified(&socket, "STOPPING=1", &mut seen);
}

/// Under systemd (`NOTIFY_SOCKET`), `restart` leaves the restart to the unit: a clean stop,
/// then exit code 75, which the unit lists in `RestartForceExitStatus=`.
#[test]
fn restart_under_systemd_exits_for_the_unit_to_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let mut server = Server::start_env(&[], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let mut seen = Vec::new();
    until_notified(&socket, "READY=1", &mut seen);
    let mut c = server.connect();
    assert_eq!(c.agent("restart", json!([])), Ok(Value::Null));
    assert_eq!(c.wait_close(), 1012);
    until_notified(&socket, "STOPPING=1", &mut seen);
    assert_eq!(server.wait_exit().code(), Some(75));
    assert!(server
        .log()
        .contains("restart: exiting with 75 for systemd to restart the unit"));
}

/// A wedged writer stops the pings: with every log-writer batch delayed past the watchdog's
/// half interval, the server says why it does not ping and systemd never hears WATCHDOG=1.
#[test]
fn systemd_watchdog_is_silent_while_the_writer_is_stuck() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let server = Server::start_env(
        &[],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
            ("ROUNDTABLE_TEST_WRITER_DELAY_MS", "2000"),
        ],
    );
    let mut seen = Vec::new();
    until_notified(&socket, "READY=1", &mut seen);
    server.wait_log("systemd watchdog: not pinging: the log writer did not run a job");
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(!seen.iter().any(|m| m.contains("WATCHDOG=1")), "{seen:?}");
    server.kill();
}

/// Under systemd (stderr is the stream JOURNAL_STREAM names) each line is `<N>target: text`,
/// with journald's priority and no timestamp; with another stream named, lines are as usual.
#[test]
fn journald_lines_when_stderr_is_the_journal() {
    for matching in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("stderr.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let meta = log.metadata().unwrap();
        let stream = if matching {
            format!("{}:{}", meta.dev(), meta.ino())
        } else {
            format!("{}:{}", meta.dev(), meta.ino() + 1)
        };
        let mut child = crate::support::server::serve_command(
            Path::new(binary()),
            &dir.path().join("instance"),
            &[],
        )
        .env("RUST_LOG", "info")
        .env("JOURNAL_STREAM", &stream)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
        let mut text = String::new();
        eventually("the listening line", || {
            text.clear();
            std::fs::File::open(&log_path)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text.contains("listening on ws://")
        });
        let _ = child.kill();
        let _ = child.wait();
        let line = text
            .lines()
            .find(|l| l.contains("listening on ws://"))
            .unwrap();
        if matching {
            assert!(
                line.starts_with("<6>roundtable::server: roundtable "),
                "{line}"
            );
        } else {
            assert!(line.starts_with("[20"), "env_logger's own format: {line}");
        }
    }
}

/// `service install` writes a unit systemd accepts (`systemd-analyze verify`, no warnings):
/// Type=notify, restart on failure, watchdog, hardening, the instance dir the only writable
/// path; `--dry-run` prints it; `uninstall` removes it; `status` says where it is.
#[test]
fn service_unit_is_valid_and_confined() {
    let dir = tempfile::tempdir().unwrap();
    let config_home = dir.path().join("config");
    let instance = dir.path().join("inst");
    let env = [("XDG_CONFIG_HOME", config_home.to_str().unwrap())];
    let dry = roundtable(
        &[
            "service",
            "install",
            "--dry-run",
            "--instance-dir",
            instance.to_str().unwrap(),
        ],
        &env,
    );
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let unit_text = text(&dry.stdout);
    for line in [
        "Type=notify",
        "Restart=on-failure",
        "WatchdogSec=30",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        &format!("ReadWritePaths={}", instance.display()),
        &format!(
            "ExecStart={} serve --instance-dir {}",
            binary(),
            instance.display()
        ),
    ] {
        assert!(
            unit_text.lines().any(|l| l == line),
            "{line} missing:\n{unit_text}"
        );
    }
    let unit = config_home.join("systemd/user/roundtable.service");
    assert!(!unit.exists(), "--dry-run writes nothing");

    let out = roundtable(
        &[
            "service",
            "install",
            "--instance-dir",
            instance.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&unit).unwrap(), unit_text);
    assert!(instance.is_dir());
    // systemd's own parser: exit 0 and not one warning. CI installs Debian's systemd package
    // for it; elsewhere the check is skipped, listed with the run's skipped tests.
    match Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
    {
        Ok(verify) => {
            let said = format!("{}{}", text(&verify.stdout), text(&verify.stderr));
            assert!(
                verify.status.success() && said.trim().is_empty(),
                "systemd-analyze verify: {said}"
            );
        }
        Err(e) => skip(&format!(
            "the systemd-analyze verify check: cannot run it ({e}; install Debian's systemd \
             package, as .ci/run does)"
        )),
    }

    // A system unit runs as the installing user and is wanted by multi-user.target.
    let system = roundtable(&["service", "install", "--system", "--dry-run"], &env);
    let system = text(&system.stdout);
    assert!(
        system.contains("\nUser=") && system.contains("WantedBy=multi-user.target"),
        "{system}"
    );

    let status = roundtable(&["service", "status"], &env);
    assert!(text(&status.stdout).contains(&format!("unit: {}", unit.display())));
    let out = roundtable(&["service", "uninstall"], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!unit.exists());
    let status = roundtable(&["service", "status"], &env);
    assert_eq!(status.status.code(), Some(1));
    assert!(
        text(&status.stderr).contains("not installed"),
        "{}",
        text(&status.stderr)
    );
}

/// Completions for bash, zsh and fish and the man page come from the clap definitions.
#[test]
fn completions_and_man_page() {
    for (shell, marker) in [
        ("bash", "_roundtable()"),
        ("zsh", "#compdef roundtable"),
        ("fish", "complete -c roundtable"),
    ] {
        let out = roundtable(&["completions", shell], &[]);
        assert!(out.status.success());
        let script = text(&out.stdout);
        assert!(
            script.contains(marker) && script.contains("serve"),
            "{shell}: {script}"
        );
    }
    let out = roundtable(&["man"], &[]);
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH roundtable"),
        "{page}"
    );
    assert!(page.contains("serve") && page.contains("service"), "{page}");
}
