//! Review 21: probes of b2621dc (Closed after close starts, the stuck-node registry, the
//! merged release's NoAuth, the reserved /zookeeper tree, below_an_ephemeral).
#![allow(dead_code)]
mod support;

use std::future::Future;
use std::time::Duration;

use zk_recipes::testing::{shared_server, unique_root, SUPER_AUTH};
use zk_recipes::{zk, Error, FairLock, Semaphore, Session};

const QUICK: Duration = Duration::from_secs(15);

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(QUICK, fut)
        .await
        .unwrap_or_else(|_| panic!("expected {what} within {QUICK:?}"))
}

async fn session() -> Session {
    within(
        "a session",
        Session::builder(shared_server().connect_string())
            .with_session_timeout(Duration::from_secs(4))
            .connect(),
    )
    .await
    .expect("connect")
}

async fn raw() -> zk::Client {
    within(
        "a raw client",
        zk::Client::connect(&shared_server().connect_string()),
    )
    .await
    .expect("raw connect")
}

async fn admin() -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", SUPER_AUTH.as_bytes())
        .connect(&shared_server().connect_string())
        .await
        .expect("connect as the administrator")
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

/// Finding A (asserts). In a directory without DELETE, an acquire that is cancelled (its
/// future dropped, the documented way to give up) leaves its node, which the background
/// cleanup cannot delete: `Abandoned`'s refused delete is only logged, never noted with
/// `note_stuck`. Once the holder is gone, the next `lock()` of the same session queues behind
/// that undeletable node of its own and waits until the session ends: the hang review 20 fixed
/// for releases, kept for cancelled acquires. Expected (b2621dc's promise): `NoAuth` on the
/// directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_in_a_no_delete_directory_hangs_the_next_lock() {
    let admin = admin().await;
    let dir = unique_root("r21-cancelled");
    a_directory_denying_delete(&admin, &dir).await;
    let holder = session().await;
    let held = within("holder's lock", FairLock::new(&holder, &dir).unwrap().lock())
        .await
        .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &dir).unwrap();
    // Give up by dropping the future (cancel safety: "dropping the future deletes the node").
    let gave_up = tokio::time::timeout(Duration::from_millis(700), lock.lock()).await;
    assert!(gave_up.is_err(), "the lock was busy: {:?}", gave_up.map(|r| r.map(drop)));
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

/// Finding B (asserts). An administrator makes our fair-lock node read-only (its ACL, not the
/// directory's: the directory allows everything). The marked release (`set_data` + `delete`)
/// is refused for the `set_data` part, and b2621dc notes the node as stuck ("no DELETE
/// permission on its directory"): the release answers `NoAuth`, the node stays until the
/// session ends, and the next `lock()` answers `NoAuth` on a directory whose ACL allows us
/// everything. Yet a plain delete of that node succeeds, even from an unauthenticated client:
/// the refusal was never permanent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_node_is_not_undeletable() {
    let admin = admin().await;
    let dir = unique_root("r21-readonly-node");
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
    let node = g.path().to_string();
    admin
        .set_acl(
            &node,
            &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
            None,
        )
        .await
        .unwrap();
    let released = within("release", g.release()).await;
    println!("release answered {released:?}");
    let again = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .map(|r| r.map(drop));
    println!("next lock() answered {again:?}");
    let left = children(&admin, &dir).await;
    println!("nodes left: {left:?}");
    // Anyone may delete it: deleting is governed by the directory's ACL, which is open.
    let plain = raw().await;
    let deleted = plain.delete(&node, None).await;
    println!("a plain unauthenticated client's delete of {node}: {deleted:?}");
    assert!(deleted.is_ok(), "the node really was undeletable");
    assert!(
        released.is_ok() && matches!(again, Ok(Ok(()))),
        "a node the session could delete was left and called undeletable: release {released:?}, next lock {again:?}"
    );
    s.close().await;
}

/// Finding C (asserts). The `/zookeeper` refusal keys on "the session has a chroot", not on
/// where the path lands: with a chroot of `/zookeeper`, a semaphore on `/quota` writes its
/// permit count into ZooKeeper's own `/zookeeper/quota` node, the case review 20 fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chroot_of_zookeeper_reaches_the_reserved_tree() {
    let admin = admin().await;
    let (before, _) = admin.get_data("/zookeeper/quota").await.unwrap();
    let s = within(
        "a session chrooted at /zookeeper",
        Session::builder(shared_server().connect_string())
            .with_chroot("/zookeeper")
            .connect(),
    )
    .await
    .unwrap();
    let made = Semaphore::new(&s, "/quota", 2);
    let outcome = match made {
        Err(e) => format!("new: {e:?}"),
        Ok(sem) => match within("acquire", sem.acquire()).await {
            Ok(g) => {
                let _ = g.release().await;
                "acquired".to_string()
            }
            Err(e) => format!("acquire: {e:?}"),
        },
    };
    let (after, _) = admin.get_data("/zookeeper/quota").await.unwrap();
    println!(
        "semaphore on /quota under chroot /zookeeper: {outcome}; /zookeeper/quota data {:?} -> {:?}",
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
    // Put ZooKeeper's node back as it was.
    admin.set_data("/zookeeper/quota", &before, None).await.unwrap();
    s.close().await;
    assert_eq!(after, before, "a recipe wrote into /zookeeper/quota");
}

/// Finding D (asserts). `below_an_ephemeral` names the lowest *existing* path it walks to, not
/// the ephemeral node: under a chroot that is an ephemeral node, a lock at `/a/lock` is told
/// "/a is an ephemeral node", though `/a` does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_chroot_is_named_as_a_node_that_does_not_exist() {
    let owner = raw().await;
    let eph = unique_root("r21-eph-chroot");
    owner
        .create(
            &eph,
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let s = within(
        "a session chrooted at an ephemeral node",
        Session::builder(shared_server().connect_string())
            .with_chroot(&eph)
            .connect(),
    )
    .await
    .unwrap();
    let r = within("lock", FairLock::new(&s, "/a/lock").unwrap().lock())
        .await
        .map(drop);
    println!("fair lock at /a/lock under ephemeral chroot {eph}: {r:?}");
    let exists_a = owner.check_stat(&format!("{eph}/a")).await.unwrap();
    s.close().await;
    match r {
        Err(Error::InvalidArgument(m)) => assert!(
            !m.starts_with("/a is an ephemeral node"),
            "the message names /a, which does not exist (exists: {exists_a:?}): {m}"
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Probes that held (each asserts what b2621dc promises): in a directory without DELETE, a
/// semaphore of 2 with one stuck lease of ours still grants once the other holder goes; a
/// reader behind our stuck reader is granted, a writer answers NoAuth; a stuck node an
/// administrator deletes no longer blocks; a waiter already waiting when our guard's release
/// is refused answers NoAuth; a multi-lock and an election behind our stuck nodes answer
/// NoAuth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_stuck_registry_probes() {
    use zk_recipes::{Election, MultiLock, RwLock};
    let admin = admin().await;
    let root = unique_root("r21-held");
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
        let og = within("other's lease", Semaphore::new(&other, &dir, 2).unwrap().acquire())
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let sem = sem.clone();
            async move { sem.acquire().await.map(|g| std::mem::forget(g)) }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("semaphore(2) waiter finished early: {}", waiting.is_finished());
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
        println!("read behind our stuck reader: {:?}", r2.as_ref().map(|r| r.as_ref().map(drop)));
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
        println!("after the admin deleted it: {:?}", again.as_ref().map(|r| r.as_ref().map(drop)));
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

/// Probe (asserts): an acquire waiting when `close()` starts, and one made while close()
/// waits, answer `Closed` (the relabelling of b2621dc), never a retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_waiters_cut_off_by_close_answer_closed() {
    let root = unique_root("r21-close");
    let other = session().await;
    let held = within("lock", FairLock::new(&other, &root).unwrap().lock())
        .await
        .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock().await.map(drop) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.close().await;
    let mut answers = Vec::new();
    for w in waiters {
        answers.push(within("waiter", w).await.unwrap());
    }
    println!("waiters cut off by close: {answers:?}");
    drop(held);
    other.close().await;
    assert!(
        answers.iter().all(|a| matches!(a, Err(Error::Closed))),
        "{answers:?}"
    );
}
