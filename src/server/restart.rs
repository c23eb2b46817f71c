//! Restarting in place (`agent-server` `restart`, as TypeAgent's server answers it): the server
//! stops as for `shutdown` — sockets close with 1012 (service restart), the registry is saved,
//! the lock released — and then the process becomes a fresh `roundtable serve` with the same
//! arguments, instance directory and port.
//!
//! The port stays open throughout: [`keep`] duplicates every listening socket before actix
//! takes it, and [`reexec`] hands the duplicates to the new image as inherited descriptors
//! named in `ROUNDTABLE_LISTEN_FDS` (with `ROUNDTABLE_LISTEN_PID`, so a child process that
//! inherits the variables does not adopt them). Connections made meanwhile wait in the
//! kernel's backlog and are accepted by the new image ([`adopt`]); clients that were connected
//! reconnect to the same address.
//!
//! Under systemd (`$NOTIFY_SOCKET` is set: the `Type=notify` unit `roundtable service install`
//! writes) the unit restarts instead: the process exits with
//! [`RESTART_EXIT_CODE`], which `roundtable service install` lists in the unit's
//! `RestartForceExitStatus=` (and which `Restart=on-failure` restarts anyway), so systemd keeps
//! its view of the service (main PID, watchdog, logs) and applies its own restart policy.
//!
//! Who talks to it: [`super::serve`] keeps and adopts listeners; `main.rs` calls [`reexec`] or
//! exits when [`super::serve`] returns [`Stopped::Restart`].

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// How [`super::serve`] ended.
#[derive(Debug)]
pub enum Stopped {
    /// `shutdown`, SIGTERM or SIGINT: the process exits.
    Shutdown,
    /// `restart`: the process re-executes itself with these listening sockets (or, under
    /// systemd, exits with [`RESTART_EXIT_CODE`]).
    Restart(Vec<OwnedFd>),
}

/// The exit code that asks systemd to restart the unit (EX_TEMPFAIL).
pub const RESTART_EXIT_CODE: u8 = 75;

/// The variable naming the inherited listening descriptors (comma-separated).
const LISTEN_FDS: &str = "ROUNDTABLE_LISTEN_FDS";
/// The PID the descriptors are meant for.
const LISTEN_PID: &str = "ROUNDTABLE_LISTEN_PID";

/// A duplicate of `listener` (close-on-exec, so no child process inherits it), kept for a
/// restart: the original goes to actix, which closes it when it stops.
pub fn keep(listener: &TcpListener) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1; it reads nothing else.
    let fd = unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by fcntl and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The listening sockets a restarting predecessor handed over, if this process is its new
/// image; the variables are removed either way. `Err` when they name something that is not
/// a listening TCP socket of this process.
pub fn adopt() -> io::Result<Option<Vec<TcpListener>>> {
    let fds = std::env::var(LISTEN_FDS).ok();
    let pid = std::env::var(LISTEN_PID).ok();
    // Not passed on to child processes (MCP servers, a later restart sets them anew).
    std::env::remove_var(LISTEN_FDS);
    std::env::remove_var(LISTEN_PID);
    let (Some(fds), Some(pid)) = (fds, pid) else {
        return Ok(None);
    };
    if pid != std::process::id().to_string() {
        return Ok(None);
    }
    let mut listeners = Vec::new();
    for text in fds.split(',') {
        let fd: RawFd = text.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{LISTEN_FDS}: {text:?} is not a descriptor number"),
            )
        })?;
        if !is_listening_socket(fd) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{LISTEN_FDS}: descriptor {fd} is not a listening socket"),
            ));
        }
        // SAFETY: the descriptor is open (checked above), ours (inherited for this PID) and
        // adopted once.
        let listener = unsafe { TcpListener::from_raw_fd(fd) };
        set_cloexec(fd, true)?;
        listeners.push(listener);
    }
    Ok(Some(listeners))
}

/// True for an open socket in the listening state.
fn is_listening_socket(fd: RawFd) -> bool {
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `accepting`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut accepting as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && accepting != 0
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD / F_SETFD read and write only the descriptor's flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether systemd runs this process as a `Type=notify` service (then the unit restarts, not
/// an exec).
pub fn under_systemd() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// Replaces this process with `roundtable serve` and the same arguments, handing `listeners`
/// over. Returns only on failure. The binary is the one at the path this process was started
/// from (an upgraded binary there is the one that starts).
pub fn reexec(listeners: Vec<OwnedFd>) -> io::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    // /proc/self/exe names a replaced binary "<path> (deleted)": the new one is at <path>.
    let exe = match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(path) => path.into(),
        None => exe,
    };
    let mut numbers = Vec::new();
    for fd in &listeners {
        if let Err(e) = set_cloexec(fd.as_raw_fd(), false) {
            return e;
        }
        numbers.push(fd.as_raw_fd().to_string());
    }
    log::info!(
        "restarting: exec {} with the listening sockets {}",
        exe.display(),
        numbers.join(",")
    );
    let error = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(LISTEN_FDS, numbers.join(","))
        .env(LISTEN_PID, std::process::id().to_string())
        .exec();
    drop(listeners);
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept listener is a listening socket that survives its original, close-on-exec until
    /// a restart clears the flag.
    #[test]
    fn kept_listeners_outlive_the_original() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let kept = keep(&listener).unwrap();
        drop(listener);
        assert!(is_listening_socket(kept.as_raw_fd()));
        // SAFETY: F_GETFD reads the flags only.
        let flags = unsafe { libc::fcntl(kept.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        // Connections still queue on the port.
        assert!(std::net::TcpStream::connect(addr).is_ok());
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(!is_listening_socket(file.as_raw_fd()));
    }
}
