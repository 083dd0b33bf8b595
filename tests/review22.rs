//! Review 22: probes of 3b9c475 (plain-delete fallback after a refused mark, the merged
//! path's plain delete, the stuck registry noted by the cleanup, chroot-joined reserved-tree
//! check).
mod support;

use std::time::Duration;

use support::zk::{session, session_via_proxy};
use zk_recipes::testing::{shared_server, unique_root};
use zk_recipes::{zk, Error, FairLock, LossPolicy};

async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(15), fut)
        .await
        .unwrap_or_else(|_| panic!("expected {what} within 15 s"))
}

async fn admin() -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", zk_recipes::testing::SUPER_AUTH.as_bytes())
        .connect(&shared_server().connect_string())
        .await
        .expect("connect as the administrator")
}

/// Another client with a digest identity of its own: a node it makes with `creator_all`
/// (plus READ for anyone) is writable by it alone.
async fn other_client() -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", b"review22-other:secret")
        .connect(&shared_server().connect_string())
        .await
        .expect("connect as another identity")
}

fn others_acl() -> Vec<zk::Acl> {
    vec![
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
        zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
    ]
}

async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

/// A directory whose ACL lets anyone create, read and write but not delete.
async fn a_directory_denying_delete(admin: &zk::Client, path: &str) {
    use zk::Permission as P;
    let acl = [zk::Acl::new(
        P::CREATE | P::READ | P::WRITE,
        zk::AuthId::anyone(),
    )];
    admin
        .create(
            path,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)),
        )
        .await
        .unwrap();
}

/// 1. An explicit `relock()` of a guard whose node an administrator made read-only (the
/// directory allows everything). The merged `lock()` (review 21) deletes the old node plainly
/// and queues; the release deletes it plainly. `relock()` should do as well (or at least not
/// answer a permission error while the old node is in fact deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_relock_of_a_node_made_read_only_is_not_no_auth() {
    let admin = admin().await;
    let dir = unique_root("r22-relock-ro");
    admin
        .create(
            &dir,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let old = g.path().to_string();
    admin
        .set_acl(
            &old,
            &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
            None,
        )
        .await
        .unwrap();
    let relocked = within("relock", lock.relock(g)).await;
    let described = match &relocked {
        Ok(g) => format!("Ok({})", g.path()),
        Err(e) => format!("Err({e:?})"),
    };
    println!("relock answered {described}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_left = admin.check_stat(&old).await.unwrap().is_some();
    let left = children(&admin, &dir).await;
    println!("old node left: {old_left}; children: {left:?}");
    if let Ok(g) = relocked {
        g.release().await.unwrap();
        s.close().await;
        return;
    }
    s.close().await;
    panic!(
        "relock answered {described} on a directory that allows everything, and the old node \
         was {} (children after: {left:?})",
        if old_left { "left" } else { "deleted anyway, in the background" }
    );
}

/// 2. A guard that lost its node (an administrator deleted it) and whose path another client
/// then made a node of its own at (an ACL that gives us no WRITE): `release()` must answer
/// `LockLost` and must not delete that node. Before 3b9c475 the mark's refusal kept the node
/// (NoAuth); the plain-delete fallback deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_release_of_a_lost_guard_leaves_a_node_made_at_its_path_by_another() {
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("r22-lost-recreated");
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let path = g.path().to_string();
    admin.delete(&path, None).await.unwrap();
    within("the guard told of its loss", g.lost()).await;
    assert!(g.is_lost());
    // Another client makes its own node at the same path (a restore, a copy tool, ...).
    other
        .create(
            &path,
            b"someone else's",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&others_acl())),
        )
        .await
        .unwrap();
    let theirs = other.check_stat(&path).await.unwrap().expect("their node");
    let released = within("release", g.release()).await;
    println!("release of the lost guard answered {released:?}");
    let now = other.check_stat(&path).await.unwrap();
    println!(
        "their node (owner {:#x}) after the release: {:?}",
        theirs.ephemeral_owner,
        now.map(|s| s.czxid)
    );
    s.close().await;
    assert!(
        now.is_some_and(|st| st.czxid == theirs.czxid)
            && matches!(released, Err(Error::LockLost(_))),
        "the release of a lost guard answered {released:?} and their node is {}",
        if now.is_some() { "still there" } else { "DELETED" }
    );
}

/// 3. The merged path: the holder's replies are held while an administrator deletes its node
/// and another client makes its own node at that path; the holder drops its guard (not told
/// of the loss) and `lock()` merges the release. The mark is refused (not our node): the
/// merged path's plain delete must not take the other client's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_merged_lock_leaves_a_node_made_at_the_dropped_path_by_another() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("r22-merge-recreated");
    let (a, proxy) = session_via_proxy(Duration::from_secs(6), LossPolicy::OnExpiry).await;
    let lock = FairLock::new(&a, &dir).unwrap();
    let g = lock.lock().await.unwrap();
    let old = g.path().to_string();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Stall(Duration::from_millis(1500)),
    ));
    let listing = tokio::spawn({
        let lock = lock.clone();
        async move { lock.contenders().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    admin.delete(&old, None).await.unwrap();
    other
        .create(
            &old,
            b"someone else's",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&others_acl())),
        )
        .await
        .unwrap();
    let theirs = other.check_stat(&old).await.unwrap().expect("their node");
    assert!(!g.is_lost(), "the holder was told: the test proves nothing");
    let again = {
        let lock = lock.clone();
        tokio::spawn(async move {
            drop(g);
            lock.lock_timeout(Duration::from_secs(8)).await
        })
    };
    let result = within("the merged lock()", again).await.unwrap();
    let _ = listing.await;
    let now = other.check_stat(&old).await.unwrap();
    println!(
        "merged lock() answered {:?}; their node after: {:?}",
        result.as_ref().map(|g| g.path().to_string()),
        now.map(|s| s.czxid)
    );
    if let Ok(g) = result {
        let _ = g.release().await;
    }
    a.close().await;
    assert!(
        now.is_some_and(|st| st.czxid == theirs.czxid),
        "the merged lock() deleted the node another client made at the dropped guard's path"
    );
}

/// 4. A hang left in the stuck registry: our own undeletable node is at the head of the queue,
/// and two waiters of other sessions (blocked behind it for as long as our session lives) are
/// between it and our next `lock()`. With one such waiter our `lock()` answers `NoAuth`
/// (the stuck node is in its window); with two, the stuck node is cut from its window of two,
/// and the `lock()` waits until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_our_stuck_node_behind_two_foreign_waiters_still_answers_no_auth() {
    let admin = admin().await;
    let mut outcomes = Vec::new();
    for waiters in [1usize, 2] {
        let dir = unique_root(&format!("r22-stuck-window-{waiters}"));
        a_directory_denying_delete(&admin, &dir).await;
        let s = session().await;
        let lock = FairLock::new(&s, &dir).unwrap();
        let g = within("lock", lock.lock()).await.unwrap();
        let released = within("release", g.release()).await;
        assert!(
            matches!(released, Err(Error::NoAuth { .. })),
            "the release in a no-DELETE directory answered {released:?}"
        );
        let mut others = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..waiters {
            let o = session().await;
            let l = FairLock::new(&o, &dir).unwrap();
            tasks.push(tokio::spawn(async move {
                l.lock_timeout(Duration::from_secs(20)).await.map(drop)
            }));
            others.push(o);
        }
        let by = std::time::Instant::now() + Duration::from_secs(5);
        while children(&admin, &dir).await.len() < 1 + waiters {
            assert!(std::time::Instant::now() < by, "the waiters did not queue");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let again = tokio::time::timeout(Duration::from_secs(6), lock.lock())
            .await
            .map(|r| r.map(drop));
        println!(
            "{waiters} foreign waiter(s): our lock() answered {:?}",
            again.as_ref().map_err(|_| "nothing within 6 s")
        );
        outcomes.push((waiters, format!("{:?}", again.as_ref().map_err(|_| "nothing within 6 s")),
            matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir)));
        for t in tasks {
            t.abort();
        }
        for o in others {
            o.close().await;
        }
        s.close().await;
    }
    assert!(
        outcomes.iter().all(|(_, _, ok)| *ok),
        "a lock() queued behind our own undeletable node (directory without DELETE): {outcomes:?}"
    );
}

/// 2b. As 2, but the holder is not yet told of the loss (its replies are held while an
/// administrator deletes its node and another client makes its own at that path): the
/// explicit `release()` (mark refused: not our node) falls back to a plain delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r22_release_not_yet_told_leaves_a_node_made_at_its_path_by_another() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("r22-release-recreated");
    let (a, proxy) = session_via_proxy(Duration::from_secs(6), LossPolicy::OnExpiry).await;
    let lock = FairLock::new(&a, &dir).unwrap();
    let g = lock.lock().await.unwrap();
    let old = g.path().to_string();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(1),
        FaultAction::Stall(Duration::from_millis(1500)),
    ));
    let listing = tokio::spawn({
        let lock = lock.clone();
        async move { lock.contenders().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    admin.delete(&old, None).await.unwrap();
    other
        .create(
            &old,
            b"someone else's",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&others_acl())),
        )
        .await
        .unwrap();
    let theirs = other.check_stat(&old).await.unwrap().expect("their node");
    assert!(!g.is_lost(), "the holder was told: the test proves nothing");
    let released = within("release", g.release()).await;
    let _ = listing.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = other.check_stat(&old).await.unwrap();
    println!(
        "release answered {released:?}; their node after: {:?}",
        now.map(|s| s.czxid)
    );
    a.close().await;
    assert!(
        now.is_some_and(|st| st.czxid == theirs.czxid) && released.is_err(),
        "the release answered {released:?} and their node is {}",
        if now.is_some() { "still there" } else { "DELETED" }
    );
}
