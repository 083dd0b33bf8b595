//! The session manager: one ZooKeeper session shared by every recipe, replaced after expiry.
//!
//! # Model
//!
//! A [`Session`] owns a supervisor task that holds the current *epoch*: one `zookeeper-client`
//! session, numbered from 1. An epoch ends when ZooKeeper expires the session, when the server
//! hands out a different session id on reconnect, or when the [`LossPolicy`] gives up on it.
//! Ending an epoch cancels its token (every lock, lease and leadership taken in it reports
//! [`lost`](crate::LockGuard::lost) at once), closes that client so its ephemeral nodes are
//! not left behind on the server, and starts a new session with bounded exponential backoff.
//! State changes are published on a [`tokio::sync::watch`] channel as [`SessionEvent`]s.
//!
//! # Why the `Grace` policy measures from the last *sent* request that was answered
//!
//! The server expires a session when it has heard nothing from the client for the negotiated
//! timeout `T`. Every request we send and see answered was received by the server no earlier
//! than when we sent it, so the server cannot expire the session before `sent + T`. The manager
//! records, on the monotonic clock, the send instant of the newest answered request (its own
//! heartbeat keeps one going every `T/5` when the recipes are idle), and declares the epoch
//! lost at `sent + T - T*15%`: strictly before the server may hand the lock to someone else,
//! with a 15% margin for our own reaction (signalling a child process, say). Because the check
//! is a deadline on the monotonic clock, a process that was itself paused (SIGSTOP, a long GC
//! pause, a VM freeze) finds the deadline passed the moment it runs again and reports the loss
//! before anything else, instead of trusting a connection state that is stale.
//!
//! `OnSuspend` is stricter (lost on the first disconnect, as Curator's default); `OnExpiry` is
//! laxer (lost only when the session is known expired: by the server, or by the client's own
//! timer at 7/5 `T` when partitioned), which risks acting as holder after the server gave the
//! lock away.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::Either;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zookeeper_client as zk;

use crate::error::{Error, LossReason, Result};

type ZkResult<T> = std::result::Result<T, zk::Error>;

/// One write of a guarded transaction (see [`LockGuard::guarded`](crate::LockGuard::guarded)):
/// applied only together with the check that the guard's node is still ours.
///
/// # Examples
///
/// ```
/// use zk_recipes::Op;
///
/// let ops = [
///     Op::check("/app/config", 3),
///     Op::set_data("/app/config", "v4", Some(3)),
///     Op::create("/app/config-history/4", "v4"),
///     Op::delete("/app/config-history/1", None),
/// ];
/// assert_eq!(ops[1].path(), "/app/config");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub enum Op {
    /// Create a persistent node with `data`, under `acls` (empty: open to everyone).
    Create {
        /// The node to create; its parent must exist.
        path: String,
        /// Its data.
        data: Vec<u8>,
        /// Its ACL; empty for `world:anyone` with every permission.
        acls: Vec<zk::Acl>,
    },
    /// Set a node's data, at `version` if given.
    SetData {
        /// The node.
        path: String,
        /// The new data.
        data: Vec<u8>,
        /// The version the node must have, or `None` for any.
        version: Option<i32>,
    },
    /// Delete a node, at `version` if given.
    Delete {
        /// The node.
        path: String,
        /// The version the node must have, or `None` for any.
        version: Option<i32>,
    },
    /// Require a node to exist at `version` (`-1`: any version).
    Check {
        /// The node.
        path: String,
        /// The version it must have; `-1` for any.
        version: i32,
    },
}

impl Op {
    /// A persistent node open to everyone (use [`Op::Create`] for an ACL).
    pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Op {
        Op::Create {
            path: path.into(),
            data: data.into(),
            acls: Vec::new(),
        }
    }

    /// Sets `path`'s data, at `version` if given.
    pub fn set_data(path: impl Into<String>, data: impl Into<Vec<u8>>, version: Option<i32>) -> Op {
        Op::SetData {
            path: path.into(),
            data: data.into(),
            version,
        }
    }

    /// Deletes `path`, at `version` if given.
    pub fn delete(path: impl Into<String>, version: Option<i32>) -> Op {
        Op::Delete {
            path: path.into(),
            version,
        }
    }

    /// Requires `path` to exist at `version` (`-1`: any).
    pub fn check(path: impl Into<String>, version: i32) -> Op {
        Op::Check {
            path: path.into(),
            version,
        }
    }

    /// The node this operation touches.
    pub fn path(&self) -> &str {
        match self {
            Op::Create { path, .. }
            | Op::SetData { path, .. }
            | Op::Delete { path, .. }
            | Op::Check { path, .. } => path,
        }
    }
}

/// How a guarded transaction proves, inside ZooKeeper, that the guard's node is still ours.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GuardCheck<'a> {
    /// A queue node: its name is never used again, so its existence is the proof.
    Exists(&'a str),
    /// The simple lock's fixed path, reused by later holders: write the node's own data back
    /// at the version just read, which needs WRITE that only our session's identity has.
    Owned {
        path: &'a str,
        data: &'a [u8],
        version: i32,
    },
}

/// When a holder of ephemeral nodes (a lock, a lease, a leadership) counts them as lost.
///
/// # Examples
///
/// ```
/// use zk_recipes::LossPolicy;
///
/// assert_eq!(LossPolicy::default(), LossPolicy::Grace);
/// assert_eq!("suspend".parse::<LossPolicy>().unwrap(), LossPolicy::OnSuspend);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LossPolicy {
    /// Lost only when the session is known to have expired.
    OnExpiry,
    /// Lost as soon as the connection drops.
    OnSuspend,
    /// Lost once the connection has been down long enough that the server may have expired the
    /// session (see the module docs). The default.
    #[default]
    Grace,
}

impl std::str::FromStr for LossPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "grace" => Ok(LossPolicy::Grace),
            "suspend" => Ok(LossPolicy::OnSuspend),
            "expiry" => Ok(LossPolicy::OnExpiry),
            other => Err(Error::InvalidArgument(format!(
                "unknown loss policy {other:?}: use grace, suspend or expiry"
            ))),
        }
    }
}

/// A change in the state of the managed session.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// Not connected yet (before the first session, or between an expiry and the next one).
    Connecting,
    /// A new ZooKeeper session is established. `epoch` counts sessions from 1.
    Connected {
        /// The epoch number of this session.
        epoch: u64,
        /// ZooKeeper's session id.
        session_id: i64,
    },
    /// The connection dropped; the session may still be alive on the server.
    Suspended {
        /// The epoch that is suspended.
        epoch: u64,
    },
    /// The connection is back and the session is the same.
    Reconnected {
        /// The epoch that reconnected.
        epoch: u64,
    },
    /// The epoch ended: the session expired, or the loss policy gave up on it. Everything held
    /// in it is lost; a new session is on its way.
    Expired {
        /// The epoch that ended.
        epoch: u64,
    },
    /// [`Session::close`] was called or every handle was dropped. Terminal.
    Closed,
}

/// Builds a [`Session`]. Created by [`Session::builder`].
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::{LossPolicy, Session};
///
/// let session = Session::builder("127.0.0.1:2181")
///     .with_session_timeout(Duration::from_secs(6))
///     .with_chroot("/myapp")
///     .with_loss_policy(LossPolicy::Grace)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until connect() is called"]
pub struct SessionBuilder {
    hosts: String,
    session_timeout: Duration,
    connect_timeout: Option<Duration>,
    chroot: Option<String>,
    auth: Option<(String, String)>,
    loss_policy: LossPolicy,
    #[cfg(feature = "tls")]
    tls: Option<zk::TlsOptions>,
}

impl std::fmt::Debug for SessionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBuilder")
            .field("hosts", &self.hosts)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("chroot", &self.chroot)
            .field("auth", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &cfg!(feature = "tls").then(|| self.uses_tls()))
            .field("loss_policy", &self.loss_policy)
            .finish()
    }
}

impl SessionBuilder {
    /// Session timeout to ask for (default 10 s). The server clamps it to 2..20 ticks.
    pub const fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) tries before returning [`Error::Unreachable`]
    /// (default: the session timeout).
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Root every path under `chroot` (default: none). The node must exist.
    pub fn with_chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// Checks, before connecting, that `path` may hold a recipe in the sessions this builder
    /// makes: the checks every recipe's constructor makes (a well-formed absolute path, not
    /// in ZooKeeper's reserved `/zookeeper` tree, judged with the chroot). Nothing is sent: a
    /// command-line tool can tell a usage error from an unreachable server.
    ///
    /// ```
    /// use zk_recipes::{Error, Session};
    ///
    /// let under_app = Session::builder("127.0.0.1:2181").with_chroot("/app");
    /// assert!(under_app.check_recipe_path("/zookeeper/jobs").is_ok());
    /// let plain = Session::builder("127.0.0.1:2181");
    /// assert!(matches!(
    ///     plain.check_recipe_path("/zookeeper/jobs"),
    ///     Err(Error::InvalidPath { .. })
    /// ));
    /// assert!(matches!(plain.check_recipe_path("jobs"), Err(Error::InvalidPath { .. })));
    /// ```
    pub fn check_recipe_path(&self, path: &str) -> Result<()> {
        let chroot = self.chroot.as_deref().filter(|c| *c != "/");
        crate::path::validate_recipe_path(path, chroot)
    }

    /// Authenticates with the `digest` scheme as `user:password` (default: no auth).
    pub fn with_digest_auth(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Connects with TLS (feature `tls`; default: plain TCP): the hosts must be the servers'
    /// secure client ports (`secureClientPort`), whose certificates are checked against the
    /// CA of `options`, e.g. `zk::TlsOptions::new().with_pem_ca(pem)?`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn with_tls(mut self, options: zk::TlsOptions) -> Self {
        self.tls = Some(options);
        self
    }

    fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// When holders count their ephemeral nodes as lost (default [`LossPolicy::Grace`]).
    pub const fn with_loss_policy(mut self, policy: LossPolicy) -> Self {
        self.loss_policy = policy;
        self
    }

    /// Connects and starts the session manager, on the current tokio runtime. The session's
    /// handles may be used from any runtime, but the session lives as long as this one: when it
    /// ends, the session is closed (its guards report lost, later calls answer
    /// [`Error::Closed`]).
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for an empty hosts string, a zero or too large timeout,
    ///   or a user name with `:`; [`Error::InvalidPath`] for a malformed chroot. No connection
    ///   is attempted.
    /// * [`Error::Unreachable`] if no server answered within the connect timeout.
    /// * [`Error::InvalidPath`] if the chroot does not exist on the server.
    /// * [`Error::ZooKeeper`] for an authentication failure.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a session half made is dropped, which closes it.
    pub async fn connect(self) -> Result<Session> {
        let mut config = self.validate()?;
        config.peers = crate::net::resolve(&config.hosts).await;
        let deadline = Instant::now() + config.connect_timeout;
        let client = connect_once(&config, deadline).await?;
        if config.chroot.is_some() {
            match client.check_stat("/").await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(Error::InvalidPath {
                        path: config.chroot.clone().unwrap_or_default(),
                        reason: "the chroot does not exist on the server (create it first)",
                    })
                }
                Err(err) => return Err(Error::zk("check chroot", "/", err)),
            }
        }
        Ok(Session::start(config, client))
    }

    fn validate(self) -> Result<Config> {
        let given = self.hosts.trim();
        if given.is_empty() {
            return Err(Error::InvalidArgument(
                "the hosts string is empty: give host:port[,host:port...]".into(),
            ));
        }
        // Each entry trimmed (`zk1:2181, zk2:2181` is common), and passed on without the
        // spaces: the client library does not trim, so a host after ", " never resolved and
        // the session had no failover to it.
        let mut entries = Vec::new();
        for host in given.split(',').map(str::trim) {
            let ok = host
                .rsplit_once(':')
                .map(|(h, p)| {
                    !h.is_empty()
                        && !h.contains('/')
                        && !h.contains(char::is_whitespace)
                        && p.parse::<u16>().is_ok_and(|p| p > 0)
                })
                .unwrap_or(false);
            if !ok {
                return Err(Error::InvalidArgument(format!(
                    "malformed host {host:?} in {given:?}: give host:port[,host:port...] (put a chroot in with_chroot)"
                )));
            }
            entries.push(host);
        }
        let hosts = entries.join(",");
        check_timeout("session timeout", self.session_timeout)?;
        let connect_timeout = self.connect_timeout.unwrap_or(self.session_timeout);
        check_timeout("connect timeout", connect_timeout)?;
        if let Some(chroot) = &self.chroot {
            crate::path::validate_chroot(chroot)?;
        }
        if let Some((user, _)) = &self.auth {
            if user.is_empty() || user.contains(':') {
                return Err(Error::InvalidArgument(format!(
                    "digest user {user:?} must be non-empty and have no ':'"
                )));
            }
        }
        let chroot = self.chroot.filter(|c| c != "/");
        Ok(Config {
            hosts,
            session_timeout: self.session_timeout,
            connect_timeout,
            chroot,
            auth: self.auth,
            loss_policy: self.loss_policy,
            #[cfg(feature = "tls")]
            tls: self.tls,
            peers: Vec::new(),
            identity: Arc::new(Identity::new()),
        })
    }
}

/// `base` scaled by a random factor in [0.5, 1.5), so that the clients of a fleet that lost
/// the same ensemble do not all come back in the same instant.
fn jittered(base: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() & 0xffff) as f64 / 65536.0;
    base.mul_f64(0.5 + r)
}

fn check_timeout(what: &str, d: Duration) -> Result<()> {
    if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
        return Err(Error::InvalidArgument(format!(
            "{what} {d:?} is out of range: use 100ms..1h"
        )));
    }
    Ok(())
}

/// A digest identity that only this session manager knows: a random user and password made
/// when the [`Session`] is built, added to every ZooKeeper session it opens. Contender nodes
/// grant WRITE and ADMIN to this identity alone (see [`Epoch::contender_acls`]), so a change
/// of a contender node's data can only come from the session that created it, which writes
/// nothing but its release mark (and, for a semaphore lease, a version bump on its grant).
/// That is what lets a waiter trust a data-change notification as a release; a foreign
/// `set` (an operator, Curator's `Revoker`) is refused with `NoAuth` instead of handing the
/// lock on.
pub(crate) struct Identity {
    /// `user:password`, sent in the `digest` auth packet.
    credentials: String,
    /// `user:base64(sha1(user:password))`, the id of a `digest` ACL entry.
    acl_id: String,
}

impl Identity {
    fn new() -> Identity {
        let user = format!("zk-recipes-{}", uuid::Uuid::new_v4().simple());
        let password = uuid::Uuid::new_v4().simple().to_string();
        Identity {
            acl_id: digest_acl_id(&user, &password),
            credentials: format!("{user}:{password}"),
        }
    }
}

/// The id of a `digest` ACL entry for `user` with `password`: `user:base64(sha1(user:password))`,
/// as ZooKeeper's `DigestAuthenticationProvider` makes it (also behind
/// `testing::digest_acl_id`, for the bench's raw clients that mimic our contender ACL).
pub(crate) fn digest_acl_id(user: &str, password: &str) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let hash = base64::engine::general_purpose::STANDARD
        .encode(sha1::Sha1::digest(format!("{user}:{password}")));
    format!("{user}:{hash}")
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("Identity")
            .field("user", &self.acl_id.split(':').next())
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Config {
    hosts: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    chroot: Option<String>,
    auth: Option<(String, String)>,
    loss_policy: LossPolicy,
    #[cfg(feature = "tls")]
    tls: Option<zk::TlsOptions>,
    /// The servers' resolved addresses, for TCP_NODELAY (see `crate::net`).
    peers: Vec<std::net::SocketAddr>,
    /// This session manager's own digest identity (see [`Identity`]).
    identity: Arc<Identity>,
}

impl Config {
    fn connect_string(&self) -> String {
        match &self.chroot {
            Some(c) => format!("{}{}", self.hosts, c),
            None => self.hosts.clone(),
        }
    }
}

/// Connects `connector` to `target`, over TLS when the configuration asks for it.
#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
async fn dial(config: &Config, connector: zk::Connector, target: &str) -> ZkResult<zk::Client> {
    #[cfg(feature = "tls")]
    if let Some(tls) = &config.tls {
        return connector.with_tls(tls.clone()).secure_connect(target).await;
    }
    connector.connect(target).await
}

/// A connector with the session's settings and identities (the user's digest, if any, and
/// the manager's own, which owns our nodes' WRITE permission): every connect of ours, a new
/// epoch's or the server-side close of an ended one's, authenticates alike (a server that
/// enforces authentication refuses a session without it).
fn connector(config: &Config, connection_timeout: Duration) -> zk::Connector {
    let mut connector = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(connection_timeout.min(config.session_timeout))
        .with_fail_eagerly();
    if let Some((user, password)) = &config.auth {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    connector.with_auth("digest", config.identity.credentials.as_bytes())
}

/// Connects one `zookeeper-client` session, trying until `deadline`.
async fn connect_once(config: &Config, deadline: Instant) -> Result<zk::Client> {
    let unreachable = || Error::Unreachable {
        hosts: config.hosts.clone(),
        timeout: config.connect_timeout,
    };
    let target = config.connect_string();
    // The sockets to the servers before this connect: ours is one that appears since.
    let before = crate::net::Sockets::towards(&config.peers);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unreachable());
        }
        let connector = connector(config, left);
        match tokio::time::timeout(left, dial(config, connector, &target)).await {
            Err(_) => return Err(unreachable()),
            Ok(Ok(client)) => {
                before.set_nodelay_on_new(&config.peers);
                return Ok(client);
            }
            Ok(Err(zk::Error::AuthFailed)) => {
                return Err(Error::ZooKeeper {
                    op: "authenticate",
                    path: "/".into(),
                    source: zk::Error::AuthFailed,
                })
            }
            Ok(Err(zk::Error::BadArguments(reason))) => {
                return Err(Error::InvalidArgument(format!(
                    "connect string {target:?}: {reason}"
                )))
            }
            Ok(Err(err)) => {
                tracing::debug!(%err, "connect attempt failed");
                tokio::time::sleep(Duration::from_millis(100).min(left)).await;
            }
        }
    }
}

/// Health of the current epoch, on the monotonic clock.
#[derive(Debug)]
struct Health {
    base: Instant,
    /// Nanoseconds since `base` at which the newest answered request was sent.
    last_answered_sent: AtomicU64,
}

impl Health {
    fn new() -> Arc<Health> {
        Arc::new(Health {
            base: Instant::now(),
            last_answered_sent: AtomicU64::new(0),
        })
    }

    fn answered(&self, sent: Instant) {
        let nanos = sent.saturating_duration_since(self.base).as_nanos() as u64;
        self.last_answered_sent.fetch_max(nanos, Ordering::AcqRel);
    }

    fn last_answered_sent(&self) -> Instant {
        self.base + Duration::from_nanos(self.last_answered_sent.load(Ordering::Acquire))
    }
}

/// Did the server answer (successfully or with a definite error)?
fn was_answered<T>(result: &ZkResult<T>) -> bool {
    result
        .as_ref()
        .err()
        .is_none_or(|e| crate::error::failure(e) == crate::error::Failure::Definite)
}

/// A transaction's answer, as the client gives it.
type MultiResult = std::result::Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError>;

/// Whether the server answered a transaction: an op's refusal is its answer; a failed
/// request is one only when the failure is definite.
fn multi_was_answered(result: &MultiResult) -> bool {
    match result {
        Err(zk::MultiWriteError::RequestFailed { source }) => {
            crate::error::failure(source) == crate::error::Failure::Definite
        }
        _ => true,
    }
}

/// One ZooKeeper session of the manager. Recipes make every request through it, which is
/// how the manager counts requests and tracks liveness.
///
/// Ops are plain functions returning futures: the request is queued when the function is
/// called, so calls made one after another reach the server in that order even when their
/// futures are awaited later (or never).
pub(crate) struct Epoch {
    pub(crate) number: u64,
    pub(crate) session_id: i64,
    client: zk::Client,
    lost: CancellationToken,
    reason: Arc<Mutex<Option<LossReason>>>,
    health: Arc<Health>,
    counters: Arc<Counters>,
    /// Under the `Grace` policy: how long after the newest answered request was sent the
    /// epoch counts as lost.
    grace: Option<Duration>,
    identity: Arc<Identity>,
    /// Whether the caller gave credentials of its own.
    user_auth: bool,
    /// The session's shutdown: cancelled once `close()` has started (or the last handle is
    /// gone). The epoch may live on a while after (the supervisor waits for the releases of
    /// guards dropped just before), its requests still answered.
    closing: CancellationToken,
    /// Our nodes whose delete the server refused for good (`NoAuth`: the directory's ACL
    /// lets us create but not delete), by path: they stay until the session ends and block
    /// whoever queues behind them. A waiter that would wait behind them for ever tries their
    /// delete again, and answers `NoAuth` if it is still refused (review 20). With its czxid
    /// when known, which tells our node from another made at its path after it (a shared
    /// path's, or a queue node's that an administrator deleted). `stuck_changed` counts the
    /// changes.
    stuck: Arc<Mutex<StuckNodes>>,
    stuck_changed: watch::Sender<u64>,
    /// Whether the epoch's sweeper (`queue::sweep`) runs: set and cleared only under the
    /// `stuck` lock, so that a note is never left with no sweeper (see
    /// [`start_sweeping`](Self::start_sweeping)).
    sweeping: std::sync::atomic::AtomicBool,
}

/// Our nodes noted as undeletable, by path (see [`Epoch::note_stuck`]).
type StuckNodes = std::collections::HashMap<String, Noted>;

/// What [`Epoch::note_stuck`] noted of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Noted {
    /// Its czxid, when known (`None`: noted by its name alone).
    pub(crate) czxid: Option<i64>,
    /// At a path every contender shares (the simple lock's), where only a delete under the
    /// path's serializer may be tried again; else a queue node's, ours alone.
    pub(crate) shared: bool,
}

impl Noted {
    /// Whether `stat`, read at the noted path, is the node noted: our session's (`session_id`)
    /// and, when the czxid was noted, made at it. Another node there (an administrator
    /// deleted ours; someone made one at its name since) is not ours to delete.
    pub(crate) fn is(&self, stat: &zk::Stat, session_id: i64) -> bool {
        stat.ephemeral_owner == session_id && self.czxid.is_none_or(|czxid| czxid == stat.czxid)
    }
}

/// Forgets the note at `path` if it is by name alone or of `czxid` (see
/// [`Epoch::forget_stuck`]).
fn forget_stuck(stuck: &mut StuckNodes, path: &str, czxid: Option<i64>) {
    if matches!(stuck.get(path), Some(noted) if noted.czxid.is_none() || noted.czxid == czxid) {
        stuck.remove(path);
    }
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("number", &self.number)
            .field("session_id", &format_args!("{:#x}", self.session_id))
            .finish()
    }
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
}

/// What a relock's transaction ([`Epoch::release_and_create`]) was answered.
#[derive(Debug)]
pub(crate) enum Relocked {
    /// Applied: the new node's stat (ZooKeeper 3.8 leaves it zeroed inside a multi) and name.
    Made(zk::Stat, String),
    /// Refused at the old node's own part (its mark or its delete): nothing was applied, and
    /// the error is about that node, not the directory.
    OldNodeRefused(zk::Error),
}

impl Epoch {
    /// Counts a request and, when its answer comes, notes that the server answered. A
    /// combinator, not an `async` block: a block keeps the moved-in future and the future it
    /// awaits side by side, which doubled the size of every request future (a release's
    /// transaction grew from 168 to 1088 bytes, and its task past the allocator's small
    /// sizes).
    ///
    /// A request that the client answers `SessionExpired` once this process has started to
    /// close the session is answered `ClientClosed`, which the caller reports as
    /// [`Error::Closed`]: whatever ended the session on the server, no new session will come
    /// to retry in.
    fn track<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = ZkResult<T>>,
    ) -> impl Future<Output = ZkResult<T>> {
        let closing = self.closing.clone();
        futures::FutureExt::map(self.track_with(op, fut, was_answered), move |result| {
            result.map_err(|err| closed_by_us(&closing, err))
        })
    }

    /// [`track`](Self::track) for any answer, `answered` telling which ones the server gave.
    fn track_with<R>(
        &self,
        op: &'static str,
        fut: impl Future<Output = R>,
        answered: fn(&R) -> bool,
    ) -> impl Future<Output = R> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        crate::observe::request(op);
        let sent = Instant::now();
        let health = self.health.clone();
        futures::FutureExt::map(fut, move |result| {
            if answered(&result) {
                health.answered(sent);
            }
            result
        })
    }

    /// Sends the transaction built in `writer`, counted and tracked as every request is; the
    /// one commit of every multi the recipes make. `queued` is how adding the ops went: an
    /// op the client refused to add (a malformed path) answers at once, and nothing is sent.
    fn commit_multi<'a>(
        &self,
        mut writer: zk::MultiWriter<'a>,
        queued: ZkResult<()>,
    ) -> impl Future<Output = MultiResult> + Send + 'a {
        let sent_or_refused = match queued {
            Ok(()) => Either::Left(writer.commit()),
            Err(source) => Either::Right(std::future::ready(Err(
                zk::MultiWriteError::RequestFailed { source },
            ))),
        };
        let closing = self.closing.clone();
        let tracked = self.track_with("multi", sent_or_refused, multi_was_answered);
        futures::FutureExt::map(tracked, move |result| {
            result.map_err(|err| match err {
                zk::MultiWriteError::RequestFailed { source } => {
                    zk::MultiWriteError::RequestFailed {
                        source: closed_by_us(&closing, source),
                    }
                }
                other => other,
            })
        })
    }

    /// Notes that our node at `path` (made at `czxid`, when known) cannot be deleted (its
    /// delete was refused with `NoAuth`, and the node is still ours): it stays until the
    /// session ends, unless the directory's ACL is fixed meanwhile (see
    /// `holding::delete_stuck`, which an acquire queued behind it runs first).
    ///
    /// Noted again with the same czxid, nothing changes: waiters are woken only by news.
    pub(crate) fn note_stuck(&self, path: &str, czxid: Option<i64>, shared: bool) {
        let noted = Noted { czxid, shared };
        let before = self.stuck.lock().unwrap().insert(path.to_string(), noted);
        if before == Some(noted) {
            return;
        }
        tracing::warn!(
            node = path,
            "the server refused to delete our node for lack of permission; it stays until the \
             directory's ACL lets us delete it (the session tries again once its ACL version \
             changes) or the session ends"
        );
        self.stuck_changed.send_modify(|n| *n += 1);
    }

    /// What [`note_stuck`](Self::note_stuck) noted at `path`, if anything.
    pub(crate) fn stuck_note(&self, path: &str) -> Option<Noted> {
        self.stuck.lock().unwrap().get(path).copied()
    }

    /// Forgets the node noted at `path`, made at `czxid`: it was deleted after all (the ACL
    /// was fixed), or is gone, or the node there now is not ours. A note of another czxid
    /// (a later node of ours at a shared path, noted meanwhile) stays.
    pub(crate) fn forget_stuck(&self, path: &str, czxid: Option<i64>) {
        forget_stuck(&mut self.stuck.lock().unwrap(), path, czxid);
    }

    /// The notes ([`note_stuck`](Self::note_stuck)) of nodes in the directory `dir`; none,
    /// without a look at the registry, while nothing was ever noted.
    pub(crate) fn stuck_in(&self, dir: &str) -> Vec<(String, Noted)> {
        if *self.stuck_changed.borrow() == 0 {
            return Vec::new();
        }
        let stuck = self.stuck.lock().unwrap();
        stuck
            .iter()
            .filter(|(path, _)| crate::path::parent(path) == dir)
            .map(|(path, noted)| (path.clone(), *noted))
            .collect()
    }

    /// Whether [`note_stuck`](Self::note_stuck) noted `path`: the node made at `czxid`, when
    /// both are known (a shared path's node is told apart by it); any node there, for a name
    /// from a listing (which gives names, not czxids): `holding::delete_stuck` confirms it is
    /// ours before anyone answers `NoAuth`.
    pub(crate) fn is_stuck(&self, path: &str, czxid: Option<i64>) -> bool {
        match (self.stuck.lock().unwrap().get(path).map(|n| n.czxid), czxid) {
            (Some(Some(noted)), Some(czxid)) => noted == czxid,
            (Some(_), _) => true,
            (None, _) => false,
        }
    }

    /// Cancelled when our own `close()` begins: background work that can wait (a scheduled
    /// retry of stuck nodes) stops then rather than hold the close up.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// Whether a sweeper is to be started for this epoch: some node is noted, and no sweeper
    /// runs. Marks it running; the caller starts it (`queue::sweep::ensure`).
    pub(crate) fn start_sweeping(&self) -> bool {
        if *self.stuck_changed.borrow() == 0 {
            return false;
        }
        let stuck = self.stuck.lock().unwrap();
        !stuck.is_empty() && !self.sweeping.swap(true, Ordering::AcqRel)
    }

    /// Every note ([`note_stuck`](Self::note_stuck)), for the sweeper; `None` when none is
    /// left, and the sweeper is then marked stopped (under the same lock as the registry, so
    /// a note made after this is seen by [`start_sweeping`](Self::start_sweeping)).
    pub(crate) fn stuck_or_stop_sweeping(&self) -> Option<Vec<(String, Noted)>> {
        let stuck = self.stuck.lock().unwrap();
        if stuck.is_empty() {
            self.sweeping.store(false, Ordering::Release);
            return None;
        }
        Some(
            stuck
                .iter()
                .map(|(path, noted)| (path.clone(), *noted))
                .collect(),
        )
    }

    /// Whether [`note_stuck`](Self::note_stuck) noted a node in the directory `dir`.
    pub(crate) fn has_stuck_in(&self, dir: &str) -> bool {
        *self.stuck_changed.borrow() != 0
            && self
                .stuck
                .lock()
                .unwrap()
                .keys()
                .any(|path| crate::path::parent(path) == dir)
    }

    /// Tells of every [`note_stuck`](Self::note_stuck) from now on; its value is 0 until the
    /// first.
    pub(crate) fn stuck_changes(&self) -> watch::Receiver<u64> {
        self.stuck_changed.subscribe()
    }

    /// Whether this epoch has ended, or its client already knows the session is gone (the
    /// supervisor may not have processed it yet).
    pub(crate) fn is_over(&self) -> bool {
        self.lost.is_cancelled() || self.client.state().is_terminated()
    }

    /// Waits until the client is connected (`true`) or the epoch is over (`false`). A request
    /// made while disconnected waits in the client and is sent whenever it reconnects into the
    /// session, even after the epoch has ended and its callers have been told so (`lost()`
    /// fired, `close()` returned): a contender's create and a guarded write wait here instead,
    /// and are made only into a live epoch. Connected: answers at once, with no allocation.
    /// Not a seal: a request made while the client still says connected, at the instant its
    /// connection breaks, is held by the client for its next connection into the session
    /// (its task drains our requests only while connected), and sent then, before the
    /// session is closed (by the client itself once nothing holds the epoch, or by
    /// `close_on_server`). A guarded write so sent is still checked against our node.
    pub(crate) async fn wait_connected(&self) -> bool {
        let connected = |state: zk::SessionState| state == zk::SessionState::SyncConnected;
        if connected(self.client.state()) && !self.is_over() {
            return true;
        }
        let mut state = self.client.state_watcher();
        loop {
            if self.is_over() {
                return false;
            }
            if connected(state.peek_state()) {
                return true;
            }
            tokio::select! {
                _ = state.changed() => {}
                _ = self.lost.cancelled() => return false,
            }
        }
    }

    /// Whether the `Grace` deadline has passed, read from the clock instead of waiting for the
    /// supervisor: a process that was paused past the deadline must see the loss the moment
    /// it looks, even if its supervisor task has not run since it was resumed. Ends the epoch
    /// when it has (as the supervisor would on waking), so the loss sticks.
    pub(crate) fn grace_passed(&self) -> bool {
        let passed = self
            .grace
            .is_some_and(|g| Instant::now() >= self.health.last_answered_sent() + g);
        if passed {
            self.end(LossReason::ConnectionLost);
        }
        passed
    }

    /// The token cancelled when this epoch ends.
    pub(crate) fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }

    /// The cell that will hold why this epoch ended, for watchers that must not keep the
    /// epoch (and its client) alive.
    pub(crate) fn reason_cell(&self) -> Arc<Mutex<Option<LossReason>>> {
        self.reason.clone()
    }

    /// Why this epoch ended (`None` while it lives).
    pub(crate) fn loss_reason(&self) -> Option<LossReason> {
        *self.reason.lock().unwrap()
    }

    /// Why this epoch is over (see [`is_over`](Self::is_over)), also in the moment after its
    /// client learnt that the session ended and before the supervisor ended the epoch: a
    /// caller that met `SessionExpired` then must not take the epoch for live. `None` while
    /// it lives.
    pub(crate) fn over_reason(&self) -> Option<LossReason> {
        self.loss_reason()
            .or_else(|| terminal_reason(self.client.state()))
    }

    fn end(&self, reason: LossReason) {
        let mut r = self.reason.lock().unwrap();
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        self.lost.cancel();
    }

    pub(crate) fn session_info(&self) -> zk::SessionInfo {
        self.client.session().clone()
    }

    pub(crate) fn create<'a>(
        &'a self,
        path: &'a str,
        data: &[u8],
        options: &zk::CreateOptions<'_>,
    ) -> impl Future<Output = ZkResult<(zk::Stat, zk::CreateSequence)>> + Send + 'a {
        self.track("create", self.client.create(path, data, options))
    }

    pub(crate) fn delete(
        &self,
        path: &str,
        version: Option<i32>,
    ) -> impl Future<Output = ZkResult<()>> + Send + 'static {
        self.track("delete", self.client.delete(path, version))
    }

    /// Catches the server this client is connected to up with the leader (`sync`), so that a
    /// read sent after it sees every write the leader had applied when it was sent.
    pub(crate) fn sync(&self, path: &str) -> impl Future<Output = ZkResult<()>> + Send + '_ {
        self.track("sync", self.client.sync(path))
    }

    pub(crate) fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<u8>, zk::Stat)>> + Send + 'static {
        self.track("get_data", self.client.get_data(path))
    }

    pub(crate) fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = ZkResult<zk::Stat>> + Send + 'static {
        self.track("set_data", self.client.set_data(path, data, version))
    }

    /// An ACL that grants rights to the node's creator (`creator_all`, the `auth` scheme)
    /// needs credentials of the caller's own (`with_digest_auth`): our session's private
    /// identity would otherwise be the only creator, and nobody else could ever use the path.
    /// Refused as ZooKeeper refuses it for a session without any credentials.
    pub(crate) fn check_creator_acls(&self, acls: &[zk::Acl]) -> ZkResult<()> {
        if self.user_auth || !acls.iter().any(|a| a.scheme() == "auth") {
            Ok(())
        } else {
            Err(zk::Error::InvalidAcl)
        }
    }

    /// The ACL of a contender node: what the caller asked for, less WRITE and ADMIN, plus
    /// every right for this session manager's own identity. Anyone the caller allowed may
    /// still read the node, and deleting it is governed by its parent, so peers (Curator,
    /// kazoo, `zkr holders`) see it as before; only its data and ACL are ours alone.
    pub(crate) fn contender_acls(&self, asked: &[zk::Acl]) -> Vec<zk::Acl> {
        use zk::Permission as P;
        let keep = P::READ | P::CREATE | P::DELETE;
        let mut acls: Vec<zk::Acl> = asked
            .iter()
            .filter(|a| (a.permission() & keep) != P::NONE)
            .map(|a| zk::Acl::new(a.permission() & keep, a.auth_id().clone()))
            .collect();
        acls.push(zk::Acl::new(
            P::ALL,
            zk::AuthId::new("digest", &self.identity.acl_id),
        ));
        acls
    }

    pub(crate) fn check_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = ZkResult<Option<zk::Stat>>> + Send + 'static {
        self.track("exists", self.client.check_stat(path))
    }

    pub(crate) fn check_and_watch_stat<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Option<zk::Stat>, zk::OneshotWatcher)>> + Send + 'a {
        self.track("exists_watch", self.client.check_and_watch_stat(path))
    }

    /// Watches our own node for its deletion: a child watch (`getChildren2`, which answers
    /// the node's stat too), `None` when the node is not there (and then no watch is left on
    /// the server). Queued at call time.
    ///
    /// A child watch, not an `exists` one, because of the order in which the server tells
    /// watchers: a data change (our marked release's `set`) fires only the node's data
    /// watches, and a deletion fires its data watches before its child watches. So the waiter
    /// behind us (an `exists` watch) hears of our release first, in a notification of its
    /// own, and ours follows with the deletion; with two `exists` watches the server sends
    /// the two in the order of its hash set, and the waiter's came second in 45 of 106
    /// releases (45 to 90 µs later on a 2-core machine, seen in packet captures of
    /// `examples/bench_election`, 2026-11-26; its write threads still put ours first
    /// sometimes, in 37 of 211 after the change). An ephemeral node has no children, so the
    /// watch fires only on the node's deletion or the session's end; the client hands a
    /// child watch no data or creation events. Unlike `exists`, a listing needs READ on the
    /// node, which a contender node's ACL always gives our identity ([`Self::contender_acls`]).
    /// Only a super user could take it away; then a waiter's arming fails with `NoAuth` (its
    /// acquire answers that error and its node is deleted), and a holder's monitor arms again
    /// every second. Either way such a session no longer hears of the node: ZooKeeper checks
    /// READ before it delivers a watch event (seen with Debian's 3.8.0-11+deb12u2; upstream's
    /// fix for CVE-2024-23944), `exists` watches included, so a holder whose node lost READ
    /// learns of the node's deletion only when its session ends (the ignored test
    /// `a_holder_whose_armed_node_loses_read_and_is_deleted_is_told`, `tests/own_watch.rs`).
    pub(crate) fn watch_own<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = ZkResult<Option<(zk::Stat, zk::OneshotWatcher)>>> + Send + 'a {
        let listed = self.get_and_watch_children(path);
        async move {
            match listed.await {
                Ok((_, stat, watch)) => Ok(Some((stat, watch))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(err) => Err(err),
            }
        }
    }

    pub(crate) fn get_and_watch_data<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<u8>, zk::Stat, zk::OneshotWatcher)>> + Send + 'a {
        self.track("get_data_watch", self.client.get_and_watch_data(path))
    }

    /// Lists `path`'s children, queued at call time. A listing that shows a node of ours
    /// noted as stuck gone (an administrator deleted it, or a retried delete raced a late
    /// note) forgets it: noted, it would make every later wait in the directory whose window
    /// is cut list it again, for as long as the session lives (review 26). Only the notes
    /// made before the listing was queued are judged: such a node was made before, so the
    /// listing shows it while it exists; a node noted after may have been made after.
    pub(crate) fn get_children(
        &self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<String>, zk::Stat)>> + Send + 'static {
        let noted = self.stuck_in(path);
        let listing = self.track("get_children", self.client.get_children(path));
        let stuck = (!noted.is_empty()).then(|| self.stuck.clone());
        async move {
            let listed = listing.await;
            if let (Some(stuck), Ok((children, _))) = (stuck, &listed) {
                let mut stuck = stuck.lock().unwrap();
                for (node, note) in &noted {
                    if !children.iter().any(|c| c == crate::path::child_name(node)) {
                        forget_stuck(&mut stuck, node, note.czxid);
                    }
                }
            }
            listed
        }
    }

    pub(crate) fn get_and_watch_children<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<String>, zk::Stat, zk::OneshotWatcher)>> + Send + 'a
    {
        self.track(
            "get_children_watch",
            self.client.get_and_watch_children(path),
        )
    }

    /// One transaction: the guards' `checks`, then the caller's `ops` (see
    /// [`LockGuard::guarded`](crate::LockGuard::guarded)). Queued at call time.
    pub(crate) fn guarded_multi<'a>(
        &'a self,
        checks: &[GuardCheck<'_>],
        ops: &'a [Op],
    ) -> impl Future<Output = MultiResult> + Send + 'a {
        let mut writer = self.client.new_multi_writer();
        let open = zk::Acls::anyone_all();
        let queued = checks
            .iter()
            .try_for_each(|check| match *check {
                GuardCheck::Exists(path) => writer.add_check_version(path, -1),
                GuardCheck::Owned {
                    path,
                    data,
                    version,
                } => writer.add_set_data(path, data, Some(version)),
            })
            .and_then(|_| {
                ops.iter().try_for_each(|op| match op {
                    Op::Create { path, data, acls } => {
                        let acls = if acls.is_empty() {
                            open
                        } else {
                            zk::Acls::new(acls)
                        };
                        writer.add_create(path, data, &zk::CreateMode::Persistent.with_acls(acls))
                    }
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => writer.add_set_data(path, data, *version),
                    Op::Delete { path, version } => writer.add_delete(path, *version),
                    Op::Check { path, version } => writer.add_check_version(path, *version),
                })
            });
        self.commit_multi(writer, queued)
    }

    /// One transaction: a check that `node` exists, then the create of the ephemeral,
    /// open `path` (a revocation request, made only while the holder it asks is there: a
    /// request that landed after the holder had gone would ask nobody and stay). `NoNode` when
    /// `node` is gone, `NodeExists` when `path` is there already.
    pub(crate) fn create_while_exists<'a>(
        &'a self,
        node: &'a str,
        path: &'a str,
    ) -> impl Future<Output = ZkResult<()>> + Send + 'a {
        let mut writer = self.client.new_multi_writer();
        let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        let queued = writer
            .add_check_version(node, -1)
            .and_then(|_| writer.add_create(path, b"", &options));
        futures::FutureExt::map(self.commit_multi(writer, queued), |r| {
            r.map(|_| ()).map_err(zk::Error::from)
        })
    }

    /// One transaction: `set_data(path, mark)` then `delete(path)`. A watcher of `path` gets a
    /// single NodeDataChanged: the release mark of the queue recipes.
    pub(crate) fn set_and_delete<'a>(
        &'a self,
        path: &'a str,
        mark: &'a [u8],
        version: Option<i32>,
    ) -> impl Future<Output = ZkResult<()>> + Send + 'a {
        let mut writer = self.client.new_multi_writer();
        // `version`: the data version the node must have; the set makes it version + 1.
        let queued = writer
            .add_set_data(path, mark, version)
            .and_then(|_| writer.add_delete(path, version.map(|v| v + 1)));
        futures::FutureExt::map(self.commit_multi(writer, queued), |r| {
            r.map(|_| ()).map_err(zk::Error::from)
        })
    }

    /// One transaction: the release of our node at `path` (marked as `set_and_delete`
    /// does, or a plain delete) and the create of a new sequential node at `new_prefix`
    /// (a relock: one log write, one sync). Answers the new node's stat and name, or which
    /// part the server refused (see [`Relocked`]).
    pub(crate) fn release_and_create<'a>(
        &'a self,
        path: &str,
        mark: bool,
        new_prefix: &str,
        data: &[u8],
        options: &zk::CreateOptions<'_>,
    ) -> impl Future<Output = ZkResult<Relocked>> + Send + 'a {
        let mut writer = self.client.new_multi_writer();
        let queued = (if mark {
            writer.add_set_data(path, crate::queue::RELEASE_MARK, None)
        } else {
            Ok(())
        })
        .and_then(|_| writer.add_delete(path, None))
        .and_then(|_| writer.add_create(new_prefix, data, options));
        // The ops before the create are the old node's.
        let create_index = usize::from(mark) + 1;
        let answer = move |result| match result {
            Ok(results) => match Vec::into_iter(results).last() {
                Some(zk::MultiWriteResult::Create { path, stat }) => Ok(Relocked::Made(
                    stat,
                    crate::path::child_name(&path).to_string(),
                )),
                // Applied, but the answer does not say what it made: settle it as an
                // unknown outcome (the new node is looked for by its protection id).
                other => {
                    tracing::warn!(?other, "a relock's transaction answered no create");
                    Err(zk::Error::ConnectionLoss)
                }
            },
            Err(zk::MultiWriteError::OperationFailed { index, source }) if index < create_index => {
                Ok(Relocked::OldNodeRefused(source))
            }
            Err(err) => Err(err.into()),
        };
        futures::FutureExt::map(self.commit_multi(writer, queued), answer)
    }

    /// Creates the missing ancestors of `path` (not `path` itself is created: only up to its
    /// parent when `include_self` is false) with `options`, like `mkdir -p`.
    pub(crate) async fn create_parents(
        &self,
        path: &str,
        options: &zk::CreateOptions<'_>,
    ) -> ZkResult<()> {
        // An ancestor found (or made) may be deleted by someone else before its child is
        // made: look again. Only a top-level node's `NoNode` means the chroot is missing.
        'again: for _ in 0..10 {
            let mut missing = Vec::new();
            let mut dir = crate::path::parent(path);
            while dir != "/" {
                match self.check_stat(dir).await? {
                    Some(_) => break,
                    None => missing.push(dir.to_string()),
                }
                dir = crate::path::parent(dir);
            }
            for dir in missing.iter().rev() {
                match self.create(dir, &[], options).await {
                    Ok(_) | Err(zk::Error::NodeExists) => {}
                    Err(zk::Error::NoNode) if crate::path::parent(dir) != "/" => continue 'again,
                    Err(err) => return Err(err),
                }
            }
            return Ok(());
        }
        Err(zk::Error::NoNode)
    }

    /// The error for a recipe path that [`create_parents`](Self::create_parents) could not
    /// make because an ancestor is an ephemeral node (which cannot have children): names that
    /// ancestor, read here. `/` is read too: under a chroot it is the chroot's node, which
    /// may be the ephemeral one (review 21). If none is found (the tree changed meanwhile),
    /// says so without naming one.
    pub(crate) async fn below_an_ephemeral(&self, path: &str) -> Error {
        let mut dir = crate::path::parent(path);
        let mut ephemeral = None;
        loop {
            if let Ok(Some(stat)) = self.check_stat(dir).await {
                if stat.ephemeral_owner != 0 {
                    ephemeral = Some(dir);
                }
            }
            if dir == "/" {
                break;
            }
            dir = crate::path::parent(dir);
        }
        Error::InvalidArgument(match ephemeral {
            Some("/") => format!(
                "the session's chroot is an ephemeral node and cannot have children, so {path} \
                 cannot be made below it: pick another chroot"
            ),
            Some(node) => format!(
                "{node} is an ephemeral node and cannot have children, so {path} cannot be \
                 made below it: pick another path"
            ),
            None => format!(
                "an ancestor of {path} was an ephemeral node (which cannot have children) when \
                 its parents were made: pick another path"
            ),
        })
    }
}

/// One async mutex per simple-lock path of a session (see [`Session::serialize_path`]);
/// cheap to clone, all clones sharing the mutexes.
#[derive(Clone, Default)]
pub(crate) struct PathSerializers(
    Arc<Mutex<std::collections::HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>>>,
);

impl PathSerializers {
    /// Waits for, and takes, the serializer of `path`.
    pub(crate) async fn serialize(&self, path: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.mutex(path).lock_owned().await
    }

    fn mutex(&self, path: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().unwrap();
        if locks.len() > 64 {
            locks.retain(|_, m| m.strong_count() > 0);
        }
        match locks.get(path).and_then(std::sync::Weak::upgrade) {
            Some(m) => m,
            None => {
                let m = Arc::new(tokio::sync::Mutex::new(()));
                locks.insert(path.to_string(), Arc::downgrade(&m));
                m
            }
        }
    }
}

struct Shared {
    config: Config,
    /// The session timeout the server granted to the newest epoch, in milliseconds (0 before
    /// the first).
    negotiated_ms: AtomicU64,
    events: watch::Sender<SessionEvent>,
    history: tokio::sync::broadcast::Sender<SessionEvent>,
    current: Mutex<Option<Arc<Epoch>>>,
    counters: Arc<Counters>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Nodes (by czxid) that something in this process has claimed as its own: a live guard,
    /// or a cleanup about to delete the node. See [`Session::claim`].
    claims: Mutex<Claims>,
    /// One async mutex per simple-lock path, see [`Session::serialize_path`].
    path_locks: PathSerializers,
    /// Releases parked by dropped guards, one per directory, see [`Session::park`].
    parked: Arc<crate::parking::Table>,
    /// The runtime the session was made on, which runs its supervisor and its client: where
    /// a parked release's flush task runs, and every task the session tracks (see
    /// [`Session::spawn_tracked`]).
    home: tokio::runtime::Handle,
}

/// How many retired czxids a session remembers (see [`Session::unclaim`]): far more than the
/// acquisitions one late read can span.
const RETIRED_CLAIMS: usize = 4096;

/// The nodes claimed in this process, and the recently retired ones.
#[derive(Default)]
struct Claims {
    live: std::collections::HashSet<i64>,
    retired: std::collections::HashSet<i64>,
    order: std::collections::VecDeque<i64>,
}

/// Cancels the supervisor when the last [`Session`] handle goes.
struct LastHandle(CancellationToken);

impl Drop for LastHandle {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A managed ZooKeeper session, shared by all recipes of a process.
///
/// Cheap to clone: all clones share one ZooKeeper session. After the session expires the
/// manager makes a new one by itself; recipes follow it. Dropping the last clone closes the
/// session (in the background); [`close`](Session::close) does it and waits.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> zk_recipes::Result<()> {
/// use zk_recipes::{Session, SessionEvent};
///
/// let session = Session::builder("127.0.0.1:2181").connect().await?;
/// let mut events = session.latest_state();
/// tokio::spawn(async move {
///     while events.changed().await.is_ok() {
///         if let SessionEvent::Expired { epoch } = *events.borrow() {
///             eprintln!("session of epoch {epoch} expired; everything held in it is lost");
///         }
///     }
/// });
/// session.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    _last: Arc<LastHandle>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("hosts", &self.shared.config.hosts)
            .field("state", &self.state())
            .finish()
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Session>();
};

impl Session {
    /// Starts building a session to `hosts` (`host:port[,host:port...]`).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = zk_recipes::Session::builder("127.0.0.1:2181");
    /// ```
    pub fn builder(hosts: impl Into<String>) -> SessionBuilder {
        SessionBuilder {
            hosts: hosts.into(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: None,
            chroot: None,
            auth: None,
            loss_policy: LossPolicy::Grace,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    fn start(config: Config, client: zk::Client) -> Session {
        let (events, _) = watch::channel(SessionEvent::Connecting);
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            config,
            negotiated_ms: AtomicU64::new(0),
            events,
            history: tokio::sync::broadcast::channel(256).0,
            current: Mutex::new(None),
            counters: Arc::new(Counters::default()),
            tracker: TaskTracker::new(),
            shutdown: shutdown.clone(),
            claims: Mutex::new(Default::default()),
            path_locks: PathSerializers::default(),
            parked: Default::default(),
            home: tokio::runtime::Handle::current(),
        });
        let epoch = shared.install(client, 1);
        tokio::spawn(supervise(shared.clone(), epoch));
        Session {
            shared,
            _last: Arc::new(LastHandle(shutdown)),
        }
    }

    /// The latest state.
    pub fn state(&self) -> SessionEvent {
        *self.shared.events.borrow()
    }

    /// The latest state, as a `watch` receiver: it sees the current state at once and then
    /// the newest one whenever it looks (intermediate states are skipped if it is slow). For
    /// every change in order, use [`every_change`](Self::every_change).
    pub fn latest_state(&self) -> watch::Receiver<SessionEvent> {
        self.shared.events.subscribe()
    }

    /// The current epoch number (1 for the first session), or `None` between sessions.
    pub fn epoch_number(&self) -> Option<u64> {
        self.current_epoch().map(|e| e.number)
    }

    /// The current ZooKeeper session id, or `None` between sessions.
    pub fn session_id(&self) -> Option<i64> {
        self.current_epoch().map(|e| e.session_id)
    }

    /// The session timeout the server granted (to the newest session, after an expiry): the
    /// one that decides when the server expires the session, and so the one every loss
    /// deadline is measured against. The server clamps the requested value to its
    /// `minSessionTimeout..maxSessionTimeout` (2 to 20 ticks by default), so it may differ
    /// from [`requested_session_timeout`](Self::requested_session_timeout).
    pub fn session_timeout(&self) -> Duration {
        match self.shared.negotiated_ms.load(Ordering::Acquire) {
            0 => self.shared.config.session_timeout,
            ms => Duration::from_millis(ms),
        }
    }

    /// The session timeout asked for with
    /// [`SessionBuilder::with_session_timeout`]; see [`session_timeout`](Self::session_timeout)
    /// for the one in force.
    pub fn requested_session_timeout(&self) -> Duration {
        self.shared.config.session_timeout
    }

    /// The loss policy this session was built with.
    pub fn loss_policy(&self) -> LossPolicy {
        self.shared.config.loss_policy
    }

    /// How many ZooKeeper requests the recipes have sent through this session (all epochs).
    /// The manager's own heartbeats are not counted. For measuring protocols.
    pub fn request_count(&self) -> u64 {
        self.shared.counters.requests.load(Ordering::Relaxed)
    }

    /// Every state change from now on, in order (unlike [`latest_state`](Self::latest_state),
    /// which keeps only the newest). A receiver more than 256 changes behind gets `Lagged`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) {
    /// let mut changes = session.every_change();
    /// while let Ok(change) = changes.recv().await {
    ///     println!("session: {change:?}");
    /// }
    /// # }
    /// ```
    pub fn every_change(&self) -> tokio::sync::broadcast::Receiver<SessionEvent> {
        self.shared.history.subscribe()
    }

    /// Reads a node's data and stat (`None` if it does not exist) through the current
    /// ZooKeeper session: the read half of a read-modify-write whose write goes through
    /// [`LockGuard::guarded`](crate::LockGuard::guarded).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] (nothing is sent), [`Error::Closed`], [`Error::NoAuth`], or a
    /// connection or ZooKeeper error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn read(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        crate::path::validate_path(path)?;
        let epoch = self.epoch().await?;
        match epoch.get_data(path).await {
            Ok(read) => Ok(Some(read)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(err) => Err(Error::zk("get_data", path, err)),
        }
    }

    /// Waits until a session is connected, up to `timeout`.
    ///
    /// # Errors
    ///
    /// * [`Error::Timeout`] if none is connected in time.
    /// * [`Error::Closed`] if the session was closed.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<()> {
        // The state, not a live epoch: a suspended epoch lives on (under `Grace` and
        // `OnExpiry`) with its connection down, and waiting for the epoch answered `Ok` then.
        let mut events = self.latest_state();
        let wait = async {
            events
                .wait_for(|e| connected(e) || *e == SessionEvent::Closed)
                .await
                .map(|e| *e)
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(SessionEvent::Closed)) | Ok(Err(_)) => Err(Error::Closed),
            Ok(Ok(_)) => Ok(()),
            Err(_) => Err(Error::Timeout),
        }
    }

    /// Closes the session: waits (up to the session timeout) for releases that guards
    /// scheduled on drop, then ends the ZooKeeper session, which deletes its ephemeral nodes.
    /// Every lock held through it reports lost. Idempotent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the close carries on in the background once started.
    pub async fn close(&self) {
        self.shared.shutdown.cancel();
        let mut events = self.latest_state();
        let _ = events.wait_for(|e| *e == SessionEvent::Closed).await;
    }

    /// Whether the session is connected, as last published: `Connected` or `Reconnected`
    /// (not suspended, between sessions, or closed). Requests made while it is not wait for
    /// the reconnect, or the end of the session.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) {
    /// if session.is_connected() {
    ///     // A close now reaches the server at once and removes our nodes.
    ///     session.close().await;
    /// }
    /// # }
    /// ```
    pub fn is_connected(&self) -> bool {
        connected(&self.state())
    }

    /// Resolves once the session is not connected (see [`is_connected`](Self::is_connected)):
    /// at once if it is not now. For an operation that must not wait for a reconnect.
    pub(crate) async fn disconnected(&self) {
        let mut events = self.latest_state();
        // An error means that the manager is gone: not connected either.
        let _ = events.wait_for(|e| !connected(e)).await;
    }

    /// The current epoch, waiting for one if the manager is between sessions.
    pub(crate) async fn epoch(&self) -> Result<Arc<Epoch>> {
        let mut events = self.latest_state();
        loop {
            // Mark the event seen before looking at the epoch: an epoch is installed before
            // its `Connected` is published, so one installed after this look is announced by
            // an event not seen yet, and `changed()` cannot miss it.
            let closed = *events.borrow_and_update() == SessionEvent::Closed;
            if let Some(epoch) = self.current_epoch() {
                return Ok(epoch);
            }
            if closed {
                return Err(Error::Closed);
            }
            if events.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// The current epoch if one is connected and not ended.
    pub(crate) fn current_epoch(&self) -> Option<Arc<Epoch>> {
        self.shared
            .current
            .lock()
            .unwrap()
            .clone()
            .filter(|e| !e.is_over())
    }

    /// Claims the node created at `czxid` for one owner in this process (a guard, or a cleanup
    /// that will delete it): `false` if something else claimed it first. A node's czxid names
    /// it for good (a node made again at the same path has another), so two guards, two
    /// handles or a guard and a cancelled acquire of one session can never both decide that
    /// the same node is theirs.
    pub(crate) fn claim(&self, czxid: i64) -> bool {
        let mut claims = self.shared.claims.lock().unwrap();
        !claims.retired.contains(&czxid) && claims.live.insert(czxid)
    }

    /// Gives up a claim made with [`claim`](Self::claim), once the node is gone (or not ours
    /// to delete). The czxid is remembered as retired, so that a read answered late (one
    /// that still saw the node) can never make another acquire or cleanup take it again.
    pub(crate) fn unclaim(&self, czxid: i64) {
        let mut claims = self.shared.claims.lock().unwrap();
        if claims.live.remove(&czxid) && claims.retired.insert(czxid) {
            claims.order.push_back(czxid);
            if claims.order.len() > RETIRED_CLAIMS {
                if let Some(old) = claims.order.pop_front() {
                    claims.retired.remove(&old);
                }
            }
        }
    }

    /// Serializes, within this process, everything that creates a node at a fixed `path` or
    /// decides what became of such a create (the simple lock's acquire, its recovery after a
    /// connection loss, the cleanup of a cancelled acquire). While one of them holds the
    /// guard no other create at `path` is in flight in this session, so a node there owned
    /// by our session and claimed by nobody can only be the orphan of the create whose
    /// outcome is being decided.
    pub(crate) async fn serialize_path(&self, path: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.shared.path_locks.serialize(path).await
    }

    /// [`serialize_path`](Self::serialize_path) without waiting: `None` while something else
    /// of this session creates, decides or releases at `path` (`try_lock` answers
    /// `WouldBlock` then rather than wait, say, behind a release waiting for a reconnect).
    pub(crate) fn try_serialize_path(
        &self,
        path: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.shared.path_locks.mutex(path).try_lock_owned().ok()
    }

    /// The session's path serializers, for background work that must not keep the session
    /// open as a [`Session`] handle would (the sweeper of stuck nodes, `queue::sweep`).
    pub(crate) fn path_serializers(&self) -> &PathSerializers {
        &self.shared.path_locks
    }

    /// Parks the release of a dropped guard under `key` (its lock's directory), for an
    /// acquire on the same directory and session made right after the drop to take back with
    /// [`unpark`](Self::unpark) and send with its own create in one transaction (see the
    /// queue's `Holding`). Sent when the dropping task next yields, or at the latest
    /// [`DEADLINE`](crate::parking::DEADLINE) after the drop: see [`crate::parking`].
    pub(crate) fn park(&self, key: String, item: crate::parking::Parked) {
        self.shared
            .parked
            .park(key, item, &self.shared.home, &self.shared.tracker);
    }

    /// Takes back the release parked under `key`, if `wanted` accepts it: for an acquire to
    /// merge with its create, or to send first.
    pub(crate) fn unpark(
        &self,
        key: &str,
        wanted: impl FnOnce(&crate::parking::Parked) -> bool,
    ) -> Option<crate::parking::Parked> {
        self.shared.parked.unpark(key, wanted)
    }

    /// Whether `other` is a handle of this same session manager.
    pub(crate) fn same_as(&self, other: &Session) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Runs `fut` in the background, tracked so that [`close`](Self::close) waits for it, on
    /// the runtime the session was made on, whatever runtime the caller is on (if any): that
    /// runtime runs the session's supervisor and client, so the task runs whenever the session
    /// can send at all. On the caller's runtime it would not run if that runtime ended, or
    /// was not driven again, right after the call (a `lock()` cancelled in a sync wrapper's
    /// `block_on`, a task of a runtime shutting down): the cancelled acquire's node stayed,
    /// and took the lock when its turn came, for as long as the session lived.
    pub(crate) fn spawn_tracked<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.shared.tracker.spawn_on(fut, &self.shared.home);
    }

    /// A token that [`close`](Self::close) waits for, as for a tracked task: for work of the
    /// session's run in its caller's task (an awaited release).
    pub(crate) fn tracker_token(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.shared.tracker.token()
    }

    /// The runtime the session was made on (see [`spawn_at_home`](Self::spawn_at_home)).
    pub(crate) fn home_handle(&self) -> tokio::runtime::Handle {
        self.shared.home.clone()
    }

    /// Runs `fut` on the runtime the session was made on, untracked, as
    /// [`spawn_tracked`](Self::spawn_tracked) does for the same reason: for what a guard
    /// watches while it is held (its own node, a revocation request). On the runtime that
    /// granted the guard it stopped for good if that runtime ended, or was not driven again,
    /// after the grant (a sync wrapper's `block_on`): the guard was never told of its loss.
    pub(crate) fn spawn_at_home<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.shared.home.spawn(fut)
    }

    /// Like [`spawn_tracked`](Self::spawn_tracked), but polls `fut` once right here first, so
    /// that the requests it sends before its first await that waits (a queue node's release
    /// write; the simple lock's read) are queued on the session before anything the caller
    /// sends next: a guard dropped just before the next `lock()` on the same session has its
    /// release ordered before that acquire's create (see `Holding::release_job`). Polling
    /// with a no-op waker is sound: the spawned task polls again, and every future registers
    /// its waker on each poll.
    /// The task then runs on the session's own runtime, as `spawn_tracked`'s does. Outside
    /// any runtime the first poll runs inside that runtime too; on a thread whose tokio
    /// context is destroyed already (a guard dropped by a thread-local's destructor as its
    /// thread exits) no runtime can be entered (`enter` panics there, and a panic in a
    /// thread-local's destructor aborts the process): the first poll then runs outside any,
    /// which it can (it queues requests and polls join handles and a tokio mutex, none of
    /// which needs a runtime context). A future that must not go on past its queued requests
    /// in that poll (to timers, on a runtime that may be shut down) awaits
    /// [`pause_if_polled_in_place`] there.
    pub(crate) fn spawn_tracked_sent<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let _entered = match tokio::runtime::Handle::try_current() {
            Ok(_) => None,
            Err(err) if err.is_thread_local_destroyed() => None,
            Err(_) => Some(self.shared.home.enter()),
        };
        let mut fut = Box::pin(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let was = POLLED_IN_PLACE.replace(true);
        let first = fut.as_mut().poll(&mut cx);
        POLLED_IN_PLACE.set(was);
        if first.is_pending() {
            self.spawn_tracked(fut);
        }
    }

    /// Ends the current epoch as if the loss policy had given up on it. For tests and `zkr`.
    #[doc(hidden)]
    pub fn force_epoch_end(&self) {
        if let Some(e) = self.current_epoch() {
            e.end(LossReason::ConnectionLost);
        }
    }

    /// Checks a recipe's path for this session ([`crate::path::validate_recipe_path`]: the
    /// reserved `/zookeeper` tree is refused, judged on the server's path under the chroot).
    pub(crate) fn validate_recipe_path(&self, path: &str) -> Result<()> {
        crate::path::validate_recipe_path(path, self.shared.config.chroot.as_deref())
    }

    /// The `zookeeper-client` session of the current epoch (for the test harness's `expire`).
    #[doc(hidden)]
    pub fn zk_session_info(&self) -> Option<zk::SessionInfo> {
        self.current_epoch().map(|e| e.session_info())
    }
}

/// `err`, except that `SessionExpired` is `ClientClosed` once this process has started to
/// close the session (see [`Epoch::track`]).
fn closed_by_us(closing: &CancellationToken, err: zk::Error) -> zk::Error {
    match err {
        zk::Error::SessionExpired if closing.is_cancelled() => zk::Error::ClientClosed,
        err => err,
    }
}

/// Why a session in `state` is over, if it is (expired, closed, its authentication failed).
pub(crate) fn terminal_reason(state: zk::SessionState) -> Option<LossReason> {
    match state {
        zk::SessionState::Closed => Some(LossReason::Closed),
        state if state.is_terminated() => Some(LossReason::SessionExpired),
        _ => None,
    }
}

/// Whether `event` says that the session is connected (see [`Session::is_connected`]).
fn connected(event: &SessionEvent) -> bool {
    matches!(
        event,
        SessionEvent::Connected { .. } | SessionEvent::Reconnected { .. }
    )
}

thread_local! {
    /// Whether this thread is making the first poll of a future of
    /// [`Session::spawn_tracked_sent`]. Const and without a destructor, so it can be read in
    /// a thread-local's destructor too.
    static POLLED_IN_PLACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Ends the first poll made in place by [`Session::spawn_tracked_sent`] here (`Pending`, the
/// spawned task polls on); in any other poll it goes straight on. A future that has queued what
/// had to be queued before its caller goes on awaits this, so that the rest (timers, answers)
/// runs in the session's task only, never on a thread that merely entered the session's
/// runtime, which may be shut down. Needs no runtime.
pub(crate) async fn pause_if_polled_in_place() {
    let mut paused = false;
    std::future::poll_fn(|cx| {
        if !paused && POLLED_IN_PLACE.get() {
            paused = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await
}

impl Shared {
    /// Publishes a state change to the latest-state channel and the every-change stream.
    fn publish(&self, event: SessionEvent) {
        crate::observe::session_event(&event);
        self.events.send_replace(event);
        let _ = self.history.send(event);
    }

    fn install(&self, client: zk::Client, number: u64) -> Arc<Epoch> {
        let grace = (self.config.loss_policy == LossPolicy::Grace)
            .then(|| grace_period(client.session_timeout()));
        let granted = client.session_timeout().as_millis().max(1);
        self.negotiated_ms.store(
            u64::try_from(granted).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        let epoch = Arc::new(Epoch {
            number,
            session_id: client.session_id().0,
            client,
            // Not a child of `shutdown`: on close the epoch must outlive the releases that
            // guards dropped just before; the supervisor ends it (reason Closed) after them.
            lost: CancellationToken::new(),
            reason: Arc::new(Mutex::new(None)),
            health: Health::new(),
            counters: self.counters.clone(),
            grace,
            identity: self.config.identity.clone(),
            user_auth: self.config.auth.is_some(),
            closing: self.shutdown.clone(),
            stuck: Arc::default(),
            stuck_changed: watch::Sender::new(0),
            sweeping: Default::default(),
        });
        epoch.health.answered(Instant::now());
        *self.current.lock().unwrap() = Some(epoch.clone());
        self.publish(SessionEvent::Connected {
            epoch: number,
            session_id: epoch.session_id,
        });
        tracing::info!(
            epoch = number,
            session_id = format_args!("{:#x}", epoch.session_id),
            "ZooKeeper session established"
        );
        epoch
    }

    /// Ends `epoch`: marks it lost, forgets its client (closing it once the last in-flight
    /// request is done) and publishes the event.
    fn end_epoch(&self, epoch: &Arc<Epoch>, reason: LossReason) {
        epoch.end(reason);
        let mut current = self.current.lock().unwrap();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, epoch)) {
            *current = None;
        }
        drop(current);
        if reason != LossReason::Closed {
            self.publish(SessionEvent::Expired {
                epoch: epoch.number,
            });
            tracing::warn!(epoch = epoch.number, %reason, "ZooKeeper session epoch ended");
        }
    }
}

/// What ended the watch over one epoch.
enum EpochEnd {
    Lost(LossReason),
    Shutdown,
}

async fn supervise(shared: Arc<Shared>, first: Arc<Epoch>) {
    let _closed = ClosedAtEnd(shared.clone());
    let mut epoch = first;
    let mut next = epoch.number + 1;
    loop {
        let reason = match watch_epoch(&shared, &epoch).await {
            EpochEnd::Shutdown => break,
            EpochEnd::Lost(reason) => reason,
        };
        let mut state = epoch.client.state_watcher();
        shared.end_epoch(&epoch, reason);
        wait_released(&shared.config, epoch, &mut state).await;
        // Build the next session with bounded exponential backoff.
        let mut backoff = Duration::from_millis(50);
        epoch = loop {
            shared.publish(SessionEvent::Connecting);
            let deadline = Instant::now() + shared.config.connect_timeout;
            let attempt = tokio::select! {
                r = connect_once(&shared.config, deadline) => r,
                _ = shared.shutdown.cancelled() => { shared.publish(SessionEvent::Closed); return; }
            };
            match attempt {
                Ok(client) => break shared.install(client, next),
                Err(err) => {
                    let pause = jittered(backoff);
                    tracing::warn!(%err, ?pause, "reconnecting to ZooKeeper");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = shared.shutdown.cancelled() => { shared.publish(SessionEvent::Closed); return; }
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        next += 1;
    }
    // Shutdown: let background releases finish, then end the session.
    shared.tracker.close();
    let _ = tokio::time::timeout(shared.config.session_timeout, shared.tracker.wait()).await;
    let mut state = epoch.client.state_watcher();
    shared.end_epoch(&epoch, LossReason::Closed);
    wait_released(&shared.config, epoch, &mut state).await;
    shared.publish(SessionEvent::Closed);
}

/// Closes the session when the supervisor ends, however it ends. It returns after publishing
/// `Closed`, which leaves this nothing to do; but it is also dropped unfinished when the runtime
/// the session was made on shuts down. The client's tasks end with that runtime, so the
/// ZooKeeper session can no longer be kept (the server expires it): the epoch must end, so that
/// holders are told their locks are lost, and the session must say `Closed`, so that a later
/// acquire from another runtime answers `Error::Closed` instead of retrying requests that all
/// fail at once, without ever yielding.
struct ClosedAtEnd(Arc<Shared>);

impl Drop for ClosedAtEnd {
    fn drop(&mut self) {
        let shared = &self.0;
        if *shared.events.borrow() == SessionEvent::Closed {
            return;
        }
        tracing::warn!(
            "the runtime this ZooKeeper session was made on has ended: the session is closed"
        );
        shared.shutdown.cancel();
        let current = shared.current.lock().unwrap().clone();
        if let Some(epoch) = current {
            shared.end_epoch(&epoch, LossReason::Closed);
        }
        shared.publish(SessionEvent::Closed);
    }
}

/// Drops our reference to an ended epoch and waits (bounded: 2 s) for its client to close,
/// so that its ephemeral nodes are gone when the next epoch starts or `close` returns.
///
/// Something of ours may still hold the ended epoch: a request in flight or held by the
/// client for its next connection (its answer is awaited, and comes), or something that keeps
/// it (a future kept without being polled). A client still held would reconnect into the old
/// session and keep its nodes for as long as it is held, and send whatever was handed to it
/// at the instant its connection broke (past the `wait_connected` gate: the client keeps such
/// requests for its next connection). When it is still held at the end of the wait, its
/// session is closed on the server from a client made for the purpose ([`close_on_server`]),
/// once the old client has been connected for [`ANSWER_GRACE`]. A client nothing holds closes
/// by itself: it sends its own `CloseSession` as soon as it is connected (disconnected, after
/// it reconnects and sends what it still held), or gives up and leaves the session to expire.
async fn wait_released(config: &Config, epoch: Arc<Epoch>, state: &mut zk::StateWatcher) {
    let number = epoch.number;
    let session = epoch.session_info();
    let held = Arc::downgrade(&epoch);
    drop(epoch);
    let mut connected_since = None;
    let wait = async {
        loop {
            let now_state = state.peek_state();
            if now_state.is_terminated() {
                return;
            }
            connected_since = connected_since_now(connected_since, now_state);
            state.changed().await;
        }
    };
    let closed = tokio::time::timeout(ANSWER_GRACE, wait).await.is_ok();
    if closed || held.strong_count() == 0 {
        return;
    }
    tracing::info!(
        epoch = number,
        "an ended epoch's client is still held 2 s later; closing its session on the server"
    );
    // In the background: the next epoch need not wait for it.
    tokio::spawn(close_on_server(
        config.clone(),
        session,
        held,
        state.clone(),
        connected_since,
    ));
}

/// Since when a client has been connected without a break, given what was known before
/// (`since`) and its state now: `None` while it is not connected.
fn connected_since_now(since: Option<Instant>, state: zk::SessionState) -> Option<Instant> {
    let connected = matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    );
    connected.then(|| since.unwrap_or_else(Instant::now))
}

/// How long an ended epoch's client, still held by something of ours, is left connected to
/// answer what it was asked before its session is closed under it: a new connection into the
/// session takes the session from the old client, and with it the answers the old client is
/// owed (a busy session's `close()`, and reads held through a blip, were answered
/// `ConnectionLost` or `SessionExpired` when the close came at once).
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Closes `session` on the server: connects a client of our own to it and drops that client,
/// which sends `CloseSession` (the server then deletes the session's ephemeral nodes, and the
/// client still holding it learns that it expired when it reconnects). Only while the ended
/// epoch is held and its client has not learnt that the session is gone; and only once that
/// client has been connected for [`ANSWER_GRACE`] without a break (`connected_since`): while
/// it is disconnected nothing is dialed before the first try (it may be owed answers when it
/// reconnects, and a server it cannot reach is most likely one we cannot reach either). Never given up while
/// those hold: a server that is down may come back with the session (it restores sessions
/// from its snapshot), and the held client would then resume it. The two clients take the
/// session's connection from each other, so a close can be lost in that tug: it is tried
/// again until a connect answers that the session has expired, 50 ms apart for the first
/// hundred tries (a tug has outlasted ten), then 1 s apart.
async fn close_on_server(
    config: Config,
    session: zk::SessionInfo,
    held: std::sync::Weak<Epoch>,
    mut state: zk::StateWatcher,
    mut connected_since: Option<Instant>,
) {
    let target = config.connect_string();
    let mut tries = 0u32;
    loop {
        // Not kept across the connect: our own reference must not count as a holder.
        let open = held
            .upgrade()
            .is_some_and(|epoch| !epoch.client.state().is_terminated());
        if !open {
            tracing::debug!(
                tries,
                "an ended epoch's client is closed or dropped: its session is left to the server"
            );
            return;
        }
        // The grace is the old client's, before our first try: once a try of ours has taken
        // the session from it, what it was owed is cut off already, and waiting again after
        // each tug (it takes the session back by reconnecting) only drew the close out.
        connected_since = connected_since_now(connected_since, state.peek_state());
        let due = connected_since.map(|since| since + ANSWER_GRACE);
        if tries == 0 && due.is_none_or(|due| Instant::now() < due) {
            // Waits for a change of the old client's state, or for the grace to run out; and
            // looks again every second for its holders.
            let wake = due.map_or(Duration::from_secs(1), |due| {
                due.saturating_duration_since(Instant::now())
                    .min(Duration::from_secs(1))
            });
            let _ = tokio::time::timeout(wake, state.changed()).await;
            continue;
        }
        tries += 1;
        let connector = connector(&config, config.connect_timeout).with_session(session.clone());
        match tokio::time::timeout(config.connect_timeout, dial(&config, connector, &target)).await
        {
            // The last clone of this client: dropping it closes the session.
            Ok(Ok(client)) => drop(client),
            // Closed (or expired): done.
            Ok(Err(zk::Error::SessionExpired)) => return,
            Ok(Err(err)) => tracing::debug!(%err, tries, "closing an ended epoch's session"),
            Err(_) => tracing::debug!(tries, "closing an ended epoch's session: no answer in time"),
        }
        if tries == 100 {
            tracing::warn!(
                "an ended epoch's session is not closed after 100 tries; trying every second \
                 while something holds its epoch"
            );
        }
        let pause = if tries < 100 { 50 } else { 1000 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// How long after the newest answered request was sent the `Grace` policy declares an epoch
/// lost: the session timeout less a 15% margin (see the module docs).
fn grace_period(timeout: Duration) -> Duration {
    timeout - timeout * 15 / 100
}

/// Watches one epoch until it ends or the session shuts down.
async fn watch_epoch(shared: &Shared, epoch: &Arc<Epoch>) -> EpochEnd {
    let timeout = epoch.client.session_timeout();
    let policy = shared.config.loss_policy;
    let heartbeat_every = timeout / 5;
    let mut state = epoch.client.state_watcher();
    let probe_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // While suspended: the sockets to the servers when the connection dropped (see `net`).
    let mut suspended: Option<crate::net::Sockets> = None;
    loop {
        if epoch.lost.is_cancelled() {
            return EpochEnd::Lost(epoch.loss_reason().unwrap_or(LossReason::ConnectionLost));
        }
        let connected = match epoch.client.state() {
            zk::SessionState::Expired | zk::SessionState::AuthFailed | zk::SessionState::Closed => {
                return EpochEnd::Lost(LossReason::SessionExpired)
            }
            zk::SessionState::Disconnected => {
                if suspended.is_none() {
                    suspended = Some(crate::net::Sockets::towards(&shared.config.peers));
                    shared.publish(SessionEvent::Suspended {
                        epoch: epoch.number,
                    });
                    tracing::info!(epoch = epoch.number, "ZooKeeper connection suspended");
                }
                if policy == LossPolicy::OnSuspend {
                    return EpochEnd::Lost(LossReason::ConnectionLost);
                }
                false
            }
            _ => {
                if epoch.client.session_id().0 != epoch.session_id {
                    // The server handed out another session: ours is gone.
                    return EpochEnd::Lost(LossReason::SessionExpired);
                }
                if let Some(before) = suspended.take() {
                    // A new connection (maybe to another server): a new socket.
                    before.set_nodelay_on_new(&shared.config.peers);
                    shared.publish(SessionEvent::Reconnected {
                        epoch: epoch.number,
                    });
                    tracing::info!(
                        epoch = epoch.number,
                        "ZooKeeper connection re-established, same session"
                    );
                }
                true
            }
        };
        let last = epoch.health.last_answered_sent();
        let grace_deadline = last + grace_period(timeout);
        let now = Instant::now();
        if policy == LossPolicy::Grace && now >= grace_deadline {
            tracing::warn!(epoch = epoch.number, silent = ?now - last, "no answer from ZooKeeper for too long: declaring the session lost");
            return EpochEnd::Lost(LossReason::ConnectionLost);
        }
        if connected && now >= last + heartbeat_every && !probe_out.swap(true, Ordering::AcqRel) {
            // Keep one request going so the Grace clock has fresh evidence.
            let health = epoch.health.clone();
            let out = probe_out.clone();
            let sent = Instant::now();
            let probe = epoch.client.check_stat("/");
            tokio::spawn(async move {
                let result = probe.await;
                if was_answered(&result) {
                    health.answered(sent);
                }
                out.store(false, Ordering::Release);
            });
        }
        let mut wake = now + heartbeat_every.max(Duration::from_millis(10));
        if policy == LossPolicy::Grace {
            wake = wake.min(grace_deadline);
        }
        tokio::select! {
            _ = state.changed() => {}
            _ = epoch.lost.cancelled() => {}
            _ = shared.shutdown.cancelled() => return EpochEnd::Shutdown,
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// An awaited release goes straight on (no extra poll on the hot path); the first poll made
    /// in place stops right there, and the next poll goes on.
    #[test]
    fn pause_if_polled_in_place_pauses_only_the_in_place_poll() {
        assert_eq!(pause_if_polled_in_place().now_or_never(), Some(()));
        let mut fut = Box::pin(pause_if_polled_in_place());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        POLLED_IN_PLACE.set(true);
        let first = fut.as_mut().poll(&mut cx);
        POLLED_IN_PLACE.set(false);
        assert!(first.is_pending(), "the in-place poll went on");
        assert!(
            fut.as_mut().poll(&mut cx).is_ready(),
            "the task's poll paused"
        );
    }
}
