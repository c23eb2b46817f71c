//! [`DescriptorBudget`]: how the process's descriptors are shared between sockets and files,
//! decided once at start (`server::descriptors` raises the limit and builds it); the upgrade
//! route takes each socket's place under its cap ([`SocketSlot`](super::SocketSlot)).

/// Descriptors kept for everything that is not a client connection: the log writer's
/// [`MAX_OPEN_FILES`](roundtable_actors::storage::log_writer::MAX_OPEN_FILES) (256) append
/// handles, the node log, the registry and its journal, the search index's SQLite files, the
/// listeners, the runtimes' epoll and event descriptors, MCP servers' pipes, the model's and
/// NATS's connections, and files opened for a moment (a history page, a backup, a whole-file
/// write's temporary file). Twice the log writer's handles leaves as much again for the rest.
pub const DESCRIPTOR_RESERVE: u64 = 512;

/// Connections accepted beyond the WebSocket cap: HTTP requests (`/health`, `/metrics`, the
/// web client's files) and upgrades that are answered 503 still need a descriptor while they
/// are served.
pub const HTTP_HEADROOM: u64 = 64;

/// How the descriptors are shared, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The soft `RLIMIT_NOFILE` in force.
    pub limit: u64,
    /// Connections actix-server accepts at once (over all workers).
    pub connections: usize,
    /// WebSocket connections served at once; an upgrade past it is answered 503.
    pub sockets: usize,
}

impl DescriptorBudget {
    /// The budget under `limit` descriptors: the reserve kept for files (at most half the
    /// limit, so a small limit still serves clients), the headroom for HTTP, and the rest for
    /// WebSockets, or `max_sockets` when given and it fits. `Err` says why it does not.
    pub fn new(limit: u64, max_sockets: Option<usize>) -> Result<DescriptorBudget, String> {
        let connections = limit.saturating_sub(DESCRIPTOR_RESERVE).max(limit / 2);
        let most_sockets = connections.saturating_sub(HTTP_HEADROOM).max(1);
        let sockets = match max_sockets {
            Some(0) => return Err("--max-sockets must be at least 1".to_string()),
            Some(n) if n as u64 > most_sockets => {
                return Err(format!(
                    "--max-sockets {n} does not fit the descriptor limit of {limit}: at most \
                     {most_sockets} ({DESCRIPTOR_RESERVE} descriptors are kept for files and \
                     {HTTP_HEADROOM} for HTTP requests); raise the limit (ulimit -n, systemd's \
                     LimitNOFILE=) or lower --max-sockets"
                ))
            }
            Some(n) => n as u64,
            None => most_sockets,
        };
        Ok(DescriptorBudget {
            limit,
            connections: (sockets + HTTP_HEADROOM) as usize,
            sockets: sockets as usize,
        })
    }
}
