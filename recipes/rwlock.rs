//! A fair read/write lock: many readers or one writer, granted in arrival order.
//!
//! # Znode layout
//!
//! ```text
//! <path>                                    CONTAINER (reaped by the server once empty)
//! <path>/_c_<uuid>-__WRIT__0000000007       EPHEMERAL_SEQUENTIAL writer, data = contender identity
//! <path>/_c_<uuid>-__READ__0000000008       EPHEMERAL_SEQUENTIAL reader
//! <path>/_c_<uuid>-__READ__0000000009       ... another reader, shares with 8
//! ```
//!
//! The default layout is Apache Curator's `InterProcessReadWriteLock`. With
//! [`RwLock::with_layout`]`(Layout::Kazoo)` our nodes are named as kazoo's `WriteLock` and
//! `ReadLock` name theirs (`<32 hex>__lock__<seq>` and `<32 hex>__rlock__<seq>`). Either way
//! every lock-like child of the directory takes part: Curator or kazoo exclusive locks count as
//! writers, whatever their layout. Pick the layout of the peers you share the path with: Curator
//! orders only its own names, and kazoo only its own unless given `extra_lock_patterns`.
//!
//! # Algorithm
//!
//! The crate's contender queue (shared with the fair lock and the semaphore), ordered by the
//! sequence suffix:
//!
//! * a **writer** is granted when no node precedes it, and watches only its immediate
//!   predecessor;
//! * a **reader** is granted when no writer (or exclusive lock) precedes it, and watches only the
//!   nearest preceding writer. A reader that arrives behind a waiting writer therefore queues
//!   behind it: a stream of readers cannot starve a writer.
//!
//! A writer's release is one `multi` that marks and deletes the node; a reader's is a plain
//! `delete` (its mark would grant nobody). A reader woken by a marked writer release knows at
//! once that it holds (nothing below a granted writer can exist, and only readers stand
//! between it and us); a waiter woken by a plain deletion (a reader leaving, a cancelled
//! waiter, a Curator or kazoo holder, an expired session) sends one request: a listing, or a
//! check of its own node when the one that left was the last it knew of below it.
//!
//! # Downgrade
//!
//! [`WriteGuard::downgrade`] turns a write lock into a read lock without letting another writer
//! in between. A read node placed behind our write node is safe only if no writer sits between
//! the two, so the downgrade:
//!
//! 1. creates our read node and lists the directory in the same round trip (the listing is
//!    answered after the create, so it shows every node below the new one that still exists);
//! 2. if no writer or exclusive lock lies between our write node and the new read node, releases
//!    the write node with the mark: readers queued behind it (before or after the new read
//!    node) are granted at once, and a later writer queues behind our read node;
//! 3. otherwise (a writer had already queued behind us) deletes the new read node and keeps the
//!    write node: the returned [`ReadGuard`] then holds the write node and is exclusive
//!    ([`ReadGuard::is_exclusive`]). The waiting writer still cannot get in first, but readers
//!    queued behind us keep waiting until we release.
//!
//! Checking the directory's `cversion` in a `multi` before creating the read node does not work:
//! ZooKeeper's `check` operation compares the *data* version only, so the test is done after the
//! create instead, which needs no condition at all: sequence numbers below our new node can
//! never be handed out again.
//!
//! # Relock
//!
//! [`RwLock::relock_read`] and [`RwLock::relock_write`] release a guard and create the next
//! node at the back of the queue in one `multi` (the fair lock's relock, shared through the
//! contender queue): one log write and one sync per iteration of a loop instead of two. The
//! new node is an ordinary arrival, so a relocked reader waits behind a writer that queued
//! while it held.
//!
//! # Why there is no upgrade
//!
//! Two readers that both wanted to upgrade would each wait for the other to leave: a deadlock
//! no ordering can break. So a [`ReadGuard`] offers no upgrade: release the read lock and
//! queue for the write lock instead, and re-check what was read, since others may have written
//! in between.
//!
//! # Loss, expiry, ownership, cancellation
//!
//! As for the [`FairLock`](crate::FairLock): a holder learns of loss through `lost()`, a waiter
//! whose session expires re-queues at the back of the new session, cancelled acquires leave no
//! node behind, and a node counts as ours only in the session that created it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::error::{failure, is_unknown, Error, Failure, LossReason, Result};
use crate::guard::LockGuard;
use crate::path::{join, new_prefix, Layout, NodeKind, NodeName};
use crate::queue::{self, Contender, Granted, Holding, QueueSpec, Rule, Wait, LOCK_MEMBERS};
use crate::queue::{default_spec, queue_options, Abandoned};
use crate::session::{Epoch, Session};

/// A fair read/write lock on a ZooKeeper path, compatible with Curator's
/// `InterProcessReadWriteLock` (default) or kazoo's `ReadLock`/`WriteLock`
/// ([`with_layout`](Self::with_layout)).
///
/// Cheap to clone and share across tasks: every [`read`](Self::read) or [`write`](Self::write)
/// call is its own contender. The lock is not reentrant: a task holding the write lock that
/// calls `read()` on the same path waits behind itself forever; use
/// [`WriteGuard::downgrade`] instead.
///
/// # Fairness
///
/// Grants follow arrival order (the sequence number of the contender node): a reader arriving
/// after a waiting writer waits for that writer, so writers are never starved by readers, and
/// readers arriving together behind the same writer are granted together.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> zk_recipes::Result<()> {
/// use zk_recipes::{RwLock, Session};
///
/// let session = Session::builder("127.0.0.1:2181").connect().await?;
/// let lock = RwLock::new(&session, "/app/config-lock")?;
///
/// let read = lock.read().await?; // shared with other readers
/// println!("reading under {}", read.path());
/// read.release().await?;
///
/// let write = lock.write().await?; // alone
/// println!("writing with fencing token {}", write.fencing_token());
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    session: Session,
    /// The writer's spec; a reader's differs only in `kind` and `rule`.
    spec: Arc<QueueSpec>,
}

queue_options!(RwLock);

impl RwLock {
    /// A read/write lock on `path` (the directory of contender nodes) in `session`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot); nothing is sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// let lock = zk_recipes::RwLock::new(&session, "/app/table-lock")?.with_data(b"host-3".to_vec());
    /// # Ok(()) }
    /// ```
    pub fn new(session: &Session, path: impl AsRef<str>) -> Result<RwLock> {
        let spec = default_spec(
            session,
            path.as_ref(),
            NodeKind::Write,
            LOCK_MEMBERS,
            Rule::Exclusive,
        )?;
        Ok(RwLock {
            session: session.clone(),
            spec: Arc::new(spec),
        })
    }

    /// The node naming convention (default [`Layout::Curator`]): Curator's
    /// `_c_<uuid>-__READ__<seq>` / `-__WRIT__<seq>`, or kazoo's `<hex>__rlock__<seq>` /
    /// `<hex>__lock__<seq>`. Use the one of the Curator or kazoo peers sharing the path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// use zk_recipes::{Layout, RwLock};
    ///
    /// let lock = RwLock::new(&session, "/shared/with/python")?.with_layout(Layout::Kazoo);
    /// # Ok(()) }
    /// ```
    pub fn with_layout(mut self, layout: Layout) -> Self {
        Arc::make_mut(&mut self.spec).layout = layout;
        self
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.spec.dir
    }

    /// Waits until we may read: no writer holds or waits ahead of us.
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
    pub async fn read(&self) -> Result<ReadGuard> {
        self.acquire_read(Wait::Until(None)).await
    }

    /// Waits until we may write: no one holds or waits ahead of us.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `read`.
    pub async fn write(&self) -> Result<WriteGuard> {
        self.acquire_write(Wait::Until(None)).await
    }

    /// Like [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// * [`Error::Timeout`] when the time is up, with nothing held: within `timeout` whatever
    ///   the connection does, as [`FairLock::lock_timeout`](crate::FairLock::lock_timeout)
    ///   (our node is deleted before it returns while the connection is up, else in the
    ///   background once it is back).
    /// * Those of [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `read`.
    pub async fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard> {
        self.acquire_read(Wait::Until(Instant::now().checked_add(timeout)))
            .await
    }

    /// Like [`write`](Self::write), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// * [`Error::Timeout`] when the time is up, with nothing held: within `timeout` whatever
    ///   the connection does, as [`FairLock::lock_timeout`](crate::FairLock::lock_timeout)
    ///   (our node is deleted before it returns while the connection is up, else in the
    ///   background once it is back).
    /// * Those of [`write`](Self::write).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `write`.
    pub async fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard> {
        self.acquire_write(Wait::Until(Instant::now().checked_add(timeout)))
            .await
    }

    /// Takes a read lock only if no writer holds or waits now. One round trip when granted.
    ///
    /// # Errors
    ///
    /// * [`Error::WouldBlock`] if a writer is ahead (our node is deleted before it returns).
    /// * [`Error::ConnectionLost`] at once if the session is not connected, or as soon as the
    ///   connection drops: it never waits for a reconnect (see
    ///   [`FairLock::try_lock`](crate::FairLock::try_lock)); nothing is held.
    /// * Those of [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `read`.
    pub async fn try_read(&self) -> Result<ReadGuard> {
        self.acquire_read(Wait::Try).await
    }

    /// Takes the write lock only if no one holds or waits now. One round trip when granted.
    ///
    /// # Errors
    ///
    /// * [`Error::WouldBlock`] if anyone is ahead (our node is deleted before it returns).
    /// * [`Error::ConnectionLost`] at once if the session is not connected, or as soon as the
    ///   connection drops, as [`try_read`](Self::try_read); nothing is held.
    /// * Those of [`write`](Self::write).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `write`.
    pub async fn try_write(&self) -> Result<WriteGuard> {
        self.acquire_write(Wait::Try).await
    }

    /// Releases `guard` and queues again for a read lock at the back, in one transaction: a
    /// reader's loop (read, let go, read again) then costs the server one log write and one
    /// sync per iteration where a release followed by [`read`](Self::read) costs two. Whoever
    /// waits behind `guard` is woken exactly as after [`ReadGuard::release`]. Our new read node
    /// queues behind every waiting writer, so a looping reader cannot starve one. Then this
    /// waits as `read` does. `guard` must be one of this lock's, taken on the same
    /// [`Session`]; an exclusive guard (see [`ReadGuard::is_exclusive`]) releases its write
    /// node and comes back as a plain read lock.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] if `guard` had lost the lock, or its node was gone: nothing is
    ///   created (what was read under it may be stale, as `release` reports).
    /// * [`Error::InvalidArgument`] if `guard` is not a guard of this lock on this session
    ///   (it is released in the background).
    /// * Those of [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once polled, the release of `guard` runs to its end in the background
    /// (retried after a connection blip); dropping the future then deletes our new node in
    /// the background, as a dropped `read` does.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// let lock = zk_recipes::RwLock::new(&session, "/app/config-lock")?;
    /// let mut guard = lock.read().await?;
    /// for pass in 0..3 {
    ///     println!("pass {pass}: reading under {}", guard.path());
    ///     guard = lock.relock_read(guard).await?;
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn relock_read(&self, guard: ReadGuard) -> Result<ReadGuard> {
        let spec = self.read_spec();
        let held = guard.guard.into_holding();
        let granted = queue::relock(&self.session, &spec, held, LOCK_MEMBERS).await?;
        Ok(self.read_guard(granted))
    }

    /// Releases `guard` and queues again for the write lock at the back, in one transaction,
    /// as [`relock_read`](Self::relock_read) does for readers: readers and writers queued
    /// behind `guard` go first, then this waits as [`write`](Self::write) does.
    ///
    /// # Errors
    ///
    /// As [`relock_read`](Self::relock_read), then those of [`write`](Self::write).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `relock_read`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// let lock = zk_recipes::RwLock::new(&session, "/app/config-lock")?;
    /// let mut guard = lock.write().await?;
    /// for version in 0..3 {
    ///     println!("publish version {version} with token {}", guard.fencing_token());
    ///     guard = lock.relock_write(guard).await?;
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn relock_write(&self, guard: WriteGuard) -> Result<WriteGuard> {
        let held = guard.guard.into_holding();
        let granted = queue::relock(&self.session, &self.spec, held, LOCK_MEMBERS).await?;
        Ok(self.write_guard(granted))
    }

    /// The contenders in queue order, readers and writers (and any Curator or kazoo exclusive
    /// lock on the path); [`Contender::node`] tells which is which.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or a ZooKeeper error reading the directory.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        queue::contenders(&self.session, &self.spec.dir, LOCK_MEMBERS).await
    }

    fn read_spec(&self) -> QueueSpec {
        let mut spec = (*self.spec).clone();
        spec.kind = NodeKind::Read;
        spec.rule = Rule::Read;
        spec
    }

    async fn acquire_read(&self, wait: Wait) -> Result<ReadGuard> {
        let granted = queue::acquire(&self.session, &self.read_spec(), wait).await?;
        Ok(self.read_guard(granted))
    }

    async fn acquire_write(&self, wait: Wait) -> Result<WriteGuard> {
        let granted = queue::acquire(&self.session, &self.spec, wait).await?;
        Ok(self.write_guard(granted))
    }

    fn read_guard(&self, granted: Granted) -> ReadGuard {
        ReadGuard {
            guard: self.guard_core(granted),
            exclusive: false,
        }
    }

    fn write_guard(&self, granted: Granted) -> WriteGuard {
        WriteGuard {
            guard: self.guard_core(granted),
            lock: self.clone(),
        }
    }

    fn guard_core(&self, granted: Granted) -> LockGuard {
        LockGuard::new(
            Holding::new(&self.session, granted)
                .with_merge()
                .revocable(self.spec.revocable),
        )
    }
}

/// Proof that this process holds a read lock of an [`RwLock`], shared with other readers.
///
/// Dropping it releases the lock in the background (with the next read's create, in one
/// transaction, when the next read on this lock and session follows at once: see
/// [`LockGuard`]); [`release`](Self::release) does it now and reports errors.
/// [`lost`](LockGuard::lost) resolves if the lock is lost while held (session expired,
/// the loss policy gave up, node deleted by someone else). Not `Clone`.
///
/// There is no upgrade to a write lock: it cannot be offered without deadlock, since two
/// readers that both asked to upgrade would each wait for the other to leave. Release the read
/// lock and call [`RwLock::write`] instead, then re-read what you based your decision on, since
/// another writer may have come first. (The opposite way is safe: [`WriteGuard::downgrade`].)
///
/// # Examples
///
/// ```no_run
/// # async fn f(lock: zk_recipes::RwLock) -> zk_recipes::Result<()> {
/// let guard = lock.read().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("read lock lost: what we read may be stale"),
///     _ = async { /* read the shared resource */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct ReadGuard {
    guard: LockGuard,
    exclusive: bool,
}

/// Proof that this process holds the write lock of an [`RwLock`], alone.
///
/// Dropping it releases the lock in the background (with the next write's create, in one
/// transaction, when the next write on this lock and session follows at once: see
/// [`LockGuard`]); [`release`](Self::release) does it now and reports errors; [`downgrade`](Self::downgrade) turns it into a read lock. Not `Clone`.
///
/// # Examples
///
/// ```no_run
/// # async fn f(lock: zk_recipes::RwLock) -> zk_recipes::Result<()> {
/// let guard = lock.write().await?;
/// // write, tagging the writes with guard.fencing_token() so a store can refuse stale writers
/// let read = guard.downgrade().await?; // keep reading what we wrote; no writer gets in between
/// read.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct WriteGuard {
    guard: LockGuard,
    lock: RwLock,
}

/// Releases, lost signal and accessors: both guards are the guard core ([`LockGuard`]) with a
/// little more.
macro_rules! guard_core {
    ($ty:ty) => {
        /// Every accessor of the guard core: `path`, `fencing_token`, `session_id`, `lost`,
        /// `lost_token`, `is_lost`, `loss_reason`.
        impl std::ops::Deref for $ty {
            type Target = LockGuard;
            fn deref(&self) -> &LockGuard {
                &self.guard
            }
        }

        /// The guard core, for code that treats every kind of hold alike.
        impl From<$ty> for LockGuard {
            fn from(guard: $ty) -> LockGuard {
                guard.guard
            }
        }

        impl $ty {
            /// Releases the lock now; see [`LockGuard::release`].
            ///
            /// # Errors
            ///
            /// As [`LockGuard::release`].
            ///
            /// # Cancel safety
            ///
            /// As [`LockGuard::release`]: once polled, the release runs to its end.
            pub async fn release(self) -> Result<()> {
                self.guard.release().await
            }
        }
    };
}

guard_core!(ReadGuard);
guard_core!(WriteGuard);

impl ReadGuard {
    /// Whether this read lock is held through a write node: true only for a guard returned by
    /// a [`WriteGuard::downgrade`] that found a writer already queued behind it (see there). It
    /// then excludes readers too, until released.
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
}

/// What placing a read node behind our write node found.
enum Placement {
    /// Our read node follows our write node with no writer in between.
    Clean(Granted),
    /// A writer queued between (or the outcome is unknown): keep the write node.
    KeepWrite,
    /// Our write node is gone, or the epoch it was held in has ended.
    WriteLost(LossReason),
}

impl WriteGuard {
    /// Turns the write lock into a read lock without letting another writer in between.
    ///
    /// # Downgrade
    ///
    /// If no writer has queued behind us yet, a read node is placed right behind our write node
    /// and the write node is released: readers queued behind us are granted at once and read
    /// alongside us, and the next writer waits for us. If a writer had already queued behind
    /// us, a read node could only go behind that writer, which would let it in first; the write
    /// node is then kept, and the returned guard holds it: still a read lock for us (no writer
    /// gets in), but exclusive, so readers queued behind us wait until we release
    /// ([`ReadGuard::is_exclusive`] tells). Two round trips in the first case, one in the second.
    ///
    /// # Fairness
    ///
    /// The downgraded read lock keeps our place in the queue: writers that arrive later still
    /// wait for it, and readers between us and the next writer are not held back (unless the
    /// guard is exclusive, see above).
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] if the write lock was lost before or during the downgrade. Nothing
    ///   is held afterwards.
    /// * [`Error::ZooKeeper`] or [`Error::ConnectionLost`] if releasing the write node failed
    ///   after the read node was placed; both are then released (or go with the session), and
    ///   nothing is held.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the lock survives: dropping the future releases
    /// everything it holds (the write node and any read node placed), in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: zk_recipes::RwLock) -> zk_recipes::Result<()> {
    /// let write = lock.write().await?;
    /// // ... publish a new version of the resource ...
    /// let read = write.downgrade().await?;
    /// if read.is_exclusive() {
    ///     println!("a writer was already queued: readers wait until we release");
    /// }
    /// // ... keep reading the version we published; no writer can change it meanwhile ...
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard> {
        let WriteGuard { guard, lock } = self;
        if guard.is_lost() {
            let reason = guard.loss_reason().unwrap_or(LossReason::SessionExpired);
            return Err(Error::LockLost(reason));
        }
        let Some(epoch) = guard.holding.epoch() else {
            return Err(Error::LockLost(LossReason::SessionExpired));
        };
        match lock.place_read_behind(&epoch, guard.holding.name()).await {
            Placement::Clean(granted) => {
                // Hold the read node first, so that a cancellation from here on releases both.
                let read = lock.read_guard(granted);
                match guard.release().await {
                    Ok(()) => Ok(read),
                    Err(err) => {
                        drop(read);
                        Err(err)
                    }
                }
            }
            // The write node is kept only while it is still ours: a placement that failed
            // because the epoch ended (or that ended while it waited) holds nothing.
            Placement::KeepWrite if epoch.is_over() || guard.is_lost() => {
                let reason = guard
                    .loss_reason()
                    .or_else(|| epoch.over_reason())
                    .unwrap_or(LossReason::SessionExpired);
                Err(Error::LockLost(reason))
            }
            Placement::KeepWrite => Ok(ReadGuard {
                guard,
                exclusive: true,
            }),
            Placement::WriteLost(reason) => Err(Error::LockLost(reason)),
        }
    }
}

impl RwLock {
    /// Creates a read node and checks that no writer stands between `write` (ours, held) and
    /// it. Only a [`Placement::Clean`] outcome leaves the read node in place.
    async fn place_read_behind(&self, epoch: &Arc<Epoch>, write: &NodeName) -> Placement {
        let spec = &self.spec;
        let (prefix, protection) = new_prefix(spec.layout, NodeKind::Read);
        let prefix_path = join(&spec.dir, &prefix);
        // Deletes the read node unless the placement completes (failed, cancelled).
        let mut pending = Abandoned::protected(&self.session, epoch, &spec.dir, &protection);
        let acls = epoch.contender_acls(&spec.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&acls));
        let bound = self.session.session_timeout() * 2;
        // Made only into a live, connected epoch (see `Epoch::wait_connected`): queued while
        // disconnected, the read node was made when the client reconnected into the session,
        // after `close()` had returned (found by a review, 2026-11-27).
        match tokio::time::timeout(bound, epoch.wait_connected()).await {
            Ok(true) => {}
            Ok(false) => {
                pending.disarm();
                return Placement::WriteLost(
                    epoch.over_reason().unwrap_or(LossReason::SessionExpired),
                );
            }
            Err(_) => {
                pending.disarm();
                return Placement::KeepWrite;
            }
        }
        // One round trip: the listing is answered after the create.
        let create = epoch.create(&prefix_path, &spec.data, &options);
        let list = epoch.get_children(&spec.dir);
        let answered = tokio::time::timeout(bound, async { (create.await, list.await) }).await;
        let Ok((created, listed)) = answered else {
            tracing::warn!(
                dir = spec.dir,
                "downgrade: no answer in time; keeping the write node"
            );
            return Placement::KeepWrite;
        };
        let (stat, seq) = match created {
            Ok(ok) => ok,
            // The directory is gone, and our write node with it.
            Err(zk::Error::NoNode) => {
                pending.disarm();
                return Placement::WriteLost(LossReason::NodeDeleted);
            }
            // The session is over, and our write node with it.
            Err(err) if failure(&err) == Failure::SessionOver => {
                pending.disarm();
                let reason = epoch.over_reason().unwrap_or(LossReason::SessionExpired);
                return Placement::WriteLost(reason);
            }
            Err(err) => {
                // Unknown outcome: the pending node is looked for by its protection id and
                // deleted. A definite error created nothing.
                if !is_unknown(&err) {
                    pending.disarm();
                }
                tracing::warn!(dir = spec.dir, %err, "downgrade: cannot create the read node; keeping the write node");
                return Placement::KeepWrite;
            }
        };
        let name = format!("{prefix}{seq}");
        let path = join(&spec.dir, &name);
        pending.set_path(path.clone());
        let Some(read) = NodeName::parse(&name) else {
            return Placement::KeepWrite;
        };
        if stat.ephemeral_owner != epoch.session_id {
            return Placement::KeepWrite;
        }
        let children = match listed {
            Ok((children, _)) => children,
            Err(_) => return Placement::KeepWrite,
        };
        let nodes: Vec<NodeName> = children.iter().filter_map(|c| NodeName::parse(c)).collect();
        // By name: a directory deleted and made again counts from 0, so another contender's
        // node may carry our write node's number.
        if !children.contains(&write.name) {
            return Placement::WriteLost(LossReason::NodeDeleted);
        }
        let writer_between = nodes.iter().any(|n| {
            LOCK_MEMBERS.contains(&n.kind)
                && n.kind != NodeKind::Read
                && n.sequence > write.sequence
                && n.sequence < read.sequence
        });
        if writer_between {
            return Placement::KeepWrite;
        }
        pending.disarm();
        Placement::Clean(Granted {
            epoch: epoch.clone(),
            path,
            name: read,
            czxid: stat.czxid,
            own_watch: None,
        })
    }
}

const _: () = {
    const fn assert_clone_send_sync<T: Send + Sync + Clone>() {}
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_clone_send_sync::<RwLock>();
    assert_send_sync::<ReadGuard>();
    assert_send_sync::<WriteGuard>();
};
