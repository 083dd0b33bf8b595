//! Refused releases: our node the server will not let us delete or mark (a directory without
//! DELETE, a node an administrator made read-only), and another client's node made at our
//! node's path after ours went. The library must never delete a node that is not ours, must
//! say `NoAuth` (not `Ok`, not a hang) while our node stays, and must not wait behind a node
//! of ours that stays for ever. From review 22 (2026-11-27, fifth session).
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

/// Given an administrator who makes our fair-lock node read-only (the directory allows
/// everything), when the guard is relocked, then the relock answers `NoAuth` and the old node
/// stays, ours: its mark is refused, and it is never deleted plainly, since a plain delete
/// cannot tell our node from one made at its path by someone else (see the tests below).
/// Review 22 saw the relock answer `NoAuth` while the background fallback of 3b9c475 deleted
/// the node anyway; that fallback is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_of_a_node_made_read_only_answers_no_auth_and_leaves_it() {
    let admin = admin().await;
    let dir = unique_root("refused-relock-ro");
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
    let relocked = within("relock", lock.relock(g)).await.map(drop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = admin.check_stat(&old).await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .map(|r| r.map(drop));
    let ours = s.session_id();
    s.close().await;
    assert!(
        matches!(&relocked, Err(Error::NoAuth { path }) if *path == old),
        "relock answered {relocked:?}"
    );
    assert_eq!(
        left.map(|st| st.ephemeral_owner),
        ours,
        "the read-only node must stay, ours"
    );
    assert!(
        matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir),
        "the next lock() behind it answered {again:?}"
    );
}

/// Given a guard that lost its node (an administrator deleted it) and whose path another client
/// then made a node of its own at (an ACL that gives us no WRITE): `release()` must answer
/// `LockLost` and must not delete that node. Before 3b9c475 the mark's refusal kept the node
/// (NoAuth); the plain-delete fallback deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_of_a_lost_guard_leaves_a_node_made_at_its_path_by_another() {
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("refused-lost-recreated");
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
        if now.is_some() {
            "still there"
        } else {
            "DELETED"
        }
    );
}

/// The merged path: the holder's replies are held while an administrator deletes its node
/// and another client makes its own node at that path; the holder drops its guard (not told
/// of the loss) and `lock()` merges the release. The mark is refused (not our node): the
/// merged path's plain delete must not take the other client's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_lock_leaves_a_node_made_at_the_dropped_path_by_another() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("refused-merge-recreated");
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

/// A hang left in the stuck registry (review 22; fixed): our own undeletable node is at the head of the queue,
/// and two waiters of other sessions (blocked behind it for as long as our session lives) are
/// between it and our next `lock()`. With one such waiter our `lock()` answers `NoAuth`
/// (the stuck node is in its window); with two, the stuck node is cut from its window of two,
/// and the `lock()` waits until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_stuck_node_behind_two_foreign_waiters_still_answers_no_auth() {
    let admin = admin().await;
    let mut outcomes = Vec::new();
    for waiters in [1usize, 2] {
        let dir = unique_root(&format!("refused-stuck-window-{waiters}"));
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
        outcomes.push((
            waiters,
            format!("{:?}", again.as_ref().map_err(|_| "nothing within 6 s")),
            matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir),
        ));
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

/// As the lost guard's test, but the holder is not yet told of the loss (its replies are held while an
/// administrator deletes its node and another client makes its own at that path): the
/// explicit `release()` (mark refused: not our node) falls back to a plain delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_not_yet_told_leaves_a_node_made_at_its_path_by_another() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("refused-release-recreated");
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
        if now.is_some() {
            "still there"
        } else {
            "DELETED"
        }
    );
}
