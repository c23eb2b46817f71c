//! Who is on the other end of a loopback TCP connection: the uid owning the client's end,
//! the socket whose local address is our peer address and whose remote address is our local
//! address. The server uses this to serve, without a token, only connections opened by its own
//! OS user (see `server::guards` and README's Security).
//!
//! The kernel is asked for that one socket over netlink (`NETLINK_SOCK_DIAG`, an exact
//! `inet_diag` lookup by address and port): constant cost per upgrade. Reading
//! `/proc/net/tcp{,6}` instead costs a line per open TCP socket, so 10,000 joined clients made
//! each new upgrade parse 20,000 lines (the `rooms` load scenario fell from ~8,000 to 48
//! joins/s); the table is only read when netlink is unavailable.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;

/// The effective uid of this process (the owner of `/proc/self`), read once: every upgrade
/// without a token asks for it.
pub fn own_uid() -> io::Result<u32> {
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some(uid) = UID.get() {
        return Ok(*uid);
    }
    let uid = std::fs::metadata("/proc/self")?.uid();
    Ok(*UID.get_or_init(|| uid))
}

/// The uid owning the client end of the loopback connection `peer` → `local` (`local` is the
/// server's end), or `None` when no such socket is listed (it closed meanwhile).
pub fn loopback_peer_uid(peer: SocketAddr, local: SocketAddr) -> io::Result<Option<u32>> {
    let peer = unmap(peer);
    let local = unmap(local);
    match diag::socket_uid(peer, local) {
        Ok(found) => return Ok(found),
        Err(e) => log::debug!("sock_diag unavailable ({e}); reading the /proc table"),
    }
    let table = match peer.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table)?;
    Ok(find_owner(&text, peer, local))
}

/// `::ffff:a.b.c.d` as the IPv4 address it is (the kernel lists such sockets in `tcp`).
fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// The uid of the line whose local address is `peer` and remote address is `local`.
fn find_owner(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?;
        let own = parse_addr(fields.next()?)?;
        let remote = parse_addr(fields.next()?)?;
        if own != peer || remote != local {
            return None;
        }
        // st, tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
        fields.nth(4)?.parse().ok()
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6): each 32-bit word is printed in the
/// machine's byte order, the port in network order.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The exact `inet_diag` lookup (linux/inet_diag.h, linux/sock_diag.h): one request for the
/// socket with these addresses, one answer carrying its owner's uid.
mod diag {
    use std::io;
    use std::net::{IpAddr, SocketAddr};

    /// `SOCK_DIAG_BY_FAMILY`: the request type of `inet_diag_req_v2`.
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    /// `NLMSG_ERROR`: the kernel's answer when the socket is unknown (`ENOENT`).
    const NLMSG_ERROR: u16 = 2;
    /// `INET_DIAG_NOCOOKIE`: match by addresses only.
    const NO_COOKIE: [u32; 2] = [!0, !0];

    /// `struct nlmsghdr`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct NlMsgHdr {
        len: u32,
        kind: u16,
        flags: u16,
        seq: u32,
        pid: u32,
    }

    /// `struct inet_diag_sockid`: ports in network order, addresses as raw bytes.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct SockId {
        sport: [u8; 2],
        dport: [u8; 2],
        src: [u8; 16],
        dst: [u8; 16],
        interface: u32,
        cookie: [u32; 2],
    }

    /// `struct inet_diag_req_v2` behind its netlink header.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Request {
        header: NlMsgHdr,
        family: u8,
        protocol: u8,
        ext: u8,
        pad: u8,
        states: u32,
        id: SockId,
    }

    /// `struct inet_diag_msg` (the part up to the uid) behind its netlink header.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Answer {
        header: NlMsgHdr,
        family: u8,
        state: u8,
        timer: u8,
        retrans: u8,
        id: SockId,
        expires: u32,
        rqueue: u32,
        wqueue: u32,
        uid: u32,
        inode: u32,
    }

    fn addr_bytes(ip: IpAddr) -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out = v6.octets(),
        }
        out
    }

    thread_local! {
        /// This thread's sock_diag socket and the sequence number of its last request: kept
        /// open between upgrades (making and closing one per upgrade was half of this lookup's
        /// cost, 4% of the server's CPU while 10,000 clients connected). A socket that fails,
        /// or answers another request's sequence, is dropped and a fresh one asked once.
        static DIAG_SOCKET: std::cell::RefCell<Option<(std::os::fd::OwnedFd, u32)>> =
            const { std::cell::RefCell::new(None) };
    }

    /// A fresh `NETLINK_SOCK_DIAG` socket.
    fn diag_socket() -> io::Result<std::os::fd::OwnedFd> {
        // SAFETY: a plain socket call; the descriptor is owned (and closed) by `OwnedFd`.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// The uid owning the socket `own` → `remote`; `None` when the kernel knows no such socket.
    pub fn socket_uid(own: SocketAddr, remote: SocketAddr) -> io::Result<Option<u32>> {
        DIAG_SOCKET.with(|cached| {
            let mut cached = cached.borrow_mut();
            let mut last_error = None;
            for _ in 0..2 {
                let (fd, seq) = match cached.take() {
                    Some((fd, seq)) => (fd, seq.wrapping_add(1)),
                    None => (diag_socket()?, 1),
                };
                match ask(&fd, seq, own, remote) {
                    Ok(uid) => {
                        *cached = Some((fd, seq));
                        return Ok(uid);
                    }
                    Err(e) => last_error = Some(e),
                }
            }
            Err(last_error.expect("asked twice"))
        })
    }

    /// One `SOCK_DIAG_BY_FAMILY` request on `fd`, numbered `seq`, and its answer.
    fn ask(
        fd: &std::os::fd::OwnedFd,
        seq: u32,
        own: SocketAddr,
        remote: SocketAddr,
    ) -> io::Result<Option<u32>> {
        let family = match own.ip() {
            IpAddr::V4(_) => libc::AF_INET,
            IpAddr::V6(_) => libc::AF_INET6,
        };
        let request = Request {
            header: NlMsgHdr {
                len: std::mem::size_of::<Request>() as u32,
                kind: SOCK_DIAG_BY_FAMILY,
                flags: libc::NLM_F_REQUEST as u16,
                seq,
                pid: 0,
            },
            family: family as u8,
            protocol: libc::IPPROTO_TCP as u8,
            states: !0,
            id: SockId {
                sport: own.port().to_be_bytes(),
                dport: remote.port().to_be_bytes(),
                src: addr_bytes(own.ip()),
                dst: addr_bytes(remote.ip()),
                interface: 0,
                cookie: NO_COOKIE,
            },
            ..Request::default()
        };
        let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
        // SAFETY: sends `size_of::<Request>()` bytes from a live, fully initialised value.
        let sent = unsafe {
            libc::send(
                raw,
                (&request as *const Request).cast(),
                std::mem::size_of::<Request>(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut answer = Answer::default();
        // SAFETY: receives at most `size_of::<Answer>()` bytes into a plain-data value every
        // bit pattern of which is valid.
        let got = unsafe {
            libc::recv(
                raw,
                (&mut answer as *mut Answer).cast(),
                std::mem::size_of::<Answer>(),
                0,
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = got as usize;
        if got >= std::mem::size_of::<NlMsgHdr>() && answer.header.seq != seq {
            return Err(io::Error::other("sock_diag answered another request"));
        }
        if got < std::mem::size_of::<NlMsgHdr>() || answer.header.kind == NLMSG_ERROR {
            return Ok(None);
        }
        if answer.header.kind != SOCK_DIAG_BY_FAMILY || got < std::mem::size_of::<Answer>() {
            return Err(io::Error::other("unexpected sock_diag answer"));
        }
        Ok(Some(answer.uid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_client_end_of_a_loopback_connection() {
        // Lines as the kernel prints them (x86-64, little-endian).
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1\n";
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(find_owner(table, client, server), Some(1001));
        assert_eq!(find_owner(table, server, client), Some(0));
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(find_owner(table, other, server), None);
        assert_eq!(
            parse_addr("00000000000000000000000001000000:1F90"),
            Some("[::1]:8080".parse().unwrap())
        );
    }

    #[test]
    fn a_real_loopback_connection_is_ours() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_end, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let uid = loopback_peer_uid(peer, server_end.local_addr().unwrap()).unwrap();
        assert_eq!(uid, Some(own_uid().unwrap()));
    }

    /// The netlink lookup itself (not the `/proc` fallback) finds both ends of a real
    /// connection over IPv4 and IPv6, and nothing for a closed one.
    #[test]
    fn netlink_finds_the_socket_and_only_it() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(host) else {
                eprintln!("{host}: loopback not available here, skipped");
                continue;
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server_end, peer) = listener.accept().unwrap();
            let local = server_end.local_addr().unwrap();
            let me = own_uid().unwrap();
            assert_eq!(diag::socket_uid(peer, local).unwrap(), Some(me), "{host}");
            assert_eq!(diag::socket_uid(local, peer).unwrap(), Some(me), "{host}");
            drop((client, server_end));
            let unused = SocketAddr::new(local.ip(), 1);
            assert_eq!(diag::socket_uid(unused, local).unwrap(), None, "{host}");
        }
    }
}
