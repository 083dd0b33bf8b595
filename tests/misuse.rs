//! Bad input, misuse and abuse (issue 7), against the shared standalone server.
//!
//! Every case checks two things: the caller gets a typed error that says what to do, and
//! ZooKeeper is left as it was (the subtree of the case is compared before and after).
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

mod support;

use support::zk::{admin, raw, session};
use zk_recipes::testing::{shared_server, unique_root};
use zk_recipes::{
    zk, Election, Error, ExclusiveLock, FairLock, Layout, LossReason, RwLock, Semaphore, Session,
};

/// Bound on every single wait.
const QUICK: Duration = Duration::from_secs(15);

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(QUICK, fut)
        .await
        .unwrap_or_else(|_| panic!("expected {what} within {QUICK:?}"))
}

/// Every node under `root` (itself included) with its data and ACL: what "ZooKeeper is left as
/// it was" compares.
async fn snapshot(client: &zk::Client, root: &str) -> BTreeMap<String, (Vec<u8>, Vec<zk::Acl>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_string()];
    while let Some(path) = todo.pop() {
        let data = match client.get_data(&path).await {
            Ok((d, _)) => d,
            Err(zk::Error::NoNode) => continue,
            // A node we may not read: record it without data.
            Err(zk::Error::NoAuth) => b"<no auth>".to_vec(),
            Err(e) => panic!("get_data {path}: {e}"),
        };
        let acl = match client.get_acl(&path).await {
            Ok((acl, _)) => acl,
            Err(e) => panic!("get_acl {path}: {e}"),
        };
        match client.list_children(&path).await {
            Ok(kids) => todo.extend(kids.iter().map(|k| format!("{path}/{k}"))),
            Err(zk::Error::NoNode | zk::Error::NoAuth) => {}
            Err(e) => panic!("list {path}: {e}"),
        }
        out.insert(path, (data, acl));
    }
    out
}

async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

// ------------------------------------------------------------------------- the directory

/// An administrator deletes every contender node and the lock directory while waiters wait.
/// The nodes go highest first, so each waiter's own node is deleted before its predecessor:
/// no waiter can have been first in line with its original node, and none may be granted
/// with it (a guard for a deleted node, whose token is older than grants already made). Each
/// must re-queue (the directory is made again) and get the lock in its new node, never an
/// error. Repeated, since which of two ready watch events a waiter sees first is random.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_lock_directory_under_waiters() {
    let admin = raw().await;
    for trial in 0..6 {
        let dir = format!("{}/lock", unique_root("rmdir"));
        let holder_session = session().await;
        let held = within(
            "the first lock",
            FairLock::new(&holder_session, &dir).unwrap().lock(),
        )
        .await
        .unwrap();
        let mut waiters = Vec::new();
        let mut sessions = vec![holder_session.clone()];
        for w in 0..4 {
            let s = session().await;
            sessions.push(s.clone());
            let lock = FairLock::new(&s, &dir).unwrap().with_data(format!("w{w}"));
            waiters.push(tokio::spawn(async move {
                let g = tokio::time::timeout(QUICK, lock.lock())
                    .await
                    .map_err(|_| format!("w{w} hung"))?
                    .map_err(|e| format!("w{w} got {e:?}"))?;
                let token = g.fencing_token();
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = g.release().await;
                Ok::<_, String>((w, token))
            }));
        }
        let mut originals = Vec::new();
        for _ in 0..100 {
            originals = children(&admin, &dir).await;
            if originals.len() == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            originals.len(),
            5,
            "expected the holder and 4 waiters queued"
        );
        let mut newest_original = 0;
        for k in &originals {
            let (_, stat) = admin.get_data(&format!("{dir}/{k}")).await.unwrap();
            newest_original = newest_original.max(stat.czxid);
        }
        // Highest sequence first, all sent at once; then the directory, retrying while
        // re-queued waiters refill it.
        let mut deleted_dir = false;
        for _ in 0..50 {
            let mut kids = children(&admin, &dir).await;
            kids.sort_by_key(|k| std::cmp::Reverse(k[k.len() - 10..].to_string()));
            let paths: Vec<String> = kids.iter().map(|k| format!("{dir}/{k}")).collect();
            let deletes: Vec<_> = paths.iter().map(|p| admin.delete(p, None)).collect();
            for d in deletes {
                let _ = d.await;
            }
            match admin.delete(&dir, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    deleted_dir = true;
                    break;
                }
                Err(zk::Error::NotEmpty) => continue,
                Err(e) => panic!("delete {dir}: {e}"),
            }
        }
        assert!(deleted_dir, "could not delete {dir}");
        within("the holder to be told", held.lost()).await;
        assert_eq!(held.loss_reason(), Some(LossReason::NodeDeleted));
        let mut failures = Vec::new();
        for w in waiters {
            match within("a waiter", w).await.unwrap() {
                Ok((w, token)) if token <= newest_original => failures.push(format!(
                    "w{w} was granted its deleted original node (token {token} <= {newest_original})"
                )),
                Ok(_) => {}
                Err(e) => failures.push(e),
            }
        }
        for s in sessions {
            within("close", s.close()).await;
        }
        assert!(
            failures.is_empty(),
            "trial {trial}: expected every waiter to re-queue and hold in a new node, got {failures:?}"
        );
        assert!(
            children(&admin, &dir).await.is_empty(),
            "trial {trial}: nodes left in {dir}"
        );
    }
}

// ------------------------------------------------------------------------- recipes, uniformly

/// The acquire calls of every recipe, so that one table covers them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recipe {
    Fair,
    Sem,
    Read,
    Write,
    Elect,
}

const RECIPES: [Recipe; 5] = [
    Recipe::Fair,
    Recipe::Sem,
    Recipe::Read,
    Recipe::Write,
    Recipe::Elect,
];

/// Acquires `recipe` on `path` (with `acls` if given), bounded.
async fn acquire(
    recipe: Recipe,
    s: &Session,
    path: &str,
    acls: Option<&[zk::Acl]>,
) -> zk_recipes::Result<zk_recipes::LockGuard> {
    let fut = async {
        Ok(match recipe {
            Recipe::Fair => {
                let mut l = FairLock::new(s, path)?;
                if let Some(a) = acls {
                    l = l.with_acls(a);
                }
                l.lock().await?
            }
            Recipe::Sem => {
                let mut l = Semaphore::new(s, path, 2)?;
                if let Some(a) = acls {
                    l = l.with_acls(a);
                }
                l.acquire().await?
            }
            Recipe::Read | Recipe::Write => {
                let mut l = RwLock::new(s, path)?;
                if let Some(a) = acls {
                    l = l.with_acls(a);
                }
                if recipe == Recipe::Read {
                    l.read().await?.into()
                } else {
                    l.write().await?.into()
                }
            }
            Recipe::Elect => {
                let mut e = Election::new(s, path, "candidate")?;
                if let Some(a) = acls {
                    e = e.with_acls(a);
                }
                e.campaign().await?.into()
            }
        })
    };
    within(&format!("{recipe:?} on {path} to return"), fut).await
}

// ------------------------------------------------------------------------- bad input

/// Malformed host strings and out-of-range timeouts are refused before any connection, with
/// a message that names the culprit and the expected form.
#[tokio::test]
async fn malformed_hosts_and_timeouts_are_refused_before_connecting() {
    let hosts_cases: &[(&str, &str)] = &[
        ("   ", "empty"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("127.0.0.1:65536", "127.0.0.1:65536"),
        ("127.0.0.1:2181,", "\"\""),
        ("a:1,,b:2", "\"\""),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:2181/app", "with_chroot"),
    ];
    for (hosts, mentions) in hosts_cases {
        let err = within("connect to refuse", Session::builder(*hosts).connect())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "hosts {hosts:?}: expected InvalidArgument, got {err:?}"
        );
        assert!(
            err.to_string().contains(mentions),
            "hosts {hosts:?}: expected the message to mention {mentions:?}, got {err}"
        );
    }
    let server = shared_server().connect_string();
    let timeouts = [
        Duration::ZERO,
        Duration::from_millis(99),
        Duration::from_secs(3601),
        Duration::MAX,
    ];
    for t in timeouts {
        for (what, builder) in [
            (
                "session timeout",
                Session::builder(&server).with_session_timeout(t),
            ),
            (
                "connect timeout",
                Session::builder(&server).with_connect_timeout(t),
            ),
        ] {
            let err = within("connect to refuse", builder.connect())
                .await
                .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.contains(what) && m.contains("100ms..1h")),
                "{what} {t:?}: expected InvalidArgument naming the range, got {err:?}"
            );
        }
    }
    let err = within(
        "connect to refuse",
        Session::builder(&server)
            .with_digest_auth("al:ice", "pw")
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(_)),
        "a user name with ':' must be refused, got {err:?}"
    );
}

/// Every recipe (and the contender listing) refuses malformed paths before sending anything;
/// a semaphore refuses zero permits.
#[tokio::test]
async fn malformed_paths_and_zero_permits_send_nothing() {
    let s = session().await;
    let before = s.request_count();
    for p in [
        "", "rel/path", "/", "/a/", "//a", "/a/../b", "/a\0b", "/a\u{7}b",
    ] {
        let results: Vec<(&str, zk_recipes::Result<()>)> = vec![
            ("RwLock", RwLock::new(&s, p).map(drop)),
            ("Election", Election::new(&s, p, "x").map(drop)),
            ("ExclusiveLock", ExclusiveLock::new(&s, p).map(drop)),
            ("FairLock", FairLock::new(&s, p).map(drop)),
            ("Semaphore", Semaphore::new(&s, p, 1).map(drop)),
            (
                "list_contenders",
                within("list_contenders", zk_recipes::list_contenders(&s, p))
                    .await
                    .map(drop),
            ),
        ];
        for (what, r) in results {
            match r {
                Err(Error::InvalidPath { path, reason }) => {
                    assert_eq!(path, p, "{what}: the error must name the path as given");
                    assert!(!reason.is_empty());
                }
                other => panic!("{what} accepted the path {p:?}: {other:?}"),
            }
        }
    }
    let err = Semaphore::new(&s, "/ok", 0).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("permit")),
        "permits = 0: got {err:?}"
    );
    assert_eq!(
        s.request_count(),
        before,
        "a request was sent for malformed input"
    );
    s.close().await;
}

/// Zero and huge timeouts on the acquire calls: zero acts as a try (Timeout when busy, no
/// node left); a timeout too large to add to the clock must not panic, and means "no limit".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_huge_acquire_timeouts() {
    let admin = raw().await;
    let root = unique_root("timeouts");
    let s = session().await;
    let other = session().await;
    let dir = format!("{root}/fair");
    let held = FairLock::new(&s, &dir).unwrap().lock().await.unwrap();
    let busy = FairLock::new(&other, &dir).unwrap();
    assert_eq!(
        within("lock_timeout(0)", busy.lock_timeout(Duration::ZERO))
            .await
            .unwrap_err(),
        Error::Timeout
    );
    assert_eq!(
        children(&admin, &dir).await.len(),
        1,
        "lock_timeout(0) left its node"
    );
    held.release().await.unwrap();
    // Free now: a zero timeout still takes a free lock.
    let g = within(
        "lock_timeout(0) on a free lock",
        busy.lock_timeout(Duration::ZERO),
    )
    .await
    .expect("a zero timeout takes a free lock");
    g.release().await.unwrap();
    // Huge: must behave as "no limit" (and certainly not panic).
    for (what, fut) in [
        (
            "FairLock::lock_timeout(MAX)",
            tokio::spawn({
                let l = FairLock::new(&s, format!("{root}/f")).unwrap();
                async move { l.lock_timeout(Duration::MAX).await.map(drop) }
            }),
        ),
        (
            "Semaphore::acquire_timeout(MAX)",
            tokio::spawn({
                let l = Semaphore::new(&s, format!("{root}/s"), 1).unwrap();
                async move { l.acquire_timeout(Duration::MAX).await.map(drop) }
            }),
        ),
        (
            "RwLock::write_timeout(MAX)",
            tokio::spawn({
                let l = RwLock::new(&s, format!("{root}/w")).unwrap();
                async move { l.write_timeout(Duration::MAX).await.map(drop) }
            }),
        ),
        (
            "RwLock::read_timeout(MAX)",
            tokio::spawn({
                let l = RwLock::new(&s, format!("{root}/r")).unwrap();
                async move { l.read_timeout(Duration::MAX).await.map(drop) }
            }),
        ),
        (
            "ExclusiveLock::lock_timeout(MAX)",
            tokio::spawn({
                let l = ExclusiveLock::new(&s, format!("{root}/x")).unwrap();
                async move { l.lock_timeout(Duration::MAX).await.map(drop) }
            }),
        ),
    ] {
        match within(what, fut).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{what} on a free lock failed: {e:?}"),
            Err(join) => {
                panic!("{what} panicked instead of treating the timeout as unlimited: {join}")
            }
        }
    }
    s.close().await;
    other.close().await;
    let mut left = Vec::new();
    for d in ["fair", "f", "s", "w", "r", "x"] {
        left.extend(children(&admin, &format!("{root}/{d}")).await);
    }
    assert!(left.is_empty(), "nodes left: {left:?}");
}

// ------------------------------------------------------------------------- odd paths

/// An existing persistent node with data works as the lock directory of every queue recipe;
/// its data, version and ACL are untouched and no child is left. The simple lock, whose path
/// is the lock node itself, refuses such a node (InvalidArgument: it would never be released)
/// and leaves it.
#[tokio::test]
async fn an_existing_node_with_data_as_the_lock_path() {
    let admin = raw().await;
    let path = unique_root("datanode");
    admin
        .create(
            &path,
            b"precious",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let before = snapshot(&admin, &path).await;
    let (_, stat_before) = admin.get_data(&path).await.unwrap();
    let s = session().await;
    for recipe in RECIPES {
        let held = acquire(recipe, &s, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{recipe:?} on an existing node with data: {e:?}"));
        assert!(held.path().starts_with(&format!("{path}/")));
        held.release().await.unwrap();
    }
    let x = ExclusiveLock::new(&s, &path).unwrap();
    for err in [
        x.try_lock().await.unwrap_err(),
        x.lock_timeout(Duration::from_millis(2000))
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("persistent node")),
            "the simple lock on a persistent node: expected InvalidArgument, got {err:?}"
        );
    }
    s.close().await;
    let (data, stat_after) = admin.get_data(&path).await.unwrap();
    assert_eq!(data, b"precious");
    assert_eq!(
        stat_after.version, stat_before.version,
        "data version changed"
    );
    assert_eq!(snapshot(&admin, &path).await, before, "the subtree changed");
    admin.delete(&path, None).await.unwrap();
}

/// A path under a node whose ACL lets anyone read but nobody write: every recipe fails with
/// NoAuth naming the path (as the lock directory itself and below it), and nothing changes.
/// An ephemeral node as the lock directory is refused with InvalidArgument.
#[tokio::test]
async fn paths_we_may_not_use() {
    let admin = raw().await;
    let root = unique_root("acl");
    admin
        .create(
            &root,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let ro = format!("{root}/ro");
    admin
        .create(
            &ro,
            b"ro",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read()),
        )
        .await
        .unwrap();
    let eph = format!("{root}/eph");
    admin
        .create(
            &eph,
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let before = snapshot(&admin, &root).await;
    let s = session().await;
    for recipe in RECIPES {
        for path in [ro.clone(), format!("{ro}/sub/lock")] {
            match acquire(recipe, &s, &path, None).await {
                Err(e @ Error::NoAuth { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&ro) && msg.contains("with_digest_auth"),
                        "{recipe:?} on {path}: the message should name the path and the remedy: {msg}"
                    );
                }
                Err(e) => panic!("{recipe:?} on {path}: expected NoAuth, got {e:?}"),
                Ok(_) => panic!("{recipe:?} on {path}: acquired under a read-only node"),
            }
        }
        match acquire(recipe, &s, &eph, None).await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(&eph), "{m}"),
            Err(e) => {
                panic!("{recipe:?} on an ephemeral node: expected InvalidArgument, got {e:?}")
            }
            Ok(_) => panic!("{recipe:?} acquired with an ephemeral node as its directory"),
        }
        // One level lower, the same mistake answered a raw `ZooKeeper { op: "create parent",
        // source: NoChildrenForEphemerals }` naming the lock path (review 20).
        let below = format!("{eph}/sub/lock");
        match acquire(recipe, &s, &below, None).await {
            Err(Error::InvalidArgument(m)) => assert!(
                m.starts_with(&format!("{eph} is an ephemeral node")),
                "{recipe:?} on {below}: the message should name the ephemeral node: {m}"
            ),
            other => panic!(
                "{recipe:?} below an ephemeral node: expected InvalidArgument, got {:?}",
                other.map(drop)
            ),
        }
        // ZooKeeper's own tree (review 20: every recipe took locks there, and a semaphore on
        // /zookeeper wrote its permit count into ZooKeeper's own node).
        for reserved in ["/zookeeper", "/zookeeper/quota/lock"] {
            match acquire(recipe, &s, reserved, None).await {
                Err(Error::InvalidPath { path, .. }) => assert_eq!(path, reserved),
                other => panic!(
                    "{recipe:?} on {reserved}: expected InvalidPath, got {:?}",
                    other.map(drop)
                ),
            }
        }
    }
    let ex = ExclusiveLock::new(&s, format!("{eph}/sub/lock"))
        .unwrap()
        .lock()
        .await;
    assert!(
        matches!(&ex, Err(Error::InvalidArgument(m)) if m.starts_with(&format!("{eph} is an ephemeral node"))),
        "simple lock below an ephemeral node: {:?}",
        ex.map(drop)
    );
    assert!(matches!(
        ExclusiveLock::new(&s, "/zookeeper/lock"),
        Err(Error::InvalidPath { .. })
    ));
    assert_eq!(snapshot(&admin, &root).await, before, "ZooKeeper changed");
    assert!(
        children(&admin, "/zookeeper")
            .await
            .iter()
            .all(|c| c == "config" || c == "quota"),
        "a recipe made a node in /zookeeper"
    );
    s.close().await;
}

/// A session under `chroot`, made first as a node of `mode` (by `owner`, which keeps an
/// ephemeral one alive).
async fn session_under(owner: &zk::Client, chroot: &str, mode: zk::CreateMode) -> Session {
    owner
        .create(chroot, b"", &mode.with_acls(zk::Acls::anyone_all()))
        .await
        .unwrap();
    within(
        "a chrooted session",
        Session::builder(shared_server().connect_string())
            .with_chroot(chroot)
            .connect(),
    )
    .await
    .unwrap()
}

/// Under a chroot, `/zookeeper` is an ordinary path of the application's tree: a recipe may
/// use it (the reserved tree is judged on the server's path, under the chroot).
#[tokio::test]
async fn under_a_chroot_zookeeper_is_an_ordinary_path() {
    let admin = raw().await;
    let chroot = unique_root("chroot-zk");
    let s = session_under(&admin, &chroot, zk::CreateMode::Persistent).await;
    let guard = within("lock", FairLock::new(&s, "/zookeeper").unwrap().lock())
        .await
        .unwrap();
    assert!(guard.path().starts_with("/zookeeper/"), "{}", guard.path());
    guard.release().await.unwrap();
    s.close().await;
}

/// A chroot that does not exist: InvalidPath at connect, and nothing is created.
#[tokio::test]
async fn a_missing_chroot_creates_nothing() {
    let admin = raw().await;
    let chroot = unique_root("no-chroot");
    let err = within(
        "connect with a missing chroot",
        Session::builder(shared_server().connect_string())
            .with_chroot(&chroot)
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidPath { path, .. } if *path == chroot),
        "got {err:?}"
    );
    assert!(err.to_string().contains("create it first"), "{err}");
    assert!(admin.check_stat(&chroot).await.unwrap().is_none());
}

/// ACL lists the server or the client refuses: an empty list, and `creator_all` for a session
/// without credentials. A typed error, and nothing is created.
#[tokio::test]
async fn acl_lists_that_cannot_work() {
    let admin = raw().await;
    let root = unique_root("badacl");
    let s = session().await;
    for recipe in RECIPES {
        for (what, acls) in [
            ("an empty ACL", Vec::new()),
            ("creator_all without auth", zk::Acls::creator_all().to_vec()),
        ] {
            let path = format!("{root}/{recipe:?}");
            match acquire(recipe, &s, &path, Some(&acls)).await {
                Err(Error::ZooKeeper { source, .. }) => {
                    assert_eq!(source, zk::Error::InvalidAcl, "{recipe:?} with {what}")
                }
                Err(e) => {
                    panic!("{recipe:?} with {what}: expected ZooKeeper InvalidAcl, got {e:?}")
                }
                Ok(_) => panic!("{recipe:?} acquired with {what}"),
            }
        }
    }
    s.close().await;
    assert!(
        admin.check_stat(&root).await.unwrap().is_none(),
        "something was created under {root}"
    );
}

// ------------------------------------------------------------------------- layouts

/// A kazoo-layout lock and a Curator-layout lock on the same path exclude each other, either
/// way round: the fair lock queues both kinds of node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_curator_layouts_exclude_each_other() {
    let admin = raw().await;
    let dir = unique_root("layouts");
    let a = session().await;
    let b = session().await;
    for (first, second) in [
        (Layout::Kazoo, Layout::Curator),
        (Layout::Curator, Layout::Kazoo),
    ] {
        let held = FairLock::new(&a, &dir)
            .unwrap()
            .with_layout(first)
            .lock()
            .await
            .unwrap();
        let other = FairLock::new(&b, &dir).unwrap().with_layout(second);
        assert_eq!(
            other.try_lock().await.unwrap_err(),
            Error::WouldBlock,
            "{second:?} took the lock while {first:?} held it"
        );
        assert_eq!(
            other
                .lock_timeout(Duration::from_millis(200))
                .await
                .unwrap_err(),
            Error::Timeout
        );
        let waiting = tokio::spawn(async move { other.lock().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "{second:?} did not wait for {first:?}"
        );
        held.release().await.unwrap();
        let g = within("the other layout to get the lock", waiting)
            .await
            .unwrap()
            .unwrap();
        g.release().await.unwrap();
    }
    // Mixed, concurrently: never two inside.
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        let layout = if i % 2 == 0 {
            Layout::Kazoo
        } else {
            Layout::Curator
        };
        let lock = FairLock::new(&s, &dir).unwrap().with_layout(layout);
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = lock.lock().await.unwrap();
                assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within("mixed-layout contenders", t).await.unwrap();
    }
    a.close().await;
    b.close().await;
    assert!(children(&admin, &dir).await.is_empty());
}

// ------------------------------------------------------------------------- guard misuse

/// `release` consumes the guard, so it cannot be called twice. What remains: a guard that was
/// lost is released (error LockLost) or dropped, harmlessly: the next holder keeps its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_or_drop_after_loss_is_harmless() {
    let admin = raw().await;
    let root = unique_root("after-loss");
    for recipe in RECIPES {
        let dir = format!("{root}/{recipe:?}");
        let a = session().await;
        let b = session().await;
        let first = acquire(recipe, &a, &dir, None).await.unwrap();
        let first_path = first.path().to_string();
        // Another of the same kind (for a semaphore with two permits, or readers) might hold
        // alongside; the test is about the deleted one.
        admin.delete(&first_path, None).await.unwrap();
        for _ in 0..100 {
            if first.is_lost() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(first.is_lost(), "{recipe:?}: not told its node was deleted");
        let second = acquire(recipe, &b, &dir, None).await.unwrap();
        let second_path = second.path().to_string();
        if recipe == Recipe::Fair {
            let err = first.release().await.unwrap_err();
            assert_eq!(err, Error::LockLost(LossReason::NodeDeleted));
        } else {
            drop(first);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !second.is_lost(),
            "{recipe:?}: the new holder lost its lock when the old guard went"
        );
        assert!(
            admin.check_stat(&second_path).await.unwrap().is_some(),
            "{recipe:?}: the new holder's node was deleted by the old guard"
        );
        second.release().await.unwrap();
        a.close().await;
        b.close().await;
        assert!(children(&admin, &dir).await.is_empty());
    }
}

/// A guard whose session was closed: its release says the lock is gone (LockLost or Closed),
/// new acquires on the closed session fail with Closed, and nothing is left.
#[tokio::test]
async fn guards_and_recipes_after_the_session_closed() {
    let admin = raw().await;
    let root = unique_root("closed");
    for recipe in RECIPES {
        let dir = format!("{root}/{recipe:?}");
        let s = session().await;
        let held = acquire(recipe, &s, &dir, None).await.unwrap();
        s.close().await;
        assert!(
            held.is_lost(),
            "{recipe:?}: a guard of a closed session must report lost"
        );
        match held.release().await {
            Err(Error::LockLost(_) | Error::Closed) => {}
            other => panic!(
                "{recipe:?}: release after close: expected LockLost or Closed, got {other:?}"
            ),
        }
        match acquire(recipe, &s, &dir, None).await {
            Err(Error::Closed) => {}
            Err(e) => panic!("{recipe:?} on a closed session: expected Closed, got {e:?}"),
            Ok(_) => panic!("{recipe:?} acquired on a closed session"),
        }
        assert!(
            children(&admin, &dir).await.is_empty(),
            "{recipe:?} left a node"
        );
    }
}

/// Given a guard of every kind held and a handle of every recipe, when the session is
/// closed, then every public operation answers `Closed` (a guard's, `LockLost(Closed)`), none
/// of them retryable; `observe()` ends, `run()` finishes, and no contender node is left.
/// (Review 20's probe, which held on 99b9840; kept as the table of every operation.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_after_close_answers_closed() {
    use futures::StreamExt;
    use zk_recipes::{MultiLock, Op};
    let admin = raw().await;
    let root = unique_root("closed-all");
    let s = session().await;
    let fair = FairLock::new(&s, format!("{root}/fair")).unwrap();
    let held = fair.lock().await.unwrap();
    let rw = RwLock::new(&s, format!("{root}/rw")).unwrap();
    let w = rw.write().await.unwrap();
    let el = Election::new(&s, format!("{root}/el"), "me").unwrap();
    let lead = el.campaign().await.unwrap();
    let ex = ExclusiveLock::new(&s, format!("{root}/ex")).unwrap();
    let exg = ex.lock().await.unwrap();
    let sem = Semaphore::new(&s, format!("{root}/sem"), 2).unwrap();
    let semg = sem.acquire().await.unwrap();
    let multi = MultiLock::new(&s, [format!("{root}/m1"), format!("{root}/m2")]).unwrap();
    let mg = multi.lock().await.unwrap();
    let node = held.path().rsplit('/').next().unwrap().to_string();
    s.close().await;
    let mut wrong = Vec::new();
    macro_rules! probe {
        ($what:expr, $e:expr) => {{
            match within($what, $e).await.map(drop) {
                Err(Error::Closed | Error::LockLost(LossReason::Closed)) => {}
                other => wrong.push(format!("{}: {other:?}", $what)),
            }
        }};
    }
    probe!(
        "guarded",
        held.guarded([Op::create(format!("{root}/x"), "")])
    );
    probe!("relock", fair.relock(held));
    probe!("lock", fair.lock());
    probe!("try_lock", fair.try_lock());
    probe!("lock_timeout", fair.lock_timeout(Duration::from_secs(1)));
    probe!("contenders", fair.contenders());
    probe!(
        "list_contenders",
        zk_recipes::list_contenders(&s, &format!("{root}/fair"))
    );
    probe!(
        "revoke",
        zk_recipes::revoke(&s, &format!("{root}/fair"), &node)
    );
    probe!(
        "revoke_holders",
        zk_recipes::revoke_holders(&s, &format!("{root}/fair"))
    );
    probe!("downgrade", w.downgrade());
    probe!("read", rw.read());
    probe!("try_write", rw.try_write());
    probe!("rw contenders", rw.contenders());
    probe!(
        "leader's guarded",
        lead.guarded([Op::create(format!("{root}/y"), "")])
    );
    probe!("resign", lead.resign());
    probe!("leader", el.leader());
    probe!("participants", el.participants());
    probe!("campaign", el.campaign());
    probe!(
        "campaign_timeout",
        el.campaign_timeout(Duration::from_secs(1))
    );
    probe!("holder", ex.holder());
    probe!("simple lock", ex.lock());
    probe!("simple try_lock", ex.try_lock());
    probe!("simple release", exg.release());
    probe!("acquire", sem.acquire());
    probe!("semaphore contenders", sem.contenders());
    probe!("lease release", semg.release());
    probe!("multi lock", multi.lock());
    probe!("multi try_lock", multi.try_lock());
    probe!(
        "multi guarded",
        mg.guarded([Op::create(format!("{root}/z"), "")])
    );
    probe!("multi release", mg.release());
    probe!("read a node", s.read(&root));
    probe!("wait_connected", s.wait_connected(Duration::from_secs(1)));
    let mut changes = el.observe();
    if let Some(item) = within("observe", changes.next()).await {
        wrong.push(format!("observe: {:?}", item.map(drop)));
    }
    let runner = el.run(|l| async move { l.lost().await });
    // It ends by itself (a stop before that is a stop, answered `Ok`).
    within("the runner to end", async {
        while !runner.is_finished() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    probe!("runner stop", runner.stop());
    assert!(wrong.is_empty(), "after close(): {wrong:#?}");
    for dir in ["fair", "rw", "el", "ex", "sem", "m1", "m2"] {
        let left = children(&admin, &format!("{root}/{dir}")).await;
        assert!(left.is_empty(), "{dir}: nodes left after close: {left:?}");
    }
}

// ------------------------------------------------------------------------- security

/// SHA-1 (FIPS 180-4), for ZooKeeper's digest scheme; no crate needed for 40 lines.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64) * 8;
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// The id of ZooKeeper's digest scheme: `user:base64(sha1("user:password"))`.
fn digest_id(user: &str, password: &str) -> String {
    format!(
        "{user}:{}",
        base64(&sha1(format!("{user}:{password}").as_bytes()))
    )
}

#[test]
fn digest_id_matches_zookeeper() {
    assert_eq!(base64(&sha1(b"abc")), "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=");
    // As printed by `java -cp zookeeper.jar
    // org.apache.zookeeper.server.auth.DigestAuthenticationProvider super:superpw`.
    assert_eq!(
        digest_id("super", "superpw"),
        "super:g9oN2HttPfn8MMWJZ2r45Np/LIA="
    );
}

async fn session_as(user: Option<(&str, &str)>) -> Session {
    let mut b = Session::builder(shared_server().connect_string())
        .with_session_timeout(Duration::from_secs(4));
    if let Some((u, p)) = user {
        b = b.with_digest_auth(u, p);
    }
    within("a session", b.connect()).await.expect("connect")
}

/// With a digest ACL (given explicitly, or as `creator_all` by an authenticated session), a
/// session without the credentials, or with a wrong password, can neither take the lock
/// (NoAuth, nothing created) nor delete the holder's node; the holder keeps the lock. A
/// session with the same credentials queues normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_acl_keeps_others_out() {
    let root = unique_root("digest");
    let alice = [zk::Acl::new(
        zk::Permission::ALL,
        zk::AuthId::new("digest", &digest_id("alice", "secret")),
    )];
    for (what, acls) in [
        ("digest ACL", alice.to_vec()),
        ("creator_all", zk::Acls::creator_all().to_vec()),
    ] {
        for recipe in RECIPES {
            let dir = format!("{root}/{}-{recipe:?}", what.replace(' ', "-"));
            let owner = session_as(Some(("alice", "secret"))).await;
            let held = acquire(recipe, &owner, &dir, Some(&acls))
                .await
                .unwrap_or_else(|e| panic!("{what} {recipe:?}: the owner could not lock: {e:?}"));
            // The ACL really is alice's digest (reading it needs her credentials too), less
            // WRITE and ADMIN, which only the holder's own session identity has (so nobody
            // else can write a release mark into it).
            match owner_raw().await.get_acl(held.path()).await {
                Ok((got, _)) => {
                    // The server shows a digest id as `user:x` (it hides the hash).
                    let user = |a: &&zk::Acl| a.id().split(':').next().unwrap_or("").to_string();
                    let rcd =
                        zk::Permission::READ | zk::Permission::CREATE | zk::Permission::DELETE;
                    let (alices, others): (Vec<_>, Vec<_>) =
                        got.iter().partition(|a| user(a) == "alice");
                    assert!(
                        !alices.is_empty() && alices.iter().all(|a| a.permission() == rcd),
                        "{what} {recipe:?}: alice should keep read/create/delete: {got:?}"
                    );
                    assert!(
                        !others.is_empty()
                            && others.iter().all(
                                |a| a.scheme() == "digest" && a.id().starts_with("zk-recipes-")
                            ),
                        "{what} {recipe:?}: only the holder's own identity may be added: {got:?}"
                    );
                    assert!(
                        others.iter().any(|a| a.permission() == zk::Permission::ALL),
                        "{what} {recipe:?}: the holder's identity has every right: {got:?}"
                    );
                }
                Err(e) => panic!("get_acl {}: {e}", held.path()),
            }
            let before = snapshot(&owner_raw().await, &dir).await;
            for intruder in [None, Some(("alice", "wrong")), Some(("mallory", "secret"))] {
                let s = session_as(intruder).await;
                // With the default, open ACL: all it lacks is the permission.
                match acquire(recipe, &s, &dir, None).await {
                    Err(Error::NoAuth { path }) => assert!(
                        path.starts_with(&dir),
                        "NoAuth should name the lock path {dir}, got {path}"
                    ),
                    Err(e) => panic!("{what} {recipe:?} {intruder:?}: expected NoAuth, got {e:?}"),
                    Ok(_) => panic!("{what} {recipe:?} {intruder:?}: took the lock"),
                }
                s.close().await;
                let client = match intruder {
                    None => raw().await,
                    Some((u, p)) => {
                        let c = raw().await;
                        let _ = c.auth("digest", format!("{u}:{p}").as_bytes()).await;
                        c
                    }
                };
                assert_eq!(
                    within("delete", client.delete(held.path(), None)).await,
                    Err(zk::Error::NoAuth),
                    "{what} {recipe:?} {intruder:?}: could delete the holder's node"
                );
            }
            assert!(
                !held.is_lost(),
                "{what} {recipe:?}: the holder lost its lock"
            );
            assert_eq!(
                snapshot(&owner_raw().await, &dir).await,
                before,
                "{what} {recipe:?}: intruders changed ZooKeeper"
            );
            // Same credentials, another session: queues and gets it after the owner.
            let friend = session_as(Some(("alice", "secret"))).await;
            let waiting = {
                let (friend, dir, acls) = (friend.clone(), dir.clone(), acls.clone());
                tokio::spawn(async move { acquire(recipe, &friend, &dir, Some(&acls)).await })
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            held.release().await.unwrap();
            within("the friend", waiting)
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{what} {recipe:?}: alice's other session: {e:?}"))
                .release()
                .await
                .unwrap();
            owner.close().await;
            friend.close().await;
        }
    }
}

/// A raw client authenticated as alice, to read what alice's ACL protects.
async fn owner_raw() -> zk::Client {
    let c = raw().await;
    within("auth", c.auth("digest", b"alice:secret"))
        .await
        .expect("auth as alice");
    c
}

// ------------------------------------------------------------------------- TLS

/// `keytool` of the JDK that runs the servers.
#[cfg(feature = "tls")]
fn keytool(args: &[&str]) -> Vec<u8> {
    let tool = std::env::var_os("JAVA_HOME")
        .map(|h| std::path::Path::new(&h).join("bin/keytool"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "keytool".into());
    let out = std::process::Command::new(&tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; TLS tests need the JDK's keytool (apt-get install -y default-jdk-headless)",
                tool.display()
            )
        });
    assert!(
        out.status.success(),
        "keytool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A throwaway self-signed certificate for 127.0.0.1 in `dir/<name>.jks`; returns its PEM.
#[cfg(feature = "tls")]
fn self_signed(dir: &std::path::Path, name: &str) -> String {
    let ks = dir.join(format!("{name}.jks"));
    let ks = ks.to_str().unwrap();
    keytool(&[
        "-genkeypair",
        "-alias",
        name,
        "-keyalg",
        "RSA",
        "-keysize",
        "2048",
        "-validity",
        "2",
        "-dname",
        "CN=localhost",
        "-ext",
        "SAN=IP:127.0.0.1,DNS:localhost",
        "-keystore",
        ks,
        "-storepass",
        "secret123",
        "-keypass",
        "secret123",
        "-storetype",
        "PKCS12",
    ]);
    let pem = keytool(&[
        "-exportcert",
        "-rfc",
        "-alias",
        name,
        "-keystore",
        ks,
        "-storepass",
        "secret123",
    ]);
    String::from_utf8(pem).unwrap()
}

/// A server with a TLS client port: a session with the server's CA connects and locks; plain
/// TCP to that port, TLS with another CA, and TLS with no CA at all each get a typed error.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_port() {
    use zk_recipes::testing::{ServerOptions, ZooKeeperServer};

    let dir = tempfile::tempdir().unwrap();
    let ca = self_signed(dir.path(), "server");
    let other_ca = self_signed(dir.path(), "other");
    let trust = dir.path().join("trust.jks");
    let pem_path = dir.path().join("server.pem");
    std::fs::write(&pem_path, &ca).unwrap();
    keytool(&[
        "-importcert",
        "-noprompt",
        "-alias",
        "ca",
        "-file",
        pem_path.to_str().unwrap(),
        "-keystore",
        trust.to_str().unwrap(),
        "-storepass",
        "secret123",
        "-storetype",
        "PKCS12",
    ]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ks = dir.path().join("server.jks");
    let ssl = |k: &str| format!("zookeeper.ssl.{k}");
    let server = tokio::task::block_in_place(|| {
        ZooKeeperServer::start_with(
            ServerOptions::new()
                .with_config_line(format!("secureClientPort={port}"))
                .with_system_property(
                    "zookeeper.serverCnxnFactory",
                    "org.apache.zookeeper.server.NettyServerCnxnFactory",
                )
                .with_system_property(ssl("keyStore.location"), ks.to_str().unwrap())
                .with_system_property(ssl("keyStore.password"), "secret123")
                .with_system_property(ssl("trustStore.location"), trust.to_str().unwrap())
                .with_system_property(ssl("trustStore.password"), "secret123")
                .with_system_property(ssl("clientAuth"), "none"),
        )
    })
    .expect("a ZooKeeper server with a TLS client port");
    let hosts = format!("127.0.0.1:{port}");
    let tls = zk::TlsOptions::new().with_pem_ca(&ca).unwrap();

    let s = within(
        "a TLS session",
        Session::builder(&hosts)
            .with_tls(tls.clone())
            .with_session_timeout(Duration::from_secs(4))
            .connect(),
    )
    .await
    .expect("connect over TLS with the server's CA");
    let dir_path = unique_root("tls");
    let lock = FairLock::new(&s, &dir_path).unwrap();
    let g = within("a lock over TLS", lock.lock()).await.unwrap();
    assert_eq!(
        within("contenders", lock.contenders()).await.unwrap().len(),
        1
    );
    g.release().await.unwrap();
    s.close().await;

    let short = Duration::from_secs(2);
    for (what, builder) in [
        ("plain TCP", Session::builder(&hosts)),
        (
            "TLS with another CA",
            Session::builder(&hosts)
                .with_tls(zk::TlsOptions::new().with_pem_ca(&other_ca).unwrap()),
        ),
    ] {
        let err = within(what, builder.with_connect_timeout(short).connect())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Unreachable { hosts: h, .. } if *h == hosts),
            "{what} to the TLS port: expected Unreachable, got {err:?}"
        );
    }
    let err = within(
        "TLS without a CA",
        Session::builder(&hosts)
            .with_tls(zk::TlsOptions::new())
            .with_connect_timeout(short)
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("tls")),
        "TLS without a CA: expected InvalidArgument, got {err:?}"
    );
    drop(server);
}

/// A lock directory whose ACL lets anyone create and read but not delete (an operator's
/// mistake): our node can be made but never withdrawn by us. A `try_lock` that finds the lock
/// held and a `lock_timeout` that runs out answered `WouldBlock` and `Timeout`, which promise
/// that nothing is left, while their nodes stayed queued for as long as the session lived,
/// to block the lock when their turn came (found by a review, 2026-11-27). They must say
/// `NoAuth` on the directory instead; and the `try_*` and timed acquires of the other queue
/// recipes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_lets_us_create_but_not_delete_is_no_auth_not_a_clean_give_up() {
    use zk::Permission as P;
    let root = unique_root("acl-no-delete");
    let acl = [zk::Acl::new(
        P::READ | P::CREATE | P::WRITE | P::ADMIN,
        zk::AuthId::anyone(),
    )];
    let admin = raw().await;
    admin
        .create(
            &root,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)),
        )
        .await
        .unwrap();
    let (s1, s2) = (session().await, session().await);
    let held = zk_recipes::FairLock::new(&s1, &root)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lock2 = zk_recipes::FairLock::new(&s2, &root).unwrap();
    let tried = lock2.try_lock().await.map(drop);
    let timed = lock2
        .lock_timeout(Duration::from_millis(300))
        .await
        .map(drop);
    let rw = zk_recipes::RwLock::new(&s2, &root).unwrap();
    let read = rw.try_read().await.map(drop);
    let elect = zk_recipes::Election::new(&s2, &root, "two")
        .unwrap()
        .campaign_timeout(Duration::from_millis(300))
        .await
        .map(drop);
    for (what, r) in [
        ("try_lock", &tried),
        ("lock_timeout", &timed),
        ("try_read", &read),
        ("campaign_timeout", &elect),
    ] {
        assert!(
            matches!(r, Err(Error::NoAuth { path }) if *path == root),
            "{what} gave up with its node left queued and answered {r:?}, not NoAuth on {root}"
        );
    }
    drop(held);
    s1.close().await;
    s2.close().await;
}

/// Given locks of every recipe made `with_data` of 2 MiB (over ZooKeeper's 1 MiB
/// `jute.maxbuffer`) on a session that holds another lock, when each is acquired (timed and
/// `try`), then each answers `InvalidArgument` at once, nothing is created, and the session's
/// connection is not disturbed. The simple lock's create was sent, the server dropped the
/// connection for it, and the create was retried for ever: `lock_timeout(5 s)` ran out with
/// the session suspended again and again (found by a review, 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_node_data_is_refused_before_anything_is_sent() {
    use std::time::Instant;
    let s = session().await;
    let root = unique_root("oversized-data");
    let other = zk_recipes::FairLock::new(&s, format!("{root}/other"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let mut events = s.every_change();
    let big = vec![b'x'; 2 << 20];
    let d = Duration::from_secs(5);
    let simple = zk_recipes::ExclusiveLock::new(&s, format!("{root}/simple"))
        .unwrap()
        .with_data(big.clone());
    let fair = zk_recipes::FairLock::new(&s, format!("{root}/fair"))
        .unwrap()
        .with_data(big.clone());
    let rw = zk_recipes::RwLock::new(&s, format!("{root}/rw"))
        .unwrap()
        .with_data(big.clone());
    let sem = zk_recipes::Semaphore::new(&s, format!("{root}/sem"), 2)
        .unwrap()
        .with_data(big.clone());
    let t = Instant::now();
    let results = [
        (
            "simple lock_timeout",
            simple.lock_timeout(d).await.map(drop),
        ),
        ("simple try_lock", simple.try_lock().await.map(drop)),
        ("fair lock_timeout", fair.lock_timeout(d).await.map(drop)),
        ("rw write_timeout", rw.write_timeout(d).await.map(drop)),
        ("rw try_read", rw.try_read().await.map(drop)),
        (
            "semaphore acquire_timeout",
            sem.acquire_timeout(d).await.map(drop),
        ),
    ];
    let took = t.elapsed();
    let guarded = other
        .guarded([zk_recipes::Op::create(format!("{root}/state"), big.clone())])
        .await
        .map(drop);
    let id = String::from_utf8(big).unwrap();
    let elect = zk_recipes::Election::new(&s, format!("{root}/elect"), id).map(drop);
    for (what, r) in results
        .iter()
        .chain([&("election", elect), &("guarded create", guarded)])
    {
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{what} with 2 MiB of data answered {r:?}"
        );
    }
    assert!(took < Duration::from_secs(1), "the refusals took {took:?}");
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(e);
    }
    assert!(
        seen.is_empty(),
        "the session's state changed meanwhile: {seen:?}"
    );
    assert!(!other.is_lost(), "the other guard was lost");
    let left = children(&raw().await, &root).await;
    assert_eq!(left, ["other"], "nodes made under {root}: {left:?}");
    other.release().await.unwrap();
    s.close().await;
}

/// A client authenticated as ZooKeeper's super user (the harness's servers accept it).
/// Given a session whose chroot is `/zookeeper`, when a semaphore is made on `/quota`, then it
/// is refused (`InvalidPath`) and ZooKeeper's own `/zookeeper/quota` is not written. Review 21
/// saw the permit count written there: the refusal keyed on "the session has a chroot", not on
/// where the path lands on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chroot_of_zookeeper_does_not_reach_the_reserved_tree() {
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
    admin
        .set_data("/zookeeper/quota", &before, None)
        .await
        .unwrap();
    s.close().await;
    assert_eq!(after, before, "a recipe wrote into /zookeeper/quota");
}

/// Given a session whose chroot is an ephemeral node, when a lock is taken at `/a/lock`, then
/// the `InvalidArgument` names the chroot, not `/a` (which does not exist). Review 21 saw "/a is
/// an ephemeral node": the walk for the ephemeral ancestor stopped short of `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_chroot_is_named_as_the_chroot() {
    let owner = raw().await;
    let eph = unique_root("eph-chroot");
    let s = session_under(&owner, &eph, zk::CreateMode::Ephemeral).await;
    let r = within("lock", FairLock::new(&s, "/a/lock").unwrap().lock())
        .await
        .map(drop);
    println!("fair lock at /a/lock under ephemeral chroot {eph}: {r:?}");
    let exists_a = owner.check_stat(&format!("{eph}/a")).await.unwrap();
    s.close().await;
    match r {
        Err(Error::InvalidArgument(m)) => assert!(
            m.starts_with("the session's chroot is an ephemeral node"),
            "the message should name the chroot (/a exists: {}): {m}",
            exists_a.is_some()
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
