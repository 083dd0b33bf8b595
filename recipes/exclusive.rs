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
//! `ephemeralOwner` is ours. After a connection loss during `create` (outcome unknown), a node
//! owned by our session is ours only if no other contender of this handle holds it.
//!
//! [`FairLock`]: crate::FairLock

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::path::{validate_path, Layout, NodeKind, NodeName};
use crate::queue::{Granted, Holding};
use crate::session::Session;

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
    /// How many of this handle's contenders hold the node now (0 or 1).
    held_here: Arc<Mutex<u32>>,
}

impl ExclusiveLock {
    /// A lock whose node is `path`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path; nothing is sent.
    pub fn new(session: &Session, path: impl AsRef<str>) -> Result<ExclusiveLock> {
        validate_path(path.as_ref())?;
        Ok(ExclusiveLock {
            session: session.clone(),
            path: path.as_ref().into(),
            data: Arc::from(&[][..]),
            acls: zk::Acls::anyone_all().to_vec().into(),
            held_here: Arc::new(Mutex::new(0)),
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

    /// Takes the lock if it is free now, else [`Error::WouldBlock`]. One request.
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

    /// Like [`lock`](Self::lock), but gives up with [`Error::Timeout`] after `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `lock`.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<LockGuard> {
        self.acquire(Instant::now().checked_add(timeout), false)
            .await
    }

    /// The current holder (its node, owner session, data and age), or `None` if the lock is
    /// free. The node's `sequence` is -1: this lock has no queue.
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
                sequence: -1,
                kind: NodeKind::Lock,
                layout: Layout::Curator,
                protection: None,
            },
            owner: stat.ephemeral_owner,
            data,
            age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
            czxid: stat.czxid,
        }))
    }

    async fn acquire(&self, deadline: Option<Instant>, try_only: bool) -> Result<LockGuard> {
        let path: &str = &self.path;
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&self.acls));
        let sleep_until = |d: Option<Instant>| async move {
            match d {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let mut made_parents = false;
        loop {
            let epoch = tokio::select! {
                e = self.session.epoch() => e?,
                _ = sleep_until(deadline), if !try_only => return Err(Error::Timeout),
            };
            let mut undo = UndoCreate {
                session: self.session.clone(),
                epoch: Some(epoch.clone()),
                path: path.to_string(),
            };
            match epoch.create(path, &self.data, &options).await {
                Ok((stat, _)) => {
                    undo.epoch = None;
                    *self.held_here.lock().unwrap() += 1;
                    let granted = Granted {
                        epoch,
                        path: path.to_string(),
                        name: NodeName {
                            name,
                            sequence: -1,
                            kind: NodeKind::Lock,
                            layout: Layout::Curator,
                            protection: None,
                        },
                        czxid: stat.czxid,
                        own_watch: None,
                    };
                    let held_here = self.held_here.clone();
                    let holding = Holding::new(&self.session, granted)
                        .with_shared_path()
                        .on_end(move || {
                            let mut h = held_here.lock().unwrap();
                            *h = h.saturating_sub(1);
                        });
                    return Ok(LockGuard::new(holding));
                }
                Err(zk::Error::NodeExists) => undo.epoch = None,
                Err(zk::Error::NoNode) if !made_parents => {
                    undo.epoch = None;
                    made_parents = true;
                    let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&self.acls));
                    match epoch.create_parents(path, &container).await {
                        Ok(()) => continue,
                        Err(zk::Error::NoNode) => {
                            return Err(Error::InvalidPath {
                                path: path.to_string(),
                                reason: "its chroot does not exist",
                            })
                        }
                        Err(err) => return Err(Error::zk("create parent", path, err)),
                    }
                }
                Err(zk::Error::NoChildrenForEphemerals) => {
                    undo.epoch = None;
                    return Err(Error::InvalidArgument(format!(
                        "the parent of {path} is an ephemeral node: pick another path"
                    )));
                }
                Err(err @ (zk::Error::ConnectionLoss | zk::Error::Custom(_))) => {
                    // Outcome unknown: the undo guard deletes a node of ours once connected,
                    // unless it turns out that another contender of this handle holds it.
                    if *self.held_here.lock().unwrap() > 0 {
                        undo.epoch = None;
                    }
                    tracing::debug!(%err, path, "create outcome unknown; retrying");
                    drop(undo);
                    continue;
                }
                Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                    undo.epoch = None;
                    continue;
                }
                Err(err) => {
                    undo.epoch = None;
                    return Err(Error::zk("create", path, err));
                }
            }
            let not_a_lock = || {
                Error::InvalidArgument(format!(
                    "{path} is a persistent node, not a lock: it would never be released; \
                     pick another path (or use FairLock, which takes a directory)"
                ))
            };
            if try_only {
                return match epoch.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == 0 => Err(not_a_lock()),
                    _ => Err(Error::WouldBlock),
                };
            }
            // Held by someone else: wait for it to go.
            let (stat, watcher) = match epoch.check_and_watch_stat(path).await {
                Ok(r) => r,
                Err(
                    zk::Error::SessionExpired
                    | zk::Error::ClientClosed
                    | zk::Error::ConnectionLoss
                    | zk::Error::Custom(_),
                ) => continue,
                Err(err) => return Err(Error::zk("exists", path, err)),
            };
            match stat {
                None => continue,
                Some(stat) if stat.ephemeral_owner == 0 => return Err(not_a_lock()),
                Some(_) => {}
            }
            tokio::select! {
                _ = watcher.changed() => {}
                _ = epoch.lost_token().cancelled() => {}
                _ = sleep_until(deadline) => return Err(Error::Timeout),
            }
        }
    }
}

/// Deletes the lock node if an acquire that may have created it is abandoned.
struct UndoCreate {
    session: Session,
    epoch: Option<Arc<crate::session::Epoch>>,
    path: String,
}

impl Drop for UndoCreate {
    fn drop(&mut self) {
        let Some(epoch) = self.epoch.take() else {
            return;
        };
        let path = std::mem::take(&mut self.path);
        self.session.spawn_tracked(async move {
            if let Ok(Some(stat)) = epoch.check_stat(&path).await {
                if stat.ephemeral_owner == epoch.session_id {
                    let _ = epoch.delete(&path, Some(stat.version)).await;
                }
            }
        });
    }
}
