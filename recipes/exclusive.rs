//! The simple exclusive-ephemeral lock.
//!
//! # Znode layout
//!
//! ```text
//! <parent>                 CONTAINER, made if missing
//! <parent>/<name>          EPHEMERAL: exists while someone holds the lock; data = holder identity
//! ```
//!
//! # Algorithm
//!
//! Whoever creates the node holds the lock. Everyone else sets an `exists` watch on it and
//! tries again when it goes. Simple, one request when free, but it has a **herd effect**:
//! every waiter wakes on each release and all but one fail again, so a release costs O(waiters)
//! notifications and requests, and there is no order among waiters. Use [`FairLock`] for
//! fair, herd-free queueing of many waiters.
//!
//! The lock is granted only when the create succeeded in the current session, so the node's
//! `ephemeralOwner` is ours. Within one process, creates at one path are serialized per
//! session, and every node this process takes as its own is *claimed* by its czxid (a node
//! made again at the same path has another). After a connection loss during `create`
//! (outcome unknown) the acquire reads the node before sending anything else for the path: a
//! node owned by our session that nothing has claimed is the one this create made. A
//! cancelled acquire's cleanup decides the same way, so it can never delete the node of a
//! live guard, whether of the same handle, another handle or another task.
//!
//! [`FairLock`]: crate::FairLock

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::error::{is_unknown, Error, Result};
use crate::guard::LockGuard;
use crate::path::{Layout, NodeKind, NodeName};
use crate::queue::{
    bounded, decide_fixed, delete_stuck, Abandoned, Fixed, Granted, Holding, Stuck, Wait,
};
use crate::session::{Epoch, Session};

/// A lock held by whoever owns one ephemeral node.
///
/// # Examples
///
/// ```no_run
/// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::ExclusiveLock;
///
/// let lock = ExclusiveLock::new(&session, "/app/leader-lock")?;
/// match lock.try_lock().await {
///     Ok(guard) => guard.release().await?,
///     Err(zk_recipes::Error::WouldBlock) => println!("someone else has it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ExclusiveLock {
    session: Session,
    path: Arc<str>,
    data: Arc<[u8]>,
    acls: Arc<[zk::Acl]>,
}

impl ExclusiveLock {
    /// A lock whose node is `path`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot); nothing is sent.
    pub fn new(session: &Session, path: impl AsRef<str>) -> Result<ExclusiveLock> {
        session.validate_recipe_path(path.as_ref())?;
        Ok(ExclusiveLock {
            session: session.clone(),
            path: path.as_ref().into(),
            data: Arc::from(&[][..]),
            acls: zk::Acls::anyone_all().to_vec().into(),
        })
    }

    /// Data stored in the lock node while held (default: empty).
    pub fn with_data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into().into();
        self
    }

    /// The ACL of the lock node and of parents we create (default: open).
    pub fn with_acls(mut self, acls: &[zk::Acl]) -> Self {
        self.acls = acls.into();
        self
    }

    /// Takes the lock if it is free now. One request.
    ///
    /// # Errors
    ///
    /// * [`Error::WouldBlock`] if someone holds it.
    /// * [`Error::ConnectionLost`] at once if the session is not connected, or as soon as the
    ///   connection drops: it never waits for a reconnect (see
    ///   [`FairLock::try_lock`](crate::FairLock::try_lock)). Nothing is held; a node whose
    ///   create may have reached the server is deleted in the background once the connection
    ///   is back.
    /// * Those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if dropped after the create was sent, the node is deleted in the background.
    pub async fn try_lock(&self) -> Result<LockGuard> {
        self.acquire(Some(Instant::now()), true).await
    }

    /// Waits until the lock is ours.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], [`Error::NoAuth`], or a ZooKeeper error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a waiter holds no node, and a create in flight is undone in the background.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, false).await
    }

    /// Like [`lock`](Self::lock), but gives up with [`Error::Timeout`] after `timeout`: within
    /// `timeout` whatever the connection does (a create sent while it is down, which may make
    /// the node once it is back, is undone in the background).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.acquire(Instant::now().checked_add(timeout), false)
            .await
    }

    /// The current holder (its node, owner session, data and age), or `None` if the lock is
    /// free. The node's `sequence` is `None`: this lock has no queue.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or a ZooKeeper error reading the node.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn holder(&self) -> Result<Option<crate::Contender>> {
        let epoch = self.session.epoch().await?;
        let (data, stat) = match epoch.get_data(&self.path).await {
            Ok(r) => r,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) => return Err(Error::zk("get_data", &self.path, err)),
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let name = self.path.rsplit('/').next().unwrap_or_default().to_string();
        Ok(Some(crate::Contender {
            node: NodeName {
                name,
                sequence: None,
                kind: NodeKind::Lock,
                layout: Layout::Curator,
                protection: None,
            },
            owner: stat.ephemeral_owner,
            data,
            age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
            czxid: stat.czxid,
            role: crate::Role::Holder,
        }))
    }

    async fn acquire(&self, deadline: Option<Instant>, try_only: bool) -> Result<LockGuard> {
        use tracing::field::Empty;
        crate::path::validate_data("the lock node's data", &self.data)?;
        let span = tracing::info_span!(target: "zk_recipes", "acquire", path = %self.path, kind = "simple", node = Empty, epoch = Empty, session_id = Empty, outcome = Empty);
        let started = Instant::now();
        // Kept whatever the connection does: see `queue::bounded`.
        let wait = if try_only {
            Wait::Try
        } else {
            Wait::Until(deadline)
        };
        let result = tracing::Instrument::instrument(
            bounded(
                &self.session,
                wait,
                self.acquire_in_turn(deadline, try_only),
            ),
            span.clone(),
        )
        .await;
        span.in_scope(|| crate::observe::acquired("simple", &result, started.elapsed()));
        result
    }

    async fn acquire_in_turn(
        &self,
        deadline: Option<Instant>,
        try_only: bool,
    ) -> Result<LockGuard> {
        let path: &str = &self.path;
        let sleep_until = |d: Option<Instant>| async move {
            match d {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let mut made_parents = 0;
        loop {
            let epoch = tokio::select! {
                e = self.session.epoch() => e?,
                _ = sleep_until(deadline), if !try_only => return Err(Error::Timeout),
            };
            epoch
                .check_creator_acls(&self.acls)
                .map_err(|err| Error::zk("create", path, err))?;
            // No other create at this path is in flight in this process while we hold this;
            // if the future is dropped, the undo guard keeps it until the cleanup is done.
            let serial = if try_only {
                // Something of this session is creating, deciding or releasing here: the
                // node is (or may still be) there.
                match self.session.try_serialize_path(path) {
                    Some(g) => g,
                    None => return Err(Error::WouldBlock),
                }
            } else {
                tokio::select! {
                    g = self.session.serialize_path(path) => g,
                    _ = sleep_until(deadline) => return Err(Error::Timeout),
                }
            };
            // Our create is made only into a live, connected epoch (see
            // `Epoch::wait_connected`), checked under the serializer, just before the create:
            // checked before it, the wait for another create of this session outlived the
            // epoch, and ours went into the ended epoch's client (found by a review,
            // 2026-11-27). An epoch over meanwhile is followed by the next one.
            let connected = tokio::select! {
                c = epoch.wait_connected() => c,
                _ = sleep_until(deadline), if !try_only => return Err(Error::Timeout),
            };
            if !connected {
                drop(serial);
                tokio::select! {
                    _ = epoch.lost_token().cancelled() => {}
                    _ = sleep_until(deadline), if !try_only => return Err(Error::Timeout),
                }
                continue;
            }
            let mut undo = Abandoned::fixed(&self.session, &epoch, path, serial);
            // Only our session may write the node's data or ACL (see `Epoch::contender_acls`).
            let acls = epoch.contender_acls(&self.acls);
            let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acls));
            let created = epoch.create(path, &self.data, &options).await;
            let outcome = match created {
                Ok((stat, _)) => {
                    // A fresh node: nobody can have claimed its czxid.
                    let claimed = self.session.claim(stat.czxid);
                    debug_assert!(claimed, "a fresh node's czxid was claimed");
                    Fixed::Ours(stat.czxid)
                }
                Err(zk::Error::NodeExists) => Fixed::Busy,
                // The parents are missing, or were deleted again meanwhile (an administrator
                // removing the tree while we queue): make them again, a few times in a row
                // (counted since our create last found the tree standing, so a long wait
                // outlives any number of removals).
                Err(zk::Error::NoNode) if made_parents < 5 => {
                    undo.disarm();
                    made_parents += 1;
                    let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&self.acls));
                    match epoch.create_parents(path, &container).await {
                        Ok(()) => continue,
                        Err(zk::Error::NoNode) => {
                            return Err(Error::InvalidPath {
                                path: path.to_string(),
                                reason: "its chroot does not exist",
                            })
                        }
                        Err(zk::Error::NoChildrenForEphemerals) => {
                            return Err(epoch.below_an_ephemeral(path).await)
                        }
                        Err(err) => return Err(Error::zk("create parent", path, err)),
                    }
                }
                Err(zk::Error::NoChildrenForEphemerals) => {
                    undo.disarm();
                    return Err(Error::InvalidArgument(format!(
                        "the parent of {path} is an ephemeral node: pick another path"
                    )));
                }
                Err(err) if is_unknown(&err) => {
                    // Outcome unknown: find out before anything else is sent for this path
                    // (a retry sent first could be answered NodeExists by our own orphan, or
                    // succeed and then be deleted by a late cleanup).
                    tracing::debug!(%err, path, "create outcome unknown; checking the node");
                    decide_fixed(&self.session, &epoch, path).await
                }
                Err(err) => {
                    undo.disarm();
                    return Err(Error::zk("create", path, err));
                }
            };
            // Decided: the undo has nothing left to do, and other creates may go.
            undo.disarm();
            match outcome {
                Fixed::Ours(czxid) => return Ok(self.guard(epoch, czxid)),
                Fixed::Busy => made_parents = 0,
                Fixed::Absent | Fixed::Unknown => continue,
            }
            let not_a_lock = || {
                Error::InvalidArgument(format!(
                    "{path} is a persistent node, not a lock: it would never be released; \
                     pick another path (or use FairLock, which takes a directory)"
                ))
            };
            if try_only {
                match epoch.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == 0 => return Err(not_a_lock()),
                    Ok(Some(stat)) if stuck(&epoch, path, &stat) => {
                        match delete_stuck(&epoch, path, Some(self.session.path_serializers()))
                            .await
                        {
                            Stuck::Yes => {
                                crate::queue::ensure_sweeper(&self.session, &epoch);
                                return Err(stuck_error(path));
                            }
                            // Deleted after all (the ACL was fixed): try the create again.
                            Stuck::No | Stuck::Unknown => continue,
                        }
                    }
                    _ => return Err(Error::WouldBlock),
                };
            }
            // Held by someone else: wait for it to go. (Or held by our own node, which a
            // release of ours is about to find undeletable: that wakes us too.)
            let mut stuck_changes = epoch.stuck_changes();
            let (stat, watcher) = match epoch.check_and_watch_stat(path).await {
                Ok(r) => r,
                Err(err) if is_unknown(&err) => continue,
                Err(err) => return Err(Error::zk("exists", path, err)),
            };
            match stat {
                None => continue,
                Some(stat) if stat.ephemeral_owner == 0 => return Err(not_a_lock()),
                Some(stat) if stuck(&epoch, path, &stat) => {
                    match delete_stuck(&epoch, path, Some(self.session.path_serializers())).await {
                        Stuck::Yes => {
                            crate::queue::ensure_sweeper(&self.session, &epoch);
                            return Err(stuck_error(path));
                        }
                        Stuck::No | Stuck::Unknown => continue,
                    }
                }
                Some(_) => {}
            }
            tokio::select! {
                _ = watcher.changed() => {}
                _ = epoch.lost_token().cancelled() => {}
                Ok(()) = stuck_changes.changed() => {}
                _ = sleep_until(deadline) => return Err(Error::Timeout),
            }
        }
    }

    fn guard(&self, epoch: Arc<Epoch>, czxid: i64) -> LockGuard {
        let name = self.path.rsplit('/').next().unwrap_or_default().to_string();
        let granted = Granted {
            epoch,
            path: self.path.to_string(),
            name: NodeName {
                name,
                sequence: None,
                kind: NodeKind::Lock,
                layout: Layout::Curator,
                protection: None,
            },
            czxid,
            own_watch: None,
        };
        // Released with the mark: its set needs WRITE, which only our session's identity has,
        // so the release can never delete another session's node (see `holding::Check`).
        // Waiters of this lock retry on any event, so the mark costs them nothing.
        let holding = Holding::new(&self.session, granted)
            .with_shared_path()
            .claimed();
        LockGuard::new(holding)
    }
}

/// Whether `stat`, read at `path`, is a node of ours whose delete the server refused (see
/// [`Epoch::note_stuck`]): it stays until the session ends, and waiting for it never ends,
/// unless its delete, tried once more (`delete_stuck`), now passes.
fn stuck(epoch: &Epoch, path: &str, stat: &zk::Stat) -> bool {
    stat.ephemeral_owner == epoch.session_id && epoch.is_stuck(path, Some(stat.czxid))
}

/// The answer of an acquire that finds our own undeletable node at the path: the directory's
/// ACL does not let this session delete it.
fn stuck_error(path: &str) -> Error {
    Error::NoAuth {
        path: crate::path::parent(path).to_string(),
    }
}
