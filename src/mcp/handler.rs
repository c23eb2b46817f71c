//! The client side of one MCP connection ([`Handler`]): what rmcp calls when the server sends
//! a request or a notification. Progress goes to the call it names; `tools/list_changed`
//! wakes the refresher ([`super::listing::refresher`]); an elicitation is asked of the
//! conversation whose call is in flight (bounded: its message is cut to what a form shows,
//! its schema to [`MAX_ELICITATION_SCHEMA_BYTES`], and a call has at most
//! [`MAX_ELICITATIONS_PER_CALL`] waiting); `roots/list` answers the directories of the calls
//! in flight.
//!
//! Roots: `roots/list` answers the working directories of the requests whose calls are in
//! flight (each already passed the server's working-directory policy), or, with none in
//! flight, the last answered. A call whose directory is not among the roots last answered
//! sends `notifications/roots/list_changed` before it starts ([`super::call::run_call`]), so
//! a server that reads its roots sees the caller's directory.
//!
//! Who talks to it: rmcp's service task, on the MCP thread.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ErrorData, Implementation,
    ProgressNotificationParam,
};
// Roots are deprecated by SEP-2577 (a future MCP revision) but are what servers of the
// current revisions (2025-06-18, 2025-11-25) read: kept until rmcp removes them.
#[allow(deprecated)]
use rmcp::model::{ListRootsResult, Root};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::ClientHandler;
use roundtable_actors::agent::questions::MAX_FORM_TEXT_CHARS;
use serde_json::Value;
use tokio::sync::oneshot;

use super::elicit;
use super::in_flight::{CallEvent, MAX_ELICITATIONS_PER_CALL};
use super::shared::{lock, Shared};

/// Largest requested schema of an elicitation, as JSON text: 32 flat properties with their
/// choices and texts take a few KiB; past it the elicitation is declined.
pub const MAX_ELICITATION_SCHEMA_BYTES: usize = 64 * 1024;
/// Characters of a progress message shown.
const MAX_PROGRESS_MESSAGE_CHARS: usize = 200;

/// The client side of one connection: answers the server's requests and notifications.
#[derive(Clone)]
pub struct Handler {
    /// The server's shared state.
    pub shared: Arc<Shared>,
}

/// Counts an elicitation as waiting for its call while it lives.
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let calls = lock(&self.shared.calls);
        let Some(call) = calls
            .iter()
            .find(|c| c.progress_token.as_ref() == Some(&params.progress_token))
        else {
            return;
        };
        let mut text = format!("{}: ", call.tool);
        match params.total {
            Some(total) => text.push_str(&format!("{}/{total}", params.progress)),
            None => text.push_str(&params.progress.to_string()),
        }
        if let Some(message) = params.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(" – ");
            text.extend(message.chars().take(MAX_PROGRESS_MESSAGE_CHARS));
        }
        // A turn that is not keeping up loses progress lines, never the call.
        let _ = call.events.try_send(CallEvent::Progress(text));
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Not listed here: the answer to tools/list comes through the same connection. A
        // refresh running now leaves this wake-up for one more after it.
        self.shared.refresh.notify_one();
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let name = self.shared.name().to_string();
        let answer = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                // Cut at once: nothing past what a form shows is kept while it waits.
                let message: String = message.chars().take(MAX_FORM_TEXT_CHARS).collect();
                let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
                drop(requested_schema);
                let bytes = schema.to_string().len();
                if bytes > MAX_ELICITATION_SCHEMA_BYTES {
                    log::info!(
                        "MCP server {name}: elicitation declined: its schema is {bytes} bytes \
                         (at most {MAX_ELICITATION_SCHEMA_BYTES})"
                    );
                    elicit::Answer::Decline
                } else {
                    self.ask(&name, message, schema).await
                }
            }
            _ => {
                log::info!("MCP server {name}: URL elicitation declined (not supported)");
                elicit::Answer::Decline
            }
        };
        serde_json::from_value(answer.to_json())
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let mut in_flight: Vec<PathBuf> = Vec::new();
        for root in lock(&self.shared.calls)
            .iter()
            .filter_map(|c| c.root.clone())
        {
            if !in_flight.contains(&root) {
                in_flight.push(root);
            }
        }
        let roots = {
            let mut last = lock(&self.shared.roots);
            if !in_flight.is_empty() {
                *last = in_flight;
            }
            last.clone()
        };
        log::info!(
            "MCP server {}: roots/list answered {} roots",
            self.shared.name(),
            roots.len()
        );
        self.shared.reads_roots.store(true, Ordering::Relaxed);
        self.shared.roots_asked.notify_waiters();
        Ok(ListRootsResult::new(
            roots.iter().map(|r| root_of(r)).collect(),
        ))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}},
            "roots": {"listChanged": true}
        }))
        .expect("a valid capabilities object");
        ClientConfig::new(
            capabilities,
            Implementation::new("roundtable", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A directory as an MCP root: a `file://` URI (bytes other than unreserved characters and
/// `/` percent-encoded) named by its last component.
#[allow(deprecated)]
fn root_of(dir: &Path) -> Root {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in dir.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    let root = Root::new(uri);
    match dir.file_name() {
        Some(name) => root.with_name(name.to_string_lossy()),
        None => root,
    }
}

impl Handler {
    /// Asks the conversation whose call is in flight. MCP does not say which call an
    /// elicitation belongs to: with exactly one call in flight it is that call's; with none,
    /// or several (from different turns), nobody can be asked and the answer is `cancel`. A
    /// call with [`MAX_ELICITATIONS_PER_CALL`] waiting gets `cancel` at once.
    async fn ask(&self, name: &str, message: String, schema: Value) -> elicit::Answer {
        let (events, waiting) = {
            let calls = lock(&self.shared.calls);
            let call = match calls.as_slice() {
                [one] => one,
                calls => {
                    // Warned once per server: a server may send them faster than it is worth
                    // logging each.
                    let level = match self
                        .shared
                        .unowned_elicitations
                        .fetch_add(1, Ordering::Relaxed)
                    {
                        0 => log::Level::Warn,
                        _ => log::Level::Debug,
                    };
                    log::log!(
                        level,
                        "MCP server {name}: elicitation with {} calls in flight: cannot tell \
                         whose it is; cancelled",
                        calls.len()
                    );
                    return elicit::Answer::Cancel;
                }
            };
            if call.elicitations.fetch_add(1, Ordering::Relaxed) >= MAX_ELICITATIONS_PER_CALL {
                call.elicitations.fetch_sub(1, Ordering::Relaxed);
                if call.refused.fetch_add(1, Ordering::Relaxed) == 0 {
                    log::warn!(
                        "MCP server {name}: {} has {MAX_ELICITATIONS_PER_CALL} elicitations \
                         waiting; further ones are cancelled",
                        call.tool
                    );
                }
                return elicit::Answer::Cancel;
            }
            (call.events.clone(), Waiting(call.elicitations.clone()))
        };
        let (reply, answer) = oneshot::channel();
        if events
            .send(CallEvent::Elicit {
                message,
                schema,
                reply,
            })
            .await
            .is_err()
        {
            return elicit::Answer::Cancel;
        }
        let answer = answer.await.unwrap_or(elicit::Answer::Cancel);
        drop(waiting);
        answer
    }
}
