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
