//! A fair (FIFO) exclusive lock for ordered queueing of workers.
//!
//! # Znode layout
//!
//! ```text
//! <path>                                  CONTAINER (reaped by the server once empty)
//! <path>/_c_<uuid>-lock-0000000007        EPHEMERAL_SEQUENTIAL, data = contender identity
//! <path>/_c_<uuid>-lock-0000000008        ... the next in line
//! ```
//!
//! The layout is Apache Curator's `InterProcessMutex`, and kazoo `Lock` nodes
//! (`<hex>__lock__<seq>`) in the same directory are queued with ours, so Rust, Java and Python
//! services can share one lock. With [`FairLock::with_layout`]`(Layout::Kazoo)` our nodes take
//! kazoo's names instead.
//!
//! # Algorithm
//!
//! The contender queue of `crate::queue` (see `src/queue.rs`): `create` and `get_children` in one round trip; the
//! lowest sequence holds; every waiter watches only its immediate predecessor (no herd); a
//! release is one `multi` that marks and deletes our node, so the next waiter takes over on a
//! single notification with no request of its own, whatever the queue length.
//!
//! # Fairness
//!
//! Grants follow creation order. A waiter whose session expires re-queues at the back in the
//! new session (or fails with [`Error::SessionExpired`] with `with_requeue_on_expiry(false)`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::path::{Layout, NodeKind};
use crate::queue::{
    self, default_spec, queue_options, Contender, Holding, QueueSpec, Rule, Wait, LOCK_MEMBERS,
};
use crate::session::Session;

/// A fair, exclusive, Curator-compatible lock on a ZooKeeper path.
///
/// Cheap to clone and share across tasks: every [`lock`](Self::lock) call is its own
/// contender, so ten tasks sharing one `FairLock` exclude each other like ten processes.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> zk_recipes::Result<()> {
/// use zk_recipes::{FairLock, Session};
///
/// let session = Session::builder("127.0.0.1:2181").connect().await?;
/// let lock = FairLock::new(&session, "/jobs/nightly")?.with_data(b"worker-7".to_vec());
/// let guard = lock.lock().await?;
/// println!("holding {} with token {}", guard.path(), guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FairLock {
    session: Session,
    spec: Arc<QueueSpec>,
}

queue_options!(FairLock);

impl FairLock {
    /// A lock on `path` (the directory of contender nodes) in `session`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot); nothing is sent.
    pub fn new(session: &Session, path: impl AsRef<str>) -> Result<FairLock> {
        let spec = default_spec(
            session,
            path.as_ref(),
            NodeKind::Lock,
            LOCK_MEMBERS,
            Rule::Exclusive,
        )?;
        Ok(FairLock {
            session: session.clone(),
            spec: Arc::new(spec),
        })
    }

    /// The node naming convention (default [`Layout::Curator`]).
    ///
    /// We queue both layouts, and so do kazoo's locks (they also match `-lock-` when given
    /// `extra_lock_patterns=["-lock-"]`), but Curator does not see kazoo-named nodes: it
    /// sorts children by the text after `lock-`. So a path shared with Curator must use
    /// `Layout::Curator` on every Rust and Python contender; `Layout::Kazoo` is for paths shared
    /// with kazoo only.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        Arc::make_mut(&mut self.spec).layout = layout;
        self
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.spec.dir
    }

    /// Waits until the lock is ours.
    ///
    /// # Errors
    ///
    /// * [`Error::Closed`] if the session is closed.
    /// * [`Error::SessionExpired`] if the session expired while waiting and
    ///   `with_requeue_on_expiry(false)` was set.
    /// * [`Error::NoAuth`] if the ACL of the path does not let this session create children. Also, from
    ///   a timed or `try_*` acquire that gives up, if the ACL lets it create its node but not
    ///   delete it: the node then stays queued until the ACL is fixed (the session deletes
    ///   it within about a second then) or the session ends, so the call does not answer as
    ///   if nothing were left (a refusal that comes only after the call's bound is logged
    ///   instead).
    /// * [`Error::InvalidArgument`] if the path is an ephemeral node.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future deletes our contender node in the background, so no
    /// orphan blocks the queue.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(Wait::Until(None)).await
    }

    /// Like [`lock`](Self::lock), giving up after `timeout` with [`Error::Timeout`].
    ///
    /// Returns within `timeout` whatever the connection does, plus, only while the session is
    /// connected, at most half a second for the deletion of our node to be answered (one
    /// round trip when healthy). So our node is deleted before it returns while the
    /// connection is up; while it is down, the node (if its create reached the server, even
    /// unanswered) is deleted in the background once the connection is back, or goes with the
    /// session if it expires. A grant that came in time is never given up.
    ///
    /// # Errors
    ///
    /// * [`Error::Timeout`] when the time is up, with nothing held.
    /// * Those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.acquire(Wait::Until(Instant::now().checked_add(timeout)))
            .await
    }

    /// Takes the lock only if no one holds or waits for it. One round trip when free.
    ///
    /// It never waits for a reconnect: while the connection is down (or once it drops) it
    /// answers [`Error::ConnectionLost`] at once.
    ///
    /// # Errors
    ///
    /// * [`Error::WouldBlock`] if someone holds or waits for the lock; our node is deleted
    ///   before it returns.
    /// * [`Error::ConnectionLost`] if the session is not connected when called (nothing is
    ///   sent), or the connection drops before the answer: whether the lock is free is not
    ///   known. Nothing is held; a node whose create may have reached the server is deleted in
    ///   the background once the connection is back.
    /// * Those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn try_lock(&self) -> Result<LockGuard> {
        self.acquire(Wait::Try).await
    }

    /// Releases `guard` and queues again at the back, in one transaction: for a worker loop
    /// (lock, work, let go, lock again) that costs the server one log write and one sync per
    /// iteration where a release followed by [`lock`](Self::lock) costs two. The next waiter
    /// takes over exactly as after [`LockGuard::release`]; then this waits for our turn as
    /// `lock` does. `guard` must be one of this lock's, taken on the same [`Session`].
    ///
    /// A guard dropped just before `lock` on the same lock and session is merged the same way
    /// (see [`LockGuard`]); `relock` says so in the code, and reports on the old guard.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] if `guard` had lost the lock, or its node was gone: nothing is
    ///   created (the work done under it may not have been exclusive, as `release` reports).
    /// * [`Error::InvalidArgument`] if `guard` is not a guard of this lock on this session
    ///   (it is released in the background).
    /// * Those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once polled, the release of `guard` runs to its end in the background
    /// (retried after a connection blip); dropping the future then deletes our new node in
    /// the background, as a dropped `lock` does.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// use zk_recipes::FairLock;
    ///
    /// let lock = FairLock::new(&session, "/jobs/queue")?;
    /// let mut guard = lock.lock().await?;
    /// for job in 0..3 {
    ///     println!("job {job} under token {}", guard.fencing_token());
    ///     guard = lock.relock(guard).await?;
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn relock(&self, guard: LockGuard) -> Result<LockGuard> {
        let granted = queue::relock(
            &self.session,
            &self.spec,
            guard.into_holding(),
            &[self.spec.kind],
        )
        .await?;
        Ok(LockGuard::new(
            Holding::new(&self.session, granted)
                .with_merge()
                .revocable(self.spec.revocable),
        ))
    }

    /// The contenders in queue order: the first holds the lock.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or a ZooKeeper error reading the directory.
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        queue::contenders(&self.session, &self.spec.dir, LOCK_MEMBERS).await
    }

    async fn acquire(&self, wait: Wait) -> Result<LockGuard> {
        let granted = queue::acquire(&self.session, &self.spec, wait).await?;
        Ok(LockGuard::new(
            Holding::new(&self.session, granted)
                .with_merge()
                .revocable(self.spec.revocable),
        ))
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<FairLock>();
};

#[allow(dead_code)]
fn _error_is_used(_: Error) {}
