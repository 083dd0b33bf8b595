//! Leader election, on the same nodes as Apache Curator's `LeaderLatch`.
//!
//! # Znode layout
//!
//! ```text
//! <path>                                 CONTAINER (reaped by the server once empty)
//! <path>/_c_<uuid>-latch-0000000007      EPHEMERAL_SEQUENTIAL, data = candidate id (UTF-8)
//! <path>/_c_<uuid>-latch-0000000008      ... the next candidate
//! ```
//!
//! These are Curator `LeaderLatch` nodes, byte for byte: Curator's protected name with the
//! `latch-` marker, and the participant id as data. Rust and Java candidates on one path
//! therefore elect one leader together, and each side's `getLeader()` / [`Election::leader`]
//! names the other's candidates.
//!
//! # Algorithm
//!
//! The contender queue of `crate::queue` (see `src/queue.rs`) with one exclusive holder:
//!
//! 1. A candidate creates its node and lists the directory in one round trip. The lowest
//!    `latch` node leads; every other candidate sets an `exists` watch on the candidate just
//!    below it (no herd: a change wakes one candidate).
//! 2. Leadership is granted only to the node this campaign created, in the session that
//!    created it (its `ephemeralOwner` is checked), and it ends with that session. A node from
//!    an earlier session is deleted, never adopted (CURATOR-696: a Curator latch kept leading
//!    on a node its expired session had lost). A connection blip in the same session keeps
//!    the candidate's node and its place (its name and owner are known; the directory is read
//!    again); a node given up after blips that go on is deleted before the candidate queues
//!    again (CURATOR-653: a Curator candidate's old and new nodes raced across a reconnect).
//! 3. While leading, [`lost()`](crate::LockGuard::lost) fires as soon as the session manager ends the epoch
//!    (expiry, or the [`LossPolicy`](crate::LossPolicy) giving up on the connection) or the
//!    node is deleted by someone else. A waiting candidate whose session expires re-queues by
//!    itself in the next session.
//! 4. Resigning deletes our node; the candidate watching it is notified and leads with no
//!    request of its own when nothing else was below it. With
//!    [`with_release_mark(true)`](Election::with_release_mark) a resignation first marks the
//!    node (one `multi`), which lets a candidate that had seen several nodes below it take over
//!    on that single notification too. It is off by default because Curator's LeaderLatch
//!    reacts only to `NodeDeleted` (verified against Curator 5.4.0): a marked resignation
//!    would leave a Curator candidate waiting forever.
//! 5. [`Election::observe`] watches only the current leader's node (a data watch) and
//!    re-reads the directory when that node goes, so bystanders are not woken by
//!    candidates joining or leaving behind the leader. When there is no leader it watches the
//!    children (or the directory's creation) until a candidate appears.
//!
//! # Failover times
//!
//! * The leader resigns, or its session is closed cleanly: the next candidate leads after one
//!   notification (plus one `exists` per already departed node it had seen below it).
//! * The leader's process dies or is cut off: the next candidate leads once the server expires
//!   the session, after the session timeout. Under [`LossPolicy::Grace`](crate::LossPolicy),
//!   a leader that is cut off reports `lost()` before the server can expire its session.
//! * A leader whose session is ended by someone else learns of it only when it reaches
//!   ZooKeeper again; one whose process was paused past the session timeout learns of it when
//!   it runs again (under `Grace` from its own clock, first thing). The next leader may have
//!   started by then: tag writes with [`fencing_token()`](crate::LockGuard::fencing_token) so they can be refused.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::path::{join, NodeKind, NodeName};
use crate::queue::default_spec;
use crate::queue::{self, Holding, QueueSpec, Rule, Wait, WatchFuture};
use crate::session::{Epoch, Session};

type ZkResult<T> = std::result::Result<T, zk::Error>;

/// The only node kind that takes part in an election directory.
const LATCH_MEMBERS: &[NodeKind] = &[NodeKind::Latch];

/// A leader election on a ZooKeeper path, compatible with Curator's `LeaderLatch`.
///
/// Each [`campaign`](Self::campaign) call is one candidate with the id given to
/// [`new`](Self::new). Cheap to clone; clones share the session and the id.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> zk_recipes::Result<()> {
/// use zk_recipes::{Election, Session};
///
/// let session = Session::builder("127.0.0.1:2181").connect().await?;
/// let election = Election::new(&session, "/app/leader", "worker-7")?;
/// let leadership = election.campaign().await?;
/// println!("leading with fencing token {}", leadership.fencing_token());
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("lost leadership: stop acting as leader"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    session: Session,
    spec: Arc<QueueSpec>,
    id: Arc<str>,
    release_mark: bool,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Election>();
};

impl Election {
    /// An election on `path` (the directory of candidate nodes) for the candidate `id`.
    ///
    /// `id` is stored as our node's data, where Curator's `LeaderLatch.getLeader()` and
    /// [`leader`](Self::leader) read it. Ids need not be unique, but observers cannot tell
    /// candidates with the same id apart except by [`Leader::node`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a malformed path (or one in ZooKeeper's reserved `/zookeeper`
    /// tree, on the server: under the session's chroot), [`Error::InvalidArgument`] for an id over
    /// 1 MB; nothing is sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(session: &zk_recipes::Session) -> zk_recipes::Result<()> {
    /// let election = zk_recipes::Election::new(session, "/app/leader", "host-a:8080")?;
    /// assert_eq!(election.id(), "host-a:8080");
    /// # Ok(()) }
    /// ```
    pub fn new(
        session: &Session,
        path: impl AsRef<str>,
        id: impl Into<String>,
    ) -> Result<Election> {
        let id: String = id.into();
        crate::path::validate_data("the candidate id", id.as_bytes())?;
        let mut spec = default_spec(
            session,
            path.as_ref(),
            NodeKind::Latch,
            LATCH_MEMBERS,
            Rule::Exclusive,
        )?;
        spec.data = id.clone().into_bytes();
        Ok(Election {
            session: session.clone(),
            spec: Arc::new(spec),
            id: id.into(),
            release_mark: false,
        })
    }

    /// The ACL of our candidate nodes and of the parents we create (default: open to anyone).
    pub fn with_acls(mut self, acls: &[zk::Acl]) -> Self {
        Arc::make_mut(&mut self.spec).acls = acls.to_vec();
        self
    }

    /// Whether a waiting candidate whose session expires re-queues by itself in the next
    /// session (default `true`); with `false`, [`campaign`](Self::campaign) fails with
    /// [`Error::SessionExpired`].
    pub fn with_requeue_on_expiry(mut self, requeue: bool) -> Self {
        Arc::make_mut(&mut self.spec).requeue_on_expiry = requeue;
        self
    }

    /// Whether a leader can be asked to resign by another process (default `false`): its
    /// `revoke_requested()` resolves on a request made with [`revoke`](crate::revoke). Costs
    /// one `exists` watch per term.
    pub fn with_revocable(mut self, revocable: bool) -> Self {
        Arc::make_mut(&mut self.spec).revocable = revocable;
        self
    }

    /// Whether resigning marks our node before deleting it (default `false`).
    ///
    /// With the mark, a candidate of this crate that watched our node knows that every node
    /// below it is gone and leads without a request. Curator's `LeaderLatch` reacts only to
    /// `NodeDeleted` and would miss a marked resignation, so turn this on only when every
    /// candidate on the path uses this crate.
    pub const fn with_release_mark(mut self, mark: bool) -> Self {
        self.release_mark = mark;
        self
    }

    /// The election path.
    pub fn path(&self) -> &str {
        &self.spec.dir
    }

    /// This candidate's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits until this candidate leads.
    ///
    /// # Fairness
    ///
    /// Candidates lead in the order they joined. A candidate whose session expires while
    /// waiting joins again at the back; a connection blip in the same session keeps its place
    /// (after some twenty blips in a row it gives its node up and joins again at the back).
    ///
    /// # Errors
    ///
    /// * [`Error::Closed`] if the session is closed.
    /// * [`Error::SessionExpired`] if the session expired while waiting and
    ///   [`with_requeue_on_expiry(false)`](Self::with_requeue_on_expiry) was set.
    /// * [`Error::NoAuth`] if the path's ACL does not let this session create children. Also, from
    ///   a timed or `try_*` acquire that gives up, if the ACL lets it create its node but not
    ///   delete it: the node then stays queued until the ACL is fixed (the session deletes
    ///   it within about a second then) or the session ends, so the call does not answer as
    ///   if nothing were left (a refusal that comes only after the call's bound is logged
    ///   instead).
    /// * [`Error::InvalidArgument`] if the path is an ephemeral node.
    /// * [`Error::ZooKeeper`] for other failures of the server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future withdraws the candidacy (our node is deleted in the
    /// background), so no orphan node blocks the candidates behind it.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.acquire(Wait::Until(None)).await
    }

    /// Like [`campaign`](Self::campaign), giving up after `timeout` with [`Error::Timeout`],
    /// within `timeout` whatever the connection does, as
    /// [`FairLock::lock_timeout`](crate::FairLock::lock_timeout): our node is deleted before it
    /// returns while the connection is up, else in the background once it is back.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and those of [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `campaign`.
    pub async fn campaign_timeout(&self, timeout: Duration) -> Result<Leadership> {
        // A timeout too large for the clock means no limit.
        self.acquire(Wait::Until(Instant::now().checked_add(timeout)))
            .await
    }

    async fn acquire(&self, wait: Wait) -> Result<Leadership> {
        let granted = queue::acquire(&self.session, &self.spec, wait).await?;
        let holding = Holding::new(&self.session, granted)
            .with_release_mark(self.release_mark)
            .revocable(self.spec.revocable);
        Ok(Leadership {
            guard: LockGuard::new(holding),
            id: self.id.clone(),
        })
    }

    /// The current leader: the candidate with the lowest node, ours or Curator's, or `None`
    /// when there is no candidate.
    ///
    /// # Errors
    ///
    /// * [`Error::Closed`] if the session is closed.
    /// * [`Error::NoAuth`], [`Error::ZooKeeper`] or a connection error if the directory or the
    ///   leader's node cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let epoch = self.session.epoch().await?;
        read_leader(&epoch, &self.spec.dir)
            .await
            .map_err(|err| Error::zk("read leader", &self.spec.dir, err))
    }

    /// The candidates in order: the first leads, the next leads after it, and so on.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`], or a ZooKeeper error reading the directory.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        let contenders = queue::contenders(&self.session, &self.spec.dir, LATCH_MEMBERS).await?;
        Ok(contenders
            .into_iter()
            .enumerate()
            .map(|(i, c)| Participant {
                id: String::from_utf8_lossy(&c.data).into_owned(),
                node: c.node.name,
                session_id: c.owner,
                fencing_token: c.czxid,
                is_leader: i == 0,
            })
            .collect())
    }

    /// A stream of leader changes, for followers and bystanders (it takes no part in the
    /// election). The first item is the leader at the time of the first poll (or
    /// [`LeaderChange::Vacant`]); after that, one item each time the leader changes.
    ///
    /// Items come in the order the changes happened, and each elected leader has a larger
    /// fencing token than the one before. Like any ZooKeeper watch, the stream reports states
    /// it reads, not every transition: a candidate that leads and resigns between two reads
    /// is not reported. Only the leader's node is watched, so candidates joining or leaving
    /// behind it cost observers nothing. After the session expires the stream carries on in
    /// the next session, reporting the leader of that moment if it changed.
    ///
    /// The stream ends when the session is closed. It yields `Err` (and then ends) for a
    /// failure retrying cannot fix, such as a missing read permission.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
    /// use futures::StreamExt;
    ///
    /// let mut changes = election.observe();
    /// while let Some(change) = changes.next().await {
    ///     match change?.leader() {
    ///         Some(leader) => println!("{} leads (token {})", leader.id, leader.fencing_token),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> LeaderChanges {
        let state = Observer {
            session: self.session.clone(),
            dir: self.spec.dir.clone(),
            last: None,
            epoch: None,
            watch: None,
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let item = state.next_change().await?;
            Some((item, state))
        });
        LeaderChanges {
            inner: Box::pin(stream),
        }
    }

    /// Runs `leading` each time this candidate becomes leader, in a background task, and
    /// campaigns again after each term, like Curator's `LeaderSelector` with `autoRequeue`.
    ///
    /// `leading` receives the [`Leadership`]; it should return when
    /// [`lost()`](crate::LockGuard::lost) fires (the runner cannot campaign again before it returns). When
    /// it returns the leadership is resigned (if still held) and the candidate joins again at
    /// the back. Campaign errors that retrying may fix (expiry, connection loss) are retried
    /// with backoff; others end the runner, as does [`ElectionRunner::stop`] or dropping the
    /// [`ElectionRunner`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
    /// let runner = election.run(|leadership| async move {
    ///     println!("leading, token {}", leadership.fencing_token());
    ///     leadership.lost().await; // or: do leader work until done, then return
    /// });
    /// // ... later, at shutdown:
    /// runner.stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn run<F, Fut>(&self, leading: F) -> ElectionRunner
    where
        F: FnMut(Leadership) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let shared = Arc::new(RunnerShared {
            terms: AtomicU64::new(0),
            leading: AtomicBool::new(false),
        });
        let task = tokio::spawn(run_loop(
            self.clone(),
            leading,
            stop.clone(),
            shared.clone(),
        ));
        ElectionRunner {
            stop,
            shared,
            task: Some(task),
        }
    }
}

/// Proof that this candidate leads. Returned by [`Election::campaign`].
///
/// * Dropping it resigns in the background (tracked by the [`Session`], so
///   [`Session::close`] waits for it); [`resign`](Self::resign) does it now and reports errors.
/// * [`lost`](LockGuard::lost) resolves when leadership is lost while held: the session expired,
///   the [`LossPolicy`](crate::LossPolicy) gave up on the connection, or our node was deleted by
///   someone else. Under the default `Grace` policy it fires before the server can expire the
///   session and let another candidate lead; with `OnExpiry` it may fire after. It cannot be
///   missed: it resolves even if the loss happened before the call.
/// * [`fencing_token`](LockGuard::fencing_token) is the czxid of our node: every later leader of the
///   same path has a larger one.
///
/// Not `Clone`: one leadership, one resignation.
///
/// # Examples
///
/// ```no_run
/// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
/// let leadership = election.campaign().await?;
/// let token = leadership.fencing_token();
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("no longer leader; writes tagged {token} will be refused"),
///     _ = async { /* leader work, tagging writes with `token` */ } => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "if unused the leadership is resigned at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    id: Arc<str>,
}

/// Every accessor of the guard core ([`LockGuard`]): `path`, `fencing_token`, `session_id`,
/// `lost`, `lost_token`, `is_lost`, `loss_reason`.
impl std::ops::Deref for Leadership {
    type Target = LockGuard;
    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

/// The guard core, for code that treats every kind of hold alike (releasing it resigns).
impl From<Leadership> for LockGuard {
    fn from(leadership: Leadership) -> LockGuard {
        leadership.guard
    }
}

impl Leadership {
    /// This candidate's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Steps down now: deletes our node, and the next candidate leads on that notification.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] if leadership was already lost (nothing to resign).
    /// * [`Error::ZooKeeper`] or [`Error::ConnectionLost`] if the delete failed; the node then
    ///   goes with the session.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release): once polled, the release runs to
    /// its end even if this future is dropped.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The same as [`resign`](Self::resign), under the name every guard shares.
    pub async fn release(self) -> Result<()> {
        self.resign().await
    }
}

/// The leader of an election, as read by [`Election::leader`] and [`Election::observe`].
///
/// # Examples
///
/// ```no_run
/// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
/// if let Some(leader) = election.leader().await? {
///     println!("{} leads with token {} ({})", leader.id, leader.fencing_token, leader.node);
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's id: its node's data as UTF-8 (invalid bytes replaced).
    pub id: String,
    /// The leader's fencing token (its node's czxid).
    pub fencing_token: i64,
    /// The leader's node name, e.g. `_c_…-latch-0000000007`.
    pub node: String,
    /// The ZooKeeper session that owns the leader's node.
    pub session_id: i64,
}

impl Leader {
    fn new(node: &NodeName, data: &[u8], stat: &zk::Stat) -> Leader {
        Leader {
            id: String::from_utf8_lossy(data).into_owned(),
            fencing_token: stat.czxid,
            node: node.name.clone(),
            session_id: stat.ephemeral_owner,
        }
    }
}

/// One item of [`Election::observe`].
///
/// # Examples
///
/// ```
/// use zk_recipes::LeaderChange;
///
/// let change = LeaderChange::Vacant;
/// assert!(change.leader().is_none());
/// assert_eq!(change.id(), None);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderChange {
    /// This candidate leads now.
    Elected(Leader),
    /// No candidate is left.
    Vacant,
}

impl LeaderChange {
    /// The leader, if any.
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            LeaderChange::Elected(l) => Some(l),
            LeaderChange::Vacant => None,
        }
    }

    /// The leader's id, if any.
    pub fn id(&self) -> Option<&str> {
        self.leader().map(|l| l.id.as_str())
    }

    /// The leader's fencing token, if any.
    pub fn fencing_token(&self) -> Option<i64> {
        self.leader().map(|l| l.fencing_token)
    }
}

/// One candidate, as listed by [`Election::participants`].
///
/// # Examples
///
/// ```no_run
/// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
/// for p in election.participants().await? {
///     println!("{} {}{}", p.node, p.id, if p.is_leader { " (leader)" } else { "" });
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The candidate's id (its node's data as UTF-8).
    pub id: String,
    /// Its node name.
    pub node: String,
    /// The ZooKeeper session that owns its node.
    pub session_id: i64,
    /// Its fencing token if it leads (its node's czxid).
    pub fencing_token: i64,
    /// Whether it is first in line, i.e. the leader.
    pub is_leader: bool,
}

/// The stream of [`Election::observe`]: a [`futures::Stream`] of leader changes.
///
/// # Examples
///
/// ```no_run
/// # async fn f(election: zk_recipes::Election) {
/// use futures::StreamExt;
///
/// let first = election.observe().next().await;
/// println!("leader now: {first:?}");
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct LeaderChanges {
    inner: Pin<Box<dyn Stream<Item = Result<LeaderChange>> + Send>>,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl Stream for LeaderChanges {
    type Item = Result<LeaderChange>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().inner.as_mut().poll_next(cx)
    }
}

/// The state behind [`LeaderChanges`].
struct Observer {
    session: Session,
    dir: String,
    /// The node name of the last leader reported (`Some(None)`: vacant); `None` before the first.
    last: Option<Option<String>>,
    /// The epoch of the last read, and its loss signal. Weak: a stream nobody polls must not
    /// keep an ended epoch's client, whose session (and ephemeral nodes, a leader's among
    /// them) would then live on.
    epoch: Option<(std::sync::Weak<Epoch>, CancellationToken)>,
    /// The watch set by the last read.
    watch: Option<WatchFuture>,
    done: bool,
}

impl Observer {
    async fn next_change(&mut self) -> Option<Result<LeaderChange>> {
        let mut backoff = Duration::from_millis(50);
        loop {
            if self.done {
                return None;
            }
            if let Some(watch) = self.watch.take() {
                let lost = self
                    .epoch
                    .as_ref()
                    .map(|(_, lost)| lost.clone())
                    .unwrap_or_default();
                tokio::select! {
                    event = watch => {
                        if event.event_type == zk::EventType::Session {
                            self.epoch = None;
                        }
                    }
                    _ = lost.cancelled() => self.epoch = None,
                }
            }
            let epoch = match self
                .epoch
                .as_ref()
                .and_then(|(epoch, _)| epoch.upgrade())
                .filter(|e| !e.lost_token().is_cancelled())
            {
                Some(e) => e,
                None => match self.session.epoch().await {
                    Ok(e) => {
                        self.epoch = Some((Arc::downgrade(&e), e.lost_token().clone()));
                        e
                    }
                    Err(_) => {
                        self.done = true;
                        return None;
                    }
                },
            };
            match read_and_watch(&epoch, &self.dir).await {
                Ok((leader, watch)) => {
                    backoff = Duration::from_millis(50);
                    self.watch = Some(watch);
                    let key = leader.as_ref().map(|l| l.node.clone());
                    if self.last.as_ref() != Some(&key) {
                        self.last = Some(key);
                        return Some(Ok(match leader {
                            Some(l) => LeaderChange::Elected(l),
                            None => LeaderChange::Vacant,
                        }));
                    }
                }
                Err(err) if crate::error::is_unknown(&err) => {
                    // The epoch ended, or a request was cut off: read again (in the next epoch
                    // if this one is over). Requests made while disconnected wait for the
                    // reconnect, so this does not spin; the backoff covers the rest.
                    tracing::debug!(%err, dir = self.dir, "leader observer retries");
                    if epoch.lost_token().is_cancelled() {
                        self.epoch = None;
                    }
                    // Not kept across the pause (see `Observer::epoch`).
                    drop(epoch);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(err) => {
                    self.done = true;
                    return Some(Err(Error::zk("observe leader", &self.dir, err)));
                }
            }
        }
    }
}

/// The lowest latch node among `children`.
fn lowest_latch(children: &[String]) -> Option<NodeName> {
    children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| LATCH_MEMBERS.contains(&n.kind))
        .min_by_key(|n| n.sequence)
}

/// Reads the current leader (two requests: list, then read the lowest node).
async fn read_leader(epoch: &Epoch, dir: &str) -> ZkResult<Option<Leader>> {
    loop {
        let children = match epoch.get_children(dir).await {
            Ok((children, _)) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Some(first) = lowest_latch(&children) else {
            return Ok(None);
        };
        match epoch.get_data(&join(dir, &first.name)).await {
            Ok((data, stat)) => return Ok(Some(Leader::new(&first, &data, &stat))),
            // It left between the two reads: the next one leads now.
            Err(zk::Error::NoNode) => continue,
            Err(err) => return Err(err),
        }
    }
}

/// Reads the current leader and sets one watch that fires when it may have changed: a data
/// watch on the leader's node, or, with no leader, a children watch on the directory (an
/// `exists` watch if the directory is missing).
async fn read_and_watch(epoch: &Epoch, dir: &str) -> ZkResult<(Option<Leader>, WatchFuture)> {
    loop {
        let children = match epoch.get_children(dir).await {
            Ok((children, _)) => Some(children),
            Err(zk::Error::NoNode) => None,
            Err(err) => return Err(err),
        };
        let Some(children) = children else {
            match epoch.check_and_watch_stat(dir).await? {
                (Some(_), _) => continue,
                (None, watch) => return Ok((None, Box::pin(watch.changed()))),
            }
        };
        match lowest_latch(&children) {
            Some(first) => match epoch.get_and_watch_data(&join(dir, &first.name)).await {
                Ok((data, stat, watch)) => {
                    return Ok((
                        Some(Leader::new(&first, &data, &stat)),
                        Box::pin(watch.changed()),
                    ))
                }
                Err(zk::Error::NoNode) => continue,
                Err(err) => return Err(err),
            },
            None => match epoch.get_and_watch_children(dir).await {
                Ok((children, _, watch)) => {
                    if lowest_latch(&children).is_some() {
                        // A candidate arrived in between: read it (the watch is dropped).
                        continue;
                    }
                    return Ok((None, Box::pin(watch.changed())));
                }
                Err(zk::Error::NoNode) => continue,
                Err(err) => return Err(err),
            },
        }
    }
}

/// State shared between an [`ElectionRunner`] and its task.
#[derive(Debug)]
struct RunnerShared {
    terms: AtomicU64,
    leading: AtomicBool,
}

/// A candidate that campaigns again after each term: the handle of [`Election::run`].
///
/// Dropping the handle stops the runner as [`stop`](Self::stop) does, without waiting.
///
/// # Examples
///
/// ```no_run
/// # async fn f(election: zk_recipes::Election) -> zk_recipes::Result<()> {
/// let runner = election.run(|leadership| async move { leadership.lost().await });
/// tokio::time::sleep(std::time::Duration::from_secs(60)).await;
/// println!("led {} times; leading now: {}", runner.terms(), runner.is_leading());
/// runner.stop().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ElectionRunner {
    stop: CancellationToken,
    shared: Arc<RunnerShared>,
    task: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl ElectionRunner {
    /// How many terms have begun (times the closure was called).
    pub fn terms(&self) -> u64 {
        self.shared.terms.load(Ordering::Acquire)
    }

    /// Whether the closure is running, i.e. this candidate was granted leadership and has not
    /// returned from that term yet.
    pub fn is_leading(&self) -> bool {
        self.shared.leading.load(Ordering::Acquire)
    }

    /// Whether the runner has ended (stopped, or ended by an error).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// A token that stops the runner when cancelled (for example from inside the closure).
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops campaigning. A running term is cancelled at its next `.await` (its future is
    /// dropped, which resigns the leadership in the background, tracked by the session so
    /// that [`Session::close`] waits for it); a pending campaign is withdrawn. Returns once
    /// the runner's task has ended.
    ///
    /// # Errors
    ///
    /// * [`Error::Closed`] if the runner had ended because the session was closed.
    /// * Any non-retryable campaign error that had ended the runner (for example
    ///   [`Error::NoAuth`]).
    ///
    /// # Panics
    ///
    /// Resumes the panic if the closure panicked.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the runner is told to stop at the first poll and stops even if this future
    /// is dropped.
    pub async fn stop(mut self) -> Result<()> {
        self.stop.cancel();
        self.join_task().await
    }

    /// Waits until the runner ends by itself (after an error, or a stop from the
    /// [`stop_token`](Self::stop_token)).
    ///
    /// # Errors
    ///
    /// As [`stop`](Self::stop).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the runner, as dropping the `ElectionRunner` does.
    pub async fn join(mut self) -> Result<()> {
        self.join_task().await
    }

    async fn join_task(&mut self) -> Result<()> {
        let Some(task) = self.task.as_mut() else {
            return Ok(());
        };
        let result = task.await;
        self.task = None;
        match result {
            Ok(r) => r,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Ok(()),
        }
    }
}

impl Drop for ElectionRunner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn run_loop<F, Fut>(
    election: Election,
    mut leading: F,
    stop: CancellationToken,
    shared: Arc<RunnerShared>,
) -> Result<()>
where
    F: FnMut(Leadership) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    const FIRST_BACKOFF: Duration = Duration::from_millis(100);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let campaign = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            r = election.campaign() => r,
        };
        let leadership = match campaign {
            Ok(l) => {
                backoff = FIRST_BACKOFF;
                l
            }
            Err(Error::Closed) => return Err(Error::Closed),
            Err(err) if err.is_retryable() => {
                tracing::warn!(%err, path = election.path(), ?backoff, "campaign failed; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(err) => return Err(err),
        };
        shared.terms.fetch_add(1, Ordering::AcqRel);
        // Cleared when the term ends however it ends: returned, stopped, or unwound by a
        // panic of `leading` (or dropped with the task), which skipped a plain store and left
        // `is_leading()` true for good.
        let _leading = LeadingFlag::raise(&shared.leading);
        let term = leading(leadership);
        let stopped = tokio::select! {
            biased;
            _ = stop.cancelled() => true,
            _ = term => false,
        };
        drop(_leading);
        if stopped {
            return Ok(());
        }
    }
}

/// [`ElectionRunner::is_leading`]'s flag, raised for one term and lowered when dropped.
struct LeadingFlag<'a>(&'a AtomicBool);

impl<'a> LeadingFlag<'a> {
    fn raise(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::Release);
        LeadingFlag(flag)
    }
}

impl Drop for LeadingFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
