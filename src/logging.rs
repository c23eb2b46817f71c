//! The process's logger: env_logger's, with a filter that can be replaced while the server
//! runs (`@system trace`). An [`env_logger::Logger`] fixes its filter when it is built, so
//! [`ReloadableLogger`] holds one behind an [`RwLock`] and swaps in a fresh one built the same
//! way (same format and target, same `RUST_LOG_STYLE`), moving `log`'s global max level with
//! it. Output looks exactly as it did with `env_logger::init`.
//!
//! Under systemd (stderr is the journal stream `$JOURNAL_STREAM` names) lines carry no
//! timestamp of their own (the journal stamps them) and start with the `<N>` syslog level
//! prefix journald reads (sd-daemon(3)): `<3>` error, `<4>` warn, `<6>` info, `<7>` debug and
//! trace.
//!
//! Security events (the [`SECURITY`] target) are written at `info` and above whatever the
//! filter: a second logger with a fixed filter takes the records the swappable one drops, and
//! `log`'s global max level never goes below `info`.
//!
//! Records of other crates (rmcp, through `tracing`'s `log` feature, reqwest, hyper…) have
//! the credentials of every URL in them hidden before they are written
//! ([`redact_url_credentials`]): rmcp logs its HTTP errors with the request's URL, and an MCP
//! server's URL may carry `?api_key=`. Roundtable's own records redact where they are made.
//!
//! Who talks to it: `main.rs` installs it ([`init`]) before anything logs; [`crate::serve`]
//! hands [`control`] to the conversations as a [`LogFilterControl`].

use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use env_logger::{Builder, Logger};
use log::{Log, Metadata, Record};
use roundtable_actors::conversation::LogFilterControl;
use roundtable_actors::redact::redact_url_credentials;

/// The target of security events (see the module docs); `log::warn!(target: SECURITY, …)`.
pub use roundtable_actors::SECURITY_LOG_TARGET as SECURITY;

/// The longest filter `@system trace` takes: a few dozen directives. Checked before anything
/// parses it (the conversation checks the same bound on the command text).
pub use roundtable_actors::conversation::MAX_TRACE_FILTER_BYTES;

/// The logger [`init`] installed, if it did.
static INSTALLED: OnceLock<&'static ReloadableLogger> = OnceLock::new();

/// A logger whose filter can be replaced.
pub struct ReloadableLogger {
    /// The logger in use and the filter text it was built from (what `@system trace` shows).
    current: RwLock<(Logger, String)>,
    /// Writes the security events `current`'s filter drops (fixed filter: [`SECURITY`] at
    /// `info`).
    security: Logger,
}

/// Whether a record's `target` is Roundtable's own (its text is redacted where it is made);
/// another crate's is redacted as it is written.
fn is_ours(target: &str) -> bool {
    target.starts_with("roundtable")
}

/// True for a security event at `info` or above: logged whatever the filter.
fn is_security_event(metadata: &Metadata<'_>) -> bool {
    metadata.target() == SECURITY && metadata.level() <= log::Level::Info
}

/// `log`'s global max level for a logger filtering at `filter`: never below `info`, so
/// security events reach [`ReloadableLogger::log`] (records of other targets below the filter
/// are dropped there, by one filter match each).
fn max_level(filter: log::LevelFilter) -> log::LevelFilter {
    filter.max(log::LevelFilter::Info)
}

/// An env_logger built as `env_logger::init` builds one, with `spec` as its filter.
fn build(spec: &str) -> Logger {
    let mut builder = Builder::new();
    if let Ok(style) = std::env::var("RUST_LOG_STYLE") {
        builder.parse_write_style(&style);
    }
    builder.parse_filters(spec);
    if stderr_is_journal() {
        builder.format(|out, record| {
            use std::io::Write as _;
            writeln!(
                out,
                "<{}>{}: {}",
                journal_priority(record.level()),
                record.target(),
                record.args()
            )
        });
    }
    builder.build()
}

/// The syslog priority journald reads from a `<N>` line prefix.
fn journal_priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Whether stderr is the journal stream systemd connected (`$JOURNAL_STREAM` is
/// `<device>:<inode>` of that stream; a child whose stderr was redirected elsewhere inherits
/// the variable but not the stream, so both are compared, as systemd.exec(5) advises).
fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // SAFETY: fstat writes only into the zeroed struct it is given; fd 2 may be closed, in
    // which case it fails and nothing is read.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(2, &mut stat) } != 0 {
        return false;
    }
    stat.st_dev as u64 == dev && stat.st_ino as u64 == ino
}

impl ReloadableLogger {
    /// A logger filtering with `spec` (not installed).
    pub fn new(spec: &str) -> ReloadableLogger {
        ReloadableLogger {
            current: RwLock::new((build(spec), spec.to_string())),
            security: build(&format!("{SECURITY}=info")),
        }
    }

    /// The logger in use (a panic while swapping cannot leave it half-written: the swap is
    /// one assignment, so a poisoned lock still holds a whole logger).
    fn read(&self) -> RwLockReadGuard<'_, (Logger, String)> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Log for ReloadableLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        is_security_event(metadata) || self.read().0.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        let current = self.read();
        if current.0.enabled(record.metadata()) {
            if is_ours(record.target()) {
                current.0.log(record);
            } else {
                let text = redact_url_credentials(&record.args().to_string());
                current.0.log(
                    &Record::builder()
                        .metadata(record.metadata().clone())
                        .args(format_args!("{text}"))
                        .module_path(record.module_path())
                        .file(record.file())
                        .line(record.line())
                        .build(),
                );
            }
        } else if is_security_event(record.metadata()) {
            self.security.log(record);
        }
    }

    fn flush(&self) {
        self.read().0.flush();
    }
}

impl LogFilterControl for ReloadableLogger {
    fn current(&self) -> String {
        self.read().1.clone()
    }

    /// Checks `spec` strictly first (env_logger itself would only warn on stderr and drop the
    /// bad part), then swaps the logger and the global max level. `spec` is at most
    /// [`MAX_TRACE_FILTER_BYTES`]: the parsers behind it are not linear in the directive count.
    fn set(&self, spec: &str) -> Result<String, String> {
        let spec = spec.trim();
        if spec.len() > MAX_TRACE_FILTER_BYTES {
            return Err(format!(
                "the filter is {} bytes; at most {MAX_TRACE_FILTER_BYTES}",
                spec.len()
            ));
        }
        if spec.is_empty() {
            return Err(
                "give a filter in RUST_LOG syntax, e.g. info or roundtable_actors=debug,info"
                    .into(),
            );
        }
        env_filter::Builder::new().try_parse(spec).map_err(|e| {
            format!(
                "invalid log filter \"{spec}\" ({e}); use RUST_LOG syntax, e.g. info or \
                 roundtable_actors=debug,info"
            )
        })?;
        let logger = build(spec);
        let max = logger.filter();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (logger, spec.to_string());
        log::set_max_level(max_level(max));
        Ok(spec.to_string())
    }
}

/// The control [`LogFilterControl`] of a `'static` logger.
struct Control(&'static ReloadableLogger);

impl LogFilterControl for Control {
    fn current(&self) -> String {
        self.0.current()
    }

    fn set(&self, spec: &str) -> Result<String, String> {
        self.0.set(spec)
    }
}

/// Installs the process's logger: `RUST_LOG` when set, else `default_filter`, exactly as
/// `env_logger::Builder::from_env(Env::default().default_filter_or(default_filter)).init()`
/// did. Does nothing when a logger is already installed.
pub fn init(default_filter: &str) {
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| default_filter.to_string());
    let logger: &'static ReloadableLogger = Box::leak(Box::new(ReloadableLogger::new(&spec)));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(max_level(logger.read().0.filter()));
        let _ = INSTALLED.set(logger);
    }
}

/// The installed logger's filter control; `None` when [`init`] did not install it (a test
/// calling [`crate::serve`] in its own process).
pub fn control() -> Option<Arc<dyn LogFilterControl>> {
    INSTALLED
        .get()
        .map(|logger| Arc::new(Control(logger)) as Arc<dyn LogFilterControl>)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled(logger: &ReloadableLogger, target: &str, level: log::Level) -> bool {
        logger.enabled(&Metadata::builder().target(target).level(level).build())
    }

    /// A valid filter replaces the old one at once; an invalid one is refused with a reason
    /// and changes nothing.
    #[test]
    fn filters_are_swapped_or_refused() {
        let logger = ReloadableLogger::new("info");
        assert_eq!(logger.current(), "info");
        assert!(!enabled(
            &logger,
            "roundtable_actors::queue",
            log::Level::Debug
        ));
        assert_eq!(
            logger.set(" roundtable_actors=debug,warn ").unwrap(),
            "roundtable_actors=debug,warn"
        );
        assert!(enabled(
            &logger,
            "roundtable_actors::queue",
            log::Level::Debug
        ));
        assert!(!enabled(&logger, "actix_web", log::Level::Info));
        let e = logger.set("roundtable=loud").unwrap_err();
        assert!(
            e.starts_with("invalid log filter \"roundtable=loud\""),
            "{e}"
        );
        assert!(logger.set("  ").is_err());
        assert_eq!(logger.current(), "roundtable_actors=debug,warn");
    }

    /// Security events pass whatever the filter; other records still follow it.
    #[test]
    fn security_events_pass_any_filter() {
        let logger = ReloadableLogger::new("info");
        logger.set("off").unwrap();
        assert!(enabled(&logger, SECURITY, log::Level::Warn));
        assert!(enabled(&logger, SECURITY, log::Level::Info));
        assert!(!enabled(&logger, SECURITY, log::Level::Debug));
        assert!(!enabled(&logger, "roundtable::server", log::Level::Error));
        assert_eq!(max_level(log::LevelFilter::Off), log::LevelFilter::Info);
        assert_eq!(max_level(log::LevelFilter::Trace), log::LevelFilter::Trace);
    }

    /// A filter past the bound is refused before any parser sees it.
    #[test]
    fn long_filters_are_refused() {
        let logger = ReloadableLogger::new("info");
        let long = "a=debug,".repeat(MAX_TRACE_FILTER_BYTES);
        let e = logger.set(&long).unwrap_err();
        assert!(e.contains("at most 1024"), "{e}");
        assert_eq!(logger.current(), "info");
    }

    /// journald's priorities for each level.
    #[test]
    fn journal_priorities() {
        use log::Level::*;
        let got: Vec<u8> = [Error, Warn, Info, Debug, Trace]
            .into_iter()
            .map(journal_priority)
            .collect();
        assert_eq!(got, [3, 4, 6, 7, 7]);
    }
}
