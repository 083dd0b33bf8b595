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
//!
//! # The fault scheduler
//!
//! The pumps read whole ZooKeeper frames (a 4-byte big-endian length, then the packet), so the
//! proxy knows where each request and reply starts and ends. The first frame of each direction
//! of a connection is the session handshake (`ConnectRequest` / `ConnectResponse`); every
//! later client frame starts with its `xid`. Ordinary requests have `xid >= 0` (pings, auth
//! and set-watches use negative ones), and the server answers each with the same `xid`.
//!
//! A [`Fault`] armed with [`FaultProxy::arm`] counts the client's ordinary requests from the
//! moment it is armed (across reconnects: the count is the proxy's, not one connection's), and
//! strikes once, at the [`FaultPoint`] relative to the k-th of them:
//!
//! * [`FaultPoint::BeforeRequest`]: the request is held back; a cut drops it unsent, so the
//!   server never sees it, and a stall delays it and everything after it;
//! * [`FaultPoint::BeforeReply`]: the request reaches the server, and the fault strikes when its
//!   reply comes back: a cut drops the reply (the request *was* applied, the client sees a
//!   connection loss: "outcome unknown"), a stall delays it and everything after it;
//! * [`FaultPoint::AfterReply`]: the reply is delivered, then the connection is cut, or both
//!   directions stall (what the client sends next, say the watch it arms after a grant, is
//!   held too).
//!
//! A cut shuts down the live connection and refuses new ones for
//! [`FaultAction::Cut::refuse_for`]. A fault made [`Fault::only`] for one [`Op`] counts only the
//! requests of that kind (the opcode that follows the `xid`), so that a request the client
//! sends in the background (a guard arming its own-node watch, say) cannot take the count of the
//! one a test means to strike. Frames that do not look like ZooKeeper's (a length below
//! zero or above 16 MiB, say a four-letter word or TLS) switch that direction to a plain byte
//! copy, so such connections pass through untouched and unscheduled.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Error, Result};

/// How long the proxy waits for the upstream server to accept a connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Frames longer than this are not ZooKeeper's (its `jute.maxbuffer` defaults to 1 MiB).
const MAX_FRAME: usize = 16 << 20;

/// Where, relative to the client's own requests, an armed [`Fault`] strikes. `k` counts the
/// client's ordinary requests (not pings, auth or set-watches) from 1, starting when the fault
/// is armed; `k = 0` is taken as 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Before the k-th request is forwarded: the server has not seen it.
    BeforeRequest(u32),
    /// After the k-th request was forwarded, when its reply arrives from the server and before
    /// it is passed on: the server has applied it, the client does not know.
    BeforeReply(u32),
    /// Right after the reply to the k-th request was passed on to the client.
    AfterReply(u32),
}

/// What an armed [`Fault`] does when it strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// Shut down the live connection (the client sees a connection loss; a frame held at the
    /// fault point is dropped), and accept-and-close every new connection for `refuse_for`.
    Cut {
        /// How long new connections are refused after the cut (zero: the client may
        /// reconnect at once).
        refuse_for: Duration,
    },
    /// Hold traffic for the given time: at [`FaultPoint::BeforeRequest`] the client-to-server
    /// direction (from that request on), at [`FaultPoint::BeforeReply`] the server-to-client
    /// direction (from that reply on), at [`FaultPoint::AfterReply`] both directions. Frames
    /// arriving meanwhile are queued in order, not lost, unless the client gives up on the
    /// connection first.
    Stall(Duration),
}

/// A one-shot fault: `action` at `point`. Arm it with [`FaultProxy::arm`].
///
/// By default it counts every ordinary request; [`only`](Fault::only) makes it count the
/// requests of one [`Op`] alone.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::testing::{shared_server, Fault, FaultAction, FaultPoint, FaultProxy};
///
/// let proxy = FaultProxy::start(shared_server().addr()).unwrap();
/// // The client's next request reaches the server, but its reply is lost with the connection,
/// // and the client cannot reconnect for 50 ms.
/// proxy.arm(Fault::new(
///     FaultPoint::BeforeReply(1),
///     FaultAction::Cut { refuse_for: Duration::from_millis(50) },
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fault {
    /// Where it strikes.
    pub point: FaultPoint,
    /// What it does.
    pub action: FaultAction,
    /// The one kind of request it counts (`None`: every ordinary request).
    pub only: Option<Op>,
}

impl Fault {
    /// A fault doing `action` at `point`, counting every ordinary request.
    pub const fn new(point: FaultPoint, action: FaultAction) -> Fault {
        Fault {
            point,
            action,
            only: None,
        }
    }

    /// The same fault, counting only requests of kind `op`: `FaultPoint::BeforeRequest(1)`
    /// is then the first `op` request after the fault is armed, whatever else the client
    /// sends meanwhile.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use zk_recipes::testing::{shared_server, Fault, FaultAction, FaultPoint, FaultProxy, Op};
    ///
    /// let proxy = FaultProxy::start(shared_server().addr()).unwrap();
    /// // The client's next transaction never reaches the server; a read sent before it, in
    /// // the background or not, goes through.
    /// proxy.arm(
    ///     Fault::new(
    ///         FaultPoint::BeforeRequest(1),
    ///         FaultAction::Cut { refuse_for: Duration::from_millis(100) },
    ///     )
    ///     .only(Op::Multi),
    /// );
    /// ```
    pub const fn only(self, op: Op) -> Fault {
        Fault {
            only: Some(op),
            ..self
        }
    }
}

/// A kind of client request, by its opcode in ZooKeeper's protocol (see [`Fault::only`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `create` (opcode 1).
    Create,
    /// `delete` (2).
    Delete,
    /// `exists` (3).
    Exists,
    /// `getData` (4).
    GetData,
    /// `setData` (5).
    SetData,
    /// `getChildren` (8).
    GetChildren,
    /// `getChildren2`, a listing with the parent's stat (12).
    GetChildren2,
    /// `multi`, a transaction (14).
    Multi,
    /// `create2`, a create answered with the node's stat (15).
    Create2,
    /// `removeWatches` (18).
    RemoveWatches,
    /// Any other opcode.
    Code(i32),
}

impl Op {
    /// The opcode on the wire.
    pub const fn code(self) -> i32 {
        match self {
            Op::Create => 1,
            Op::Delete => 2,
            Op::Exists => 3,
            Op::GetData => 4,
            Op::SetData => 5,
            Op::GetChildren => 8,
            Op::GetChildren2 => 12,
            Op::Multi => 14,
            Op::Create2 => 15,
            Op::RemoveWatches => 18,
            Op::Code(code) => code,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.action {
            FaultAction::Cut { refuse_for } => write!(f, "cut (refusing {refuse_for:?})")?,
            FaultAction::Stall(d) => write!(f, "stall {d:?}")?,
        }
        let of = match self.only {
            Some(op) => format!(" ({op:?} requests only)"),
            None => String::new(),
        };
        match self.point {
            FaultPoint::BeforeRequest(k) => write!(f, " before request #{k} is forwarded{of}"),
            FaultPoint::BeforeReply(k) => write!(f, " before the reply to request #{k}{of}"),
            FaultPoint::AfterReply(k) => write!(f, " after the reply to request #{k}{of}"),
        }
    }
}

/// What became of the fault last armed on a proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultStatus {
    /// No fault was armed (or it was disarmed).
    #[default]
    Idle,
    /// Armed; `seen` of the client's requests have been counted so far.
    Armed {
        /// The fault.
        fault: Fault,
        /// Requests counted since it was armed.
        seen: u32,
    },
    /// It struck at `at`.
    Fired {
        /// The fault.
        fault: Fault,
        /// When it struck.
        at: Instant,
    },
}

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
    /// Ordinary client requests forwarded since the proxy started.
    requests: AtomicU64,
}

#[derive(Default)]
struct State {
    blocked: bool,
    /// Set by a fired cut: connections are refused until then.
    refuse_until: Option<Instant>,
    /// The armed (or last fired) fault.
    fault: FaultStatus,
    /// The request whose reply an armed `BeforeReply`/`AfterReply` fault waits for.
    target_xid: Option<i32>,
    /// Per direction (client-to-server, server-to-client): hold frames until then.
    stall_until: [Option<Instant>; 2],
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

    fn refusing(state: &State) -> bool {
        state.blocked || state.refuse_until.is_some_and(|t| Instant::now() < t)
    }

    /// Fires the armed fault on connection `id`: returns what the pump must do with the frame
    /// it holds.
    fn fire(state: &mut State, id: u64, fault: Fault) -> Step {
        let now = Instant::now();
        state.fault = FaultStatus::Fired { fault, at: now };
        state.target_xid = None;
        match fault.action {
            FaultAction::Cut { refuse_for } => {
                state.refuse_until = Some(now + refuse_for);
                if let Some(conn) = state.conns.remove(&id) {
                    conn.shutdown();
                }
                Step::Cut
            }
            FaultAction::Stall(d) => {
                let until = Some(now + d);
                match fault.point {
                    FaultPoint::BeforeRequest(_) => state.stall_until[Dir::Up as usize] = until,
                    FaultPoint::BeforeReply(_) => state.stall_until[Dir::Down as usize] = until,
                    FaultPoint::AfterReply(_) => state.stall_until = [until, until],
                }
                Step::Forward
            }
        }
    }

    /// Called by a pump with each frame before it is forwarded (`xid` is `None` for the
    /// handshake; `op` is a request's opcode, when the frame is long enough to hold one).
    /// Returns what to do with it.
    fn before_forward(&self, id: u64, dir: Dir, xid: Option<i32>, op: Option<i32>) -> Step {
        let mut state = self.lock();
        let FaultStatus::Armed { fault, seen } = state.fault else {
            return Step::Forward;
        };
        let counted = fault.only.is_none_or(|only| op == Some(only.code()));
        match (dir, xid) {
            (Dir::Up, Some(xid)) if xid >= 0 && counted => {
                let seen = seen + 1;
                state.fault = FaultStatus::Armed { fault, seen };
                match fault.point {
                    FaultPoint::BeforeRequest(k) if seen == k.max(1) => {
                        Self::fire(&mut state, id, fault)
                    }
                    FaultPoint::BeforeReply(k) | FaultPoint::AfterReply(k) if seen == k.max(1) => {
                        state.target_xid = Some(xid);
                        Step::Forward
                    }
                    _ => Step::Forward,
                }
            }
            (Dir::Down, Some(xid)) if state.target_xid == Some(xid) => match fault.point {
                FaultPoint::BeforeReply(_) => Self::fire(&mut state, id, fault),
                _ => Step::FireAfter,
            },
            _ => Step::Forward,
        }
    }

    /// Called by a pump after it forwarded a frame for which `before_forward` said `FireAfter`.
    fn after_forward(&self, id: u64) -> Step {
        let mut state = self.lock();
        match state.fault {
            FaultStatus::Armed { fault, .. } => Self::fire(&mut state, id, fault),
            _ => Step::Forward,
        }
    }

    /// How long a pump of direction `dir` must hold its next frame.
    fn stall_left(&self, dir: Dir) -> Option<Duration> {
        let until = self.lock().stall_until[dir as usize]?;
        until.checked_duration_since(Instant::now())
    }
}

/// A direction of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Client to server.
    Up = 0,
    /// Server to client.
    Down = 1,
}

/// What a pump does with the frame it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Forward,
    /// Forward it, then fire the armed fault.
    FireAfter,
    /// The connection was cut: drop the frame and stop.
    Cut,
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
            requests: AtomicU64::new(0),
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

    /// Arms `fault`, replacing any fault armed before. Requests are counted from now on; the
    /// fault strikes once (see the module notes and [`FaultPoint`]).
    pub fn arm(&self, fault: Fault) {
        let mut state = self.shared.lock();
        state.fault = FaultStatus::Armed { fault, seen: 0 };
        state.target_xid = None;
    }

    /// Disarms a fault that has not struck yet, and ends any stall or refusal in progress.
    pub fn disarm(&self) {
        let mut state = self.shared.lock();
        if matches!(state.fault, FaultStatus::Armed { .. }) {
            state.fault = FaultStatus::Idle;
        }
        state.target_xid = None;
        state.stall_until = [None, None];
        state.refuse_until = None;
    }

    /// What became of the fault last armed.
    pub fn fault_status(&self) -> FaultStatus {
        self.shared.lock().fault
    }

    /// How many ordinary requests (not pings, auth or set-watches) clients have sent through
    /// this proxy since it started. A request is counted just before it is written to the
    /// server, so it is counted before its answer can reach the client.
    pub fn requests_forwarded(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
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
            if Shared::refusing(&state) {
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
        if Shared::refusing(&state) || state.epoch != epoch || shared.closed.load(Ordering::SeqCst)
        {
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
                pump(upstream, client, &shared, id, Dir::Down);
                shared.remove(id);
            }
        });
    if reverse.is_err() {
        shared.remove(id);
        return;
    }
    pump(client_rx, upstream_tx, &shared, id, Dir::Up);
    shared.remove(id);
}

/// Copies `from` to `to` frame by frame, until EOF, an error on either side, or a cut;
/// applies the armed fault and stalls. Falls back to a plain copy for non-ZooKeeper bytes.
fn pump(from: TcpStream, mut to: TcpStream, shared: &Shared, id: u64, dir: Dir) {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let mut handshake = true;
    let mut frame = Vec::with_capacity(1024);
    loop {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            return;
        }
        let n = i32::from_be_bytes(len);
        if n < 0 || n as usize > MAX_FRAME {
            // Not ZooKeeper framing: pass the rest through as it comes.
            if to.write_all(&len).is_ok() {
                let _ = std::io::copy(&mut from, &mut to);
            }
            return;
        }
        frame.clear();
        frame.extend_from_slice(&len);
        frame.resize(4 + n as usize, 0);
        if from.read_exact(&mut frame[4..]).is_err() {
            return;
        }
        let xid = if handshake || n < 4 {
            None
        } else {
            Some(i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]))
        };
        let op = if xid.is_some() && n >= 8 {
            Some(i32::from_be_bytes([
                frame[8], frame[9], frame[10], frame[11],
            ]))
        } else {
            None
        };
        handshake = false;
        let step = shared.before_forward(id, dir, xid, op);
        if step == Step::Cut {
            return;
        }
        while let Some(left) = shared.stall_left(dir) {
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
        // Counted before the write: counted after it, a request could be answered, and the
        // client could act on the answer (a `close()` return), before this thread counted it.
        // A test that reads the count after that saw the request as sent later (a CI failure of
        // `the_sweeper_only_reads_while_the_acl_stays_broken_and_stops_at_close` under load:
        // "requests sent after close()", 1).
        if dir == Dir::Up && xid.is_some_and(|x| x >= 0) {
            shared.requests.fetch_add(1, Ordering::Relaxed);
        }
        if to.write_all(&frame).is_err() {
            return;
        }
        if step == Step::FireAfter && shared.after_forward(id) == Step::Cut {
            return;
        }
    }
}
