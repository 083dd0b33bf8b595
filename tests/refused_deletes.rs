//! Refused releases: our node the server will not let us delete or mark (a directory without
//! DELETE, a node an administrator made read-only), and another client's node made at our
//! node's path after ours went. The library must never delete a node that is not ours, must
//! say `NoAuth` (not `Ok`, not a hang) while our node stays, and must not wait behind a node
//! of ours that stays for ever. From review 22 (2026-11-27, fifth session).
mod support;

use std::time::Duration;

use support::acl::{
    a_directory_denying_delete, an_open_directory, children, delete_given_back, deny_delete, within,
};
use support::stuck::{
    a_session_and_a_directory_denying_delete, a_stuck_node, a_stuck_simple_lock_node, refused,
};
use support::zk::{admin, forwarded_in, raw, session, session_via_proxy};
use zk_recipes::testing::{shared_server, unique_root, Fault, FaultAction, FaultPoint, Op};
use zk_recipes::{zk, Error, ExclusiveLock, FairLock, LossPolicy, RwLock, Semaphore};

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

/// The administrator makes `node` read-only (READ for anyone, nothing else).
async fn made_read_only(admin: &zk::Client, node: &str) {
    admin
        .set_acl(
            node,
            &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
            None,
        )
        .await
        .unwrap();
}

/// Given an administrator who makes our fair-lock node read-only (the directory allows
/// everything), when the guard is relocked, then the relock answers `NoAuth` (its mark is
/// refused) and the old node stays, ours, until the next `lock()`, which reads it, finds it
/// still ours, deletes it plainly (the directory allows that) and is granted. Review 22 saw
/// the relock answer `NoAuth` while the background fallback of 3b9c475 deleted the node anyway
/// without reading it; that fallback is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relock_of_a_node_made_read_only_answers_no_auth_and_the_next_lock_deletes_it() {
    a_node_made_read_only(ReadOnlyEnd::Relock, false).await;
}

/// The same, ended by `release()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_a_node_made_read_only_answers_no_auth_and_the_next_lock_deletes_it() {
    a_node_made_read_only(ReadOnlyEnd::Release, false).await;
}

/// The same, but before the next `lock()` an administrator deletes our read-only node and
/// another client makes one of its own at that name, open to anyone (so that neither a plain
/// delete nor a marked one would be refused): the `lock()` must not delete it (its czxid is
/// not the one noted), and is granted once its owner removes it a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_made_at_the_name_of_our_read_only_node_is_not_deleted_by_the_next_lock() {
    a_node_made_read_only(ReadOnlyEnd::Release, true).await;
    a_node_made_read_only(ReadOnlyEnd::Relock, true).await;
}

/// How the guard of a node an administrator made read-only ends.
#[derive(Debug, Clone, Copy)]
enum ReadOnlyEnd {
    Release,
    Relock,
}

/// Given an administrator who makes our fair-lock node read-only (its ACL; the directory
/// allows everything), when the guard ends as `end` says, then it answers `NoAuth` on the
/// node and the node stays, ours. Then the next `lock()` deletes it and is granted; or, when
/// `replaced`, another client's node now at that name (open to anyone) is left to its owner,
/// who removes it after a second, and the `lock()` is granted after that.
async fn a_node_made_read_only(end: ReadOnlyEnd, replaced: bool) {
    let admin = admin().await;
    let dir = unique_root("refused-read-only");
    an_open_directory(&admin, &dir).await;
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let node = g.path().to_string();
    made_read_only(&admin, &node).await;
    let ended = match end {
        ReadOnlyEnd::Release => within("release", g.release()).await,
        ReadOnlyEnd::Relock => within("relock", lock.relock(g)).await.map(drop),
    };
    // A relock's old node is released in the background after its refusal: give it time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = admin.check_stat(&node).await.unwrap();
    let ours = s.session_id();
    assert!(
        matches!(&ended, Err(Error::NoAuth { path }) if *path == node),
        "{end:?} answered {ended:?}"
    );
    assert_eq!(
        left.map(|st| st.ephemeral_owner),
        ours,
        "{end:?}: the read-only node must stay, ours"
    );
    let mut remover = None;
    if replaced {
        admin.delete(&node, None).await.unwrap();
        let other = other_client().await;
        other
            .create(
                &node,
                b"someone else's",
                &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .unwrap();
        remover = Some(tokio::spawn({
            let node = node.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Fails with NoNode if our lock() deleted it.
                let removed = other.delete(&node, None).await;
                (other, removed)
            }
        }));
    }
    let again = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .map(|r| r.map(|g| g.path().to_string()));
    let removed = match remover {
        Some(r) => Some(r.await.unwrap().1),
        None => None,
    };
    let now = admin.check_stat(&node).await.unwrap();
    println!("{end:?} (replaced: {replaced}): the next lock() answered {again:?}; the other client's removal {removed:?}; node now {now:?}");
    s.close().await;
    assert!(
        matches!(&again, Ok(Ok(_))),
        "{end:?}: the next lock() behind it answered {again:?}"
    );
    if replaced {
        assert!(
            matches!(removed, Some(Ok(()))),
            "{end:?}: the other client's node was deleted by us: its owner's delete answered {removed:?}"
        );
    } else {
        assert!(now.is_none(), "{end:?}: our read-only node is still there");
    }
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

/// A holder whose node was replaced behind its back: its session's replies are held (so it is
/// not told), an administrator deletes its node, and another client (its own identity, an ACL
/// that gives us no WRITE) makes a node of its own at the same path.
struct Replaced {
    a: zk_recipes::Session,
    lock: FairLock,
    g: zk_recipes::LockGuard,
    old: String,
    other: zk::Client,
    theirs: zk::Stat,
    listing: tokio::task::JoinHandle<zk_recipes::Result<Vec<zk_recipes::Contender>>>,
    _proxy: zk_recipes::testing::FaultProxy,
}

async fn a_holder_replaced_unawares(name: &str) -> Replaced {
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root(name);
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
    Replaced {
        a,
        lock,
        g,
        old,
        other,
        theirs,
        listing,
        _proxy: proxy,
    }
}

/// The merged path: the holder's replies are held while an administrator deletes its node
/// and another client makes its own node at that path; the holder drops its guard (not told
/// of the loss) and `lock()` merges the release. The mark is refused (not our node): the
/// merged path's plain delete must not take the other client's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_lock_leaves_a_node_made_at_the_dropped_path_by_another() {
    let Replaced {
        a,
        lock,
        g,
        old,
        other,
        theirs,
        listing,
        _proxy,
    } = a_holder_replaced_unawares("refused-merge-recreated").await;
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
    let Replaced {
        a,
        g,
        old,
        other,
        theirs,
        listing,
        _proxy,
        ..
    } = a_holder_replaced_unawares("refused-release-recreated").await;
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

// ------------------------------------------------------------------------- review 23

/// Attack 1: a release refused by the directory (no DELETE) whose follow-up read of the node
/// is lost to a connection blip. The node stays, ours, until the session ends; the next
/// `lock()` of this session queues behind it and must answer `NoAuth` (as it does when the
/// read gets through), not wait until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_release_whose_read_is_cut_still_makes_the_next_lock_no_auth() {
    let (admin, dir, s, proxy) =
        a_session_and_a_directory_denying_delete("r23-refused-read-cut", Duration::from_secs(8))
            .await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let node = g.path().to_string();
    // The release's multi (refused, NoAuth), then its read of the node (`exists`): the fault
    // counts reads of that kind only, so the guard's own-node watch, sent in the background
    // after the grant, cannot take it.
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Cut {
                refuse_for: Duration::ZERO,
            },
        )
        .only(Op::Exists),
    );
    let released = within("release", g.release()).await;
    println!("release answered {released:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let left = admin.check_stat(&node).await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(6), lock.lock())
        .await
        .map(|r| r.map(drop));
    println!(
        "node after the release: owner {:?} (ours {:?}); next lock() answered {:?}",
        left.map(|st| format!("{:#x}", st.ephemeral_owner)),
        s.session_id().map(|id| format!("{id:#x}")),
        again.as_ref().map_err(|_| "nothing within 6 s")
    );
    s.close().await;
    assert!(
        matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir),
        "release answered {released:?}; our undeletable node stays; the next lock() behind it answered {:?}",
        again.as_ref().map_err(|_| "nothing within 6 s (it waits until the session ends)")
    );
}

/// Attack 3: a stale registry entry. Our node in a no-DELETE directory is noted stuck; an
/// administrator deletes it, and another client makes a node of its own with the same name
/// (anyone may create any name; review 22's threat model). Our next `lock()` queues behind
/// that foreign node, which its owner removes a second later: the lock must be granted,
/// not answer `NoAuth` (the foreign node is not ours and does not stay for ever). Failed on
/// d3c476a (ignored then): the node was known by name, and the lock answered `NoAuth`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_node_at_the_name_of_our_deleted_stuck_node_is_not_taken_for_ours() {
    let admin = admin().await;
    let other = other_client().await;
    let dir = unique_root("r23-stale-stuck");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let node = g.path().to_string();
    let released = within("release", g.release()).await;
    assert!(
        matches!(released, Err(Error::NoAuth { .. })),
        "setup: the release answered {released:?}"
    );
    admin.delete(&node, None).await.unwrap();
    other
        .create(
            &node,
            b"someone else's",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&others_acl())),
        )
        .await
        .unwrap();
    let remover = tokio::spawn({
        let node = node.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            admin.delete(&node, None).await.unwrap();
            admin
        }
    });
    let again = tokio::time::timeout(Duration::from_secs(8), lock.lock())
        .await
        .map(|r| r.map(|g| g.path().to_string()));
    let admin = remover.await.unwrap();
    println!(
        "next lock() behind the foreign node answered {:?}",
        again.as_ref().map_err(|_| "nothing within 8 s")
    );
    let _ = children(&admin, &dir).await;
    s.close().await;
    assert!(
        matches!(&again, Ok(Ok(_))),
        "the lock() behind another client's node (gone a second later) answered {:?}",
        again.as_ref().map_err(|_| "nothing within 8 s")
    );
}

/// Attack 2: the merged path for a reader. In a directory denying DELETE, a read guard
/// dropped and followed at once by `read()` merges the release into the read's create. The
/// old reader node stays (undeletable), but a stuck reader never blocks a reader: `read()`
/// must be granted, as it is when the guard is released first (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_merged_with_a_dropped_read_guard_in_a_no_delete_directory_is_granted() {
    let admin = admin().await;
    let mut outcomes = Vec::new();
    for merged in [false, true] {
        let dir = unique_root(&format!("r23-merged-read-{merged}"));
        a_directory_denying_delete(&admin, &dir).await;
        let s = session().await;
        let lock = RwLock::new(&s, &dir).unwrap();
        let g = within("read", lock.read()).await.unwrap();
        let again = if merged {
            drop(g);
            tokio::time::timeout(Duration::from_secs(6), lock.read())
                .await
                .map(|r| r.map(drop))
        } else {
            let released = within("release", g.release()).await;
            println!("control: release answered {released:?}");
            tokio::time::timeout(Duration::from_secs(6), lock.read())
                .await
                .map(|r| r.map(drop))
        };
        let desc = format!("{:?}", again.as_ref().map_err(|_| "nothing within 6 s"));
        println!("merged={merged}: read() answered {desc}");
        outcomes.push((merged, desc, matches!(again, Ok(Ok(())))));
        s.close().await;
    }
    assert!(
        outcomes.iter().all(|(_, _, ok)| *ok),
        "read() behind our own undeletable reader (merged = the guard dropped just before): {outcomes:?}"
    );
}

/// Attack 3 (consistency): `try_lock()` behind our own undeletable node. The simple lock's
/// `try_lock` answers `NoAuth` there (review 20); a fair lock's answers `WouldBlock`, which
/// `is_retryable()` calls retryable, though no retry can ever succeed while the session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_behind_our_stuck_node_answers_no_auth_not_would_block() {
    let admin = admin().await;
    let dir = unique_root("r23-try-stuck");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let lock = a_stuck_node(&s, &dir).await;
    let tried = within("try_lock", lock.try_lock()).await.map(drop);
    println!(
        "try_lock behind our stuck node answered {tried:?} (retryable: {:?})",
        tried.as_ref().err().map(Error::is_retryable)
    );
    s.close().await;
    assert!(
        matches!(&tried, Err(Error::NoAuth { path }) if *path == dir),
        "try_lock behind our own undeletable node answered {tried:?}"
    );
}

/// Held-check for the semaphore count: a semaphore of two, one lease of ours stuck (no
/// DELETE), one lease of another session that leaves a second later: the third acquire must
/// be granted (one stuck lease of two permits does not block for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_two_with_one_stuck_lease_and_a_leaving_holder_grants() {
    let admin = admin().await;
    let dir = unique_root("r23-sem-stuck");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let sem = zk_recipes::Semaphore::new(&s, &dir, 2).unwrap();
    let g = within("acquire", sem.acquire()).await.unwrap();
    refused(g.release()).await;
    let o = session().await;
    let osem = zk_recipes::Semaphore::new(&o, &dir, 2).unwrap();
    let og = within("other acquire", osem.acquire()).await.unwrap();
    let leaving = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(og);
        // Its delete is refused too (no DELETE for anyone): the other session ends instead.
        o.close().await;
    });
    let third = tokio::time::timeout(Duration::from_secs(8), sem.acquire())
        .await
        .map(|r| r.map(drop));
    leaving.await.unwrap();
    println!(
        "third acquire answered {:?}",
        third.as_ref().map_err(|_| "nothing within 8 s")
    );
    s.close().await;
    assert!(matches!(third, Ok(Ok(()))), "third acquire: {third:?}");
}

/// Review 23's attack 3/4, a refusal that is not permanent: our fair-lock node stays in a
/// directory denying DELETE (its release was refused), and the next `lock()` answers `NoAuth`,
/// whose message advises changing the ACL. The administrator does; then the next `lock()` is
/// granted, and our old node is gone. Failed on d3c476a (ignored then): the first refusal was
/// final for the session, and every acquire answered `NoAuth` until it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_as_the_error_advises_the_next_lock_is_granted() {
    after_the_acl_is_fixed(StuckBy::FairRelease).await;
}

/// The same, with our node left by an acquire given up (its future dropped): the cleanup's
/// refusal notes the node by its name alone, and it is read before its delete is tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_a_cancelled_acquires_node_goes_and_the_next_lock_is_granted() {
    after_the_acl_is_fixed(StuckBy::FairCancelled).await;
}

/// The same, asked by `try_lock()`, which must not answer `WouldBlock` behind a node that can
/// go now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_try_lock_is_granted() {
    after_the_acl_is_fixed(StuckBy::FairReleaseThenTry).await;
}

/// The same for the simple lock, whose node is at a path every contender shares (its delete
/// is conditional on our node's czxid, under the path's serializer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_the_simple_lock_is_granted() {
    after_the_acl_is_fixed(StuckBy::ExclusiveRelease).await;
    after_the_acl_is_fixed(StuckBy::ExclusiveReleaseThenTry).await;
}

/// How our node came to stay in a directory denying DELETE, and which acquire asks next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StuckBy {
    FairRelease,
    FairReleaseThenTry,
    FairCancelled,
    ExclusiveRelease,
    ExclusiveReleaseThenTry,
}

/// Given our node stuck in a directory denying DELETE as `by` says, the next acquire answers
/// `NoAuth` on the directory; once the administrator gives DELETE back, the next acquire is
/// granted, and after its release the directory is empty (our old node was deleted, not
/// left).
async fn after_the_acl_is_fixed(by: StuckBy) {
    let admin = admin().await;
    let dir = unique_root(&format!("acl-fixed-{by:?}"));
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let fair = FairLock::new(&s, &dir).unwrap();
    let simple = ExclusiveLock::new(&s, format!("{dir}/lock")).unwrap();
    let exclusive = matches!(
        by,
        StuckBy::ExclusiveRelease | StuckBy::ExclusiveReleaseThenTry
    );
    let try_only = matches!(
        by,
        StuckBy::FairReleaseThenTry | StuckBy::ExclusiveReleaseThenTry
    );
    // The guard is kept (its path, and the guard itself so that its node stays).
    type Got = Result<(String, Box<dyn std::any::Any>), Error>;
    let acquire = || async {
        fn kept<G: 'static>(path: String, g: G) -> (String, Box<dyn std::any::Any>) {
            (path, Box::new(g))
        }
        let got: Result<Got, _> = match (exclusive, try_only) {
            (false, false) => tokio::time::timeout(Duration::from_secs(5), fair.lock())
                .await
                .map(|r| r.map(|g| kept(g.path().to_string(), g))),
            (false, true) => Ok(within("try_lock", fair.try_lock())
                .await
                .map(|g| kept(g.path().to_string(), g))),
            (true, false) => tokio::time::timeout(Duration::from_secs(5), simple.lock())
                .await
                .map(|r| r.map(|g| kept(g.path().to_string(), g))),
            (true, true) => Ok(within("try_lock", simple.try_lock())
                .await
                .map(|g| kept(g.path().to_string(), g))),
        };
        got.unwrap_or_else(|_| panic!("{by:?}: nothing within 5 s"))
    };
    match by {
        StuckBy::FairCancelled => {
            let holder = session().await;
            let held = within("holder", FairLock::new(&holder, &dir).unwrap().lock())
                .await
                .unwrap();
            let gave_up = tokio::time::timeout(Duration::from_millis(700), fair.lock()).await;
            assert!(gave_up.is_err(), "the lock was busy");
            tokio::time::sleep(Duration::from_millis(500)).await;
            drop(held);
            holder.close().await;
        }
        _ => {
            let released = if exclusive {
                within(
                    "release",
                    within("lock", simple.lock()).await.unwrap().release(),
                )
                .await
            } else {
                within(
                    "release",
                    within("lock", fair.lock()).await.unwrap().release(),
                )
                .await
            };
            assert!(
                matches!(released, Err(Error::NoAuth { .. })),
                "{by:?}, setup: the release answered {released:?}"
            );
        }
    }
    let stuck = children(&admin, &dir).await;
    assert_eq!(stuck.len(), 1, "{by:?}, setup: our node stays: {stuck:?}");
    let before = acquire().await.map(|(path, _)| path);
    assert!(
        matches!(&before, Err(Error::NoAuth { path }) if *path == dir),
        "{by:?}: before the ACL was fixed, the acquire answered {before:?}"
    );
    delete_given_back(&admin, &dir).await;
    let after = acquire().await;
    let left = children(&admin, &dir).await;
    let shown = after.as_ref().map(|(path, _)| path);
    println!("{by:?}: before the fix {before:?}, after {shown:?}; nodes then: {left:?}");
    let (granted, _guard) = after.unwrap_or_else(|e| {
        panic!("{by:?}: after DELETE was given back, the acquire answered {e:?} ({left:?})")
    });
    assert!(
        !left.contains(&stuck[0]) || exclusive && granted == format!("{dir}/{}", stuck[0]),
        "{by:?}: our old node {} is still there: {left:?}",
        stuck[0]
    );
    assert_eq!(left.len(), 1, "{by:?}: only the new guard's node: {left:?}");
    s.close().await;
    assert!(
        children(&admin, &dir).await.is_empty(),
        "{by:?}: a node outlived the session"
    );
}

/// Cost: the requests our `lock()` sends while it waits behind a holder and two waiters of
/// other sessions (its window of two cut), in a session that never met an undeletable node,
/// and in one that met one once, in another directory. Prints both; expects them equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_lock_costs_the_same_after_a_stuck_node_elsewhere() {
    let plain = contended_lock_requests(Before::Nothing).await;
    let after = contended_lock_requests(Before::StuckElsewhere).await;
    assert_eq!(
        plain, after,
        "requests of a contended lock() (nothing stuck, a stuck node elsewhere)"
    );
}

/// What our session met before the contended `lock()` that [`contended_lock_requests`]
/// counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    Nothing,
    /// A node of ours stuck in another directory (its release refused).
    StuckElsewhere,
    /// A node of ours in this directory made read-only, its release refused, then deleted by
    /// an administrator: its note outlives it unless a listing forgets it.
    StaleNoteHere,
}

/// The requests our `lock()` sends while it waits behind a holder and two waiters of other
/// sessions (its window of two cut), after `before`.
async fn contended_lock_requests(before: Before) -> u64 {
    let admin = admin().await;
    let dir = unique_root(&format!("cost-{before:?}"));
    an_open_directory(&admin, &dir).await;
    let (p, proxy) = session_via_proxy(Duration::from_secs(8), LossPolicy::OnExpiry).await;
    match before {
        Before::Nothing => {}
        Before::StuckElsewhere => {
            let other_dir = unique_root("cost-stuck");
            a_directory_denying_delete(&admin, &other_dir).await;
            let l = FairLock::new(&p, &other_dir).unwrap();
            let g = within("lock", l.lock()).await.unwrap();
            assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
        }
        Before::StaleNoteHere => {
            let l = FairLock::new(&p, &dir).unwrap();
            let g = within("lock", l.lock()).await.unwrap();
            let node = g.path().to_string();
            made_read_only(&admin, &node).await;
            assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
            admin.delete(&node, None).await.unwrap();
        }
    }
    let o1 = session().await;
    let g1 = within("holder", FairLock::new(&o1, &dir).unwrap().lock())
        .await
        .unwrap();
    let mut others = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let o = session().await;
        let l = FairLock::new(&o, &dir).unwrap();
        tasks.push(tokio::spawn(async move {
            let g = l.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            g.release().await.unwrap();
        }));
        others.push(o);
        until_children(&admin, &dir, 2 + i).await;
    }
    let sent_before = proxy.requests_forwarded();
    let ours = tokio::spawn({
        let l = FairLock::new(&p, &dir).unwrap();
        async move { l.lock_timeout(Duration::from_secs(20)).await }
    });
    until_children(&admin, &dir, 4).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    g1.release().await.unwrap();
    let g = within("our lock", ours).await.unwrap().unwrap();
    let sent = proxy.requests_forwarded() - sent_before;
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    for o in others {
        o.close().await;
    }
    o1.close().await;
    p.close().await;
    println!("{before:?}: our contended lock() sent {sent} requests");
    sent
}

// ------------------------------------------------------------------------- reviews 20 and 21

/// Given a directory that lets us create but not delete, when a guard is released (or
/// dropped) and the same lock is taken again on the same session, then the release answers
/// `NoAuth` (the node stays, ours, until the session ends) and so does the next acquire,
/// which would otherwise wait behind our own undeletable node for ever. Review 20 found the
/// simple lock's release answering `LockLost(NodeDeleted)` ("deleted by someone else ...
/// acquire it again") with its node still there, the next `try_lock` and `lock_timeout`
/// answering `WouldBlock` and `Timeout`, and a fair lock, a semaphore of one and a write lock
/// taken again after a drop waiting until the session ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_by_the_directory_is_no_auth_and_so_is_the_next_acquire() {
    let admin = raw().await;
    let root = unique_root("no-delete-again");
    a_directory_denying_delete(&admin, &root).await;
    let s = session().await;
    let path = format!("{root}/simple");
    let lock = ExclusiveLock::new(&s, &path).unwrap();
    let guard = within("lock", lock.lock()).await.unwrap();
    let released = within("release", guard.release()).await;
    assert!(
        matches!(released, Err(Error::NoAuth { .. })),
        "simple lock's refused release answered {released:?}"
    );
    let owner = admin
        .check_stat(&path)
        .await
        .unwrap()
        .map(|s| s.ephemeral_owner);
    assert_eq!(owner, s.session_id(), "the refused node is ours and stays");
    let tried = within("try_lock", lock.try_lock()).await.map(drop);
    let timed = within("lock_timeout", lock.lock_timeout(Duration::from_secs(2)))
        .await
        .map(drop);
    for (what, r) in [("try_lock", &tried), ("lock_timeout", &timed)] {
        assert!(
            matches!(r, Err(Error::NoAuth { path }) if *path == root),
            "simple lock's {what} behind our own undeletable node answered {r:?}"
        );
    }
    for kind in ["simple", "fair", "semaphore(1)", "write"] {
        for explicit in [false, true] {
            let dir = format!("{root}/{kind}-{explicit}");
            a_directory_denying_delete(&admin, &dir).await;
            let again = match kind {
                "simple" => {
                    let l = ExclusiveLock::new(&s, format!("{dir}/lock")).unwrap();
                    let g = l.lock().await.unwrap();
                    if explicit {
                        assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
                    } else {
                        drop(g);
                    }
                    tokio::time::timeout(Duration::from_secs(8), l.lock())
                        .await
                        .map(|r| r.map(drop))
                }
                "fair" => {
                    let l = FairLock::new(&s, &dir).unwrap();
                    let g = l.lock().await.unwrap();
                    if explicit {
                        assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
                    } else {
                        drop(g);
                    }
                    tokio::time::timeout(Duration::from_secs(8), l.lock())
                        .await
                        .map(|r| r.map(drop))
                }
                "semaphore(1)" => {
                    let l = Semaphore::new(&s, &dir, 1).unwrap();
                    let g = l.acquire().await.unwrap();
                    if explicit {
                        assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
                    } else {
                        drop(g);
                    }
                    tokio::time::timeout(Duration::from_secs(8), l.acquire())
                        .await
                        .map(|r| r.map(drop))
                }
                _ => {
                    let l = RwLock::new(&s, &dir).unwrap();
                    let g = l.write().await.unwrap();
                    if explicit {
                        assert!(matches!(g.release().await, Err(Error::NoAuth { .. })));
                    } else {
                        drop(g);
                    }
                    tokio::time::timeout(Duration::from_secs(8), l.write())
                        .await
                        .map(|r| r.map(drop))
                }
            };
            assert!(
                matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir),
                "{kind}, {}: the acquire behind our own undeletable node answered {:?}",
                if explicit { "released" } else { "dropped" },
                again.map_err(|_| "nothing within 8 s")
            );
        }
    }
    s.close().await;
}

/// Given a directory without DELETE, when an acquire is cancelled (its future dropped, the
/// documented way to give up), its node stays (the background cleanup's delete is refused);
/// then, once the holder is gone, the next `lock()` of the same session answers `NoAuth` on the
/// directory instead of queueing behind that undeletable node of its own. Review 21 saw it wait
/// until the session ended: the cleanup's refusal was only logged, not noted as stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_in_a_directory_denying_delete_makes_the_next_lock_no_auth() {
    let admin = admin().await;
    let dir = unique_root("cancelled");
    a_directory_denying_delete(&admin, &dir).await;
    let holder = session().await;
    let held = within(
        "holder's lock",
        FairLock::new(&holder, &dir).unwrap().lock(),
    )
    .await
    .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    // Give up by dropping the future (cancel safety: "dropping the future deletes the node").
    let gave_up = tokio::time::timeout(Duration::from_millis(700), lock.lock()).await;
    assert!(
        gave_up.is_err(),
        "the lock was busy: {:?}",
        gave_up.map(|r| r.map(drop))
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = children(&admin, &dir).await;
    println!("after the cancelled acquire: {left:?}");
    // The holder goes (its session's end removes its node whatever the ACL).
    drop(held);
    holder.close().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = children(&admin, &dir).await;
    println!("after the holder's session ended: {left:?}");
    let again = tokio::time::timeout(Duration::from_secs(8), lock.lock())
        .await
        .map(|r| r.map(drop));
    println!("the next lock() answered: {again:?}");
    let left = children(&admin, &dir).await;
    assert!(
        matches!(&again, Ok(Err(Error::NoAuth { path })) if *path == dir),
        "the lock() behind our own undeletable abandoned node answered {:?} (nodes: {left:?})",
        again.map_err(|_| "nothing within 8 s")
    );
    s.close().await;
}

/// Review 21's probes that held on b2621dc (each asserts): in a directory without DELETE, a
/// semaphore of 2 with one stuck lease of ours still grants once the other holder goes; a
/// reader behind our stuck reader is granted, a writer answers NoAuth; a stuck node an
/// administrator deletes no longer blocks; a waiter already waiting when our guard's release
/// is refused answers NoAuth; a multi-lock and an election behind our stuck nodes answer
/// NoAuth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeletable_nodes_of_ours_fail_only_the_acquires_they_block_for_good() {
    use zk_recipes::{Election, MultiLock, RwLock};
    let admin = admin().await;
    let root = unique_root("held");
    a_directory_denying_delete(&admin, &root).await;
    let s = session().await;
    let mut wrong = Vec::new();
    // Semaphore of 2.
    {
        let dir = format!("{root}/sem");
        a_directory_denying_delete(&admin, &dir).await;
        let sem = Semaphore::new(&s, &dir, 2).unwrap();
        let g = within("lease", sem.acquire()).await.unwrap();
        let r = within("release", g.release()).await;
        println!("semaphore(2) release: {r:?}");
        let other = session().await;
        let og = within(
            "other's lease",
            Semaphore::new(&other, &dir, 2).unwrap().acquire(),
        )
        .await
        .unwrap();
        let waiting = tokio::spawn({
            let sem = sem.clone();
            async move { sem.acquire().await.map(std::mem::forget) }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!(
            "semaphore(2) waiter finished early: {}",
            waiting.is_finished()
        );
        drop(og);
        other.close().await;
        let got = tokio::time::timeout(Duration::from_secs(8), waiting).await;
        println!("semaphore(2) waiter after the other holder left: {got:?}");
        if !matches!(got, Ok(Ok(Ok(())))) {
            wrong.push(format!("semaphore(2): {got:?}"));
        }
    }
    // Read/write lock.
    {
        let dir = format!("{root}/rw");
        a_directory_denying_delete(&admin, &dir).await;
        let rw = RwLock::new(&s, &dir).unwrap();
        let r1 = within("read", rw.read()).await.unwrap();
        println!("read release: {:?}", within("release", r1.release()).await);
        let r2 = tokio::time::timeout(Duration::from_secs(8), rw.read()).await;
        println!(
            "read behind our stuck reader: {:?}",
            r2.as_ref().map(|r| r.as_ref().map(drop))
        );
        if !matches!(r2, Ok(Ok(_))) {
            wrong.push("reader behind a stuck reader".into());
        }
        if let Ok(Ok(g)) = r2 {
            std::mem::forget(g);
        }
        let w = tokio::time::timeout(Duration::from_secs(8), rw.write())
            .await
            .map(|r| r.map(drop));
        println!("writer behind our stuck readers: {w:?}");
        if !matches!(&w, Ok(Err(Error::NoAuth { path })) if *path == dir) {
            wrong.push(format!("writer behind stuck readers: {w:?}"));
        }
    }
    // A stuck node an administrator deletes.
    {
        let dir = format!("{root}/admin-deletes");
        a_directory_denying_delete(&admin, &dir).await;
        let lock = FairLock::new(&s, &dir).unwrap();
        let g = within("lock", lock.lock()).await.unwrap();
        let node = g.path().to_string();
        println!("release: {:?}", within("release", g.release()).await);
        admin.delete(&node, None).await.unwrap();
        let again = tokio::time::timeout(Duration::from_secs(8), lock.lock()).await;
        println!(
            "after the admin deleted it: {:?}",
            again.as_ref().map(|r| r.as_ref().map(drop))
        );
        if !matches!(again, Ok(Ok(_))) {
            wrong.push("lock after the admin deleted the stuck node".into());
        }
        if let Ok(Ok(g)) = again {
            std::mem::forget(g);
        }
    }
    // A waiter already waiting when our guard's release is refused.
    {
        let dir = format!("{root}/waiting");
        a_directory_denying_delete(&admin, &dir).await;
        let lock = FairLock::new(&s, &dir).unwrap();
        let g = within("lock", lock.lock()).await.unwrap();
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("release: {:?}", within("release", g.release()).await);
        let got = tokio::time::timeout(Duration::from_secs(8), waiter).await;
        println!("waiter: {got:?}");
        if !matches!(&got, Ok(Ok(Err(Error::NoAuth { path }))) if *path == dir) {
            wrong.push(format!("waiting waiter: {got:?}"));
        }
    }
    // Multi-lock.
    {
        let (d1, d2) = (format!("{root}/m1"), format!("{root}/m2"));
        a_directory_denying_delete(&admin, &d1).await;
        a_directory_denying_delete(&admin, &d2).await;
        let m = MultiLock::new(&s, [&d1, &d2]).unwrap();
        let g = within("multi", m.lock()).await.unwrap();
        println!("multi release: {:?}", within("release", g.release()).await);
        let again = tokio::time::timeout(Duration::from_secs(8), m.lock())
            .await
            .map(|r| r.map(drop));
        println!("multi again: {again:?}");
        if !matches!(again, Ok(Err(Error::NoAuth { .. }))) {
            wrong.push(format!("multi again: {again:?}"));
        }
    }
    // Election.
    {
        let dir = format!("{root}/el");
        a_directory_denying_delete(&admin, &dir).await;
        let el = Election::new(&s, &dir, "me").unwrap();
        let l = within("campaign", el.campaign()).await.unwrap();
        println!("resign: {:?}", within("resign", l.resign()).await);
        let again = tokio::time::timeout(Duration::from_secs(8), el.campaign())
            .await
            .map(|r| r.map(drop));
        println!("campaign again: {again:?}");
        if !matches!(again, Ok(Err(Error::NoAuth { .. }))) {
            wrong.push(format!("campaign again: {again:?}"));
        }
    }
    s.close().await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

// ------------------------------------------------------------------------- review 24

/// Review 24, attack 1 (two holders): `delete_stuck` deletes a node noted by name (a refused
/// withdrawal or cleanup: a node that never held the lock, in the middle of the queue) with
/// the release's MARK. A waiter of another session behind that node takes the mark for a
/// hand-off (`mark_grants`: "the node held the lock alone, so nothing below it can exist")
/// and is granted while the real holder, ahead of the withdrawn node, still holds.
///
/// Queue: H0 (holder, another session) < S1 (ours, withdrawn, refused: noted by name) < W2
/// (another session, waiting, watching S1). The administrator gives DELETE back; our next
/// `try_lock()` runs `delete_stuck(S1)`, and W is granted beside H.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_our_withdrawn_stuck_node_does_not_grant_the_waiter_behind_it() {
    let mut broken = Vec::new();
    for how in ["withdrawn", "cancelled"] {
        broken.extend(stuck_mid_queue_then_acl_fixed(how).await);
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// `Some(what went wrong)` when the waiter behind our node was granted beside the holder.
async fn stuck_mid_queue_then_acl_fixed(how: &str) -> Option<String> {
    let admin = admin().await;
    let dir = unique_root(&format!("r24-mid-queue-{how}"));
    a_directory_denying_delete(&admin, &dir).await;
    let h = session().await;
    let held = within("holder", FairLock::new(&h, &dir).unwrap().lock())
        .await
        .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    if how == "withdrawn" {
        let gave_up = within(
            "lock_timeout",
            lock.lock_timeout(Duration::from_millis(700)),
        )
        .await
        .map(drop);
        println!("{how}: our lock_timeout behind the holder answered {gave_up:?}");
    } else {
        let gave_up = tokio::time::timeout(Duration::from_millis(700), lock.lock()).await;
        assert!(gave_up.is_err(), "the lock was busy");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        children(&admin, &dir).await.len(),
        2,
        "{how}: our node stays"
    );
    let w = session().await;
    let waiter = tokio::spawn({
        let l = FairLock::new(&w, &dir).unwrap();
        async move { l.lock().await }
    });
    until_children(&admin, &dir, 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    delete_given_back(&admin, &dir).await;
    let tried = within("try_lock", lock.try_lock()).await.map(drop);
    // Give the other session's waiter time to react.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let w_granted = waiter.is_finished();
    let left = children(&admin, &dir).await;
    println!(
        "{how}: our try_lock answered {tried:?}; the holder is lost: {}; the waiter behind our \
         node finished: {w_granted}; nodes: {left:?}",
        held.is_lost()
    );
    let both = w_granted && !held.is_lost();
    let w_result = if w_granted {
        Some(waiter.await.unwrap().map(|g| g.path().to_string()))
    } else {
        waiter.abort();
        None
    };
    drop(held);
    h.close().await;
    w.close().await;
    s.close().await;
    both.then(|| {
        format!(
            "{how}: TWO HOLDERS: the holder still holds, and the waiter behind our deleted \
             stuck node was granted: {w_result:?}"
        )
    })
}

/// Review 24, attack 1 for the read/write lock: a reader of another session holds; our
/// `write_timeout` gives up (its withdrawal refused: our writer node stays mid-queue, noted by
/// name); another session's writer waits behind it. Once DELETE is given back, our next
/// `try_write()` deletes our writer node with the release mark, and the writer behind it must
/// not take that for a hand-off while the reader holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_our_withdrawn_stuck_writer_does_not_grant_a_writer_beside_a_reader() {
    let admin = admin().await;
    let dir = unique_root("r24-mid-queue-rw");
    a_directory_denying_delete(&admin, &dir).await;
    let h = session().await;
    let reader = within("reader", RwLock::new(&h, &dir).unwrap().read())
        .await
        .unwrap();
    let s = session().await;
    let rw = RwLock::new(&s, &dir).unwrap();
    let gave_up = within(
        "write_timeout",
        rw.write_timeout(Duration::from_millis(700)),
    )
    .await
    .map(drop);
    println!("our write_timeout behind the reader answered {gave_up:?}");
    assert_eq!(
        children(&admin, &dir).await.len(),
        2,
        "our writer node stays"
    );
    let w = session().await;
    let writer = tokio::spawn({
        let l = RwLock::new(&w, &dir).unwrap();
        async move { l.write().await }
    });
    until_children(&admin, &dir, 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    delete_given_back(&admin, &dir).await;
    let tried = within("try_write", rw.try_write()).await.map(drop);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let granted = writer.is_finished();
    let left = children(&admin, &dir).await;
    println!(
        "our try_write answered {tried:?}; reader lost: {}; the writer behind our node \
         finished: {granted}; nodes: {left:?}",
        reader.is_lost()
    );
    let both = granted && !reader.is_lost();
    if !granted {
        writer.abort();
    }
    drop(reader);
    h.close().await;
    w.close().await;
    s.close().await;
    assert!(
        !both,
        "a WRITER was granted beside a live reader after our withdrawn writer node was deleted"
    );
}

/// Review 24 probe (safety, simple lock): our node at the shared path is stuck (directory
/// without DELETE), an administrator deletes it, and another handle of our own session then
/// holds the path with a new node. Once DELETE is given back, a third handle's acquire must
/// not delete that live node (its czxid is not the one noted): it times out, and the guard is
/// not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_fix_a_live_simple_lock_node_of_ours_remade_at_the_stuck_path_is_left() {
    let admin = admin().await;
    let dir = unique_root("r24-simple-remade");
    a_directory_denying_delete(&admin, &dir).await;
    let path = format!("{dir}/lock");
    let s = session().await;
    let _l1 = a_stuck_simple_lock_node(&s, &path).await;
    let stuck = admin.check_stat(&path).await.unwrap().expect("stuck node");
    admin.delete(&path, None).await.unwrap();
    let l2 = ExclusiveLock::new(&s, &path).unwrap();
    let g2 = within("second handle", l2.lock()).await.unwrap();
    delete_given_back(&admin, &dir).await;
    let l3 = ExclusiveLock::new(&s, &path).unwrap();
    let tried = within("try_lock", l3.try_lock()).await.map(drop);
    let timed = within("lock_timeout", l3.lock_timeout(Duration::from_secs(2)))
        .await
        .map(drop);
    let now = admin.check_stat(&path).await.unwrap();
    println!(
        "stuck czxid {:#x}; live {:#x}; try_lock {tried:?}; lock_timeout {timed:?}; node now {:?}",
        stuck.czxid,
        g2.fencing_token(),
        now.map(|st| st.czxid)
    );
    let lost = g2.is_lost();
    let fence = g2.fencing_token();
    g2.release().await.unwrap();
    s.close().await;
    assert!(
        matches!(tried, Err(Error::WouldBlock)),
        "try_lock: {tried:?}"
    );
    assert!(
        matches!(timed, Err(Error::Timeout)),
        "lock_timeout: {timed:?}"
    );
    assert!(
        !lost && now.map(|st| st.czxid) == Some(fence),
        "the live node was touched"
    );
}

/// Review 24 probe (liveness): once DELETE is given back, several acquires of our session
/// started at once behind our stuck node all run `delete_stuck` on it; one deletes it, the
/// others find it gone, and every one is granted in turn (no `NoAuth`, no hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_fix_concurrent_acquires_of_one_session_are_all_granted() {
    let admin = admin().await;
    let dir = unique_root("r24-concurrent-after-fix");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let lock = a_stuck_node(&s, &dir).await;
    delete_given_back(&admin, &dir).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.lock_timeout(Duration::from_secs(10)).await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                g.release().await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(within("acquire", t).await.unwrap());
    }
    let left = children(&admin, &dir).await;
    println!("outcomes {outcomes:?}; nodes left {left:?}");
    s.close().await;
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert!(left.is_empty(), "{left:?}");
}

// ------------------------------------------------------------------------- seeded

/// Which lock the seeded schedule takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seeded {
    Fair,
    ReadWrite,
    /// A semaphore of two permits.
    Semaphore,
    /// Review 26: the simple lock (`ExclusiveLock`) at `<dir>/lock`, two handles per session.
    Simple,
}

/// A guard of either lock.
enum Held {
    Lock(zk_recipes::LockGuard),
    Read(zk_recipes::ReadGuard),
    Write(zk_recipes::WriteGuard),
    Lease(zk_recipes::LockGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_lost(),
            Held::Read(g) => g.is_lost(),
            Held::Write(g) => g.is_lost(),
            Held::Lease(g) => g.is_lost(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Held::Lock(_) => "lock",
            Held::Read(_) => "read",
            Held::Write(_) => "write",
            Held::Lease(_) => "lease",
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Lease(g) => g.release().await,
        }
    }
}

/// Who holds now (readers, writers), and what went wrong.
#[derive(Default)]
struct Book {
    readers: usize,
    writers: usize,
    leases: usize,
    wrong: Vec<String>,
    answers: std::collections::BTreeMap<String, usize>,
    /// Review 26: connections are cut, so `ConnectionLost` is an expected answer.
    cuts: bool,
}

impl Book {
    fn granted(&mut self, who: &str, held: &Held) {
        let (r, w, l) = (self.readers, self.writers, self.leases);
        let clash = match held {
            Held::Lease(_) => l >= 2,
            Held::Read(_) => w > 0,
            Held::Lock(_) | Held::Write(_) => w > 0 || r > 0,
        };
        if clash {
            self.wrong.push(format!(
                "{who} granted ({}) while {r} readers, {w} writers and {l} leases held",
                held.kind()
            ));
        }
        *self.count(held) += 1;
    }

    fn count(&mut self, held: &Held) -> &mut usize {
        match held {
            Held::Lease(_) => &mut self.leases,
            Held::Read(_) => &mut self.readers,
            Held::Lock(_) | Held::Write(_) => &mut self.writers,
        }
    }

    /// Called before the guard is let go (its node is deleted after this, so nobody can be
    /// granted in its place before).
    fn letting_go(&mut self, who: &str, held: &Held) {
        if held.is_lost() {
            self.wrong.push(format!(
                "{who}: a guard was told of a loss (no node was deleted by anyone but us)"
            ));
        }
        *self.count(held) -= 1;
    }

    fn answered<T>(&mut self, who: &str, what: &str, r: &Result<T, Error>) {
        let key = match r {
            Ok(_) => format!("{what}: Ok"),
            Err(e @ (Error::NoAuth { .. } | Error::Timeout | Error::WouldBlock)) => {
                format!(
                    "{what}: {}",
                    format!("{e:?}").split([' ', '(', '{']).next().unwrap()
                )
            }
            Err(Error::ConnectionLost) if self.cuts => format!("{what}: ConnectionLost"),
            Err(e) => {
                self.wrong.push(format!("{who}: {what} answered {e:?}"));
                format!("{what}: other")
            }
        };
        *self.answers.entry(key).or_default() += 1;
    }
}

/// One acquire of `kind`, as the schedule picks it: timed, tried, or a plain one given up by
/// dropping its future. `None`: given up.
async fn seeded_acquire(
    rng: &mut support::rng::Rng,
    kind: Seeded,
    fair: &FairLock,
    rw: &RwLock,
    sem: &Semaphore,
    simple: &ExclusiveLock,
) -> (&'static str, Option<Result<Held, Error>>) {
    let write = matches!(kind, Seeded::Fair | Seeded::Simple) || rng.chance(50);
    let how = rng.weighted(&[4, 2, 1]);
    let bound = rng.ms(20, 400);
    match (kind, write, how) {
        (Seeded::Semaphore, _, 0) => (
            "acquire_timeout",
            Some(sem.acquire_timeout(bound).await.map(Held::Lease)),
        ),
        (Seeded::Semaphore, _, 1) => (
            "try_acquire",
            Some(sem.try_acquire().await.map(Held::Lease)),
        ),
        (Seeded::Semaphore, _, _) => (
            "acquire dropped",
            tokio::time::timeout(bound, sem.acquire())
                .await
                .ok()
                .map(|r| r.map(Held::Lease)),
        ),
        (Seeded::Fair, _, 0) => (
            "lock_timeout",
            Some(fair.lock_timeout(bound).await.map(Held::Lock)),
        ),
        (Seeded::Fair, _, 1) => ("try_lock", Some(fair.try_lock().await.map(Held::Lock))),
        (Seeded::Fair, _, _) => (
            "lock dropped",
            tokio::time::timeout(bound, fair.lock())
                .await
                .ok()
                .map(|r| r.map(Held::Lock)),
        ),
        (Seeded::Simple, _, 0) => (
            "simple lock_timeout",
            Some(simple.lock_timeout(bound).await.map(Held::Lock)),
        ),
        (Seeded::Simple, _, 1) => (
            "simple try_lock",
            Some(simple.try_lock().await.map(Held::Lock)),
        ),
        (Seeded::Simple, _, _) => (
            "simple lock dropped",
            tokio::time::timeout(bound, simple.lock())
                .await
                .ok()
                .map(|r| r.map(Held::Lock)),
        ),
        (_, true, 0) => (
            "write_timeout",
            Some(rw.write_timeout(bound).await.map(Held::Write)),
        ),
        (_, true, 1) => ("try_write", Some(rw.try_write().await.map(Held::Write))),
        (_, true, _) => (
            "write dropped",
            tokio::time::timeout(bound, rw.write())
                .await
                .ok()
                .map(|r| r.map(Held::Write)),
        ),
        (_, false, 0) => (
            "read_timeout",
            Some(rw.read_timeout(bound).await.map(Held::Read)),
        ),
        (_, false, 1) => ("try_read", Some(rw.try_read().await.map(Held::Read))),
        (_, false, _) => (
            "read dropped",
            tokio::time::timeout(bound, rw.read())
                .await
                .ok()
                .map(|r| r.map(Held::Read)),
        ),
    }
}

/// Seeded: three sessions, two actors each, take and let go of one lock of `kind` in random
/// ways (timed, tried, or given up by dropping the future; then released, dropped, or for the
/// fair lock relocked) while an administrator flips the directory's ACL between denying DELETE
/// and allowing everything. Checks: never two holders (nor a writer beside anyone); no guard
/// told of a loss (nobody but us deletes a node, so a loss means we deleted a live one); only
/// `Ok`, `NoAuth`, `Timeout` and `WouldBlock` answers; and once DELETE stays allowed, one
/// acquire per session, all at once, is granted in turn (each deletes its session's stuck
/// nodes), and the directory is empty once the sessions close.
async fn seeded_acl_flips(kind: Seeded, seed: u64, steps: u32) {
    seeded_acl_flips_cut(kind, seed, steps, false).await
}

/// `cuts` (review 26): every session goes through a proxy of its own, and a cutter drops one
/// of them at a random request (before it is forwarded, before or after its reply) every
/// 30-300 ms while the schedule runs.
async fn seeded_acl_flips_cut(kind: Seeded, seed: u64, steps: u32, cuts: bool) {
    use std::sync::{Arc, Mutex};
    println!("{kind:?}: seed {seed} cuts {cuts} (replay: ZKR_REVIEW_SEED={seed})");
    let admin = admin().await;
    let dir = unique_root(&format!("seeded-acl-{kind:?}"));
    a_directory_denying_delete(&admin, &dir).await;
    let book = Arc::new(Mutex::new(Book {
        cuts,
        ..Book::default()
    }));
    let mut sessions = Vec::new();
    let mut proxies = Vec::new();
    let mut actors = Vec::new();
    for i in 0..3u64 {
        let s = if cuts {
            let (s, proxy) = session_via_proxy(Duration::from_secs(8), LossPolicy::OnExpiry).await;
            proxies.push(proxy);
            s
        } else {
            session().await
        };
        for j in 0..2u64 {
            let (fair, rw, sem, simple) = (
                FairLock::new(&s, &dir).unwrap(),
                RwLock::new(&s, &dir).unwrap(),
                Semaphore::new(&s, &dir, 2).unwrap(),
                ExclusiveLock::new(&s, format!("{dir}/lock")).unwrap(),
            );
            let book = book.clone();
            let mut rng = support::rng::Rng::new(seed.wrapping_mul(31).wrapping_add(i * 2 + j));
            let who = format!("s{i}a{j}");
            actors.push(tokio::spawn(async move {
                for _ in 0..steps {
                    let (what, got) =
                        seeded_acquire(&mut rng, kind, &fair, &rw, &sem, &simple).await;
                    let Some(got) = got else { continue };
                    book.lock().unwrap().answered(&who, what, &got);
                    let Ok(mut held) = got else {
                        tokio::time::sleep(rng.ms(0, 50)).await;
                        continue;
                    };
                    book.lock().unwrap().granted(&who, &held);
                    tokio::time::sleep(rng.ms(0, 30)).await;
                    if kind == Seeded::Fair && rng.one_in(4) {
                        book.lock().unwrap().letting_go(&who, &held);
                        let Held::Lock(g) = held else { unreachable!() };
                        // Bounded: behind another session's stuck node it waits until that
                        // session acquires again (only it may delete its node).
                        let bound = rng.ms(100, 600);
                        let Ok(again) = tokio::time::timeout(bound, fair.relock(g)).await else {
                            continue;
                        };
                        let again = again.map(Held::Lock);
                        book.lock().unwrap().answered(&who, "relock", &again);
                        let Ok(g) = again else { continue };
                        held = g;
                        book.lock().unwrap().granted(&who, &held);
                        tokio::time::sleep(rng.ms(0, 30)).await;
                    }
                    book.lock().unwrap().letting_go(&who, &held);
                    if rng.chance(50) {
                        drop(held);
                    } else {
                        let released = held.release().await;
                        book.lock().unwrap().answered(&who, "release", &released);
                    }
                }
            }));
        }
        sessions.push(s);
    }
    let flipper = tokio::spawn({
        let dir = dir.clone();
        let admin = admin.clone();
        let mut rng = support::rng::Rng::new(seed ^ 0x5eed);
        async move {
            let mut flips = 0;
            loop {
                tokio::time::sleep(rng.ms(50, 400)).await;
                use zk::Permission as P;
                let perms = if flips % 2 == 0 {
                    P::ALL
                } else {
                    P::CREATE | P::READ | P::WRITE
                };
                admin
                    .set_acl(&dir, &[zk::Acl::new(perms, zk::AuthId::anyone())], None)
                    .await
                    .unwrap();
                flips += 1;
            }
        }
    });
    let proxies = Arc::new(proxies);
    let cutter = tokio::spawn({
        let proxies = proxies.clone();
        let mut rng = support::rng::Rng::new(seed ^ 0xc075);
        async move {
            if proxies.is_empty() {
                return;
            }
            let mut n = 0u32;
            loop {
                tokio::time::sleep(rng.ms(30, 300)).await;
                let p = &proxies[rng.below(proxies.len() as u64) as usize];
                let k = rng.range(1, 5) as u32;
                let point = match rng.below(3) {
                    0 => FaultPoint::BeforeRequest(k),
                    1 => FaultPoint::BeforeReply(k),
                    _ => FaultPoint::AfterReply(k),
                };
                p.arm(Fault::new(
                    point,
                    FaultAction::Cut {
                        refuse_for: rng.ms(0, 150),
                    },
                ));
                n += 1;
                let _ = n;
            }
        }
    });
    let bound = if cuts { 90 } else { 15 };
    for a in actors {
        tokio::time::timeout(Duration::from_secs(bound), a)
            .await
            .unwrap_or_else(|_| panic!("{kind:?} seed {seed}: the seeded actors within {bound} s"))
            .unwrap();
    }
    cutter.abort();
    let _ = cutter.await;
    for p in proxies.iter() {
        p.disarm();
    }
    flipper.abort();
    let _ = flipper.await;
    delete_given_back(&admin, &dir).await;
    let before = children(&admin, &dir).await;
    let last: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (fair, rw, sem, simple, book) = (
                FairLock::new(s, &dir).unwrap(),
                RwLock::new(s, &dir).unwrap(),
                Semaphore::new(s, &dir, 2).unwrap(),
                ExclusiveLock::new(s, format!("{dir}/lock")).unwrap(),
                book.clone(),
            );
            tokio::spawn(async move {
                let who = format!("s{i} last");
                let bound = Duration::from_secs(15);
                let got = match kind {
                    Seeded::Fair => fair.lock_timeout(bound).await.map(Held::Lock),
                    Seeded::ReadWrite => rw.write_timeout(bound).await.map(Held::Write),
                    Seeded::Semaphore => sem.acquire_timeout(bound).await.map(Held::Lease),
                    Seeded::Simple => simple.lock_timeout(bound).await.map(Held::Lock),
                };
                book.lock()
                    .unwrap()
                    .answered(&who, "last lock_timeout", &got);
                if let Ok(held) = got {
                    book.lock().unwrap().granted(&who, &held);
                    book.lock().unwrap().letting_go(&who, &held);
                    let released = held.release().await;
                    book.lock()
                        .unwrap()
                        .answered(&who, "last release", &released);
                }
            })
        })
        .collect();
    for l in last {
        within("the last acquires", l).await.unwrap();
    }
    // The last acquires try our stuck nodes' deletes again in the background, after their
    // entry: give those deletes a moment (a cut may hold one up) before calling a node left.
    let by = std::time::Instant::now() + Duration::from_secs(5);
    let mut after = children(&admin, &dir).await;
    while !after.is_empty() && std::time::Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = children(&admin, &dir).await;
    }
    for s in &sessions {
        s.close().await;
    }
    let closed = children(&admin, &dir).await;
    let book = book.lock().unwrap();
    println!("{kind:?} seed {seed}: answers {:?}; nodes before the last acquires {}, after {}, after close {}", book.answers, before.len(), after.len(), closed.len());
    let mut wrong = book.wrong.clone();
    if book
        .answers
        .keys()
        .any(|k| k.starts_with("last") && !k.ends_with("Ok"))
    {
        wrong.push(format!(
            "a last acquire or release (DELETE allowed) failed: {:?}",
            book.answers
        ));
    }
    if !after.is_empty() {
        wrong.push(format!(
            "nodes left after the last acquires, DELETE allowed: {after:?}"
        ));
    }
    if !closed.is_empty() {
        wrong.push(format!("nodes left after the sessions closed: {closed:?}"));
    }
    assert!(
        wrong.is_empty(),
        "{kind:?} seed {seed} (replay: ZKR_REVIEW_SEED={seed}): {wrong:#?}"
    );
}

fn seeded_seeds() -> Vec<u64> {
    match std::env::var("ZKR_REVIEW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        // Kept seeds and one new one. 2 and 5 found review 24's two holders (the marked
        // delete of a mid-queue node) when it was put back by hand; 1 and 2 (and 3, 4, 6, 8)
        // found review 25's semaphore lease kept with that review's fix taken out.
        None => vec![
            1,
            2,
            5,
            support::rng::seed_from_env("ZKR_REVIEW_SEED") % 1_000_000,
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_acl_flips_never_make_two_fair_lock_holders() {
    for seed in seeded_seeds() {
        seeded_acl_flips(Seeded::Fair, seed, 12).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_acl_flips_never_make_a_third_lease_of_two() {
    for seed in seeded_seeds() {
        seeded_acl_flips(Seeded::Semaphore, seed, 12).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_acl_flips_never_make_a_writer_beside_anyone() {
    for seed in seeded_seeds() {
        seeded_acl_flips(Seeded::ReadWrite, seed, 12).await;
    }
}

// ---------------------------------------------------------------------------------------
// Review 25: the retried delete of stuck nodes (ca26939, 07c4837).

/// Waits until `dir` has `n` children.
async fn until_children(admin: &zk::Client, dir: &str, n: usize) {
    let by = std::time::Instant::now() + Duration::from_secs(10);
    while children(admin, dir).await.len() < n {
        assert!(std::time::Instant::now() < by, "{dir}: {n} nodes not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Review 25, finding (liveness, semaphore): a semaphore of two; our lease stuck (its release
/// refused by a directory denying DELETE); the administrator gives DELETE back, as the advice
/// says; another session holds the other permit for as long as it likes. Our next acquire
/// could delete our stuck lease and take its permit at once, but `blocked_for_good` tries the
/// delete only when the stuck leases alone fill every permit: one of two is not tried, so
/// `try_acquire` answers `WouldBlock` (a retry never succeeds while the other holds) and
/// `acquire_timeout` waits its whole bound, behind a node of ours it could delete. The stuck
/// lease keeps a permit from every session until ours ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_fix_a_stuck_lease_short_of_the_permits_is_deleted_not_waited_behind() {
    let admin = admin().await;
    let dir = unique_root("r25-sem-fixed");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let sem = Semaphore::new(&s, &dir, 2).unwrap();
    let g = within("acquire", sem.acquire()).await.unwrap();
    let stuck = g.path().rsplit('/').next().unwrap().to_string();
    refused(g.release()).await;
    let o = session().await;
    let og = within(
        "other acquire",
        Semaphore::new(&o, &dir, 2).unwrap().acquire(),
    )
    .await
    .unwrap();
    delete_given_back(&admin, &dir).await;
    let tried = within("try_acquire", sem.try_acquire()).await;
    let left_after_try = children(&admin, &dir).await;
    let tried = tried.map(|g| g.path().to_string());
    let timed = within(
        "acquire_timeout",
        sem.acquire_timeout(Duration::from_secs(3)),
    )
    .await
    .map(|g| g.path().to_string());
    let left = children(&admin, &dir).await;
    println!(
        "stuck lease {stuck}; try_acquire {tried:?} (nodes then {left_after_try:?}); \
         acquire_timeout(3 s) {timed:?}; nodes now {left:?}"
    );
    drop(og);
    o.close().await;
    s.close().await;
    assert!(
        tried.is_ok(),
        "try_acquire answered {tried:?} behind our deletable lease"
    );
    assert!(timed.is_ok(), "acquire_timeout answered {timed:?}");
    assert!(
        !left.contains(&stuck),
        "our stuck lease is still there: {left:?}"
    );
}

/// Review 25 probe (safety, fair lock): our holder's node made read-only by an administrator
/// (its marked release refused, noted by czxid) has another session's waiter B behind it.
/// Our next `lock_timeout` deletes it plainly: B must be granted (it re-lists on the plain
/// deletion) and ours must wait behind B, not be granted beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_holder_deleted_by_our_next_lock_hands_on_to_the_waiter_behind_it_alone() {
    let admin = admin().await;
    let dir = unique_root("r25-ro-holder");
    an_open_directory(&admin, &dir).await;
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let node = g.path().to_string();
    let o = session().await;
    let waiter = tokio::spawn({
        let l = FairLock::new(&o, &dir).unwrap();
        async move { l.lock().await }
    });
    until_children(&admin, &dir, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    made_read_only(&admin, &node).await;
    refused(g.release()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "setup: B is behind our stuck node");
    let ours = within("lock_timeout", lock.lock_timeout(Duration::from_secs(3)))
        .await
        .map(|g| g.path().to_string());
    let b = within("B", waiter).await.unwrap();
    let left = children(&admin, &dir).await;
    println!(
        "ours {ours:?}; B {:?}; nodes {left:?}",
        b.as_ref().map(|g| g.path())
    );
    let b_path = b
        .as_ref()
        .map(|g| g.path().to_string())
        .map_err(|e| e.to_string());
    let b_lost = b.as_ref().map(|g| g.is_lost()).map_err(|e| e.to_string());
    drop(b);
    o.close().await;
    s.close().await;
    assert!(
        matches!(ours, Err(Error::Timeout)),
        "ours beside B: {ours:?}"
    );
    assert!(
        b_path.is_ok() && b_lost == Ok(false),
        "B: {b_path:?} {b_lost:?}"
    );
    assert_eq!(left.len(), 1, "only B's node: {left:?}");
}

/// Review 25 probe (safety, read/write): our writer made read-only (its release refused) has
/// another session's reader R and writer W queued behind it, in that order. Our next
/// `try_read` deletes our writer plainly: R is granted, W is not (R holds), and our
/// `try_read`, behind W, answers `WouldBlock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_writer_deleted_by_our_try_read_grants_the_reader_behind_not_the_writer() {
    let admin = admin().await;
    let dir = unique_root("r25-ro-writer");
    an_open_directory(&admin, &dir).await;
    let s = session().await;
    let rw = RwLock::new(&s, &dir).unwrap();
    let w = within("write", rw.write()).await.unwrap();
    let node = w.path().to_string();
    let o = session().await;
    let reader = tokio::spawn({
        let l = RwLock::new(&o, &dir).unwrap();
        async move { l.read().await }
    });
    until_children(&admin, &dir, 2).await;
    let o2 = session().await;
    let writer = tokio::spawn({
        let l = RwLock::new(&o2, &dir).unwrap();
        async move { l.write().await }
    });
    until_children(&admin, &dir, 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    made_read_only(&admin, &node).await;
    refused(w.release()).await;
    let tried = within("try_read", rw.try_read()).await.map(drop);
    let r = within("R", reader).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let w_done = writer.is_finished();
    let left = children(&admin, &dir).await;
    println!(
        "try_read {tried:?}; R {:?}; W finished {w_done}; nodes {left:?}",
        r.as_ref().map(|g| g.path())
    );
    let r_ok = r.as_ref().is_ok_and(|g| !g.is_lost());
    drop(r);
    writer.abort();
    o.close().await;
    o2.close().await;
    s.close().await;
    assert!(r_ok, "the reader behind our writer was not granted");
    assert!(!w_done, "the writer was granted beside a reader");
    assert!(
        matches!(tried, Err(Error::WouldBlock)),
        "try_read: {tried:?}"
    );
}

/// Review 25 probe (safety, election with the release mark): our leader's node made
/// read-only (its marked resignation refused); another session's candidate F behind it. A
/// second candidate of our session deletes our node plainly: F leads, and ours does not lead
/// beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_leader_deleted_by_our_next_campaign_elects_the_follower_alone() {
    use zk_recipes::Election;
    let admin = admin().await;
    let dir = unique_root("r25-ro-leader");
    an_open_directory(&admin, &dir).await;
    let s = session().await;
    let a = Election::new(&s, &dir, "a")
        .unwrap()
        .with_release_mark(true);
    let lead = within("campaign", a.campaign()).await.unwrap();
    let node = lead.path().to_string();
    let o = session().await;
    let follower = tokio::spawn({
        let e = Election::new(&o, &dir, "f")
            .unwrap()
            .with_release_mark(true);
        async move { e.campaign().await }
    });
    until_children(&admin, &dir, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    made_read_only(&admin, &node).await;
    let resigned = within("resign", lead.resign()).await;
    assert!(
        matches!(resigned, Err(Error::NoAuth { .. })),
        "setup: {resigned:?}"
    );
    let b = Election::new(&s, &dir, "b")
        .unwrap()
        .with_release_mark(true);
    let ours = within(
        "campaign_timeout",
        b.campaign_timeout(Duration::from_secs(3)),
    )
    .await
    .map(drop);
    let f = within("F", follower).await.unwrap();
    let left = children(&admin, &dir).await;
    println!(
        "ours {ours:?}; F {:?}; nodes {left:?}",
        f.as_ref().map(|l| l.path())
    );
    let f_ok = f.as_ref().is_ok_and(|l| !l.is_lost());
    drop(f);
    o.close().await;
    s.close().await;
    assert!(
        matches!(ours, Err(Error::Timeout)),
        "ours beside F: {ours:?}"
    );
    assert!(f_ok, "F does not lead");
}

/// Review 25 probe (safety, merged relock): our fair-lock guard's node made read-only, another
/// session's waiter B behind it; the guard is dropped and `lock()` called at once (the merged
/// path: its transaction is refused, the old node noted, our node made plainly behind B, then
/// the old node deleted plainly). B must be granted, and our `lock()` must wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_lock_after_a_read_only_guard_waits_behind_the_waiter_it_lets_in() {
    let admin = admin().await;
    let dir = unique_root("r25-ro-merged");
    an_open_directory(&admin, &dir).await;
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    let node = g.path().to_string();
    let o = session().await;
    let waiter = tokio::spawn({
        let l = FairLock::new(&o, &dir).unwrap();
        async move { l.lock().await }
    });
    until_children(&admin, &dir, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    made_read_only(&admin, &node).await;
    drop(g);
    let ours = within(
        "merged lock",
        tokio::time::timeout(Duration::from_secs(3), lock.lock()),
    )
    .await;
    let b = within("B", waiter).await.unwrap();
    let left = children(&admin, &dir).await;
    let ours = ours.map(|r| r.map(|g| g.path().to_string()));
    println!(
        "ours {ours:?}; B {:?}; nodes {left:?}",
        b.as_ref().map(|g| g.path())
    );
    let b_ok = b.as_ref().is_ok_and(|g| !g.is_lost());
    drop(b);
    o.close().await;
    s.close().await;
    assert!(
        ours.is_err(),
        "our merged lock() was granted beside B: {ours:?}"
    );
    assert!(b_ok, "B was not granted");
    assert!(
        !left.contains(&node.rsplit('/').next().unwrap().to_string()),
        "old node left: {left:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Review 26: the stuck-node retry (ca26939, 07c4837, 8dc6b21) under connection cuts, and
// what a note costs once its node is gone.

/// Review 26 probe: the seeded ACL flips of reviews 24/25, with every session behind a proxy
/// that a cutter drops at random requests (so delete_stuck's read, its delete, the refusal's
/// stat and every release are cut at times). Same checks: never two holders, a third lease
/// or a writer beside anyone, no guard told of a loss, nothing left once DELETE stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_seeded_acl_flips_with_cuts_fair() {
    for seed in seeded_seeds() {
        seeded_acl_flips_cut(Seeded::Fair, seed, 12, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_seeded_acl_flips_with_cuts_semaphore() {
    for seed in seeded_seeds() {
        seeded_acl_flips_cut(Seeded::Semaphore, seed, 12, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_seeded_acl_flips_with_cuts_read_write() {
    for seed in seeded_seeds() {
        seeded_acl_flips_cut(Seeded::ReadWrite, seed, 12, true).await;
    }
}

/// Review 26 (cost): our fair-lock node made read-only, its release refused (noted stuck);
/// then the administrator deletes it (rather than fixing its ACL). The note is never
/// forgotten (only `delete_stuck` forgets, and it runs only for noted nodes still listed), so
/// every later contended `lock()` of the session in that directory with a cut window lists
/// the directory once more per turn (`blocked_for_good`: `cut && has_stuck_in(dir)`).
/// Compared with the same lock() in a directory where nothing was ever stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_a_stuck_note_whose_node_an_admin_deleted_costs_nothing_later() {
    let plain = contended_lock_requests(Before::Nothing).await;
    let stale = contended_lock_requests(Before::StaleNoteHere).await;
    assert_eq!(
        plain, stale,
        "requests of a contended lock() (no stale note, stale note)"
    );
}

/// Review 26 probe: the seeded ACL flips for the simple lock (two handles per session at one
/// shared path, so delete_stuck's marked delete under the path serializer), without and with
/// connection cuts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_seeded_acl_flips_simple_lock() {
    for seed in seeded_seeds() {
        seeded_acl_flips_cut(Seeded::Simple, seed, 12, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review26_seeded_acl_flips_with_cuts_simple_lock() {
    for seed in seeded_seeds() {
        seeded_acl_flips_cut(Seeded::Simple, seed, 12, true).await;
    }
}

/// Given a semaphore lease whose release reaches the server (and deletes the node) but whose
/// answer is lost in a cut, and an administrator who takes DELETE away from the directory
/// before the release is tried again: the retry is refused (`NoAuth`: the server checks the
/// directory's ACL before it looks for the node), and the release must still answer `Ok`, for
/// it worked. Found by `review26_seeded_acl_flips_with_cuts_semaphore` (a release answered
/// `LockLost(NodeDeleted)`): the read after a refusal found the node gone and took no account
/// of the lost answer, as the plain `NoNode` case did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_worked_before_a_cut_is_ok_though_its_retry_is_refused() {
    let admin = admin().await;
    let dir = unique_root("cut-then-refused");
    an_open_directory(&admin, &dir).await;
    let (p, proxy) = session_via_proxy(Duration::from_secs(8), LossPolicy::OnExpiry).await;
    // A lease: released by a plain delete (a marked release's retry starts with the set,
    // which answers `NoNode` before any ACL is looked at).
    let g = within("acquire", Semaphore::new(&p, &dir, 2).unwrap().acquire())
        .await
        .unwrap();
    let node = g.path().to_string();
    // The fault counts deletes only: the grant's background requests (the bump of the lease's
    // version, the guard's own-node watch) may still be on their way, and must not take it.
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeReply(1),
            FaultAction::Cut {
                refuse_for: Duration::from_secs(1),
            },
        )
        .only(Op::Delete),
    );
    let release = tokio::spawn(g.release());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gone = admin.check_stat(&node).await.unwrap().is_none();
    deny_delete(&admin, &dir).await;
    let released = within("release", release).await.unwrap();
    println!("node gone before the ACL change: {gone}; the release answered {released:?}");
    p.close().await;
    assert!(
        gone,
        "setup: the release did not reach the server before the cut"
    );
    assert!(
        released.is_ok(),
        "a release that deleted our node answered {released:?}"
    );
}

// Review 27: bfc9833 (listings forget notes of nodes gone, acquires retry our stuck nodes in
// the background, a refused retry after a lost answer with the node gone is Ok).

/// Review 27 (cost): our fair-lock node stuck in a directory denying DELETE, which stays so.
/// Each `try_lock()` behind it answers `NoAuth` after `blocked_for_good` tried its delete
/// once more (read, delete, read). On bfc9833 the attempt also spawns
/// `retry_stuck_in_background`, whose set holds the same node: the same read, refused delete
/// and read again, concurrently, for every acquire, while nothing can change. Counted with
/// every background task settled (requests per try_lock). Each refused try_lock also leaves
/// its own node stuck (its withdrawal is refused), so on bfc9833 the background set grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review27_each_try_lock_behind_our_stuck_node_retries_it_once() {
    let (_admin, dir, s, proxy) =
        a_session_and_a_directory_denying_delete("r27-cost", Duration::from_secs(8)).await;
    let lock = a_stuck_node(&s, &dir).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut per_try = Vec::new();
    for _ in 0..8 {
        let before = proxy.requests_forwarded();
        let tried = within("try_lock", lock.try_lock()).await.map(drop);
        assert!(matches!(&tried, Err(Error::NoAuth { .. })), "{tried:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        per_try.push(proxy.requests_forwarded() - before);
    }
    println!("requests per try_lock behind our stuck node (background settled): {per_try:?}");
    s.close().await;
    // Each refused try_lock leaves its own node stuck too (its withdrawal is refused), and
    // the background retry takes every note in the directory: the cost grows with the notes.
    // On 8dc6b21: [6, 10, 10, 10, ...]; on bfc9833: [9, 17, 20, 22, ...]. With the sweeper
    // (once a second; each new note's delete tried once) the windows alternate, [6, 22, 9,
    // 19, 9, 19, ...]: compared by pairs, the first left out (no note yet before it).
    let pair = |i: usize| per_try[i] + per_try[i + 1];
    assert!(
        pair(6) <= pair(2) + 4,
        "a try_lock behind our stuck node cost more with every earlier one: {per_try:?}"
    );
}

// Review 28: the final form of the stuck-node machinery (ca26939..f7ff7d8): the scheduled
// background retry, and liveness once the ACL is fixed.

/// Review 28, finding (liveness, read/write lock; two sessions): our read node is stuck (its
/// release refused by a directory denying DELETE). Another session queues a writer behind it,
/// and we queue a reader behind that writer. The administrator gives DELETE back, as the
/// `NoAuth` advice says. Our reader waits behind their writer, which waits behind our stuck
/// reader: our stuck reader is not among the blockers of our reader (readers do not block
/// readers), so `blocked_for_good` never tries it, and `retry_stuck_in_background` runs only
/// once granted, which never comes. Both wait until our session ends, the ACL long fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review28_our_stuck_reader_behind_their_writer_behind_our_reader_deadlocks() {
    let admin = admin().await;
    let dir = unique_root("r28-rw-cycle");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let ours = RwLock::new(&s, &dir).unwrap();
    let g = within("read", ours.read()).await.unwrap();
    let stuck = g.path().rsplit('/').next().unwrap().to_string();
    refused(g.release()).await;
    let o = session().await;
    let theirs = RwLock::new(&o, &dir).unwrap();
    let writer = tokio::spawn(async move {
        let w = theirs.write_timeout(Duration::from_secs(20)).await;
        let got = w.as_ref().map(|_| ()).map_err(|e| format!("{e:?}"));
        if let Ok(w) = w {
            let _ = w.release().await;
        }
        got
    });
    until_children(&admin, &dir, 2).await;
    delete_given_back(&admin, &dir).await;
    let started = std::time::Instant::now();
    let read = ours
        .read_timeout(Duration::from_secs(10))
        .await
        .map(|g| g.path().to_string());
    let waited = started.elapsed();
    let left = children(&admin, &dir).await;
    println!(
        "stuck reader {stuck}; our read_timeout(10 s) {read:?} after {waited:?}; nodes {left:?}"
    );
    s.close().await;
    let their_write = tokio::time::timeout(Duration::from_secs(25), writer)
        .await
        .expect("writer task ends")
        .unwrap();
    println!("their write (after our session closed) {their_write:?}");
    o.close().await;
    assert!(
        read.is_ok(),
        "our read waited {waited:?} behind their writer, itself behind our stuck reader, \
         the ACL fixed: {read:?}; nodes {left:?}"
    );
}

/// Review 28, finding (liveness, multi-lock; two sessions): our fair-lock node in `y` is
/// stuck (its release refused by `y` denying DELETE). Another session's multi-lock on
/// `[x, y]` takes `x` and queues in `y` behind our stuck node; our multi-lock on `[x, y]`
/// queues in `x` behind them. The administrator gives `y` DELETE back. Our multi-lock covers
/// `y`, yet never reaches it: it waits in `x`, behind a holder waiting behind our node in `y`,
/// which nothing of ours tries again (a retry runs only in the directory an acquire waits or
/// is granted in). Both wait until our session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review28_our_multi_lock_waits_behind_theirs_behind_our_stuck_node_in_its_next_path() {
    let admin = admin().await;
    let root = unique_root("r28-multi-cycle");
    an_open_directory(&admin, &root).await;
    let (x, y) = (format!("{root}/x"), format!("{root}/y"));
    an_open_directory(&admin, &x).await;
    a_directory_denying_delete(&admin, &y).await;
    let s = session().await;
    let g = within("lock y", FairLock::new(&s, &y).unwrap().lock())
        .await
        .unwrap();
    let stuck = g.path().rsplit('/').next().unwrap().to_string();
    refused(g.release()).await;
    let o = session().await;
    let theirs = zk_recipes::MultiLock::new(&o, [&x, &y]).unwrap();
    let other = tokio::spawn(async move {
        let m = theirs.lock_timeout(Duration::from_secs(25)).await;
        let got = m.as_ref().map(|_| ()).map_err(|e| format!("{e:?}"));
        if let Ok(m) = m {
            let _ = m.release().await;
        }
        got
    });
    until_children(&admin, &y, 2).await;
    delete_given_back(&admin, &y).await;
    let ours = zk_recipes::MultiLock::new(&s, [&x, &y]).unwrap();
    let started = std::time::Instant::now();
    let locked = ours.lock_timeout(Duration::from_secs(10)).await.map(drop);
    let waited = started.elapsed();
    let left = children(&admin, &y).await;
    println!("stuck {stuck} in y; our multi lock_timeout(10 s) {locked:?} after {waited:?}; y holds {left:?}");
    s.close().await;
    let theirs_got = tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("their task ends")
        .unwrap();
    println!("their multi-lock (after our session closed) {theirs_got:?}");
    o.close().await;
    assert!(
        locked.is_ok(),
        "our multi-lock waited {waited:?} in x behind theirs, itself behind our stuck node in \
         y, y's ACL fixed: {locked:?}; y holds {left:?}"
    );
}

/// The sweeper (`queue::sweep`, the fix of review 28): our node stuck in a directory denying
/// DELETE, and nothing of ours ever comes back to the directory. Another session waits behind
/// it; once the administrator gives DELETE back, our sweeper deletes the node and they are
/// granted, within about a second, our session still open. For a queue node (fair lock) and
/// the simple lock's shared path, whose delete the sweeper makes under the path's serializer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_our_sweeper_frees_a_fair_lock_no_acquire_of_ours_comes_back_to() {
    a_waiter_of_theirs_behind_our_stuck_node(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_acl_is_fixed_our_sweeper_frees_a_simple_lock_no_acquire_of_ours_comes_back_to() {
    a_waiter_of_theirs_behind_our_stuck_node(true).await;
}

async fn a_waiter_of_theirs_behind_our_stuck_node(simple: bool) {
    let admin = admin().await;
    let dir = unique_root(if simple { "sweep-simple" } else { "sweep-fair" });
    a_directory_denying_delete(&admin, &dir).await;
    let path = format!("{dir}/lock");
    let s = session().await;
    if simple {
        a_stuck_simple_lock_node(&s, &path).await;
    } else {
        a_stuck_node(&s, &dir).await;
    }
    let o = session().await;
    let (o2, path2, dir2) = (o.clone(), path.clone(), dir.clone());
    let theirs = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let got = if simple {
            let lock = ExclusiveLock::new(&o2, &path2).unwrap();
            lock.lock_timeout(Duration::from_secs(20)).await.map(drop)
        } else {
            let lock = FairLock::new(&o2, &dir2).unwrap();
            lock.lock_timeout(Duration::from_secs(20)).await.map(drop)
        };
        (got, started.elapsed())
    });
    if !simple {
        until_children(&admin, &dir, 2).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !theirs.is_finished(),
        "their lock waits behind our stuck node"
    );
    delete_given_back(&admin, &dir).await;
    let fixed = std::time::Instant::now();
    let (got, waited) = within("their lock", theirs).await.unwrap();
    let after_fix = fixed.elapsed();
    println!("their lock {got:?} after {waited:?}, {after_fix:?} after the fix");
    let left = children(&admin, &dir).await;
    s.close().await;
    o.close().await;
    assert!(
        got.is_ok(),
        "their lock behind our stuck node, the ACL fixed and our session open: {got:?}; \
         nodes {left:?}"
    );
    assert!(
        after_fix < Duration::from_secs(5),
        "granted {after_fix:?} after the fix"
    );
}

/// The sweeper's cost while the ACL stays broken: once it has been refused at the ACL
/// version it reads, it sends only its read of the directory a second, and the delete again
/// only when the version changes. Without that gate it sent the read of the node, the delete
/// and the read after the refusal on top, every second (15 requests in the 3 s). And
/// `close()` does not wait for it, nor does it send anything after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_only_reads_while_the_acl_stays_broken_and_stops_at_close() {
    let (admin, dir, s, proxy) =
        a_session_and_a_directory_denying_delete("sweep-cost", Duration::from_secs(8)).await;
    let lock = RwLock::new(&s, &dir).unwrap();
    let g = within("read", lock.read()).await.unwrap();
    refused(g.release()).await;
    // Its first pass (a second after the note) tries the delete once.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = forwarded_in(&proxy, Duration::from_secs(3)).await;
    // A change of the directory's ACL (DELETE still denied) makes it try the delete again.
    deny_delete(&admin, &dir).await;
    let after_change = forwarded_in(&proxy, Duration::from_millis(1200)).await;
    let started = std::time::Instant::now();
    within("close", s.close()).await;
    let took = started.elapsed();
    let later = forwarded_in(&proxy, Duration::from_millis(1500)).await;
    println!(
        "sweeper: {idle} requests in 3 s idle, {after_change} in the second after an ACL \
         change; close() took {took:?}; requests after close: {later}"
    );
    assert!(
        (1..=5).contains(&idle),
        "the sweeper sent {idle} requests in 3 s while nothing changed (one read a second)"
    );
    assert!(
        after_change >= 4,
        "after the ACL changed the sweeper tried the delete again: {after_change} requests"
    );
    assert!(took < Duration::from_millis(900), "close() took {took:?}");
    assert_eq!(later, 0, "requests sent after close()");
    assert!(children(&admin, &dir).await.is_empty());
}

// ---------------------------------------------------------------------------------------
// Review 29: the sweeper (d1038d4).

/// Review 29, finding (liveness/cost): our simple-lock node is stuck (a directory denying
/// DELETE) and the sweeper's first try is refused at ACL versions (dir, 0). The administrator
/// then deletes our node by hand (leaving the ACL) and our session takes the lock again: a
/// new node of ours, held, at the same path, also at node ACL version 0. Nothing of ours is
/// stuck any more, yet the old note stays: the listing shows the name, and the gate skips
/// `delete_stuck` (which would find the czxid changed and forget it) because the ACL
/// versions read are those of the old refusal. The sweeper sends two `exists` a second for
/// as long as the path is held. Fixed: the sweeper reads a simple-lock node's czxid when the
/// directory changed, and forgets a note of another node (1 request in the 3 s after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review29_a_note_of_our_replaced_simple_lock_node_keeps_the_sweeper_running() {
    let (admin, dir, s, proxy) =
        a_session_and_a_directory_denying_delete("r29-stale-simple", Duration::from_secs(8)).await;
    let path = format!("{dir}/lock");
    let lock = a_stuck_simple_lock_node(&s, &path).await;
    // The sweeper's first pass (a second after the note) is refused.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    admin.delete(&path, None).await.unwrap();
    let g2 = within("lock again", lock.lock()).await.unwrap();
    // The sweeper lists the directory (its children changed) and goes on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = forwarded_in(&proxy, Duration::from_secs(3)).await;
    println!("{idle} requests in 3 s with our guard held and nothing of ours stuck");
    drop(g2);
    s.close().await;
    assert!(
        idle <= 1,
        "nothing of ours is stuck, yet {idle} requests were sent in 3 s (the sweeper kept a \
         note of a node gone, replaced by a live one of ours at its path)"
    );
}

/// Review 29, finding (cost): `n` simple-lock nodes of ours stuck in one directory denying
/// DELETE. While nothing changes, the sweeper reads each node (`exists`) every second on top
/// of the directory: the idle cost grows with the number of notes (one directory read a
/// second for one note, n + 1 for n). Fixed: a simple-lock node is read when its directory
/// changed, and every ten seconds else (3 requests in the 3 s after, 21 before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review29_the_sweepers_idle_cost_grows_with_stuck_simple_lock_nodes() {
    let (_admin, dir, s, proxy) =
        a_session_and_a_directory_denying_delete("r29-cost-simple", Duration::from_secs(8)).await;
    for i in 0..6 {
        a_stuck_simple_lock_node(&s, &format!("{dir}/lock-{i}")).await;
    }
    // Past the first pass, which tries each delete once.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let idle = forwarded_in(&proxy, Duration::from_secs(3)).await;
    println!(
        "sweeper: {idle} requests in 3 s idle with 6 stuck simple-lock nodes in one directory"
    );
    s.close().await;
    assert!(
        idle <= 5,
        "the sweeper sent {idle} requests in 3 s while nothing changed (6 notes in one \
         directory; 1..=5 with one note)"
    );
}
