//! Acquiring a place in a queue: the [`Waiter`] state machine (enter, arm, wait, react).

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::{
    delete_stuck, find_by_protection, Abandoned, Granted, Holding, QueueSpec, Rule, Stuck, Wait,
    WatchFuture,
};
use crate::error::{is_unknown, Error, LossReason, Result};
use crate::path::{join, new_prefix, NodeKind, NodeName};
use crate::session::{Epoch, Relocked, Session};

/// The answer to a read of the queue's directory data (a semaphore's permit count).
type DirData = std::result::Result<(Vec<u8>, zk::Stat), zk::Error>;

/// How many requests in a row a contender lets blips lose (in a live epoch) before it gives
/// its node up and queues again.
const MAX_BLIPS_IN_A_ROW: u32 = 20;

/// Outcome of one attempt in one epoch.
enum Attempt {
    Granted(Granted),
    /// The epoch ended (or our node vanished) while waiting: try again in the next one.
    Requeue(LossReason, Option<String>),
    /// The connection blipped too often in a live epoch (the session is the same): our node
    /// is being deleted; queue again, in this epoch. Not an expiry, whatever
    /// `requeue_on_expiry` says, unless the next attempt finds another epoch.
    Retry(Arc<Epoch>),
}

/// Acquires a place in the queue and waits until the rule grants it.
///
/// # Bounds
///
/// `wait` is kept whatever the connection does (see [`bounded`]): `Wait::Until(Some(_))`
/// answers [`Error::Timeout`] at its deadline, `Wait::Try` answers [`Error::ConnectionLost`]
/// as soon as the session is not connected.
///
/// # Cancel safety
///
/// Dropping the future deletes our node in the background (tracked by the session).
///
/// A guard of the same kind on the same directory and session dropped just before (and still
/// parked, see [`Holding::with_merge`]) is released in the same transaction as our create; a
/// parked guard of another kind is released first, before our create.
pub(crate) async fn acquire(session: &Session, spec: &QueueSpec, wait: Wait) -> Result<Granted> {
    let merged = match Holding::unpark(session, &spec.dir) {
        // Of our kind as the names read: a kazoo-layout writer's node reads as a lock.
        Some(held) if held.name().kind == crate::path::named_kind(spec.layout, spec.kind) => {
            held.epoch().map(|epoch| (epoch, held))
        }
        // Another kind (a dropped writer before a read): released now, before our create, as
        // it would have been without the parking.
        other => {
            drop(other);
            None
        }
    };
    acquire_after(session, spec, wait, merged).await
}

/// Releases `held` and queues again at the back, in one transaction (see
/// [`Holding::start_relock`]), then waits as [`acquire`] does. `held` must be a queue node of
/// `spec`'s directory, granted through `session`, of one of `kinds`.
///
/// # Errors
///
/// * [`Error::InvalidArgument`] if `held` is not such a node: it is released in the background
///   and nothing is created.
/// * [`Error::LockLost`] if `held` was lost already or its node is gone (nothing is created);
///   then those of [`acquire`].
///
/// # Cancel safety
///
/// As [`acquire`]; once polled, the release of `held` happens even if the future is dropped.
pub(crate) async fn relock(
    session: &Session,
    spec: &QueueSpec,
    held: Holding,
    kinds: &[NodeKind],
) -> Result<Granted> {
    let ours = held.belongs_to(session)
        && held.is_queue_node()
        && crate::path::parent(held.path()) == spec.dir
        && kinds.contains(&held.name().kind);
    if !ours {
        let err = Error::InvalidArgument(format!(
            "relock on {}: the guard of {} is not a guard of this lock on this session; it is released",
            spec.dir,
            held.path()
        ));
        drop(held);
        return Err(err);
    }
    let epoch = held.live_epoch()?;
    acquire_after(session, spec, Wait::Until(None), Some((epoch, held))).await
}

async fn acquire_after(
    session: &Session,
    spec: &QueueSpec,
    wait: Wait,
    held: Option<(Arc<Epoch>, Holding)>,
) -> Result<Granted> {
    use tracing::field::Empty;
    let kind = crate::observe::kind_label(spec.kind);
    let span = tracing::info_span!(target: "zk_recipes", "acquire", path = %spec.dir, kind, node = Empty, epoch = Empty, session_id = Empty, outcome = Empty);
    let started = Instant::now();
    if let Err(err) = crate::path::validate_data("the contender node's data", &spec.data) {
        // A relock's old node is released, as on any other refusal.
        drop(held);
        return Err(err);
    }
    // On the heap: the waiter's state machine is some 13 KB, and an acquire's future is moved
    // whole into a spawned task, into its finished stage and out through its `JoinHandle`
    // (copying it was 1.9% of the client's samples over the bench's drain in a `perf`
    // profile of 2026-11-26; 0.7% boxed). Tested: `acquire_futures_keep_the_waiter_on_the_heap`.
    let waiter = Box::pin(acquire_in_turn(session, spec, wait, held));
    let result =
        tracing::Instrument::instrument(bounded(session, wait, waiter), span.clone()).await;
    span.in_scope(|| crate::observe::acquired(kind, &result, started.elapsed()));
    result
}

async fn acquire_in_turn(
    session: &Session,
    spec: &QueueSpec,
    wait: Wait,
    mut held: Option<(Arc<Epoch>, Holding)>,
) -> Result<Granted> {
    let mut stale: Option<String> = None;
    // The epoch of a `Retry`: the next attempt must run in it. Another one means the session
    // ended after all (what looked like blips was its end), which is an expiry.
    // Weak: held across the wait for an epoch, it must not keep an ended one's client.
    let mut retry_in: Option<std::sync::Weak<Epoch>> = None;
    loop {
        // A relock's first attempt runs in the epoch of the node it releases.
        let (epoch, handover) = match held.take() {
            Some((epoch, holding)) => (epoch, Some(holding)),
            None => (epoch_before(session, wait).await?, None),
        };
        if let Some(previous) = retry_in.take() {
            if !std::ptr::eq(previous.as_ptr(), Arc::as_ptr(&epoch)) && !spec.requeue_on_expiry {
                let reason = previous.upgrade().and_then(|e| e.over_reason());
                return Err(lost_error(reason.unwrap_or(LossReason::SessionExpired)));
            }
        }
        if let Some(path) = stale.take() {
            // A node from an older session is deleted, never adopted.
            let _ = epoch.delete(&path, None).await;
        }
        match attempt(session, spec, wait, epoch, handover).await? {
            Attempt::Granted(g) => return Ok(g),
            Attempt::Retry(epoch) => {
                tracing::info!(
                    dir = spec.dir,
                    "contender queues again after connection blips"
                );
                retry_in = Some(Arc::downgrade(&epoch));
            }
            Attempt::Requeue(reason, left) => {
                if !spec.requeue_on_expiry {
                    if let Some(path) = left {
                        if let Some(epoch) = session.current_epoch() {
                            let _ = epoch.delete(&path, None).await;
                        }
                    }
                    return Err(lost_error(reason));
                }
                tracing::info!(dir = spec.dir, %reason, "contender re-queues");
                stale = left;
            }
        }
    }
}

/// What a contender that does not re-queue (`requeue_on_expiry(false)`) answers when its
/// attempt ended for `reason`.
fn lost_error(reason: LossReason) -> Error {
    match reason {
        LossReason::SessionExpired | LossReason::ConnectionLost => Error::SessionExpired,
        LossReason::Closed => Error::Closed,
        other => Error::LockLost(other),
    }
}

/// How long past its deadline a timed acquire still waits, while the session is connected,
/// for the answers it awaits: the deletion of its node that its own wait sends at the
/// deadline (see `Waiter::withdraw`), one round trip on a healthy connection, so that the node
/// is gone when [`Error::Timeout`] is answered. Ends early if the connection drops.
pub(crate) const WITHDRAW_MARGIN: Duration = Duration::from_millis(500);

/// Keeps the promise of `wait` for `attempt` (an acquire), whatever the connection does.
///
/// Requests made while the connection is down wait for the reconnect, or for the end of the
/// session (seconds: 7/5 of the session timeout with [`LossPolicy::OnExpiry`]), and so does
/// every step of an acquire that awaits one: its first step (which waits for the connection
/// before it creates our node and lists the directory, so that no node is made into an
/// epoch that ended meanwhile), the arming of its watches, the deletion of its node when it
/// gives up. So instead of bounding each step, this drops `attempt`:
///
/// * `Wait::Until(Some(deadline))`: at the deadline, answers [`Error::Timeout`] at once if
///   the session is not connected; if it is, the attempt's own wait has just withdrawn (its
///   node's deletion is on its way) and is given up to [`WITHDRAW_MARGIN`] more to answer,
///   less if the connection drops meanwhile.
/// * `Wait::Try`: answers [`Error::ConnectionLost`] at once if the session is not connected
///   when called (nothing is sent), or as soon as it is not ([`Error::Closed`] if closed).
/// * `Wait::Until(None)`: waits as long as it takes.
///
/// Dropping an attempt is what cancelling the acquire does, and it is cancel safe: a node
/// it may have created (even one whose create is still queued, or was applied unseen) is
/// deleted by its [`Abandoned`](super::Abandoned) in the background, once the connection is
/// back, while the session lives (and goes with the session otherwise). A grant is never
/// dropped: the attempt is polled before the deadline is checked, and a granted node is
/// handed on in the same poll.
///
/// [`LossPolicy::OnExpiry`]: crate::LossPolicy::OnExpiry
pub(crate) async fn bounded<T>(
    session: &Session,
    wait: Wait,
    attempt: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let not_connected = || {
        if session.state() == crate::SessionEvent::Closed {
            Error::Closed
        } else {
            Error::ConnectionLost
        }
    };
    match wait {
        Wait::Until(None) => attempt.await,
        Wait::Until(Some(deadline)) => {
            let mut attempt = std::pin::pin!(attempt);
            if let Ok(done) = tokio::time::timeout_at(deadline.into(), attempt.as_mut()).await {
                return done;
            }
            if !session.is_connected() {
                return Err(Error::Timeout);
            }
            tokio::select! {
                biased;
                done = attempt => done,
                _ = session.disconnected() => Err(Error::Timeout),
                _ = tokio::time::sleep(WITHDRAW_MARGIN) => Err(Error::Timeout),
            }
        }
        Wait::Try => {
            if !session.is_connected() {
                return Err(not_connected());
            }
            tokio::select! {
                biased;
                done = attempt => done,
                _ = session.disconnected() => Err(not_connected()),
            }
        }
    }
}

/// The session's live epoch, waited for no later than the deadline of `wait`.
async fn epoch_before(session: &Session, wait: Wait) -> Result<Arc<Epoch>> {
    match wait {
        Wait::Until(Some(deadline)) => {
            match tokio::time::timeout_at(deadline.into(), session.epoch()).await {
                Ok(r) => r,
                Err(_) => Err(Error::Timeout),
            }
        }
        _ => session.epoch().await,
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
    handover: Option<Holding>,
) -> Result<Attempt> {
    let entered = Waiter::enter(session, spec, epoch.clone(), handover).await;
    // The merged drop's part may have been refused, its node noted as stuck (`enter`).
    super::sweep::ensure(session, &epoch);
    let mut waiter = match entered? {
        Entered::Queued(w) => w,
        Entered::Done(done) => return Ok(done),
    };
    loop {
        if let Some(done) = waiter.grant_if_first().await? {
            return Ok(done);
        }
        // Before a `try_*` gives up: a node of ours that stays blocks it for good, and
        // `WouldBlock` would promise that a retry may succeed.
        match waiter.blocked_for_good().await {
            Blocked::ForGood => {
                let refused = Error::NoAuth {
                    path: spec.dir.clone(),
                };
                return Err(waiter.withdraw(refused).await);
            }
            Blocked::LookAgain => continue,
            Blocked::No => {}
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

/// What [`Waiter::blocked_for_good`] found.
enum Blocked {
    /// Nodes of ours that stay until the session ends block us: answer `NoAuth`.
    ForGood,
    /// A node of ours noted as undeletable was deleted after all, or is not ours: the window
    /// is dropped, to be listed again.
    LookAgain,
    No,
}

/// A contender with a node in the queue, in one epoch.
struct Waiter<'a> {
    session: &'a Session,
    spec: &'a QueueSpec,
    epoch: Arc<Epoch>,
    /// Deletes our node if the attempt is dropped or fails before it is granted.
    pending: Abandoned,
    me: NodeName,
    my_path: String,
    /// Our node's czxid; `None` for a relock's node until its first read (ZooKeeper 3.8
    /// answers a create inside a multi without its stat), see [`Waiter::owns`].
    czxid: Option<i64>,
    /// Members below us still believed to exist, ascending: the nearest ones only (see
    /// [`Rule::window`]).
    lower: Vec<NodeName>,
    /// Whether more members were below `lower` when it was read: an empty window then does
    /// not mean that nothing blocks us, so the grant re-lists first.
    cut: bool,
    /// The watch on our own node ([`Epoch::watch_own`]), once armed.
    own_watch: Option<WatchFuture>,
    /// Whether our own node is known to exist: from a listing that contained it, until a
    /// plain deletion below us (an administrator deleting the directory deletes ours too, and
    /// its event may not have reached our own-node watch yet).
    confirmed: bool,
    missing_in_a_row: u32,
    /// Requests whose answer a blip lost since the wait was last armed (see
    /// `blipped_too_often`).
    blips: u32,
    /// Whether we armed a watch before being granted (a semaphore lease granted after waiting
    /// tells the waiter behind it, see `grant_if_first`).
    waited: bool,
    /// Wakes the wait when a node of ours is found undeletable ([`Epoch::note_stuck`]).
    stuck: tokio::sync::watch::Receiver<u64>,
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
    /// A node of ours was found undeletable: look whether it blocks us for good.
    Stuck,
}

impl<'a> Waiter<'a> {
    /// Step 1: create our node and list the directory in one round trip; refuse a path held
    /// by contenders of another kind.
    async fn enter(
        session: &'a Session,
        spec: &'a QueueSpec,
        epoch: Arc<Epoch>,
        mut handover: Option<Holding>,
    ) -> Result<Entered<'a>> {
        let (prefix, protection) = new_prefix(spec.layout, spec.kind);
        let prefix_path = join(&spec.dir, &prefix);
        let mut pending = Abandoned::protected(session, &epoch, &spec.dir, &protection);
        if let Err(err) = epoch.check_creator_acls(&spec.acls) {
            pending.disarm();
            return Err(Error::zk("create", &spec.dir, err));
        }
        let acls = epoch.contender_acls(&spec.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&acls));
        let semaphore = matches!(spec.rule, Rule::Permits(_));
        let mut made_parents = 0;
        // Whether this pass relocks a dropped guard that a plain lock() took back.
        let mut merged;
        // The czxid of the node a relock (merged or not) releases.
        let mut relocked_czxid = None;
        let (me, czxid, children, dir_data) = loop {
            // A relock releases the held node in the same transaction (first pass only).
            let relocking = handover.is_some();
            merged = handover.as_ref().is_some_and(Holding::is_parked);
            // Set once a relock's transaction was applied: from then on our old node is gone
            // and a new one exists, whatever fails next.
            let applied = std::sync::atomic::AtomicBool::new(false);
            // A relock's old node, once the server refused its part of the transaction (say
            // `NoAuth`): the error then names that node, not the directory.
            let refused = std::sync::OnceLock::new();
            // Our create is made only into a live, connected epoch: queued while disconnected,
            // it was applied whenever the client reconnected into the session, even after
            // `close()` had returned or the epoch had ended (found by reviews, 2026-11-27). A
            // relock's transaction too: the node it releases is lost with the epoch anyway,
            // and is dropped here (its release, if the session lives, goes on its own).
            if !epoch.wait_connected().await {
                drop(handover.take());
                return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending)));
            }
            let create = match handover.take() {
                Some(mut held) => {
                    let old_path = held.path().to_string();
                    relocked_czxid = Some(held.fencing_token());
                    let created = held.start_relock(
                        epoch.clone(),
                        prefix_path.clone(),
                        spec.data.clone(),
                        acls.clone(),
                    );
                    let (applied, refused) = (&applied, &refused);
                    futures::future::Either::Left(async move {
                        let (stat, name) =
                            match created.await.unwrap_or(Err(zk::Error::ClientClosed))? {
                                Relocked::Made(stat, name) => (stat, name),
                                Relocked::OldNodeRefused(err) => {
                                    let _ = refused.set(old_path);
                                    return Err(err);
                                }
                            };
                        applied.store(true, std::sync::atomic::Ordering::SeqCst);
                        // ZooKeeper 3.8 answers a create inside a multi without its stat. Our
                        // node's czxid (the fencing token, and the node's identity) is then
                        // read by the first read of our own node, which sets the own-node
                        // watch that the wait and the guard need anyway: pipelined with the
                        // predecessor's watch when we must wait (`arm`), just before the
                        // grant when we need not (`grant_if_first`). From here on our node
                        // is `pending`'s, as a plain create's is: never left unowned.
                        let read = stat.czxid > 0 && stat.ephemeral_owner != 0;
                        Ok((read.then_some(stat), name))
                    })
                }
                None => {
                    let create = epoch.create(&prefix_path, &spec.data, &options);
                    let prefix = &prefix;
                    futures::future::Either::Right(async move {
                        create
                            .await
                            .map(|(stat, seq)| (Some(stat), format!("{prefix}{seq}")))
                    })
                }
            };
            let list = epoch.get_children(&spec.dir);
            let dir_data = semaphore.then(|| epoch.get_data(&spec.dir));
            let created = create.await;
            let listed = list.await;
            let dir_data = match dir_data {
                Some(read) => Some(read.await),
                None => None,
            };
            match created {
                Ok((stat, name)) => {
                    pending.set_path(join(&spec.dir, &name));
                    if stat.is_some_and(|stat| stat.ephemeral_owner != epoch.session_id) {
                        return Err(Error::ZooKeeper {
                            op: "create",
                            path: prefix_path.clone(),
                            source: zk::Error::UnexpectedError(
                                "created node is not owned by our session".into(),
                            ),
                        });
                    }
                    let node = NodeName::parse(&name).expect("our own node name parses");
                    let czxid = stat.map(|stat| stat.czxid);
                    match listed {
                        Ok((children, _)) => break (node, czxid, children, dir_data),
                        Err(err) if !is_unknown(&err) => {
                            return Err(Error::zk("get_children", &spec.dir, err))
                        }
                        // A blip after our create lost the listing: the node is ours and keeps
                        // its place. (A lost read of a semaphore's count is read again by
                        // `check_kind`.)
                        Err(_) => match list_queue(&epoch, spec).await {
                            Some((children, dir_data)) => break (node, czxid, children, dir_data),
                            None => {
                                return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending)))
                            }
                        },
                    }
                }
                // A merged drop's node was gone (nothing was applied): the lock() that took
                // it back creates its node plainly; that guard is not its to report on.
                Err(zk::Error::NoNode)
                    if merged && !applied.load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    continue;
                }
                Err(zk::Error::NoNode) if relocking => {
                    pending.disarm();
                    if applied.load(std::sync::atomic::Ordering::SeqCst) {
                        // Our new node was deleted before we read it: queue again.
                        return Ok(Entered::Done(Attempt::Requeue(
                            LossReason::NodeDeleted,
                            None,
                        )));
                    }
                    // The node we were releasing is gone (with its directory, or deleted by
                    // someone else), so nothing was created: the lock was lost while held.
                    return Err(Error::LockLost(LossReason::NodeDeleted));
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
                        Err(zk::Error::NoChildrenForEphemerals) => {
                            pending.disarm();
                            return Err(epoch.below_an_ephemeral(&spec.dir).await);
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
                    pending.set_path(path);
                    match list_queue(&epoch, spec).await {
                        Some((children, dir_data)) => {
                            break (node, Some(czxid), children, dir_data)
                        }
                        None => return Ok(Entered::Done(requeue_or_retry(&epoch, &mut pending))),
                    }
                }
                // The server refused the merged drop's part for lack of permission: nothing
                // was applied. If the node there is still ours (its czxid), it stays until
                // the session ends (the directory's ACL denies us DELETE, or an administrator
                // took WRITE on the node from us; it is never deleted plainly, see
                // `holding::retrying`): noted as stuck here, before our create, as the
                // dropped guard's own release (`start_relock`) notes it later. If it is
                // someone else's, made at that path after ours went (review 22), ours is
                // gone. Either way we create ours plainly, and the wait decides by the rule
                // whether a stuck node blocks us for good (`blocked_for_good`): a reader is
                // not blocked by our stuck reader (review 23: the merged read answered
                // `NoAuth` where an unmerged one was granted).
                Err(zk::Error::NoAuth) if merged && refused.get().is_some() => {
                    let old = refused.get().expect("checked");
                    if let Ok(Some(stat)) = epoch.check_stat(old).await {
                        if Some(stat.czxid) == relocked_czxid {
                            epoch.note_stuck(old, Some(stat.czxid), false);
                        }
                    }
                    continue;
                }
                // The server refused the merged drop's part otherwise: as above.
                Err(_) if merged && refused.get().is_some() => continue,
                Err(err) => {
                    pending.disarm();
                    if let Some(old) = refused.get() {
                        return Err(Error::zk("release", old, err));
                    }
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
        let stuck = epoch.stuck_changes();
        let mut waiter = Waiter {
            session,
            spec,
            epoch,
            pending,
            me,
            my_path,
            czxid,
            lower: Vec::new(),
            cut: false,
            own_watch: None,
            confirmed: true,
            missing_in_a_row: 0,
            blips: 0,
            waited: false,
            stuck,
        };
        let bytes = listing_bytes(&children);
        if bytes > LISTING_LIMIT {
            let err = Error::TooManyContenders {
                path: spec.dir.clone(),
                contenders: children.len(),
                bytes,
                limit: LISTING_LIMIT,
            };
            return Err(waiter.withdraw(err).await);
        }
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
        (waiter.lower, waiter.cut) = lower_members(spec, &children, &waiter.me);
        Ok(Entered::Queued(waiter))
    }

    /// One path, one kind: contenders of another recipe do not exclude ours (and ours not
    /// them), and semaphores must agree on the permit count, which the first contender
    /// stores in the directory's data (as kazoo's `Semaphore` does).
    async fn check_kind(
        &mut self,
        children: &[String],
        dir_data: Option<DirData>,
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
        let conflict = |stored: &str| {
            KindCheck::Conflict(Error::PathInUse {
                path: spec.dir.clone(),
                found: format!(
                    "a semaphore with {stored} permits (the count stored in its data; it stays until the path is removed, which ZooKeeper does for an empty container within about a minute)"
                ),
                ours: format!("a semaphore with {permits} permits"),
            })
        };
        let mut dir_data = dir_data;
        loop {
            let (data, stat) = match dir_data {
                Some(Ok(read)) => read,
                // A blip lost the answer (to the read, or to our write below): read again, our
                // node keeps its place.
                Some(Err(err)) if is_unknown(&err) => {
                    if self.blipped_too_often() {
                        return Err(KindCheck::Unknown);
                    }
                    dir_data = Some(self.epoch.get_data(&spec.dir).await);
                    continue;
                }
                // The directory is gone (and our node with it): the wait finds out.
                Some(Err(_)) | None => return Ok(()),
            };
            let stored = String::from_utf8_lossy(&data).trim().to_string();
            if stored == want {
                return Ok(());
            }
            if !stored.is_empty() {
                if stored.parse::<usize>().is_err() {
                    // Data we did not write: leave it alone (and the count unchecked).
                    tracing::warn!(
                        dir = spec.dir,
                        "the semaphore's directory holds foreign data; its permit count is not checked"
                    );
                    return Ok(());
                }
                return Err(conflict(&stored));
            }
            // Empty: the first contender stores its count, once. A count is never overwritten
            // while the directory lives, so two contenders can never each believe their own:
            // of two racing writers one gets BadVersion and reads the other's.
            match self
                .epoch
                .set_data(&spec.dir, want.as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => return Ok(()),
                // Someone stored a count first (perhaps our own write, whose answer a blip
                // lost): read it.
                Err(zk::Error::BadVersion) => {
                    dir_data = Some(self.epoch.get_data(&spec.dir).await);
                }
                Err(err) if is_unknown(&err) => dir_data = Some(Err(err)),
                Err(err) => {
                    tracing::warn!(dir = spec.dir, %err, "cannot store the semaphore's permit count; it is not checked");
                    return Ok(());
                }
            }
        }
    }

    /// Grants the lock when nothing below blocks us any more, after checking that our own node
    /// is still there and that the epoch has not ended meanwhile (a create that completed in
    /// an epoch the loss policy has already given up must re-queue, not be lost at birth).
    async fn grant_if_first(&mut self) -> Result<Option<Attempt>> {
        // Looked at again from the top after a blip (in a live epoch, not too many in a row)
        // lost the answer to one of its reads: our node keeps its place.
        loop {
            if !self.spec.watch_targets(&self.lower).is_empty() {
                return Ok(None);
            }
            if self.cut {
                // Nothing blocks us in the window we kept, but members were below it: look again
                // (the listing also confirms our own node).
                match relist(&self.epoch, self.spec, &self.me).await {
                    Ok(listed) => self.listed(listed),
                    Err(zk::Error::NoNode) => return Ok(Some(self.node_deleted())),
                    Err(err) if is_unknown(&err) => {
                        if self.blipped_too_often() {
                            return Ok(Some(self.requeue()));
                        }
                    }
                    Err(err) => return Err(Error::zk("get_children", &self.spec.dir, err)),
                }
                continue;
            }
            let czxid = match self.czxid {
                Some(czxid) => czxid,
                // A relock's node, not read yet (see `czxid`): read it now, with the own-node
                // watch that the guard keeps.
                None => match self.epoch.watch_own(&self.my_path).await {
                    Ok(Some((stat, w))) if self.owns(&stat) => {
                        self.czxid = Some(stat.czxid);
                        self.own_watch = Some(Box::pin(w.changed()));
                        self.confirmed = true;
                        stat.czxid
                    }
                    Ok(_) => return Ok(Some(self.node_deleted())),
                    Err(err) if is_unknown(&err) => {
                        if self.blipped_too_often() {
                            return Ok(Some(self.requeue()));
                        }
                        continue;
                    }
                    Err(err) => return Err(Error::zk("get_children", &self.my_path, err)),
                },
            };
            if !self.confirmed {
                match self.epoch.check_stat(&self.my_path).await {
                    Ok(Some(stat)) if stat.czxid == czxid => self.confirmed = true,
                    Ok(_) => return Ok(Some(self.node_deleted())),
                    Err(err) if is_unknown(&err) => {
                        if self.blipped_too_often() {
                            return Ok(Some(self.requeue()));
                        }
                        continue;
                    }
                    Err(err) => return Err(Error::zk("exists", &self.my_path, err)),
                }
            }
            // Our own node may be gone already: a waiter woken by its predecessor may have our
            // node's deletion (delivered first) ready as well.
            match own_watch_fired(&mut self.own_watch) {
                Some(e) if e.event_type == zk::EventType::NodeDeleted => {
                    return Ok(Some(self.node_deleted()))
                }
                Some(e) if e.event_type == zk::EventType::Session => {
                    return Ok(Some(self.session_event(&e)))
                }
                _ => {}
            }
            if self.epoch.is_over() || self.epoch.grace_passed() {
                return Ok(Some(self.requeue()));
            }
            self.pending.disarm();
            let span = tracing::Span::current();
            span.record("node", self.me.name.as_str());
            span.record("epoch", self.epoch.number);
            span.record("session_id", format_args!("{:#x}", self.epoch.session_id));
            if self.waited {
                crate::observe::handoff(crate::observe::kind_label(self.spec.kind));
            }
            if matches!(self.spec.rule, Rule::Permits(_)) {
                // A waiter behind us may watch our node alone and learn from this version bump
                // that it is now the head of the queue (see `watch_targets`): on every grant, not
                // only after a wait. A waiter whose listing the server answered before ours saw
                // more members below it than ours then showed (one left in between), and one that
                // listed while we armed saw us not yet granted; either watches us, and without a
                // bump would stay blind to a free permit until we leave. Sent now, awaited in the
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
            return Ok(Some(Attempt::Granted(Granted {
                epoch: self.epoch.clone(),
                path: self.my_path.clone(),
                name: self.me.clone(),
                czxid,
                own_watch: self.own_watch.take(),
            })));
        }
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
            .then(|| epoch.watch_own(&self.my_path));
        let watched = futures::future::join_all(watches).await;
        let mut unknown = false;
        if let Some(own) = own {
            match own.await {
                Ok(Some((stat, w))) if self.owns(&stat) => {
                    self.czxid = Some(stat.czxid);
                    self.own_watch = Some(Box::pin(w.changed()))
                }
                Ok(_) => return Ok(Armed::Done(self.node_deleted())),
                Err(err) if is_unknown(&err) => unknown = true,
                Err(err) => return Err(Error::zk("get_children", &self.my_path, err)),
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
        // Every watch answered: the blips before were recovered from. The bound counts blips
        // in a row, not over a long wait.
        self.blips = 0;
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
        let stuck = &mut self.stuck;
        tokio::select! {
            ((target, event), _, _) = watched => Woke::Watched(target, event),
            event = own => Woke::Own(event),
            _ = epoch.lost_token().cancelled() => Woke::EpochLost,
            _ = sleep => Woke::Deadline,
            // The epoch (held here) keeps the sender: no error.
            Ok(()) = stuck.changed() => Woke::Stuck,
        }
    }

    /// Step 4: react to what woke us.
    async fn react(&mut self, woke: Woke) -> Result<Option<Attempt>> {
        let spec = self.spec;
        match woke {
            Woke::Watched(target, event) => match event.event_type {
                zk::EventType::Session => return Ok(Some(self.session_event(&event))),
                zk::EventType::NodeDataChanged
                    if target.is_owner_write_only() && !matches!(spec.rule, Rule::Permits(_)) =>
                {
                    // A release mark: only the session that made the node can write its data
                    // (its ACL), and it writes only this, in the transaction that deletes the
                    // node.
                    if spec.mark_grants(&target) {
                        // The node held the lock alone, so nothing below it can exist, kept
                        // in our window or not: granted (`grant_if_first` still checks that
                        // our own node is there).
                        self.lower.clear();
                        self.cut = false;
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
                // other event (none is expected on a child watch): re-arm.
                self.own_watch = None;
                match event.event_type {
                    zk::EventType::Session => return Ok(Some(self.session_event(&event))),
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
            // Decided before the next arming (`blocked_for_good`).
            Woke::Stuck => {}
        }
        Ok(None)
    }

    /// Whether nodes of ours that cannot be deleted ([`Epoch::note_stuck`]) block us for
    /// good: one below us for an exclusive rule (or a reader's blocking writer), `permits` of
    /// them for a semaphore. Nothing to look at (and nothing sent) while none was noted. The
    /// window (`lower`) holds only the nearest members: when some were cut, the directory is
    /// listed again to count them all (review 22: our stuck node behind two waiters of other
    /// sessions, themselves stuck behind it, was out of the window, and we waited for ever).
    ///
    /// Each one found among our blockers (even fewer than would block us for good) has its
    /// delete tried again first ([`delete_stuck`]): the `NoAuth` it leads to tells the user to
    /// fix the directory's ACL, and once that is done the node goes and the wait goes on
    /// (review 23). That check also forgets a node that is
    /// not ours any more (a listing gives names only). When any went or was forgotten, the
    /// window is dropped and read again ([`Blocked::LookAgain`]).
    async fn blocked_for_good(&mut self) -> Blocked {
        if *self.stuck.borrow_and_update() == 0 {
            return Blocked::No;
        }
        let spec = self.spec;
        let needed = match spec.rule {
            Rule::Permits(permits) => permits,
            Rule::Exclusive | Rule::Read => 1,
        };
        let epoch = &self.epoch;
        let stuck = |names: &[NodeName]| -> Vec<String> {
            names
                .iter()
                .filter(|n| spec.rule.blocks(n))
                .map(|n| join(&spec.dir, &n.name))
                .filter(|path| epoch.is_stuck(path, None))
                .collect()
        };
        let mut found = stuck(&self.lower);
        // Only where something is noted (review 23: the count is the session's, and every
        // waiter with a cut window listed its directory again once anything was noted).
        if found.len() < needed && self.cut && epoch.has_stuck_in(&spec.dir) {
            let Ok((children, _)) = epoch.get_children(&spec.dir).await else {
                return Blocked::No;
            };
            found = stuck(&members_below(spec, &children, &self.me));
        }
        // Fewer than `needed` is not for good, but each is still tried: a semaphore's lease of
        // ours short of the permits would otherwise keep its permit from everyone until the
        // session ends, the ACL long fixed (review 25).
        if found.is_empty() {
            return Blocked::No;
        }
        let mut still = 0;
        for path in &found {
            match delete_stuck(epoch, path, None).await {
                Stuck::Yes => still += 1,
                Stuck::No => {}
                // The epoch ended: its nodes go with it, and the attempt re-queues.
                Stuck::Unknown => return Blocked::No,
            }
        }
        if still > 0 {
            super::sweep::ensure(self.session, &self.epoch);
        }
        if still >= needed {
            Blocked::ForGood
        } else if still < found.len() {
            (self.lower, self.cut) = (Vec::new(), true);
            Blocked::LookAgain
        } else {
            Blocked::No
        }
    }

    /// Whether `stat`, read at our node's path, is our node: the czxid we know; or, for a
    /// relock's node not read yet, any node of our session there. Its name carries the
    /// protection id chosen for this one create, and the sequence number the server gave it:
    /// our session made no other node of that name, and another session's node there has
    /// another owner.
    fn owns(&self, stat: &zk::Stat) -> bool {
        match self.czxid {
            Some(czxid) => stat.czxid == czxid,
            None => stat.ephemeral_owner == self.epoch.session_id,
        }
    }

    /// `target` is gone (a plain deletion): re-list, unless it was the last member we know
    /// of below us and the rule does not ask for a listing, in which case `grant_if_first`
    /// only confirms our own node. One request either way, as Curator's `getChildren`: the
    /// members we still have below it were read when we queued and have most likely left
    /// since (they were ahead of the one we watched), so walking back through them, one
    /// `exists` each, costs more than one listing.
    async fn gone(&mut self, target: &NodeName) -> Result<Option<Attempt>> {
        self.lower.retain(|n| n.sequence != target.sequence);
        self.confirmed = false;
        if self.spec.relist_after(target) || !self.lower.is_empty() || self.cut {
            return self.relist().await;
        }
        Ok(None)
    }

    /// A request failed with the outcome unknown. Requests sent while disconnected wait for
    /// the reconnect, so this does not spin: re-read the queue, or re-queue if the epoch ended.
    async fn blip(&mut self) -> Result<Armed> {
        if self.blipped_too_often() {
            return Ok(Armed::Done(self.requeue()));
        }
        match relist(&self.epoch, self.spec, &self.me).await {
            Ok(listed) => self.listed(listed),
            Err(zk::Error::NoNode) => return Ok(Armed::Done(self.node_deleted())),
            Err(_) => {}
        }
        Ok(Armed::Again)
    }

    /// Re-reads the members below us. `Some` when the attempt is over (our node is gone).
    async fn relist(&mut self) -> Result<Option<Attempt>> {
        match relist(&self.epoch, self.spec, &self.me).await {
            Ok(listed) => {
                self.listed(listed);
                Ok(None)
            }
            Err(err) if is_unknown(&err) => Ok(None),
            // The directory was deleted, or our node was: re-queue.
            Err(zk::Error::NoNode) => Ok(Some(self.node_deleted())),
            Err(err) => Err(Error::zk("get_children", &self.spec.dir, err)),
        }
    }

    /// A listing was answered: keep its window, and our own node is confirmed (`relist`
    /// checks that the listing contains it).
    fn listed(&mut self, (lower, cut): (Vec<NodeName>, bool)) {
        (self.lower, self.cut) = (lower, cut);
        self.confirmed = true;
    }

    /// Counts a request whose outcome is unknown: `true` once the attempt should re-queue
    /// (the epoch is over, or more than 20 blips in a row, with no wait armed in between).
    fn blipped_too_often(&mut self) -> bool {
        self.blips += 1;
        self.epoch.is_over() || self.blips > MAX_BLIPS_IN_A_ROW
    }

    /// Gives up: removes our node before answering `err` (in the background, retried, if
    /// the delete fails).
    async fn withdraw(&mut self, err: Error) -> Error {
        match tokio::time::timeout(
            Duration::from_secs(10),
            self.epoch.delete(&self.my_path, None),
        )
        .await
        {
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => self.pending.disarm(),
            // Refused for good (a directory whose ACL lets us create but not delete): our
            // node stays in the queue until the session ends, and will block it when its turn
            // comes. Say so rather than `err`, which promises that nothing is left.
            Ok(Err(refused)) if !is_unknown(&refused) => {
                self.pending.disarm();
                if refused == zk::Error::NoAuth {
                    self.epoch.note_stuck(&self.my_path, None, false);
                    super::sweep::ensure(self.session, &self.epoch);
                }
                tracing::warn!(node = self.my_path, %refused, "cannot withdraw our contender node; it stays until the session ends");
                return Error::zk("delete", &self.spec.dir, refused);
            }
            _ => self.pending.clean_now(),
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

    /// A watch of ours was told that the session changed state. A watch may hear that the
    /// session is over (expired) before the client's own state says so: the event decides
    /// then, never taken for a blip.
    fn session_event(&mut self, event: &zk::WatchedEvent) -> Attempt {
        match self
            .epoch
            .over_reason()
            .or_else(|| crate::session::terminal_reason(event.session_state))
        {
            Some(reason) => requeue_over(reason, &mut self.pending),
            None => self.requeue(),
        }
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

/// The largest reply ZooKeeper's Java client reads (`jute.maxbuffer`, default `0xfffff`): a
/// directory whose listing is larger cannot be listed by Curator or zkCli.
pub(crate) const LISTING_LIMIT: usize = 0xfffff;

/// The size of a `getChildren` reply listing `children`, as the Java client counts it: the
/// reply header (16 bytes), the vector's length (4), and each name with its length (4).
fn listing_bytes(children: &[String]) -> usize {
    20 + children.iter().map(|c| 4 + c.len()).sum::<usize>()
}

/// The members of `children` below `me`, ascending, cut to the rule's window (see
/// [`Rule::window`]), and whether anything was cut off.
fn lower_members(spec: &QueueSpec, children: &[String], me: &NodeName) -> (Vec<NodeName>, bool) {
    let mut lower = members_below(spec, children, me);
    lower.sort_by_key(|n| n.sequence);
    spec.rule.window(lower)
}

/// The members of `spec`'s queue below `me` among `children`, unsorted.
fn members_below(spec: &QueueSpec, children: &[String], me: &NodeName) -> Vec<NodeName> {
    children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| spec.is_member(n) && n.sequence < me.sequence)
        .collect()
}

/// Our own node's watch event, if it has fired already (the watch is then used up).
fn own_watch_fired(own_watch: &mut Option<WatchFuture>) -> Option<zk::WatchedEvent> {
    let event = futures::FutureExt::now_or_never(own_watch.as_mut()?.as_mut())?;
    *own_watch = None;
    Some(event)
}

/// The epoch failed under us. If it has ended, re-queue (remembering our node, if any, as
/// stale); if it is still alive (connection blips), queue again, after deleting our node.
fn requeue_or_retry(epoch: &Arc<Epoch>, pending: &mut Abandoned) -> Attempt {
    // Over, not only ended: the client may know that the session expired a moment before
    // the supervisor ends the epoch, and that is no blip.
    if let Some(reason) = epoch.over_reason() {
        requeue_over(reason, pending)
    } else {
        // Still the same session: delete the node in the background, retried while it lives.
        pending.clean_now();
        Attempt::Retry(epoch.clone())
    }
}

/// The epoch is over (`reason`): re-queue in the next one, remembering our node, if any, as
/// stale (deleted there, never adopted).
fn requeue_over(reason: LossReason, pending: &mut Abandoned) -> Attempt {
    let path = pending.path().map(str::to_string);
    pending.disarm();
    Attempt::Requeue(reason, path)
}

/// The directory's listing (and, for a semaphore, its data), read once our node is known
/// (after a create whose answer was lost and that was found again, or read again after a
/// listing whose answer a connection blip lost). Read again while blips lose the answers in a
/// live epoch: our node is still ours and keeps its place in the queue (requests sent while
/// disconnected wait for the reconnect, so this does not spin). `None` once the epoch has
/// ended, the blips go on, or the listing is refused: the caller then queues again.
async fn list_queue(epoch: &Epoch, spec: &QueueSpec) -> Option<(Vec<String>, Option<DirData>)> {
    let semaphore = matches!(spec.rule, Rule::Permits(_));
    for _ in 0..MAX_BLIPS_IN_A_ROW {
        if epoch.is_over() {
            return None;
        }
        let list = epoch.get_children(&spec.dir);
        let dir_data = semaphore.then(|| epoch.get_data(&spec.dir));
        let listed = list.await;
        let dir_data = match dir_data {
            Some(read) => Some(read.await),
            None => None,
        };
        match listed {
            Ok((children, _)) => return Some((children, dir_data)),
            Err(err) if is_unknown(&err) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Finds our node after a create whose answer was lost (by its protection id): its path, name
/// and czxid if it is there and ours; `None` if it is not (nothing was made), if it belongs to
/// another session (deleted), or if the epoch is over or the search keeps losing its answers
/// (the caller queues again or answers the loss).
async fn recover_unknown_create(
    epoch: &Arc<Epoch>,
    spec: &QueueSpec,
    protection: &str,
) -> Option<(String, NodeName, i64)> {
    // A lost answer to the search (same session) looks again, as `list_queue` does: giving
    // the node up at the first one queued us again at the back, behind contenders that came
    // after us (two blips in a row cost the place; found by a review, 2026-11-27).
    for _ in 0..MAX_BLIPS_IN_A_ROW {
        if epoch.is_over() {
            return None;
        }
        let (path, node) = match find_by_protection(epoch, &spec.dir, protection).await {
            Ok(found) => found?,
            Err(err) if err.is_outcome_unknown() => continue,
            Err(_) => return None,
        };
        match epoch.get_data(&path).await {
            Ok((_, stat)) if stat.ephemeral_owner == epoch.session_id => {
                return Some((path, node, stat.czxid))
            }
            Ok(_) => {
                let _ = epoch.delete(&path, None).await;
                return None;
            }
            Err(err) if is_unknown(&err) => continue,
            Err(_) => return None,
        }
    }
    None
}

async fn relist(
    epoch: &Epoch,
    spec: &QueueSpec,
    me: &NodeName,
) -> std::result::Result<(Vec<NodeName>, bool), zk::Error> {
    let (children, _) = epoch.get_children(&spec.dir).await?;
    if !children.contains(&me.name) {
        // Our own node is gone (deleted with its directory, or by an administrator). Compare
        // names, not sequence numbers: a directory deleted and made again counts from 0, so
        // another contender's node may carry our old number.
        return Err(zk::Error::NoNode);
    }
    Ok(lower_members(spec, &children, me))
}
