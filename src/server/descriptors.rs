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

pub use crate::transport::{DescriptorBudget, DESCRIPTOR_RESERVE, HTTP_HEADROOM};

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
