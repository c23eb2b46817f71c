//! `roundtable backup FILE` and `roundtable restore FILE --instance-dir DIR`.
//!
//! `backup` asks the running server for `GET /backup` (its address and token as the other
//! client commands find them: `--port` / `ROUNDTABLE_PORT` or `--url`, the token from
//! `--token-file` or `ROUNDTABLE_TOKEN` sent as `Authorization: Bearer`) and
//! writes the stream to a temp file beside FILE, gzip-compressed when FILE ends in `.gz` or
//! `.tgz`. While receiving it checks the archive entry by entry
//! ([`scan`](crate::backup::read::scan)); only a complete, valid archive is fsynced and
//! renamed to FILE. `restore` is [`crate::backup::restore`]. Both show progress (files and
//! bytes) on a terminal's stderr and print one summary line.

use std::fs;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use roundtable_actors::storage::durable::{fsync_dir, private_file_options};

use super::{CliError, CliResult};
use crate::backup::read::{scan, Scanned};
use crate::backup::restore::{self, Progress, RestoreOptions};
use crate::client::Endpoint;

/// Chunks received and not yet written (the network side waits beyond it).
const RECEIVE_AHEAD: usize = 16;
/// How often the progress line is redrawn.
const REDRAW: Duration = Duration::from_millis(100);

/// `roundtable backup FILE`: runs its own actix system for the HTTP client.
pub fn backup(server: &Endpoint, file: &Path) -> CliResult {
    actix_web::rt::System::new().block_on(fetch(server, file))
}

/// `roundtable restore FILE --instance-dir DIR [--force] [--with-config] [--max-bytes N]`:
/// one line for what was restored, one for what was left out, one for the config.
pub fn restore(archive: &Path, dir: &Path, options: &RestoreOptions) -> CliResult {
    let mut progress = ProgressLine::new(None, None);
    let result = restore::restore(archive, dir, options, &mut progress);
    progress.clear();
    let restored = result.map_err(|e| CliError::new(e.to_string()))?;
    let m = &restored.scanned.manifest;
    println!(
        "Restored {} conversations ({} files, {}) from the snapshot of {} into {}",
        m.conversations.len(),
        restored.files,
        human(restored.bytes),
        m.snapshot_at,
        dir.display()
    );
    if restored.skipped_files > 0 {
        println!(
            "Skipped {} files ({}) that are not conversations: {} (restore them with --with-config)",
            restored.skipped_files,
            human(restored.skipped_bytes),
            restored.skipped.join(", ")
        );
    }
    if let Some(note) = &restored.config_note {
        println!("{note}");
    }
    Ok(())
}

/// `--max-bytes`: a byte count, plain or with a binary suffix (`512M`, `64G`, `1T`; `K`, `KiB`
/// and `k` alike).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().trim_end_matches("ib") {
        "" | "b" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(format!(
                "{text:?} is not a byte count (e.g. 1048576, 512M, 64G)"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{text:?} is not a byte count (e.g. 1048576, 512M, 64G)"))
}

/// The HTTP address of `GET /backup` on the server at the WebSocket `url`, keeping its query
/// (the token).
fn backup_url(url: &str) -> CliResult<String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        CliError::new(format!(
            "{} is not a ws:// URL",
            roundtable_actors::redact::redact_url_credentials(url)
        ))
    })?;
    if !matches!(scheme, "ws" | "http") {
        return Err(CliError::new(format!(
            "backup supports ws:// (and http://) servers, not {scheme}://"
        )));
    }
    let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let query = rest
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"));
    Ok(format!("http://{authority}/backup{query}"))
}

/// Downloads the archive into `file` (see the module docs).
async fn fetch(server: &Endpoint, file: &Path) -> CliResult {
    let http = backup_url(&server.url)?;
    let client = awc::Client::builder().disable_timeout().finish();
    // The header `GET /backup` requires: a page's link or redirect cannot send it.
    let mut request = client
        .get(&http)
        .insert_header(("x-roundtable-backup", "1"));
    if let Some(token) = &server.token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.map_err(|e| {
        CliError::new(format!(
            "cannot reach a server at {} ({e}); start it with `roundtable serve`",
            server.shown()
        ))
    })?;
    if !response.status().is_success() {
        let body = response.body().limit(64 * 1024).await.unwrap_or_default();
        return Err(CliError::new(format!(
            "the server refused the backup ({}): {}",
            response.status(),
            String::from_utf8_lossy(&body).trim()
        )));
    }
    let total = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    };
    let meter = ProgressLine::new(
        total("x-roundtable-backup-files"),
        total("x-roundtable-backup-bytes"),
    );
    let (tx, rx) = std_mpsc::sync_channel::<Bytes>(RECEIVE_AHEAD);
    let target = file.to_path_buf();
    let writer = std::thread::spawn(move || receive(rx, &target, meter));
    let mut cut = None;
    while let Some(chunk) = response.next().await {
        match chunk {
            // The writer stopped: its error says why.
            Ok(bytes) => {
                if tx.send(bytes).is_err() {
                    break;
                }
            }
            Err(e) => {
                cut = Some(e.to_string());
                break;
            }
        }
    }
    drop(tx);
    let written = writer
        .join()
        .unwrap_or_else(|_| Err(CliError::new("the backup writer thread panicked")));
    if let Some(why) = cut {
        return Err(CliError::new(format!(
            "the backup was interrupted ({why}); {} was not written",
            file.display()
        )));
    }
    let scanned = written?;
    let m = &scanned.manifest;
    println!(
        "Backed up {} conversations ({} files, {}) as of {} to {}",
        m.conversations.len(),
        m.files,
        human(m.bytes),
        m.snapshot_at,
        file.display()
    );
    Ok(())
}

/// The writer thread: tees the received stream into a temp file (through gzip for `.gz` /
/// `.tgz`) while checking it, then makes it FILE durably. The temp file is removed on failure.
fn receive(
    rx: std_mpsc::Receiver<Bytes>,
    file: &Path,
    mut meter: ProgressLine,
) -> CliResult<Scanned> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("backup");
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let partial = dir.join(format!(".{name}.partial-{}", std::process::id()));
    let result = (|| {
        let out = private_file_options()
            .truncate(true)
            .open(&partial)
            .map_err(|e| CliError::new(format!("cannot write {}: {e}", partial.display())))?;
        let gzip = name.ends_with(".gz") || name.ends_with(".tgz");
        let sink = if gzip {
            Sink::Gzip(flate2::write::GzEncoder::new(
                out,
                flate2::Compression::default(),
            ))
        } else {
            Sink::Plain(io::BufWriter::new(out))
        };
        let mut tee = Tee {
            source: Received {
                rx,
                chunk: Bytes::new(),
            },
            copy: sink,
        };
        let (mut files, mut bytes) = (0, 0);
        let scanned = scan(&mut tee, |_, size, _| {
            files += 1;
            bytes += size;
            meter.file("receiving", files, bytes);
            Ok(())
        });
        meter.clear();
        let scanned = scanned.map_err(|e| CliError::new(format!("the server's archive: {e}")))?;
        // The tar end blocks after the last entry belong in the file too.
        io::copy(&mut tee, &mut io::sink()).map_err(io_failure(&partial))?;
        let out = tee.copy.finish().map_err(io_failure(&partial))?;
        out.sync_all().map_err(io_failure(&partial))?;
        fs::rename(&partial, file).map_err(io_failure(file))?;
        fsync_dir(&dir).map_err(|e| CliError::new(e.to_string()))?;
        Ok(scanned)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    result
}

/// A failure writing `path`, as a CLI error.
fn io_failure(path: &Path) -> impl FnOnce(io::Error) -> CliError + '_ {
    move |e| CliError::new(format!("cannot write {}: {e}", path.display()))
}

/// The received chunks as one byte stream; it ends when the network side hangs up.
struct Received {
    /// Chunks from the network side.
    rx: std_mpsc::Receiver<Bytes>,
    /// The rest of the current chunk.
    chunk: Bytes,
}

impl Read for Received {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.recv() {
                Ok(next) => self.chunk = next,
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// Writes everything read from `source` into `copy`.
struct Tee {
    /// What is read.
    source: Received,
    /// Where it also goes.
    copy: Sink,
}

/// The backup file being written, plain or through gzip.
enum Sink {
    /// A `.tar`.
    Plain(io::BufWriter<fs::File>),
    /// A `.tar.gz` / `.tgz`.
    Gzip(flate2::write::GzEncoder<fs::File>),
}

impl Sink {
    /// Writes what is buffered (and gzip's trailer); gives the file back for its fsync.
    fn finish(self) -> io::Result<fs::File> {
        match self {
            Sink::Plain(w) => w.into_inner().map_err(io::IntoInnerError::into_error),
            Sink::Gzip(w) => w.finish(),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(data),
            Sink::Gzip(w) => w.write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.source.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// The progress line on stderr (a terminal only): files and bytes, of the totals when known.
struct ProgressLine {
    /// Whether stderr is a terminal (otherwise nothing is drawn).
    tty: bool,
    /// Files expected, when the server said.
    total_files: Option<u64>,
    /// Bytes expected, when the server said.
    total_bytes: Option<u64>,
    /// The last redraw (`None`: draw at the next file).
    drawn: Option<Instant>,
    /// Whether a progress line is on the screen, to erase.
    shown: bool,
}

impl ProgressLine {
    fn new(total_files: Option<u64>, total_bytes: Option<u64>) -> ProgressLine {
        ProgressLine {
            tty: io::stderr().is_terminal(),
            total_files,
            total_bytes,
            drawn: None,
            shown: false,
        }
    }

    fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            eprint!("\r\x1b[K");
        }
    }
}

impl Progress for ProgressLine {
    fn file(&mut self, phase: &'static str, files: u64, bytes: u64) {
        if !self.tty || self.drawn.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        let of = |total: Option<u64>, show: &dyn Fn(u64) -> String| {
            total.map_or(String::new(), |t| format!(" of {}", show(t)))
        };
        eprint!(
            "\r\x1b[K{phase}: {files}{} files, {}{}",
            of(self.total_files, &|t| t.to_string()),
            human(bytes),
            of(self.total_bytes, &human)
        );
        let _ = io::stderr().flush();
        self.drawn = Some(Instant::now());
        self.shown = true;
    }

    fn totals(&mut self, files: u64, bytes: u64) {
        self.total_files = Some(files);
        self.total_bytes = Some(bytes);
        // The next phase draws at once.
        self.drawn = None;
    }
}

/// Bytes for people: `812 B`, `3.4 KiB`, `1.2 MiB`, `5.0 GiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_urls_keep_the_token() {
        assert_eq!(
            backup_url("ws://127.0.0.1:8999/").unwrap(),
            "http://127.0.0.1:8999/backup"
        );
        assert_eq!(
            backup_url("ws://localhost:1/x?token=abc").unwrap(),
            "http://localhost:1/backup?token=abc"
        );
        assert!(backup_url("wss://example/").is_err());
        assert_eq!(human(1536), "1.5 KiB");
    }

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("64GiB"), Ok(64 << 30));
        assert_eq!(parse_bytes("2k"), Ok(2048));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
