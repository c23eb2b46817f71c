//! Who is on the other end of a loopback TCP connection. Linux lists every TCP socket in
//! `/proc/net/tcp` and `/proc/net/tcp6` with the uid that owns it; the client's end of a
//! loopback connection is the line whose local address is our peer address and whose remote
//! address is our local address. The server uses this to serve, without a token, only
//! connections opened by its own OS user (see `server::upgrade` and README's Security).

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
}
