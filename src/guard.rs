//! The guard every lock recipe returns: RAII release, an explicit `release()`, a loss signal
//! and a fencing token.

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::error::{LossReason, Result};
use crate::queue::Holding;

/// Proof that this process holds a lock (or a semaphore lease) in ZooKeeper.
///
/// * Dropping it releases the lock in the background (tracked by the [`Session`], so
///   [`Session::close`] waits for it); [`release`](Self::release) does it now and reports
///   errors. End a program with `session.close().await`: one that returns from `main` with
///   a background release still pending leaves the node, and so the lock, held until the
///   server expires the session (a whole session timeout).
/// * A fair lock's or a read/write lock's guard dropped just before the next acquire of the
///   same kind on the same lock and session (a worker loop: lock, work, drop, lock) is
///   released in the same transaction as that acquire's create, as
///   [`FairLock::relock`](crate::FairLock::relock) does: the server writes and syncs its log
///   once per iteration instead of twice. Without such an acquire, the release goes out when
///   the dropping task next yields (an acquire of another kind, a read after a dropped write,
///   sends it first), or a few milliseconds after the drop at the latest, even if the
///   dropping task blocks its thread (a synchronous call), as long as another thread of the
///   session's runtime can run its client: on a current-thread runtime nothing of the
///   session's goes out while that thread is blocked, this release included. Other requests
///   sent before that yield go out before the release.
/// * [`lost`](Self::lost) resolves when the lock is lost while held: the session expired, the
///   [`LossPolicy`] gave up on the connection, or the node was deleted by someone else. It
///   cannot be missed: it resolves even if the loss happened before the call.
/// * [`fencing_token`](Self::fencing_token) is the czxid of our node: every later holder of the
///   same lock gets a larger one, so a store that remembers the largest token it has seen can
///   refuse the late writes of a holder that lost the lock without knowing.
///
/// Not `Clone`: one guard, one release.
///
/// [`Session`]: crate::Session
/// [`Session::close`]: crate::Session::close
/// [`LossPolicy`]: crate::LossPolicy
///
/// # Examples
///
/// ```no_run
/// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::FairLock;
///
/// let lock = FairLock::new(&session, "/app/locks/report")?;
/// let guard = lock.lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost the lock: stop writing"),
///     _ = async { /* work, tagging writes with guard.fencing_token() */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    pub(crate) holding: Holding,
}

impl LockGuard {
    pub(crate) fn new(holding: Holding) -> LockGuard {
        LockGuard { holding }
    }

    pub(crate) fn into_holding(self) -> Holding {
        self.holding
    }

    /// The full path of our node, e.g. `/app/locks/report/_c_…-lock-0000000007`.
    pub fn path(&self) -> &str {
        self.holding.path()
    }

    /// The fencing token: the creation zxid of our node. Strictly larger for every later holder.
    pub fn fencing_token(&self) -> i64 {
        self.holding.fencing_token()
    }

    /// The ZooKeeper session id that owns our node.
    pub fn session_id(&self) -> i64 {
        self.holding.session_id()
    }

    /// Resolves when the lock is lost (see the type docs). Cancel safe; may be called often.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.holding.lost_token().clone().cancelled_owned()
    }

    /// Resolves when another process asks this holder to let go ([`revoke`](crate::revoke));
    /// never for a guard of a lock made without `with_revocable(true)`. Letting go is the
    /// holder's choice: nothing happens until it releases. Cancel safe; may be called often.
    pub fn revoke_requested(&self) -> WaitForCancellationFutureOwned {
        self.holding.revoke_token().clone().cancelled_owned()
    }

    /// Whether a revocation request has arrived (see [`revoke_requested`](Self::revoke_requested)).
    pub fn is_revoke_requested(&self) -> bool {
        self.holding.revoke_token().is_cancelled()
    }

    /// A token cancelled when the lock is lost, to hand to other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.holding.lost_token().clone()
    }

    /// Whether the lock has been lost. Under the `Grace` policy this reads the deadline from
    /// the clock, so a process resumed after a pause past the session timeout sees `true` at
    /// once, before the session manager has had a chance to run (and before
    /// [`lost`](Self::lost) resolves): check it before each write.
    pub fn is_lost(&self) -> bool {
        self.holding.is_lost()
    }

    /// Why the lock was lost, once it is.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.holding.loss_reason()
    }

    /// Applies `ops` in one ZooKeeper transaction together with a check that this guard's
    /// node is still ours: for state kept in ZooKeeper, a holder that lost the lock can never
    /// write, even one that has not been told yet (paused, partitioned, its `lost()` not yet
    /// polled). The check is made by the server when it applies the transaction, so no
    /// fencing token is needed. Returns the results of `ops` (the check's own is left out).
    ///
    /// The check on a queue recipe's node (fair lock, semaphore, read/write lock, election)
    /// is its existence: its name is never used again. The simple lock's node lives at a path
    /// every holder reuses, so the transaction writes the node's data back at the version just
    /// read, which needs WRITE that only this session's identity has (one read more, and
    /// waiters of the simple lock see a data change, which they ignore).
    ///
    /// While the connection is down, the transaction waits to be sent until the session is
    /// connected again, and is never sent once the lock is lost: a guard whose `lost()` has
    /// fired gets `LockLost`, even if the client later reconnects into the same session. One
    /// handed to the client at the very instant the connection broke is held by the client
    /// for its next connection: if the client reconnects into the same session before the
    /// session manager has closed it, the transaction is applied after `lost()` fired, and
    /// answered `Ok`. Its check still holds then (this guard's node is there, so no other
    /// holder has been granted): the write lands before any later holder's. The session is
    /// closed right after (the ended epoch's client closes it once it is connected again).
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`](crate::Error::LockLost) if the lock is lost (told already, or
    ///   found by the check): nothing was applied.
    /// * [`Error::TransactionFailed`](crate::Error::TransactionFailed) if one of `ops` failed
    ///   (a version mismatch, a missing parent, ...): nothing was applied.
    /// * [`Error::InvalidPath`](crate::Error::InvalidPath) for a malformed path; nothing is
    ///   sent.
    /// * [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an op that writes or
    ///   creates a contender node of this crate (this guard's own among them): its data is the
    ///   release mark that hands the lock on, so only the library writes it. Nothing is sent;
    ///   keep your state in a node of your own. Also for data over 1 MB (ZooKeeper's
    ///   `jute.maxbuffer`), which the server would answer by dropping the connection.
    /// * [`Error::ConnectionLost`](crate::Error::ConnectionLost): the transaction may or may
    ///   not have been applied; read before retrying.
    ///
    /// # Cancel safety
    ///
    /// Once the transaction is sent, dropping the future does not withdraw it: it is applied
    /// or not as a whole, and the caller does not learn which.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// use zk_recipes::{Election, Error, Op};
    ///
    /// let leadership = Election::new(&session, "/app/leader", "me")?.campaign().await?;
    /// // The current leader alone may bump the counter.
    /// let (value, stat) = session.read("/app/counter").await?.expect("the counter exists");
    /// let next: u64 = String::from_utf8_lossy(&value).parse().unwrap_or(0) + 1;
    /// match leadership.guarded([Op::set_data("/app/counter", next.to_string(), Some(stat.version))]).await {
    ///     Ok(_) => println!("counter is {next}"),
    ///     Err(Error::LockLost(why)) => println!("no longer the leader ({why}): nothing written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn guarded(
        &self,
        ops: impl IntoIterator<Item = crate::Op>,
    ) -> Result<Vec<zookeeper_client::MultiWriteResult>> {
        let ops: Vec<crate::Op> = ops.into_iter().collect();
        self.holding.guarded(&ops).await
    }

    /// Releases the lock now, in one transaction that marks our node released and deletes it,
    /// so the next waiter takes over after a single notification.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`](crate::Error::LockLost) if the lock was already lost (nothing to
    ///   release).
    /// * [`Error::ZooKeeper`](crate::Error::ZooKeeper) or
    ///   [`Error::ConnectionLost`](crate::Error::ConnectionLost) if the delete failed; the
    ///   node then goes with the session.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once polled, the release runs to its end (retried after a connection
    /// blip), even if this future is dropped; only its outcome is lost (it is logged). It
    /// runs in the task that awaits it, with no task of its own, until the future is dropped
    /// or a retry is needed; the rest then runs in a task tracked by the session. A future
    /// polled once and then kept without being polled holds its release's last steps (the
    /// end of [`lost`](Self::lost), and `close()` waits for it up to the session timeout):
    /// await it, or drop it.
    pub async fn release(self) -> Result<()> {
        self.holding.release().await
    }
}
