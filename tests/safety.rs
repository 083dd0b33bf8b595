//! Regression tests for the holes of the safety issue: each one failed on the code before
//! its fix (the lock was handed on wrongly, a live guard's node was deleted, a free permit
//! sat idle, contenders of different kinds shared a path).
mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use support::zk::{children, raw, session};
use zk_recipes::testing::unique_root;
use zk_recipes::{zk, Election, Error, ExclusiveLock, FairLock, RwLock, Semaphore};

/// What Curator's `Revoker.attemptRevoke` writes into a holder's node.
const REVOKE: &[u8] = b"__REVOKE__";

/// Waits until `dir` has `n` children (contenders queued), or fails the test.
async fn wait_for_children(dir: &str, n: usize) -> Vec<String> {
    for _ in 0..200 {
        let c = children(dir).await;
        if c.len() >= n {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "expected {n} contenders under {dir}, saw {:?}",
        children(dir).await
    );
}

/// Given a holder and a queued waiter, when a foreign client writes the holder's node, then
/// the write is refused and the waiter is still waiting a second later; when the holder
/// releases, the waiter gets the lock.
async fn foreign_write_hands_nothing_on<G, W>(
    what: &str,
    dir: &str,
    holder_path: String,
    waiter: W,
    release: impl Future<Output = ()>,
) where
    W: Future<Output = zk_recipes::Result<G>> + Send + 'static,
    G: Send + 'static,
{
    let mut waiting = tokio::spawn(waiter);
    wait_for_children(dir, 2).await;
    let admin = raw().await;
    let wrote = admin.set_data(&holder_path, REVOKE, None).await;
    assert_eq!(
        wrote.as_ref().err(),
        Some(&zk::Error::NoAuth),
        "{what}: a foreign client could write the holder's node {holder_path}"
    );
    let early = tokio::time::timeout(Duration::from_secs(1), &mut waiting).await;
    assert!(
        early.is_err(),
        "{what}: the waiter was granted while the holder still held (after a foreign data write)"
    );
    release.await;
    let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter was not granted after the release"))
        .unwrap();
    assert!(
        granted.is_ok(),
        "{what}: waiter failed: {:?}",
        granted.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_write_on_a_fair_lock_holder_hands_nothing_on() {
    let dir = unique_root("foreign-lock");
    let (s1, s2) = (session().await, session().await);
    let held = FairLock::new(&s1, &dir).unwrap().lock().await.unwrap();
    let lock = FairLock::new(&s2, &dir).unwrap();
    let path = held.path().to_string();
    foreign_write_hands_nothing_on(
        "fair lock",
        &dir,
        path,
        async move { lock.lock().await },
        async move { held.release().await.unwrap() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_write_on_a_writer_hands_nothing_on() {
    let dir = unique_root("foreign-writer");
    let (s1, s2) = (session().await, session().await);
    let held = RwLock::new(&s1, &dir).unwrap().write().await.unwrap();
    let rw = RwLock::new(&s2, &dir).unwrap();
    let path = held.path().to_string();
    foreign_write_hands_nothing_on(
        "write lock",
        &dir,
        path,
        async move { rw.read().await },
        async move { held.release().await.unwrap() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_write_on_a_leader_hands_nothing_on() {
    let dir = unique_root("foreign-leader");
    let (s1, s2) = (session().await, session().await);
    for mark in [false, true] {
        let leader = Election::new(&s1, &dir, "a")
            .unwrap()
            .with_release_mark(mark)
            .campaign()
            .await
            .unwrap();
        let follower = Election::new(&s2, &dir, "b")
            .unwrap()
            .with_release_mark(mark);
        let path = leader.path().to_string();
        foreign_write_hands_nothing_on(
            &format!("election (release mark {mark})"),
            &dir,
            path,
            async move {
                let l = follower.campaign().await?;
                l.resign().await
            },
            async move { leader.resign().await.unwrap() },
        )
        .await;
    }
}

/// A peer's node (Curator-named, open ACL) holds the lock; a data write on it is not a
/// release: our waiter keeps waiting until the node is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_write_on_a_peers_holder_node_is_not_a_release() {
    let dir = unique_root("foreign-peer");
    let peer = raw().await;
    peer.create(
        &dir,
        &[],
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let prefix = format!(
        "{dir}/_c_{}-lock-",
        uuid::Uuid::new_v4().hyphenated() // a v4 id, as Curator makes
    );
    let (_, seq) = peer
        .create(
            &prefix,
            b"curator-holder",
            &zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let peer_node = format!("{prefix}{seq}");
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let mut waiting = tokio::spawn(async move { lock.lock().await });
    wait_for_children(&dir, 2).await;
    peer.set_data(&peer_node, REVOKE, None).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), &mut waiting)
            .await
            .is_err(),
        "a data write on the peer's holder node handed the lock to our waiter"
    );
    peer.delete(&peer_node, None).await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("not granted after the peer's node was deleted")
        .unwrap()
        .expect("lock");
    guard.release().await.unwrap();
}

/// Given a guard of one handle, when an acquire on another handle of the same session (or
/// the same handle) is polled once, so that its create is sent, and then dropped, then the
/// guard's node is still there and the guard is not told it lost anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_simple_lock_acquire_never_deletes_a_live_guards_node() {
    let s = session().await;
    let path = format!("{}/simple", unique_root("cancel-simple"));
    let a = ExclusiveLock::new(&s, &path).unwrap();
    let guard = a.lock().await.unwrap();
    let token = guard.fencing_token();
    let b = ExclusiveLock::new(&s, &path).unwrap();
    for (which, handle) in [("another handle", &b), ("the same handle", &a)] {
        for kind in ["lock", "try_lock"] {
            {
                let fut: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = if kind == "lock" {
                    Box::pin(handle.lock())
                } else {
                    Box::pin(handle.try_lock())
                };
                let mut fut = fut;
                // One poll sends the create; then the future is dropped.
                let polled = futures::poll!(fut.as_mut());
                assert!(polled.is_pending(), "{which} {kind}: resolved at once");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let admin = raw().await;
            let stat = admin.check_stat(&path).await.unwrap();
            assert_eq!(
                stat.map(|s| s.czxid),
                Some(token),
                "{which} {kind}: the live guard's node was deleted by a cancelled acquire"
            );
            assert!(
                !guard.is_lost(),
                "{which} {kind}: the guard was told {:?}",
                guard.loss_reason()
            );
        }
    }
    guard.release().await.unwrap();
    s.close().await;
}

/// Takes both permits of a 2-permit semaphore at `dir`, one on each session.
async fn two_permit_holders(
    dir: &str,
    sa: &zk_recipes::Session,
    sb: &zk_recipes::Session,
) -> (zk_recipes::LockGuard, zk_recipes::LockGuard) {
    let a = Semaphore::new(sa, dir, 2).unwrap().acquire().await.unwrap();
    let b = Semaphore::new(sb, dir, 2).unwrap().acquire().await.unwrap();
    (a, b)
}

/// Queues an acquire of a 2-permit semaphore at `dir` on `s`, and waits until `dir` has
/// `members` contenders (the new one among them).
async fn queue_for_a_permit(dir: &str, s: &zk_recipes::Session, members: usize) -> Queued {
    let sem = Semaphore::new(s, dir, 2).unwrap();
    let waiting = tokio::spawn(async move { sem.acquire().await });
    wait_for_children(dir, members).await;
    waiting
}

type Queued = tokio::task::JoinHandle<zk_recipes::Result<zk_recipes::LockGuard>>;

/// The lease of a queued acquire granted within `within`; panics with `what` otherwise.
async fn granted_within(
    waiting: &mut Queued,
    within: Duration,
    what: &str,
) -> zk_recipes::LockGuard {
    tokio::time::timeout(within, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: not granted within {within:?}"))
        .unwrap()
        .unwrap_or_else(|err| panic!("{what}: {err}"))
}

/// Panics with `what` unless a queued acquire is still waiting 300 ms from now.
async fn still_waiting(waiting: &mut Queued, what: &str) {
    let r = tokio::time::timeout(Duration::from_millis(300), waiting).await;
    assert!(r.is_err(), "{what}");
}

/// permits = 2: A holds long, B briefly, C waits. When B releases, C gets the permit at once,
/// whichever of the holders leaves first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_reaches_the_head_waiter_in_any_release_order() {
    let dir = unique_root("sem-order");
    let (sa, sb, sc, sd) = (
        session().await,
        session().await,
        session().await,
        session().await,
    );
    let (a, b) = two_permit_holders(&dir, &sa, &sb).await;
    let mut c = queue_for_a_permit(&dir, &sc, 3).await;
    let mut d = queue_for_a_permit(&dir, &sd, 4).await;
    // The second holder (not the first) leaves: the head waiter C gets its permit.
    b.release().await.unwrap();
    let c = granted_within(
        &mut c,
        Duration::from_secs(2),
        "a free permit sat idle: C, after B's release",
    )
    .await;
    still_waiting(&mut d, "D was granted a third permit").await;
    // Now C (granted after waiting) leaves before A: D, now the head, gets it.
    c.release().await.unwrap();
    let d = granted_within(&mut d, Duration::from_secs(2), "D, after C's release").await;
    d.release().await.unwrap();
    a.release().await.unwrap();
    assert!(children(&dir).await.is_empty());
}

/// Which of C's requests the network holds up in
/// [`a_free_permit_reaches_the_waiter_behind_a_head_granted_without_waiting`].
#[derive(Debug, Clone, Copy)]
enum HeldUp {
    /// Its listing (request 2, after its create): D lists first, sees A, B and C below it,
    /// and watches C alone; A leaves; C's listing then shows one holder: granted at once.
    Listing,
    /// Its arming (request 4, after create, listing and the directory's read): C, the head,
    /// finds A gone when its watches are answered, lists again and is granted.
    Arming,
}

/// permits = 2. A and B hold; C queues; D queues behind C and, seeing more than 2 members
/// below it, watches C alone, to learn from the version bump of C's grant that it is the head
/// of the queue. C's request is held up (`HeldUp`) while A releases, so that C is granted
/// without ever waiting on a watch. When B then releases, one permit is free and D, the only
/// waiter, must get it. On the code before the fix C bumped only if it had waited on a watch:
/// D kept watching C at version 0 and the free permit sat idle until C released (found by a
/// review, 2026-11-27, for `Arming`; `Listing` fails the same way).
async fn a_free_permit_reaches_the_waiter_behind_a_head_granted_without_waiting(held: HeldUp) {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    use zk_recipes::LossPolicy;
    let dir = unique_root("sem-unbumped-head");
    let (sa, sb, sd) = (session().await, session().await, session().await);
    let (sc, proxy) =
        support::zk::session_via_proxy(Duration::from_secs(10), LossPolicy::Grace).await;
    let (a, b) = two_permit_holders(&dir, &sa, &sb).await;
    let k = match held {
        HeldUp::Listing => 2,
        HeldUp::Arming => 4,
    };
    proxy.arm(Fault::new(
        FaultPoint::BeforeRequest(k),
        FaultAction::Stall(Duration::from_millis(1500)),
    ));
    let mut c = queue_for_a_permit(&dir, &sc, 3).await;
    let mut d = queue_for_a_permit(&dir, &sd, 4).await;
    // D's watch on C is set within a round trip.
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.release().await.unwrap();
    let c = granted_within(
        &mut c,
        Duration::from_secs(5),
        &format!("{held:?}: C, after A's release"),
    )
    .await;
    still_waiting(&mut d, &format!("{held:?}: D was granted a third permit")).await;
    b.release().await.unwrap();
    // Only C holds now: one permit is free and D is the only waiter.
    let d = granted_within(
        &mut d,
        Duration::from_secs(3),
        &format!("{held:?}: a free permit sat idle: D, the only waiter, after B's release"),
    )
    .await;
    d.release().await.unwrap();
    c.release().await.unwrap();
    assert!(children(&dir).await.is_empty());
    for s in [sa, sb, sc, sd] {
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_reaches_the_waiter_behind_a_head_granted_from_a_late_listing() {
    a_free_permit_reaches_the_waiter_behind_a_head_granted_without_waiting(HeldUp::Listing).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_reaches_the_waiter_behind_a_head_granted_while_arming() {
    a_free_permit_reaches_the_waiter_behind_a_head_granted_without_waiting(HeldUp::Arming).await;
}

/// Given two holders of a 2-permit semaphore, a lock, a read lock, an election and a
/// semaphore with another count on the same path are refused with a typed error and leave
/// no node behind; the holders are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_path_one_kind() {
    let dir = unique_root("one-kind");
    let s = session().await;
    let sem = Semaphore::new(&s, &dir, 2).unwrap();
    let h1 = sem.acquire().await.unwrap();
    let h2 = sem.acquire().await.unwrap();
    let s2 = session().await;
    let refused = |what: &str, r: Error| match r {
        Error::PathInUse { path, found, .. } => {
            assert_eq!(path, dir, "{what}");
            assert!(found.contains("semaphore"), "{what}: found = {found}");
        }
        other => panic!("{what}: expected PathInUse, got {other:?}"),
    };
    let r = FairLock::new(&s2, &dir).unwrap().try_lock().await;
    refused(
        "fair lock",
        r.err().unwrap_or_else(|| panic!("a fair lock was granted")),
    );
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        FairLock::new(&s2, &dir).unwrap().lock(),
    )
    .await
    .expect("a fair lock waited instead of refusing");
    refused(
        "fair lock (waiting)",
        r.err().unwrap_or_else(|| panic!("granted")),
    );
    let r = RwLock::new(&s2, &dir).unwrap().read().await;
    refused(
        "read lock",
        r.err().unwrap_or_else(|| panic!("a read lock was granted")),
    );
    let r = Election::new(&s2, &dir, "x").unwrap().campaign().await;
    refused(
        "election",
        r.err().unwrap_or_else(|| panic!("leadership granted")),
    );
    let r = Semaphore::new(&s2, &dir, 3).unwrap().acquire().await;
    match r {
        Err(Error::PathInUse { found, ours, .. }) => {
            assert!(found.contains("2 permits"), "{found}");
            assert!(ours.contains("3 permits"), "{ours}");
        }
        other => panic!("a 3-permit semaphore beside 2-permit holders: {other:?}"),
    }
    assert_eq!(
        children(&dir).await.len(),
        2,
        "a refused contender left a node: {:?}",
        children(&dir).await
    );
    assert!(!h1.is_lost() && !h2.is_lost());
    // The same count is welcome. The count stays with the directory even when no lease is
    // held (never overwritten, so two contenders cannot each believe their own): another
    // count is refused until the path is removed.
    let h3 = Semaphore::new(&s2, &dir, 2).unwrap().try_acquire().await;
    assert!(matches!(h3, Err(Error::WouldBlock)), "{h3:?}");
    h1.release().await.unwrap();
    h2.release().await.unwrap();
    let h4 = Semaphore::new(&s2, &dir, 5).unwrap().try_acquire().await;
    assert!(matches!(h4, Err(Error::PathInUse { .. })), "{h4:?}");
    raw().await.delete(&dir, None).await.unwrap();
    let h5 = Semaphore::new(&s2, &dir, 5).unwrap().try_acquire().await;
    assert!(h5.is_ok(), "a new count on a removed path: {h5:?}");
    h5.unwrap().release().await.unwrap();
}

// ------------------------------------------------------- faults at a chosen request

use support::zk::session_via_proxy;
// `Request`: a kind of request a fault counts (`Fault::only`); `Op` is a guarded write's.
use zk_recipes::testing::{Fault, FaultAction, FaultPoint, Op as Request};
use zk_recipes::LossPolicy;

fn cut(point: FaultPoint) -> Fault {
    Fault::new(
        point,
        FaultAction::Cut {
            refuse_for: Duration::from_millis(20),
        },
    )
}

/// Given a simple lock whose create is cut by a 20 ms connection blip, either before the
/// server saw it or after it applied it, when the acquire returns a guard, then half a second
/// later the node is still the guard's own and the guard has not been told it lost anything
/// (before the fix: a background "check and delete if ours" deleted the node the retry won).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_lock_never_deletes_the_node_it_won_after_a_blip() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let root = unique_root("blip-simple");
    for (i, point) in [FaultPoint::BeforeRequest(1), FaultPoint::BeforeReply(1)]
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let path = format!("{root}/lock-{i}");
        let lock = ExclusiveLock::new(&s, &path).unwrap();
        // Parents first, so that the create is the first request after arming.
        lock.try_lock().await.unwrap().release().await.unwrap();
        proxy.arm(cut(point));
        let guard = tokio::time::timeout(Duration::from_secs(10), lock.lock())
            .await
            .unwrap_or_else(|_| panic!("try {i} ({point:?}): acquire hung"))
            .unwrap_or_else(|e| panic!("try {i} ({point:?}): {e}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stat = raw().await.check_stat(&path).await.unwrap();
        assert_eq!(
            stat.map(|st| st.czxid),
            Some(guard.fencing_token()),
            "try {i} ({point:?}): the guard's node is gone"
        );
        assert!(
            !guard.is_lost(),
            "try {i} ({point:?}): the holder was told {:?}",
            guard.loss_reason()
        );
        guard.release().await.unwrap();
    }
    s.close().await;
}

/// Given a holder whose own-node watch fails to arm (the connection drops right after the
/// grant, with the `exists` in flight), when an administrator later deletes its node, then
/// the holder is told (before the fix it waited only for the epoch to end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_own_watch_failed_to_arm_is_still_told() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let root = unique_root("own-watch");
    // The simple lock: create (1), then the holder's exists (2). The fair lock: create and
    // list (1, 2), then the holder's exists (3).
    for (what, k) in [("simple lock", 2), ("fair lock", 3)] {
        let path = format!("{root}/{}", what.replace(' ', "-"));
        // Make the parents first, so that the counts above hold.
        if what == "simple lock" {
            let l = ExclusiveLock::new(&s, &path).unwrap();
            l.try_lock().await.unwrap().release().await.unwrap();
            proxy.arm(cut(FaultPoint::BeforeReply(k)));
            let guard = l.lock().await.unwrap();
            deleted_is_told(what, &path, guard.lost(), || guard.loss_reason()).await;
        } else {
            let l = FairLock::new(&s, &path).unwrap();
            l.try_lock().await.unwrap().release().await.unwrap();
            proxy.arm(cut(FaultPoint::BeforeReply(k)));
            let guard = l.lock().await.unwrap();
            let node = guard.path().to_string();
            deleted_is_told(what, &node, guard.lost(), || guard.loss_reason()).await;
        }
    }
    s.close().await;
}

async fn deleted_is_told(
    what: &str,
    node: &str,
    lost: impl Future<Output = ()>,
    reason: impl Fn() -> Option<zk_recipes::LossReason>,
) {
    // Let the client reconnect, then delete the node as an administrator would.
    tokio::time::sleep(Duration::from_millis(500)).await;
    raw().await.delete(node, None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .unwrap_or_else(|_| panic!("{what}: holder not told within 3 s that its node was deleted"));
    assert_eq!(
        reason(),
        Some(zk_recipes::LossReason::NodeDeleted),
        "{what}"
    );
}

/// Given a waiter cancelled from outside (its future dropped by a timeout), when the
/// background delete of its node is lost in a connection blip, then it is retried: the node
/// does not stay to block the queue while the session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_waiters_node_is_deleted_even_after_a_failed_delete() {
    let dir = unique_root("orphan-retry");
    let holder_session = session().await;
    let holder = FairLock::new(&holder_session, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let lock = FairLock::new(&s, &dir).unwrap();
    // The waiter sends create, list, exists(holder), exists(own): 4 requests; the cleanup's
    // delete is the 5th, and it is dropped with the connection.
    proxy.arm(cut(FaultPoint::BeforeRequest(5)));
    let r = tokio::time::timeout(Duration::from_millis(400), lock.lock()).await;
    assert!(r.is_err(), "the waiter was granted: {r:?}");
    let mut left = Vec::new();
    for _ in 0..100 {
        left = children(&dir).await;
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        left.len(),
        1,
        "the abandoned waiter's node is still there 5 s later: {left:?} (proxy: {:?})",
        proxy.fault_status()
    );
    holder.release().await.unwrap();
    s.close().await;
}

/// Given a fair lock whose create is answered only after the loss policy has given up on the
/// epoch (here: the epoch is ended while the reply is held back), when the acquire returns,
/// then it returns a live guard from a new session, never one lost at birth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_the_epoch_ended_requeues() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let dir = unique_root("late-grant");
    let lock = FairLock::new(&s, &dir).unwrap();
    lock.try_lock().await.unwrap().release().await.unwrap();
    let first_session = s.session_id().unwrap();
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Stall(Duration::from_millis(400)),
    ));
    let acquiring = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.force_epoch_end();
    let guard = tokio::time::timeout(Duration::from_secs(10), acquiring)
        .await
        .expect("acquire hung")
        .unwrap()
        .expect("acquire");
    assert!(
        !guard.is_lost(),
        "the guard was lost at birth ({:?})",
        guard.loss_reason()
    );
    assert_ne!(
        guard.session_id(),
        first_session,
        "granted in the ended epoch"
    );
    guard.release().await.unwrap();
    s.close().await;
}

/// Given a simple-lock holder whose release is held up in the network (its reply stalled half
/// a second), when meanwhile an administrator deletes its node and another session takes the
/// lock, then the late release does not delete the new holder's node (before the fix it read
/// the node, saw it still its own in the stale answer, and deleted the newcomer's node, which
/// is also at version 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_simple_lock_release_never_deletes_the_next_holders_node() {
    late_release_leaves_the_next_holder_alone("late-release", FaultPoint::BeforeReply(1), false)
        .await;
}

/// The same with the release's request held up on its way to the server (seed 1812 of the
/// model): a delete sent blind, at version 0, would land on the newcomer's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_lock_release_delayed_on_its_way_never_deletes_the_next_holders_node() {
    late_release_leaves_the_next_holder_alone(
        "delayed-release",
        FaultPoint::BeforeRequest(1),
        false,
    )
    .await;
}

/// The same with the next holder on the holder's own session (seed 1067 of the model, found
/// by CI): the release read the node (its answer held up in the network), an administrator
/// deleted it, another handle of the same session made it again, and the release's set +
/// delete at version 0 then passed the node's ACL (same session) and removed the newcomer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_simple_lock_release_never_deletes_a_node_of_its_own_session() {
    late_release_leaves_the_next_holder_alone(
        "late-release-same-session",
        FaultPoint::BeforeReply(1),
        true,
    )
    .await;
}

/// A simple-lock holder releases while `point` (its read's request or reply) is stalled 600
/// ms; meanwhile an administrator deletes its node and the next holder (on the holder's own
/// session, or another) takes the lock. The next holder's node must survive the late release.
///
/// The fault counts `exists` requests only: the release's read is the first, and the guard's
/// own-node watch (a listing), sent by its monitor task in the background after the grant,
/// cannot take it.
async fn late_release_leaves_the_next_holder_alone(name: &str, point: FaultPoint, same: bool) {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let path = format!("{}/simple", unique_root(name));
    let guard = ExclusiveLock::new(&s, &path).unwrap().lock().await.unwrap();
    let first = guard.fencing_token();
    proxy.arm(
        Fault::new(point, FaultAction::Stall(Duration::from_millis(600))).only(Request::Exists),
    );
    let releasing = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The administrator deletes the holder's node (if still there), and the next holder
    // takes the lock at once.
    let admin = raw().await;
    let _ = admin.delete(&path, None).await;
    let next_session = if same { &s } else { &other };
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        ExclusiveLock::new(next_session, &path).unwrap().lock(),
    )
    .await
    .expect("the next holder waited")
    .unwrap();
    assert_ne!(next.fencing_token(), first, "granted the deleted node");
    let _ = tokio::time::timeout(Duration::from_secs(10), releasing).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stat = admin.check_stat(&path).await.unwrap();
    assert_eq!(
        stat.map(|st| st.czxid),
        Some(next.fencing_token()),
        "the next holder's node was deleted by the late release"
    );
    assert!(!next.is_lost(), "next holder told {:?}", next.loss_reason());
    next.release().await.unwrap();
    s.close().await;
    other.close().await;
}

/// Given a simple-lock holder whose `release()` is cancelled half-way (a timeout drops the
/// future while the release's read is held up in the network), then the release still runs
/// to its end: the node goes, and another session takes the lock (before the fix the
/// guard counted as released, nothing deleted the node, and the lock stayed held until the
/// session ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_release_still_releases() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let path = format!("{}/simple", unique_root("cancelled-release"));
    let guard = ExclusiveLock::new(&s, &path).unwrap().lock().await.unwrap();
    // The release's read (`exists`), not the guard's own-node watch sent in the background.
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeReply(1),
            FaultAction::Stall(Duration::from_millis(600)),
        )
        .only(Request::Exists),
    );
    let cancelled = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(
        cancelled.is_err(),
        "the release was not held up: {cancelled:?}"
    );
    let next = tokio::time::timeout(
        Duration::from_secs(3),
        ExclusiveLock::new(&other, &path).unwrap().lock(),
    )
    .await
    .expect("the lock stayed held after a cancelled release")
    .unwrap();
    next.release().await.unwrap();
    s.close().await;
    other.close().await;
}

/// Given a simple-lock holder cut off from the server, when it releases (its request waits in
/// the client for the reconnect) while an administrator deletes its node and another session
/// takes the lock, then the release, sent after the reconnect, leaves the new holder's node
/// alone (before the fix the queued blind delete at version 0 removed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_queued_behind_a_reconnect_never_deletes_the_next_holders_node() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let path = format!("{}/simple", unique_root("queued-release"));
    let guard = ExclusiveLock::new(&s, &path).unwrap().lock().await.unwrap();
    proxy.set_blocked(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let releasing = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let admin = raw().await;
    admin.delete(&path, None).await.unwrap();
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        ExclusiveLock::new(&other, &path).unwrap().lock(),
    )
    .await
    .expect("the next holder waited")
    .unwrap();
    proxy.set_blocked(false);
    let released = tokio::time::timeout(Duration::from_secs(10), releasing)
        .await
        .expect("the release hung")
        .unwrap();
    assert!(
        released.is_err(),
        "the release claims it released: {released:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stat = admin.check_stat(&path).await.unwrap();
    assert_eq!(
        stat.map(|st| st.czxid),
        Some(next.fencing_token()),
        "the next holder's node was deleted by the queued release"
    );
    assert!(!next.is_lost(), "next holder told {:?}", next.loss_reason());
    next.release().await.unwrap();
    s.close().await;
    other.close().await;
}

// ---------------------------------------------------------------------------------------------
// Guarded writes: a holder that lost the lock can never write state kept in ZooKeeper
// ---------------------------------------------------------------------------------------------

use zk_recipes::Op;

/// Given a holder whose guarded write is held up in the network after it left (a stall of its
/// transaction), when meanwhile an administrator deletes its node and another session takes
/// the lock, then ZooKeeper refuses the late write: `LockLost`, and the value is unchanged.
/// `take` acquires the lock on a session and path.
///
/// The fault counts transactions only: the write's is the first (a simple lock reads its node
/// before it), and the guard's own-node watch, sent by its monitor task in the background
/// after the grant, cannot take it.
async fn a_late_guarded_write_is_refused<L, F>(name: &str, take: L)
where
    L: Fn(zk_recipes::Session, String) -> F,
    F: Future<Output = zk_recipes::LockGuard>,
{
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let root = unique_root(name);
    let lock_path = format!("{root}/lock");
    let value = format!("{root}/value");
    let guard = take(s.clone(), lock_path.clone()).await;
    guard
        .guarded([Op::create(&value, "0")])
        .await
        .expect("a write while holding");
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Stall(Duration::from_millis(1500)),
        )
        .only(Request::Multi),
    );
    let writing = guard.guarded([Op::set_data(&value, "stale", None)]);
    let admin = raw().await;
    let usurp = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The administrator deletes the holder's node, and another session takes the lock.
        let node = guard.path().to_string();
        admin
            .delete(&node, None)
            .await
            .expect("delete the holder's node");
        tokio::time::timeout(
            Duration::from_secs(5),
            take(other.clone(), lock_path.clone()),
        )
        .await
        .expect("the next holder waited")
    };
    let (written, next) = tokio::join!(writing, usurp);
    assert!(
        matches!(written, Err(Error::LockLost(_))),
        "the late write of a holder whose node was deleted returned {written:?}"
    );
    let (data, _) = admin.get_data(&value).await.unwrap();
    assert_eq!(data, b"0", "the deposed holder's write was applied");
    next.guarded([Op::set_data(&value, "1", None)])
        .await
        .expect("the new holder writes");
    drop(next);
    s.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_guarded_write_of_a_fair_lock_holder_is_refused() {
    a_late_guarded_write_is_refused("guarded-fair", |s, path| async move {
        FairLock::new(&s, &path).unwrap().lock().await.unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_guarded_write_of_a_simple_lock_holder_is_refused() {
    // The simple lock reads its node before its transaction. The newcomer's node is at the
    // same path and version: only the ACL tells it apart.
    a_late_guarded_write_is_refused("guarded-simple", |s, path| async move {
        ExclusiveLock::new(&s, &path).unwrap().lock().await.unwrap()
    })
    .await;
}

/// Given a holder, when one of its guarded operations fails, then the error names that
/// operation and nothing of the transaction is applied; after an expiry every write is
/// refused with `LockLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_are_all_or_nothing_and_end_with_the_lock() {
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let root = unique_root("guarded-txn");
    let lock = FairLock::new(&s, format!("{root}/lock")).unwrap();
    let guard = lock.lock().await.unwrap();
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let r = guard
        .guarded([Op::create(&a, "x"), Op::set_data(&b, "y", Some(3))])
        .await;
    assert!(
        matches!(&r, Err(Error::TransactionFailed { index: 1, path, source: zk::Error::NoNode }) if *path == b),
        "expected the second operation to fail with NoNode, got {r:?}"
    );
    assert!(
        s.read(&a).await.unwrap().is_none(),
        "a failed transaction created {a}"
    );
    let r = guard
        .guarded([Op::create(&a, "x"), Op::create(&b, "y")])
        .await;
    assert_eq!(r.expect("both writes").len(), 2, "one result per operation");
    let r = guard.guarded([Op::set_data("bad//path", "x", None)]).await;
    assert!(matches!(r, Err(Error::InvalidPath { .. })), "{r:?}");
    proxy.expire(&s).await.expect("expire");
    let r = guard
        .guarded([Op::set_data(&a, "after expiry", None)])
        .await;
    assert!(
        matches!(r, Err(Error::LockLost(_))),
        "a write after expiry returned {r:?}"
    );
    assert_eq!(s.read(&a).await.unwrap().unwrap().0, b"x");
    s.close().await;
}

/// What a holder may ask `guarded` to write on its own node, in
/// [`a_guarded_write_never_writes_a_contender_node`].
enum OwnNodeWrite {
    SetData,
    /// A create at a sibling named as our contenders are: it would pass for one of ours.
    CreateLookalike,
}

/// A holder of each recipe whose guard offers `guarded`.
enum Held {
    Fair(zk_recipes::LockGuard),
    Writer(zk_recipes::WriteGuard),
    Leader(zk_recipes::Leadership),
    Multi(zk_recipes::MultiGuard),
}

impl Held {
    /// The path of the held node in `dir`.
    fn own(&self, dir: &str) -> String {
        let inside = format!("{dir}/");
        let paths: Vec<String> = match self {
            Held::Fair(g) => vec![g.path().to_string()],
            Held::Writer(g) => vec![g.path().to_string()],
            Held::Leader(g) => vec![g.path().to_string()],
            Held::Multi(m) => m.guards().iter().map(|g| g.path().to_string()).collect(),
        };
        paths
            .into_iter()
            .find(|p| p.starts_with(&inside))
            .expect("a guard of the lock under test")
    }

    async fn guarded(&self, ops: Vec<zk_recipes::Op>) -> zk_recipes::Result<()> {
        match self {
            Held::Fair(g) => g.guarded(ops).await.map(drop),
            Held::Writer(g) => g.guarded(ops).await.map(drop),
            Held::Leader(g) => g.guarded(ops).await.map(drop),
            Held::Multi(m) => m.guarded(ops).await.map(drop),
        }
    }
}

/// Given a holder (fair lock, writer, leader, multi-lock) and a waiter of another session
/// queued behind it, when the holder asks `guarded` to write its own node's data (say, its
/// progress or its address) or to create a node named as ours beside it, then nothing is
/// sent: the waiter is still waiting a second later, the node's data is unchanged, no node is
/// created, and the call answers `InvalidArgument`. On the code before the fix the write was
/// applied, and the waiter took the data change for the release mark and held beside the
/// holder (found by a review, 2026-11-27). When the holder then releases, the waiter gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_never_writes_a_contender_node() {
    use zk_recipes::{MultiLock, Op};
    for how in [OwnNodeWrite::SetData, OwnNodeWrite::CreateLookalike] {
        for recipe in ["fair lock", "writer", "leader", "multi-lock"] {
            let root = unique_root("guarded-own-node");
            let dir = format!("{root}/lock");
            let (s1, s2) = (session().await, session().await);
            let held = match recipe {
                "fair lock" => Held::Fair(FairLock::new(&s1, &dir).unwrap().lock().await.unwrap()),
                "writer" => Held::Writer(RwLock::new(&s1, &dir).unwrap().write().await.unwrap()),
                "leader" => Held::Leader(
                    Election::new(&s1, &dir, "one")
                        .unwrap()
                        .campaign()
                        .await
                        .unwrap(),
                ),
                _ => Held::Multi(
                    MultiLock::new(&s1, [format!("{root}/other"), dir.clone()])
                        .unwrap()
                        .lock()
                        .await
                        .unwrap(),
                ),
            };
            let own = held.own(&dir);
            let mut waiting = match recipe {
                "leader" => {
                    let e = Election::new(&s2, &dir, "two").unwrap();
                    tokio::spawn(async move { e.campaign().await.map(drop) })
                }
                "writer" => {
                    let l = RwLock::new(&s2, &dir).unwrap();
                    tokio::spawn(async move { l.read().await.map(drop) })
                }
                _ => {
                    let l = FairLock::new(&s2, &dir).unwrap();
                    tokio::spawn(async move { l.lock().await.map(drop) })
                }
            };
            wait_for_children(&dir, 2).await;
            // The waiter's watch on the holder's node is set within a round trip.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let admin = raw().await;
            let (before, _) = admin.get_data(&own).await.unwrap();
            let op = match how {
                OwnNodeWrite::SetData => Op::set_data(own.clone(), "progress: 50%", None),
                OwnNodeWrite::CreateLookalike => {
                    let name = own.rsplit('/').next().unwrap();
                    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
                    Op::create(format!("{dir}/{stem}9999999999"), "x")
                }
            };
            let wrote = held.guarded(vec![op]).await;
            let early = tokio::time::timeout(Duration::from_secs(1), &mut waiting).await;
            assert!(
                early.is_err(),
                "{recipe}: the waiter was granted while the holder's node {own} still exists \
                 (the guarded write answered {wrote:?})"
            );
            let (after, _) = admin.get_data(&own).await.unwrap();
            assert_eq!(
                before, after,
                "{recipe}: the holder's node data was written"
            );
            assert_eq!(
                children(&dir).await.len(),
                2,
                "{recipe}: a node was created beside the contenders"
            );
            assert!(
                matches!(wrote, Err(Error::InvalidArgument(_))),
                "{recipe}: a guarded write to a contender node answered {wrote:?}, not InvalidArgument"
            );
            drop(held);
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .unwrap_or_else(|_| panic!("{recipe}: the waiter not granted after the release"))
                .unwrap()
                .unwrap();
            s1.close().await;
            s2.close().await;
        }
    }
}

/// `revoke(path, node)` takes `node` as a child name of `path`. A name with a `/` in it
/// parsed as a contender name (a marker and trailing digits) and was joined to the path, so the
/// request reached a node of another lock: here a Curator node of `<root>/sub` got
/// `__REVOKE__` written into it (found by a review, 2026-11-27). It must be refused with
/// `InvalidArgument`, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_refuses_a_node_name_with_a_slash() {
    let root = unique_root("revoke-slash");
    let admin = raw().await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.create(&root, b"", &open).await.unwrap();
    admin
        .create(&format!("{root}/sub"), b"", &open)
        .await
        .unwrap();
    let name = "_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-lock-0000000000";
    let other = format!("{root}/sub/{name}");
    admin.create(&other, b"peer", &open).await.unwrap();
    let s = session().await;
    let r = zk_recipes::revoke(&s, &root, &format!("sub/{name}")).await;
    let (data, _) = admin.get_data(&other).await.unwrap();
    s.close().await;
    assert_eq!(data, b"peer", "{other} was written: {r:?}");
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "a node name with '/' answered {r:?}"
    );
}

/// The revocation requests (`revoke-…`) in `dir`.
async fn revocation_requests(dir: &str) -> Vec<String> {
    children(dir)
        .await
        .into_iter()
        .filter(|c| c.starts_with("revoke-"))
        .collect()
}

/// Waits up to 3 s for `dir` to hold no revocation request; answers what is left.
async fn requests_left_after_settling(dir: &str) -> Vec<String> {
    let mut left = revocation_requests(dir).await;
    for _ in 0..60 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = revocation_requests(dir).await;
    }
    left
}

/// Given a revocable holder with a waiter behind it, when a revoker's request is on its way
/// (the revoker's `exists` answered, its create held up 800 ms in the network) and the holder
/// releases meanwhile, then `revoke` answers `NoNode` and no request is left in the lock's
/// directory. Before the fix the request was made after the holder had gone, `revoke`
/// answered `Requested`, and the node stayed for as long as the revoker's session lived
/// (found by a review, 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_that_races_the_release_leaves_no_request_behind() {
    let dir = unique_root("revoke-race");
    let (holder_s, waiter_s) = (session().await, session().await);
    let (revoker_s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let guard = FairLock::new(&holder_s, &dir)
        .unwrap()
        .with_revocable(true)
        .lock()
        .await
        .unwrap();
    let node = guard.path().rsplit('/').next().unwrap().to_string();
    let waiter = FairLock::new(&waiter_s, &dir).unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    wait_for_children(&dir, 2).await;
    // revoke(): the `exists` of the holder's node (request 1), then the request's create (2).
    proxy.arm(Fault::new(
        FaultPoint::BeforeRequest(2),
        FaultAction::Stall(Duration::from_millis(800)),
    ));
    let asked = tokio::spawn({
        let (s, dir, node) = (revoker_s.clone(), dir.clone(), node.clone());
        async move { zk_recipes::revoke(&s, &dir, &node).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .unwrap();
    let asked = tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .expect("revoke() answers")
        .unwrap();
    let left = requests_left_after_settling(&dir).await;
    next.release().await.unwrap();
    holder_s.close().await;
    waiter_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the holder of {node} released, yet the revocation request {left:?} stays in {dir} \
         (revoke answered {asked:?})"
    );
    assert!(
        matches!(
            &asked,
            Err(Error::ZooKeeper {
                source: zk::Error::NoNode,
                ..
            })
        ),
        "a request to a holder gone before it was made answered {asked:?}, not NoNode"
    );
}

/// Given a holder made without `with_revocable` (it never watches for a request), when
/// `revoke_holders` asks it and it then releases, then the request goes with it. Before the
/// fix nothing deleted it: it stayed as long as the revoker's session (found by a review,
/// 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_holder_that_is_not_revocable_goes_with_the_holder() {
    let dir = unique_root("revoke-plain");
    let (holder_s, revoker_s) = (session().await, session().await);
    let guard = FairLock::new(&holder_s, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let asked = zk_recipes::revoke_holders(&revoker_s, &dir).await.unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        revocation_requests(&dir).await.len(),
        1,
        "the request was made"
    );
    guard.release().await.unwrap();
    let left = requests_left_after_settling(&dir).await;
    holder_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the holder released, yet the request {left:?} stays in {dir} ({asked:?})"
    );
}

/// Given a waiter asked to let go (`revoke` takes any contender's node), when its
/// `lock_timeout` gives up, then no request is left behind (found by a review, 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_waiter_that_gives_up_goes_with_the_waiter() {
    let dir = unique_root("revoke-waiter");
    let (holder_s, waiter_s, revoker_s) = (session().await, session().await, session().await);
    let guard = FairLock::new(&holder_s, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let waiter = FairLock::new(&waiter_s, &dir).unwrap().with_revocable(true);
    let waiting =
        tokio::spawn(async move { waiter.lock_timeout(Duration::from_millis(1500)).await });
    let mut names = wait_for_children(&dir, 2).await;
    names.sort_by_key(|n| zk_recipes::NodeName::parse(n).and_then(|n| n.sequence));
    let asked = zk_recipes::revoke(&revoker_s, &dir, &names[1])
        .await
        .unwrap();
    let r = waiting.await.unwrap();
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    let left = requests_left_after_settling(&dir).await;
    guard.release().await.unwrap();
    holder_s.close().await;
    waiter_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the waiter gave up, yet the request {left:?} stays in {dir} ({asked:?})"
    );
}

// Found by a review of the fix above (2026-11-27, reviewer C): the withdrawal was started only
// on a made request's answer, and its delete was tried once. Each failed before.

/// A fair lock held on a new directory by one session, its node's name, and a revoker's
/// session behind a proxy (`OnExpiry`, 10 s).
async fn held_and_a_proxied_revoker(
    name: &str,
) -> (
    String,
    zk_recipes::Session,
    zk_recipes::LockGuard,
    String,
    zk_recipes::Session,
    zk_recipes::testing::FaultProxy,
) {
    let dir = unique_root(name);
    let holder_s = session().await;
    let (revoker_s, proxy) = session_via_proxy(Duration::from_secs(10), LossPolicy::OnExpiry).await;
    let guard = FairLock::new(&holder_s, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let node = guard.path().rsplit('/').next().unwrap().to_string();
    (dir, holder_s, guard, node, revoker_s, proxy)
}

/// Given a holder not made revocable and a revoker whose request's answer is lost with the
/// connection (the server made the request; the revoker's session lives on), when the
/// revoker tries again (`NodeExists`: `Requested`) and the holder then releases, then the
/// request goes with the holder's node, as it does when the first answer arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_answer_was_lost_goes_with_the_holder() {
    let (dir, holder_s, guard, node, revoker_s, proxy) =
        held_and_a_proxied_revoker("revoke-lost-answer").await;
    // revoke(): the `exists` of the holder's node (request 1), then the request's multi (2),
    // whose reply is lost with the connection; the client reconnects at once.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Cut {
            refuse_for: Duration::ZERO,
        },
    ));
    let first = zk_recipes::revoke(&revoker_s, &dir, &node).await;
    assert_eq!(
        revocation_requests(&dir).await.len(),
        1,
        "the request was made ({first:?})"
    );
    // A caller told "outcome unknown" asks again.
    let again = zk_recipes::revoke(&revoker_s, &dir, &node).await;
    guard.release().await.unwrap();
    let left = requests_left_after_settling(&dir).await;
    holder_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the holder {node} released, yet the request {left:?} stays in {dir} for as long as \
         the revoker's session (revoke answered {first:?}, then {again:?})"
    );
}

/// Given a holder not made revocable, when a revoker's `revoke()` future is dropped after its
/// request went out (a caller's timeout; the docs say the request "may or may not have been
/// made") and the holder then releases, then the request goes with the holder's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_a_dropped_revoke_goes_with_the_holder() {
    let (dir, holder_s, guard, node, revoker_s, proxy) =
        held_and_a_proxied_revoker("revoke-dropped").await;
    // The multi's reply is held 1 s: the caller's 300 ms timeout drops the future first.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Stall(Duration::from_millis(1000)),
    ));
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        zk_recipes::revoke(&revoker_s, &dir, &node),
    )
    .await;
    assert!(r.is_err(), "revoke answered before the timeout: {r:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        revocation_requests(&dir).await.len(),
        1,
        "the request was made"
    );
    guard.release().await.unwrap();
    let left = requests_left_after_settling(&dir).await;
    holder_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the holder {node} released, yet the request {left:?} of a dropped revoke() stays in \
         {dir} for as long as the revoker's session"
    );
}

/// Given a holder not made revocable and a revoker that asked it, when the holder releases
/// and the revoker's delete of its request meets a connection blip (the revoker's session
/// lives on), then the request still goes with the holder's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_that_meets_a_blip_still_withdraws() {
    let (dir, holder_s, guard, node, revoker_s, proxy) =
        held_and_a_proxied_revoker("revoke-withdraw-blip").await;
    let asked = zk_recipes::revoke(&revoker_s, &dir, &node).await.unwrap();
    // The revoker's background task watches the holder's node (`exists`), arms it again after
    // the release mark (NodeDataChanged; it finds the node gone), then deletes its request:
    // that delete is cut before it reaches the server. The fault counts deletes only, so it
    // strikes the withdrawal whether or not the first watch went out before the release.
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Cut {
                refuse_for: Duration::from_millis(50),
            },
        )
        .only(Request::Delete),
    );
    guard.release().await.unwrap();
    let left = requests_left_after_settling(&dir).await;
    let status = proxy.fault_status();
    eprintln!("fault {status:?}, left {left:?}");
    holder_s.close().await;
    revoker_s.close().await;
    assert!(
        left.is_empty(),
        "the holder {node} released, yet the request {left:?} stays in {dir} for as long as \
         the revoker's session ({asked:?}; fault {status:?})"
    );
}

/// Given a simple-lock waiter queued behind another client's node, when an administrator
/// deletes the lock's whole tree six times while it waits, each time letting its create meet
/// the missing directory and making the tree and a holder's node again before its next create
/// (the waiter's requests held up 600 ms in the network meanwhile), then the waiter is still
/// waiting, and it gets the lock once the holder goes. Before the fix its `lock()` answered
/// `NoNode` at the sixth deletion: the directories it made again were counted over the whole
/// wait, not since the last time its create found the tree standing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_lock_waiter_outlives_its_tree_deleted_many_times() {
    use zk_recipes::testing::FaultStatus;
    let root = unique_root("tree-deleted");
    let dir = format!("{root}/d");
    let path = format!("{dir}/lock");
    let admin = raw().await;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    admin.create(&root, b"", &persistent).await.unwrap();
    admin.create(&dir, b"", &persistent).await.unwrap();
    admin.create(&path, b"", &ephemeral).await.unwrap();
    let (s, proxy) = session_via_proxy(Duration::from_secs(10), LossPolicy::OnExpiry).await;
    let lock = ExclusiveLock::new(&s, &path).unwrap();
    let mut waiting = tokio::spawn(async move { lock.lock().await });
    // Waits until the waiter sent `n` requests through the proxy since `from`: its create
    // (NodeExists), then its `exists` watch; after a deletion its create (NoNode), the look for
    // the missing directories, its create again (NodeExists) and its watch.
    let sent = |from: u64, n: u64| {
        let proxy = &proxy;
        async move {
            for _ in 0..500 {
                if proxy.requests_forwarded() >= from + n {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    };
    assert!(sent(0, 2).await, "the waiter did not queue");
    for round in 1..=6 {
        // Its watch is set on the server before the holder's node goes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let base = proxy.requests_forwarded();
        proxy.arm(Fault::new(
            FaultPoint::AfterReply(1),
            FaultAction::Stall(Duration::from_millis(600)),
        ));
        let mut deletion = admin.new_multi_writer();
        deletion.add_delete(&path, None).unwrap();
        deletion.add_delete(&dir, None).unwrap();
        deletion.commit().await.unwrap();
        // The waiter's create meets the missing directory; its next requests are held.
        for _ in 0..500 {
            if matches!(proxy.fault_status(), FaultStatus::Fired { .. }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            matches!(proxy.fault_status(), FaultStatus::Fired { .. }),
            "round {round}: the waiter sent no create after its tree was deleted"
        );
        admin.create(&dir, b"", &persistent).await.unwrap();
        admin.create(&path, b"", &ephemeral).await.unwrap();
        let queued_again = sent(base, 4).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "round {round}: the waiter gave up: {:?}",
            (&mut waiting).await.unwrap().map(|g| g.path().to_string())
        );
        assert!(
            queued_again,
            "round {round}: the waiter did not queue again"
        );
    }
    admin.delete(&path, None).await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was not granted within 5 s of the holder's going")
        .unwrap()
        .expect("the waiter's lock() failed");
    granted.release().await.unwrap();
    s.close().await;
}

// Regression tests kept from a review of 2026-11-27 (reviewer B): both passed when written; they
// pin that cancelled multi-lock acquires and semaphore waiters timing out as permits free leave
// nothing behind and never exceed the permits.
use support::rng::{seed_from_env, Rng};
use zk_recipes::MultiLock;

/// The nodes under `dirs` owned by `session_id`.
async fn owned_by(admin: &zk::Client, dirs: &[String], session_id: i64) -> Vec<String> {
    let mut out = Vec::new();
    for d in dirs {
        let Ok(children) = admin.list_children(d).await else {
            continue;
        };
        for c in children {
            let p = format!("{d}/{c}");
            if let Ok(Some(st)) = admin.check_stat(&p).await {
                if st.ephemeral_owner == session_id {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Given a multi-lock over three paths that another session keeps taking and letting go,
/// when its acquires are cancelled at seeded random moments (and its connection stalls now
/// and then), its grants released or dropped at random, then afterwards nothing of its
/// session is left in any directory and every path is free for another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_multi_lock_leaves_nothing() {
    let seed = seed_from_env("ZKR_SAFETY_SEED");
    eprintln!("seed {seed} (ZKR_SAFETY_SEED={seed} replays)");
    let mut rng = Rng::new(seed);
    let root = unique_root("multi-cancel");
    let dirs: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|x| format!("{root}/{x}"))
        .collect();
    let (s1, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let s2 = session().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The other session: takes one path at a time for a short while.
    let other = tokio::spawn({
        let (s2, dirs, stop) = (s2.clone(), dirs.clone(), stop.clone());
        let mut rng = Rng::new(seed ^ 0x5eed);
        async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let d = &dirs[rng.below(3) as usize];
                if let Ok(Ok(g)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    FairLock::new(&s2, d).unwrap().lock(),
                )
                .await
                {
                    tokio::time::sleep(rng.ms(0, 40)).await;
                    if rng.one_in(2) {
                        drop(g);
                    } else {
                        let _ = g.release().await;
                    }
                }
                tokio::time::sleep(rng.ms(0, 30)).await;
            }
        }
    });
    let multi = MultiLock::new(&s1, &dirs).unwrap();
    let mut grants = 0;
    let started = Instant::now();
    for i in 0..60 {
        if rng.one_in(5) {
            let k = rng.range(1, 8) as u32;
            let point = if rng.one_in(2) {
                FaultPoint::BeforeRequest(k)
            } else {
                FaultPoint::BeforeReply(k)
            };
            proxy.arm(Fault::new(point, FaultAction::Stall(rng.ms(5, 80))));
        }
        let cancel = rng.ms(0, 60);
        let how = rng.below(3);
        let got = match how {
            0 => tokio::time::timeout(cancel, multi.lock()).await.ok(),
            1 => Some(multi.try_lock().await),
            _ => tokio::time::timeout(cancel, multi.lock_timeout(rng.ms(1, 80)))
                .await
                .ok(),
        };
        if let Some(Ok(g)) = got {
            grants += 1;
            tokio::time::sleep(rng.ms(0, 20)).await;
            if rng.one_in(2) {
                drop(g);
            } else {
                let _ = g.release().await;
            }
        }
        if i % 20 == 19 {
            eprintln!("{i}: {grants} grants, {:?}", started.elapsed());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = tokio::time::timeout(Duration::from_secs(5), other).await;
    proxy.disarm();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let admin = raw().await;
    let sid = s1.session_id().expect("s1 connected");
    let left = owned_by(&admin, &dirs, sid).await;
    let mut busy = Vec::new();
    for d in &dirs {
        match FairLock::new(&s2, d).unwrap().try_lock().await {
            Ok(g) => g.release().await.unwrap(),
            Err(e) => busy.push(format!("{d}: {e}")),
        }
    }
    s1.close().await;
    s2.close().await;
    assert!(
        left.is_empty() && busy.is_empty(),
        "seed {seed}: after {grants} grants, left behind by the multi-lock's session: {left:?}; \
         paths not free: {busy:?}"
    );
}

/// Given a semaphore of 2 with 2 holders and 3 waiters on `acquire_timeout`, whose deadlines
/// fall at the moment both holders release, then within a second either a waiter holds or
/// none waits any more, and nothing of a timed-out waiter is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_timing_out_as_permits_free_leave_nothing() {
    let seed = seed_from_env("ZKR_SAFETY_SEED");
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let dir = unique_root("sem-deadline");
    let s = session().await;
    let s2 = session().await;
    for round in 0..8 {
        let a = Semaphore::new(&s, &dir, 2).unwrap();
        let h1 = a.acquire().await.unwrap();
        let h2 = a.acquire().await.unwrap();
        let b = Semaphore::new(&s2, &dir, 2).unwrap();
        let t = Duration::from_millis(400);
        let mut ws = Vec::new();
        for _ in 0..3 {
            let b = b.clone();
            ws.push(tokio::spawn(async move { b.acquire_timeout(t).await }));
        }
        support::zk::wait_for_children(&dir, 5, "queued").await;
        tokio::time::sleep(Duration::from_millis(380 - 40 + rng.below(80))).await;
        if rng.one_in(2) {
            drop(h1);
            let _ = h2.release().await;
        } else {
            let _ = h1.release().await;
            drop(h2);
        }
        let mut held = Vec::new();
        for w in ws {
            if let Ok(g) = w.await.unwrap() {
                held.push(g);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let left = support::zk::children(&dir).await.len();
        assert!(held.len() <= 2, "round {round}: {} holders", held.len());
        assert_eq!(
            left,
            held.len(),
            "round {round}, seed {seed}: {} nodes in the directory, {} holders",
            left,
            held.len()
        );
        for g in held {
            g.release().await.unwrap();
        }
    }
    s.close().await;
    s2.close().await;
}

// Found by a review of 2026-11-27 (reviewer D): every revoke() call started a withdrawal task
// and its watch, even when the request was there already. The first test failed before; the
// second (the tasks end with the revoker's session) passed, kept as a pin.

/// Given a fair-lock holder that was not made revocable, when a revoker calls `revoke` on it
/// again and again (a revoker that asks until the holder lets go: every call after the first
/// answers `Requested` from `NodeExists`), then the revoker's session does not accumulate a
/// withdrawal task (and an `exists` watch) per call: one per request made is the documented
/// cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_revokes_of_one_holder_do_not_pile_up_withdrawal_tasks() {
    let dir = unique_root("revoke-pile");
    let (holder_s, revoker_s) = (support::zk::session().await, support::zk::session().await);
    let guard = zk_recipes::FairLock::new(&holder_s, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let node = guard.path().rsplit('/').next().unwrap().to_string();
    let metrics = tokio::runtime::Handle::current().metrics();
    zk_recipes::revoke(&revoker_s, &dir, &node).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = metrics.num_alive_tasks();
    for _ in 0..200 {
        let r = zk_recipes::revoke(&revoker_s, &dir, &node).await.unwrap();
        assert!(
            matches!(r, zk_recipes::Revocation::Requested { .. }),
            "{r:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = metrics.num_alive_tasks();
    eprintln!("alive tasks: {before} after the first revoke, {after} after 200 more");
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = metrics.num_alive_tasks();
    eprintln!("alive tasks once the holder released: {settled}");
    holder_s.close().await;
    revoker_s.close().await;
    assert!(
        after < before + 20,
        "200 more revoke() calls on one holder left {} more tasks alive in the revoker's \
         session ({before} -> {after}), each with an exists watch on the holder's node",
        after - before
    );
}

/// Given requests made by a revoker to a holder that is still there, when the revoker's
/// session is closed, then its withdrawal tasks end (they do not outlive the session, nor keep
/// its client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawal_tasks_end_with_the_revokers_session() {
    let dir = unique_root("revoke-close");
    let (holder_s, revoker_s) = (support::zk::session().await, support::zk::session().await);
    let guard = zk_recipes::FairLock::new(&holder_s, &dir)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let node = guard.path().rsplit('/').next().unwrap().to_string();
    let metrics = tokio::runtime::Handle::current().metrics();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = metrics.num_alive_tasks();
    for _ in 0..20 {
        zk_recipes::revoke(&revoker_s, &dir, &node).await.unwrap();
    }
    let during = metrics.num_alive_tasks();
    let t0 = Instant::now();
    revoker_s.close().await;
    let closed_in = t0.elapsed();
    let by = Instant::now() + Duration::from_secs(3);
    while metrics.num_alive_tasks() > base && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = metrics.num_alive_tasks();
    eprintln!("tasks {base} -> {during} with 20 requests -> {after} after close() ({closed_in:?})");
    let requests: Vec<String> = support::zk::children(&dir)
        .await
        .into_iter()
        .filter(|c| c.starts_with("revoke-"))
        .collect();
    drop(guard);
    holder_s.close().await;
    assert!(
        after <= base,
        "{} withdrawal tasks outlived the revoker's session",
        after - base
    );
    assert!(
        requests.is_empty(),
        "requests {requests:?} outlived the revoker's session"
    );
}
