//! TCP_NODELAY on the session's own connections to ZooKeeper.
//!
//! `zookeeper-client` 0.11 never sets TCP_NODELAY on its socket, so Nagle's algorithm holds
//! the second of two pipelined requests (create + list, for instance) until the first one is
//! acknowledged, which turns one round trip into two. Measured with `examples/bench/`.
//!
//! Its socket is private (no hook to it or to the connector), so the session manager finds it
//! from the outside (Linux: `/proc/self/fd`): it notes this process's TCP sockets connected to
//! one of the configured servers, by socket inode, just before a connect (or when its
//! connection is suspended), and after the connect (or the reconnect) sets the option on the
//! sockets to those servers that appeared since. Sockets that were already there, another
//! client's included, are left alone.
//!
//! Limits:
//! * another client of this process (another `Session`, or any other library) that opens a
//!   connection to one of the same servers in the same instant may get TCP_NODELAY too;
//! * when the client reconnects so fast that the session manager sees the new connection
//!   before it sees the old one drop, the new socket is already there when the sockets are
//!   noted, and keeps Nagle's algorithm: slower, never wrong;
//! * elsewhere than Linux nothing is done.

use std::net::SocketAddr;

/// The sockets of this process connected to some servers at one moment, by socket inode.
#[derive(Debug, Default)]
pub(crate) struct Sockets(std::collections::HashSet<u64>);

impl Sockets {
    /// Notes this process's TCP sockets connected to one of `peers` now.
    pub(crate) fn towards(peers: &[SocketAddr]) -> Sockets {
        Sockets(
            imp::towards(peers)
                .into_iter()
                .map(|(_, inode)| inode)
                .collect(),
        )
    }

    /// Sets TCP_NODELAY on the sockets connected to one of `peers` that were not there when
    /// `self` was noted. Returns how many it set.
    pub(crate) fn set_nodelay_on_new(&self, peers: &[SocketAddr]) -> usize {
        imp::towards(peers)
            .into_iter()
            .filter(|(_, inode)| !self.0.contains(inode))
            .filter(|&(fd, inode)| imp::set_nodelay(fd, inode))
            .count()
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::net::SocketAddr;
    use std::os::fd::{BorrowedFd, RawFd};

    use rustix::fs::FileType;

    /// `(descriptor, socket inode)` of this process's sockets connected to one of `peers`.
    pub(super) fn towards(peers: &[SocketAddr]) -> Vec<(RawFd, u64)> {
        if peers.is_empty() {
            return Vec::new();
        }
        sockets()
            .into_iter()
            .filter(|&(fd, inode)| {
                with_socket(fd, inode, |sock| {
                    let peer = rustix::net::getpeername(sock).ok()??;
                    SocketAddr::try_from(peer).ok()
                })
                .is_some_and(|peer| peers.contains(&peer))
            })
            .collect()
    }

    /// Sets TCP_NODELAY on `fd` if it is still the socket `inode`.
    pub(super) fn set_nodelay(fd: RawFd, inode: u64) -> bool {
        with_socket(fd, inode, |sock| {
            rustix::net::sockopt::set_tcp_nodelay(sock, true).ok()
        })
        .is_some()
    }

    /// Every socket of this process, from the `/proc/self/fd` links (`socket:[INODE]`).
    fn sockets() -> Vec<(RawFd, u64)> {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|entry| {
                let fd = entry.file_name().to_str()?.parse().ok()?;
                let link = std::fs::read_link(entry.path()).ok()?;
                let inode = link
                    .to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse()
                    .ok()?;
                Some((fd, inode))
            })
            .collect()
    }

    /// Runs `f` on descriptor `fd` if it is (still) the socket `inode`.
    fn with_socket<T>(
        fd: RawFd,
        inode: u64,
        f: impl FnOnce(BorrowedFd<'_>) -> Option<T>,
    ) -> Option<T> {
        // SAFETY: `fd` is a descriptor of this process that we do not own (the ZooKeeper
        // client's socket): its owner may close it, and the number may be reused, at any
        // moment. The borrow lives only for this call and is used only for fstat,
        // getpeername and setsockopt(TCP_NODELAY): none closes, reads or writes it, and on a
        // closed descriptor they fail with EBADF. fstat checks that the number still names
        // the socket we listed before anything else is done with it.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        let stat = rustix::fs::fstat(sock).ok()?;
        #[allow(clippy::useless_conversion)] // st_ino is a c_ulong on some targets
        let same = u64::from(stat.st_ino) == inode
            && FileType::from_raw_mode(stat.st_mode) == FileType::Socket;
        if same {
            f(sock)
        } else {
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::net::SocketAddr;

    /// Elsewhere: no sockets found (the option stays as the client left it).
    pub(super) fn towards(_peers: &[SocketAddr]) -> Vec<(i32, u64)> {
        Vec::new()
    }

    pub(super) fn set_nodelay(_fd: i32, _inode: u64) -> bool {
        false
    }
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nodelay(s: &std::net::TcpStream) -> bool {
        s.nodelay().unwrap()
    }

    /// Only the sockets opened after the note get the option; older ones, to the same
    /// server, keep theirs; sockets to other addresses are never touched.
    #[test]
    fn sets_nodelay_only_on_sockets_opened_since() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peers = [server.local_addr().unwrap()];
        let old = std::net::TcpStream::connect(peers[0]).unwrap();
        let before = Sockets::towards(&peers);
        assert_eq!(before.0.len(), 1, "the old socket is noted");
        let new = std::net::TcpStream::connect(peers[0]).unwrap();
        let elsewhere = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!nodelay(&new) && !nodelay(&old) && !nodelay(&elsewhere));
        assert_eq!(before.set_nodelay_on_new(&peers), 1);
        assert!(
            nodelay(&new),
            "the new socket to the server gets TCP_NODELAY"
        );
        assert!(
            !nodelay(&old),
            "a socket that was there before is left alone"
        );
        assert!(
            !nodelay(&elsewhere),
            "a socket to another address is left alone"
        );
    }
}
