//! A stdio server's process: started with an allowlisted environment ([`INHERITED_VARIABLES`]
//! and its own `env`), its stdout read in bounded lines and handed to rmcp through a pipe once
//! [`super::wire`] has checked them, its stderr logged in bounded lines, and killed and waited
//! for when its connection ends ([`ServerProcess::stop`]), so no exited child stays a zombie.
//!
//! Why a reader of our own in front of rmcp's: rmcp drops a line it cannot parse (too deep
//! for serde_json) or that passes its bound, and the request it answered then waits for its
//! time-out, or for ever for `tools/list`; here such an answer becomes an error answer at once
//! (or, for a `tools/list` page, a page without the offending tools), and the reader's own
//! line bound is [`MAX_LINE_BYTES`], the same as rmcp's and the HTTP transport's.
//!
//! Who talks to it: the supervisor ([`super::server`]) spawns and stops the process; the two
//! reader tasks run on the MCP thread's runtime for the process's life.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::wire::{self, Scanner};

/// Largest message (one line) read from a server's stdout: rmcp's own bound, and the HTTP
/// transport's. An answer past it becomes an error answer; anything else past it is dropped.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Variables of Roundtable's environment a stdio server inherits, besides its own `env`: the
/// official MCP SDKs' list (HOME, LOGNAME, PATH, SHELL, TERM, USER), plus the locale (`LANG`,
/// `LC_*`: a Python or Node server reads its stdio's encoding from it), `TZ` (a server
/// reporting local time reports Roundtable's) and `TMPDIR` (where a sandboxed service keeps
/// its temporary files). Nothing else: Roundtable's environment holds its token and the
/// model's key.
pub const INHERITED_VARIABLES: [&str; 9] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TZ", "TMPDIR",
];
/// Longest stderr line logged, in bytes (cut at a character boundary); the rest of the line
/// is read and dropped.
pub const MAX_STDERR_LINE: usize = 1000;
/// Stderr lines of one server logged per second; past it they are counted, and the count is
/// logged with the next line logged.
pub const MAX_STDERR_LINES_PER_SECOND: u32 = 50;
/// Bytes read from a child's pipe at a time.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes held between the stdout reader and rmcp: the reader waits when rmcp is behind.
const PIPE_BYTES: usize = 64 * 1024;
/// Longest wait for a killed child to be reaped.
pub const REAP_WAIT: Duration = Duration::from_secs(5);

/// Whether a variable of Roundtable's environment is passed to a stdio server.
pub fn inherited(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    INHERITED_VARIABLES.contains(&name.as_ref()) || name.starts_with("LC_")
}

/// A running stdio server.
pub struct ServerProcess {
    /// The child (killed on drop too, should [`ServerProcess::stop`] not run).
    child: Child,
    /// Its process id.
    pub pid: Option<u32>,
}

/// The two ends rmcp talks through: what the stdout reader passes on, and the child's stdin.
pub type Pipes = (DuplexStream, ChildStdin);

/// What the readers report to the supervisor.
#[derive(Clone)]
pub struct Reporter {
    /// The server's name, for the log.
    pub name: String,
    /// The last stderr line (the status names it when the server goes).
    pub last_stderr: Arc<Mutex<String>>,
}

/// Starts `command` with `args` in `cwd` and an environment of [`INHERITED_VARIABLES`] and
/// `env`; its readers report to `reporter`.
pub fn spawn(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&PathBuf>,
    reporter: Reporter,
) -> Result<(ServerProcess, Pipes), String> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| inherited(k)))
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
    let pid = child.id();
    let (stdin, stdout, stderr) =
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => return Err(format!("`{command}` started without its pipes")),
        };
    let (to_rmcp, from_reader) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(pass_stdout(reporter.name.clone(), stdout, to_rmcp));
    tokio::spawn(log_stderr(reporter, stderr));
    Ok((ServerProcess { child, pid }, (from_reader, stdin)))
}

impl ServerProcess {
    /// Kills the child if it still runs, and waits for it (at most [`REAP_WAIT`]); its exit
    /// status when it had exited on its own (a reason worth showing), `None` when it was
    /// killed here.
    pub async fn stop(mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(REAP_WAIT, self.child.wait()).await;
        None
    }
}

/// Reads the child's stdout line by line (at most [`MAX_LINE_BYTES`] each) and passes each
/// line on to rmcp, checked by [`checked_line`] / [`oversized_line`]. Ends at the child's
/// EOF (rmcp then sees its end) or when rmcp is gone.
async fn pass_stdout(name: String, mut stdout: ChildStdout, mut to_rmcp: DuplexStream) {
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut line: Vec<u8> = Vec::new();
    // While a line past the bound is being skipped: its scanner (for its id) and its length.
    let mut skipping: Option<(Scanner, usize)> = None;
    loop {
        let n = match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest);
            let piece = &rest[..end.map_or(rest.len(), |i| i + 1)];
            rest = &rest[piece.len()..];
            if let Some((scanner, len)) = &mut skipping {
                scanner.feed(piece);
                *len += piece.len();
            } else if line.len() + piece.len() > MAX_LINE_BYTES {
                let mut scanner = Scanner::new();
                scanner.feed(&line);
                scanner.feed(piece);
                skipping = Some((scanner, line.len() + piece.len()));
                line = Vec::new();
            } else {
                line.extend_from_slice(piece);
            }
            if end.is_none() {
                continue;
            }
            let written = match skipping.take() {
                Some((scanner, len)) => match oversized_line(&name, scanner.finish(), len) {
                    Passed::Other(bytes) => to_rmcp.write_all(&bytes).await,
                    Passed::Same | Passed::Nothing => Ok(()),
                },
                None => {
                    let written = match checked_line(&name, &line) {
                        Passed::Same => to_rmcp.write_all(&line).await,
                        Passed::Other(bytes) => to_rmcp.write_all(&bytes).await,
                        Passed::Nothing => Ok(()),
                    };
                    line.clear();
                    if line.capacity() > READ_CHUNK {
                        line.shrink_to(READ_CHUNK);
                    }
                    written
                }
            };
            if written.is_err() {
                return;
            }
        }
    }
}

/// What a line becomes for rmcp.
enum Passed {
    /// The line as it came.
    Same,
    /// Another line (newline included).
    Other(Vec<u8>),
    /// Nothing.
    Nothing,
}

/// A whole line within the bound: as it came, or (nested past [`wire::MAX_DEPTH`]) defused.
fn checked_line(name: &str, line: &[u8]) -> Passed {
    if !wire::may_be_too_deep(line) {
        return Passed::Same;
    }
    let shape = wire::shape(line);
    if shape.depth <= wire::MAX_DEPTH {
        return Passed::Same;
    }
    match wire::defused(line, &shape) {
        Some(mut out) => {
            if shape.deep_tools.is_empty() || shape.depth_outside_tools > wire::MAX_DEPTH {
                log::warn!(
                    "MCP server {name}: an answer nested more than {} levels deep was refused",
                    wire::MAX_DEPTH
                );
            }
            out.push(b'\n');
            Passed::Other(out)
        }
        None => {
            log::warn!(
                "MCP server {name}: a message nested more than {} levels deep was dropped",
                wire::MAX_DEPTH
            );
            Passed::Nothing
        }
    }
}

/// A line past [`MAX_LINE_BYTES`] (`len` bytes, already dropped): an answer becomes an error
/// answer to its request, anything else is dropped.
fn oversized_line(name: &str, shape: wire::Shape, len: usize) -> Passed {
    match (&shape.id, shape.has_method) {
        (Some(id), false) => {
            log::warn!(
                "MCP server {name}: an answer of {len} bytes (more than {MAX_LINE_BYTES}) was \
                 refused"
            );
            Passed::Other(wire::refusal(
                id,
                &format!(
                    "answered more than {} MiB ({len} bytes); the answer was dropped",
                    MAX_LINE_BYTES >> 20
                ),
            ))
        }
        _ => {
            log::warn!(
                "MCP server {name}: a message of {len} bytes (more than {MAX_LINE_BYTES}) was \
                 dropped"
            );
            Passed::Nothing
        }
    }
}

/// The stderr line being read, as a terminal would show it: a `\r` not followed by `\n`
/// starts it over (a progress bar), and only its first [`MAX_STDERR_LINE`] bytes are kept.
#[derive(Default)]
struct StderrLine {
    /// Its first bytes.
    kept: Vec<u8>,
    /// The last byte was a `\r`.
    after_cr: bool,
}

impl StderrLine {
    /// Takes `bytes`; each line they end is handed to `line`.
    fn feed(&mut self, mut bytes: &[u8], mut line: impl FnMut(&[u8])) {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] != b'\n' {
                    // Overwritten, as on a terminal.
                    self.kept.clear();
                }
            }
            let end = memchr::memchr2(b'\n', b'\r', bytes);
            let text = &bytes[..end.unwrap_or(bytes.len())];
            let room = MAX_STDERR_LINE.saturating_sub(self.kept.len());
            self.kept.extend_from_slice(&text[..text.len().min(room)]);
            let Some(at) = end else { return };
            if bytes[at] == b'\r' {
                self.after_cr = true;
            } else {
                line(&self.kept);
                self.kept.clear();
            }
            bytes = &bytes[at + 1..];
        }
    }
}

/// Where a stdio server's stderr lines go: the log, at most
/// [`MAX_STDERR_LINES_PER_SECOND`] (the rest counted), and the last one kept for the status.
struct StderrLog {
    /// The server and its last line.
    reporter: Reporter,
    /// When the current second started.
    second: Instant,
    /// Lines logged in it.
    logged: u32,
    /// Lines not logged since the last count was written.
    unlogged: u64,
}

impl StderrLog {
    /// One line.
    fn line(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end();
        if text.trim().is_empty() {
            return;
        }
        let name = &self.reporter.name;
        *self
            .reporter
            .last_stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text.to_string();
        if self.second.elapsed() >= Duration::from_secs(1) {
            if self.unlogged > 0 {
                log::info!(
                    "MCP server {name}: {} stderr lines not logged (more than \
                     {MAX_STDERR_LINES_PER_SECOND} a second)",
                    self.unlogged
                );
            }
            (self.second, self.logged, self.unlogged) = (Instant::now(), 0, 0);
        }
        if self.logged < MAX_STDERR_LINES_PER_SECOND {
            self.logged += 1;
            log::info!("MCP server {name} stderr: {text}");
        } else {
            self.unlogged += 1;
        }
    }
}

/// Logs a stdio server's stderr in bounded lines ([`StderrLine`], [`StderrLog`]).
async fn log_stderr(reporter: Reporter, mut stderr: tokio::process::ChildStderr) {
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut current = StderrLine::default();
    let mut log = StderrLog {
        reporter,
        second: Instant::now(),
        logged: 0,
        unlogged: 0,
    };
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        current.feed(&chunk[..n], |line| log.line(line));
    }
    // A last line without a newline.
    log.line(&current.kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(pieces: &[&[u8]]) -> Vec<String> {
        let mut current = StderrLine::default();
        let mut out = Vec::new();
        for piece in pieces {
            current.feed(piece, |l| out.push(String::from_utf8_lossy(l).into_owned()));
        }
        out
    }

    #[test]
    fn stderr_lines_are_bounded_and_bars_overwrite() {
        assert_eq!(lines(&[b"a\nbc", b"d\r\ne\n"]), ["a", "bcd", "e"]);
        assert_eq!(lines(&[b"10%\r20%\r", b"30%\rdone\n"]), ["done"]);
        let long = vec![b'x'; 3 * MAX_STDERR_LINE];
        let out = lines(&[&long, &long, b"\nnext\n"]);
        assert_eq!(out[0].len(), MAX_STDERR_LINE);
        assert_eq!(out[1], "next");
    }

    #[test]
    fn the_environment_is_allowlisted() {
        for name in ["HOME", "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR"] {
            assert!(inherited(OsStr::new(name)), "{name}");
        }
        for name in [
            "ROUNDTABLE_TOKEN",
            "ROUNDTABLE_OPENAI_API_KEY",
            "LD_PRELOAD",
            "HOMEX",
        ] {
            assert!(!inherited(OsStr::new(name)), "{name}");
        }
    }
}
