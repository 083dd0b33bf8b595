//! A fair counting semaphore: at most `permits` holders at once, granted in arrival order.
//!
//! # Znode layout
//!
//! ```text
//! <path>                               CONTAINER
//! <path>/_c_<uuid>-lease-0000000003    EPHEMERAL_SEQUENTIAL, data = contender identity
//! ```
//!
//! # Algorithm
//!
//! The contender queue of `crate::queue` (see `src/queue.rs`) with the rule "granted while fewer than `permits`
//! leases precede us". A waiter watches only the lease `permits` places ahead of it (no herd),
//! and re-lists when woken: the one-notification shortcut of the fair lock does not hold here,
//! since the lease that left need not have been the last one ahead. All contenders of one path
//! must agree on `permits` (as with kazoo's `Semaphore` and Curator's
//! `InterProcessSemaphoreV2`, which this does not share nodes with). The first contender
//! stores its count in the directory's data and later ones with another count are refused
//! (`PathInUse`): a check between contenders that disagree, not a defence against whoever may
//! write the directory, who can change the stored count and so admit a semaphore of the new
//! count beside leases of the old one (see the README's compatibility notes).
//!
//! # Fairness
//!
//! Leases are granted in arrival order. With one watch per waiter, a waiter learns that it may
//! go only when the lease `permits` places ahead of it leaves: if a waiter between the two
//! gives up, the grant can come one release later than it could have (never earlier than it
//! should: a waiter re-lists before it takes a lease).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::path::{Layout, NodeKind};
use crate::queue::{self, Contender, Holding, QueueSpec, Rule, Wait};
use crate::queue::{default_spec, queue_options};
use crate::session::Session;

const LEASE_MEMBERS: &[NodeKind] = &[NodeKind::Lease];

/// A distributed counting semaphore (`consul lock -n`, kazoo `Semaphore`).
///
/// # Examples
///
/// ```no_run
/// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::Semaphore;
///
/// let sem = Semaphore::new(&session, "/app/slots", 3)?;
/// let lease = sem.acquire().await?; // at most 3 processes get here at once
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    session: Session,
    spec: Arc<QueueSpec>,
    permits: usize,
}

queue_options!(Semaphore);

impl Semaphore {
    /// A semaphore on `path` with `permits` leases.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot), [`Error::InvalidArgument`] for `permits ==
    /// 0`; nothing is sent.
    pub fn new(session: &Session, path: impl AsRef<str>, permits: usize) -> Result<Semaphore> {
        if permits == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs at least one permit".into(),
            ));
        }
        let mut spec = default_spec(
            session,
            path.as_ref(),
            NodeKind::Lease,
            LEASE_MEMBERS,
            Rule::Permits(permits),
        )?;
        spec.layout = Layout::Curator;
        Ok(Semaphore {
            session: session.clone(),
            spec: Arc::new(spec),
            permits,
        })
    }

    /// The number of permits.
    pub fn permits(&self) -> usize {
        self.permits
    }

    /// Waits for a lease.
    ///
    /// # Errors
    ///
    /// As [`FairLock::lock`](crate::FairLock::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future deletes our node in the background.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.get(Wait::Until(None)).await
    }

    /// Waits for a lease up to `timeout`.
    ///
    /// # Errors
    ///
    /// * [`Error::Timeout`] when the time is up, with nothing held: within `timeout` whatever
    ///   the connection does, as [`FairLock::lock_timeout`](crate::FairLock::lock_timeout)
    ///   (our node is deleted before it returns while the connection is up, else in the
    ///   background once it is back).
    /// * Those of [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.get(Wait::Until(Instant::now().checked_add(timeout)))
            .await
    }

    /// Takes a lease only if one is free now.
    ///
    /// # Errors
    ///
    /// * [`Error::WouldBlock`] if no lease is free (our node is deleted before it returns).
    /// * [`Error::ConnectionLost`] at once if the session is not connected, or as soon as the
    ///   connection drops: it never waits for a reconnect (see
    ///   [`FairLock::try_lock`](crate::FairLock::try_lock)); nothing is held.
    /// * Those of [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn try_acquire(&self) -> Result<LockGuard> {
        self.get(Wait::Try).await
    }

    /// Holders and waiters in order: the first `permits` hold leases.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or a ZooKeeper error reading the directory.
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        queue::contenders(&self.session, &self.spec.dir, LEASE_MEMBERS).await
    }

    async fn get(&self, wait: Wait) -> Result<LockGuard> {
        let granted = queue::acquire(&self.session, &self.spec, wait).await?;
        // Released with a plain delete, as every node that does not hold alone is (see
        // `Holding::new`): the head waiter watches every holder and counts any deletion as a
        // free permit; a data change on a lease means a grant (see `src/queue/mod.rs`).
        Ok(LockGuard::new(
            Holding::new(&self.session, granted).revocable(self.spec.revocable),
        ))
    }
}
