//! The fair lock and the semaphore against a real ZooKeeper (issue 3).
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::history::{check, check_fifo, check_semaphore, Event, Kind};
use support::zk::{children, children_on, raw, session, session_via_proxy};
use zk_recipes::testing::{monotonic_nanos, unique_root, ZooKeeperServer};
use zk_recipes::{zk, Error, FairLock, LossPolicy, LossReason, Semaphore, Session};

const T: Duration = Duration::from_secs(60);

fn sequence_of(path: &str) -> u64 {
    zk_recipes::NodeName::parse(path.rsplit('/').next().unwrap())
        .expect("contender name")
        .sequence
        .expect("a queue node has a sequence") as u64
}

/// 8 contenders on separate sessions, 30 acquisitions each: no overlap, grants in queue
/// (sequence) order, fencing tokens strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_fifo_and_tokens() {
    let root = unique_root("fifo");
    let mut tasks = Vec::new();
    for w in 0..8 {
        let s = session().await;
        let lock = FairLock::new(&s, &root)
            .unwrap()
            .with_data(format!("worker-{w}"));
        tasks.push(tokio::spawn(async move {
            let mut events = Vec::new();
            for _ in 0..30 {
                let g = lock.lock().await.expect("lock");
                let acquired = monotonic_nanos();
                tokio::time::sleep(Duration::from_micros(300)).await;
                let seq = sequence_of(g.path());
                let token = g.fencing_token();
                let released = monotonic_nanos();
                g.release().await.expect("release");
                // queued_ns carries the node's sequence number: its fixed place in the queue.
                events.push(
                    Event::new(format!("worker-{w}"), Kind::Exclusive, acquired, released)
                        .with_token(token)
                        .with_queued(seq),
                );
            }
            s.close().await;
            events
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            tokio::time::timeout(T, t)
                .await
                .expect("a contender hung")
                .unwrap(),
        );
    }
    assert_eq!(all.len(), 240);
    check(&all)
        .merged(check_fifo(&all))
        .assert_clean("8 sessions x 30 acquisitions of one fair lock");
    assert!(
        children(&root).await.is_empty(),
        "contender nodes left behind: {:?}",
        children(&root).await
    );
}

/// Ten tasks sharing one FairLock handle (one session) exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_one_handle() {
    let root = unique_root("shared-handle");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (lock, inside) = (lock.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = lock.lock().await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two tasks inside the lock"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(g); // release on drop
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(T, t)
            .await
            .expect("a task hung (deadlock?)")
            .unwrap();
    }
    s.close().await;
    assert!(children(&root).await.is_empty());
}

/// try_lock, lock_timeout and a cancelled lock() leave no node behind.
#[tokio::test]
async fn busy_timeout_and_cancel_leave_no_node() {
    let root = unique_root("cancel");
    let a = session().await;
    let b = session().await;
    let held = FairLock::new(&a, &root)
        .unwrap()
        .try_lock()
        .await
        .expect("free lock");
    let other = FairLock::new(&b, &root).unwrap();
    assert_eq!(other.try_lock().await.unwrap_err(), Error::WouldBlock);
    assert_eq!(children(&root).await.len(), 1, "try_lock left its node");
    assert_eq!(
        other
            .lock_timeout(Duration::from_millis(300))
            .await
            .unwrap_err(),
        Error::Timeout
    );
    assert_eq!(children(&root).await.len(), 1, "lock_timeout left its node");
    // Cancel a waiting lock(): its node must go in the background.
    let waiting = tokio::time::timeout(Duration::from_millis(300), other.lock()).await;
    assert!(waiting.is_err(), "lock() returned while the lock was held");
    let mut left = usize::MAX;
    for _ in 0..50 {
        left = children(&root).await.len();
        if left == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(left, 1, "a cancelled waiter left its node");
    // The queue still works: the holder releases, the other side takes it.
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), other.lock())
        .await
        .expect("no orphan blocks the queue")
        .unwrap();
    g.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// The uncontended path is one round trip: create and get_children are pipelined. Two
/// requests, and the listing must contain our own node (the queue refuses otherwise).
#[tokio::test]
async fn uncontended_acquire_is_create_plus_list() {
    let root = unique_root("one-rtt");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    lock.try_lock().await.unwrap().release().await.unwrap(); // makes the parent
    for _ in 0..20 {
        let before = s.request_count();
        let g = lock.try_lock().await.expect("uncontended try_lock");
        assert_eq!(
            s.request_count() - before,
            2,
            "uncontended acquire should be create + get_children"
        );
        g.release().await.unwrap();
    }
    s.close().await;
}

/// A worker loop on one session (lock, drop the guard, lock again): the dropped guard's
/// release goes out with the next acquire's create, in the transaction before its listing, so
/// the listing finds the lock free: `try_lock` right after the drop succeeds, with the old
/// node gone (on a single-threaded runtime the background release once ran only after the
/// next acquire had sent its listing, which still showed the old node: `WouldBlock`).
#[tokio::test]
async fn a_dropped_guards_release_is_sent_before_the_next_acquire() {
    let root = unique_root("drop-then-lock");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    let mut guard = lock.try_lock().await.unwrap();
    for i in 0..20 {
        let old = guard.fencing_token();
        drop(guard);
        guard = match lock.try_lock().await {
            Ok(g) => g,
            Err(e) => panic!("iteration {i}: try_lock right after dropping the guard: {e}"),
        };
        assert!(
            guard.fencing_token() > old,
            "iteration {i}: token did not grow"
        );
        assert_eq!(
            children(&root).await.len(),
            1,
            "iteration {i}: the dropped guard's node is still there"
        );
    }
    guard.release().await.unwrap();
    s.close().await;
}

/// A waiter keeps only the nearest members below it (a window of 2) and knows when more were
/// cut off. Given a holder H and two contenders X1, X2 in front of T, when X1 and X2 leave
/// while T's listing is on its way (its reply held up in the network), then T's window
/// [X1, X2] empties as it walks back, with H below it, cut off: T must list again and wait
/// for H, not take the lock; it is granted once H releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_window_with_members_cut_off_below_is_not_a_grant() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let root = unique_root("window");
    let a = session().await;
    let holder = FairLock::new(&a, &root).unwrap().lock().await.unwrap();
    let admin = raw().await;
    let ephemeral = zk_recipes::zk::CreateMode::EphemeralSequential
        .with_acls(zk_recipes::zk::Acls::anyone_all());
    let mut xs = Vec::new();
    for _ in 0..2 {
        let prefix = format!("{root}/_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-lock-");
        let (_, seq) = admin.create(&prefix, b"", &ephemeral).await.unwrap();
        xs.push(format!("{prefix}{seq}"));
    }
    let (c, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let target = FairLock::new(&c, &root).unwrap();
    // T's create is request 1, its listing request 2: hold the listing's reply back.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Stall(Duration::from_millis(600)),
    ));
    let mut t = tokio::spawn(async move { target.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for x in xs.iter().rev() {
        admin.delete(x, None).await.unwrap();
    }
    let early = tokio::time::timeout(Duration::from_millis(1500), &mut t).await;
    assert!(
        early.is_err(),
        "granted while the holder below the waiter's window holds: {early:?}"
    );
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), t)
        .await
        .expect("not granted after the holder released")
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    a.close().await;
    c.close().await;
}

/// A lock directory whose listing would not fit ZooKeeper's default `jute.maxbuffer` (1 MB
/// less one byte, the largest reply Curator and zkCli read) is refused with a typed error when a
/// contender enters, at once, and the contender's node is removed. Just under the limit the
/// lock is granted as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_too_large_to_list_is_refused_with_a_typed_error() {
    use zk_recipes::zk;
    let root = unique_root("too-many");
    let filler = raw().await;
    filler
        .mkdir(
            &root,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    // Names of 199 bytes: each costs 203 bytes of the listing.
    let fill = |from: usize, to: usize| {
        let (filler, root, ephemeral) = (&filler, &root, &ephemeral);
        async move {
            for chunk in (from..to).collect::<Vec<_>>().chunks(500) {
                let names: Vec<String> = chunk
                    .iter()
                    .map(|i| format!("{root}/filler-{i:05}-{}", "x".repeat(186)))
                    .collect();
                let creates = names.iter().map(|name| filler.create(name, b"", ephemeral));
                for r in futures::future::join_all(creates).await {
                    r.expect("create a filler node");
                }
            }
        }
    };
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    // 5,100 fillers and our node: a listing of about 1,035,000 bytes.
    fill(0, 5100).await;
    let g = tokio::time::timeout(Duration::from_secs(20), lock.lock())
        .await
        .expect("lock() hung under the limit")
        .expect("granted under the limit");
    g.release().await.unwrap();
    // 5,170: about 1,049,600 bytes, over the limit.
    fill(5100, 5170).await;
    let refused = tokio::time::timeout(Duration::from_secs(20), lock.lock())
        .await
        .expect("lock() hung over the limit");
    match refused {
        Err(Error::TooManyContenders {
            contenders, bytes, ..
        }) => {
            assert_eq!(contenders, 5171, "fillers and our node");
            assert!(bytes > 0xfffff, "{bytes} bytes");
        }
        other => panic!("expected TooManyContenders, got {other:?}"),
    }
    assert_eq!(
        filler.list_children(&root).await.unwrap().len(),
        5170,
        "our node stayed behind"
    );
    s.close().await;
}

fn mntr_u64(server: &ZooKeeperServer, key: &str) -> u64 {
    let m = server.mntr().expect("mntr");
    m.get(key)
        .unwrap_or_else(|| panic!("mntr has no {key}: {m:?}"))
        .parse::<f64>()
        .expect(key) as u64
}

fn notifications(server: &ZooKeeperServer) -> u64 {
    [
        "zk_sum_node_changed_watch_count",
        "zk_sum_node_deleted_watch_count",
        "zk_sum_node_created_watch_count",
        "zk_sum_node_children_watch_count",
    ]
    .iter()
    .map(|k| mntr_u64(server, k))
    .sum()
}

/// No herd: with 50 waiters queued on separate sessions, each waiter watches one other node
/// (its predecessor) besides its own; one release notifies exactly one session. Runs on a
/// server of its own, since the server's counters are global.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_herd_with_fifty_waiters() {
    let server = ZooKeeperServer::start().expect("start a private ZooKeeper");
    let connect = || {
        Session::builder(server.connect_string())
            .with_session_timeout(Duration::from_secs(4))
            .connect()
    };
    let root = unique_root("herd");
    let holder_s = connect().await.unwrap();
    let holder = FairLock::new(&holder_s, &root)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let watches_before = mntr_u64(&server, "zk_watch_count");
    let mut sessions = Vec::new();
    let mut waiters = Vec::new();
    for _ in 0..50 {
        let s = connect().await.unwrap();
        let lock = FairLock::new(&s, &root).unwrap();
        waiters.push(tokio::spawn(async move { lock.lock().await }));
        sessions.push(s);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Wait until all 50 are queued and watching.
    let mut watches = 0;
    for _ in 0..200 {
        watches = mntr_u64(&server, "zk_watch_count").saturating_sub(watches_before);
        if children_on(&server, &root).await.len() == 51 && watches >= 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(children_on(&server, &root).await.len(), 51);
    // Each waiter: one watch on its predecessor, one on its own node. Curator and kazoo waiters
    // set one watch each too, but re-list all children at every wake-up.
    assert!(
        watches <= 100 + 1,
        "expected at most 2 watches per waiter (+1 holder), server counts {watches}"
    );
    let wchp = server.wchp().expect("wchp");
    for block in wchp.split("\n/").filter(|b| b.contains(&root[1..])) {
        let sessions_watching = block
            .lines()
            .skip(1)
            .filter(|l| l.trim().starts_with("0x"))
            .count();
        assert!(
            sessions_watching <= 2,
            "a node is watched by {sessions_watching} sessions (herd): {block}"
        );
    }
    let before = notifications(&server);
    let watches_before_release = mntr_u64(&server, "zk_watch_count");
    holder.release().await.unwrap();
    // The first waiter gets the lock.
    let mut granted = None;
    for (i, w) in waiters.iter_mut().enumerate() {
        if let Ok(r) =
            tokio::time::timeout(Duration::from_millis(if i == 0 { 5000 } else { 1 }), w).await
        {
            granted = Some((i, r.unwrap().unwrap()));
            break;
        }
    }
    let (first, guard) = granted.expect("no waiter got the lock after the release");
    assert_eq!(
        first, 0,
        "the lock went to waiter {first}, not the first in line"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Two watches were on the released node: the next waiter's and the holder's own (used up by
    // its own release, which saves a RemoveWatches request). Nothing else fired or changed: the
    // new holder already watched its own node, and the 49 others still wait, each on its
    // predecessor.
    let fired = notifications(&server) - before;
    assert_eq!(fired, 2, "a release should notify the next waiter and the releaser's own watch only; the server counts {fired}");
    let watches_after = mntr_u64(&server, "zk_watch_count");
    assert_eq!(
        watches_after,
        watches_before_release - 2,
        "watches went from {watches_before_release} to {watches_after}: expected exactly the two on the released node to go"
    );
    for (i, w) in waiters.iter().enumerate().skip(1) {
        assert!(
            !w.is_finished(),
            "waiter {i} finished although only waiter 0 was handed the lock"
        );
    }
    drop(guard);
    for s in sessions {
        s.close().await;
    }
    holder_s.close().await;
}

/// The cost of a hand-off does not depend on the queue length: with 10 and with 500 waiters
/// the waiters' session sends no request on a marked hand-off; the releaser sends one multi.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_cost_is_constant() {
    let mut per_handoff = Vec::new();
    for n in [10usize, 500] {
        let root = unique_root("cost");
        let holder_s = session().await;
        let waiters_s = session().await;
        let first = FairLock::new(&holder_s, &root)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let lock = FairLock::new(&waiters_s, &root).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        let queued_from = waiters_s.request_count();
        for _ in 0..n {
            let (lock, tx) = (lock.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
                tx.send(done_tx).unwrap();
                let _ = done_rx.await;
                g.release().await.unwrap();
            }));
        }
        for _ in 0..400 {
            if children(&root).await.len() == n + 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(
            children(&root).await.len(),
            n + 1,
            "not all {n} waiters queued"
        );
        // Every waiter sends 4 requests to queue (create, list, the watches on its predecessor
        // and on its own node): wait for all of them (a fixed pause was too short on a busy
        // server), then for their replies.
        for _ in 0..600 {
            if waiters_s.request_count() - queued_from >= 4 * n as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            waiters_s.request_count() - queued_from >= 4 * n as u64,
            "the {n} waiters did not all set their watches within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = waiters_s.request_count();
        first.release().await.unwrap();
        // Nine hand-offs between the waiters, measured in the waiters' session: grant, release,
        // grant... then the tenth grant.
        for _ in 0..9 {
            let done = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("hand-off hung")
                .unwrap();
            let _ = done.send(());
        }
        let _last = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("hand-off hung")
            .unwrap();
        let cost = waiters_s.request_count() - before;
        per_handoff.push((n, cost));
        holder_s.close().await;
        waiters_s.close().await;
        for t in tasks {
            t.abort();
        }
    }
    eprintln!("requests in the waiters' session for ten grants and nine releases: {per_handoff:?}");
    let (_, c10) = per_handoff[0];
    let (_, c500) = per_handoff[1];
    assert_eq!(
        c10, c500,
        "requests for ten grants and nine releases: {per_handoff:?}"
    );
    assert_eq!(c10, 9, "nine releases and ten grants: expected 1 request per release (the multi) and none per grant");
}

/// The holder's session expires: lost() fires within the session timeout, the next waiter
/// takes over with a larger token, and the expired handle can lock again in the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_expiry_is_reported_and_handed_on() {
    let root = unique_root("expiry");
    let (a, proxy) = session_via_proxy(Duration::from_secs(2), LossPolicy::Grace).await;
    let b = session().await;
    let lock_a = FairLock::new(&a, &root).unwrap();
    let ga = lock_a.lock().await.unwrap();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.expire(&a).await.expect("expire");
    tokio::time::timeout(Duration::from_secs(2), ga.lost())
        .await
        .expect("lost() did not fire within the session timeout");
    // Under the default Grace policy the monotonic deadline may fire before the expiry is seen.
    assert!(
        matches!(
            ga.loss_reason(),
            Some(LossReason::SessionExpired | LossReason::ConnectionLost)
        ),
        "reason {:?}",
        ga.loss_reason()
    );
    let gb = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter hung")
        .unwrap()
        .unwrap();
    assert!(gb.fencing_token() > ga.fencing_token());
    assert!(matches!(
        ga.release().await.unwrap_err(),
        Error::LockLost(_)
    ));
    a.wait_connected(Duration::from_secs(10)).await.unwrap();
    assert_eq!(a.epoch_number(), Some(2));
    gb.release().await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(5), lock_a.lock())
        .await
        .unwrap()
        .unwrap();
    again.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A waiter whose node someone else deletes (an administrator) queues again by itself; with
/// `with_requeue_on_expiry(false)` it answers `LockLost(NodeDeleted)` instead and leaves no
/// node, as the option's docs say (a question of a review, 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_is_deleted_requeues_or_answers_node_deleted() {
    let root = unique_root("waiter-node-deleted");
    let (h, w) = (session().await, session().await);
    let held = FairLock::new(&h, &root).unwrap().lock().await.unwrap();
    let requeuing = FairLock::new(&w, &root).unwrap();
    let t1 = tokio::spawn(async move { requeuing.lock().await });
    let mut kids = Vec::new();
    for _ in 0..100 {
        kids = children(&root).await;
        if kids.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(kids.len(), 2, "{kids:?}");
    let strict = FairLock::new(&w, &root)
        .unwrap()
        .with_requeue_on_expiry(false);
    let t2 = tokio::spawn(async move { strict.lock().await });
    let mut third = Vec::new();
    for _ in 0..100 {
        third = children(&root).await;
        if third.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    third.retain(|k| !kids.contains(k));
    assert_eq!(third.len(), 1, "the strict waiter's node");
    let admin = raw().await;
    let mut by_seq = kids.clone();
    by_seq.sort_by_key(|k| k.rsplit('-').next().unwrap().to_string());
    // Delete both waiters' nodes.
    admin
        .delete(&format!("{root}/{}", by_seq[1]), None)
        .await
        .unwrap();
    admin
        .delete(&format!("{root}/{}", third[0]), None)
        .await
        .unwrap();
    let strict_result = tokio::time::timeout(Duration::from_secs(5), t2)
        .await
        .expect("the strict waiter answers")
        .unwrap();
    assert!(
        matches!(strict_result, Err(Error::LockLost(LossReason::NodeDeleted))),
        "{strict_result:?}"
    );
    // The other queued again: holder + one node.
    let mut now = Vec::new();
    for _ in 0..100 {
        now = children(&root).await;
        if now.len() == 2 && !now.contains(&by_seq[1]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(now.len(), 2, "holder and the re-queued waiter: {now:?}");
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), t1)
        .await
        .expect("the re-queued waiter is granted")
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    w.close().await;
    h.close().await;
}

/// A waiter's session expires: it re-queues by itself in the new session and gets the lock;
/// with with_requeue_on_expiry(false) it fails with SessionExpired instead. No orphan either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_expiry_requeues_or_fails() {
    let root = unique_root("waiter-expiry");
    let h = session().await;
    let held = FairLock::new(&h, &root).unwrap().lock().await.unwrap();
    let (w, proxy) = session_via_proxy(Duration::from_secs(2), LossPolicy::Grace).await;
    let requeuing = FairLock::new(&w, &root).unwrap();
    let strict = FairLock::new(&w, &root)
        .unwrap()
        .with_requeue_on_expiry(false);
    let t1 = tokio::spawn(async move { requeuing.lock().await });
    let t2 = tokio::spawn(async move { strict.lock().await });
    for _ in 0..100 {
        if children(&root).await.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.expire(&w).await.unwrap();
    let strict_result = tokio::time::timeout(Duration::from_secs(5), t2)
        .await
        .expect("strict waiter hung")
        .unwrap();
    assert_eq!(strict_result.unwrap_err(), Error::SessionExpired);
    // The re-queued waiter is in the queue again, behind the holder, in the new session.
    let mut kids = Vec::new();
    for _ in 0..100 {
        kids = children(&root).await;
        if kids.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        kids.len(),
        2,
        "expected holder + re-queued waiter, found {kids:?}"
    );
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), t1)
        .await
        .expect("re-queued waiter hung")
        .unwrap()
        .unwrap();
    assert_eq!(
        g.session_id(),
        w.session_id().unwrap(),
        "granted in the new session"
    );
    g.release().await.unwrap();
    w.close().await;
    h.close().await;
    assert!(children(&root).await.is_empty());
}

/// An administrator deletes the holder's node: the holder is told (NodeDeleted), the next
/// waiter takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_deletes_holder_node() {
    let root = unique_root("admin");
    let a = session().await;
    let b = session().await;
    let ga = FairLock::new(&a, &root).unwrap().lock().await.unwrap();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    raw()
        .await
        .delete(ga.path(), None)
        .await
        .expect("admin delete");
    tokio::time::timeout(Duration::from_secs(5), ga.lost())
        .await
        .expect("holder not told its node was deleted");
    assert_eq!(ga.loss_reason(), Some(LossReason::NodeDeleted));
    let gb = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!gb.is_lost());
    gb.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A semaphore with 3 permits: never more than 3 holders, all 6 workers get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_bounds_holders() {
    let root = unique_root("sem");
    let s = session().await;
    assert!(matches!(
        Semaphore::new(&s, &root, 0),
        Err(Error::InvalidArgument(_))
    ));
    let mut tasks = Vec::new();
    for w in 0..6 {
        let s = session().await;
        let sem = Semaphore::new(&s, &root, 3).unwrap();
        tasks.push(tokio::spawn(async move {
            let mut events = Vec::new();
            for _ in 0..5 {
                let g = sem.acquire().await.unwrap();
                let a = monotonic_nanos();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let r = monotonic_nanos();
                g.release().await.unwrap();
                events.push(Event::new(format!("w{w}"), Kind::Semaphore, a, r));
            }
            s.close().await;
            events
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            tokio::time::timeout(T, t)
                .await
                .expect("semaphore worker hung")
                .unwrap(),
        );
    }
    assert_eq!(all.len(), 30);
    check_semaphore(&all, 3).assert_clean("6 workers on a 3-permit semaphore");
    s.close().await;
}

// ---------------------------------------------------------------------------------------------
// MultiLock: several fair locks, all or none, deadlock-free
// ---------------------------------------------------------------------------------------------

use zk_recipes::{MultiLock, Op};

/// Given three contenders on separate sessions asking in a loop for {a, b}, {b, a} (multi-locks
/// named in opposite orders) and for b alone, when each round has one deadline, then nobody
/// ever times out (no deadlock) and no two holds of a lock overlap; every lock of a set is held
/// at once. Taking the locks in the caller's order deadlocks here within a few rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_in_opposite_orders_never_deadlock_nor_overlap() {
    let root = unique_root("multi-order");
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let orders: [Vec<String>; 3] = [
        vec![a.clone(), b.clone()],
        vec![b.clone(), a.clone()],
        vec![b.clone()],
    ];
    let mut tasks = Vec::new();
    for (w, paths) in orders.into_iter().enumerate() {
        let s = session().await;
        let (a, b) = (a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            let locks = MultiLock::new(&s, &paths).unwrap();
            let mut events = Vec::new();
            for round in 0..40 {
                let held = match locks.lock_timeout(Duration::from_secs(15)).await {
                    Ok(held) => held,
                    Err(e) => panic!("worker {w} round {round} on {paths:?}: {e} (a deadlock?)"),
                };
                let acquired = monotonic_nanos();
                assert!(!held.is_lost());
                let taken: Vec<&str> = held.guards().iter().map(|g| g.path()).collect();
                assert_eq!(taken.len(), paths.len(), "held {taken:?} for {paths:?}");
                tokio::time::sleep(Duration::from_millis(2)).await;
                let released = monotonic_nanos();
                for g in held.guards() {
                    let which = if g.path().starts_with(&format!("{a}/")) {
                        "a"
                    } else {
                        assert!(g.path().starts_with(&format!("{b}/")), "{}", g.path());
                        "b"
                    };
                    events.push((
                        which,
                        Event::new(format!("worker-{w}"), Kind::Exclusive, acquired, released),
                    ));
                }
                held.release().await.expect("release");
            }
            s.close().await;
            events
        }));
    }
    let mut per_lock: std::collections::HashMap<&str, Vec<Event>> = Default::default();
    for t in tasks {
        for (which, e) in tokio::time::timeout(T, t)
            .await
            .expect("deadlock: the loop hung")
            .unwrap()
        {
            per_lock.entry(which).or_default().push(e);
        }
    }
    assert_eq!(
        per_lock["a"].len(),
        80,
        "a is held 40 times by each of two workers"
    );
    assert_eq!(per_lock["b"].len(), 120);
    for (which, events) in per_lock {
        check(&events).assert_clean(&format!("lock {which}"));
    }
}

/// Given b held by another session, when a multi-lock asks for {a, b} with `try_lock` or a
/// short deadline, then it fails with `WouldBlock` or `Timeout` and holds nothing: no node of
/// ours is left in a or b. Bad input is refused before anything is sent. A guarded write
/// across the set is refused once one of its nodes is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_that_cannot_take_every_lock_holds_none() {
    let root = unique_root("multi-none");
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let s = session().await;
    let other = session().await;
    let blocker = FairLock::new(&other, &b).unwrap().lock().await.unwrap();
    let locks = MultiLock::new(&s, [&b, &a]).unwrap();
    assert_eq!(
        locks.paths(),
        [a.as_str(), b.as_str()],
        "taken in sorted order"
    );
    let r = locks.try_lock().await;
    assert!(matches!(r, Err(Error::WouldBlock)), "{r:?}");
    // Connected: released before the error returns, not in the background.
    assert_eq!(
        children(&a).await,
        Vec::<String>::new(),
        "try_lock returned with our node still in {a}"
    );
    let r = locks.lock_timeout(Duration::from_millis(300)).await;
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    assert_eq!(
        children(&a).await,
        Vec::<String>::new(),
        "lock_timeout returned with our node still in {a}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        children(&a).await,
        Vec::<String>::new(),
        "a node of ours is left in {a}"
    );
    assert_eq!(children(&b).await.len(), 1, "only the blocker is in {b}");

    blocker.release().await.unwrap();
    let held = locks.lock().await.unwrap();
    let value = format!("{root}/value");
    held.guarded([Op::create(&value, "1")])
        .await
        .expect("a guarded write of the set");
    let admin = raw().await;
    admin.delete(held.guards()[1].path(), None).await.unwrap();
    tokio::time::timeout(T, held.lost())
        .await
        .expect("lost() after a node's deletion");
    let r = held.guarded([Op::set_data(&value, "2", None)]).await;
    assert!(
        matches!(r, Err(Error::LockLost(LossReason::NodeDeleted))),
        "{r:?}"
    );
    drop(held);

    // Nested paths, also with a sibling that sorts between them (`-`, `.`, ` `, `!` sort
    // before `/`): the check compared only sorted neighbours and let these through.
    let mut nested = vec![vec![], vec![a.clone(), format!("{a}/inner")]];
    for between in ["-b", ".b", " b", "!"] {
        nested.push(vec![
            a.clone(),
            format!("{a}{between}"),
            format!("{a}/inner"),
        ]);
        nested.push(vec![a.clone(), format!("{a}{between}"), format!("{a}/x/y")]);
    }
    for bad in nested {
        let r = MultiLock::new(&s, &bad);
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{bad:?}: {r:?}"
        );
    }
    let r = MultiLock::new(&s, ["/ok", "no-slash"]);
    assert!(matches!(r, Err(Error::InvalidPath { .. })), "{r:?}");
    s.close().await;
    other.close().await;
}

/// A relock releases the guard and queues again in one transaction: with every request
/// after its first held up in the network, the server already shows the old node gone and
/// the new one queued (a release followed by a lock would show the old node gone and no new
/// one). The waiter behind takes over first; the relocking contender comes next, at the back,
/// and the tokens grow in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_hands_the_lock_on_and_queues_at_the_back_in_one_transaction() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let root = unique_root("relock");
    let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let b = session().await;
    let lock_a = FairLock::new(&a, &root).unwrap();
    let ga = lock_a.lock().await.unwrap();
    let old_token = ga.fencing_token();
    let old_name = ga.path().rsplit('/').next().unwrap().to_string();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = a.request_count();
    let stall = Duration::from_millis(1500);
    proxy.arm(Fault::new(
        FaultPoint::BeforeRequest(2),
        FaultAction::Stall(stall),
    ));
    let sent = std::time::Instant::now();
    let old_lost = ga.lost_token();
    let holding_b = Arc::new(AtomicUsize::new(0));
    let relock = {
        let (lock_a, holding_b) = (lock_a.clone(), holding_b.clone());
        tokio::spawn(async move {
            let g = lock_a.relock(ga).await;
            (g, holding_b.load(Ordering::SeqCst))
        })
    };
    let seen = loop {
        let names = children(&root).await;
        if !names.contains(&old_name) {
            break names;
        }
        assert!(sent.elapsed() < stall, "the old node outlived the stall");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        sent.elapsed() < stall,
        "seen only after the stall: the test proves nothing"
    );
    assert_eq!(
        seen.len(),
        2,
        "with only its first request through, the relock's new node must be queued: {seen:?}"
    );
    // The old guard is over as soon as the relock is sent: a watchdog on its `lost()` must not
    // fire later, under the next guard.
    assert!(
        old_lost.is_cancelled(),
        "the old guard's lost() is still pending"
    );
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    holding_b.store(1, Ordering::SeqCst);
    assert!(gb.fencing_token() > old_token);
    tokio::time::sleep(stall + Duration::from_millis(200)).await;
    assert!(!relock.is_finished(), "the relock was granted while B held");
    let b_token = gb.fencing_token();
    holding_b.store(2, Ordering::SeqCst);
    gb.release().await.unwrap();
    let (ga, seen) = tokio::time::timeout(Duration::from_secs(10), relock)
        .await
        .expect("the relock was not granted after B released")
        .unwrap();
    let ga = ga.expect("relock");
    assert_eq!(seen, 2, "granted before B released");
    assert!(
        ga.fencing_token() > b_token,
        "tokens must grow in grant order"
    );
    assert_eq!(
        a.request_count() - before,
        4,
        "a relock: one transaction, the listing, the watch on our new node (which reads its \
         stat: ZooKeeper 3.8 answers a create in a multi without it) and the watch on the \
         waiter now in front of us"
    );
    ga.release().await.unwrap();
    assert!(children(&root).await.is_empty());
    a.close().await;
    b.close().await;
}

/// A relock that has to wait reads its new node (whose stat ZooKeeper 3.8 leaves out of the
/// transaction's answer) in the same round trip as it watches the node in front of it: with
/// the answer to its third request held up, its fourth has reached the server already. (It
/// used to read its node first and watch the predecessor one round trip later: three requests
/// through, then nothing until the answer came.) Once the hold ends, the relock is granted
/// after the waiter in front of it, with a fencing token above the waiter's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_relock_reads_its_node_with_the_watch_on_its_predecessor() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint, Op};
    let root = unique_root("relock-pipelined");
    let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let b = session().await;
    let lock_a = FairLock::new(&a, &root).unwrap();
    let ga = lock_a.lock().await.unwrap();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The guard's own-node watch is armed by its monitor task: let it go out before the
    // count of forwarded requests starts. (The fault counts `exists` requests only, so that
    // watch, a listing, cannot take it; the count below still needs it out first.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stall = Duration::from_millis(1000);
    let before = proxy.requests_forwarded();
    // The relock's transaction, its listing, then its watch on the waiter (`exists`, the
    // third request, whose answer is held) with the read of its own node.
    proxy.arm(Fault::new(FaultPoint::BeforeReply(1), FaultAction::Stall(stall)).only(Op::Exists));
    let held_up = std::time::Instant::now();
    let relock = tokio::spawn(async move { lock_a.relock(ga).await });
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    // Time for the fourth request to leave, had it not waited for the third's answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let through = proxy.requests_forwarded() - before;
    assert!(
        held_up.elapsed() < stall,
        "the hold was over before the count: the test proves nothing"
    );
    assert_eq!(
        through, 4,
        "a waiting relock sends its transaction and listing, then the read of its own node \
         together with the watch on the waiter in front of it; {through} requests reached the \
         server while the third one's answer was held up"
    );
    let b_token = gb.fencing_token();
    gb.release().await.unwrap();
    let ga = tokio::time::timeout(Duration::from_secs(10), relock)
        .await
        .expect("the relock was not granted after B released")
        .unwrap()
        .unwrap();
    assert!(
        ga.fencing_token() > b_token,
        "tokens must grow in grant order"
    );
    assert_eq!(
        children(&root).await,
        vec![ga.path().rsplit('/').next().unwrap().to_string()],
        "only the relocked node is left"
    );
    ga.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A relock of a guard whose node is gone (an administrator deleted it: told or not yet told)
/// answers `LockLost` and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_of_a_lost_guard_answers_lock_lost_and_creates_nothing() {
    let root = unique_root("relock-lost");
    let a = session().await;
    let lock = FairLock::new(&a, &root).unwrap();
    for wait_for_the_loss in [true, false] {
        let g = lock.lock().await.unwrap();
        raw()
            .await
            .delete(g.path(), None)
            .await
            .expect("admin delete");
        if wait_for_the_loss {
            tokio::time::timeout(Duration::from_secs(5), g.lost())
                .await
                .expect("not told");
        }
        match lock.relock(g).await {
            Err(Error::LockLost(LossReason::NodeDeleted)) => {}
            other => panic!("told of the loss first: {wait_for_the_loss}: {other:?}"),
        }
        assert!(children(&root).await.is_empty(), "a node was created");
    }
    a.close().await;
}

/// A relock whose old node's part the server refuses (an administrator took our write right
/// on that node away: its mark and delete answer `NoAuth`) fails with `NoAuth` on the old node,
/// not on the directory, as if the create had been refused; nothing new is queued (the
/// transaction is atomic), and the old node, which we may no longer delete, is left to the
/// administrator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_refused_at_the_old_node_names_that_node() {
    let root = unique_root("relock-refused");
    let a = session().await;
    let lock = FairLock::new(&a, &root).unwrap();
    let g = lock.lock().await.unwrap();
    let old = g.path().to_string();
    let admin = zk::Client::connector()
        .with_auth("digest", zk_recipes::testing::SUPER_AUTH.as_bytes())
        .connect(&zk_recipes::testing::shared_server().connect_string())
        .await
        .expect("connect as the administrator");
    admin
        .set_acl(
            &old,
            &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
            None,
        )
        .await
        .expect("the administrator's set_acl");
    match lock.relock(g).await {
        Err(Error::NoAuth { path }) => assert_eq!(path, old, "the error names the wrong node"),
        other => panic!("expected NoAuth on {old}: {other:?}"),
    }
    assert_only_node(&root, &old, "only the old node may be left").await;
    admin
        .delete(&old, None)
        .await
        .expect("the administrator's delete");
    a.close().await;
}

/// A guard of another lock, of another session, or of a simple lock whose fixed node sits in
/// the queue's directory (its kind and parent match, but it is no queue node: its path is
/// reused by later holders) is refused with `InvalidArgument`, and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_with_a_foreign_guard_is_refused_and_the_guard_released() {
    let root = unique_root("relock-foreign");
    let (a, b) = (session().await, session().await);
    let here = FairLock::new(&a, format!("{root}/here")).unwrap();
    let there = FairLock::new(&a, format!("{root}/there")).unwrap();
    let on_b = FairLock::new(&b, format!("{root}/here")).unwrap();
    let simple = zk_recipes::ExclusiveLock::new(&a, format!("{root}/here/x")).unwrap();
    for (guard, lock) in [
        (there.lock().await.unwrap(), &here),
        (here.lock().await.unwrap(), &on_b),
        (simple.lock().await.unwrap(), &here),
    ] {
        let (dir, name) = guard.path().rsplit_once('/').unwrap();
        let (dir, name) = (dir.to_string(), name.to_string());
        match lock.relock(guard).await {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{other:?}"),
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while children(&dir).await.contains(&name) {
            assert!(std::time::Instant::now() < deadline, "not released");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    a.close().await;
    b.close().await;
}

/// A relock whose future is dropped after its transaction was sent: the lock goes to the
/// waiter, and our new node is deleted (nothing of ours stays in the queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_relock_leaves_no_node_of_ours() {
    let root = unique_root("relock-cancel");
    let (a, b) = (session().await, session().await);
    let lock_a = FairLock::new(&a, &root).unwrap();
    let ga = lock_a.lock().await.unwrap();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    {
        let relock = lock_a.relock(ga);
        tokio::pin!(relock);
        // One poll sends the transaction; then the future is dropped.
        assert!(futures::poll!(relock.as_mut()).is_pending());
    }
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let names = children(&root).await;
        if names.len() == 1 && gb.path().ends_with(names[0].as_str()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "left: {names:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gb.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A connection cut at each of the relock's first requests, before the server sees it or
/// before its reply comes back: whatever the transaction's fate, the waiter behind takes the
/// lock first, the relock is granted after it (never while it holds), and exactly one node of
/// ours is left, the new guard's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_cut_at_any_request_hands_on_once_and_leaves_one_node() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    for k in 1..=3 {
        for before_reply in [false, true] {
            let case = format!("request {k}, before its reply: {before_reply}");
            let root = unique_root("relock-cut");
            let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
            let b = session().await;
            let lock_a = FairLock::new(&a, &root).unwrap();
            let ga = lock_a.lock().await.unwrap();
            let lock_b = FairLock::new(&b, &root).unwrap();
            let waiter = tokio::spawn(async move { lock_b.lock().await });
            while children(&root).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let point = if before_reply {
                FaultPoint::BeforeReply(k)
            } else {
                FaultPoint::BeforeRequest(k)
            };
            let refuse_for = Duration::from_millis(50);
            proxy.arm(Fault::new(point, FaultAction::Cut { refuse_for }));
            let b_holds = Arc::new(AtomicUsize::new(0));
            let relock = {
                let (lock_a, b_holds) = (lock_a.clone(), b_holds.clone());
                tokio::spawn(async move {
                    let g = lock_a.relock(ga).await;
                    (g, b_holds.load(Ordering::SeqCst))
                })
            };
            let gb = tokio::time::timeout(Duration::from_secs(20), waiter)
                .await
                .unwrap_or_else(|_| panic!("{case}: the waiter was not handed the lock"))
                .unwrap()
                .unwrap();
            b_holds.store(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            b_holds.store(2, Ordering::SeqCst);
            let b_token = gb.fencing_token();
            gb.release().await.unwrap();
            let (ga, seen) = tokio::time::timeout(Duration::from_secs(20), relock)
                .await
                .unwrap_or_else(|_| panic!("{case}: the relock hung"))
                .unwrap();
            let ga = ga.unwrap_or_else(|e| panic!("{case}: relock failed: {e}"));
            assert_ne!(seen, 1, "{case}: granted while B held");
            assert!(ga.fencing_token() > b_token, "{case}: token");
            assert_only_node(&root, ga.path(), &case).await;
            ga.release().await.unwrap();
            a.close().await;
            b.close().await;
        }
    }
}

/// The old guard is over as soon as its relock is sent, even when the transaction fails and
/// its release has to be retried after a reconnect: a watchdog on its `lost()` must not fire
/// later, under the next guard. Here the relock's transaction never reaches the server (the
/// connection is cut before it, and refused for 800 ms), and the old guard's `lost()` has
/// fired within 500 ms, before the fallback release can run. (Any bound under the 800 ms
/// tells a loss at the send from one at the fallback release.)
///
/// The fault counts transactions only. Counting every request, it struck the guard's own-node
/// watch instead whenever that read, sent by the guard's monitor task in the background, went
/// out after the fault was armed (in 2 of 3 runs here): then the relock found the connection
/// down and rightly waited for it, before sending anything, for the 800 ms. The test passed
/// only when the relock's task outran the client's noticing the cut, and failed in CI on
/// 2026-11-28 ("had not fired 500 ms after").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_guard_is_over_when_the_relock_is_sent_even_if_its_transaction_fails() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint, Op};
    let root = unique_root("relock-over");
    let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let lock = FairLock::new(&a, &root).unwrap();
    let g = lock.lock().await.unwrap();
    let old_lost = g.lost_token();
    let refuse_for = Duration::from_millis(800);
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Cut { refuse_for },
        )
        .only(Op::Multi),
    );
    let relock = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.relock(g).await })
    };
    tokio::time::timeout(Duration::from_millis(500), old_lost.cancelled())
        .await
        .expect("the old guard's lost() had not fired 500 ms after its relock was sent");
    let g = tokio::time::timeout(Duration::from_secs(20), relock)
        .await
        .expect("the relock hung")
        .unwrap()
        .expect("relock after the reconnect");
    assert_only_node(&root, g.path(), "after the relock").await;
    g.release().await.unwrap();
    a.close().await;
}

/// Asserts that the node at `path` is the only child of `root`.
async fn assert_only_node(root: &str, path: &str, context: &str) {
    let names = children(root).await;
    assert!(
        names.len() == 1 && path.ends_with(names[0].as_str()),
        "{context}: left {names:?}, expected only {path}"
    );
}

/// The worker loop (lock, drop the guard, lock again on the same session) sends the dropped
/// guard's release and the next create in one transaction, as `relock` does: with only the
/// first request of the new `lock()` let through, the old node is gone and the new one queued
/// behind the waiter. Fails if the drop sends its release on its own (the create, stalled,
/// would not be there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_right_after_a_dropped_guard_goes_out_with_its_release_in_one_transaction() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let root = unique_root("merge");
    let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let b = session().await;
    let lock_a = FairLock::new(&a, &root).unwrap();
    let ga = lock_a.lock().await.unwrap();
    let old_token = ga.fencing_token();
    let old_name = ga.path().rsplit('/').next().unwrap().to_string();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = a.request_count();
    let stall = Duration::from_millis(1500);
    proxy.arm(Fault::new(
        FaultPoint::BeforeRequest(2),
        FaultAction::Stall(stall),
    ));
    let sent = std::time::Instant::now();
    let old_lost = ga.lost_token();
    let again = {
        let lock_a = lock_a.clone();
        tokio::spawn(async move {
            drop(ga);
            lock_a.lock().await
        })
    };
    let seen = loop {
        let names = children(&root).await;
        if !names.contains(&old_name) {
            break names;
        }
        assert!(sent.elapsed() < stall, "the old node outlived the stall");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        sent.elapsed() < stall,
        "seen only after the stall: the test proves nothing"
    );
    assert_eq!(
        seen.len(),
        2,
        "with only one request through, the next lock()'s node must be queued: {seen:?}"
    );
    assert!(
        old_lost.is_cancelled(),
        "the dropped guard's lost() is still pending"
    );
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    assert!(gb.fencing_token() > old_token);
    tokio::time::sleep(stall + Duration::from_millis(200)).await;
    assert!(
        !again.is_finished(),
        "the next lock() was granted while B held"
    );
    let b_token = gb.fencing_token();
    gb.release().await.unwrap();
    let ga = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("the next lock() was not granted after B released")
        .unwrap()
        .expect("lock");
    assert!(
        ga.fencing_token() > b_token,
        "tokens must grow in grant order"
    );
    assert_eq!(
        a.request_count() - before,
        4,
        "one transaction, the listing, the watch on our new node and on the waiter in front"
    );
    ga.release().await.unwrap();
    assert!(children(&root).await.is_empty());
    a.close().await;
    b.close().await;
}

/// How a dropped guard's node goes wrong before the next `lock()` on the same session takes
/// its release into its transaction.
#[derive(Debug)]
enum DroppedNode {
    /// Deleted by an administrator, the holder not yet told.
    Deleted,
    /// Made unwritable by an administrator: the release's mark is refused.
    Refused,
}

/// A `lock()` that took a dropped guard's release into its transaction does not answer for
/// that guard: when the old node is gone, it creates its own node plainly (it failed without
/// that fallback, `LockLost`). When the old node's part is refused (`NoAuth`: an
/// administrator made the node read-only) and the node there is still ours, it is noted as
/// stuck, the `lock()` queues plainly, and before it would wait behind the old node for ever
/// it deletes it, read and found still ours, plainly (the directory allows that; see
/// `tests/refused_deletes.rs`) and is granted. (Review 20 made it answer `NoAuth` here; since
/// the sixth session a noted node's delete is tried again, plain for a queue node.) The
/// session's replies are
/// held meanwhile, so the holder hears of nothing before it drops, and while they are held the
/// server must see no new node: the proof that the release went out with the create, not
/// alone.
async fn a_merged_lock_whose_dropped_node_fails(case: DroppedNode) {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let root = unique_root("merge-fallback");
    let (a, proxy) = session_via_proxy(Duration::from_secs(6), LossPolicy::OnExpiry).await;
    let lock = FairLock::new(&a, &root).unwrap();
    let g = lock.lock().await.unwrap();
    let old = g.path().to_string();
    let admin = zk::Client::connector()
        .with_auth("digest", zk_recipes::testing::SUPER_AUTH.as_bytes())
        .connect(&zk_recipes::testing::shared_server().connect_string())
        .await
        .expect("connect as the administrator");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stall = Duration::from_millis(1500);
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Stall(stall),
    ));
    let held_from = std::time::Instant::now();
    // A reply to hold everything behind: the listing's.
    let listing = tokio::spawn({
        let lock = lock.clone();
        async move { lock.contenders().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    match case {
        DroppedNode::Deleted => admin.delete(&old, None).await.expect("admin delete"),
        DroppedNode::Refused => {
            admin
                .set_acl(
                    &old,
                    &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
                    None,
                )
                .await
                .expect("admin set_acl");
        }
    }
    assert!(
        !g.is_lost(),
        "the holder was told before the drop: the test proves nothing"
    );
    let again = {
        let lock = lock.clone();
        tokio::spawn(async move {
            drop(g);
            lock.try_lock().await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        held_from.elapsed() < stall,
        "the replies were not held long enough: the test proves nothing"
    );
    let mine: Vec<String> = children(&root)
        .await
        .into_iter()
        .filter(|n| !old.ends_with(n.as_str()))
        .collect();
    assert!(
        mine.is_empty(),
        "a node was created while the release's answer was held: the drop's release went out \
         alone, not with the create: {mine:?}"
    );
    let result = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("the lock() did not end")
        .unwrap();
    listing.await.unwrap().expect("the listing");
    match case {
        DroppedNode::Deleted => {
            let g = result.expect("the lock() must create its node plainly and be granted");
            assert_only_node(&root, g.path(), "the new node only").await;
            g.release().await.unwrap();
        }
        DroppedNode::Refused => {
            let g = result.expect("the lock() must delete the read-only old node and be granted");
            assert_only_node(&root, g.path(), "the new node only (the old one deleted)").await;
            g.release().await.unwrap();
        }
    }
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_lock_whose_dropped_node_was_deleted_creates_its_node_plainly() {
    a_merged_lock_whose_dropped_node_fails(DroppedNode::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_lock_whose_dropped_node_refuses_its_mark_deletes_it_and_is_granted() {
    a_merged_lock_whose_dropped_node_fails(DroppedNode::Refused).await;
}

/// How a guard ends up dropped in another runtime than its session's, one whose tasks do not
/// run (any more) while the session lives on.
enum OtherRuntime {
    /// Dropped in the body of a current-thread runtime's `block_on` (a sync wrapper's), and
    /// the runtime dropped when it returns.
    BlockOn,
    /// Held by a task of a runtime that shuts down: the task, and the guard, are dropped by
    /// the shutdown.
    Shutdown,
    /// Dropped in the body of a current-thread runtime's `block_on`, and the runtime kept but
    /// not driven again (a sync wrapper's, between two calls).
    Idle,
}

/// A guard dropped in another runtime than its session's, one that runs no task after the
/// drop (given `how`), is released all the same, and the lock reaches a waiter of another
/// session: the drop's release must not depend on a task of the dropping runtime that never
/// gets to run. Fails if the release, parked for a merge, waits for that task: the node stays,
/// and the lock held, for as long as the session lives (`Timeout`).
async fn a_guard_dropped_in_another_runtime_is_released(how: OtherRuntime) {
    let root = unique_root("drop-other-runtime");
    let a = session().await;
    let b = session().await;
    let g = FairLock::new(&a, &root).unwrap().lock().await.unwrap();
    let kept = std::thread::spawn(move || match how {
        OtherRuntime::BlockOn | OtherRuntime::Idle => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move { drop(g) });
            matches!(how, OtherRuntime::Idle).then_some(rt)
        }
        OtherRuntime::Shutdown => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.spawn(async move {
                let _held = g;
                std::future::pending::<()>().await
            });
            std::thread::sleep(Duration::from_millis(100));
            drop(rt);
            None
        }
    })
    .join()
    .unwrap();
    let gb = FairLock::new(&b, &root)
        .unwrap()
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the dropped guard's node was never released: the lock is stuck held");
    assert_only_node(&root, gb.path(), "the waiter's node only").await;
    gb.release().await.unwrap();
    a.close().await;
    b.close().await;
    // Dropped off the test's runtime, as it was made.
    std::thread::spawn(move || drop(kept)).join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_in_a_block_on_of_a_runtime_dropped_after_is_released() {
    a_guard_dropped_in_another_runtime_is_released(OtherRuntime::BlockOn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_held_by_a_task_of_a_runtime_shut_down_is_released() {
    a_guard_dropped_in_another_runtime_is_released(OtherRuntime::Shutdown).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_in_a_block_on_of_a_runtime_not_driven_again_is_released() {
    a_guard_dropped_in_another_runtime_is_released(OtherRuntime::Idle).await;
}

/// A guard dropped by a task that then blocks its worker thread (a synchronous call: here,
/// waiting on a std channel for news that a waiter of another session got the lock) is
/// released meanwhile: the drop must hand the release to the session, not to a task that only
/// the blocked thread can run. Fails if the release, parked for a merge, waits in a task the
/// drop spawned: a task spawned by a multi-thread runtime's worker goes to that worker's LIFO
/// slot, which other workers never steal, so the release waits for the thread to unblock, and
/// here never comes (the blocked task gives up after 3 s, the waiter is not granted). The
/// session's deadline thread sends such a release a few milliseconds after the drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_before_its_worker_thread_blocks_is_released_meanwhile() {
    let root = unique_root("drop-then-block");
    let a = session().await;
    let b = session().await;
    let g = FairLock::new(&a, &root).unwrap().lock().await.unwrap();
    let lock_b = FairLock::new(&b, &root).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = tokio::spawn(async move {
        let granted = lock_b.lock_timeout(Duration::from_secs(8)).await;
        let _ = tx.send(granted.as_ref().map(|g| g.fencing_token()).is_ok());
        granted
    });
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let blocked = tokio::spawn(async move {
        drop(g);
        rx.recv_timeout(Duration::from_secs(3))
    });
    let heard = blocked.await.unwrap();
    let gb = waiter.await.unwrap();
    assert_eq!(
        heard,
        Ok(true),
        "the waiter was not granted while the dropping task's thread was blocked: the release \
         was held back with it (the waiter then ended with {gb:?})"
    );
    gb.unwrap().release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A worker loop in the body of a multi-thread runtime's `block_on` (`#[tokio::main]`, a
/// test's body): there the parked release's task starts on a worker at once, beside the
/// loop, and may send the release while the loop's next `try_lock` is on its way. Whichever
/// comes first, the `try_lock` must find the lock free: merged with the release, or sent
/// after it. Fails if the task takes the release out of the session's table and sends it
/// only after: a `try_lock` that finds the table empty in between sends its create and
/// listing first, and the listing shows the dropped guard's node (`WouldBlock`, within a few
/// hundred iterations: the spin before the `try_lock` sweeps the window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_right_after_a_drop_in_a_block_on_body_finds_the_lock_free() {
    let root = unique_root("drop-then-try-mt");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    let mut guard = lock.try_lock().await.unwrap();
    for i in 0..3000u32 {
        drop(guard);
        let spin = std::time::Instant::now();
        let wait = Duration::from_nanos(u64::from(i % 40) * 250);
        while spin.elapsed() < wait {
            std::hint::spin_loop();
        }
        guard = match lock.try_lock().await {
            Ok(g) => g,
            Err(e) => panic!(
                "iteration {i} (spin {wait:?}): try_lock right after dropping the guard: {e}"
            ),
        };
    }
    guard.release().await.unwrap();
    assert!(children(&root).await.is_empty());
    s.close().await;
}

/// A worker loop in the body of a multi-thread runtime's `block_on` (`#[tokio::main]`, a
/// test's body) merges its dropped guard's release into the next `lock()`'s transaction in
/// (nearly) every iteration: three requests an iteration (the transaction, the listing, the
/// read of the new node with its watch), not four (a release of its own). The parked
/// release's task starts on a worker at once there, beside the loop, and sent the release
/// itself in about a fifth of the iterations (2026-12-02, once a guard granted after a
/// wait had no monitor task, whose wake-up at the drop had held that task back): it now
/// sends it only from the dropping thread, and leaves it otherwise to the deadline thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_loop_in_a_block_on_body_merges_its_releases() {
    const ITERATIONS: u64 = 300;
    let root = unique_root("loop-mt-merges");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    drop(lock.lock().await.unwrap());
    let before = s.request_count();
    for _ in 0..ITERATIONS {
        drop(lock.lock().await.unwrap());
    }
    let per = (s.request_count() - before) as f64 / ITERATIONS as f64;
    eprintln!("{per:.3} requests per iteration");
    // The last drop's release, by the deadline thread.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(children(&root).await.is_empty());
    s.close().await;
    assert!(
        per <= 3.05,
        "{per:.3} requests per iteration: more than one in twenty releases went out on their own"
    );
}

/// The guard's docs promise that a dropped guard's release goes out a few milliseconds after
/// the drop at the latest, "even if the dropping task blocks its thread". Here the session
/// lives on a current-thread runtime (`#[tokio::test]`, `#[tokio::main(flavor =
/// "current_thread")]`), and the task that drops the guard then blocks that thread, waiting
/// (up to 3 s) for news that a waiter of another session, on a runtime and thread of its own,
/// got the lock. The release is queued on the session by the deadline thread, but the
/// session's client runs on the blocked thread: nothing goes out until the server expires the
/// session (the waiter gives up after 3 s: `Err(Timeout)`). The same before the merged drop
/// (3ae18e4), whose release was queued at the drop: a limitation of a current-thread runtime,
/// which the docs now state, not a regression. Open: ignored (run it with `--ignored`).
#[ignore = "open: a current-thread runtime blocked after a drop holds the session's client, and the release, with it"]
#[tokio::test]
async fn a_guard_dropped_before_a_current_thread_runtime_blocks_is_released_meanwhile() {
    let root = unique_root("drop-then-block-ct");
    let a = session().await;
    let g = FairLock::new(&a, &root).unwrap().lock().await.unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let root = root.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let b = session().await;
                let lock_b = FairLock::new(&b, &root).unwrap();
                let granted = lock_b.lock_timeout(Duration::from_secs(8)).await;
                let _ = tx.send(granted.is_ok());
                if let Ok(g) = granted {
                    g.release().await.unwrap();
                }
                b.close().await;
            })
        })
    };
    while children(&root).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(g);
    let heard = rx.recv_timeout(Duration::from_secs(3));
    waiter.join().unwrap();
    assert_eq!(
        heard,
        Ok(true),
        "the waiter was not granted while the dropping task's (current-thread) runtime was blocked"
    );
    a.close().await;
}

/// CPU time (user + system, in clock ticks) of this process's threads named `name` (as
/// `/proc` shows it: the first 15 bytes).
#[cfg(target_os = "linux")]
fn thread_ticks(name: &str) -> Option<u64> {
    let mut found = None;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // After the command name in parentheses: fields 3.. ; utime and stime are 14 and 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
        *found.get_or_insert(0) += ticks;
    }
    found
}

/// The deadline thread of parked releases sleeps while nothing is parked: after a burst of
/// dropped guards, it uses no CPU over two idle seconds.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_thread_uses_no_cpu_when_idle() {
    let s = session().await;
    let lock = FairLock::new(&s, unique_root("deadline-idle")).unwrap();
    for _ in 0..200 {
        drop(lock.lock().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = thread_ticks("zk-recipes-park").expect("the deadline thread runs");
    std::thread::sleep(Duration::from_secs(2));
    let after = thread_ticks("zk-recipes-park").unwrap();
    assert!(
        after - before <= 1,
        "the deadline thread used {} ticks in 2 idle seconds",
        after - before
    );
    s.close().await;
}

/// A relock's new node deleted by an administrator after the transaction that made it and
/// before the relock read it (ZooKeeper 3.8 answers the transaction without the node's stat,
/// so the first read of the node supplies its fencing token): the relock must not take a
/// node that is not there, nor any other node, for its own. It queues again at the back and is
/// granted on a node of its own, with a token above the deleted one's, and leaves nothing else
/// behind. Uncontended (the read comes just before the grant, request 3) and behind a waiter
/// (the read goes with the watch on the waiter, requests 3 and 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relocks_new_node_deleted_before_it_is_read_is_not_taken() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    for contended in [false, true] {
        let root = unique_root("relock-deleted-unread");
        let (a, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
        let b = session().await;
        let lock_a = FairLock::new(&a, &root).unwrap();
        let ga = lock_a.lock().await.unwrap();
        let old_name = ga.path().rsplit('/').next().unwrap().to_string();
        let waiter = contended.then(|| {
            let lock_b = FairLock::new(&b, &root).unwrap();
            tokio::spawn(async move { lock_b.lock().await })
        });
        while children(&root).await.len() < 1 + usize::from(contended) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stall = Duration::from_millis(800);
        proxy.arm(Fault::new(
            FaultPoint::BeforeRequest(3),
            FaultAction::Stall(stall),
        ));
        let relock = {
            let lock_a = lock_a.clone();
            tokio::spawn(async move { lock_a.relock(ga).await })
        };
        // The transaction and the listing went through: the old node is gone, the new one
        // queued. Delete the new one before its read reaches the server.
        let admin = raw().await;
        let sent = std::time::Instant::now();
        let deleted = loop {
            let names = children(&root).await;
            if !names.contains(&old_name) {
                break names;
            }
            assert!(sent.elapsed() < stall, "the transaction did not go through");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // The newest node is ours (the waiter's is older).
        let newest = deleted
            .iter()
            .max_by_key(|n| sequence_of(n))
            .unwrap()
            .clone();
        let stat = admin
            .check_stat(&format!("{root}/{newest}"))
            .await
            .unwrap()
            .expect("our new node");
        assert_eq!(stat.ephemeral_owner, a.session_id().unwrap());
        admin
            .delete(&format!("{root}/{newest}"), None)
            .await
            .expect("admin delete");
        assert!(
            sent.elapsed() < stall,
            "deleted after the stall: proves nothing"
        );
        if let Some(waiter) = waiter {
            let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("the waiter was not granted")
                .unwrap()
                .unwrap();
            tokio::time::sleep(stall).await;
            assert!(!relock.is_finished(), "relock granted while B holds");
            gb.release().await.unwrap();
        }
        let ga = tokio::time::timeout(Duration::from_secs(10), relock)
            .await
            .expect("the relock hung")
            .unwrap()
            .expect("the relock queues again");
        assert!(
            !ga.path().ends_with(&newest),
            "granted on the deleted node (contended: {contended})"
        );
        assert!(
            ga.fencing_token() > stat.czxid,
            "token {} not above the deleted node's {}",
            ga.fencing_token(),
            stat.czxid
        );
        assert!(!ga.is_lost(), "granted lost");
        assert_only_node(&root, ga.path(), "after the relock").await;
        ga.release().await.unwrap();
        a.close().await;
        b.close().await;
    }
}

/// The children of `root` whose node `session_id` owns.
async fn owned_by(root: &str, session_id: i64) -> Vec<String> {
    let admin = raw().await;
    let mut owned = Vec::new();
    for name in children(root).await {
        if let Ok(Some(stat)) = admin.check_stat(&format!("{root}/{name}")).await {
            if stat.ephemeral_owner == session_id {
                owned.push(name);
            }
        }
    }
    owned
}

/// An acquire cancelled from outside (its future dropped: a `tokio::time::timeout` around
/// `lock()`) in another runtime than its session's, one that runs no task after the
/// cancellation (given `how`: a sync wrapper's `block_on` whose runtime is dropped or kept
/// idle after, or a runtime shutting down under the waiting task), while a holder of another
/// session holds the lock: its node must go all the same. Otherwise it takes the lock when
/// the holder releases, and holds it, for nobody, for as long as the session lives: a third
/// contender is never granted.
async fn an_acquire_cancelled_in_another_runtime_leaves_no_node(how: OtherRuntime) {
    let root = unique_root("cancel-other-runtime");
    let (a, b, c) = (session().await, session().await, session().await);
    let held = FairLock::new(&b, &root).unwrap().lock().await.unwrap();
    let lock_a = FairLock::new(&a, &root).unwrap();
    let kept = std::thread::spawn(move || match how {
        OtherRuntime::BlockOn | OtherRuntime::Idle => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let cancelled = rt.block_on(async move {
                tokio::time::timeout(Duration::from_millis(300), lock_a.lock())
                    .await
                    .is_err()
            });
            assert!(cancelled, "granted while another session holds the lock");
            matches!(how, OtherRuntime::Idle).then_some(rt)
        }
        OtherRuntime::Shutdown => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.spawn(async move {
                let _granted = lock_a.lock().await;
                std::future::pending::<()>().await
            });
            std::thread::sleep(Duration::from_millis(300));
            drop(rt);
            None
        }
    })
    .join()
    .unwrap();
    held.release().await.unwrap();
    let gc = match FairLock::new(&c, &root)
        .unwrap()
        .lock_timeout(Duration::from_secs(5))
        .await
    {
        Ok(gc) => gc,
        Err(e) => panic!(
            "a third contender was not granted within 5 s after the holder released ({e}); \
             left: {:?}, of which {:#x} (the cancelled acquire's session) owns {:?}",
            children(&root).await,
            a.session_id().unwrap(),
            owned_by(&root, a.session_id().unwrap()).await
        ),
    };
    assert_only_node(&root, gc.path(), "the third contender's node only").await;
    gc.release().await.unwrap();
    a.close().await;
    b.close().await;
    c.close().await;
    std::thread::spawn(move || drop(kept)).join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_in_a_block_on_of_a_runtime_dropped_after_leaves_no_node() {
    an_acquire_cancelled_in_another_runtime_leaves_no_node(OtherRuntime::BlockOn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_of_a_task_of_a_runtime_shut_down_leaves_no_node() {
    an_acquire_cancelled_in_another_runtime_leaves_no_node(OtherRuntime::Shutdown).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_in_a_block_on_of_a_runtime_not_driven_again_leaves_no_node() {
    an_acquire_cancelled_in_another_runtime_leaves_no_node(OtherRuntime::Idle).await;
}

/// A guard acquired in another runtime than its session's, one that runs no task after the
/// grant (a sync wrapper's `block_on`, its runtime dropped or kept idle after), and then used
/// on the session's runtime: `lost()` must still fire when its node goes (an administrator
/// deletes it). It is the guard's own promise (the type's docs: it "resolves when the lock is
/// lost while held ... or the node was deleted by someone else"), and a holder not told keeps
/// writing under a lock someone else may hold.
async fn a_guard_acquired_in_another_runtime_is_told_of_its_loss(how: OtherRuntime) {
    let root = unique_root("lost-other-runtime");
    let a = session().await;
    let lock = FairLock::new(&a, &root).unwrap();
    let (g, kept) = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let g = rt.block_on(lock.lock()).expect("lock");
        (g, matches!(how, OtherRuntime::Idle).then_some(rt))
    })
    .join()
    .unwrap();
    // Time for the guard's watch on its own node to be armed, wherever it runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    raw()
        .await
        .delete(g.path(), None)
        .await
        .expect("admin delete");
    let told = tokio::time::timeout(Duration::from_secs(5), g.lost()).await;
    assert!(
        told.is_ok(),
        "lost() had not fired 5 s after the guard's node was deleted (is_lost: {})",
        g.is_lost()
    );
    assert_eq!(g.loss_reason(), Some(LossReason::NodeDeleted));
    drop(g);
    a.close().await;
    std::thread::spawn(move || drop(kept)).join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_acquired_in_a_block_on_of_a_runtime_dropped_after_is_told_of_its_loss() {
    a_guard_acquired_in_another_runtime_is_told_of_its_loss(OtherRuntime::BlockOn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_acquired_in_a_block_on_of_a_runtime_not_driven_again_is_told_of_its_loss() {
    a_guard_acquired_in_another_runtime_is_told_of_its_loss(OtherRuntime::Idle).await;
}

/// An acquire's future is moved whole into a spawned task, into the task's finished stage and
/// out through its `JoinHandle`, and a waiter kept in a `select!` or a `Vec` carries it too: the
/// waiter's state machine (some 13 KB) is on the heap, not in the future. Each queue recipe's
/// acquire future was 14,280 bytes or more before (the drain's hand-offs spent a share of their
/// CPU copying it); 4 KB leaves room for growth without letting the state machine back in.
#[tokio::test]
async fn acquire_futures_keep_the_waiter_on_the_heap() {
    const MAX: usize = 4096;
    let root = unique_root("future-size");
    let s = session().await;
    let fair = FairLock::new(&s, format!("{root}/fair")).unwrap();
    let sem = Semaphore::new(&s, format!("{root}/sem"), 2).unwrap();
    let rw = zk_recipes::RwLock::new(&s, format!("{root}/rw")).unwrap();
    let election = zk_recipes::Election::new(&s, format!("{root}/election"), "me").unwrap();
    let multi = MultiLock::new(&s, &[format!("{root}/a"), format!("{root}/b")]).unwrap();
    let t = Duration::from_secs(1);
    let sizes = [
        ("FairLock::lock", std::mem::size_of_val(&fair.lock())),
        (
            "FairLock::lock_timeout",
            std::mem::size_of_val(&fair.lock_timeout(t)),
        ),
        (
            "FairLock::try_lock",
            std::mem::size_of_val(&fair.try_lock()),
        ),
        ("Semaphore::acquire", std::mem::size_of_val(&sem.acquire())),
        ("RwLock::read", std::mem::size_of_val(&rw.read())),
        ("RwLock::write", std::mem::size_of_val(&rw.write())),
        (
            "Election::campaign",
            std::mem::size_of_val(&election.campaign()),
        ),
        ("MultiLock::lock", std::mem::size_of_val(&multi.lock())),
    ];
    let big: Vec<_> = sizes.iter().filter(|(_, n)| *n > MAX).collect();
    assert!(big.is_empty(), "acquire futures over {MAX} bytes: {big:?}");
    // Made, never polled: nothing was created.
    assert!(children(&root).await.is_empty());
    s.close().await;
}

/// How the connection misbehaves in [`multi_lock_timeout_retake_case`].
#[derive(Debug, Clone, Copy)]
enum Misbehaves {
    /// Holds every request up for 5 s, still connected (a silent server, a stalled route).
    Stalls,
    /// Cut, and reconnects refused for 5 s.
    IsCut,
}

/// `MultiLock::lock_timeout` answers within its timeout (plus the half second a single lock
/// may take to withdraw while connected) whatever the connection does. Here the set's early
/// lock (`a`) is lost while its later lock (`b`) is awaited (an administrator deletes its
/// node), `b` is then granted, and the release of the set before it is taken again meets a
/// connection that misbehaves. That release was awaited with no bound: the answer came after
/// 5.35 s (stalled) and 6.9 s (cut) for a 3 s timeout (found by a review, 2026-11-27).
async fn multi_lock_timeout_retake_case(how: Misbehaves) {
    use std::time::Instant;
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    use zk_recipes::MultiLock;
    let root = unique_root("multi-retake-bounded");
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let (s1, proxy) = session_via_proxy(Duration::from_secs(30), LossPolicy::Grace).await;
    let s2 = session().await;
    let held_b = FairLock::new(&s2, &b).unwrap().lock().await.unwrap();
    let multi = MultiLock::new(&s1, [&a, &b]).unwrap();
    let timeout = Duration::from_secs(3);
    let t0 = Instant::now();
    let mut task = tokio::spawn(async move {
        let r = multi.lock_timeout(timeout).await;
        (r.map(drop), Instant::now())
    });
    // The multi-lock holds a and waits for b.
    let end = Instant::now() + Duration::from_secs(5);
    while !(children(&a).await.len() == 1 && children(&b).await.len() == 2) {
        assert!(
            Instant::now() < end,
            "{how:?}: the multi-lock did not queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a_node = format!("{a}/{}", children(&a).await[0]);
    raw().await.delete(&a_node, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let action = match how {
        Misbehaves::Stalls => FaultAction::Stall(Duration::from_secs(5)),
        Misbehaves::IsCut => FaultAction::Cut {
            refuse_for: Duration::from_secs(5),
        },
    };
    proxy.arm(Fault::new(FaultPoint::BeforeRequest(1), action));
    held_b.release().await.unwrap();
    let (r, at) = tokio::time::timeout(Duration::from_secs(20), &mut task)
        .await
        .unwrap_or_else(|_| panic!("{how:?}: no answer in 20 s"))
        .unwrap();
    let took = at - t0;
    s1.close().await;
    s2.close().await;
    assert!(
        took <= timeout + Duration::from_millis(700),
        "{how:?}: lock_timeout({timeout:?}) answered {r:?} only after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_timeout_stays_bounded_when_retaking_on_a_stalled_connection() {
    multi_lock_timeout_retake_case(Misbehaves::Stalls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_timeout_stays_bounded_when_retaking_on_a_cut_connection() {
    multi_lock_timeout_retake_case(Misbehaves::IsCut).await;
}

/// The ordinary timeout of a multi-lock (its later lock stays held by another session) on a
/// connection that goes silent a second in (every request held up for 6 s, still connected):
/// the later lock's `lock_timeout` answers within its bound, but the release of the earlier
/// one was awaited until the session was not connected, 6.5 s for a 2 s timeout where a
/// single `FairLock::lock_timeout` answers after 2.5 s (found by a review, 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_timeout_stays_bounded_on_a_silent_connection() {
    use std::time::Instant;
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    use zk_recipes::MultiLock;
    let root = unique_root("multi-silent-bounded");
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let (s1, proxy) = session_via_proxy(Duration::from_secs(30), LossPolicy::Grace).await;
    let s2 = session().await;
    let held_b = FairLock::new(&s2, &b).unwrap().lock().await.unwrap();
    let multi = MultiLock::new(&s1, [&a, &b]).unwrap();
    let timeout = Duration::from_secs(2);
    // Every request from 1 s on is held up for 6 s.
    let arm = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        proxy.arm(Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Stall(Duration::from_secs(6)),
        ));
    };
    let t0 = Instant::now();
    let (r, ()) = tokio::join!(multi.lock_timeout(timeout), arm);
    let took = t0.elapsed();
    assert!(
        took <= timeout + Duration::from_millis(700),
        "multi lock_timeout({timeout:?}) answered {:?} after {took:?}",
        r.map(drop)
    );
    drop(held_b);
    s1.close().await;
    s2.close().await;
}
