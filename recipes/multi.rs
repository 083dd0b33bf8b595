//! Several fair locks taken all or none, without deadlock whatever order callers name them in.
//!
//! # Znode layout
//!
//! Each path is an ordinary [`FairLock`] directory (Curator's `InterProcessMutex` layout):
//!
//! ```text
//! /a/_c_<uuid>-lock-0000000003     EPHEMERAL_SEQUENTIAL: our contender for /a
//! /b/_c_<uuid>-lock-0000000011     EPHEMERAL_SEQUENTIAL: our contender for /b
//! ```
//!
//! # Algorithm
//!
//! The paths are sorted (byte order) and deduplicated, then locked one after another under
//! one deadline. Every multi-lock takes its locks in that same global order, so no two of
//! them can each hold a lock the other waits for: a cycle of waits would need someone to
//! wait for a lower path while holding a higher one. If one lock cannot be had (`--try`, the
//! deadline, an error), the ones already taken are released before the call returns, and
//! nothing is held. If a lock taken early is lost while a later one is awaited (its session
//! expired), everything is released and the whole set is taken again, so a returned guard
//! never starts out lost.
//!
//! Curator's `InterProcessMultiLock` takes its locks in the caller's order with a timeout
//! per lock: two Curator callers naming {a, b} and {b, a} can wait on each other until a
//! timeout. Sharing paths with Curator multi-locks is safe (the locks exclude each other),
//! but the deadlock freedom holds only among callers that take their locks in sorted order.

use std::time::{Duration, Instant};

use futures::future::select_all;

use crate::error::{Error, LossReason, Result};
use crate::guard::LockGuard;
use crate::path::Layout;
use crate::queue::{Holding, WITHDRAW_MARGIN};
use crate::recipes::fair_lock::FairLock;
use crate::session::{Op, Session};

/// Several [`FairLock`]s taken all or none, in a global order that cannot deadlock.
///
/// # Examples
///
/// ```no_run
/// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::MultiLock;
///
/// // Another process may name them as ["/accounts/b", "/accounts/a"]: no deadlock.
/// let locks = MultiLock::new(&session, ["/accounts/a", "/accounts/b"])?;
/// let held = locks.lock_timeout(Duration::from_secs(10)).await?;
/// for guard in held.guards() {
///     println!("{} with token {}", guard.path(), guard.fencing_token());
/// }
/// held.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    locks: Vec<FairLock>,
    session: Session,
}

impl MultiLock {
    /// Fair locks on `paths`, to be taken in sorted order (duplicates count once).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot), [`Error::InvalidArgument`] for no path, or
    /// for two paths of which one lies inside the other (its lock directory would hold the
    /// other's); nothing is sent.
    pub fn new(
        session: &Session,
        paths: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<MultiLock> {
        let mut paths: Vec<String> = paths.into_iter().map(|p| p.as_ref().to_string()).collect();
        paths.sort();
        paths.dedup();
        if paths.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one path".into(),
            ));
        }
        // Each path's ancestors, looked up in the set: neighbours in sorted order are not
        // enough, since a sibling such as `/a-b` sorts between `/a` and `/a/c`.
        let set: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
        for path in &paths {
            let mut ancestor = path.as_str();
            while let Some(cut) = ancestor.rfind('/').filter(|&cut| cut > 0) {
                ancestor = &ancestor[..cut];
                if set.contains(ancestor) {
                    return Err(Error::InvalidArgument(format!(
                        "{path} lies inside {ancestor}: lock paths of a multi-lock must not nest"
                    )));
                }
            }
        }
        let locks = paths
            .iter()
            .map(|p| FairLock::new(session, p))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock {
            locks,
            session: session.clone(),
        })
    }

    /// The lock paths, in the order they are taken.
    pub fn paths(&self) -> Vec<&str> {
        self.locks.iter().map(FairLock::path).collect()
    }

    /// The node naming convention of every lock (see [`FairLock::with_layout`]).
    pub fn with_layout(self, layout: Layout) -> Self {
        self.map(|l| l.with_layout(layout))
    }

    /// Data stored in each of our contender nodes (see [`FairLock::with_data`]).
    pub fn with_data(self, data: impl Into<Vec<u8>>) -> Self {
        let data = data.into();
        self.map(|l| l.with_data(data.clone()))
    }

    /// Whether a waiter whose session expires re-queues by itself (see
    /// [`FairLock::with_requeue_on_expiry`]).
    pub fn with_requeue_on_expiry(self, requeue: bool) -> Self {
        self.map(|l| l.with_requeue_on_expiry(requeue))
    }

    /// The ACL of our nodes and of the parents we create (see [`FairLock::with_acls`]).
    pub fn with_acls(self, acls: &[zookeeper_client::Acl]) -> Self {
        self.map(|l| l.with_acls(acls))
    }

    /// Whether each lock can be asked to let go (see [`FairLock::with_revocable`]); the set's
    /// [`MultiGuard::revoke_requested`] resolves on a request for any of them.
    pub fn with_revocable(self, revocable: bool) -> Self {
        self.map(|l| l.with_revocable(revocable))
    }

    fn map(self, f: impl Fn(FairLock) -> FairLock) -> Self {
        MultiLock {
            locks: self.locks.into_iter().map(f).collect(),
            session: self.session,
        }
    }

    /// Waits until every lock is ours.
    ///
    /// # Errors
    ///
    /// As [`FairLock::lock`]; whatever was taken is released first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future releases the locks taken so far and withdraws the
    /// pending contender node, in the background.
    pub async fn lock(&self) -> Result<MultiGuard> {
        self.acquire(Take::Wait(None)).await
    }

    /// Like [`lock`](Self::lock), giving up when `timeout` has passed for the whole set (one
    /// deadline, not one per lock).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the deadline passes, with nothing held: within `timeout`
    /// whatever the connection does, as [`FairLock::lock_timeout`] (which may take half a
    /// second more, while connected, to withdraw); the locks taken so far are released before
    /// it returns while the server answers within that, in the background otherwise (once
    /// the connection is back). A set taken again after one of its locks was lost while a
    /// later one was awaited keeps the same deadline. Else as [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MultiGuard> {
        self.acquire(Take::Wait(Instant::now().checked_add(timeout)))
            .await
    }

    /// Takes every lock only if each is free now.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] if one is held by someone else, or [`Error::ConnectionLost`] if
    /// the connection is down (see [`FairLock::try_lock`]), with nothing held: the locks taken
    /// so far are released before it returns while the server answers within half a second
    /// of the call, in the background otherwise (once the connection is back). Else as
    /// [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn try_lock(&self) -> Result<MultiGuard> {
        self.acquire(Take::Try).await
    }

    async fn acquire(&self, take: Take) -> Result<MultiGuard> {
        let started = Instant::now();
        // A set whose early lock was lost while a later one was awaited is taken again; a
        // session that keeps expiring ends the attempts.
        for _ in 0..5 {
            let mut guards: Vec<LockGuard> = Vec::with_capacity(self.locks.len());
            for lock in &self.locks {
                let taken = match take {
                    Take::Try => lock.try_lock().await,
                    Take::Wait(None) => lock.lock().await,
                    Take::Wait(Some(deadline)) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            Err(Error::Timeout)
                        } else {
                            lock.lock_timeout(left).await
                        }
                    }
                };
                match taken {
                    Ok(guard) => guards.push(guard),
                    Err(err) => {
                        self.release_within(guards, take, started).await;
                        return Err(err);
                    }
                }
            }
            if guards.iter().all(|g| !g.is_lost()) {
                return Ok(MultiGuard { guards });
            }
            self.release_within(guards, take, started).await;
        }
        Err(Error::LockLost(LossReason::SessionExpired))
    }

    /// Releases `guards`, taken by an acquire that gives up or starts over, within the bound
    /// of `take`: `lock()` waits for them; a bounded acquire stops waiting at its deadline
    /// (for `try_lock`, its start) plus [`WITHDRAW_MARGIN`], the time a single lock is given
    /// to withdraw, or as soon as the connection drops (the releases would wait for it). What
    /// is left then goes on in the background: a release is cancel safe, and a guard not yet
    /// asked releases on drop.
    async fn release_within(&self, guards: Vec<LockGuard>, take: Take, started: Instant) {
        let bound = match take {
            Take::Wait(None) => {
                let _ = release_all(guards).await;
                return;
            }
            Take::Wait(Some(deadline)) => deadline + WITHDRAW_MARGIN,
            Take::Try => started + WITHDRAW_MARGIN,
        };
        tokio::select! {
            biased;
            _ = release_all(guards) => {}
            _ = self.session.disconnected() => {}
            _ = tokio::time::sleep_until(bound.into()) => {}
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Take {
    Try,
    Wait(Option<Instant>),
}

/// Releases `guards` in reverse order of taking; the first error, if any.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let mut first = Ok(());
    for guard in guards.into_iter().rev() {
        if let Err(e) = guard.release().await {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Every lock of a [`MultiLock`], held. Dropping it releases them all in the background;
/// [`release`](Self::release) does it now and reports errors.
#[must_use = "if unused the locks are released at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The guard of each lock, in path order: paths, fencing tokens, loss signals.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards, to hold or release one by one (each releases on drop as usual).
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Resolves when any of the locks is lost. Cancel safe; may be called often.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let each: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        async move {
            select_all(each).await;
        }
    }

    /// Resolves when another process asks to revoke any of the locks (see
    /// [`LockGuard::revoke_requested`]). Cancel safe.
    pub fn revoke_requested(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let each: Vec<_> = self
            .guards
            .iter()
            .map(|g| Box::pin(g.revoke_requested()))
            .collect();
        async move {
            select_all(each).await;
        }
    }

    /// Whether any of the locks has been lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Why the first lock that was lost was lost.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.guards.iter().find_map(LockGuard::loss_reason)
    }

    /// Applies `ops` in one transaction together with a check of every lock (see
    /// [`LockGuard::guarded`]): written only while all of them are still ours.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::guarded`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::guarded`].
    pub async fn guarded(
        &self,
        ops: impl IntoIterator<Item = Op>,
    ) -> Result<Vec<zookeeper_client::MultiWriteResult>> {
        let ops: Vec<Op> = ops.into_iter().collect();
        let holdings: Vec<&Holding> = self.guards.iter().map(|g| &g.holding).collect();
        Holding::guarded_all(&holdings, &ops).await
    }

    /// Releases every lock now, the last taken first.
    ///
    /// # Errors
    ///
    /// The first error of a [`LockGuard::release`]; every lock is released (or its node goes
    /// with the session) all the same.
    ///
    /// # Cancel safety
    ///
    /// The releases not yet made happen in the background if the future is dropped.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}
