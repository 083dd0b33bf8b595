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
    /// Once called, the release request is sent even if the future is dropped.
    pub async fn release(self) -> Result<()> {
        self.holding.release().await
    }
}
