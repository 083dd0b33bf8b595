//! TCP_NODELAY for the ZooKeeper connection.
//!
//! `zookeeper-client` 0.11 never sets TCP_NODELAY on its socket, so Nagle's algorithm holds
//! the second of two pipelined requests (create + list, for instance) until the first one is
//! acknowledged, which turns one round trip into two. Its socket is private, so after each
//! (re)connect the session manager finds this process's TCP sockets whose peer is one of the
//! configured ZooKeeper servers (Linux: `/proc/self/fd`) and sets the option on them. Setting
//! it on another socket to the same server is harmless. Measured with `examples/bench.rs`.

use std::net::SocketAddr;

/// Sets TCP_NODELAY on every TCP socket of this process connected to one of `peers`.
/// Returns how many sockets it set.
#[cfg(target_os = "linux")]
pub(crate) fn set_nodelay_towards(peers: &[SocketAddr]) -> usize {
    use std::os::fd::RawFd;

    if peers.is_empty() {
        return 0;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut set = 0;
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|f| f.parse::<RawFd>().ok())
        else {
            continue;
        };
        if peer_of(fd).is_some_and(|p| peers.contains(&p)) {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt reads `one` for the given length; on a descriptor that is not
            // a TCP socket (or was closed meanwhile) it fails without effect.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r == 0 {
                set += 1;
            }
        }
    }
    set
}

#[cfg(target_os = "linux")]
fn peer_of(fd: std::os::fd::RawFd) -> Option<SocketAddr> {
    // SAFETY: getpeername writes at most `len` bytes into `storage`, a properly sized and
    // aligned sockaddr_storage; it fails (ENOTSOCK, ENOTCONN, EBADF) on other descriptors.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getpeername(fd, &mut storage as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
            return None;
        }
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                let a = &*(&storage as *const _ as *const libc::sockaddr_in);
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 => {
                let a = &*(&storage as *const _ as *const libc::sockaddr_in6);
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
            }
            _ => None,
        }
    }
}

/// Elsewhere: nothing (the option stays as the client left it).
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_nodelay_towards(_peers: &[SocketAddr]) -> usize {
    0
}

/// Resolves a `host:port[,host:port]` string; hosts that do not resolve are skipped.
pub(crate) async fn resolve(hosts: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for host in hosts.split(',') {
        if let Ok(addrs) = tokio::net::lookup_host(host.trim()).await {
            out.extend(addrs);
        }
    }
    out
}
