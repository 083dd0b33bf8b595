//! Connection blips and expiries around a queued contender and a downgrade: a blip in a live
//! session keeps a contender's place, an expiry is never taken for a blip. Found by reviews of
//! 2026-11-27 of that day's fixes; each test failed on the code it was written against, except
//! the regression tests of bounds and answers that held (the timed acquire in `list_queue`, a
//! close during a wait or a grant's retry).
mod support;

use std::time::{Duration, Instant};

use support::zk::{children, session, session_via_proxy, wait_for_children};
use zk_recipes::testing::{unique_root, Fault, FaultAction, FaultPoint, FaultStatus};
use zk_recipes::{Election, Error, FairLock, LossPolicy};

/// Waiters with `with_requeue_on_expiry(false)` under `LossPolicy::OnExpiry` whose session
/// expires while they wait must answer `SessionExpired`; none may queue again in the new
/// session. Their watches fire (Session/Expired) before the session manager ends the epoch,
/// so `requeue_or_retry` sees a live epoch and answers `Attempt::Retry`. Six sessions with two
/// waiters each (one per lock, each behind a holder of its own) make the race show on most runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_waiter_expiry_under_on_expiry_answers_session_expired() {
    const SESSIONS: usize = 6;
    const PER_SESSION: usize = 2;
    let h = session().await;
    let mut ws = Vec::new();
    let mut roots = Vec::new();
    let mut held = Vec::new();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let (w, proxy) = session_via_proxy(Duration::from_secs(2), LossPolicy::OnExpiry).await;
        for i in 0..PER_SESSION {
            let root = unique_root(&format!("strict-expiry-{s}-{i}"));
            held.push(FairLock::new(&h, &root).unwrap().lock().await.unwrap());
            let strict = FairLock::new(&w, &root)
                .unwrap()
                .with_requeue_on_expiry(false);
            tasks.push(tokio::spawn(async move { strict.lock().await }));
            roots.push(root);
        }
        ws.push((w, proxy));
    }
    for root in &roots {
        for _ in 0..100 {
            if children(root).await.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(children(root).await.len(), 2);
    }
    for (w, proxy) in &ws {
        proxy.expire(w).await.unwrap();
    }
    // Give the waiters time to see the expiry, then release the holders: a strict waiter that
    // queued again in the new session is then granted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for g in held {
        g.release().await.unwrap();
    }
    let mut granted = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let result = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("strict waiter hung")
            .unwrap();
        match result {
            Err(Error::SessionExpired) => {}
            Ok(g) => granted.push(format!(
                "waiter {i} granted in session {:#x}",
                g.session_id()
            )),
            Err(other) => granted.push(format!("waiter {i}: {other:?}")),
        }
    }
    assert!(
        granted.is_empty(),
        "strict waiters not answered SessionExpired after their session expired: {granted:?}"
    );
    for (w, _) in ws {
        w.close().await;
    }
    h.close().await;
}

/// "Leases are granted in arrival order", and a connection blip in a live session keeps a
/// contender's place (today's fix). A semaphore enters with three pipelined requests: its
/// create, the listing, and the read of the directory's permit count. When only the last
/// reply is lost in a blip, the listing came back, so `list_queue` is not reached:
/// `check_kind` answers `Unknown` and the contender deletes its node and queues at the back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_on_the_semaphore_count_read_at_entry_keeps_the_place() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    use zk_recipes::Semaphore;
    let dir = unique_root("sem-blip");
    let l = session().await;
    let b_session = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::Grace).await;
    let holder = Semaphore::new(&l, &dir, 1)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let a_id = a_session.session_id();
    // a's create and listing are answered; the reply to its read of the count is lost, and a
    // cannot reconnect for 1 s.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(3),
        FaultAction::Cut {
            refuse_for: Duration::from_secs(1),
        },
    ));
    let sa = Semaphore::new(&a_session, &dir, 1).unwrap();
    let a = tokio::spawn(async move { sa.acquire().await });
    wait_for_children(&dir, 2, "a's node to be created").await;
    let a_first_node = children(&dir).await;
    let sb = Semaphore::new(&b_session, &dir, 1).unwrap();
    let b = tokio::spawn(async move { sb.acquire().await });
    wait_for_children(&dir, 3, "b's node to be created").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a_session.session_id(), a_id, "a's session must not change");
    let mut after = children(&dir).await;
    after.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
    let status = proxy.fault_status();
    holder.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            r = a => { drop(r); "a" }
            r = b => { drop(r); "b" }
        }
    })
    .await
    .expect("someone acquires");
    assert_eq!(
        first, "a",
        "expected a (queued first, same session throughout) to acquire next; queue when a \
         entered: {a_first_node:?}; queue after a's blip: {after:?}; fault {status:?}"
    );
    drop(a_session);
    drop(b_session);
}

/// `WriteGuard::downgrade`: "[`Error::LockLost`] if the write lock was lost before or during
/// the downgrade. Nothing is held afterwards." Under `LossPolicy::OnExpiry` the session
/// expires while the read node's create waits for the reconnect: the create fails with
/// `SessionExpired` (classified "unknown"), `place_read_behind` answers `KeepWrite`, and the
/// new check (`epoch.lost_token().is_cancelled() || guard.is_lost()`) runs before the session
/// manager has ended the epoch: the downgrade answers `Ok` with an exclusive read guard on an
/// expired session. Six sessions make the race show on most runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_whose_session_expires_meanwhile_answers_lock_lost() {
    use zk_recipes::RwLock;
    const SESSIONS: usize = 6;
    let mut runs = Vec::new();
    for i in 0..SESSIONS {
        let (w, proxy) = session_via_proxy(Duration::from_secs(2), LossPolicy::OnExpiry).await;
        let dir = unique_root(&format!("downgrade-expiry-{i}"));
        let guard = RwLock::new(&w, &dir).unwrap().write().await.unwrap();
        let info = w.zk_session_info().unwrap();
        runs.push((w, proxy, dir, guard, info));
    }
    let mut tasks = Vec::new();
    let mut kept = Vec::new();
    for (w, proxy, dir, guard, info) in runs {
        proxy.set_blocked(true);
        // The client must know it is disconnected, so that the downgrade's requests wait for
        // the reconnect (a request cut in flight is a mere blip, which keeps the write node).
        for _ in 0..200 {
            if !w.is_connected() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!w.is_connected());
        tokio::time::sleep(Duration::from_millis(50)).await;
        tasks.push(tokio::spawn(async move { guard.downgrade().await }));
        kept.push((w, proxy, dir, info));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (i, t) in tasks.iter().enumerate() {
        assert!(!t.is_finished(), "downgrade {i} answered before the expiry");
    }
    for (_, proxy, _, info) in &kept {
        // The proxy is blocked already: it stays blocked while the session is closed.
        zk_recipes::testing::expire_session(&[proxy], &proxy.target().to_string(), info.clone())
            .await
            .unwrap();
    }
    for (_, proxy, _, _) in &kept {
        proxy.set_blocked(false);
    }
    let mut wrong = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let r = tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("downgrade answered")
            .unwrap();
        match r {
            Err(Error::LockLost(_)) => {}
            Ok(read) => {
                let lost_now = read.is_lost();
                // What the guard learns next: the session had expired (not a blip).
                let _ = tokio::time::timeout(Duration::from_secs(5), read.lost()).await;
                wrong.push(format!(
                    "session {i}: Ok(read guard, exclusive {}, lost when looked at {lost_now}, \
                     then loss reason {:?})",
                    read.is_exclusive(),
                    read.loss_reason()
                ))
            }
            Err(other) => wrong.push(format!("session {i}: {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "downgrades on an expired session not answered LockLost: {wrong:?}"
    );
    for (w, _, _, _) in kept {
        w.close().await;
    }
}

/// A timed acquire whose listing reply is lost (so it sits in `list_queue`, waiting for the
/// reconnect) answers `Timeout` at its deadline, and its node is deleted once the connection
/// is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_during_list_queue_leaves_no_node() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let dir = unique_root("list-again-timeout");
    let h = session().await;
    let held = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
    let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::Grace).await;
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Cut {
            refuse_for: Duration::from_millis(1500),
        },
    ));
    let started = std::time::Instant::now();
    let r = FairLock::new(&a, &dir)
        .unwrap()
        .lock_timeout(Duration::from_millis(700))
        .await;
    let took = started.elapsed();
    assert!(matches!(r, Err(Error::Timeout)), "got {r:?}");
    assert!(took < Duration::from_millis(1200), "took {took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = children(&dir).await;
    assert_eq!(left.len(), 1, "stray node left: {left:?}");
    held.release().await.unwrap();
    a.close().await;
    h.close().await;
}

// ------------------------------------------------- an eleventh review, of the tenth's fixes

fn by_seq(mut v: Vec<String>) -> Vec<String> {
    v.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
    v
}

/// "A connection blip in the same session keeps its place" (the election docs). A waiter
/// whose predecessor is deleted plainly (its holder's session closed) confirms its own node
/// with one `exists` before the grant (`grant_if_first`, `!confirmed`); when that one reply is
/// lost in a blip, `requeue()` answers `Attempt::Retry`: our node is deleted and we queue at
/// the back, behind a contender that queued after us.
async fn blip_on_confirm_before_grant(election: bool) {
    let dir = unique_root(if election {
        "confirm-el"
    } else {
        "confirm-lock"
    });
    let h = session().await;
    let b_session = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::Grace).await;
    let a_id = a_session.session_id();
    let keep = Duration::from_secs(30);
    let (_a, _b);
    if election {
        let holder = Election::new(&h, &dir, "h")
            .unwrap()
            .campaign()
            .await
            .unwrap();
        std::mem::forget(holder);
        let ea = Election::new(&a_session, &dir, "a").unwrap();
        _a = tokio::spawn(async move {
            let _l = ea.campaign().await;
            tokio::time::sleep(keep).await;
        });
        wait_for_children(&dir, 2, "a queued").await;
        let eb = Election::new(&b_session, &dir, "b").unwrap();
        _b = tokio::spawn(async move {
            let _l = eb.campaign().await;
            tokio::time::sleep(keep).await;
        });
    } else {
        let holder = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
        std::mem::forget(holder);
        let la = FairLock::new(&a_session, &dir).unwrap();
        _a = tokio::spawn(async move {
            let _g = la.lock().await;
            tokio::time::sleep(keep).await;
        });
        wait_for_children(&dir, 2, "a queued").await;
        let lb = FairLock::new(&b_session, &dir).unwrap();
        _b = tokio::spawn(async move {
            let _g = lb.lock().await;
            tokio::time::sleep(keep).await;
        });
    }
    wait_for_children(&dir, 3, "b queued").await;
    // Let a and b arm their watches.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued = by_seq(children(&dir).await);
    // a's next request after the holder's node goes is the `exists` of its own node.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Cut {
            refuse_for: Duration::from_millis(300),
        },
    ));
    // The holder's session ends: its node is deleted plainly (no release mark).
    h.close().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = by_seq(children(&dir).await);
    let status = proxy.fault_status();
    assert_eq!(a_session.session_id(), a_id, "a's session must not change");
    // a's node was the second of the three (after the holder's); it must now head the queue.
    assert_eq!(
        now.first(),
        queued.get(1),
        "a (queued before b, same session throughout, one blip) lost its place: queue before \
         {queued:?}, after {now:?}; fault {status:?}"
    );
    _a.abort();
    _b.abort();
    drop(a_session);
    drop(b_session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_on_the_confirm_before_a_grant_keeps_the_place_lock() {
    blip_on_confirm_before_grant(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_on_the_confirm_before_a_grant_keeps_the_place_election() {
    blip_on_confirm_before_grant(true).await;
}

/// The entry keeps a semaphore contender's place when the read of the permit count is lost
/// in a blip at entry; the write of the count (the first contender on an empty directory,
/// `check_kind`'s `set_data`) lost the same way still answers `KindCheck::Unknown`, and
/// `requeue_or_retry` deletes the node and queues at the back, in the same live session:
/// b, which queued behind a meanwhile, is granted first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_on_the_semaphore_count_write_at_entry_keeps_the_place() {
    use zk_recipes::Semaphore;
    let dir = unique_root("sem-count-write");
    let raw = support::zk::raw().await;
    raw.create(
        &dir,
        b"",
        &zk_recipes::zk::CreateMode::Persistent.with_acls(zk_recipes::zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let b_session = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::Grace).await;
    let a_id = a_session.session_id();
    // a's create, listing and read of the (empty) count are answered; the reply to its write
    // of the count is lost, and a cannot reconnect for 1 s.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(4),
        FaultAction::Cut {
            refuse_for: Duration::from_secs(1),
        },
    ));
    let sa = Semaphore::new(&a_session, &dir, 1).unwrap();
    let a = tokio::spawn(async move { sa.acquire().await.map(|g| (g, "a")) });
    wait_for_children(&dir, 1, "a's node to be created").await;
    let by = std::time::Instant::now() + Duration::from_secs(5);
    while !matches!(
        proxy.fault_status(),
        zk_recipes::testing::FaultStatus::Fired { .. }
    ) {
        assert!(
            std::time::Instant::now() < by,
            "fault never fired: {:?}",
            proxy.fault_status()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let a_first = children(&dir).await;
    let sb = Semaphore::new(&b_session, &dir, 1).unwrap();
    let b = tokio::spawn(async move { sb.acquire().await.map(|g| (g, "b")) });
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            r = a => r.unwrap().unwrap().1,
            r = b => r.unwrap().unwrap().1,
        }
    })
    .await
    .expect("someone acquires");
    let after = by_seq(children(&dir).await);
    assert_eq!(a_session.session_id(), a_id, "a's session must not change");
    assert_eq!(
        first, "a",
        "a (queued first, same session throughout, one blip) must be granted first; a's node \
         at entry {a_first:?}, queue now {after:?}"
    );
    drop(a_session);
    drop(b_session);
}

/// A waiter whose session is closed by `Session::close()` answers `Error::Closed` (strict and
/// re-queueing alike), and is never granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_during_a_wait_answers_closed() {
    for strict in [true, false] {
        let dir = unique_root("close-wait");
        let h = session().await;
        let w = session().await;
        let holder = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
        let lw = FairLock::new(&w, &dir)
            .unwrap()
            .with_requeue_on_expiry(!strict);
        let t = tokio::spawn(async move { lw.lock().await.map(|g| g.session_id()) });
        wait_for_children(&dir, 2, "w queued").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let closing = {
            let w = w.clone();
            tokio::spawn(async move { w.close().await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(holder);
        let r = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("waiter hung")
            .unwrap();
        closing.await.unwrap();
        assert!(
            matches!(r, Err(zk_recipes::Error::Closed)),
            "strict={strict}: expected Err(Closed), got {r:?}"
        );
        h.close().await;
    }
}

// ------------------------------------------------- a twelfth review, of the eleventh's fixes

fn seq(n: &str) -> String {
    n.rsplit('-').next().unwrap().to_string()
}

async fn wait_fired(proxy: &zk_recipes::testing::FaultProxy, what: &str) {
    let by = Instant::now() + Duration::from_secs(5);
    while !matches!(proxy.fault_status(), FaultStatus::Fired { .. }) {
        assert!(
            Instant::now() < by,
            "{what}: fault never fired: {:?}",
            proxy.fault_status()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A blip in a live session never costs a queued contender its place; only some twenty blips
/// *in a row* do. Before the fix the count was never reset, so separate, fully recovered
/// blips over one long wait added up, and the 21st (each one a single lost reply, the session
/// reconnected in between) deleted the waiter's node and queued it at the back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_recovered_blips_never_cost_the_place() {
    const ROUNDS: usize = 24;
    let dir = unique_root("blips-add-up");
    let h = session().await;
    let b = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let a_id = a_session.session_id();
    let holder = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
    // ROUNDS waiters of session b between the holder and a.
    let mut xs = Vec::new();
    for i in 0..ROUNDS {
        let l = FairLock::new(&b, &dir).unwrap();
        xs.push(tokio::spawn(async move {
            let _g = l.lock().await;
            tokio::time::sleep(Duration::from_secs(120)).await;
        }));
        wait_for_children(&dir, i + 2, "x queued").await;
    }
    let la = FairLock::new(&a_session, &dir).unwrap();
    let a = tokio::spawn(async move {
        let g = la.lock().await;
        tokio::time::sleep(Duration::from_secs(120)).await;
        drop(g);
    });
    wait_for_children(&dir, ROUNDS + 2, "a queued").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut q: Vec<String> = children(&dir).await;
    q.sort_by_key(|n| seq(n));
    let a_node = q.last().unwrap().clone();
    let mut fired = 0;
    // Remove a's immediate predecessor, one at a time: a re-lists (reply 1) and arms a watch on
    // the next one (reply 2); that reply is lost in a cut, a reconnects at once (same session)
    // and arms again. One blip per round, each recovered.
    for round in 0..ROUNDS {
        proxy.arm(Fault::new(
            FaultPoint::BeforeReply(2),
            FaultAction::Cut {
                refuse_for: Duration::from_millis(20),
            },
        ));
        xs.pop().unwrap().abort();
        wait_fired(&proxy, &format!("round {round}")).await;
        fired += 1;
        // Reconnected and re-armed.
        let by = Instant::now() + Duration::from_secs(5);
        while !a_session.is_connected() {
            assert!(Instant::now() < by, "a never reconnected");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = children(&dir).await;
        assert_eq!(a_session.session_id(), a_id, "a's session must not change");
        assert!(
            now.contains(&a_node),
            "after {fired} separate blips (each one lost reply, reconnected at once, same session) \
             a's node {a_node} was deleted and a queued again: queue now {now:?}"
        );
    }
    drop(holder);
    a.abort();
}

/// `Session::close()` while a waiter retries the read of its own node before the grant
/// (`try_grant` after a lost `exists` reply, reconnect refused for 2 s): it must answer
/// `Error::Closed`, strict and re-queueing alike, and never be granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_during_the_grant_retry_answers_closed() {
    for strict in [true, false] {
        let dir = unique_root("close-grant");
        let h = session().await;
        let (a_session, proxy) =
            session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
        let holder = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
        std::mem::forget(holder);
        let la = FairLock::new(&a_session, &dir)
            .unwrap()
            .with_requeue_on_expiry(!strict);
        let t = tokio::spawn(async move { la.lock().await.map(|g| g.session_id()) });
        wait_for_children(&dir, 2, "a queued").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.arm(Fault::new(
            FaultPoint::BeforeReply(1),
            FaultAction::Cut {
                refuse_for: Duration::from_secs(2),
            },
        ));
        h.close().await;
        wait_fired(&proxy, "exists before grant").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::time::timeout(Duration::from_secs(10), a_session.close())
            .await
            .expect("close hung");
        let r = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("waiter hung")
            .unwrap();
        assert!(
            matches!(r, Err(zk_recipes::Error::Closed)),
            "strict={strict}: expected Err(Closed), got {r:?}"
        );
    }
}

// ---- A blip on the search for a node whose create answer was lost (a review of
// 2026-11-27, reviewer A). `recover_unknown_create` gave the node up at the first lost answer
// to its listing or its read, and the contender queued again at the back, behind one that
// came later: two blips in a row, same session, cost the place. Both tests failed before.

/// The sequence suffix of a contender name.
fn sequence_of(n: &str) -> String {
    n.rsplit('-').next().unwrap().to_string()
}

/// `names` in queue order.
fn by_sequence(mut names: Vec<String>) -> Vec<String> {
    names.sort_by_key(|n| sequence_of(n));
    names
}

/// a's create is applied but its answer is lost in a cut; a then looks for its node by its
/// protection id (a listing, then a read of the node), and the answer to the `second`-th
/// request after the reconnect is lost too. b queues after a's node exists. a must be granted
/// first. (A request sent while the client is still re-establishing the session is sent again
/// by the client and fails nothing: such a round shows nothing.)
async fn unknown_create_then_blip_on_its_search(second: u32) -> Result<(), String> {
    let dir = unique_root(&format!("recover-blip-{second}"));
    let h = session().await;
    let b_session = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let a_id = a_session.session_id();
    let holder = FairLock::new(&h, &dir).unwrap().lock().await.unwrap();
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Cut {
            refuse_for: Duration::from_millis(300),
        },
    ));
    let la = FairLock::new(&a_session, &dir).unwrap();
    let a = tokio::spawn(async move { la.lock().await.map(|g| (g, "a")) });
    wait_fired(&proxy, "a's create").await;
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(second),
        FaultAction::Cut {
            refuse_for: Duration::from_millis(100),
        },
    ));
    wait_for_children(&dir, 2, "a's node to be created").await;
    let at_entry = by_sequence(children(&dir).await);
    let lb = FairLock::new(&b_session, &dir).unwrap();
    let b = tokio::spawn(async move { lb.lock().await.map(|g| (g, "b")) });
    wait_for_children(&dir, 3, "b's node to be created").await;
    wait_fired(&proxy, "a's search").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = by_sequence(children(&dir).await);
    assert_eq!(a_session.session_id(), a_id, "a's session must not change");
    holder.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            r = a => r.unwrap().unwrap().1,
            r = b => r.unwrap().unwrap().1,
        }
    })
    .await
    .expect("someone acquires");
    drop(a_session);
    drop(b_session);
    h.close().await;
    if first == "a" {
        Ok(())
    } else {
        Err(format!(
            "second lost answer at reply #{second}: b granted first; the queue when a's node \
             was made {at_entry:?}, after the blips {after:?}"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_on_the_search_after_an_unknown_create_keeps_the_place() {
    let mut lost = Vec::new();
    for second in 1..=3 {
        if let Err(e) = unknown_create_then_blip_on_its_search(second).await {
            lost.push(e);
        }
    }
    assert!(
        lost.is_empty(),
        "a (its node made before b's, same session throughout, two blips) must be granted \
         first: {lost:#?}"
    );
}

/// One round's faults: the first lost answer (`BeforeReply`, so a's create is applied
/// whatever k1 hits) and how long reconnects are refused, then perhaps a second.
#[derive(Debug, Clone, Copy)]
struct EntryBlips {
    k1: u32,
    refuse1: Duration,
    second: Option<(u32, Duration)>,
}

impl EntryBlips {
    fn draw(rng: &mut support::rng::Rng, semaphore: bool) -> EntryBlips {
        let k1 = rng.range(1, if semaphore { 6 } else { 5 }) as u32;
        let refuse1 = rng.ms(0, 300);
        let second = rng
            .chance(60)
            .then(|| (rng.range(1, 4) as u32, rng.ms(0, 200)));
        EntryBlips {
            k1,
            refuse1,
            second,
        }
    }
}

/// a queues behind a holder through a proxy, one or two answers lost at random points of its
/// entry and arming (same session throughout, far fewer than twenty in a row); b queues once
/// a's node exists. a must be granted before b. `Err` describes the round when it was not.
async fn place_round(blips: EntryBlips, what: &str, semaphore: bool) -> Result<(), String> {
    use zk_recipes::Semaphore;
    let dir = unique_root("entry-place");
    let take = move |s: &zk_recipes::Session, dir: &str| {
        let (s, dir) = (s.clone(), dir.to_string());
        async move {
            if semaphore {
                Semaphore::new(&s, &dir, 1).unwrap().acquire().await
            } else {
                FairLock::new(&s, &dir).unwrap().lock().await
            }
        }
    };
    let h = session().await;
    let b_session = session().await;
    let (a_session, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let a_id = a_session.session_id();
    let holder = take(&h, &dir).await.unwrap();
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(blips.k1),
        FaultAction::Cut {
            refuse_for: blips.refuse1,
        },
    ));
    let a = tokio::spawn(take(&a_session, &dir));
    wait_for_children(&dir, 2, "a's node to be created").await;
    let at_entry = by_sequence(children(&dir).await);
    if let Some((k2, refuse2)) = blips.second {
        let by = Instant::now() + Duration::from_secs(3);
        while !matches!(proxy.fault_status(), FaultStatus::Fired { .. }) && Instant::now() < by {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if matches!(proxy.fault_status(), FaultStatus::Fired { .. }) {
            proxy.arm(Fault::new(
                FaultPoint::BeforeReply(k2),
                FaultAction::Cut {
                    refuse_for: refuse2,
                },
            ));
        }
    }
    let b = tokio::spawn(take(&b_session, &dir));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.disarm();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = by_sequence(children(&dir).await);
    assert_eq!(a_session.session_id(), a_id, "a's session must not change");
    holder.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            r = a => { let _held = r.unwrap().unwrap(); "a" }
            r = b => { let _held = r.unwrap().unwrap(); "b" }
        }
    })
    .await
    .expect("someone acquires");
    drop(a_session);
    drop(b_session);
    h.close().await;
    if first == "a" {
        Ok(())
    } else {
        Err(format!(
            "{what} (semaphore: {semaphore}), {blips:?}: b granted first; the queue at a's \
             entry {at_entry:?}, before the grant {after:?}"
        ))
    }
}

/// Runs `rounds` seeded rounds (`ZKR_ENTRY_SEED=<n>` replays a run); with `only`, just those
/// rounds of the seed's draws (a found schedule).
async fn seeded_place_rounds(seed: u64, rounds: usize, only: &[usize], semaphore: bool) {
    let mut rng = support::rng::Rng::new(seed);
    let mut lost = Vec::new();
    for round in 0..rounds {
        let blips = EntryBlips::draw(&mut rng, semaphore);
        if !only.is_empty() && !only.contains(&round) {
            continue;
        }
        if let Err(e) = place_round(blips, &format!("round {round}"), semaphore).await {
            lost.push(e);
        }
    }
    assert!(
        lost.is_empty(),
        "seed {seed} (ZKR_ENTRY_SEED={seed} replays): a lost its place to b after blips in \
         the same session: {lost:#?}"
    );
}

/// A fresh seed each run, printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_blips_at_entry_and_arming_keep_the_place() {
    let seed = support::rng::seed_from_env("ZKR_ENTRY_SEED");
    seeded_place_rounds(seed, 6, &[], false).await;
}

/// As above, for a semaphore of one permit (entry: create, listing, read of the count). It
/// passed when written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_blips_at_entry_and_arming_keep_the_place_semaphore() {
    let seed = support::rng::seed_from_env("ZKR_ENTRY_SEED");
    seeded_place_rounds(seed, 4, &[], true).await;
}

/// The schedules the random test found (a lost create answer, then a lost answer to the
/// search's listing or read), kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn found_entry_blip_schedules_keep_the_place() {
    seeded_place_rounds(1795757558574442731, 7, &[4, 6], false).await;
    seeded_place_rounds(1795757707932948088, 4, &[3], false).await;
    seeded_place_rounds(1795757797501454416, 3, &[2], false).await;
}
