//! Regression tests for the holes of the safety issue: each one failed on the code before
//! its fix (the lock was handed on wrongly, a live guard's node was deleted, a free permit
//! sat idle, contenders of different kinds shared a path).
mod support;

use std::future::Future;
use std::time::Duration;

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
    let a = Semaphore::new(&sa, &dir, 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let b = Semaphore::new(&sb, &dir, 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let sem_c = Semaphore::new(&sc, &dir, 2).unwrap();
    let mut c = tokio::spawn(async move { sem_c.acquire().await });
    wait_for_children(&dir, 3).await;
    let sem_d = Semaphore::new(&sd, &dir, 2).unwrap();
    let mut d = tokio::spawn(async move { sem_d.acquire().await });
    wait_for_children(&dir, 4).await;
    // The second holder (not the first) leaves: the head waiter C gets its permit.
    b.release().await.unwrap();
    let c = tokio::time::timeout(Duration::from_secs(2), &mut c)
        .await
        .expect("a free permit sat idle: C not granted within 2 s of B's release")
        .unwrap()
        .expect("C acquire");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut d)
            .await
            .is_err(),
        "D was granted a third permit"
    );
    // Now C (granted after waiting) leaves before A: D, now the head, gets it.
    c.release().await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(2), &mut d)
        .await
        .expect("D not granted within 2 s of C's release")
        .unwrap()
        .expect("D acquire");
    d.release().await.unwrap();
    a.release().await.unwrap();
    assert!(children(&dir).await.is_empty());
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
    // The same count is welcome; once all are gone, another count may take the path.
    let h3 = Semaphore::new(&s2, &dir, 2).unwrap().try_acquire().await;
    assert!(matches!(h3, Err(Error::WouldBlock)), "{h3:?}");
    h1.release().await.unwrap();
    h2.release().await.unwrap();
    let h4 = Semaphore::new(&s2, &dir, 5).unwrap().try_acquire().await;
    assert!(h4.is_ok(), "a new count on a free path: {h4:?}");
    h4.unwrap().release().await.unwrap();
}
