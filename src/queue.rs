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
//! 3. **No herd.** We watch the nearest blocker with an `exists` watch, plus our own node (to
//!    notice it being deleted by someone else). A semaphore waiter with exactly `permits`
//!    members below it is the head of the queue and watches all of them (each holds a lease;
//!    whichever leaves first frees the one it needs, whatever the release order); a waiter
//!    further back watches only its predecessor, which bumps its node's version when it is
//!    granted, so the waiter behind learns that it is the head now. A release wakes one
//!    waiter; a head that was granted keeps the other holders' watches until they fire once.
//! 4. **One notification per hand-off.** Our release is one `multi`: `set_data(node, MARK)` then
//!    `delete(node)`, and a waiter whose watch fires NodeDataChanged on an exclusive node (a
//!    lock, writer or leader node) takes the lock with no request at all. Why that is sound:
//!    * *Only the node's own session can change its data.* Contender nodes are created with
//!      an ACL that grants WRITE and ADMIN to a digest identity that only our session manager
//!      knows (a random user and password per [`Session`], sent as an auth packet on every
//!      connection); anyone else keeps READ and, from the parent, DELETE. A foreign `set` (an
//!      operator, Curator's `Revoker`) fails with `NoAuth`. Such nodes say so in their name
//!      (a version-8 protection id, which Curator's `UUID.randomUUID()` and kazoo's `uuid4`
//!      never make: [`NodeName::is_owner_write_only`]); a data change on any other node is
//!      re-checked like a blip, never taken as a release.
//!    * *Our session writes a lock node's data only in its release*, in the transaction that
//!      deletes it, and a release happens only while the node holds. (A semaphore lease's
//!      version bump is not a release; the semaphore never uses the shortcut.)
//!    * *A node that held alone had nothing below it*: lower sequence numbers never come
//!      back, so when the watched node held, every node below it (all of which were below us
//!      too) was already gone, and it was the last one below us. So the mark, seen on the
//!      node we watch, proves that nothing below us exists; only our own node remains to be
//!      checked, which the own-node watch does (its event is delivered first if the node went
//!      in the same window).
//!
//!    On a plain deletion (a cancelled waiter, an expired session, a Curator or kazoo holder,
//!    or a released reader) the waiter walks back through the nodes it already read, one
//!    `exists` each, and re-lists only after several in a row are gone. Before it takes the
//!    lock after a plain deletion it checks, with one more `exists`, that its own node is
//!    still there: an administrator deleting the directory deletes both, and the event for
//!    ours may still be on its way. Curator and kazoo re-list every child at each wake-up
//!    instead: O(N) per hand-off.
//! 5. **Ownership.** A node counts as ours only in the epoch (session) that created it, with
//!    `ephemeralOwner` equal to that session id, and a grant is given only while that epoch
//!    lives (a create answered after the loss policy gave up re-queues). When the epoch ends,
//!    a waiter re-queues in the next session (at the back) after deleting any node the old
//!    session may have left; a holder is told through `lost()`. The holder's own-node watch
//!    is armed again after any failed arming for as long as the epoch lives, so a deletion is
//!    never missed. A node left behind by an abandoned acquire is deleted in the background,
//!    retried while the epoch lives.
//! 6. **One path, one kind.** Contenders of other recipes (or a semaphore with another permit
//!    count, stored in the directory's data by the first contender) would not exclude us: the
//!    listing of step 1 shows them, and we refuse with [`Error::PathInUse`] after removing
//!    our node.
//! 7. **Connection loss during create.** The name carries a random protection id chosen before
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

    /// Given the lower members (ascending), the nodes to watch: none when granted. One node
    /// (the nearest blocker) for locks, writers, readers and elections. A semaphore waiter
    /// with exactly `permits` members below is the head of the queue and watches all of them
    /// (each is a holder: whichever leaves first frees the permit it needs); one further back
    /// watches only its predecessor, which bumps its node's version when it is granted (see
    /// `Waiter::grant_if_first`) so the waiter behind becomes the head. Each release thus
    /// wakes the head alone, whatever the order holders leave in.
    fn watch_targets(&self, lower: &[NodeName]) -> Vec<NodeName> {
        match self.rule {
            Rule::Exclusive => lower.last().cloned().into_iter().collect(),
            Rule::Read => lower
                .iter()
                .rev()
                .find(|n| self.blocks(n))
                .cloned()
                .into_iter()
                .collect(),
            Rule::Permits(p) if lower.len() < p => Vec::new(),
            Rule::Permits(p) if lower.len() == p => lower.to_vec(),
            Rule::Permits(_) => lower.last().cloned().into_iter().collect(),
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
    fn disarm(&mut self) {
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
/// A failure that leaves the outcome unknown (connection loss, timeout) is retried with
/// backoff for as long as the epoch lives, as Curator's "guaranteed delete" does: a node of
/// a live session left behind an abandoned acquire would block the queue until the session
/// ends. Once the epoch is over the node goes with its session.
async fn delete_ours(epoch: &Epoch, dir: &str, protection: &str, path: Option<&str>) -> Result<()> {
    let mut backoff = Duration::from_millis(50);
    loop {
        match delete_ours_once(epoch, dir, protection, path).await {
            Err(err @ (Error::ConnectionLost | Error::Timeout)) => {
                if epoch.lost_token().is_cancelled() {
                    return Err(err);
                }
                tracing::debug!(%err, dir, "retrying the delete of an abandoned contender node");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = epoch.lost_token().cancelled() => return Err(err),
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

async fn delete_ours_once(
    epoch: &Epoch,
    dir: &str,
    protection: &str,
    path: Option<&str>,
) -> Result<()> {
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
    use tracing::field::Empty;
    let kind = crate::observe::kind_label(spec.kind);
    let span = tracing::info_span!(target: "zk_recipes", "acquire", path = %spec.dir, kind, node = Empty, epoch = Empty, session_id = Empty, outcome = Empty);
    let started = Instant::now();
    let result =
        tracing::Instrument::instrument(acquire_in_turn(session, spec, wait), span.clone()).await;
    span.in_scope(|| crate::observe::acquired(kind, &result, started.elapsed()));
    result
}

async fn acquire_in_turn(session: &Session, spec: &QueueSpec, wait: Wait) -> Result<Granted> {
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
                tracing::info!(dir = spec.dir, %reason, "contender re-queues");
                stale = left;
            }
        }
    }
}

/// One attempt in one epoch, as the steps of a [`Waiter`]: enter the queue, then until
/// granted (or given up) arm the watches, wait for one event, and react to it. Every await
/// point of the algorithm is in one of those steps.
async fn attempt(
    session: &Session,
    spec: &QueueSpec,
    wait: Wait,
    epoch: Arc<Epoch>,
) -> Result<Attempt> {
    let mut waiter = match Waiter::enter(session, spec, epoch).await? {
        Entered::Queued(w) => w,
        Entered::Done(done) => return Ok(done),
    };
    loop {
        if let Some(done) = waiter.grant_if_first().await? {
            return Ok(done);
        }
        let deadline = match wait {
            Wait::Try => return Err(waiter.withdraw(Error::WouldBlock).await),
            Wait::Until(deadline) => deadline,
        };
        let watches = match waiter.arm().await? {
            Armed::Watching(watches) => watches,
            Armed::Again => continue,
            Armed::Done(done) => return Ok(done),
        };
        let woke = waiter.wait(watches, deadline).await;
        if let Some(done) = waiter.react(woke).await? {
            return Ok(done);
        }
    }
}

/// A contender with a node in the queue, in one epoch.
struct Waiter<'a> {
    session: &'a Session,
    spec: &'a QueueSpec,
    epoch: Arc<Epoch>,
    /// Deletes our node if the attempt is dropped or fails before it is granted.
    pending: PendingNode,
    me: NodeName,
    my_path: String,
    czxid: i64,
    /// Members below us still believed to exist, ascending.
    lower: Vec<NodeName>,
    /// The `exists` watch on our own node, once armed.
    own_watch: Option<WatchFuture>,
    /// Whether our own node is known to exist: from a listing that contained it, until a
    /// plain deletion below us (an administrator deleting the directory deletes ours too, and
    /// its event may not have reached our own-node watch yet).
    confirmed: bool,
    missing_in_a_row: u32,
    blips: u32,
    /// Whether we armed a watch before being granted (a semaphore lease granted after waiting
    /// tells the waiter behind it, see `grant_if_first`).
    waited: bool,
}

enum Entered<'a> {
    Queued(Waiter<'a>),
    Done(Attempt),
}

/// What arming found.
enum Armed {
    /// Every target exists and is watched, and so is our own node.
    Watching(Vec<(NodeName, zk::OneshotWatcher)>),
    /// The picture changed (a target is gone, a re-list, a connection blip): decide again.
    Again,
    Done(Attempt),
}

/// What ended a wait.
enum Woke {
    Watched(NodeName, zk::WatchedEvent),
    Own(zk::WatchedEvent),
    EpochLost,
    Deadline,
}

impl<'a> Waiter<'a> {
    /// Step 1: create our node and list the directory in one round trip; refuse a path held
    /// by contenders of another kind.
    async fn enter(
        session: &'a Session,
        spec: &'a QueueSpec,
        epoch: Arc<Epoch>,
    ) -> Result<Entered<'a>> {
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
        if let Err(err) = epoch.check_creator_acls(&spec.acls) {
            pending.disarm();
            return Err(Error::zk("create", &spec.dir, err));
        }
        let acls = epoch.contender_acls(&spec.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&acls));
        let semaphore = matches!(spec.rule, Rule::Permits(_));
        let mut made_parents = 0;
        let (me, czxid, children, dir_data) = loop {
            let create = epoch.create(&prefix_path, &spec.data, &options);
            let list = epoch.get_children(&spec.dir);
            let dir_data = semaphore.then(|| epoch.get_data(&spec.dir));
            let created = create.await;
            let listed = list.await;
            let dir_data = match dir_data {
                Some(read) => Some(read.await),
                None => None,
            };
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
                        Ok((children, _)) => break (node, stat.czxid, children, dir_data),
                        Err(err) if is_unknown(&err) => {
                            return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending)))
                        }
                        Err(err) => return Err(Error::zk("get_children", &spec.dir, err)),
                    }
                }
                Err(zk::Error::NoNode) if made_parents < 5 => {
                    made_parents += 1;
                    let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&spec.acls));
                    match epoch.create_parents(&prefix_path, &container).await {
                        Ok(()) => continue,
                        Err(err) if is_unknown(&err) => {
                            return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending)))
                        }
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
                    let Some((path, node, czxid)) =
                        recover_unknown_create(&epoch, spec, &protection).await
                    else {
                        return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending)));
                    };
                    pending.path = Some(path);
                    let list = epoch.get_children(&spec.dir);
                    let dir_data = semaphore.then(|| epoch.get_data(&spec.dir));
                    let listed = list.await;
                    let dir_data = match dir_data {
                        Some(read) => Some(read.await),
                        None => None,
                    };
                    match listed {
                        Ok((children, _)) => break (node, czxid, children, dir_data),
                        Err(_) => return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending))),
                    }
                }
                Err(err) => {
                    pending.disarm();
                    return Err(Error::zk("create", &spec.dir, err));
                }
            }
        };
        let my_path = join(&spec.dir, &me.name);
        if !children.contains(&me.name) {
            // The session answers in order, so the listing sent after our create saw our node
            // unless someone deleted it in between (an administrator, or its whole directory).
            pending.disarm();
            return Ok(Entered::Done(Attempt::Requeue(
                LossReason::NodeDeleted,
                None,
            )));
        }
        let mut waiter = Waiter {
            session,
            spec,
            epoch,
            pending,
            me,
            my_path,
            czxid,
            lower: Vec::new(),
            own_watch: None,
            confirmed: true,
            missing_in_a_row: 0,
            blips: 0,
            waited: false,
        };
        match waiter.check_kind(&children, dir_data).await {
            Ok(()) => {}
            Err(KindCheck::Conflict(err)) => return Err(waiter.withdraw(err).await),
            Err(KindCheck::Unknown) => {
                return Ok(Entered::Done(requeue_or_retry(
                    &waiter.epoch,
                    &mut waiter.pending,
                )))
            }
        }
        waiter.lower = lower_members(spec, &children, &waiter.me);
        Ok(Entered::Queued(waiter))
    }

    /// One path, one kind: contenders of another recipe do not exclude ours (and ours not
    /// them), and semaphores must agree on the permit count, which the first contender
    /// stores in the directory's data (as kazoo's `Semaphore` does).
    async fn check_kind(
        &mut self,
        children: &[String],
        dir_data: Option<std::result::Result<(Vec<u8>, zk::Stat), zk::Error>>,
    ) -> std::result::Result<(), KindCheck> {
        let spec = self.spec;
        if let Some(other) = children
            .iter()
            .filter_map(|c| NodeName::parse(c))
            .find(|n| !spec.is_member(n))
        {
            return Err(KindCheck::Conflict(Error::PathInUse {
                path: spec.dir.clone(),
                found: describe_kind(other.kind).to_string(),
                ours: describe_kind(spec.kind).to_string(),
            }));
        }
        let Rule::Permits(permits) = spec.rule else {
            return Ok(());
        };
        let want = permits.to_string();
        let (data, stat) = match dir_data {
            Some(Ok(read)) => read,
            Some(Err(err)) if is_unknown(&err) => return Err(KindCheck::Unknown),
            // The directory is gone (and our node with it): the wait finds out.
            Some(Err(_)) | None => return Ok(()),
        };
        let stored = String::from_utf8_lossy(&data).trim().to_string();
        if stored == want {
            return Ok(());
        }
        let conflict = |stored: &str| {
            KindCheck::Conflict(Error::PathInUse {
                path: spec.dir.clone(),
                found: format!("a semaphore with {stored} permits"),
                ours: format!("a semaphore with {permits} permits"),
            })
        };
        let others = children
            .iter()
            .filter(|c| **c != self.me.name)
            .filter_map(|c| NodeName::parse(c))
            .filter(|n| n.kind == NodeKind::Lease)
            .count();
        let numeric = stored.parse::<usize>().is_ok();
        if !stored.is_empty() && !numeric {
            // Data we did not write: leave it alone (and the count unchecked).
            tracing::warn!(
                dir = spec.dir,
                "the semaphore's directory holds foreign data; its permit count is not checked"
            );
            return Ok(());
        }
        if !stored.is_empty() && others > 0 {
            return Err(conflict(&stored));
        }
        // Empty, or a count left by earlier contenders that are all gone: ours now.
        match self
            .epoch
            .set_data(&spec.dir, want.as_bytes(), Some(stat.version))
            .await
        {
            Ok(_) => Ok(()),
            Err(zk::Error::BadVersion) => match self.epoch.get_data(&spec.dir).await {
                Ok((data, _)) if String::from_utf8_lossy(&data).trim() == want => Ok(()),
                Ok((data, _)) => Err(conflict(String::from_utf8_lossy(&data).trim())),
                Err(err) if is_unknown(&err) => Err(KindCheck::Unknown),
                Err(_) => Ok(()),
            },
            Err(err) if is_unknown(&err) => Err(KindCheck::Unknown),
            Err(err) => {
                tracing::warn!(dir = spec.dir, %err, "cannot store the semaphore's permit count; it is not checked");
                Ok(())
            }
        }
    }

    /// Grants the lock when nothing below blocks us any more, after checking that our own node
    /// is still there and that the epoch has not ended meanwhile (a create that completed in
    /// an epoch the loss policy has already given up must re-queue, not be lost at birth).
    async fn grant_if_first(&mut self) -> Result<Option<Attempt>> {
        if !self.spec.watch_targets(&self.lower).is_empty() {
            return Ok(None);
        }
        if !self.confirmed {
            match self.epoch.check_stat(&self.my_path).await {
                Ok(Some(stat)) if stat.czxid == self.czxid => self.confirmed = true,
                Ok(_) => return Ok(Some(self.node_deleted())),
                Err(err) if is_unknown(&err) => return Ok(Some(self.requeue())),
                Err(err) => return Err(Error::zk("exists", &self.my_path, err)),
            }
        }
        // Our own node may be gone already: a waiter woken by its predecessor may have our
        // node's deletion (delivered first) ready as well.
        match own_watch_fired(&mut self.own_watch).map(|e| e.event_type) {
            Some(zk::EventType::NodeDeleted) => return Ok(Some(self.node_deleted())),
            Some(zk::EventType::Session) => return Ok(Some(self.requeue())),
            _ => {}
        }
        if self.epoch.is_over() || self.epoch.grace_passed() {
            return Ok(Some(self.requeue()));
        }
        self.pending.disarm();
        let span = tracing::Span::current();
        span.record("node", self.me.name.as_str());
        span.record("epoch", self.epoch.number);
        span.record(
            "session_id",
            format_args!("{:#x}", self.epoch.session_id).to_string(),
        );
        if self.waited {
            crate::observe::handoff(crate::observe::kind_label(self.spec.kind));
        }
        if self.waited && matches!(self.spec.rule, Rule::Permits(_)) {
            // The waiter behind us watches our node and learns from this version bump that it
            // is now the head of the queue (see `watch_targets`). Sent now, awaited in the
            // background (it does not delay our grant) and retried after a blip while the
            // epoch lives: a lost bump would leave the next waiter blind to free permits.
            let bump = self.epoch.set_data(&self.my_path, &self.spec.data, Some(0));
            let (epoch, path, data) = (
                self.epoch.clone(),
                self.my_path.clone(),
                self.spec.data.clone(),
            );
            self.session.spawn_tracked(async move {
                let mut result = bump.await;
                let mut backoff = Duration::from_millis(20);
                while matches!(&result, Err(e) if is_unknown(e)) && !epoch.is_over() {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    // BadVersion: the first one was applied after all; NoNode: released.
                    result = epoch.set_data(&path, &data, Some(0)).await;
                }
            });
        }
        Ok(Some(Attempt::Granted(Granted {
            epoch: self.epoch.clone(),
            path: self.my_path.clone(),
            name: self.me.clone(),
            czxid: self.czxid,
            own_watch: self.own_watch.take(),
        })))
    }

    /// Step 2: watch the nodes that block us, and our own node.
    async fn arm(&mut self) -> Result<Armed> {
        let spec = self.spec;
        let targets = spec.watch_targets(&self.lower);
        let semaphore_predecessor = matches!(spec.rule, Rule::Permits(p) if self.lower.len() > p);
        let epoch = self.epoch.clone();
        // Pipelined: every watch is sent before the first reply is awaited.
        let watches: Vec<_> = targets
            .iter()
            .map(|t| epoch.check_and_watch_stat(&join(&spec.dir, &t.name)))
            .collect();
        let own = self
            .own_watch
            .is_none()
            .then(|| epoch.check_and_watch_stat(&self.my_path));
        let watched = futures::future::join_all(watches).await;
        let mut unknown = false;
        if let Some(own) = own {
            match own.await {
                Ok((Some(stat), w)) if stat.czxid == self.czxid => {
                    self.own_watch = Some(Box::pin(w.changed()))
                }
                Ok(_) => return Ok(Armed::Done(self.node_deleted())),
                Err(err) if is_unknown(&err) => unknown = true,
                Err(err) => return Err(Error::zk("exists", &self.my_path, err)),
            }
        }
        let mut armed = Vec::with_capacity(targets.len());
        let mut gone = Vec::new();
        let mut predecessor_granted = false;
        for (target, result) in targets.into_iter().zip(watched) {
            match result {
                Ok((Some(stat), w)) => {
                    predecessor_granted |= semaphore_predecessor && stat.version > 0;
                    armed.push((target, w));
                }
                Ok((None, _)) => gone.push(target),
                Err(err) if is_unknown(&err) => unknown = true,
                Err(err) => return Err(Error::zk("exists", &join(&spec.dir, &target.name), err)),
            }
        }
        if unknown {
            return self.blip().await;
        }
        if !gone.is_empty() {
            // Gone already: walk back, or re-list after several misses.
            self.lower
                .retain(|n| !gone.iter().any(|g| g.sequence == n.sequence));
            self.confirmed = false;
            self.missing_in_a_row += 1;
            if gone.iter().any(|g| spec.relist_after(g)) || self.missing_in_a_row >= 3 {
                self.missing_in_a_row = 0;
                if let Some(done) = self.relist().await? {
                    return Ok(Armed::Done(done));
                }
            }
            return Ok(Armed::Again);
        }
        if predecessor_granted {
            // The semaphore waiter ahead of us holds a lease already: we may be the head now.
            if let Some(done) = self.relist().await? {
                return Ok(Armed::Done(done));
            }
            return Ok(Armed::Again);
        }
        self.missing_in_a_row = 0;
        self.waited = true;
        Ok(Armed::Watching(armed))
    }

    /// Step 3: wait for one event: a watched node, our own node, the epoch's end or the
    /// deadline.
    async fn wait(
        &mut self,
        watches: Vec<(NodeName, zk::OneshotWatcher)>,
        deadline: Option<Instant>,
    ) -> Woke {
        let watched = futures::future::select_all(watches.into_iter().map(|(target, w)| {
            Box::pin(async move {
                let event = w.changed().await;
                (target, event)
            })
        }));
        let own = self.own_watch.as_mut().expect("own watch armed");
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let epoch = self.epoch.clone();
        tokio::select! {
            ((target, event), _, _) = watched => Woke::Watched(target, event),
            event = own => Woke::Own(event),
            _ = epoch.lost_token().cancelled() => Woke::EpochLost,
            _ = sleep => Woke::Deadline,
        }
    }

    /// Step 4: react to what woke us.
    async fn react(&mut self, woke: Woke) -> Result<Option<Attempt>> {
        let spec = self.spec;
        match woke {
            Woke::Watched(target, event) => match event.event_type {
                zk::EventType::Session => return Ok(Some(self.requeue())),
                zk::EventType::NodeDataChanged
                    if target.is_owner_write_only() && !matches!(spec.rule, Rule::Permits(_)) =>
                {
                    // A release mark: only the session that made the node can write its data
                    // (its ACL), and it writes only this, in the transaction that deletes the
                    // node.
                    if spec.mark_grants(&target) {
                        // The node held the lock alone, so nothing below it can exist:
                        // granted (`grant_if_first` still checks that our own node is there).
                        self.lower.clear();
                    } else {
                        // A reader left: as a plain deletion.
                        if let Some(done) = self.gone(&target).await? {
                            return Ok(Some(done));
                        }
                    }
                }
                zk::EventType::NodeDataChanged if !matches!(spec.rule, Rule::Permits(_)) => {
                    // Someone wrote the data of a node that anyone may write (a Curator or
                    // kazoo contender; an operator's `set`, Curator's `Revoker`): that is not
                    // a release. Look again: arming finds out whether the node is still there.
                }
                zk::EventType::NodeDataChanged => {
                    // A semaphore lease bumped on its grant (or rewritten): re-read the queue.
                    if let Some(done) = self.relist().await? {
                        return Ok(Some(done));
                    }
                }
                zk::EventType::NodeDeleted => {
                    if let Some(done) = self.gone(&target).await? {
                        return Ok(Some(done));
                    }
                }
                // A stale NodeCreated of an earlier watch: look again.
                _ => {}
            },
            Woke::Own(event) => {
                // Our own node changed: deleted by someone else, or the session ended. Any
                // other event (a stale NodeCreated of an earlier exists watch): re-arm.
                self.own_watch = None;
                match event.event_type {
                    zk::EventType::Session => return Ok(Some(self.requeue())),
                    zk::EventType::NodeDeleted => {
                        // Queued now, awaited by nobody: the request is sent either way.
                        drop(self.epoch.delete(&self.my_path, None));
                        return Ok(Some(self.node_deleted()));
                    }
                    _ => {}
                }
            }
            Woke::EpochLost => return Ok(Some(self.requeue())),
            Woke::Deadline => return Err(self.withdraw(Error::Timeout).await),
        }
        Ok(None)
    }

    /// `target` is gone: walk back past it, or re-list where the rule says so.
    async fn gone(&mut self, target: &NodeName) -> Result<Option<Attempt>> {
        self.lower.retain(|n| n.sequence != target.sequence);
        self.confirmed = false;
        if self.spec.relist_after(target) {
            return self.relist().await;
        }
        Ok(None)
    }

    /// A request failed with the outcome unknown. Requests sent while disconnected wait for
    /// the reconnect, so this does not spin: re-read the queue, or re-queue if the epoch ended.
    async fn blip(&mut self) -> Result<Armed> {
        self.blips += 1;
        if self.epoch.lost_token().is_cancelled() || self.blips > 20 {
            return Ok(Armed::Done(self.requeue()));
        }
        match relist(&self.epoch, self.spec, &self.me).await {
            Ok(lower) => {
                self.lower = lower;
                self.confirmed = true;
            }
            Err(zk::Error::NoNode) => return Ok(Armed::Done(self.node_deleted())),
            Err(_) => {}
        }
        Ok(Armed::Again)
    }

    /// Re-reads the members below us. `Some` when the attempt is over (our node is gone).
    async fn relist(&mut self) -> Result<Option<Attempt>> {
        match relist(&self.epoch, self.spec, &self.me).await {
            Ok(lower) => {
                self.lower = lower;
                self.confirmed = true;
                Ok(None)
            }
            Err(err) if is_unknown(&err) => Ok(None),
            // The directory was deleted, or our node was: re-queue.
            Err(zk::Error::NoNode) => Ok(Some(self.node_deleted())),
            Err(err) => Err(Error::zk("get_children", &self.spec.dir, err)),
        }
    }

    /// Gives up: removes our node before answering `err`.
    async fn withdraw(&mut self, err: Error) -> Error {
        self.pending.disarm();
        match tokio::time::timeout(
            Duration::from_secs(10),
            self.epoch.delete(&self.my_path, None),
        )
        .await
        {
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {}
            _ => spawn_delete(self.session, &self.epoch, self.my_path.clone()),
        }
        err
    }

    fn node_deleted(&mut self) -> Attempt {
        self.pending.disarm();
        Attempt::Requeue(LossReason::NodeDeleted, None)
    }

    fn requeue(&mut self) -> Attempt {
        requeue_or_retry(&self.epoch, &mut self.pending)
    }
}

/// Why `check_kind` refused, or could not tell.
enum KindCheck {
    Conflict(Error),
    Unknown,
}

/// How a node kind is named in a [`Error::PathInUse`].
fn describe_kind(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Lock | NodeKind::Read | NodeKind::Write => {
            "a lock (fair lock or read/write lock nodes)"
        }
        NodeKind::Latch => "a leader election (latch nodes)",
        NodeKind::Lease => "a semaphore (lease nodes)",
    }
}

/// The members of `children` below `me`, ascending.
fn lower_members(spec: &QueueSpec, children: &[String], me: &NodeName) -> Vec<NodeName> {
    let mut lower: Vec<NodeName> = children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| spec.is_member(n) && n.sequence < me.sequence)
        .collect();
    lower.sort_by_key(|n| n.sequence);
    lower
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
fn requeue_or_retry(epoch: &Arc<Epoch>, pending: &mut PendingNode) -> Attempt {
    let reason = epoch.loss_reason().unwrap_or(LossReason::ConnectionLost);
    let path = pending.path.clone();
    if epoch.lost_token().is_cancelled() {
        pending.disarm();
        Attempt::Requeue(reason, path)
    } else {
        // Still the same session: delete the node in the background, retried while it lives.
        pending.armed = true;
        let (dir, protection, path) = (
            pending.dir.clone(),
            pending.protection.clone(),
            pending.path.clone(),
        );
        pending.disarm();
        let epoch = epoch.clone();
        pending.session.spawn_tracked(async move {
            if let Err(err) = delete_ours(&epoch, &dir, &protection, path.as_deref()).await {
                tracing::warn!(%err, dir, "could not delete an abandoned contender node; it goes when the session ends");
            }
        });
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
    Ok(lower_members(spec, &children, me))
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
    /// For the metrics and the `hold` span: what we hold, since when, and whether the hold
    /// ended in a loss.
    kind: &'static str,
    since: Instant,
    span: tracing::Span,
    lost_at_end: Option<LossReason>,
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
                let mut backoff = Duration::from_millis(20);
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
                        // The request failed (a connection blip): no watch is set. Arm it again
                        // for as long as the epoch lives; a request made while disconnected
                        // waits for the reconnect, and the backoff keeps a flapping connection
                        // from spinning.
                        Checked::Failed => {
                            tokio::select! {
                                _ = stop.cancelled() => return None,
                                _ = epoch_token.cancelled() => return set(epoch_ended()),
                                _ = tokio::time::sleep(backoff) => {}
                            }
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            let Some(epoch) = epoch_weak.upgrade() else {
                                return set(epoch_ended());
                            };
                            own = arm_own_watch(epoch, path.clone(), czxid, gate.clone());
                            continue;
                        }
                    };
                    backoff = Duration::from_millis(20);
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
        let kind = crate::observe::kind_of(&name);
        let span = tracing::info_span!(target: "zk_recipes", "hold", path = %path, node = %name.name, fencing_token = czxid);
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
            kind,
            since: Instant::now(),
            span,
            lost_at_end: None,
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
        if self.is_lost() {
            self.lost_at_end = self.loss_reason();
        }
        self.released = true;
        let span = tracing::info_span!(target: "zk_recipes", parent: &self.span, "release", path = %self.path, node = %self.name.name);
        let _entered = span.enter();
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
        let result = release_retrying(
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
        if !self.released && self.is_lost() {
            self.lost_at_end = self.loss_reason();
        }
        crate::observe::hold_ended(self.kind, self.since.elapsed(), self.lost_at_end);
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
            match release_retrying(&epoch, &path, mark, verify, &gate, monitor).await {
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

/// [`release_node`], retried after a failure whose outcome is unknown (a connection blip) for
/// as long as the epoch lives: a release lost in a blip would otherwise leave the node, and
/// the lock, held until the session ends. A retry after a release that was applied after all
/// finds the node gone (`NoNode`, or another czxid at a shared path).
async fn release_retrying(
    epoch: &Epoch,
    path: &str,
    mark: bool,
    verify: Option<i64>,
    gate: &Mutex<bool>,
    monitor: Option<tokio::task::JoinHandle<Option<OwnCheck>>>,
) -> std::result::Result<(), zk::Error> {
    let mut result = release_node(epoch, path, mark, verify, gate, monitor).await;
    let mut backoff = Duration::from_millis(20);
    let mut retried = false;
    while matches!(&result, Err(e) if is_unknown(e)) && !epoch.is_over() {
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = epoch.lost_token().cancelled() => break,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
        retried = true;
        result = release_node(epoch, path, mark, verify, gate, None).await;
    }
    match result {
        // Our first attempt was applied after all.
        Err(zk::Error::NoNode) if retried => Ok(()),
        other => other,
    }
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
