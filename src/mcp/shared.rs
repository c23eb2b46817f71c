//! [`Shared`]: what one MCP server's supervisor (`server.rs`), client handler (`handler.rs`),
//! listing (`listing.rs`) and calls (`call.rs`) share: its configuration, the tools it offers,
//! where it is, its connection and its calls in flight. Plain state behind locks; each of
//! those parts stands on it, none of them on another for it.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient};
use roundtable_actors::agent::ToolSpec;

use super::config::McpServerConfig;
use super::in_flight::InFlight;

/// How long `initialize` may take, and the first `tools/list` (at most: a server's `timeout`
/// shortens it, see [`Shared::list_timeout`]).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest failure reason in the status (the log has it whole).
const MAX_REASON_CHARS: usize = 300;

/// Where a server is.
#[derive(Debug, Clone)]
pub(super) enum State {
    /// Being started (spawned or connecting, `initialize`, first `tools/list`).
    Starting,
    /// Serving; `pid` of a stdio server's process.
    Connected {
        /// The child's process id.
        pid: Option<u32>,
    },
    /// Gone or never came up; started again at `at`.
    Restarting {
        /// When the next start begins.
        at: Instant,
        /// Why it went (shown in the status).
        reason: String,
    },
    /// The hub stopped it (server shutting down).
    Stopped,
}

/// What the supervisor, the handler and the calls share.
pub struct Shared {
    /// The configuration.
    pub config: McpServerConfig,
    /// The MCP thread's runtime, where calls run.
    pub runtime: tokio::runtime::Handle,
    /// Tools offered now (swapped whole by each listing).
    pub(super) tools: RwLock<Arc<Vec<ToolSpec>>>,
    /// Where the server is.
    pub(super) state: Mutex<State>,
    /// Why the last refresh of the tool list failed, until one succeeds (the status says it).
    pub(super) refresh_error: Mutex<Option<String>>,
    /// Woken by `notifications/tools/list_changed`; the refresher waits on it (a wake-up
    /// while it runs is kept, once).
    pub refresh: tokio::sync::Notify,
    /// The connection, while connected.
    pub(super) peer: Mutex<Option<Peer<RoleClient>>>,
    /// Calls in flight.
    pub calls: Mutex<Vec<InFlight>>,
    /// Numbers calls.
    pub next_call: AtomicU64,
    /// The last line a stdio server wrote on stderr (its reason, when it exits).
    pub(super) last_stderr: Arc<Mutex<String>>,
    /// The roots last answered to `roots/list` (a call whose directory is not among them
    /// announces `notifications/roots/list_changed` first).
    pub roots: Mutex<Vec<PathBuf>>,
    /// The server has asked `roots/list` on some connection: it reads its roots, so a call
    /// that changes them waits for it to ask again.
    pub reads_roots: std::sync::atomic::AtomicBool,
    /// Woken at each `roots/list`.
    pub roots_asked: tokio::sync::Notify,
    /// Elicitations that came with no single call to ask for (the first is warned of).
    pub unowned_elicitations: std::sync::atomic::AtomicUsize,
}

/// Locks, ignoring poison (a panicking holder leaves plain data behind).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `text` cut at [`MAX_REASON_CHARS`], with `…` when cut.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

impl Shared {
    /// A server not yet started.
    pub fn new(config: McpServerConfig, runtime: tokio::runtime::Handle) -> Arc<Shared> {
        Arc::new(Shared {
            config,
            runtime,
            tools: RwLock::default(),
            state: Mutex::new(State::Starting),
            refresh_error: Mutex::default(),
            refresh: tokio::sync::Notify::new(),
            peer: Mutex::default(),
            calls: Mutex::default(),
            next_call: AtomicU64::new(1),
            last_stderr: Arc::default(),
            roots: Mutex::default(),
            reads_roots: Default::default(),
            roots_asked: tokio::sync::Notify::new(),
            unowned_elicitations: Default::default(),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How long a listing (all its pages) may take: the server's call `timeout`, at most
    /// [`CONNECT_TIMEOUT`] (a listing is quick work for a server).
    pub fn list_timeout(&self) -> Duration {
        self.config.timeout.min(CONNECT_TIMEOUT)
    }

    /// The state as the status shows it.
    pub(super) fn state_text(&self) -> String {
        match &*lock(&self.state) {
            State::Starting => "starting".into(),
            State::Connected { pid } => {
                let mut text = match pid {
                    Some(pid) => format!("connected (pid {pid})"),
                    None => "connected".into(),
                };
                if let Some(why) = &*lock(&self.refresh_error) {
                    text.push_str(&format!("; the tool list was not refreshed: {}", clip(why)));
                }
                text
            }
            State::Restarting { at, reason } => {
                let left = at.saturating_duration_since(Instant::now());
                format!(
                    "failed: {}; restarting in {:.1} s",
                    clip(reason),
                    left.as_secs_f64()
                )
            }
            State::Stopped => "stopped".into(),
        }
    }

    /// Offers `tools` (a listing's) from the next model call on.
    pub fn offer(&self, tools: Vec<ToolSpec>) {
        *self.tools.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tools);
    }

    /// Records how the last refresh went (`None`: it succeeded).
    pub fn set_refresh_error(&self, why: Option<String>) {
        *lock(&self.refresh_error) = why;
    }

    /// The connection, or why there is none.
    pub fn peer(&self) -> Result<Peer<RoleClient>, String> {
        lock(&self.peer).clone().ok_or_else(|| {
            format!(
                "MCP server `{}` is not connected ({})",
                self.name(),
                self.state_text()
            )
        })
    }
}
