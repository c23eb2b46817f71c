//! The operator's and client's side of security (issue 25, findings 8–12), through the real
//! binary: restore takes only the conversations unless told otherwise, never a token, and
//! refuses what it has no room or bound for, leaving nothing half-written; client commands
//! take their token from a file or the environment, never the command line; `service
//! install` writes hostile paths so systemd reads them back verbatim and refuses control
//! characters; credentials in URLs are never shown; instance directories are private and
//! secrets readable by others are warned about.

use std::fs;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::harness::*;

/// Runs `roundtable <args>` with `envs`, the developer's address and token variables
/// removed.
fn roundtable(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("ROUNDTABLE_PORT")
        .env_remove("ROUNDTABLE_TOKEN")
        .env_remove("ROUNDTABLE_CONFIG")
        .env_remove("ROUNDTABLE_HOME")
        .env("RUST_LOG", "warn")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run roundtable")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes `text` to `path` with `mode`.
fn write_mode(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// An archive in the backup format, gzip-compressed: a manifest claiming `claimed` (files,
/// bytes), then `entries` (path under `instance/`, size, content byte repeated), then an end
/// record with what they really hold. A large entry of one repeated byte compresses to almost
/// nothing: the shape of an archive that expands without bound.
fn archive(claimed: (u64, u64), entries: &[(&str, u64, u8)]) -> Vec<u8> {
    let manifest = json!({"format": 1, "layoutVersion": 2, "roundtableVersion": "0.1.0",
        "snapshotAt": "2030-01-01T00:00:00.000Z", "snapshotMillis": 0, "writersHeldMicros": 0,
        "files": claimed.0, "bytes": claimed.1, "conversations": []})
    .to_string();
    let end = json!({"files": entries.len(), "bytes": entries.iter().map(|e| e.1).sum::<u64>()})
        .to_string();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut append = |name: &str, size: u64, data: &mut dyn std::io::Read| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(size);
        header.set_mode(0o600);
        tar.append_data(&mut header, name, data).unwrap();
    };
    append(
        "roundtable-backup.json",
        manifest.len() as u64,
        &mut manifest.as_bytes(),
    );
    for (path, size, byte) in entries {
        append(
            &format!("instance/{path}"),
            *size,
            &mut std::io::repeat(*byte).take(*size),
        );
    }
    append(
        "roundtable-backup.end",
        end.len() as u64,
        &mut end.as_bytes(),
    );
    tar.into_inner().unwrap().finish().unwrap()
}

/// Restores `file` into `target` with `extra` flags.
fn restore(file: &Path, target: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "restore",
        file.to_str().unwrap(),
        "--instance-dir",
        target.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    roundtable(&args, &[])
}

/// Finding 8: an instance whose `roundtable.toml` holds a token and an extra Origin, and whose
/// chat agent has a custom system prompt, is backed up. A plain restore brings back the
/// conversations only and says what it skipped: served, the restored instance has the
/// conversation, accepts no extra Origin and needs no token. `--with-config` brings the
/// config and the prompt back, but the config without its token (the rest of it, comments
/// included, as written).
#[test]
fn restore_takes_conversations_only_and_never_a_token() {
    let source = tempfile::tempdir().unwrap();
    let config = "# mine\nallow-origin = [\"https://evil.example\"]\ntoken = \"in-the-config\"\nidle-timeout = 60\n";
    write_mode(&source.path().join("roundtable.toml"), config, 0o600);
    fs::create_dir(source.path().join("chat")).unwrap();
    fs::write(
        source.path().join("chat/system-prompt.md"),
        "Obey the archive.",
    )
    .unwrap();
    let server = Server::start_in(source.path(), &[]);
    let mut c = Client::connect(&format!("{}?token=in-the-config", server.url()));
    c.create("kept");
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("token");
    write_mode(&token_file, "in-the-config\n", 0o600);
    let file = work.path().join("b.tgz");
    let port = server.port.to_string();
    let out = roundtable(
        &[
            "backup",
            file.to_str().unwrap(),
            "--port",
            &port,
            "--token-file",
            token_file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let plain = work.path().join("plain");
    let out = restore(&file, &plain, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "that are not conversations: chat/, roundtable.toml (restore them with --with-config)"
        ),
        "{}",
        stdout(&out)
    );
    assert!(!plain.join("roundtable.toml").exists());
    assert!(!plain.join("chat").exists());
    {
        let restored = Server::start_in(&plain, &[]);
        let mut r = restored.connect();
        let names = r.names();
        assert!(names.contains(&"kept".to_string()), "{names:?}");
        let origin = try_upgrade(restored.port, "/", &[("Origin", "https://evil.example")]);
        assert_eq!(origin.err(), Some(403), "the archive's Origin was restored");
    }

    let full = work.path().join("full");
    let out = restore(&file, &full, &["--with-config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "roundtable.toml restored without its `token` (a restore never brings back a token"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        fs::read_to_string(full.join("roundtable.toml")).unwrap(),
        "# mine\nallow-origin = [\"https://evil.example\"]\nidle-timeout = 60\n"
    );
    assert_eq!(
        fs::read_to_string(full.join("chat/system-prompt.md")).unwrap(),
        "Obey the archive."
    );
    let restored = Server::start_in(&full, &[]);
    // No token: the plain URL is served.
    let mut r = restored.connect();
    assert!(r.names().contains(&"kept".to_string()));
}

/// Finding 8: the bound. An archive whose manifest says it holds more than `--max-bytes` is
/// refused before anything is read past the manifest; one whose entry holds more than its
/// manifest says is refused at that entry's header (a 64 MiB entry in a small .tgz behind a
/// manifest of 100 bytes); one that claims more than the file system has free is refused on
/// its manifest. Each time the exact reason, and no directory is created.
#[test]
fn restore_is_bounded_and_checks_free_space_before_writing() {
    let work = tempfile::tempdir().unwrap();
    let big = 64 << 20;
    let file = work.path().join("big.tgz");
    fs::write(&file, archive((1, big), &[("conversations/big", big, 0)])).unwrap();
    assert!(fs::metadata(&file).unwrap().len() < 1 << 20, "compressible");
    let target = work.path().join("t");
    let out = restore(&file, &target, &["--max-bytes", "1M"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{}: it would restore {big} bytes, more than --max-bytes 1048576; nothing was written",
            file.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());

    let lying = work.path().join("lying.tgz");
    fs::write(&lying, archive((1, 100), &[("conversations/big", big, 0)])).unwrap();
    let out = restore(&lying, &target, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "entry \"conversations/big\" ({big} bytes) goes past the 100 bytes its manifest says the archive holds; nothing was written"
        )),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());

    let claims = work.path().join("claims.tgz");
    fs::write(&claims, archive((1, 1 << 62), &[])).unwrap();
    let out = restore(&claims, &target, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "not enough free space for it in {}: it needs ",
            target.display()
        )) && err.contains(&format!("({} bytes in 1 files, plus", 1u64 << 62))
            && err.contains("bytes free; nothing was written"),
        "{err}"
    );
    assert!(!target.exists());
}

/// Finding 8, for real: a tiny tmpfs. An honest archive larger than its free space is
/// refused before anything is written; one that fits is restored. Needs mount permission:
/// skipped outside CI where the machine refuses, never under CI.
#[test]
fn restore_refuses_an_archive_larger_than_the_free_space_of_a_tmpfs() {
    let mount_point = tempfile::tempdir().unwrap();
    let mut mount = Command::new("mount");
    mount
        .args(["-t", "tmpfs", "-o", "size=24m", "roundtable-restore-test"])
        .arg(mount_point.path());
    if !machine_allows(&mut mount, "mount a tmpfs here") {
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(mount_point.path());
    let work = tempfile::tempdir().unwrap();
    let big = 32 << 20;
    let file = work.path().join("big.tgz");
    fs::write(
        &file,
        archive((1, big), &[("conversations/big", big, b'x')]),
    )
    .unwrap();
    let target = mount_point.path().join("instance");
    let out = restore(&file, &target, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "not enough free space for it in {}: it needs {} bytes ({big} bytes in 1 files, plus 16777216 bytes kept free)",
            target.display(),
            big + 4096 + (16 << 20)
        )),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());
    let small = 1 << 20;
    let file = work.path().join("small.tgz");
    fs::write(
        &file,
        archive((1, small), &[("conversations/small", small, b'x')]),
    )
    .unwrap();
    let out = restore(&file, &target, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::metadata(target.join("conversations/small"))
            .unwrap()
            .len(),
        small
    );
}

/// Finding 8: a write that fails half-way (an entry whose directory is a file restored just
/// before it) leaves nothing: the directory the restore created is removed again, an empty
/// one it was given is emptied, and the error says so.
#[test]
fn a_restore_that_fails_half_way_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("clash.tgz");
    fs::write(
        &file,
        archive(
            (3, 30),
            &[
                ("FORMAT", 10, b'2'),
                ("conversations/a", 10, b'a'),
                ("conversations/a/b", 10, b'b'),
            ],
        ),
    )
    .unwrap();
    let target = work.path().join("new");
    let out = restore(&file, &target, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("restoring into {} failed: ", target.display()))
            && stderr(&out).contains("; nothing was kept (the directory was removed)"),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());
    let empty = work.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let out = restore(&file, &empty, &[]);
    assert!(
        stderr(&out).contains("; nothing was kept (the directory was emptied)"),
        "{}",
        stderr(&out)
    );
    let left: Vec<_> = fs::read_dir(&empty)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "roundtable.lock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Finding 9: a server with a token. Every client command takes it from `--token-file` or
/// `ROUNDTABLE_TOKEN` (sent as `Authorization: Bearer`, never on the command line); without
/// it the command fails and says how to give it.
#[test]
fn client_commands_take_the_token_from_a_file_or_the_environment() {
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("token");
    write_mode(&token_file, "t0ken-value\n", 0o600);
    let server = Server::start(&["--token-file", token_file.to_str().unwrap()]);
    let port = server.port.to_string();
    let with_file = [
        "--port",
        &port,
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    let env = [("ROUNDTABLE_TOKEN", "t0ken-value")];

    let out = roundtable(
        &[&["conversations", "create", "by-file"][..], &with_file].concat(),
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = roundtable(&["conversations", "list", "--port", &port], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("by-file"), "{}", stdout(&out));
    let out = roundtable(
        &[&["run", "request", "what is 2 + 3"][..], &with_file].concat(),
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains('5'), "{}", stdout(&out));
    let out = roundtable(&["server", "status", "--port", &port], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let file = work.path().join("b.tar");
    let out = roundtable(&["backup", file.to_str().unwrap(), "--port", &port], &env);
    assert!(out.status.success(), "{}", stderr(&out));

    for args in [
        vec!["conversations", "list", "--port", &port],
        vec!["server", "status", "--port", &port],
        vec!["run", "request", "hi", "--port", &port],
    ] {
        let out = roundtable(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains(&format!(
                "the Roundtable server at ws://127.0.0.1:{port}/ refused the connection (401 \
                 Unauthorized): it wants its token; pass --token-file FILE or set ROUNDTABLE_TOKEN"
            )),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = roundtable(&["backup", file.to_str().unwrap(), "--port", &port], &[]);
    assert!(stderr(&out).contains("refused the backup (401 Unauthorized)"));
    let wrong = roundtable(
        &["conversations", "list", "--port", &port],
        &[("ROUNDTABLE_TOKEN", "nope")],
    );
    assert_eq!(wrong.status.code(), Some(1));
    let missing = roundtable(
        &[
            "conversations",
            "list",
            "--port",
            &port,
            "--token-file",
            "/nonexistent/token",
        ],
        &[],
    );
    assert!(
        stderr(&missing).contains("--token-file /nonexistent/token: "),
        "{}",
        stderr(&missing)
    );
}

/// Finding 10: `service install` refuses a value with a control character (a newline would
/// add `ExecStartPre=` / `User=` lines), naming the option, and writes nothing.
#[test]
fn service_install_refuses_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let config_home = dir.path().join("config");
    let env = [("XDG_CONFIG_HOME", config_home.to_str().unwrap())];
    let hostile = format!(
        "{}/x.toml\nExecStartPre=/bin/touch /tmp/pwned\nUser=root",
        dir.path().display()
    );
    let out = roundtable(&["service", "install", "--config", &hostile], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "--config {hostile:?}: the path holds the control character '\\n'; a systemd unit cannot hold one"
        )),
        "{}",
        stderr(&out)
    );
    assert!(!config_home.join("systemd/user/roundtable.service").exists());
    let out = roundtable(
        &[
            "service",
            "install",
            "--dry-run",
            "--instance-dir",
            &format!("{}/a\tb", dir.path().display()),
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--instance-dir "), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
}

/// `%` specifiers (systemd.unit(5)) and, when `variables`, `$` variables (systemd.service(5))
/// of one unquoted word resolved the way systemd would, panicking on any that would expand:
/// `%%` and `$$` are one character each.
fn unexpanded(word: &str, variables: bool) -> String {
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        let expands = c == '%' || (variables && c == '$');
        if expands {
            match chars.next() {
                Some(next) if next == c => {}
                other => panic!("systemd would expand {c}{other:?} in {word:?}"),
            }
        }
        out.push(c);
    }
    out
}

/// The words of an `ExecStart=` command line or a path list as systemd reads them
/// (systemd.syntax(7): quoting and C escapes; then [`unexpanded`], with `$` variables in the
/// arguments of a command line only, not in its executable): what the service gets. Only
/// the forms `service install` writes.
fn systemd_words(line: &str, command_line: bool) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c == ' ' {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => word.push(chars.next().expect("an escaped character")),
                    c => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        let variables = command_line && !words.is_empty();
        words.push(unexpanded(&word, variables));
    }
    words
}

/// Finding 10: hostile paths (spaces, quotes, `$HOME`, `%h`, backslashes, `;`) in the
/// instance directory and the config, and a binary under a directory with spaces, `$HOME`,
/// `%h` and `;`: the unit passes `systemd-analyze verify` without a word (it also checks that
/// the executable it parsed exists, so the binary's path arrived verbatim), and each
/// `ExecStart` argument and `ReadWritePaths` read back as systemd reads them are the paths
/// given.
#[test]
fn service_unit_escapes_hostile_paths() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("my bin $HOME %h; x");
    fs::create_dir(&bin_dir).unwrap();
    let bin = bin_dir.join("roundtable");
    if fs::hard_link(binary(), &bin).is_err() {
        fs::copy(binary(), &bin).unwrap();
    }
    let hostile = dir
        .path()
        .join("in st \"q\" 's' $HOME ${USER} %h %% \\b ; end");
    let config = hostile.join("rt $X %n.toml");
    let config_home = dir.path().join("config");
    let out = Command::new(&bin)
        .args(["service", "install", "--instance-dir"])
        .arg(&hostile)
        .arg("--config")
        .arg(&config)
        .env("XDG_CONFIG_HOME", &config_home)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let unit = config_home.join("systemd/user/roundtable.service");
    let text = fs::read_to_string(&unit).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let words = systemd_words(exec, true);
    assert_eq!(words.len(), 6, "{exec}");
    assert_eq!(words[0], bin.to_str().unwrap(), "{exec}");
    assert_eq!(words[2], "--instance-dir");
    assert_eq!(words[3], hostile.to_str().unwrap(), "{exec}");
    assert_eq!(words[5], config.to_str().unwrap(), "{exec}");
    let paths = text
        .lines()
        .find_map(|l| l.strip_prefix("ReadWritePaths="))
        .expect("ReadWritePaths");
    // `$` is not expanded there: only `%%` is one character.
    let read = systemd_words(paths, false);
    assert_eq!(read, vec![hostile.to_str().unwrap().to_string()], "{paths}");
    assert!(text.lines().filter(|l| l.starts_with("ExecStart")).count() == 1);
    match Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
    {
        Ok(verify) => {
            let said = format!("{}{}", stdout(&verify), stderr(&verify));
            assert!(
                verify.status.success() && said.trim().is_empty(),
                "systemd-analyze verify:\n{said}\n{text}"
            );
        }
        Err(e) => skip(&format!(
            "the systemd-analyze verify check: cannot run it ({e}; install Debian's systemd \
             package, as .ci/run does)"
        )),
    }
    // The instance directory it created is private.
    assert_eq!(mode(&hostile), 0o700);
}

/// Finding 11: credentials in an MCP server's and the model's base URL, and a token in a
/// query, are never shown: not in `@system config` (every client of a conversation sees it),
/// not in `config show`, not in the server's log, not in a failed start's error.
#[test]
fn url_credentials_are_redacted_everywhere_they_are_shown() {
    // Not an MCP server: the session fails, and its errors must not show the URL's secrets.
    let tools = scripted(|_, _| (200, json!({"content": "ok"}).to_string()));
    let model = scripted(|_, _| {
        (
            200,
            completion(json!({"role": "assistant", "content": "hi"})),
        )
    });
    let with_creds =
        |url: &str, creds: &str| url.replacen("http://", &format!("http://{creds}@"), 1);
    let tool_url = format!(
        "{}?api_key=tool-key-secret",
        with_creds(&tools.url, "tooluser:tool-pass-secret")
    );
    let mcp_dir = tempfile::tempdir().unwrap();
    let mcp_json = mcp_dir.path().join("mcp.json");
    std::fs::write(
        &mcp_json,
        json!({"mcpServers": {"w": {"url": tool_url}}}).to_string(),
    )
    .unwrap();
    let mcp_json = mcp_json.to_str().unwrap();
    let model_url = with_creds(&model.url, "modeluser:model-pass-secret");
    let server = Server::start_env(
        &["--provider", "openai", "--mcp-config", mcp_json],
        &[
            ("ROUNDTABLE_OPENAI_BASE_URL", &model_url),
            ("ROUNDTABLE_OPENAI_MODEL", "m"),
        ],
    );
    let secrets = [
        "tool-pass-secret",
        "tool-key-secret",
        "model-pass-secret",
        "tooluser",
        "modeluser",
    ];
    server.wait_log("MCP server w: ");
    server.wait_log("; restarting in ");
    let (mut c, id) = server.joined("config");
    let shown = Client::texts(&c.run_turn(&id, "@system config")).join("\n");
    assert!(
        shown.contains("; Streamable HTTP: http://***@127.0.0.1:"),
        "{shown}"
    );
    assert!(shown.contains("?api_key=***"), "{shown}");
    let agents = Client::texts(&c.run_turn(&id, "@system config agents")).join("\n");
    let log = server.log();
    assert!(
        log.contains("MCP server w: starting (Streamable HTTP: http://***@127.0.0.1:"),
        "{log}"
    );
    assert!(log.contains("(m at http://***@127.0.0.1:"), "{log}");
    for secret in secrets {
        assert!(
            !shown.contains(secret),
            "@system config shows {secret}:\n{shown}"
        );
        assert!(
            !agents.contains(secret),
            "@system config agents shows {secret}:\n{agents}"
        );
        assert!(!log.contains(secret), "the log shows {secret}:\n{log}");
    }

    let dir = tempfile::tempdir().unwrap();
    let cluster = "nats://natsuser:nats-pass-secret@127.0.0.1:1";
    let out = roundtable(
        &[
            "config",
            "show",
            "--instance-dir",
            dir.path().to_str().unwrap(),
            "--mcp-config",
            mcp_json,
            "--cluster",
            cluster,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("mcp.servers.w = { url = \"http://***@127.0.0.1:"),
        "{shown}"
    );
    assert!(
        shown.contains("cluster = \"nats://***@127.0.0.1:1\""),
        "{shown}"
    );
    for secret in [
        "tool-pass-secret",
        "tool-key-secret",
        "nats-pass-secret",
        "natsuser",
    ] {
        assert!(
            !shown.contains(secret),
            "config show shows {secret}:\n{shown}"
        );
    }
    // A cluster that cannot be reached: the start fails, naming the URL without its secret.
    let out = roundtable(
        &[
            "serve",
            "--port",
            "0",
            "--instance-dir",
            dir.path().to_str().unwrap(),
            "--cluster",
            cluster,
            "--cluster-secret-file",
            crate::support::server::cluster_secret_file()
                .to_str()
                .unwrap(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("nats://***@127.0.0.1:1"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("nats-pass-secret"),
        "{}",
        stderr(&out)
    );
    // The client's own messages: a `?token=` in --url is not repeated.
    let out = roundtable(
        &[
            "conversations",
            "list",
            "--url",
            "ws://127.0.0.1:1/?token=url-token-secret",
        ],
        &[],
    );
    assert!(
        stderr(&out).contains("ws://127.0.0.1:1/?token=***"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("url-token-secret"));
}

/// Finding 12: every command that creates an instance directory makes it 0700 (`config
/// init`, `service install`, `restore`, `serve`), and a token file or a config holding a
/// token that others can read gets a warning naming it (serve and the client commands).
#[test]
fn instance_dirs_are_private_and_readable_secrets_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let init = dir.path().join("init/inst");
    let out = roundtable(
        &[
            "config",
            "init",
            "--config",
            init.join("roundtable.toml").to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&init), 0o700, "config init");
    let service = dir.path().join("service/inst");
    let out = roundtable(
        &[
            "service",
            "install",
            "--instance-dir",
            service.to_str().unwrap(),
        ],
        &[("XDG_CONFIG_HOME", dir.path().join("xdg").to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&service), 0o700, "service install");
    let served = dir.path().join("served/inst");
    let server = Server::start_in(&served, &[]);
    assert_eq!(mode(&served), 0o700, "serve");
    let archive_file = dir.path().join("b.tar");
    crate::backup::backup(server.port, &archive_file);
    let restored = dir.path().join("restored/inst");
    let out = restore(&archive_file, &restored, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&restored), 0o700, "restore");
    drop(server);

    // A token file others can read: serve and the client commands warn, naming it.
    let token = dir.path().join("token");
    write_mode(&token, "shared-token\n", 0o644);
    let server = Server::start(&["--token-file", token.to_str().unwrap()]);
    let warning = format!(
        "the token file {} is readable by other users (mode 644); whoever reads it can use the server: run chmod 600 {}",
        token.display(),
        token.display()
    );
    assert!(server.log().contains(&warning), "{}", server.log());
    let out = roundtable(
        &[
            "conversations",
            "list",
            "--port",
            &server.port.to_string(),
            "--token-file",
            token.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&warning), "{}", stderr(&out));
    drop(server);
    // A private one: no warning.
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start(&["--token-file", token.to_str().unwrap()]);
    assert!(
        !server.log().contains("readable by other users"),
        "{}",
        server.log()
    );
    drop(server);

    // A config holding the token itself: a warning to use a token file instead (and, since
    // this one is readable by others, that too).
    let instance = dir.path().join("with-token");
    fs::create_dir(&instance).unwrap();
    let config = instance.join("roundtable.toml");
    write_mode(&config, "token = \"in-config\"\n", 0o644);
    let server = Server::start_in(&instance, &[]);
    let log = server.log();
    assert!(
        log.contains(&format!(
            "config file {} holds the token (`token = …`)",
            config.display()
        )) && log.contains("name it with `token-file` instead"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "the config file {} is readable by other users (mode 644)",
            config.display()
        )),
        "{log}"
    );
}
