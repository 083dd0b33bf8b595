//! What a granted node becomes: the [`Holding`] behind every guard (queue recipes and the
//! simple lock alike), which watches the node for loss and releases it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::{Granted, WatchFuture, RELEASE_MARK};
use crate::error::{failure, is_unknown, Error, Failure, LossReason, Result};
use crate::path::{parent, NodeName};
use crate::session::{Epoch, GuardCheck, Noted, Op, PathSerializers, Relocked, Session};

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
    /// Cancelled when another process asks us to let go (a revocable guard, see
    /// [`Holding::revocable`]); never for the others.
    revoke: CancellationToken,
    /// What tells `lost` of our node's end while it is held; taken by the release, which
    /// uses up its own-node watch.
    monitor: Option<Watcher>,
    /// Closed (true) once our release is queued: no own-node watch is set after that.
    gate: Arc<Mutex<bool>>,
    released: bool,
    /// The node's czxid is claimed in the session (the simple lock, see
    /// [`Session::claim`]): given up only once the node is gone, never while our release may
    /// still be on its way (another acquire of the session would take the node for its own).
    claimed: bool,
    /// Whether the release writes the mark before deleting (default); see `with_release_mark`.
    mark_release: bool,
    /// The node path is reused by later holders (the simple lock): check the czxid first.
    verify_czxid: bool,
    /// A dropped guard's release may wait, parked, for a `lock()` of the same kind on the
    /// same directory and session, to go out with its create (see `with_merge`).
    mergeable: bool,
    /// Parked: the guard was dropped (so `lost` is cancelled) but the node is still ours and
    /// this holding's own drop must release it.
    release_owed: bool,
    /// The hold's end was recorded already (a parked holding's was, when its guard dropped).
    ended: bool,
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
        // A child of the epoch's end signal: the end of the epoch cancels it at once, with no
        // task of ours having to run. The monitor below, on the session's runtime, also
        // reports it (with its reason), but when that runtime ends the monitor is dropped
        // unrun while the session is closed (its epoch ended): `lost()` then never resolved,
        // and the server handed the lock on to another session after its timeout.
        let lost = epoch.lost_token().child_token();
        let reason = Arc::new(Mutex::new(None));
        let stop_monitor = CancellationToken::new();
        let gate = Arc::new(Mutex::new(false));
        let watching = Watching {
            epoch_token: epoch.lost_token().clone(),
            epoch_reason: epoch.reason_cell(),
            epoch: Arc::downgrade(&epoch),
            path: path.clone(),
            czxid,
            lost: lost.clone(),
            reason: reason.clone(),
            stop: stop_monitor.clone(),
            gate: gate.clone(),
        };
        let monitor = match own_watch {
            // The waiter armed the watch (every grant after a wait): it waits with a waker
            // of ours, and no task runs while the lock is held (see `Bridge`).
            Some(w) => Bridge::start(session, w, watching),
            None => {
                let own = arm_own_watch(epoch.clone(), path.clone(), czxid, gate.clone());
                Watcher::Task(session.spawn_at_home(watching.run(own)))
            }
        };
        let kind = crate::observe::kind_of(&name);
        let mark_release = super::holds_alone(name.kind);
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
            revoke: CancellationToken::new(),
            monitor: Some(monitor),
            gate,
            released: false,
            claimed: false,
            // Only a node that holds alone is marked: the mark tells the waiter behind it that it
            // holds now (`QueueSpec::mark_grants`). A reader's or a lease's mark grants nobody
            // (the waiter behind it re-lists, as after a plain deletion), and would cost the
            // server a second operation in every release.
            mark_release,
            verify_czxid: false,
            mergeable: false,
            release_owed: false,
            ended: false,
            kind,
            since: Instant::now(),
            span,
            lost_at_end: None,
        }
    }

    /// Whether the release (explicit or on drop) marks the node before deleting it (default:
    /// for a node that holds alone, see `holds_alone`). Leader election turns it off by
    /// default: Curator's LeaderLatch only reacts to NodeDeleted, so a marked release would
    /// leave a Curator follower waiting forever.
    pub(crate) fn with_release_mark(mut self, mark: bool) -> Holding {
        self.mark_release = mark;
        self
    }

    /// Lets a dropped guard's release merge with the next `lock()` of the same kind on the
    /// same directory and session (the fair lock's and the read/write lock's loop: lock,
    /// work, drop the guard, lock), which then sends both in one transaction, as
    /// [`relock`](super::relock) does: one log write and sync per iteration instead of two.
    ///
    /// How: the drop parks the release in the session ([`Session::park`], see
    /// [`crate::parking`]), whose flush task releases it unless a `lock()` took it back
    /// first. A task spawned from a tokio task runs no sooner than that task yields, and a
    /// loop's next `lock()` sends its first request in its first poll, before any yield: so
    /// the loop merges, and a drop with no `lock()` after it sends its release at the
    /// dropping task's next await, a few microseconds later than before. (Dropped by code no
    /// worker runs, the body of `block_on`, the flush task may run beside it; it may also be
    /// taken by another worker while it yields. On another thread than the drop's it leaves
    /// the release to the deadline thread, [`AWAY`](crate::parking::AWAY) after that.) A
    /// task that blocks its thread after the drop would hold the flush task back with it (it
    /// waits in that worker's LIFO slot, which other workers never steal): the session's
    /// deadline thread then sends the release, [`DEADLINE`](crate::parking::DEADLINE) after
    /// the drop at the latest.
    ///
    /// Why it is safe: a merged `lock()` is a relock (`start_relock`: atomic, the new node
    /// queued at the back, every failure falling back to the plain retried release), except
    /// that a failure of the old node's part is not reported to the `lock()` caller, who no
    /// longer holds that guard: it creates its node plainly instead. The parked holding's
    /// monitor is stopped and `lost` cancelled at the drop, as for a release sent at once.
    pub(crate) fn with_merge(mut self) -> Holding {
        self.mergeable = !self.verify_czxid && !self.claimed;
        self
    }

    /// Takes back the release of a guard dropped (and parked) on `session` under `dir`, for
    /// an acquire to merge with its create or to send first (see
    /// [`with_merge`](Self::with_merge)).
    pub(crate) fn unpark(session: &Session, dir: &str) -> Option<Holding> {
        let item = session.unpark(dir, |item| item.is::<Holding>())?;
        item.downcast::<Holding>().ok().map(|h| *h)
    }

    /// Whether a `lock()` took this holding back from the parked releases: its release is
    /// then the relock's.
    pub(crate) fn is_parked(&self) -> bool {
        self.release_owed
    }

    /// For a node path that later holders reuse (the simple lock): release only after checking
    /// that the node there is still ours (same czxid), never someone else's.
    pub(crate) fn with_shared_path(mut self) -> Holding {
        self.verify_czxid = true;
        self
    }

    /// Makes the guard revocable: watch for a revocation request, the node
    /// `<dir>/revoke-<our protection id>` (see `crate::recipes::revoke`), and cancel the
    /// revoke token when it appears. One `exists` watch more per grant; when the guard ends
    /// after a request, the request node is deleted. The watch on a request that never comes
    /// stays on the server until the session ends (ZooKeeper fires or drops it then).
    pub(crate) fn revocable(self, on: bool) -> Holding {
        let (Some(protection), true) = (self.name.protection.clone(), on) else {
            return self;
        };
        let request =
            crate::recipes::revoke::request_path(crate::path::parent(&self.path), &protection);
        let epoch = self.epoch.clone();
        let stop = self.stop_monitor.clone();
        let revoke = self.revoke.clone();
        self.session.spawn_at_home(async move {
            let mut backoff = Duration::from_millis(20);
            loop {
                let Some(live) = epoch.upgrade() else { return };
                let armed = tokio::select! {
                    _ = stop.cancelled() => return,
                    armed = live.check_and_watch_stat(&request) => armed,
                };
                drop(live);
                match armed {
                    Ok((Some(_), _)) => break,
                    Ok((None, watcher)) => {
                        let event = tokio::select! {
                            _ = stop.cancelled() => return,
                            event = watcher.changed() => event,
                        };
                        match event.event_type {
                            zk::EventType::NodeCreated => break,
                            zk::EventType::Session => return,
                            _ => continue,
                        }
                    }
                    Err(_) => {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
            }
            revoke.cancel();
            // Asked: once the guard ends, take the request away.
            stop.cancelled().await;
            if let Some(live) = epoch.upgrade() {
                let _ = live.delete(&request, None).await;
            }
        });
        self
    }

    pub(crate) fn revoke_token(&self) -> &CancellationToken {
        &self.revoke
    }

    /// The node's czxid is claimed in the session: unclaim it once the node is gone.
    pub(crate) fn claimed(mut self) -> Holding {
        self.claimed = true;
        self
    }

    fn unclaim(&mut self) {
        if std::mem::take(&mut self.claimed) {
            self.session.unclaim(self.czxid);
        }
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
    /// Whether this is a queue node (a sequential node of its own, which only its holder
    /// ever has at that path): what a relock may release. The simple lock's fixed node is not.
    pub(crate) fn is_queue_node(&self) -> bool {
        !self.verify_czxid && !self.claimed && self.name.sequence.is_some()
    }

    /// Whether this holding was granted through `session` (a handle of the same manager).
    pub(crate) fn belongs_to(&self, session: &Session) -> bool {
        self.session.same_as(session)
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
    /// The epoch our node lives in, while the lock is held; `LockLost` once it is lost (its
    /// reason if known, else the session's end). What a release or a relock starts from.
    pub(crate) fn live_epoch(&self) -> Result<Arc<Epoch>> {
        if self.is_lost() {
            return Err(Error::LockLost(
                self.loss_reason().unwrap_or(LossReason::SessionExpired),
            ));
        }
        self.epoch()
            .ok_or(Error::LockLost(LossReason::SessionExpired))
    }

    pub(crate) fn epoch(&self) -> Option<Arc<Epoch>> {
        self.epoch
            .upgrade()
            .filter(|e| !e.lost_token().is_cancelled())
    }

    /// Applies `ops` in one transaction that first proves, inside ZooKeeper, that our node is
    /// still ours (see `GuardCheck`), so a holder that lost the lock can never write.
    pub(crate) async fn guarded(&self, ops: &[Op]) -> Result<Vec<zk::MultiWriteResult>> {
        Holding::guarded_all(&[self], ops).await
    }

    /// [`guarded`](Self::guarded) for several holdings of one session at once (a multi-lock):
    /// one transaction with a check per holding.
    pub(crate) async fn guarded_all(
        holdings: &[&Holding],
        ops: &[Op],
    ) -> Result<Vec<zk::MultiWriteResult>> {
        for op in ops {
            crate::path::validate_path(op.path())?;
            check_write(op)?;
        }
        let lost =
            |h: &Holding| Error::LockLost(h.loss_reason().unwrap_or(LossReason::NodeDeleted));
        let session_over =
            |h: &Holding| Error::LockLost(h.loss_reason().unwrap_or(LossReason::SessionExpired));
        let Some(first) = holdings.first() else {
            return Err(Error::InvalidArgument(
                "a guarded write needs a guard".into(),
            ));
        };
        let mut epoch = None;
        for h in holdings {
            if h.is_lost() {
                return Err(lost(h));
            }
            match (h.epoch(), &epoch) {
                (None, _) => return Err(lost(h)),
                (Some(e), None) => epoch = Some(e),
                // Guards of different epochs: the older one's epoch has ended.
                (Some(e), Some(known)) if !Arc::ptr_eq(&e, known) => return Err(lost(h)),
                _ => {}
            }
        }
        let epoch = epoch.expect("at least one holding");
        let mut changed = 0;
        let result = loop {
            // The simple lock's fixed path: read the node, and write its own data back at that
            // version in the transaction. No create at the path by this session can come
            // between (creates hold the same serializer), and another session's node refuses
            // our write.
            let mut serials = Vec::new();
            let mut reads = Vec::with_capacity(holdings.len());
            for h in holdings {
                if !h.verify_czxid {
                    reads.push(None);
                    continue;
                }
                serials.push(h.session.serialize_path(&h.path).await);
                match epoch.get_data(&h.path).await {
                    Ok((data, stat)) if stat.czxid == h.czxid => {
                        reads.push(Some((data, stat.version)))
                    }
                    Ok(_) | Err(zk::Error::NoNode) => return Err(lost(h)),
                    Err(err) if failure(&err) == Failure::SessionOver => {
                        return Err(session_over(h))
                    }
                    Err(err) => return Err(Error::zk("get_data", &h.path, err)),
                }
            }
            let checks: Vec<GuardCheck<'_>> = holdings
                .iter()
                .zip(&reads)
                .map(|(h, read)| match read {
                    // A queue node's name is never used again: its existence is the proof.
                    None => GuardCheck::Exists(&h.path),
                    Some((data, version)) => GuardCheck::Owned {
                        path: &h.path,
                        data,
                        version: *version,
                    },
                })
                .collect();
            // Sent only into a live, connected epoch: queued while disconnected, it was
            // applied whenever the client reconnected into the session, even after `lost()`
            // had fired (found by a review, 2026-11-27). One queued at the instant the
            // connection breaks still can be (see `LockGuard::guarded`): only while our node
            // is there.
            if !epoch.wait_connected().await {
                return Err(session_over(first));
            }
            if let Some(h) = holdings.iter().find(|h| h.is_lost()) {
                return Err(lost(h));
            }
            // Queued at call time: the serializers may go before the answer comes.
            let multi = epoch.guarded_multi(&checks, ops);
            drop(serials);
            let result = multi.await;
            // A data change between the read and the write (only a super user can make one):
            // read again.
            match result {
                Err(zk::MultiWriteError::OperationFailed {
                    index,
                    source: zk::Error::BadVersion,
                }) if index < holdings.len() && reads[index].is_some() && changed < 5 => {
                    changed += 1
                }
                other => break other,
            }
        };
        let n = holdings.len();
        match result {
            Ok(mut results) => Ok(results.split_off(n)),
            Err(zk::MultiWriteError::OperationFailed { index, source }) if index < n => {
                match source {
                    zk::Error::NoNode | zk::Error::NoAuth | zk::Error::BadVersion => {
                        Err(lost(holdings[index]))
                    }
                    other => Err(Error::zk("multi", &holdings[index].path, other)),
                }
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                Err(Error::TransactionFailed {
                    index: index - n,
                    path: ops
                        .get(index - n)
                        .map(|o| o.path().to_string())
                        .unwrap_or_default(),
                    source,
                })
            }
            // The session ended under the request: its ephemeral nodes, and the locks, are gone.
            Err(zk::MultiWriteError::RequestFailed { source })
                if failure(&source) == Failure::SessionOver =>
            {
                Err(session_over(first))
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                Err(Error::zk("multi", &first.path, source))
            }
        }
    }

    /// Releases: marked (one notification hands the lock on) or plain, see `release_node`.
    pub(crate) async fn release(self) -> Result<()> {
        // Instrumented, not entered: an entered span held across an await moves between
        // threads with the task, which tracing-subscriber rejects with a panic.
        let span = tracing::info_span!(target: "zk_recipes", parent: &self.span, "release", path = %self.path, node = %self.name.name);
        tracing::Instrument::instrument(self.release_in_span(), span).await
    }

    async fn release_in_span(mut self) -> Result<()> {
        if self.is_lost() {
            self.lost_at_end = self.loss_reason();
        }
        self.released = true;
        let monitor = self.monitor.take();
        let epoch = match self.live_epoch() {
            Ok(epoch) => epoch,
            Err(err) => {
                self.stop_monitor.cancel();
                self.unclaim();
                return Err(err);
            }
        };
        let job = self.release_job(epoch, monitor, Place::Caller);
        let result = InPlace::new(&self.session, self.path.clone(), job).await;
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

    /// The whole work of our node's release, as a future: the release itself (its first
    /// request queued in its first poll), then `lost` cancelled, the czxid's claim given up
    /// and the own-node watch used up. Run in the caller's task by an awaited `release()`
    /// ([`InPlace`]), or in a task of its own for a dropped guard
    /// ([`release_in_background`](Self::release_in_background)).
    ///
    /// It ends once begun, even if its caller drops it half-way (`InPlace` then hands the
    /// rest to a task of the session's): the simple lock reads its node before it writes,
    /// and a release abandoned between the two would leave the node, and the lock, held
    /// until the session ends. Its first request is queued on the session in its first poll,
    /// so requests made after it go after it. (A dropped fair-lock or read/write guard is
    /// parked first instead, see `with_merge`, so that a worker loop's next create goes out
    /// in the same transaction: two packets, as a release followed by a create makes,
    /// usually cost the server two log syncs.) Safe whatever the order: the next node queues
    /// behind this one until it is gone. (The simple lock's first request is its read; its
    /// write follows the read's answer.)
    ///
    /// In its caller's task it sets no timer: a first answer that needs a retry or a read
    /// (an unknown outcome, a refusal) is followed up in a task of the session's, on its
    /// runtime, and so is an own-node watch not used up by the reply (see `finish_watch`).
    /// So the future may move to the session's runtime half-way, and runs on any executor.
    fn release_job(
        &mut self,
        epoch: Arc<Epoch>,
        monitor: Option<Watcher>,
        place: Place,
    ) -> ReleaseJob {
        let unclaim = std::mem::take(&mut self.claimed).then_some(self.czxid);
        let (session, path, gate, lost, stop) = (
            self.session.clone(),
            self.path.clone(),
            self.gate.clone(),
            self.lost.clone(),
            self.stop_monitor.clone(),
        );
        let (reason, epoch_token, epoch_reason) = (
            self.reason.clone(),
            self.epoch_token.clone(),
            self.epoch_reason.clone(),
        );
        let (mark, czxid) = (self.mark_release, self.czxid);
        let verify = self.verify_czxid.then_some(czxid);
        Box::pin(async move {
            let check = verify.map_or(Check::None, Check::Czxid);
            let serializers = session.path_serializers();
            let first = release_node(&epoch, &path, mark, check, &gate, Some(serializers)).await;
            let settled = settles(&first, verify);
            // Whether our delete was answered as done by the first attempt's own reply.
            let applied = settled && first.is_ok();
            let result = if settled {
                first
            } else {
                // Retried (timers) or read (a refusal): in a task of the session's.
                let (tx, rx) = tokio::sync::oneshot::channel();
                let (session, epoch, path, gate) =
                    (session.clone(), epoch.clone(), path.clone(), gate.clone());
                session
                    .clone()
                    .spawn_tracked(tracing::Instrument::in_current_span(async move {
                        let answered = First::Answered(first);
                        let result = release_retrying(
                            &session, &epoch, &path, czxid, mark, verify, &gate, answered,
                        )
                        .await;
                        let _ = tx.send(result);
                    }));
                rx.await.unwrap_or(Err(zk::Error::ClientClosed))
            };
            // Refused: the node stays (noted as stuck), and its own-node watch with it.
            let stays = result == Err(zk::Error::NoAuth);
            if result.is_err() && epoch_token.is_cancelled() {
                // The epoch ended under the release: its reason is the release's (`Closed`
                // for a session closed under it), as a monitor task, watching the epoch
                // until it is stopped below, would note it; a bridged watch hears nothing
                // once the gate is closed (a review of eaf14f4: `SessionExpired`).
                let ended = epoch_end_reason(&epoch_reason);
                reason.lock().unwrap().get_or_insert(ended);
            }
            lost.cancel();
            if let Some(czxid) = unclaim {
                session.unclaim(czxid);
            }
            // Only now is a monitor task stopped. Until then it can only hear of our node's
            // deletion, which the closed gate tells it is our own release, and it ends by
            // itself; woken earlier, its task ran beside the release's request, which waited
            // for it (waking a parked worker cost 13-23 µs from a thread outside the runtime, in
            // probes of `examples/bench_election`), and on a 2-core machine it competed
            // with the server for the CPU.
            stop.cancel();
            finish_watch(&session, monitor, stays, applied, place).await;
            result
        })
    }

    /// Releases our node in a task of the session's (tracked: `close` waits for it), whose
    /// first poll, made here, queues the release's first request; nobody waits for the
    /// outcome, which the task logs. A dropped guard's release.
    fn release_in_background(&mut self, epoch: Arc<Epoch>, monitor: Option<Watcher>) {
        let path = self.path.clone();
        let job = self.release_job(epoch, monitor, Place::Task);
        let task = async move {
            let result = job.await;
            log_unheard_release(&path, &result);
        };
        self.session
            .spawn_tracked_sent(tracing::Instrument::in_current_span(task));
    }

    /// Starts a relock: our release and the create of our next node at `new_prefix` in one
    /// transaction ([`Epoch::release_and_create`]), so a worker loop costs the server one log
    /// write and one sync per iteration instead of two. The request is sent before this
    /// returns; the receiver answers the transaction's outcome to the waiter: the new node's
    /// stat and name, which it treats as a plain create's (an unknown outcome is settled by
    /// the new node's protection id), or the server's refusal of the old node's part, which it
    /// reports against that node.
    ///
    /// Why it is as safe as a release followed by an acquire:
    /// * The transaction is atomic: either our node is gone and the new one queues at the back
    ///   (behind every waiter that was behind us, so the hand-off order is unchanged), or
    ///   nothing happened.
    /// * Whatever failed (the old node was gone: `NoNode`; the create was refused; the outcome
    ///   is unknown after a connection loss), the task then releases the old node as a plain
    ///   release does, retried while the epoch lives: it finds `NoNode` if the transaction was
    ///   applied after all, and never leaves the old node (and the lock) held.
    /// * The gate is closed before the request is sent, as in `release_node`: no own-node
    ///   watch is set on the old node after it, and the one it has is used up by our own
    ///   write (the monitor, stopped just after, takes the deletion for ours).
    /// * Queue nodes only (a unique path per node): the shared-path check of the simple lock
    ///   does not apply.
    ///
    /// `acls`: the new node's (an ephemeral sequential node, as a plain enter makes).
    pub(crate) fn start_relock(
        &mut self,
        epoch: Arc<Epoch>,
        new_prefix: String,
        data: Vec<u8>,
        acls: Vec<zk::Acl>,
    ) -> tokio::sync::oneshot::Receiver<std::result::Result<Relocked, zk::Error>> {
        debug_assert!(self.is_queue_node(), "queue nodes only");
        self.released = true;
        let monitor = self.monitor.take();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (session, path, gate, lost, mark, czxid) = (
            self.session.clone(),
            self.path.clone(),
            self.gate.clone(),
            self.lost.clone(),
            self.mark_release,
            self.czxid,
        );
        let task = async move {
            // Sent in the first poll, which `spawn_tracked_sent` makes before we return.
            let multi = {
                let mut closed = gate.lock().unwrap();
                *closed = true;
                let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&acls));
                epoch.release_and_create(&path, mark, &new_prefix, &data, &options)
            };
            let own = match monitor {
                Some(m) => m.handback().await,
                None => None,
            };
            let result = multi.await;
            let failed = !matches!(result, Ok(Relocked::Made(..)));
            // The waiter settles the new node; a dropped waiter's node is its `Abandoned`'s.
            let _ = tx.send(result);
            let mut stays = false;
            if failed {
                let released = release_retrying(
                    &session,
                    &epoch,
                    &path,
                    czxid,
                    mark,
                    None,
                    &gate,
                    First::Send(Check::None),
                )
                .await;
                stays = released == Err(zk::Error::NoAuth);
                log_unheard_release(&path, &released);
            }
            // As in `finish_watch`: a refused release's node stays, and its watch unfired.
            if !stays {
                use_up_own_watch(own).await;
            }
            lost.cancel();
        };
        self.session
            .spawn_tracked_sent(tracing::Instrument::in_current_span(task));
        // After the request is queued, as in `release_job`. This guard is over from now on,
        // as a dropped one is: a `lost()` kept by a watchdog must not fire later, after the
        // relock has handed out the next guard.
        self.stop_monitor.cancel();
        self.lost.cancel();
        rx
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.released && !self.release_owed && self.is_lost() {
            self.lost_at_end = self.loss_reason();
        }
        if !std::mem::replace(&mut self.ended, true) {
            crate::observe::hold_ended(self.kind, self.since.elapsed(), self.lost_at_end);
        }
        if self.released {
            return;
        }
        if self.lost.is_cancelled() && !self.release_owed {
            // Lost: the node is gone or not ours to delete any more.
            self.stop_monitor.cancel();
            self.unclaim();
            return;
        }
        let Some(epoch) = self.epoch() else {
            self.stop_monitor.cancel();
            self.unclaim();
            return;
        };
        if self.mergeable && !self.release_owed {
            // Parked, nothing is sent before the next `lock()` or the deadline: stop the
            // monitor first, as before a relock.
            self.lost.cancel();
            self.stop_monitor.cancel();
            if self.park() {
                return;
            }
        }
        let monitor = self.monitor.take();
        // Nobody waits for the outcome: the task logs it.
        self.release_in_background(epoch, monitor);
        // Told after the release is queued, so that waking a watchdog that waits on `lost()`
        // does not delay the request (see `release_job`).
        self.lost.cancel();
    }
}

impl Holding {
    /// Parks our release in the session for a `lock()` to merge (see `with_merge`): moves
    /// this holding's state into a parked one, whose own drop releases the node, and which
    /// the session drops unless a `lock()` takes it back first. False (nothing moved)
    /// outside a tokio runtime, where no `lock()` follows in the same poll.
    fn park(&mut self) -> bool {
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        let dir = parent(&self.path).to_string();
        let parked = Holding {
            session: self.session.clone(),
            epoch: self.epoch.clone(),
            path: std::mem::take(&mut self.path),
            name: self.name.clone(),
            czxid: self.czxid,
            session_id: self.session_id,
            lost: self.lost.clone(),
            reason: self.reason.clone(),
            epoch_token: self.epoch_token.clone(),
            epoch_reason: self.epoch_reason.clone(),
            stop_monitor: self.stop_monitor.clone(),
            revoke: self.revoke.clone(),
            monitor: self.monitor.take(),
            gate: self.gate.clone(),
            released: false,
            claimed: false,
            mark_release: self.mark_release,
            verify_czxid: false,
            mergeable: true,
            release_owed: true,
            ended: true,
            kind: self.kind,
            since: self.since,
            span: self.span.clone(),
            lost_at_end: None,
        };
        self.released = true;
        self.session.park(dir, Box::new(parked));
        true
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

/// An own-node watch ([`Epoch::watch_own`]), armed (or found gated) on its first poll.
pub(crate) type OwnCheck = Pin<Box<dyn Future<Output = Checked> + Send>>;

/// Why a holding's epoch ended, as the epoch noted it (the session's expiry if it did not).
fn epoch_end_reason(epoch_reason: &Mutex<Option<LossReason>>) -> LossReason {
    epoch_reason
        .lock()
        .unwrap()
        .unwrap_or(LossReason::SessionExpired)
}

/// What a holding's watching of its own node needs: the loss signal and its reason, the
/// epoch's end, the gate, and what it takes to arm the own-node watch again.
struct Watching {
    epoch_token: CancellationToken,
    epoch_reason: Arc<Mutex<Option<LossReason>>>,
    epoch: std::sync::Weak<Epoch>,
    path: String,
    czxid: i64,
    lost: CancellationToken,
    reason: Arc<Mutex<Option<LossReason>>>,
    stop: CancellationToken,
    gate: Arc<Mutex<bool>>,
}

impl Watching {
    /// Tells `lost` (with its reason) and ends.
    fn set(&self, r: LossReason) -> Option<OwnCheck> {
        self.reason.lock().unwrap().get_or_insert(r);
        self.lost.cancel();
        None
    }

    fn epoch_ended(&self) -> LossReason {
        epoch_end_reason(&self.epoch_reason)
    }

    /// The monitor: waits on `own` (the own-node watch, armed or being armed) until our node
    /// ends, the epoch ends or the monitor is stopped; re-arms after a failed request. On
    /// stop it hands the watch (armed or in flight) back, for the release to use up.
    async fn run(self, mut own: OwnCheck) -> Option<OwnCheck> {
        let mut backoff = Duration::from_millis(20);
        loop {
            // On stop, hand the own-node watch (armed or in flight) back to the release,
            // which lets its own write use the watch up.
            let checked = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Some(own),
                _ = self.epoch_token.cancelled() => return self.set(self.epoch_ended()),
                r = &mut own => r,
            };
            let mut watch = match checked {
                Checked::Armed(w) => w,
                Checked::Missing => return self.set(LossReason::NodeDeleted),
                Checked::Gated => return None,
                // The request failed (a connection blip): no watch is set. Arm it again for
                // as long as the epoch lives; a request made while disconnected waits for the
                // reconnect, and the backoff keeps a flapping connection from spinning.
                Checked::Failed => {
                    tokio::select! {
                        _ = self.stop.cancelled() => return None,
                        _ = self.epoch_token.cancelled() => return self.set(self.epoch_ended()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    let Some(epoch) = self.epoch.upgrade() else {
                        return self.set(self.epoch_ended());
                    };
                    own = arm_own_watch(epoch, self.path.clone(), self.czxid, self.gate.clone());
                    continue;
                }
            };
            backoff = Duration::from_millis(20);
            let event = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Some(Box::pin(std::future::ready(Checked::Armed(watch))) as OwnCheck),
                _ = self.epoch_token.cancelled() => return self.set(self.epoch_ended()),
                event = &mut watch => event,
            };
            match event.event_type {
                zk::EventType::Session => return self.set(self.epoch_ended()),
                // Our own release, queued (the gate closed) before we were stopped, is not a
                // loss.
                zk::EventType::NodeDeleted if *self.gate.lock().unwrap() => return None,
                zk::EventType::NodeDeleted => return self.set(LossReason::NodeDeleted),
                _ => {
                    // Anything else (a child watch hears of nothing else on a node that
                    // cannot have children, but should one come): look again and re-arm.
                    let Some(epoch) = self.epoch.upgrade() else {
                        return self.set(self.epoch_ended());
                    };
                    own = arm_own_watch(epoch, self.path.clone(), self.czxid, self.gate.clone());
                }
            }
        }
    }
}

/// What tells a holding's `lost` of its node's end: a [`Bridge`] over the armed own-node
/// watch, or a monitor task ([`Watching::run`]) that arms the watch first.
enum Watcher {
    Bridged(BridgeHandle),
    Task(tokio::task::JoinHandle<Option<OwnCheck>>),
}

impl Watcher {
    /// The own-node watch, armed or in flight, handed back for the release to use up
    /// (`None`: it fired, or was never armed). A monitor task must have been stopped first
    /// (`stop_monitor`): this waits for it to end.
    async fn handback(self) -> Option<OwnCheck> {
        match self {
            Watcher::Bridged(b) => b
                .take()
                .map(|w| Box::pin(std::future::ready(Checked::Armed(w))) as OwnCheck),
            Watcher::Task(m) => m.await.ok().flatten(),
        }
    }
}

/// A held node's own-node watch without a task of its own: the watch future waits with this
/// waker, which the client wakes (from the session's task) when the watch fires. With the
/// gate open (no release of ours queued) that is a loss, which a task on the session's
/// runtime then reads and reports as the monitor would (`Watching::run`, given the fired
/// watch); with the gate closed it is our own release's doing, which the release uses up
/// itself (it takes the future back, [`Watcher::handback`]). So `lost()` is told exactly as
/// with a monitor task, one task hop after the event, while a grant costs no task, and a
/// release's request is not queued behind one (a task spawned at the grant sat in the
/// granting worker's next-task slot, from which the session's task, woken by the release's
/// request, then pushed it, waking another worker: 1.4% of a drained hand-off with the
/// release's task, measured paired on 2026-11-28).
///
/// The waker never blocks for long and never calls into the client: it runs inside the
/// client's session task. It takes three short locks, one at a time (the gate, the watch's
/// slot, the loss state's slot), and may spawn a task.
struct Bridge {
    /// The watch future, until the release or the waker takes it.
    watch: Mutex<Option<WatchFuture>>,
    /// What reports a loss; taken by the first wake-up with the gate open.
    watching: Mutex<Option<Watching>>,
    gate: Arc<Mutex<bool>>,
    home: tokio::runtime::Handle,
}

/// The holding's handle on its [`Bridge`]: dropped, it drops the watch future, which ends
/// the cycle through the client's stored waker (the bridge owns the watch, whose sender keeps
/// the bridge's waker) as soon as the holding is done with it.
struct BridgeHandle(Arc<Bridge>);

impl BridgeHandle {
    fn take(&self) -> Option<WatchFuture> {
        crate::locked(&self.0.watch).take()
    }
}

impl Drop for BridgeHandle {
    fn drop(&mut self) {
        let watch = self.take();
        crate::locked(&self.0.watching).take();
        drop(watch);
    }
}

impl Bridge {
    /// Starts watching with `watch` (armed by the waiter, polled by it so far): polled once
    /// here with the bridge's waker, which replaces the waiter's.
    ///
    /// The watch's slot is locked from before the poll until the watch is stored: a wake-up
    /// that comes in between (the watch fired on another thread right after the poll
    /// registered our waker) waits for the slot, and finds the watch there. (Stored after
    /// the poll without the lock, such a wake-up found the slot empty and was lost: the
    /// holder was never told of its node's deletion. Found by a review of eaf14f4, shown with
    /// a model of the two functions that fired the watch in that gap.) The poll never wakes
    /// our waker itself, so it cannot wait for the slot it holds.
    fn start(session: &Session, mut watch: WatchFuture, watching: Watching) -> Watcher {
        let bridge = Arc::new(Bridge {
            watch: Mutex::new(None),
            gate: watching.gate.clone(),
            watching: Mutex::new(Some(watching)),
            home: session.home_handle(),
        });
        let waker = std::task::Waker::from(bridge.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut slot = crate::locked(&bridge.watch);
        if let std::task::Poll::Ready(event) = watch.as_mut().poll(&mut cx) {
            drop(slot);
            // Fired already (after the waiter last looked): the monitor reads it.
            let watching = crate::locked(&bridge.watching).take().expect("set above");
            let fired: WatchFuture = Box::pin(std::future::ready(event));
            let own: OwnCheck = Box::pin(std::future::ready(Checked::Armed(fired)));
            return Watcher::Task(session.spawn_at_home(watching.run(own)));
        }
        *slot = Some(watch);
        drop(slot);
        Watcher::Bridged(BridgeHandle(bridge))
    }
}

impl std::task::Wake for Bridge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Poison-tolerant: a panic here would end the client's session task, and every
        // request of the session with it.
        if *crate::locked(&self.gate) {
            // Our release is queued: the deletion is ours, and the release uses the watch up.
            return;
        }
        let watch = crate::locked(&self.watch).take();
        let watching = crate::locked(&self.watching).take();
        let (Some(watch), Some(watching)) = (watch, watching) else {
            return;
        };
        // The monitor, given the fired watch: it reads the event (at once) and tells `lost`.
        let own: OwnCheck = Box::pin(std::future::ready(Checked::Armed(watch)));
        drop(self.home.spawn(watching.run(own)));
    }
}

/// Sets the watch on our own node ([`Epoch::watch_own`]), unless the release is already
/// queued: the gate orders the two, so no watch is ever set on our node after our own
/// release, whose write must use up the one we have (see `release_node`).
fn arm_own_watch(epoch: Arc<Epoch>, path: String, czxid: i64, gate: Arc<Mutex<bool>>) -> OwnCheck {
    Box::pin(async move {
        let check = {
            let closed = gate.lock().unwrap();
            if *closed {
                return Checked::Gated;
            }
            epoch.watch_own(&path)
        };
        match check.await {
            Ok(Some((stat, w))) if stat.czxid == czxid => Checked::Armed(Box::pin(w.changed())),
            Ok(_) => Checked::Missing,
            Err(_) => Checked::Failed,
        }
    })
}

/// [`release_node`], retried after a failure whose outcome is unknown (a connection blip) for
/// as long as the epoch lives: a release lost in a blip would otherwise leave the node, and
/// the lock, held until the session ends. A retry after a release that was applied after all
/// finds the node gone (`NoNode`, or another czxid at a shared path).
///
/// `czxid` is our node's: a refusal (`NoAuth`) is reported as such only while the node there
/// is still the one made at `czxid` (see `retrying`).
#[allow(clippy::too_many_arguments)]
async fn release_retrying(
    session: &Session,
    epoch: &Arc<Epoch>,
    path: &str,
    czxid: i64,
    mark: bool,
    verify: Option<i64>,
    gate: &Mutex<bool>,
    first: First,
) -> std::result::Result<(), zk::Error> {
    // A release conditional on its czxid is a shared path's (`Holding::with_shared_path`).
    let shared = verify.is_some();
    let released = retrying(
        epoch,
        path,
        czxid,
        mark,
        verify,
        first,
        gate,
        Some(session.path_serializers()),
        shared,
    )
    .await;
    if released == Err(zk::Error::NoAuth) {
        super::sweep::ensure(session, epoch);
    }
    released
}

/// Deletes the node at the shared `path` only while it is the one created at `czxid` (read
/// just before), retried like a release: the cleanup of a cancelled simple-lock acquire,
/// whose decision was made on a read that may be old by now. The caller holds the path's
/// serializer (see [`Session::serialize_path`]).
pub(super) async fn delete_if_czxid(
    epoch: &Epoch,
    path: &str,
    czxid: i64,
) -> std::result::Result<(), zk::Error> {
    let gate = Mutex::new(false);
    let first = First::Send(Check::Czxid(czxid));
    retrying(
        epoch,
        path,
        czxid,
        true,
        Some(czxid),
        first,
        &gate,
        None,
        true,
    )
    .await
}

/// `serialize`: the session whose path serializer each attempt at a shared path takes, or
/// `None` when the caller already holds it. `shared`: whether `path` is a shared path (the
/// simple lock's), as a refusal notes it ([`Epoch::note_stuck`]).
#[allow(clippy::too_many_arguments)]
async fn retrying(
    epoch: &Epoch,
    path: &str,
    czxid: i64,
    mark: bool,
    verify: Option<i64>,
    first: First,
    gate: &Mutex<bool>,
    serialize: Option<&PathSerializers>,
    shared: bool,
) -> std::result::Result<(), zk::Error> {
    let again_check = verify.map_or(Check::None, Check::Czxid);
    let mut result = match first {
        First::Send(check) => release_node(epoch, path, mark, check, gate, serialize).await,
        First::Answered(result) => result,
    };
    let mut backoff = Duration::from_millis(20);
    // Whether an attempt may have been applied without our hearing of it.
    let mut unheard = false;
    // At a shared path the delete is conditional on a version: a data change (only a super
    // user could make one: the node is ours alone) is met by reading the node again.
    let mut changed = 0;
    let again = |result: &std::result::Result<(), zk::Error>, changed: &mut u32| match result {
        Err(e) if is_unknown(e) => true,
        Err(zk::Error::BadVersion) if verify.is_some() && *changed < 10 => {
            *changed += 1;
            true
        }
        _ => false,
    };
    while again(&result, &mut changed) && !epoch.is_over() {
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = epoch.lost_token().cancelled() => break,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
        unheard |= matches!(&result, Err(e) if is_unknown(e));
        result = release_node(epoch, path, mark, again_check, gate, serialize).await;
    }
    match result {
        // Our first attempt was applied after all.
        Err(zk::Error::NoNode) if unheard => Ok(()),
        // Refused: a node we may not write (the mark) is someone else's, made at our path
        // after ours went: ours is gone. Unless the node is still ours (our czxid): then the
        // directory's ACL refused the delete, or an administrator took WRITE on the node
        // from us, and the node stays, ours, until the session ends. Reported as such
        // (review 20: it was "deleted by someone else", with the advice to acquire again),
        // and noted, so that acquires of ours do not wait behind it for ever. Never deleted
        // plainly instead: a plain delete cannot tell our node from one made at its path by
        // someone else, and the mark's WRITE can (review 22: a plain-delete fallback deleted
        // another client's node and answered `Ok`).
        // The read is retried as the release is, while the epoch lives (review 23: a read
        // lost in a blip left the node un-noted, and the next acquire waited behind it).
        Err(zk::Error::NoAuth) => match stat_retrying(epoch, path, backoff).await? {
            Some(stat) if stat.czxid == czxid => {
                epoch.note_stuck(path, Some(czxid), shared);
                Err(zk::Error::NoAuth)
            }
            // Gone after an attempt whose answer was lost: it was applied after all, as for
            // `NoNode` above (the server checks the directory's DELETE before it looks for
            // the node, so a retry after the ACL changed is refused, not `NoNode`: a seeded
            // schedule with cuts and ACL flips saw `LockLost` from a release that had worked).
            _ if unheard => Ok(()),
            _ => Err(zk::Error::NoNode),
        },
        other => other,
    }
}

/// Reads the node at `path`, retried after a failure whose outcome is unknown (from
/// `backoff`) while the epoch lives.
async fn stat_retrying(
    epoch: &Epoch,
    path: &str,
    mut backoff: Duration,
) -> std::result::Result<Option<zk::Stat>, zk::Error> {
    loop {
        match epoch.check_stat(path).await {
            Err(err) if is_unknown(&err) && !epoch.is_over() => {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = epoch.lost_token().cancelled() => return Err(err),
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// Whether a node of ours noted as undeletable ([`Epoch::note_stuck`]) still is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stuck {
    /// Deleted now (the ACL that refused it was fixed), or gone, or the node at its path is
    /// not ours: forgotten, it blocks nobody of ours for good.
    No,
    /// The delete was refused again: ours, and there until the session ends.
    Yes,
    /// Not known: the epoch ended meanwhile (and the node with it), or its answer was lost.
    Unknown,
}

/// Tries once more to delete the node of ours noted as undeletable at `path`, before an
/// acquire queued behind it answers `NoAuth`: the error tells the user to fix the ACL, and
/// once it is fixed the next acquire must find out (review 23: the first refusal was final
/// for the session). The delete is conditional on the node's czxid, read just before (see
/// [`Check::Czxid`]); a node noted by name alone (a refused withdrawal or cleanup) is taken
/// as ours only while its owner is our session (another session's node has another owner,
/// and our session makes no other node of a queue node's name). So a node someone else made
/// at the path after an administrator deleted ours is not taken for ours (review 23: it
/// answered a false `NoAuth`).
///
/// `shared`: the session whose path serializer the delete takes at a shared path (the
/// simple lock's). There the delete carries the mark, as the release's does: only our
/// identity may write our node, so a node another contender made at the path between the
/// read and the delete is never deleted. A queue node (`None`) is deleted plainly, as its
/// withdrawal would have been: the mark tells the waiter behind the node that it now holds
/// alone, which is true only of a holder at the head, and a node noted by a withdrawal or a
/// cleanup may be in the middle of the queue (review 24: its marked delete granted the
/// waiter behind it beside the holder).
pub(crate) async fn delete_stuck(
    epoch: &Epoch,
    path: &str,
    shared: Option<&PathSerializers>,
) -> Stuck {
    let backoff = Duration::from_millis(20);
    let czxid = match epoch.stuck_note(path) {
        None => return Stuck::No,
        // A shared path's node is deleted only under its serializer, which a queue's caller
        // does not take (a path that only looks like a queue node's): left as it is.
        Some(noted) if noted.shared && shared.is_none() => return Stuck::Yes,
        Some(Noted {
            czxid: Some(czxid), ..
        }) => czxid,
        Some(noted @ Noted { czxid: None, .. }) => {
            match stat_retrying(epoch, path, backoff).await {
                Ok(Some(stat)) if noted.is(&stat, epoch.session_id) => stat.czxid,
                Ok(_) => {
                    epoch.forget_stuck(path, None);
                    return Stuck::No;
                }
                Err(_) => return Stuck::Unknown,
            }
        }
    };
    let gate = Mutex::new(false);
    let first = First::Send(Check::Czxid(czxid));
    let mark = shared.is_some();
    let retried = retrying(
        epoch,
        path,
        czxid,
        mark,
        Some(czxid),
        first,
        &gate,
        shared,
        shared.is_some(),
    );
    match retried.await {
        Ok(()) | Err(zk::Error::NoNode) => {
            epoch.forget_stuck(path, Some(czxid));
            Stuck::No
        }
        // Noted again, with its czxid (`retrying`).
        Err(zk::Error::NoAuth) => Stuck::Yes,
        Err(err) if is_unknown(&err) || epoch.is_over() => Stuck::Unknown,
        // Not deleted for another reason (a super user who keeps writing the node: ten
        // `BadVersion`s): it stays for now, as it did before this retry existed (review 25:
        // `Unknown` here made the simple lock try again at once, over and over).
        Err(_) => Stuck::Yes,
    }
}

/// A release's first attempt, for [`retrying`]: to be sent with this check, or sent and
/// answered already (by [`Holding::release_job`] in its caller's task).
enum First {
    Send(Check),
    Answered(std::result::Result<(), zk::Error>),
}

/// Whether a release's first answer is its outcome: what [`retrying`] answers at once, with
/// no retry and no read (success, or a definite refusal other than `NoAuth`, which is read
/// into; `BadVersion` at a shared path is read again).
fn settles(first: &std::result::Result<(), zk::Error>, verify: Option<i64>) -> bool {
    match first {
        Ok(()) => true,
        Err(err) if is_unknown(err) => false,
        Err(zk::Error::NoAuth) => false,
        Err(zk::Error::BadVersion) => verify.is_none(),
        Err(_) => true,
    }
}

/// A release's whole work ([`Holding::release_job`]).
type ReleaseJob = Pin<Box<dyn Future<Output = std::result::Result<(), zk::Error>> + Send>>;

/// Where a [`ReleaseJob`] runs: in its caller's task (an awaited `release()`), or in a task of
/// the session's (a dropped guard's release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Caller,
    Task,
}

/// Ends the own-node watching of a released node: the watch (armed, or in flight in a
/// monitor task) is used up by our own write, which fired it before the write's reply came
/// (the server sends a write's notifications first); not a refused release's, whose node
/// stays: its watch fires only when the node goes, and waiting for it (2 s at most) held
/// `close()` up for as long (review 31: a guard dropped while the session closed, its release
/// refused). A bridged watch is taken back at once; in the caller's task, what has to be
/// waited for (a monitor task's end, a watch not fired yet: a parked or failed release's) is
/// waited for in a task of the session's, so that the caller sets no timer and does not wait.
///
/// `applied`: the release's delete was answered as done by its own reply, so the watch's
/// event reached it first (the server sends a write's notifications before its reply), and
/// it can be read at once. Otherwise it is never read in place: a watch whose
/// client ended (its runtime shut down under the release) has its sender dropped unsent, and
/// reading it panics in the client (`OneshotReceiver::recv`); in a task of the session's it
/// ends with that runtime unread, as the release's task did (found by a review of eaf14f4:
/// `release()` panicked in its caller).
async fn finish_watch(
    session: &Session,
    monitor: Option<Watcher>,
    stays: bool,
    applied: bool,
    place: Place,
) {
    let own = match monitor {
        None => return,
        Some(Watcher::Bridged(bridge)) => match bridge.take() {
            None => return,
            Some(mut watch) if !stays => {
                if applied && futures::FutureExt::now_or_never(watch.as_mut()).is_some() {
                    return;
                }
                Some(Box::pin(std::future::ready(Checked::Armed(watch))) as OwnCheck)
            }
            Some(_) => return,
        },
        Some(task) if place == Place::Task => {
            let own = task.handback().await;
            if !stays {
                use_up_own_watch(own).await;
            }
            return;
        }
        Some(task) => {
            session.spawn_tracked(async move {
                let own = task.handback().await;
                if !stays {
                    use_up_own_watch(own).await;
                }
            });
            return;
        }
    };
    match place {
        Place::Task => use_up_own_watch(own).await,
        Place::Caller => session.spawn_tracked(use_up_own_watch(own)),
    }
}

/// An awaited `release()`'s work ([`Holding::release_job`]) run in the caller's task: no task
/// of its own is spawned, and the session's task, woken by the release's request, runs as
/// soon as the caller waits for the answer (a release's task, spawned into the caller's
/// worker's next-task slot, used to run first). Dropped before its end, it hands the rest to
/// a task of the session's (tracked, so `close()` waits for it, as it waits for the job in
/// place), which logs the outcome: a release, once begun, always ends.
struct InPlace {
    session: Session,
    path: String,
    job: Option<ReleaseJob>,
    _tracked: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl InPlace {
    fn new(session: &Session, path: String, job: ReleaseJob) -> InPlace {
        InPlace {
            session: session.clone(),
            path,
            job: Some(job),
            _tracked: session.tracker_token(),
        }
    }
}

impl Future for InPlace {
    type Output = std::result::Result<(), zk::Error>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // Out while polled: a job that panics is dropped with the unwinding, not handed to a
        // task by `drop` (where its next poll would panic again).
        let mut job = self.job.take().expect("InPlace polled after it answered");
        let polled = job.as_mut().poll(cx);
        if polled.is_pending() {
            self.job = Some(job);
        }
        polled
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            let path = std::mem::take(&mut self.path);
            self.session.spawn_tracked(async move {
                let result = job.await;
                log_unheard_release(&path, &result);
            });
        }
    }
}

/// How a release makes sure it deletes our node and no other.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// A path only we ever use (a queue node): no condition.
    None,
    /// A shared path: read the node, and release it at the version read only if it is still
    /// ours (same czxid). With the mark (set + delete in one multi) the release also needs
    /// WRITE on the node, which only our session manager's identity has: if the answer went
    /// stale in the network (an administrator deleted our node and another session made a
    /// new one, also at version 0), the multi fails with `NoAuth` and deletes nothing. A
    /// node of our own session cannot slip in between: the read runs after every earlier
    /// request of the session, and the read and the multi are queued under the path's
    /// serializer, which every create of the session at the path also holds (without it, a
    /// create of another handle sent between our read and our multi made a new node at
    /// version 0 that our multi, passing the ACL as the same session, deleted: seed 1067).
    Czxid(i64),
}

/// Deletes our node, marked (set + delete in one multi, so a waiter takes over on one
/// notification) or plain; with `verify`, only if the node at `path` still has that czxid
/// (a path reused by later holders). The release is queued under the gate, which tells the
/// holder's watcher (still watching, see `release_job`) that the deletion it will hear of is
/// ours; our own write uses up its own-node watch: no RemoveWatches request.
async fn release_node(
    epoch: &Epoch,
    path: &str,
    mark: bool,
    check: Check,
    gate: &Mutex<bool>,
    serialize: Option<&PathSerializers>,
) -> std::result::Result<(), zk::Error> {
    // Held from before the read until the write is queued (requests are ordered at call time).
    let mut serial = None;
    let version = match check {
        Check::None => None,
        Check::Czxid(czxid) => {
            if let Some(serializers) = serialize {
                serial = Some(serializers.serialize(path).await);
            }
            *gate.lock().unwrap() = true;
            match epoch.check_stat(path).await? {
                Some(stat) if stat.czxid == czxid => Some(stat.version),
                _ => return Err(zk::Error::NoNode),
            }
        }
    };
    let released = {
        let mut closed = gate.lock().unwrap();
        *closed = true;
        if mark {
            futures::future::Either::Left(epoch.set_and_delete(path, RELEASE_MARK, version))
        } else {
            futures::future::Either::Right(epoch.delete(path, version))
        }
    };
    drop(serial);
    // Queued: a first poll made in place (`Session::spawn_tracked_sent`) ends here, and the
    // rest runs in the session's task. Made from a thread that entered the session's runtime
    // (a guard dropped off any runtime, the deadline thread), it would otherwise go on, on a
    // request failed at once (`ConnectionLoss` from a client whose tasks ended with that
    // runtime), to the retry's timer, which panics on a runtime that is shut down: a panic in
    // a guard's drop, or in the deadline thread under the parked releases' lock. An awaited
    // `release()` goes straight on.
    crate::session::pause_if_polled_in_place().await;
    released.await
}

/// Logs the outcome of a release nobody waits for (a dropped guard's, a relock's fallback).
fn log_unheard_release(path: &str, result: &std::result::Result<(), zk::Error>) {
    match result {
        Ok(()) | Err(zk::Error::NoNode) => tracing::debug!(path, "released in the background"),
        Err(err) => {
            tracing::warn!(path, %err, "release failed; the node goes with the session")
        }
    }
}

/// Waits for our own-node watch, handed back by the stopped monitor, to be used up by our
/// own release: it fires with our write (before its reply; so at once once the reply is
/// in); an unsent check is `Gated`.
async fn use_up_own_watch(own: Option<OwnCheck>) {
    if let Some(own) = own {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            if let Checked::Armed(w) = own.await {
                w.await;
            }
        })
        .await;
    }
}

/// Checks a guarded op that writes data (a set or a create); deletes and checks pass.
///
/// * Its data must fit a request (see [`crate::path::validate_data`]).
/// * It must not write the data of a contender node made by this crate (any session's, but
///   only our own session may write one): on such a node a data change is the release mark,
///   which the waiter behind takes as the hand-off (see `Waiter::react`). Written while the
///   node is held, it granted that waiter beside the holder. Creating a node of that name is
///   refused too (it would pass for one of ours with an ACL of the caller's choice). Deleting
///   one is a plain deletion, which waiters check by listing: allowed.
fn check_write(op: &Op) -> Result<()> {
    let (path, data) = match op {
        Op::SetData { path, data, .. } | Op::Create { path, data, .. } => (path, data),
        _ => return Ok(()),
    };
    crate::path::validate_data("a guarded write's data", data)?;
    let name = path.rsplit('/').next().unwrap_or_default();
    if NodeName::parse(name).is_some_and(|n| n.is_owner_write_only()) {
        return Err(Error::InvalidArgument(format!(
            "guarded write to {path}: a contender node of zk-recipes, whose data only the \
             library writes (a change of it hands the lock on); keep your state in a node of \
             your own. Nothing was sent"
        )));
    }
    Ok(())
}
