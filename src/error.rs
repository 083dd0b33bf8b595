//! The crate's one error type.
//!
//! Every variant says what failed and what the caller can do about it. The enum is
//! `Clone + PartialEq + Eq`, so tests can write `assert_eq!(err, Error::Timeout)`.

use std::time::Duration;

use zookeeper_client as zk;

/// A specialised `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in zk-recipes.
///
/// Match on the variant to decide what to do; [`Error::is_outcome_unknown`] and
/// [`Error::is_retryable`] classify the rest.
///
/// # Examples
///
/// ```
/// use zk_recipes::Error;
///
/// let err = Error::Timeout;
/// assert!(err.is_retryable());
/// assert!(err.to_string().contains("timed out"));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A ZooKeeper path given to the library is malformed. Nothing was sent to the server.
    #[error("invalid path {path:?}: {reason}; use an absolute path like \"/app/locks/job\" with no empty, '.' or '..' segments and no trailing '/'")]
    InvalidPath {
        /// The offending path, as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An argument other than a path is out of range. Nothing was sent to the server.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The operation did not finish in time. For a lock, its contender node has been removed
    /// (or, if the connection is down, is removed in the background once it is back); try
    /// again later or with a longer timeout.
    #[error("timed out; nothing is held: retry later or with a longer timeout")]
    Timeout,

    /// A non-blocking attempt (`try_lock`, `--try`) found the lock held by someone else.
    #[error("the lock is held by someone else; try again later, or wait with lock()")]
    WouldBlock,

    /// The lock, lease or leadership is no longer held: the session expired, the loss policy
    /// declared it lost, or the node was deleted by someone else. Stop acting on it; fencing
    /// tokens issued since make the old holder's writes detectable.
    #[error("the lock was lost ({0}); stop work done under it and acquire it again")]
    LockLost(LossReason),

    /// The ZooKeeper session expired. The session manager builds a new session by itself;
    /// retry the operation.
    #[error(
        "the ZooKeeper session expired; the session manager is reconnecting, retry the operation"
    )]
    SessionExpired,

    /// The connection was lost while a request was in flight: it may or may not have been
    /// applied on the server. Retry once the session is connected again.
    ///
    /// A non-blocking acquire (`try_lock`, `try_read`, `try_write`, `try_acquire`) answers it
    /// too when the connection is down as it is called (then nothing was sent) or drops
    /// before it is answered: it does not wait for a reconnect, and cannot tell whether the
    /// lock is free ([`Error::WouldBlock`] would claim it is not). Nothing is held then: a
    /// contender node that its create may have made is deleted in the background once the
    /// connection is back (or goes with the session).
    #[error("connection to ZooKeeper lost or down (a request in flight may or may not have been applied); retry when reconnected")]
    ConnectionLost,

    /// The server refused the operation for lack of permission (ACL).
    #[error("no permission for {path}: the ACL of the node (or, to create or delete it, of its parent) does not allow this session; add credentials with SessionBuilder::with_digest_auth or change the ACL")]
    NoAuth {
        /// The path the operation was refused on.
        path: String,
    },

    /// No ZooKeeper server could be reached within the connect timeout.
    #[error("cannot reach ZooKeeper at {hosts} within {timeout:?}: check that the servers are up and the address is right")]
    Unreachable {
        /// The connect string that was tried.
        hosts: String,
        /// How long connecting was tried.
        timeout: Duration,
    },

    /// The session (or the guard's lock handle) was closed by this process.
    #[error("the session is closed; create a new Session to continue")]
    Closed,

    /// A request failed with a ZooKeeper error not covered by a variant above.
    #[error("ZooKeeper {op} on {path} failed: {source}")]
    ZooKeeper {
        /// What was attempted ("create", "delete", ...).
        op: &'static str,
        /// The path it was attempted on.
        path: String,
        /// The client's error.
        #[source]
        source: zk::Error,
    },

    /// One of the caller's operations in a guarded transaction failed (the guard's check
    /// passed); nothing of the transaction was applied.
    #[error("operation {index} of the guarded transaction (on {path}) failed: {source}; nothing was applied")]
    TransactionFailed {
        /// The operation's position among the caller's operations, from 0.
        index: usize,
        /// The node it was on.
        path: String,
        /// The client's error (`BadVersion`, `NoNode`, `NodeExists`, `NoAuth`, ...).
        #[source]
        source: zk::Error,
    },

    /// The path is used by contenders of another kind: another recipe (a lock, a semaphore, an
    /// election), or a semaphore with another permit count. They would not exclude ours, so
    /// nothing is granted; our node has been removed.
    #[error("{path} is in use by {found}, which would not exclude {ours}: use another path")]
    PathInUse {
        /// The lock path.
        path: String,
        /// What holds or waits on it now.
        found: String,
        /// What we tried to take it as.
        ours: String,
    },

    /// A recipe does not support what was asked of it (for example upgrading a read lock to a
    /// write lock, which would deadlock two upgrading readers).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),

    /// A lock's directory holds so many contenders that one listing of it is larger than
    /// ZooKeeper's default `jute.maxbuffer` (1 MB less one byte), the largest reply its Java
    /// client accepts: Curator and zkCli would fail to list it and reconnect again and again.
    /// Refused when we enter the queue (about 18,000 Curator-named contenders); our node was
    /// removed before this error was returned. Spread the work over several lock paths.
    #[error("{path} has {contenders} contenders: one listing of it ({bytes} bytes) exceeds ZooKeeper's default jute.maxbuffer ({limit} bytes), which Java clients on this path cannot read; our node was removed; spread the work over several lock paths")]
    TooManyContenders {
        /// The lock's directory.
        path: String,
        /// Children of the directory, ours included.
        contenders: usize,
        /// Size of the listing's reply, as the Java client counts it.
        bytes: usize,
        /// The limit it exceeds.
        limit: usize,
    },
}

/// Why a lock, lease or leadership was lost.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The ZooKeeper session expired (or the server handed out a new session).
    SessionExpired,
    /// The loss policy gave up on the session: the connection was down for too long
    /// (`Grace`) or at all (`OnSuspend`).
    ConnectionLost,
    /// Our node was deleted, or changed owner, by someone else.
    NodeDeleted,
    /// The session was closed by this process.
    Closed,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::SessionExpired => "session expired",
            LossReason::ConnectionLost => "connection lost for longer than the loss policy allows",
            LossReason::NodeDeleted => "its node was deleted by someone else",
            LossReason::Closed => "session closed",
        })
    }
}

/// What a failed ZooKeeper request tells about its effect: the one classification of the
/// client's errors, used by every recipe, the session manager's liveness clock and
/// [`Error::zk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server answered: the request was not applied (`NoNode`, `NodeExists`, `NoAuth`,
    /// `BadVersion`, ...).
    Definite,
    /// The connection broke, timed out or moved with the request in flight: it may or may not
    /// have been applied. Re-read, retry or re-queue; never assume either way. (A connection
    /// reset arrives as `Custom(io::Error)`, a silent connection as `Custom("no response")`.)
    Unknown,
    /// The session is over (expired, closed, its authentication failed): nothing more is
    /// applied in it, and its ephemeral nodes are gone or going.
    SessionOver,
}

/// Classifies a ZooKeeper client error (see [`Failure`]).
pub(crate) fn failure(err: &zk::Error) -> Failure {
    match err {
        zk::Error::ConnectionLoss
        | zk::Error::Custom(_)
        | zk::Error::Timeout
        | zk::Error::SessionMoved => Failure::Unknown,
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed => {
            Failure::SessionOver
        }
        _ => Failure::Definite,
    }
}

/// Whether `err` leaves the request's effect open (not a definite answer): the caller
/// re-reads, retries or re-queues rather than failing.
pub(crate) fn is_unknown(err: &zk::Error) -> bool {
    failure(err) != Failure::Definite
}

impl Error {
    /// Wraps a ZooKeeper client error raised by `op` on `path`, mapping the variants a caller
    /// acts on (expiry, connection loss, permissions, closed) to their own variants, by
    /// [`failure`].
    pub(crate) fn zk(op: &'static str, path: &str, source: zk::Error) -> Error {
        match (failure(&source), source) {
            (Failure::Unknown, _) => Error::ConnectionLost,
            (_, zk::Error::SessionExpired) => Error::SessionExpired,
            (_, zk::Error::ClientClosed) => Error::Closed,
            (_, zk::Error::NoAuth) => Error::NoAuth {
                path: path.to_string(),
            },
            (_, source) => Error::ZooKeeper {
                op,
                path: path.to_string(),
                source,
            },
        }
    }

    /// True when a request may or may not have been applied (connection lost mid-request).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::ConnectionLost)
    }

    /// True when the same call may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Timeout
                | Error::WouldBlock
                | Error::SessionExpired
                | Error::ConnectionLost
                | Error::Unreachable { .. }
        )
    }

    /// The underlying ZooKeeper error, when this wraps one.
    pub fn zookeeper_error(&self) -> Option<&zk::Error> {
        match self {
            Error::ZooKeeper { source, .. } => Some(source),
            _ => None,
        }
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Error>();
};
