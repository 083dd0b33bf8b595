//! Review 20: probes of the promise "every public operation on bad input returns a clear typed
//! error that says what failed and what to do, and leaves no stray node behind", and of
//! `Closed` after `close()`.
mod support;

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use support::zk::{raw, session};
use zk_recipes::testing::{shared_server, unique_root};
use zk_recipes::{
    zk, Election, Error, ExclusiveLock, FairLock, MultiLock, Op, RwLock, Semaphore, Session,
};

const QUICK: Duration = Duration::from_secs(15);

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(QUICK, fut)
        .await
        .unwrap_or_else(|_| panic!("expected {what} within {QUICK:?}"))
}

/// Every node under `root`, itself included (paths only).
async fn tree(client: &zk::Client, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_string()];
    while let Some(path) = todo.pop() {
        match client.list_children(&path).await {
            Ok(kids) => {
                todo.extend(kids.iter().map(|k| format!("{path}/{k}")));
                out.push(path);
            }
            Err(zk::Error::NoNode) => {}
            Err(zk::Error::NoAuth) => out.push(format!("{path} (unlistable)")),
            Err(e) => panic!("list {path}: {e}"),
        }
    }
    out.sort();
    out
}

fn show<T>(r: &zk_recipes::Result<T>) -> String {
    match r {
        Ok(_) => "Ok".into(),
        Err(e) => format!("Err({e:?}) = \"{e}\" retryable={}", e.is_retryable()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_after_close() {
    let admin = raw().await;
    let root = unique_root("r20-closed");
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
    let mut lines = Vec::new();
    macro_rules! probe {
        ($what:expr, $e:expr) => {{
            let r = within($what, $e).await;
            lines.push(format!("{:<40} {}", $what, show(&r)));
        }};
    }
    probe!("guard.guarded", held.guarded([Op::create(format!("{root}/x"), "")]));
    probe!("fair.relock", fair.relock(held));
    probe!("fair.lock", fair.lock());
    probe!("fair.try_lock", fair.try_lock());
    probe!("fair.lock_timeout", fair.lock_timeout(Duration::from_secs(1)));
    probe!("fair.contenders", fair.contenders());
    probe!("list_contenders", zk_recipes::list_contenders(&s, &format!("{root}/fair")));
    probe!("revoke", zk_recipes::revoke(&s, &format!("{root}/fair"), &node));
    probe!("revoke_holders", zk_recipes::revoke_holders(&s, &format!("{root}/fair")));
    probe!("w.downgrade", w.downgrade());
    probe!("rw.read", rw.read());
    probe!("rw.try_write", rw.try_write());
    probe!("rw.contenders", rw.contenders());
    probe!("lead.guarded", lead.guarded([Op::create(format!("{root}/y"), "")]));
    probe!("lead.resign", lead.resign());
    probe!("el.leader", el.leader());
    probe!("el.participants", el.participants());
    probe!("el.campaign", el.campaign());
    probe!("el.campaign_timeout", el.campaign_timeout(Duration::from_secs(1)));
    let mut obs = el.observe();
    let first = within("observe", obs.next()).await;
    lines.push(format!("{:<40} {:?}", "el.observe first item", first.map(|r| show(&r))));
    let runner = el.run(|l| async move { l.lost().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    lines.push(format!("{:<40} finished={}", "el.run after 0.5s", runner.is_finished()));
    probe!("runner.stop", runner.stop());
    probe!("ex.holder", ex.holder());
    probe!("ex.lock", ex.lock());
    probe!("ex.try_lock", ex.try_lock());
    probe!("exg.release", exg.release());
    probe!("sem.acquire", sem.acquire());
    probe!("sem.contenders", sem.contenders());
    probe!("semg.release", semg.release());
    probe!("multi.lock", multi.lock());
    probe!("multi.try_lock", multi.try_lock());
    probe!("mg.guarded", mg.guarded([Op::create(format!("{root}/z"), "")]));
    probe!("mg.release", mg.release());
    probe!("session.read", s.read(&root));
    probe!("wait_connected", s.wait_connected(Duration::from_secs(1)));
    for l in &lines {
        println!("{l}");
    }
    println!("tree: {:?}", tree(&admin, &root).await);
}

/// Bad directories: under /zookeeper, under an ephemeral node, a directory that denies
/// READ (create+delete allowed), one that denies DELETE, one that denies CREATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_bad_dirs() {
    let admin = raw().await;
    let root = unique_root("r20-dirs");
    admin
        .create(&root, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))
        .await
        .unwrap();
    let mk = |name: &str, perm: zk::Permission| {
        let path = format!("{root}/{name}");
        let admin = admin.clone();
        async move {
            let acl = [zk::Acl::new(perm, zk::AuthId::anyone())];
            admin
                .create(&path, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)))
                .await
                .unwrap();
            path
        }
    };
    let noread = mk("noread", zk::Permission::CREATE | zk::Permission::DELETE | zk::Permission::WRITE).await;
    let nodelete = mk("nodelete", zk::Permission::CREATE | zk::Permission::READ | zk::Permission::WRITE).await;
    let nocreate = mk("nocreate", zk::Permission::DELETE | zk::Permission::READ | zk::Permission::WRITE).await;
    let eph = format!("{root}/eph");
    admin
        .create(&eph, b"", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()))
        .await
        .unwrap();
    let s = session().await;
    let mut lines = Vec::new();
    let dirs = [
        "/zookeeper".to_string(),
        "/zookeeper/r20lock".to_string(),
        "/zookeeper/quota/r20lock".to_string(),
        format!("{eph}/sub/lock"),
        format!("{eph}/lock"),
        noread.clone(),
        format!("{noread}/lock"),
        nodelete.clone(),
        nocreate.clone(),
        format!("{nocreate}/lock"),
    ];
    for d in &dirs {
        let fair = FairLock::new(&s, d).unwrap();
        let r = within("fair.lock", fair.lock_timeout(Duration::from_secs(3))).await;
        let rel = match r {
            Ok(g) => {
                let x = show(&within("rel", g.release()).await);
                format!("Ok; release {x}")
            }
            Err(e) => show::<()>(&Err(e)),
        };
        lines.push(format!("fair {d}: {rel}"));
        lines.push(format!(
            "  try_lock {d}: {}",
            show(&within("try", fair.try_lock()).await)
        ));
        lines.push(format!(
            "  contenders {d}: {}",
            show(&within("c", fair.contenders()).await)
        ));
        let ex = ExclusiveLock::new(&s, format!("{d}/ex")).unwrap();
        let r = within("ex.lock", ex.lock_timeout(Duration::from_secs(3))).await;
        let rel = match r {
            Ok(g) => format!("Ok; release {}", show(&within("rel", g.release()).await)),
            Err(e) => show::<()>(&Err(e)),
        };
        lines.push(format!("  ex {d}/ex: {rel}"));
        let el = Election::new(&s, d, "me").unwrap();
        let r = within("el", el.campaign_timeout(Duration::from_secs(3))).await;
        let rel = match r {
            Ok(g) => format!("Ok; resign {}", show(&within("rel", g.resign()).await)),
            Err(e) => show::<()>(&Err(e)),
        };
        lines.push(format!("  election {d}: {rel}"));
        lines.push(format!("  leader {d}: {}", show(&within("leader", el.leader()).await)));
        let sem = Semaphore::new(&s, d, 2).unwrap();
        let r = within("sem", sem.acquire_timeout(Duration::from_secs(3))).await;
        let rel = match r {
            Ok(g) => format!("Ok; release {}", show(&within("rel", g.release()).await)),
            Err(e) => show::<()>(&Err(e)),
        };
        lines.push(format!("  sem {d}: {rel}"));
        let multi = MultiLock::new(&s, [format!("{root}/aaa-free"), d.clone()]).unwrap();
        let r = within("multi", multi.lock_timeout(Duration::from_secs(3))).await;
        let rel = match r {
            Ok(g) => format!("Ok; release {}", show(&within("rel", g.release()).await)),
            Err(e) => show::<()>(&Err(e)),
        };
        lines.push(format!("  multi [aaa-free, {d}]: {rel}"));
        lines.push(format!("  tree now: {:?}", tree(&admin, &root).await));
    }
    for l in &lines {
        println!("{l}");
    }
    println!("zookeeper subtree: {:?}", tree(&admin, "/zookeeper").await);
    s.close().await;
    println!("tree after close: {:?}", tree(&admin, &root).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_unreachable_and_chroot() {
    for hosts in ["127.0.0.1:1", "10.255.255.1:2181", "no-such-host.invalid:2181"] {
        let t = std::time::Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            Session::builder(hosts)
                .with_session_timeout(Duration::from_secs(4))
                .connect(),
        )
        .await;
        match r {
            Ok(r) => println!("{hosts}: {} in {:?}", show(&r), t.elapsed()),
            Err(_) => println!("{hosts}: no answer in 30 s"),
        }
    }
    let _ = shared_server();
}

/// A directory whose ACL lets us create (and read, write) but not delete: the simple lock's
/// node can be made but its release cannot delete it. The release must not claim the node
/// was "deleted by someone else" (it is still there, ours), nor tell the caller to acquire
/// again: that acquire finds our own leftover node and can never succeed in this session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_lock_release_refused_by_the_parent_acl_is_not_reported_as_deleted() {
    let admin = raw().await;
    let root = unique_root("r20-nodelete");
    let acl = [zk::Acl::new(
        zk::Permission::CREATE | zk::Permission::READ | zk::Permission::WRITE,
        zk::AuthId::anyone(),
    )];
    admin
        .create(&root, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)))
        .await
        .unwrap();
    let path = format!("{root}/lock");
    let s = session().await;
    let sid = s.session_id();
    let lock = ExclusiveLock::new(&s, &path).unwrap();
    let guard = within("lock", lock.lock()).await.unwrap();
    let err = within("release", guard.release()).await.unwrap_err();
    let still_there = admin.check_stat(&path).await.unwrap();
    let retry = within("try_lock again", lock.try_lock()).await.map(drop);
    let bounded = within("lock_timeout again", lock.lock_timeout(Duration::from_secs(2)))
        .await
        .map(drop);
    println!("release: {err:?} = \"{err}\"");
    println!("node after release: {:?}", still_there.map(|s| s.ephemeral_owner));
    println!("our session: {sid:?}");
    println!("try_lock again: {retry:?}; lock_timeout(2s) again: {bounded:?}");
    s.close().await;
    assert!(
        still_there.is_none() || !matches!(err, Error::LockLost(zk_recipes::LossReason::NodeDeleted)),
        "release answered {err:?} (\"{err}\") but our node {path} is still there, owned by our \
         session {sid:?}; acquiring again as the message says answers {retry:?} / {bounded:?}"
    );
}

/// The same directory (create, read, write; no delete) with the queue recipes: a guard is
/// dropped (its release is refused, `NoAuth`, in the background: only logged), and the same
/// lock is taken again on the same session. The new node queues behind our own old node,
/// which nobody may delete: `lock()` waits for ever, with no error, until the session ends.
/// (The fair lock's merged release even hears the refusal in the acquire's own transaction.)
/// A permission problem should answer `NoAuth`, as `release()` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_behind_our_own_undeletable_node_answers_no_auth() {
    let admin = raw().await;
    let root = unique_root("r20-nodelete-queue");
    let acl = [zk::Acl::new(
        zk::Permission::CREATE | zk::Permission::READ | zk::Permission::WRITE,
        zk::AuthId::anyone(),
    )];
    admin
        .create(&root, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)))
        .await
        .unwrap();
    let s = session().await;
    let mut hung = Vec::new();
    for kind in ["fair", "semaphore(1)", "write"] {
        let dir = format!("{root}/{kind}");
        admin
            .create(&dir, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)))
            .await
            .unwrap();
        let t = std::time::Instant::now();
        let again = match kind {
            "fair" => {
                let l = FairLock::new(&s, &dir).unwrap();
                drop(l.lock().await.unwrap());
                tokio::time::timeout(Duration::from_secs(8), l.lock()).await.map(|r| r.map(drop))
            }
            "semaphore(1)" => {
                let l = Semaphore::new(&s, &dir, 1).unwrap();
                drop(l.acquire().await.unwrap());
                tokio::time::timeout(Duration::from_secs(8), l.acquire()).await.map(|r| r.map(drop))
            }
            _ => {
                let l = RwLock::new(&s, &dir).unwrap();
                drop(l.write().await.unwrap());
                tokio::time::timeout(Duration::from_secs(8), l.write()).await.map(|r| r.map(drop))
            }
        };
        let kids = admin.list_children(&dir).await.unwrap();
        println!("{kind}: drop, then acquire again: {again:?} after {:?}; children {kids:?}", t.elapsed());
        match again {
            Ok(Err(Error::NoAuth { .. })) => {}
            other => hung.push(format!(
                "{kind}: {:?} ({} nodes of our session queued)",
                other.map_err(|_| "no answer in 8 s"),
                kids.len()
            )),
        }
    }
    s.close().await;
    assert!(
        hung.is_empty(),
        "in a directory that denies DELETE, a dropped guard's node stays and the next acquire \
         waits behind it for ever: {hung:?}"
    );
}

/// A `close()` that waits for a dropped guard's release (its tracked task) keeps the epoch
/// live meanwhile, and no one watches it: when the session ends on the server in that
/// window, the reads queued in the client answer "the session expired; the session manager
/// is reconnecting, retry" although the manager is shutting down, and a retry answers
/// `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_cut_off_while_close_waits_for_a_release_answer_closed() {
    let mut wrong = Vec::new();
    let mut total = 0;
    for round in 0..5 {
        let (s, proxy) = support::zk::session_via_proxy(
            Duration::from_secs(4),
            zk_recipes::LossPolicy::Grace,
        )
        .await;
        let path = format!("{}/ex", unique_root("r20-close-wait"));
        let guard = ExclusiveLock::new(&s, &path).unwrap().lock().await.unwrap();
        let info = s.zk_session_info().expect("a live session");
        proxy.set_blocked(true);
        let mut events = s.latest_state();
        tokio::time::timeout(
            Duration::from_secs(5),
            events.wait_for(|e| matches!(e, zk_recipes::SessionEvent::Suspended { .. })),
        )
        .await
        .expect("suspended")
        .unwrap();
        // Its release is tracked: close() waits for it (up to the session timeout).
        drop(guard);
        let closer = {
            let s = s.clone();
            tokio::spawn(async move { s.close().await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // close() is under way: the reads are made in its window.
        let reads: Vec<_> = (0..20)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.read("/zookeeper/config").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        zk_recipes::testing::expire_session(&[&proxy], &proxy.target().to_string(), info)
            .await
            .expect("end the session on the server");
        proxy.set_blocked(false);
        for r in reads {
            let answer = tokio::time::timeout(Duration::from_secs(15), r)
                .await
                .expect("read answers")
                .unwrap();
            total += 1;
            if let Err(e) = answer {
                if e != Error::Closed {
                    wrong.push(format!("round {round}: {e:?} \"{e}\" retryable={}", e.is_retryable()));
                }
            } else {
                wrong.push(format!("round {round}: Ok"));
            }
        }
        tokio::time::timeout(Duration::from_secs(15), closer)
            .await
            .expect("close returns")
            .unwrap();
        let retry = s.read("/zookeeper/config").await;
        println!("round {round}: a retry answers {retry:?}");
    }
    println!("{} of {total} wrong: {:?}", wrong.len(), wrong.first());
    assert!(
        wrong.is_empty(),
        "{} of {total} reads cut off by close() did not answer Closed; first: {}",
        wrong.len(),
        wrong[0]
    );
}

/// ZooKeeper's own tree: "/zookeeper" is reserved (quotas, config). Every recipe takes a lock
/// there without a word; a semaphore on "/zookeeper" writes its permit count into the data
/// of ZooKeeper's own node. `validate_path` should refuse it (InvalidPath, nothing sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_in_zookeepers_reserved_tree_are_refused() {
    let admin = raw().await;
    let (before, _) = admin.get_data("/zookeeper").await.unwrap();
    let s = session().await;
    let sem = Semaphore::new(&s, "/zookeeper", 3);
    let mut taken = Vec::new();
    if let Ok(sem) = &sem {
        let g = within("semaphore on /zookeeper", sem.acquire()).await;
        taken.push(format!("Semaphore(/zookeeper).acquire: {:?}", g.as_ref().map(|g| g.path().to_string())));
        if let Ok(g) = g {
            g.release().await.unwrap();
        }
    }
    let (after, _) = admin.get_data("/zookeeper").await.unwrap();
    let sub = "/zookeeper/r20-sub/lock";
    let fair = FairLock::new(&s, sub);
    if let Ok(fair) = &fair {
        let g = within("fair lock under /zookeeper", fair.lock()).await;
        taken.push(format!("FairLock({sub}).lock: {:?}", g.as_ref().map(|g| g.path().to_string())));
        if let Ok(g) = g {
            g.release().await.unwrap();
        }
    }
    s.close().await;
    let left = admin.check_stat("/zookeeper/r20-sub").await.unwrap();
    println!("{taken:?}");
    println!("/zookeeper data before {:?}, after {:?}", String::from_utf8_lossy(&before), String::from_utf8_lossy(&after));
    println!("/zookeeper/r20-sub after close: {:?}", left.map(|s| s.ephemeral_owner));
    assert!(
        matches!(sem, Err(Error::InvalidPath { .. })) && matches!(fair, Err(Error::InvalidPath { .. })),
        "paths in ZooKeeper's reserved /zookeeper tree were accepted: {taken:?}; /zookeeper's \
         data went from {:?} to {:?}",
        String::from_utf8_lossy(&before),
        String::from_utf8_lossy(&after)
    );
}

/// A lock path below an ephemeral node, not the ephemeral node itself: the ephemeral node as
/// the directory answers `InvalidArgument` ("... is an ephemeral node ...: pick another
/// path", `tests/misuse.rs`); one level lower the same mistake answers a raw
/// `Error::ZooKeeper { op: "create parent", source: NoChildrenForEphemerals }` that names
/// the lock path, not the ephemeral node, and says nothing of what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_path_below_an_ephemeral_node_is_invalid_argument() {
    let admin = raw().await;
    let root = unique_root("r20-eph");
    admin
        .create(&root, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))
        .await
        .unwrap();
    let eph = format!("{root}/eph");
    admin
        .create(&eph, b"", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()))
        .await
        .unwrap();
    let s = session().await;
    let dir = format!("{eph}/lock");
    let answers = [
        ("FairLock", within("fair", async { FairLock::new(&s, &dir)?.lock().await.map(drop) }).await),
        ("Semaphore", within("sem", async { Semaphore::new(&s, &dir, 2)?.acquire().await.map(drop) }).await),
        ("Election", within("el", async { Election::new(&s, &dir, "me")?.campaign().await.map(drop) }).await),
        ("ExclusiveLock", within("ex", async { ExclusiveLock::new(&s, format!("{dir}/ex"))?.lock().await.map(drop) }).await),
    ];
    s.close().await;
    let mut wrong = Vec::new();
    for (what, answer) in &answers {
        println!("{what} on {dir}: {answer:?}");
        if !matches!(answer, Err(Error::InvalidArgument(m)) if m.contains(&eph)) {
            wrong.push(format!("{what}: {answer:?}"));
        }
    }
    assert!(wrong.is_empty(), "below the ephemeral node {eph}: {wrong:?}");
}

/// Bounded acquires on a cut connection: answered in time, typed, no node after the heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_bounded_acquires_on_a_cut_connection() {
    let admin = raw().await;
    let root = unique_root("r20-cut");
    let (s, proxy) =
        support::zk::session_via_proxy(Duration::from_secs(4), zk_recipes::LossPolicy::Grace).await;
    s.read("/zookeeper").await.unwrap();
    proxy.set_blocked(true);
    let fair = FairLock::new(&s, format!("{root}/fair")).unwrap();
    let ex = ExclusiveLock::new(&s, format!("{root}/ex")).unwrap();
    let sem = Semaphore::new(&s, format!("{root}/sem"), 2).unwrap();
    let el = Election::new(&s, format!("{root}/el"), "me").unwrap();
    let multi = MultiLock::new(&s, [format!("{root}/m1"), format!("{root}/m2")]).unwrap();
    macro_rules! timed {
        ($what:expr, $e:expr) => {{
            let t = std::time::Instant::now();
            let r = within($what, $e).await;
            println!("{:<28} {:<60} in {:?}", $what, show(&r), t.elapsed());
        }};
    }
    timed!("fair.lock_timeout(1s)", fair.lock_timeout(Duration::from_secs(1)));
    timed!("fair.try_lock", fair.try_lock());
    timed!("ex.lock_timeout(1s)", ex.lock_timeout(Duration::from_secs(1)));
    timed!("ex.try_lock", ex.try_lock());
    timed!("sem.acquire_timeout(1s)", sem.acquire_timeout(Duration::from_secs(1)));
    timed!("el.campaign_timeout(1s)", el.campaign_timeout(Duration::from_secs(1)));
    timed!("multi.lock_timeout(1s)", multi.lock_timeout(Duration::from_secs(1)));
    timed!("multi.try_lock", multi.try_lock());
    timed!("wait_connected(1s)", s.wait_connected(Duration::from_secs(1)));
    proxy.set_blocked(false);
    s.wait_connected(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let nodes: Vec<_> = tree(&admin, &root).await.into_iter().filter(|p| p.contains("_c_") || p.ends_with("/ex")).collect();
    println!("contender nodes after heal: {nodes:?}");
    s.close().await;
    assert!(nodes.is_empty());
}
