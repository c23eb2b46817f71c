//! The process's file descriptors and how they are shared between sockets and files.
//!
//! Every accepted connection is a descriptor, and so is every file the server holds open (the
//! log writer's append handles, the node log, the search index, MCP servers' pipes, outgoing
//! HTTP and NATS connections, a history page or a backup being read). Without a cap, sockets
//! can take the last descriptor, and then a conversation that was working fails its next
//! write with `storage_error: … Too many open files` (the third security review, issue 49,
//! finding 8). So at start the server raises its soft `RLIMIT_NOFILE` to the hard one and
//! keeps [`DESCRIPTOR_RESERVE`] of it for files: WebSocket upgrades past
//! [`DescriptorBudget::sockets`] are answered 503 with [`at_capacity_text`], and actix-server
//! stops accepting at [`DescriptorBudget::connections`] (the sockets, plus
//! [`HTTP_HEADROOM`] for `/health`, the web client's pages and those 503 answers).
//!
//! Who talks to it: `server::serve` (at start, and for the accept cap), the upgrade route
//! (the socket cap), `/metrics` (the limit and the descriptors open).

use std::io;

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

/// Raises the soft `RLIMIT_NOFILE` to the hard one; answers (the soft limit before, the
/// soft limit now). A refused raise keeps the limit as it was (logged by the caller).
pub fn raise_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur >= limit.rlim_max {
        return Ok((before, before));
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((before, raised.rlim_cur))
}

/// Descriptors this process has open now (the entries of `/proc/self/fd`, less the one
/// reading it); `None` where that cannot be read. Costs one directory read: `/metrics` only.
pub fn open_descriptors() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}

/// The body of the 503 an upgrade past the cap gets.
pub fn at_capacity_text(sockets: usize) -> String {
    format!(
        "Server is at its limit of {sockets} WebSocket connections (--max-sockets); try again \
         later"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reserve comes off the limit, HTTP's headroom off what is left; a small limit keeps
    /// half for connections; `--max-sockets` may lower the cap, never raise it past the limit.
    #[test]
    fn sockets_get_the_limit_less_the_reserve() {
        let budget = DescriptorBudget::new(20_000, None).unwrap();
        assert_eq!(
            budget,
            DescriptorBudget {
                limit: 20_000,
                connections: 19_488,
                sockets: 19_424
            }
        );
        let small = DescriptorBudget::new(1024, None).unwrap();
        assert_eq!((small.connections, small.sockets), (512, 448));
        let tiny = DescriptorBudget::new(256, None).unwrap();
        assert_eq!((tiny.connections, tiny.sockets), (128, 64));
        let chosen = DescriptorBudget::new(20_000, Some(100)).unwrap();
        assert_eq!((chosen.connections, chosen.sockets), (164, 100));
        assert_eq!(
            DescriptorBudget::new(1024, Some(449)).unwrap_err(),
            "--max-sockets 449 does not fit the descriptor limit of 1024: at most 448 (512 \
             descriptors are kept for files and 64 for HTTP requests); raise the limit (ulimit \
             -n, systemd's LimitNOFILE=) or lower --max-sockets"
        );
        assert!(DescriptorBudget::new(1024, Some(0)).is_err());
    }
}
