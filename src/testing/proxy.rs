//! A TCP proxy that injects network faults between a ZooKeeper client and a server.
//!
//! Layout: one accept thread per proxy, two pump threads per proxied connection (one per
//! direction), all plain blocking `std::net`. Nothing runs on the caller's tokio runtime, so a
//! proxy may outlive the `#[tokio::test]` that created it (the shared server's proxy does).
//!
//! Live connections are kept in a registry guarded by one mutex, together with the `blocked`
//! flag and a drop epoch. [`FaultProxy::set_blocked`] and [`FaultProxy::drop_connections`]
//! shut down every registered socket while holding that mutex, and a new connection is only
//! registered under the same mutex after checking the flag and the epoch, so a connection can
//! never slip past a block that was set before it became live.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Error, Result};

/// How long the proxy waits for the upstream server to accept a connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A fault-injecting TCP proxy from `127.0.0.1:<free port>` to a target address.
///
/// Each proxy runs on its own threads (never on a tokio runtime), so it keeps working while
/// the tests that use it come and go. Dropping the proxy closes its listener and every
/// connection through it.
///
/// * [`set_blocked(true)`](FaultProxy::set_blocked) is a partition: live connections are
///   dropped at once and new ones are accepted and closed immediately, so a client sees
///   `Disconnected` and keeps failing to reconnect until [`set_blocked(false)`].
/// * [`drop_connections`](FaultProxy::drop_connections) is a single connection loss: the
///   client reconnects at once.
///
/// [`set_blocked(false)`]: FaultProxy::set_blocked
///
/// # Examples
///
/// ```no_run
/// use zk_recipes::testing::{shared_server, FaultProxy};
///
/// let proxy = FaultProxy::start(shared_server().addr()).unwrap();
/// let connect_string = proxy.addr().to_string();
/// // ... connect a client to `connect_string` ...
/// proxy.set_blocked(true); // the client goes Disconnected
/// proxy.set_blocked(false); // and reconnects
/// # drop(connect_string);
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("blocked", &self.is_blocked())
            .finish()
    }
}

struct Shared {
    state: Mutex<State>,
    closed: AtomicBool,
}

#[derive(Default)]
struct State {
    blocked: bool,
    /// Incremented by every `drop_connections` / `set_blocked(true)`.
    epoch: u64,
    next_id: u64,
    conns: HashMap<u64, Conn>,
}

/// Handles on both sockets of one proxied connection, used only to shut them down.
struct Conn {
    client: TcpStream,
    upstream: TcpStream,
}

impl Conn {
    fn shutdown(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state inconsistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn drop_all(state: &mut State) {
        state.epoch += 1;
        for (_, conn) in state.conns.drain() {
            conn.shutdown();
        }
    }

    fn remove(&self, id: u64) {
        if let Some(conn) = self.lock().conns.remove(&id) {
            conn.shutdown();
        }
    }
}

impl FaultProxy {
    /// Starts a proxy listening on a free port of `127.0.0.1`, forwarding to `target`.
    ///
    /// The target need not be up: connections made while it is down are accepted and closed.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if no port can be bound or the accept thread cannot be started.
    pub fn start(target: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Error::Harness(format!("fault proxy: cannot bind 127.0.0.1:0: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Harness(format!("fault proxy: local_addr: {e}")))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            closed: AtomicBool::new(false),
        });
        let accept_thread = std::thread::Builder::new()
            .name(format!("zk-proxy-{}", addr.port()))
            .spawn({
                let shared = shared.clone();
                move || accept_loop(listener, target, shared)
            })
            .map_err(|e| Error::Harness(format!("fault proxy: cannot spawn accept thread: {e}")))?;
        Ok(FaultProxy {
            addr,
            target,
            shared,
            accept_thread: Some(accept_thread),
        })
    }

    /// The address clients connect to (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address connections are forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Blocks or unblocks the proxy.
    ///
    /// Blocking drops every live connection before returning, and until unblocked every new
    /// connection is accepted and closed at once. Unblocking only lets new connections through.
    pub fn set_blocked(&self, blocked: bool) {
        let mut state = self.shared.lock();
        state.blocked = blocked;
        if blocked {
            Shared::drop_all(&mut state);
        }
    }

    /// Drops every live connection once, before returning, and keeps accepting new ones.
    pub fn drop_connections(&self) {
        Shared::drop_all(&mut self.shared.lock());
    }

    /// Whether the proxy is blocked (see [`set_blocked`](FaultProxy::set_blocked)).
    pub fn is_blocked(&self) -> bool {
        self.shared.lock().blocked
    }

    /// The number of live proxied connections.
    pub fn connection_count(&self) -> usize {
        self.shared.lock().conns.len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        Shared::drop_all(&mut self.shared.lock());
        // Wake the accept loop so it sees `closed` and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    for incoming in listener.incoming() {
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = incoming else {
            // EMFILE and the like: back off a little instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let epoch = {
            let state = shared.lock();
            if state.blocked {
                drop(client); // accept + close: the client sees EOF at once
                continue;
            }
            state.epoch
        };
        // Connecting upstream may take a while; do it off the accept thread.
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("zk-proxy-conn".into())
            .spawn(move || connect_and_pump(client, target, shared, epoch));
        if spawned.is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn connect_and_pump(client: TcpStream, target: SocketAddr, shared: Arc<Shared>, epoch: u64) {
    let Ok(upstream) = TcpStream::connect_timeout(&target, UPSTREAM_CONNECT_TIMEOUT) else {
        return; // target down: dropping `client` closes it
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (Ok(client_rx), Ok(upstream_tx), Ok(client_h), Ok(upstream_h)) = (
        client.try_clone(),
        upstream.try_clone(),
        client.try_clone(),
        upstream.try_clone(),
    ) else {
        return;
    };
    let id = {
        let mut state = shared.lock();
        if state.blocked || state.epoch != epoch || shared.closed.load(Ordering::SeqCst) {
            // Blocked or dropped while we were connecting: this connection never goes live.
            return;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.conns.insert(
            id,
            Conn {
                client: client_h,
                upstream: upstream_h,
            },
        );
        id
    };
    let reverse = std::thread::Builder::new()
        .name("zk-proxy-pump".into())
        .spawn({
            let shared = shared.clone();
            move || {
                pump(upstream, client);
                shared.remove(id);
            }
        });
    if reverse.is_err() {
        shared.remove(id);
        return;
    }
    pump(client_rx, upstream_tx);
    shared.remove(id);
}

/// Copies `from` to `to` until EOF or an error on either side.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
