//! `roundtable service install | uninstall | status`: Roundtable as a systemd service. The
//! unit runs `roundtable serve` as a `Type=notify` service (READY, WATCHDOG and STOPPING come
//! from `server/systemd.rs`), restarts it on failure, and confines it: no new privileges, the
//! file system read-only except the instance directory, a private `/tmp`.
//!
//! A user unit (default) goes to `$XDG_CONFIG_HOME/systemd/user/` (`~/.config/systemd/user/`);
//! a system unit (`--system`) to `/etc/systemd/system/`, running as the installing user.
//! `--dry-run` prints the unit instead. `systemctl` is asked to reload (and, on uninstall, to
//! stop and disable) when it is there; its absence or failure is reported, not fatal.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{CliError, CliResult};

/// The unit's file name.
pub const UNIT_NAME: &str = "roundtable.service";

/// Which service manager the unit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The user's own manager (`systemctl --user`).
    User,
    /// The system manager (`systemctl`, needs root to install).
    System,
}

/// What `service install` writes.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// User or system unit.
    pub scope: Scope,
    /// Print the unit instead of writing it.
    pub dry_run: bool,
    /// Config file for `serve --config` (made absolute).
    pub config: Option<PathBuf>,
    /// Instance directory (default `~/.roundtable`); the only writable path.
    pub instance_dir: Option<PathBuf>,
    /// Seconds systemd waits for a watchdog ping (`WatchdogSec=`).
    pub watchdog_secs: u32,
}

/// `roundtable service install`.
pub fn install(options: &InstallOptions) -> CliResult {
    let binary = std::env::current_exe()
        .map_err(|e| CliError::new(format!("cannot find this binary's path: {e}")))?;
    let instance_dir = match &options.instance_dir {
        Some(dir) => absolute(dir)?,
        // The same default as `serve`'s.
        None => std::env::home_dir()
            .map(|home| home.join(".roundtable"))
            .ok_or_else(|| CliError::new("no home directory; pass --instance-dir"))?,
    };
    let config = options.config.as_deref().map(absolute).transpose()?;
    let user = (options.scope == Scope::System)
        .then(current_user_name)
        .flatten();
    unit_safe("this binary's path", &binary)?;
    if binary.to_string_lossy().contains(['"', '\'', '\\']) {
        return Err(CliError::new(format!(
            "this binary's path {}: systemd refuses to run an executable whose path holds a \
             quote or a backslash; install the binary elsewhere",
            binary.display()
        )));
    }
    unit_safe("--instance-dir", &instance_dir)?;
    if let Some(config) = &config {
        unit_safe("--config", config)?;
    }
    if let Some(user) = &user {
        unit_safe("the user name", Path::new(user))?;
    }
    let text = unit_text(&UnitSpec {
        binary: &binary,
        instance_dir: &instance_dir,
        config: config.as_deref(),
        scope: options.scope,
        user: user.as_deref(),
        watchdog_secs: options.watchdog_secs,
    });
    if options.dry_run {
        print!("{text}");
        return Ok(());
    }
    // Private (0700) like every instance directory Roundtable creates.
    roundtable_actors::storage::durable::create_dir_durable(&instance_dir)
        .map_err(|e| CliError::new(format!("cannot create the instance directory {e}")))?;
    let path = unit_path(options.scope)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    roundtable_actors::storage::durable::write_atomic(&path, text.as_bytes())
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))?;
    println!("wrote {}", path.display());
    systemctl(options.scope, &["daemon-reload"]);
    let flag = scope_flag(options.scope);
    println!(
        "start it now and at every login / boot with: systemctl{flag} enable --now roundtable"
    );
    println!("logs: journalctl{flag} -u roundtable");
    Ok(())
}

/// `roundtable service uninstall`: stops and disables the unit when systemctl can, then
/// removes its file.
pub fn uninstall(scope: Scope) -> CliResult {
    let path = unit_path(scope)?;
    if !path.exists() {
        return Err(CliError::new(format!(
            "no unit to remove at {}",
            path.display()
        )));
    }
    systemctl(scope, &["disable", "--now", UNIT_NAME]);
    std::fs::remove_file(&path)
        .map_err(|e| CliError::new(format!("cannot remove {}: {e}", path.display())))?;
    println!("removed {}", path.display());
    systemctl(scope, &["daemon-reload"]);
    Ok(())
}

/// `roundtable service status`: where the unit is and what systemd says of it.
pub fn status(scope: Scope) -> CliResult {
    let path = unit_path(scope)?;
    if !path.exists() {
        return Err(CliError::new(format!(
            "not installed (no {}); install it with `roundtable service install{}`",
            path.display(),
            if scope == Scope::System {
                " --system"
            } else {
                ""
            }
        )));
    }
    println!("unit: {}", path.display());
    let mut cmd = Command::new("systemctl");
    if scope == Scope::User {
        cmd.arg("--user");
    }
    cmd.args([
        "show",
        UNIT_NAME,
        "--property=LoadState,ActiveState,SubState,MainPID,NRestarts",
    ]);
    match cmd.output() {
        Ok(out) if out.status.success() => {
            print!("{}", String::from_utf8_lossy(&out.stdout));
            Ok(())
        }
        Ok(out) => Err(CliError::new(format!(
            "systemctl cannot tell: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(e) => Err(CliError::new(format!("systemctl cannot tell: {e}"))),
    }
}

/// What the unit text is built from.
pub struct UnitSpec<'a> {
    /// The `roundtable` binary.
    pub binary: &'a Path,
    /// The instance directory (writable, and `--instance-dir`).
    pub instance_dir: &'a Path,
    /// `--config`, when given.
    pub config: Option<&'a Path>,
    /// User or system unit.
    pub scope: Scope,
    /// `User=` of a system unit.
    pub user: Option<&'a str>,
    /// `WatchdogSec=`.
    pub watchdog_secs: u32,
}

/// Refuses a value that cannot be written into a unit file as it is: one with a control
/// character (a newline would start a new setting: `ExecStartPre=`, `User=`), or one that is
/// not UTF-8 (the unit would name another path). The error names the option.
pub fn unit_safe(option: &str, path: &Path) -> CliResult {
    let Some(text) = path.to_str() else {
        return Err(CliError::new(format!(
            "{option} {}: the path is not valid UTF-8; a systemd unit cannot name it",
            path.display()
        )));
    };
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(CliError::new(format!(
            "{option} {text:?}: the path holds the control character {c:?}; a systemd unit \
             cannot hold one (a newline would start a new setting)"
        )));
    }
    Ok(())
}

/// The unit file. Its values must have passed [`unit_safe`].
pub fn unit_text(spec: &UnitSpec<'_>) -> String {
    let mut exec = format!(
        "{} serve --instance-dir {}",
        path_word(spec.binary),
        exec_argument(spec.instance_dir)
    );
    if let Some(config) = spec.config {
        let _ = write!(exec, " --config {}", exec_argument(config));
    }
    let mut unit = String::new();
    let _ = writeln!(
        unit,
        "# Written by `roundtable service install`; `roundtable service uninstall` removes it."
    );
    unit.push_str("[Unit]\nDescription=Roundtable conversation server\n");
    unit.push_str("After=network.target\n\n[Service]\n");
    unit.push_str("Type=notify\nNotifyAccess=main\n");
    let _ = writeln!(unit, "ExecStart={exec}");
    if let Some(user) = spec.user {
        let _ = writeln!(unit, "User={}", user.replace('%', "%%"));
    }
    unit.push_str("Restart=on-failure\nRestartSec=2\n");
    // The `restart` RPC exits with this code under systemd: the unit restarts whatever
    // `Restart=` says (src/server/restart.rs).
    let _ = writeln!(
        unit,
        "RestartForceExitStatus={}",
        crate::server::restart::RESTART_EXIT_CODE
    );
    let _ = writeln!(unit, "WatchdogSec={}", spec.watchdog_secs);
    unit.push_str("TimeoutStopSec=30\n");
    unit.push_str("# Hardening: a local service that writes only its instance directory.\n");
    unit.push_str("NoNewPrivileges=yes\nProtectSystem=strict\nPrivateTmp=yes\n");
    let _ = writeln!(unit, "ReadWritePaths={}", path_word(spec.instance_dir));
    unit.push_str("UMask=0077\nLockPersonality=yes\nRestrictSUIDSGID=yes\n");
    unit.push_str("RestrictRealtime=yes\nSystemCallArchitectures=native\n\n");
    let target = match spec.scope {
        Scope::User => "default.target",
        Scope::System => "multi-user.target",
    };
    let _ = writeln!(unit, "[Install]\nWantedBy={target}");
    unit
}

/// A path as an argument of `ExecStart=` (systemd.service(5), "Command lines"): `%` doubled
/// (specifiers are expanded in every setting), `$` doubled (`$VAR` and `${VAR}` are expanded
/// in arguments), and double-quoted with `\\` and `\"` escaped when it has whitespace,
/// quotes, backslashes or `;` (a lone `;` word would separate commands).
fn exec_argument(path: &Path) -> String {
    quoted(&path.display().to_string().replace('$', "$$"))
}

/// A path as `ExecStart=`'s executable or an entry of a space-separated path list
/// (`ReadWritePaths=`, systemd.exec(5)): `%` doubled and quoted as in [`exec_argument`], but
/// `$` kept (neither expands variables, so `$$` would stay two dollars).
fn path_word(path: &Path) -> String {
    quoted(&path.display().to_string())
}

/// `text` with `%` doubled, double-quoted (escaping `\\` and `\"`) when it needs to be.
fn quoted(text: &str) -> String {
    let text = text.replace('%', "%%");
    if text.contains(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';')) {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        text
    }
}

/// Where the unit file goes.
pub fn unit_path(scope: Scope) -> CliResult<PathBuf> {
    Ok(match scope {
        Scope::System => PathBuf::from("/etc/systemd/system").join(UNIT_NAME),
        Scope::User => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::home_dir().map(|h| h.join(".config")))
                .ok_or_else(|| CliError::new("no home directory for the user unit"))?;
            config.join("systemd/user").join(UNIT_NAME)
        }
    })
}

/// ` --user` for user units (as the user types it after `systemctl`).
fn scope_flag(scope: Scope) -> &'static str {
    match scope {
        Scope::User => " --user",
        Scope::System => "",
    }
}

/// Runs `systemctl [--user] args`; says what happened when it cannot.
fn systemctl(scope: Scope, args: &[&str]) {
    let mut cmd = Command::new("systemctl");
    if scope == Scope::User {
        cmd.arg("--user");
    }
    cmd.args(args);
    let shown = format!("systemctl{} {}", scope_flag(scope), args.join(" "));
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "note: `{shown}` failed: {} (run it yourself once systemd is running)",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("note: could not run `{shown}`: {e}"),
    }
}

/// `path` made absolute against the current directory (the unit runs elsewhere).
fn absolute(path: &Path) -> CliResult<PathBuf> {
    std::path::absolute(path)
        .map_err(|e| CliError::new(format!("cannot resolve {}: {e}", path.display())))
}

/// The name of the user running this, for `User=` of a system unit.
fn current_user_name() -> Option<String> {
    // SAFETY: getuid has no preconditions and cannot fail.
    user_name(unsafe { libc::getuid() }, 1024)
}

/// The login name of `uid` (`None`: no such user, or not UTF-8), read with the reentrant
/// `getpwuid_r` (`getpwuid` returns static storage another thread's call may overwrite)
/// into a buffer of `buffer_len` bytes to start with, doubled while the entry does not fit
/// (`ERANGE`), up to 1 MiB.
fn user_name(uid: libc::uid_t, buffer_len: usize) -> Option<String> {
    const MAX_BUFFER: usize = 1 << 20;
    let mut buffer = vec![0u8; buffer_len.max(1)];
    loop {
        // SAFETY: `passwd` is plain data getpwuid_r fills in; `buffer` outlives every use of
        // the pointers it writes into `passwd` (they point into `buffer`), and its length is
        // the one passed.
        let mut passwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let code = unsafe {
            libc::getpwuid_r(
                uid,
                &mut passwd,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut found,
            )
        };
        if code == libc::ERANGE && buffer.len() < MAX_BUFFER {
            let doubled = buffer.len() * 2;
            buffer.resize(doubled, 0);
            continue;
        }
        if code != 0 || found.is_null() || passwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buffer`.
        let name = unsafe { std::ffi::CStr::from_ptr(passwd.pw_name) };
        return name.to_str().ok().map(str::to_owned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running user's name is read whatever buffer it starts with: one byte is always too
    /// small (`ERANGE`), and the buffer grows until the entry fits; the same name as `id -un`.
    #[test]
    fn user_name_grows_its_buffer() {
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let expected = String::from_utf8(id.stdout).unwrap().trim().to_string();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        assert_eq!(user_name(uid, 1).as_deref(), Some(expected.as_str()));
        assert_eq!(current_user_name().as_deref(), Some(expected.as_str()));
        // No user has this id: none, not an error.
        assert_eq!(user_name(libc::uid_t::MAX - 7, 1), None);
    }

    /// Paths with spaces, `%` and `$` survive systemd's parsing; the unit names the instance
    /// dir as the one writable path.
    #[test]
    fn unit_quotes_paths_and_confines_writes() {
        let text = unit_text(&UnitSpec {
            binary: Path::new("/opt/my tools/roundtable"),
            instance_dir: Path::new("/home/a/100%/$rt"),
            config: Some(Path::new("/etc/rt.toml")),
            scope: Scope::System,
            user: Some("alice"),
            watchdog_secs: 30,
        });
        assert!(
            text.contains(
                "ExecStart=\"/opt/my tools/roundtable\" serve --instance-dir /home/a/100%%/$$rt \
                 --config /etc/rt.toml\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("ReadWritePaths=/home/a/100%%/$rt\n"),
            "{text}"
        );
        assert!(text.contains("User=alice\n") && text.contains("WantedBy=multi-user.target"));
        for line in [
            "Type=notify",
            "Restart=on-failure",
            "RestartForceExitStatus=75",
            "WatchdogSec=30",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
