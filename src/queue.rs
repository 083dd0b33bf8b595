//! The contender queue every queue-based recipe stands on (fair lock, semaphore, read/write
//! lock, leader election).
//!
//! # Znode layout
//!
//! One directory per lock; each contender is an EPHEMERAL_SEQUENTIAL child named as in
//! [`crate::path`] (Curator's `_c_<uuid>-lock-<seq>` by default). Contenders are ordered by the
//! sequence suffix, which the parent assigns in creation order.
//!
//! # Algorithm
//!
//! 1. **One round trip to enter.** `create` and `get_children(dir)` are queued back to back on
//!    the session without awaiting the first; ZooKeeper answers a session's requests in order,
//!    so the listing already contains our node. Missing parents are made as CONTAINER nodes
//!    (the server reaps them once empty) and the pair is sent again.
//! 2. **Who blocks us.** A [`Rule`] says which lower nodes block us: all of them (exclusive
//!    lock, writer, election), the lower writers (reader), or "at least `permits` of them"
//!    (semaphore). Lower sequence numbers never reappear, so the snapshot we read can only
//!    shrink: we never need to list again to learn about *new* blockers.
//! 3. **No herd.** We watch one node: the nearest blocker (the `permits`-th nearest for a
//!    semaphore), with an `exists` watch, plus our own node (to notice it being deleted by
//!    someone else).
//! 4. **One notification per hand-off.** Our release is one `multi`: `set_data(node, MARK)` then
//!    `delete(node)`. Nothing else in the toolkit (nor Curator or kazoo) changes a contender's
//!    data, so a waiter whose watch fires with NodeDataChanged knows the watched node *held*
//!    the lock and is now gone. If it held it exclusively (a lock, writer or leader node),
//!    nothing below it can exist, and the waiter takes the lock with no request at all. On a
//!    plain deletion (a cancelled waiter, an expired session, a Curator or kazoo holder, or a
//!    released reader) the waiter walks back through the nodes it already read, one `exists`
//!    each, and re-lists only after several in a row are gone. Before it takes the lock after
//!    a plain deletion it checks, with one more `exists`, that its own node is still there: an
//!    administrator deleting the directory deletes both, and the event for ours may still be
//!    on its way. Curator and kazoo re-list every
//!    child at each wake-up instead: O(N) per hand-off.
//! 5. **Ownership.** A node counts as ours only in the epoch (session) that created it, with
//!    `ephemeralOwner` equal to that session id. When the epoch ends, a waiter re-queues in the
//!    next session (at the back) after deleting any node the old session may have left; a
//!    holder is told through `lost()`.
//! 6. **Connection loss during create.** The name carries a random protection id chosen before
//!    the request is sent; when the outcome is unknown we look for the id among the children:
//!    found in our session, it is ours; anything else is deleted, never adopted.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::error::{Error, LossReason, Result};
use crate::path::{join, new_prefix, Layout, NodeKind, NodeName};
use crate::session::{Epoch, Session};

/// The data our release writes just before deleting a contender node.
pub(crate) const RELEASE_MARK: &[u8] = b"\x00zk-recipes:released";

/// A boxed one-shot watch.
pub(crate) type WatchFuture = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Which lower nodes block a contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Every lower contender blocks (fair lock, writer, leader election).
    Exclusive,
    /// Lower exclusive nodes (locks, writers) block; lower readers do not.
    Read,
    /// Granted while fewer than `permits` lower contenders exist (semaphore).
    Permits(usize),
}

/// How an acquire waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Never wait: `WouldBlock` if not granted at once.
    Try,
    /// Wait until the deadline (if any).
    Until(Option<Instant>),
}

/// Which node kinds take part in a queue, and which one we create.
#[derive(Debug, Clone)]
pub(crate) struct QueueSpec {
    pub(crate) dir: String,
    pub(crate) layout: Layout,
    pub(crate) kind: NodeKind,
    pub(crate) members: &'static [NodeKind],
    pub(crate) rule: Rule,
    pub(crate) data: Vec<u8>,
    pub(crate) acls: Vec<zk::Acl>,
    pub(crate) requeue_on_expiry: bool,
}

/// Node kinds that take part in a lock directory (Curator and kazoo locks, read/write nodes).
pub(crate) const LOCK_MEMBERS: &[NodeKind] = &[NodeKind::Lock, NodeKind::Read, NodeKind::Write];

impl QueueSpec {
    fn is_member(&self, n: &NodeName) -> bool {
        self.members.contains(&n.kind)
    }

    /// Whether a node of this kind, when it holds, holds alone.
    fn holds_alone(kind: NodeKind) -> bool {
        matches!(kind, NodeKind::Lock | NodeKind::Write | NodeKind::Latch)
    }

    fn blocks(&self, n: &NodeName) -> bool {
        match self.rule {
            Rule::Read => Self::holds_alone(n.kind),
            _ => true,
        }
    }

    /// Given the lower members (ascending), the node to watch, or `None` when granted.
    fn watch_target<'a>(&self, lower: &'a [NodeName]) -> Option<&'a NodeName> {
        match self.rule {
            Rule::Exclusive => lower.last(),
            Rule::Read => lower.iter().rev().find(|n| self.blocks(n)),
            Rule::Permits(p) => lower.len().checked_sub(p).map(|i| &lower[i]),
        }
    }

    /// Whether to re-list, rather than walk back, once `gone` has left. A semaphore waiter
    /// must (other leases may have gone too). So does a waiter behind a reader: readers leave
    /// in any order, so the ones below are likely gone as well, and one listing beats an
    /// `exists` per departed reader. Below an exclusive node, walking back is one `exists`.
    fn relist_after(&self, gone: &NodeName) -> bool {
        matches!(self.rule, Rule::Permits(_)) || !Self::holds_alone(gone.kind)
    }

    /// Whether a release mark on `watched` proves we hold the lock now.
    fn mark_grants(&self, watched: &NodeName) -> bool {
        !matches!(self.rule, Rule::Permits(_)) && Self::holds_alone(watched.kind)
    }
}

/// A node granted to us.
pub(crate) struct Granted {
    pub(crate) epoch: Arc<Epoch>,
    pub(crate) path: String,
    pub(crate) name: NodeName,
    pub(crate) czxid: i64,
    /// Our own-node watch, if set while waiting (saves a request on a marked hand-off).
    pub(crate) own_watch: Option<WatchFuture>,
}

/// Deletes a node left by an acquire that did not finish (cancelled, timed out, failed).
struct PendingNode {
    session: Session,
    epoch: Arc<Epoch>,
    dir: String,
    protection: String,
    path: Option<String>,
    armed: bool,
}

impl PendingNode {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed || self.epoch.lost_token().is_cancelled() {
            return;
        }
        let epoch = self.epoch.clone();
        let dir = self.dir.clone();
        let protection = self.protection.clone();
        let path = self.path.clone();
        self.session.spawn_tracked(async move {
            if let Err(err) = delete_ours(&epoch, &dir, &protection, path.as_deref()).await {
                tracing::warn!(%err, dir, "could not delete an abandoned contender node; it goes when the session ends");
            }
        });
    }
}

/// Deletes our node: by path if known, else by finding the protection id among the children.
async fn delete_ours(epoch: &Epoch, dir: &str, protection: &str, path: Option<&str>) -> Result<()> {
    let path = match path {
        Some(p) => p.to_string(),
        None => match find_by_protection(epoch, dir, protection).await? {
            Some((p, _)) => p,
            None => return Ok(()),
        },
    };
    match tokio::time::timeout(Duration::from_secs(30), epoch.delete(&path, None)).await {
        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => Ok(()),
        Ok(Err(err)) => Err(Error::zk("delete", &path, err)),
        Err(_) => Err(Error::Timeout),
    }
}

async fn find_by_protection(
    epoch: &Epoch,
    dir: &str,
    protection: &str,
) -> Result<Option<(String, NodeName)>> {
    let children = match epoch.get_children(dir).await {
        Ok((c, _)) => c,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(err) => return Err(Error::zk("get_children", dir, err)),
    };
    Ok(children
        .into_iter()
        .filter_map(|c| NodeName::parse(&c))
        .find(|n| n.protection.as_deref() == Some(protection))
        .map(|n| (join(dir, &n.name), n)))
}

/// Outcome of one attempt in one epoch.
enum Attempt {
    Granted(Granted),
    /// The epoch ended (or our node vanished) while waiting: try again in the next one.
    Requeue(LossReason, Option<String>),
}

/// Acquires a place in the queue and waits until the rule grants it.
///
/// # Cancel safety
///
/// Dropping the future deletes our node in the background (tracked by the session).
pub(crate) async fn acquire(session: &Session, spec: &QueueSpec, wait: Wait) -> Result<Granted> {
    let mut stale: Option<String> = None;
    loop {
        let epoch = match wait {
            Wait::Until(Some(deadline)) => {
                match tokio::time::timeout_at(deadline.into(), session.epoch()).await {
                    Ok(r) => r?,
                    Err(_) => return Err(Error::Timeout),
                }
            }
            _ => session.epoch().await?,
        };
        if let Some(path) = stale.take() {
            // A node from an older session is deleted, never adopted.
            let _ = epoch.delete(&path, None).await;
        }
        match attempt(session, spec, wait, epoch).await? {
            Attempt::Granted(g) => return Ok(g),
            Attempt::Requeue(reason, left) => {
                if !spec.requeue_on_expiry {
                    if let Some(path) = left {
                        if let Some(epoch) = session.current_epoch() {
                            let _ = epoch.delete(&path, None).await;
                        }
                    }
                    return Err(match reason {
                        LossReason::SessionExpired | LossReason::ConnectionLost => {
                            Error::SessionExpired
                        }
                        LossReason::Closed => Error::Closed,
                        other => Error::LockLost(other),
                    });
                }
                tracing::info!(dir = spec.dir, %reason, "contender re-queues in a new session");
                stale = left;
            }
        }
    }
}

fn create_options(spec: &QueueSpec) -> zk::CreateOptions<'_> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&spec.acls))
}

async fn attempt(
    session: &Session,
    spec: &QueueSpec,
    wait: Wait,
    epoch: Arc<Epoch>,
) -> Result<Attempt> {
    let (prefix, protection) = new_prefix(spec.layout, spec.kind);
    let prefix_path = join(&spec.dir, &prefix);
    let mut pending = PendingNode {
        session: session.clone(),
        epoch: epoch.clone(),
        dir: spec.dir.clone(),
        protection: protection.clone(),
        path: None,
        armed: true,
    };
    let options = create_options(spec);
    let mut made_parents = 0;
    // Step 1: create + list in one round trip.
    let (mine, children) = loop {
        let create = epoch.create(&prefix_path, &spec.data, &options);
        let list = epoch.get_children(&spec.dir);
        let created = create.await;
        let listed = list.await;
        match created {
            Ok((stat, seq)) => {
                let name = format!("{prefix}{seq}");
                pending.path = Some(join(&spec.dir, &name));
                if stat.ephemeral_owner != epoch.session_id {
                    return Err(Error::ZooKeeper {
                        op: "create",
                        path: prefix_path.clone(),
                        source: zk::Error::UnexpectedError(
                            "created node is not owned by our session".into(),
                        ),
                    });
                }
                let node = NodeName::parse(&name).expect("our own node name parses");
                match listed {
                    Ok((children, _)) => break ((node, stat.czxid), children),
                    Err(err) if is_unknown(&err) => return Ok(requeue_or_retry(&epoch, pending)),
                    Err(err) => return Err(Error::zk("get_children", &spec.dir, err)),
                }
            }
            Err(zk::Error::NoNode) if made_parents < 5 => {
                made_parents += 1;
                let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&spec.acls));
                match epoch.create_parents(&prefix_path, &container).await {
                    Ok(()) => continue,
                    Err(err) if is_unknown(&err) => return Ok(requeue_or_retry(&epoch, pending)),
                    Err(zk::Error::NoNode) => {
                        return Err(Error::InvalidPath {
                            path: spec.dir.clone(),
                            reason: "its chroot does not exist",
                        })
                    }
                    Err(err) => return Err(Error::zk("create parent", &spec.dir, err)),
                }
            }
            Err(zk::Error::NoChildrenForEphemerals) => {
                pending.disarm();
                return Err(Error::InvalidArgument(format!(
                    "{} is an ephemeral node and cannot hold a lock queue: pick another path",
                    spec.dir
                )));
            }
            Err(err) if is_unknown(&err) => {
                // Outcome unknown: look for our protection id once the session is back.
                match recover_unknown_create(&epoch, spec, &protection).await {
                    Some((path, node, czxid)) => {
                        pending.path = Some(path);
                        match epoch.get_children(&spec.dir).await {
                            Ok((children, _)) => break ((node, czxid), children),
                            Err(_) => return Ok(requeue_or_retry(&epoch, pending)),
                        }
                    }
                    None => return Ok(requeue_or_retry(&epoch, pending)),
                }
            }
            Err(err) => {
                pending.disarm();
                return Err(Error::zk("create", &spec.dir, err));
            }
        }
    };
    let (me, czxid) = mine;
    let my_path = join(&spec.dir, &me.name);
    if !children.contains(&me.name) {
        // The session answers in order, so the listing sent after our create saw our node
        // unless someone deleted it in between (an administrator, or its whole directory).
        pending.disarm();
        return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
    }
    let mut lower: Vec<NodeName> = children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| spec.is_member(n) && n.sequence < me.sequence)
        .collect();
    lower.sort_by_key(|n| n.sequence);

    if spec.watch_target(&lower).is_none() {
        pending.disarm();
        return Ok(Attempt::Granted(Granted {
            epoch,
            path: my_path,
            name: me,
            czxid,
            own_watch: None,
        }));
    }
    let deadline = match wait {
        Wait::Try => {
            // Busy: remove our node before answering.
            pending.disarm();
            match tokio::time::timeout(Duration::from_secs(10), epoch.delete(&my_path, None)).await
            {
                Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {}
                _ => spawn_delete(session, &epoch, my_path.clone()),
            }
            return Err(Error::WouldBlock);
        }
        Wait::Until(deadline) => deadline,
    };

    // Step 2: wait, watching one blocker and our own node.
    let mut own_watch: Option<WatchFuture> = None;
    let mut missing_in_a_row = 0;
    let mut blips = 0;
    // Whether our own node is known to exist: from the listing that contained it, until a
    // plain deletion below us (an administrator deleting the directory deletes ours too, and
    // its event may not have reached our own-node watch yet).
    let mut confirmed = true;
    loop {
        let Some(target) = spec.watch_target(&lower).cloned() else {
            if !confirmed {
                match epoch.check_stat(&my_path).await {
                    Ok(Some(stat)) if stat.czxid == czxid => {}
                    Ok(_) => {
                        pending.disarm();
                        return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
                    }
                    Err(err) if is_unknown(&err) => return Ok(requeue_or_retry(&epoch, pending)),
                    Err(err) => return Err(Error::zk("exists", &my_path, err)),
                }
            }
            // First in line, unless our own node is gone already: a waiter woken by its
            // predecessor may have our node's deletion (delivered first) ready as well.
            match own_watch_fired(&mut own_watch).map(|e| e.event_type) {
                Some(zk::EventType::NodeDeleted) => {
                    pending.disarm();
                    return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
                }
                Some(zk::EventType::Session) => return Ok(requeue_or_retry(&epoch, pending)),
                _ => {}
            }
            pending.disarm();
            return Ok(Attempt::Granted(Granted {
                epoch,
                path: my_path,
                name: me,
                czxid,
                own_watch,
            }));
        };
        let target_path = join(&spec.dir, &target.name);
        let watch = epoch.check_and_watch_stat(&target_path);
        let (watched, own) = if own_watch.is_none() {
            let own = epoch.check_and_watch_stat(&my_path);
            let watched = watch.await;
            (watched, Some(own.await))
        } else {
            (watch.await, None)
        };
        let mut unknown = false;
        if let Some(own) = own {
            match own {
                Ok((Some(stat), w)) if stat.czxid == czxid => {
                    own_watch = Some(Box::pin(w.changed()))
                }
                Ok((_, _)) => return Ok(Attempt::Requeue(LossReason::NodeDeleted, None)),
                Err(err) if is_unknown(&err) => unknown = true,
                Err(err) => return Err(Error::zk("exists", &my_path, err)),
            }
        }
        let watcher = match watched {
            Ok((Some(w_stat), w)) if !unknown => {
                let _ = w_stat;
                w
            }
            Ok((None, _)) if !unknown => {
                // Gone already: walk back, or re-list after several misses.
                lower.retain(|n| n.sequence != target.sequence);
                confirmed = false;
                missing_in_a_row += 1;
                if spec.relist_after(&target) || missing_in_a_row >= 3 {
                    missing_in_a_row = 0;
                    match relist(&epoch, spec, &me).await {
                        Ok(l) => {
                            lower = l;
                            confirmed = true;
                        }
                        Err(err) if is_unknown(&err) => {}
                        // The directory was deleted, and our node with it.
                        Err(zk::Error::NoNode) => {
                            pending.disarm();
                            return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
                        }
                        Err(err) => return Err(Error::zk("get_children", &spec.dir, err)),
                    }
                }
                continue;
            }
            Err(err) if !is_unknown(&err) => return Err(Error::zk("exists", &target_path, err)),
            _ => {
                // A connection blip: requests sent while disconnected wait for the reconnect,
                // so this does not spin. Re-read the queue, or re-queue if the epoch ended.
                blips += 1;
                if epoch.lost_token().is_cancelled() || blips > 20 {
                    return Ok(requeue_or_retry(&epoch, pending));
                }
                match relist(&epoch, spec, &me).await {
                    Ok(l) => {
                        lower = l;
                        confirmed = true;
                    }
                    Err(zk::Error::NoNode) => {
                        pending.disarm();
                        return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
                    }
                    Err(_) => {}
                }
                continue;
            }
        };
        missing_in_a_row = 0;
        let own_fut = own_watch.as_mut().expect("own watch set above");
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        enum Woke {
            Watched(zk::WatchedEvent),
            Own(zk::WatchedEvent),
            EpochLost,
            Deadline,
        }
        let woke = tokio::select! {
            event = watcher.changed() => Woke::Watched(event),
            event = own_fut => Woke::Own(event),
            _ = epoch.lost_token().cancelled() => Woke::EpochLost,
            _ = sleep => Woke::Deadline,
        };
        match woke {
            Woke::Watched(event) => match event.event_type {
                zk::EventType::NodeDataChanged if spec.mark_grants(&target) => {
                    // Nothing below the marked node can exist: granted (at the top of the loop,
                    // which checks that our own node is still there).
                    lower.clear();
                }
                zk::EventType::NodeDataChanged | zk::EventType::NodeDeleted => {
                    lower.retain(|n| n.sequence != target.sequence);
                    confirmed = false;
                    if spec.relist_after(&target) {
                        match relist(&epoch, spec, &me).await {
                            Ok(l) => {
                                lower = l;
                                confirmed = true;
                            }
                            Err(err) if is_unknown(&err) => {}
                            // The directory was deleted, and our node with it.
                            Err(zk::Error::NoNode) => {
                                pending.disarm();
                                return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
                            }
                            Err(err) => return Err(Error::zk("get_children", &spec.dir, err)),
                        }
                    }
                }
                zk::EventType::Session => return Ok(requeue_or_retry(&epoch, pending)),
                _ => {}
            },
            Woke::Own(event) => {
                // Our own node changed: deleted by someone else, or the session ended. Any
                // other event (a stale NodeCreated of an earlier exists watch): re-arm.
                if event.event_type == zk::EventType::Session {
                    return Ok(requeue_or_retry(&epoch, pending));
                }
                if event.event_type != zk::EventType::NodeDeleted {
                    own_watch = None;
                    continue;
                }
                pending.disarm();
                // Queued now, awaited by nobody: the request is sent either way.
                drop(epoch.delete(&my_path, None));
                return Ok(Attempt::Requeue(LossReason::NodeDeleted, None));
            }
            Woke::EpochLost => return Ok(requeue_or_retry(&epoch, pending)),
            Woke::Deadline => {
                pending.disarm();
                match tokio::time::timeout(Duration::from_secs(10), epoch.delete(&my_path, None))
                    .await
                {
                    Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {}
                    _ => spawn_delete(session, &epoch, my_path.clone()),
                }
                return Err(Error::Timeout);
            }
        }
    }
}

/// Our own node's watch event, if it has fired already (the watch is then used up).
fn own_watch_fired(own_watch: &mut Option<WatchFuture>) -> Option<zk::WatchedEvent> {
    let event = futures::FutureExt::now_or_never(own_watch.as_mut()?.as_mut())?;
    *own_watch = None;
    Some(event)
}

fn spawn_delete(session: &Session, epoch: &Arc<Epoch>, path: String) {
    let epoch = epoch.clone();
    session.spawn_tracked(async move {
        let _ = delete_ours(&epoch, "", "", Some(&path)).await;
    });
}

/// The epoch failed under us. If it has ended, re-queue (remembering our node, if any, as
/// stale); if it is still alive (a connection blip), re-queue too, after deleting our node.
fn requeue_or_retry(epoch: &Arc<Epoch>, mut pending: PendingNode) -> Attempt {
    let reason = epoch.loss_reason().unwrap_or(LossReason::ConnectionLost);
    let path = pending.path.clone();
    if epoch.lost_token().is_cancelled() {
        pending.disarm();
        Attempt::Requeue(reason, path)
    } else {
        // Still the same session: the PendingNode's drop deletes the node in the background.
        pending.armed = true;
        drop(pending);
        Attempt::Requeue(LossReason::ConnectionLost, None)
    }
}

async fn recover_unknown_create(
    epoch: &Arc<Epoch>,
    spec: &QueueSpec,
    protection: &str,
) -> Option<(String, NodeName, i64)> {
    if epoch.lost_token().is_cancelled() {
        return None;
    }
    let (path, node) = find_by_protection(epoch, &spec.dir, protection)
        .await
        .ok()??;
    let (_, stat) = epoch.get_data(&path).await.ok()?;
    if stat.ephemeral_owner == epoch.session_id {
        Some((path, node, stat.czxid))
    } else {
        let _ = epoch.delete(&path, None).await;
        None
    }
}

async fn relist(
    epoch: &Epoch,
    spec: &QueueSpec,
    me: &NodeName,
) -> std::result::Result<Vec<NodeName>, zk::Error> {
    let (children, _) = epoch.get_children(&spec.dir).await?;
    if !children.contains(&me.name) {
        // Our own node is gone (deleted with its directory, or by an administrator). Compare
        // names, not sequence numbers: a directory deleted and made again counts from 0, so
        // another contender's node may carry our old number.
        return Err(zk::Error::NoNode);
    }
    let mut lower: Vec<NodeName> = children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| spec.is_member(n) && n.sequence < me.sequence)
        .collect();
    lower.sort_by_key(|n| n.sequence);
    Ok(lower)
}

/// Errors after which a request may or may not have been applied, or the session is gone:
/// the caller re-reads, retries or re-queues rather than failing.
pub(crate) fn is_unknown(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
            | zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::Timeout
            | zk::Error::SessionMoved
    )
}

/// One contender of a queue, as listed by `contenders()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The node name and what it stands for.
    pub node: NodeName,
    /// The ZooKeeper session that owns it.
    pub owner: i64,
    /// Its data (our contenders store their identity; Curator stores the client address).
    pub data: Vec<u8>,
    /// How long ago it was created (by the server's clock).
    pub age: Duration,
    /// Its creation zxid: the fencing token it has or would have as holder.
    pub czxid: i64,
}

/// Lists every contender node of `path` (every recipe, Curator and kazoo layouts alike) in
/// queue order: holders first, then waiters. Children that are not contender nodes are left
/// out. What `zkr holders` shows.
///
/// # Errors
///
/// * [`Error::InvalidPath`] for a malformed path (nothing is sent).
/// * [`Error::Closed`] if the session is closed; [`Error::ZooKeeper`] (or a connection error)
///   if the directory cannot be read. A missing directory is an empty list.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn list_contenders(session: &Session, path: &str) -> Result<Vec<Contender>> {
    crate::path::validate_path(path)?;
    contenders(session, path, &[]).await
}

/// Lists the contenders of `dir` of the given kinds, in queue order.
pub(crate) async fn contenders(
    session: &Session,
    dir: &str,
    members: &[NodeKind],
) -> Result<Vec<Contender>> {
    let epoch = session.epoch().await?;
    let children = match epoch.get_children(dir).await {
        Ok((c, _)) => c,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(Error::zk("get_children", dir, err)),
    };
    let mut nodes: Vec<NodeName> = children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| members.is_empty() || members.contains(&n.kind))
        .collect();
    nodes.sort_by_key(|n| n.sequence);
    // Pipelined: all reads are queued before the first is awaited.
    let reads: Vec<_> = nodes
        .iter()
        .map(|n| epoch.get_data(&join(dir, &n.name)))
        .collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut out = Vec::with_capacity(nodes.len());
    for (node, read) in nodes.into_iter().zip(reads) {
        match read.await {
            Ok((data, stat)) => out.push(Contender {
                node,
                owner: stat.ephemeral_owner,
                data,
                age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
                czxid: stat.czxid,
            }),
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(Error::zk("get_data", dir, err)),
        }
    }
    Ok(out)
}

/// The shared state behind every guard: our granted node, its loss signal and its release.
pub(crate) struct Holding {
    session: Session,
    epoch: std::sync::Weak<Epoch>,
    path: String,
    name: NodeName,
    czxid: i64,
    session_id: i64,
    lost: CancellationToken,
    reason: Arc<Mutex<Option<LossReason>>>,
    /// The epoch's own end signal and reason, read synchronously by `is_lost` (the epoch
    /// itself may be gone, and the monitor not yet have run).
    epoch_token: CancellationToken,
    epoch_reason: Arc<Mutex<Option<LossReason>>>,
    stop_monitor: CancellationToken,
    monitor: Option<tokio::task::JoinHandle<Option<OwnCheck>>>,
    /// Closed (true) once our release is queued: no own-node watch is set after that.
    gate: Arc<Mutex<bool>>,
    released: bool,
    on_end: Option<Box<dyn FnOnce() + Send + Sync>>,
    /// Whether the release writes the mark before deleting (default); see `with_release_mark`.
    mark_release: bool,
    /// The node path is reused by later holders (the simple lock): check the czxid first.
    verify_czxid: bool,
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holding")
            .field("path", &self.path)
            .field("fencing_token", &self.czxid)
            .field("lost", &self.lost.is_cancelled())
            .finish()
    }
}

impl Holding {
    /// Starts watching a granted node for loss.
    pub(crate) fn new(session: &Session, granted: Granted) -> Holding {
        let Granted {
            epoch,
            path,
            name,
            czxid,
            own_watch,
        } = granted;
        let lost = CancellationToken::new();
        let reason = Arc::new(Mutex::new(None));
        let stop_monitor = CancellationToken::new();
        let gate = Arc::new(Mutex::new(false));
        let own: OwnCheck = match own_watch {
            Some(w) => Box::pin(std::future::ready(Checked::Armed(w))),
            None => arm_own_watch(epoch.clone(), path.clone(), czxid, gate.clone()),
        };
        let monitor = {
            let epoch_token = epoch.lost_token().clone();
            let epoch_reason = epoch.reason_cell();
            let epoch_weak = Arc::downgrade(&epoch);
            let path = path.clone();
            let lost = lost.clone();
            let reason = reason.clone();
            let stop = stop_monitor.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let set = |r: LossReason| {
                    reason.lock().unwrap().get_or_insert(r);
                    lost.cancel();
                    None
                };
                let epoch_ended = || {
                    epoch_reason
                        .lock()
                        .unwrap()
                        .unwrap_or(LossReason::SessionExpired)
                };
                let mut own = own;
                loop {
                    // On stop, hand the own-node watch (armed or in flight) back to the
                    // release, which lets its own write use the watch up.
                    let checked = tokio::select! {
                        biased;
                        _ = stop.cancelled() => return Some(own),
                        _ = epoch_token.cancelled() => return set(epoch_ended()),
                        r = &mut own => r,
                    };
                    let mut watch = match checked {
                        Checked::Armed(w) => w,
                        Checked::Missing => return set(LossReason::NodeDeleted),
                        Checked::Gated => return None,
                        // A connection error: the epoch's end, if it comes, is the signal.
                        Checked::Failed => {
                            tokio::select! {
                                _ = stop.cancelled() => return None,
                                _ = epoch_token.cancelled() => return set(epoch_ended()),
                            }
                        }
                    };
                    let event = tokio::select! {
                        biased;
                        _ = stop.cancelled() => return Some(Box::pin(std::future::ready(Checked::Armed(watch))) as OwnCheck),
                        _ = epoch_token.cancelled() => return set(epoch_ended()),
                        event = &mut watch => event,
                    };
                    match event.event_type {
                        zk::EventType::Session => return set(epoch_ended()),
                        zk::EventType::NodeDeleted => return set(LossReason::NodeDeleted),
                        _ => {
                            // Anything else (a stale NodeCreated of an earlier exists watch in
                            // this session, a data change): look again and re-arm.
                            let Some(epoch) = epoch_weak.upgrade() else {
                                return set(epoch_ended());
                            };
                            own = arm_own_watch(epoch, path.clone(), czxid, gate.clone());
                        }
                    }
                }
            })
        };
        Holding {
            session: session.clone(),
            session_id: epoch.session_id,
            epoch_token: epoch.lost_token().clone(),
            epoch_reason: epoch.reason_cell(),
            epoch: Arc::downgrade(&epoch),
            path,
            name,
            czxid,
            lost,
            reason,
            stop_monitor,
            monitor: Some(monitor),
            gate,
            released: false,
            on_end: None,
            mark_release: true,
            verify_czxid: false,
        }
    }

    /// Whether the release (explicit or on drop) marks the node before deleting it (default
    /// `true`). Leader election turns it off by default: Curator's LeaderLatch only reacts to
    /// NodeDeleted, so a marked release would leave a Curator follower waiting forever.
    pub(crate) fn with_release_mark(mut self, mark: bool) -> Holding {
        self.mark_release = mark;
        self
    }

    /// For a node path that later holders reuse (the simple lock): release only after checking
    /// that the node there is still ours (same czxid), never someone else's.
    pub(crate) fn with_shared_path(mut self) -> Holding {
        self.verify_czxid = true;
        self
    }

    /// Runs `f` once when this holding ends (released, dropped).
    pub(crate) fn on_end(mut self, f: impl FnOnce() + Send + Sync + 'static) -> Holding {
        self.on_end = Some(Box::new(f));
        self
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }
    pub(crate) fn name(&self) -> &NodeName {
        &self.name
    }
    pub(crate) fn fencing_token(&self) -> i64 {
        self.czxid
    }
    pub(crate) fn session_id(&self) -> i64 {
        self.session_id
    }
    pub(crate) fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }
    pub(crate) fn loss_reason(&self) -> Option<LossReason> {
        let reason = *self.reason.lock().unwrap();
        reason.or_else(|| self.epoch_lost())
    }
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.epoch_lost().is_some()
    }
    /// Why our epoch is over, read synchronously: the monitor may not have run yet, e.g. in
    /// a process resumed after a pause past the `Grace` deadline.
    fn epoch_lost(&self) -> Option<LossReason> {
        if self.released {
            return None;
        }
        let over = self.epoch_token.is_cancelled()
            || self.epoch.upgrade().is_some_and(|e| e.grace_passed());
        over.then(|| {
            self.epoch_reason
                .lock()
                .unwrap()
                .unwrap_or(LossReason::ConnectionLost)
        })
    }
    pub(crate) fn epoch(&self) -> Option<Arc<Epoch>> {
        self.epoch
            .upgrade()
            .filter(|e| !e.lost_token().is_cancelled())
    }

    /// Releases: marked (one notification hands the lock on) or plain, see `release_node`.
    pub(crate) async fn release(mut self) -> Result<()> {
        self.released = true;
        self.stop_monitor.cancel();
        let monitor = self.monitor.take();
        if self.is_lost() {
            return Err(Error::LockLost(
                self.loss_reason().unwrap_or(LossReason::SessionExpired),
            ));
        }
        let Some(epoch) = self.epoch() else {
            return Err(Error::LockLost(LossReason::SessionExpired));
        };
        let verify = self.verify_czxid.then_some(self.czxid);
        let result = release_node(
            &epoch,
            &self.path,
            self.mark_release,
            verify,
            &self.gate,
            monitor,
        )
        .await;
        self.lost.cancel();
        match result {
            Ok(()) => Ok(()),
            Err(zk::Error::NoNode) => Err(Error::LockLost(LossReason::NodeDeleted)),
            // The session ended under us: the node went with it.
            Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => Err(Error::LockLost(
                self.loss_reason().unwrap_or(LossReason::SessionExpired),
            )),
            Err(err) => Err(Error::zk("release", &self.path, err)),
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f();
        }
        if self.released {
            return;
        }
        self.stop_monitor.cancel();
        if self.lost.is_cancelled() {
            // Lost: the node is gone or not ours to delete any more.
            return;
        }
        let Some(epoch) = self.epoch() else { return };
        let path = self.path.clone();
        let monitor = self.monitor.take();
        let mark = self.mark_release;
        let verify = self.verify_czxid.then_some(self.czxid);
        let gate = self.gate.clone();
        self.lost.cancel();
        self.session.spawn_tracked(async move {
            match release_node(&epoch, &path, mark, verify, &gate, monitor).await {
                Ok(()) | Err(zk::Error::NoNode) => tracing::debug!(path, "released on drop"),
                Err(err) => tracing::warn!(path, %err, "release on drop failed; the node goes with the session"),
            }
        });
    }
}

/// What arming the own-node watch found.
pub(crate) enum Checked {
    /// Our node is there (same czxid) and watched.
    Armed(WatchFuture),
    /// Our node is gone or is someone else's.
    Missing,
    /// The request failed (connection): no watch.
    Failed,
    /// Not sent: the release was queued first.
    Gated,
}

/// An own-node `exists` watch, armed (or found gated) on its first poll.
pub(crate) type OwnCheck = Pin<Box<dyn Future<Output = Checked> + Send>>;

/// Sets the `exists` watch on our own node, unless the release is already queued: the gate
/// orders the two, so no watch is ever set on a node after our own delete (ZooKeeper would
/// keep such an `exists` watch, waiting for the node to be created again).
fn arm_own_watch(epoch: Arc<Epoch>, path: String, czxid: i64, gate: Arc<Mutex<bool>>) -> OwnCheck {
    Box::pin(async move {
        let check = {
            let closed = gate.lock().unwrap();
            if *closed {
                return Checked::Gated;
            }
            epoch.check_and_watch_stat(&path)
        };
        match check.await {
            Ok((Some(stat), w)) if stat.czxid == czxid => Checked::Armed(Box::pin(w.changed())),
            Ok(_) => Checked::Missing,
            Err(_) => Checked::Failed,
        }
    })
}

/// Deletes our node, marked (set + delete in one multi, so a waiter takes over on one
/// notification) or plain; with `verify`, only if the node at `path` still has that czxid
/// (a path reused by later holders). The release is queued under the gate, then our own-node
/// watch (handed back by the stopped monitor) is left to be used up by our own write: no
/// RemoveWatches request, and the monitor is not waited for before the release is sent.
async fn release_node(
    epoch: &Epoch,
    path: &str,
    mark: bool,
    verify: Option<i64>,
    gate: &Mutex<bool>,
    monitor: Option<tokio::task::JoinHandle<Option<OwnCheck>>>,
) -> std::result::Result<(), zk::Error> {
    let mut version = None;
    if let Some(czxid) = verify {
        *gate.lock().unwrap() = true;
        match epoch.check_stat(path).await? {
            Some(stat) if stat.czxid == czxid => version = Some(stat.version),
            _ => return Err(zk::Error::NoNode),
        }
    }
    let released = {
        let mut closed = gate.lock().unwrap();
        *closed = true;
        if mark {
            futures::future::Either::Left(epoch.set_and_delete(path, RELEASE_MARK, version))
        } else {
            futures::future::Either::Right(epoch.delete(path, version))
        }
    };
    let own = match monitor {
        Some(m) => m.await.ok().flatten(),
        None => None,
    };
    let result = released.await;
    if let Some(own) = own {
        // The watch fires with our own write (before its reply); an unsent check is Gated.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            if let Checked::Armed(w) = own.await {
                w.await;
            }
        })
        .await;
    }
    result
}
