//! Attacks on the own-node watch (a child watch) and on the release path, which leaves the
//! guard's monitor running until the release's answer: the hand-off between contenders of
//! one session (the server suppresses a child-watch notification to a connection that had the
//! data-watch one for the same deletion; the client hands NodeDeleted to every watcher of the
//! path), on a reused path (the simple lock) and through a merged drop (the fair lock), with
//! cuts and an administrator's deletions around the release; and a super user's ACL change.
//! Written by a review of 6368774..fc1f6ef (2026-11-26); the seeded tests passed before and
//! after those commits. Since 2026-12-02 a guard granted after a wait watches its node with a
//! waker of its own instead of a monitor task, and an awaited release runs in its caller's
//! task: the tests at the end pin what that must keep (told of a deletion, a release that ends
//! when its future is dropped, the reason of a release cut short, no panic when the session's
//! runtime ends under a release).
//!
//! The randomized tests print their seed; `ZKR_REVIEW_SEED=N` replays the plan of seed `N`
//! (the interleaving still depends on the machine), `ZKR_REVIEW_ROUNDS` sets the rounds (30).
mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use support::rng::Rng;
use support::zk::{children, raw, session, session_via_proxy, wait_for_children};
use zk_recipes::testing::{unique_root, Fault, FaultAction, FaultPoint};
use zk_recipes::{zk, ExclusiveLock, FairLock, LockGuard, LossPolicy};

/// A client of the administrator (`super`), who may change any node's ACL.
async fn superuser() -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", zk_recipes::testing::SUPER_AUTH.as_bytes())
        .connect(&zk_recipes::testing::shared_server().connect_string())
        .await
        .expect("connect as the administrator")
}

/// Everything but READ, for anyone: what an operator may set to hide a node's contents.
fn no_read() -> Vec<zk::Acl> {
    vec![zk::Acl::new(
        zk::Permission::WRITE
            | zk::Permission::CREATE
            | zk::Permission::DELETE
            | zk::Permission::ADMIN,
        zk::AuthId::anyone(),
    )]
}

// ------------------------------------------------------- the hand-off within one session

fn seed() -> u64 {
    support::rng::seed_from_env("ZKR_REVIEW_SEED") % 1_000_000
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Recipe {
    Simple,
    Fair,
}

type Acquire = Pin<Box<dyn Future<Output = zk_recipes::Result<LockGuard>> + Send>>;

#[derive(Clone)]
enum Handle {
    Simple(ExclusiveLock),
    Fair(FairLock),
}
impl Handle {
    fn new(recipe: Recipe, s: &zk_recipes::Session, path: &str) -> Handle {
        match recipe {
            Recipe::Simple => Handle::Simple(ExclusiveLock::new(s, path).unwrap()),
            Recipe::Fair => Handle::Fair(FairLock::new(s, path).unwrap()),
        }
    }

    fn lock(&self) -> Acquire {
        match self {
            Handle::Simple(l) => {
                let l = l.clone();
                Box::pin(async move { l.lock().await })
            }
            Handle::Fair(l) => {
                let l = l.clone();
                Box::pin(async move { l.lock().await })
            }
        }
    }
}

async fn small_delay(rng: &mut Rng) {
    match rng.below(4) {
        0 => {}
        1 => tokio::task::yield_now().await,
        2 => tokio::time::sleep(Duration::from_micros(200 + rng.below(800))).await,
        _ => tokio::time::sleep(Duration::from_millis(1 + rng.below(4))).await,
    }
}

/// Whether `g`'s `lost()` fires within 3 s; a slow one (over 0.9 s) is logged.
async fn told_within_3s(g: &LockGuard, seed: u64, round: u32, plan: &str) -> bool {
    let t0 = Instant::now();
    let told = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .is_ok();
    if told && t0.elapsed() > Duration::from_millis(900) {
        eprintln!(
            "seed {seed} round {round} ({plan}): B told only after {:?}",
            t0.elapsed()
        );
    }
    told
}

/// The czxid of the node at `path`, if any.
async fn czxid_at(admin: &zk::Client, path: &str) -> Option<i64> {
    admin.check_stat(path).await.ok().flatten().map(|s| s.czxid)
}

/// One session, two handles (or one) on one lock: A holds; B's acquire starts before or
/// after A lets go (a release or a drop: a drop of a fair-lock guard parks and merges with
/// B's create when B comes after); the connection is cut at a random request around A's
/// release; the administrator may delete A's node at a random moment around it. Then:
/// * B's grant never comes while A's node (its czxid) is still there;
/// * B, granted, is not told of a loss while its node is there;
/// * when the administrator then deletes B's node, B is told within 3 s (a stale own-node
///   event or watch removal from A's release must not leave B's monitor deaf);
/// * A's `release()` fails only if A's node was deleted by someone else;
/// * nothing is left behind.
async fn same_session_handoff(recipe: Recipe, seed: u64, rounds: u32) {
    let mut rng = Rng::new(seed);
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let admin = raw().await;
    let root = unique_root(&format!("review-handoff-{recipe:?}-{seed}"));
    let mut failures = Vec::new();
    for round in 0..rounds {
        let path = format!("{root}/r{round}");
        // B is A itself (a clone shares the handle) one time in three, else another handle.
        let a = Handle::new(recipe, &s, &path);
        let b = if rng.one_in(3) {
            a.clone()
        } else {
            Handle::new(recipe, &s, &path)
        };
        let g1 = tokio::time::timeout(Duration::from_secs(10), a.lock())
            .await
            .unwrap_or_else(|_| panic!("seed {seed} round {round}: first acquire hung"))
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: first acquire: {e}"));
        let (t1, node1) = (g1.fencing_token(), g1.path().to_string());
        let b_first = rng.one_in(2);
        let release = rng.one_in(2);
        let delete_a = rng.one_in(2);
        let cut = rng.one_in(3).then(|| {
            let k = 1 + rng.below(3) as u32;
            match rng.below(3) {
                0 => FaultPoint::BeforeRequest(k),
                1 => FaultPoint::BeforeReply(k),
                _ => FaultPoint::AfterReply(k),
            }
        });
        let plan = format!(
            "{recipe:?} b_first={b_first} release={release} delete_a={delete_a} cut={cut:?}"
        );
        let mut b_task = None;
        if b_first {
            b_task = Some(tokio::spawn(b.lock()));
            small_delay(&mut rng).await;
            small_delay(&mut rng).await;
        }
        if let Some(point) = cut {
            proxy.arm(Fault::new(
                point,
                FaultAction::Cut {
                    refuse_for: Duration::from_millis(20),
                },
            ));
        }
        // The administrator's delete of A's node, racing A's release.
        let deleter = delete_a.then(|| {
            let node1 = node1.clone();
            let wait = Duration::from_micros(rng.below(3000));
            tokio::spawn(async move {
                let admin = raw().await;
                tokio::time::sleep(wait).await;
                if let Ok(Some(st)) = admin.check_stat(&node1).await {
                    if st.czxid == t1 {
                        // A node of B at the same path has version 0 too: only delete if
                        // it is still A's (read again right after).
                        let r = admin.delete(&node1, Some(st.version)).await;
                        return r.is_ok();
                    }
                }
                false
            })
        });
        small_delay(&mut rng).await;
        let released = if release {
            Some(tokio::time::timeout(Duration::from_secs(15), g1.release()).await)
        } else {
            drop(g1);
            None
        };
        if b_task.is_none() {
            small_delay(&mut rng).await;
            b_task = Some(tokio::spawn(b.lock()));
        }
        let deleted_by_admin = match deleter {
            Some(d) => d.await.unwrap(),
            None => false,
        };
        match released {
            Some(Err(_)) => failures.push(format!("round {round} ({plan}): A's release hung")),
            Some(Ok(Err(e))) if !delete_a => failures.push(format!(
                "round {round} ({plan}): A's release failed though nobody else deleted its node: {e}"
            )),
            _ => {}
        }
        let g2 = match tokio::time::timeout(Duration::from_secs(15), b_task.unwrap()).await {
            Ok(Ok(Ok(g))) => g,
            other => {
                failures.push(format!("round {round} ({plan}): B not granted: {other:?}"));
                proxy.disarm();
                continue;
            }
        };
        proxy.disarm();
        let t2 = g2.fencing_token();
        if recipe == Recipe::Fair && czxid_at(&admin, &node1).await == Some(t1) {
            failures.push(format!(
                "round {round} ({plan}): B granted while A's node {node1} is there"
            ));
        }
        // B holds quietly: not told of a loss while its node is there.
        tokio::time::sleep(Duration::from_millis(150 + rng.below(150))).await;
        let there = czxid_at(&admin, g2.path()).await == Some(t2);
        if g2.is_lost() && there {
            failures.push(format!(
                "round {round} ({plan}, admin deleted A's node: {deleted_by_admin}): B told {:?} while its node is there",
                g2.loss_reason()
            ));
        }
        if there && !g2.is_lost() {
            // The administrator deletes B's node: B must be told.
            let deleted = admin.delete(g2.path(), None).await;
            if deleted.is_ok() && !told_within_3s(&g2, seed, round, &plan).await {
                failures.push(format!(
                    "round {round} ({plan}, admin deleted A's node: {deleted_by_admin}): B's node {} deleted, B not told within 3 s",
                    g2.path()
                ));
            }
        } else if !there && !g2.is_lost() && !told_within_3s(&g2, seed, round, &plan).await {
            failures.push(format!(
                "round {round} ({plan}, admin deleted A's node: {deleted_by_admin}): B's node gone, B not told within 3 s of seeing it"
            ));
        }
        drop(g2);
        // Nothing left behind.
        let mut left = Vec::new();
        for _ in 0..100 {
            left = match recipe {
                Recipe::Simple => czxid_at(&admin, &path)
                    .await
                    .into_iter()
                    .map(|c| c.to_string())
                    .collect(),
                Recipe::Fair => children(&path).await,
            };
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !left.is_empty() {
            failures.push(format!("round {round} ({plan}): left behind: {left:?}"));
        }
    }
    s.close().await;
    assert!(
        failures.is_empty(),
        "seed {seed} (replay: ZKR_REVIEW_SEED={seed}): {} of {rounds} rounds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn rounds() -> u32 {
    std::env::var("ZKR_REVIEW_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_same_session_handoff_simple_lock() {
    let seed = seed();
    eprintln!("seed {seed} (replay: ZKR_REVIEW_SEED={seed})");
    same_session_handoff(Recipe::Simple, seed, rounds()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_same_session_handoff_fair_lock() {
    let seed = seed();
    eprintln!("seed {seed} (replay: ZKR_REVIEW_SEED={seed})");
    same_session_handoff(Recipe::Fair, seed.wrapping_add(1), rounds()).await;
}

/// Given a fair-lock holder whose own-node watch is armed, when a super user takes READ away
/// from its node and an administrator then deletes it, then the holder is told within 3 s.
///
/// Open, and older than the child watch (it fails before 6368774 too): the server checks READ
/// before it delivers a watch notification (seen with Debian's ZooKeeper 3.8.0-11+deb12u2;
/// upstream's fix for CVE-2024-23944 does so), so the armed watch, `exists` or child, hears
/// nothing, and the holder learns of the deletion only when its session ends. Only a super
/// user can take READ away (the node's ACL is ours); telling would take polling every held
/// node. The README's compatibility notes say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: ZooKeeper delivers no watch event on a node its session may not read"]
async fn a_holder_whose_armed_node_loses_read_and_is_deleted_is_told() {
    let dir = unique_root("review-noread-armed");
    let s = session().await;
    let guard = FairLock::new(&s, &dir).unwrap().lock().await.unwrap();
    // The own-node watch is armed within a round trip of the grant.
    tokio::time::sleep(Duration::from_millis(300)).await;
    superuser()
        .await
        .set_acl(guard.path(), &no_read(), None)
        .await
        .expect("set_acl");
    raw().await.delete(guard.path(), None).await.unwrap();
    let told = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .is_ok();
    assert!(
        told,
        "the holder was not told within 3 s that its node (READ taken away) was deleted"
    );
    drop(guard);
    s.close().await;
}

// ------------------------------------- a guard's watch without a task, a release in place

/// A guard of `s` granted after a wait behind `other`'s holder on `dir`: its own-node watch
/// was armed by the waiter, so it is held through a `Bridge` (no monitor task).
async fn granted_after_a_wait(
    s: &zk_recipes::Session,
    other: &zk_recipes::Session,
    dir: &str,
) -> LockGuard {
    let first = FairLock::new(other, dir).unwrap().lock().await.unwrap();
    let lock = FairLock::new(s, dir).unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await });
    wait_for_children(dir, 2, "the waiter never queued behind the holder").await;
    first.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap()
}

/// Given one session holding twenty fair locks, each granted after a wait behind another
/// session's holder (so each guard's own-node watch was armed by its waiter), then holding
/// them runs no task of ours (the watch waits with a waker of the guard's, not in a monitor
/// task: there were twenty more tasks alive while they were held, one per guard, before
/// 2026-12-02); and when an administrator deletes five of their nodes, exactly those five are
/// told within 2 s, as `NodeDeleted`, the other fifteen release cleanly and the five answer
/// `LockLost`, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_granted_after_a_wait_run_no_task_and_are_told_of_their_deletion() {
    const LOCKS: usize = 20;
    const DELETED: usize = 5;
    let root = unique_root("bridged");
    let (front, holder) = (session().await, session().await);
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let dir = format!("{root}/lock-{i}");
        guards.push(granted_after_a_wait(&holder, &front, &dir).await);
    }
    // Let every background task of the grants and releases end.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = metrics.num_alive_tasks();
    let admin = raw().await;
    let t0 = Instant::now();
    for g in &guards[..DELETED] {
        admin.delete(g.path(), None).await.unwrap();
    }
    for (i, g) in guards[..DELETED].iter().enumerate() {
        tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .unwrap_or_else(|_| panic!("guard {i}: not told within 2 s that its node was deleted"));
        assert_eq!(
            g.loss_reason(),
            Some(zk_recipes::LossReason::NodeDeleted),
            "guard {i}"
        );
    }
    let told_in = t0.elapsed();
    for (i, g) in guards[DELETED..].iter().enumerate() {
        assert!(
            !g.is_lost(),
            "guard {}: told of a loss it did not have",
            i + DELETED
        );
    }
    let mut guards = guards.into_iter();
    for g in guards.by_ref().take(DELETED) {
        assert!(
            matches!(
                g.release().await,
                Err(zk_recipes::Error::LockLost(
                    zk_recipes::LossReason::NodeDeleted
                ))
            ),
            "the release of a deleted node answers LockLost(NodeDeleted)"
        );
    }
    for g in guards {
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = metrics.num_alive_tasks();
    eprintln!(
        "alive tasks: {held} while {LOCKS} guards were held, {released} once released; \
         five deletions told within {told_in:?}"
    );
    for i in 0..LOCKS {
        let left = children(&format!("{root}/lock-{i}")).await;
        assert!(left.is_empty(), "lock {i}: left {left:?}");
    }
    front.close().await;
    holder.close().await;
    assert!(
        held < released + 5,
        "{LOCKS} held guards kept {} more tasks alive than none ({held} against {released})",
        held.saturating_sub(released)
    );
}

/// Given a fair-lock holder whose release's answer is held up in the network, when the
/// caller drops its `release()` future before the answer (a timeout), then the release still
/// ends: the waiter on another session is handed the lock while the holder's session lives,
/// the released guard's `lost()` fires (the guard is over), and the holder's session closes
/// cleanly. (An awaited release runs in the caller's task;
/// dropped half-way, the rest moves to a task of the session's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_release_dropped_before_its_answer_still_ends() {
    use zk_recipes::testing::Op;
    let dir = unique_root("release-dropped");
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let g = FairLock::new(&s, &dir).unwrap().lock().await.unwrap();
    let node = g.path().to_string();
    let lost = g.lost_token();
    let lock = FairLock::new(&other, &dir).unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await });
    while children(&dir).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeReply(1),
            FaultAction::Stall(Duration::from_millis(600)),
        )
        .only(Op::Multi),
    );
    let cut_short = tokio::time::timeout(Duration::from_millis(100), g.release()).await;
    assert!(
        cut_short.is_err(),
        "the release answered before its stalled reply: the test proves nothing"
    );
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not handed the lock: the dropped release did not end")
        .unwrap()
        .unwrap();
    assert!(
        !children(&dir)
            .await
            .iter()
            .any(|c| node.ends_with(c.as_str())),
        "the dropped release's node is still there"
    );
    // The guard is over once its release ends: a watchdog on its `lost()` is let go.
    tokio::time::timeout(Duration::from_secs(2), lost.cancelled())
        .await
        .expect("the released guard's lost() never fired: the dropped release did not end");
    let t0 = Instant::now();
    s.close().await;
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "close() took {:?}",
        t0.elapsed()
    );
    next.release().await.unwrap();
    other.close().await;
}

// ------------------------------------------------ review of eaf14f4 (Bridge and InPlace)

/// Given a bridged guard whose release's request is held up in the network (not applied),
/// when the runtime the session was made on ends under the release (the release runs on
/// another executor, as `release_job` says it may), then `release()` answers an error; it
/// must not panic. The
/// client's tasks end with that runtime: the release's request fails at once, and the
/// own-node watch's sender is dropped unsent, so `finish_watch`'s `now_or_never` on the
/// bridged watch polls `OneshotReceiver::recv`, whose `receiver.await.unwrap()` panics.
/// (Before eaf14f4 the rest of the release ran in a task of the dead runtime, dropped with
/// it: `release()` answered `LockLost`.)
#[test]
fn review_eaf14f4_a_release_whose_sessions_runtime_ends_under_it_does_not_panic() {
    use zk_recipes::testing::Op;
    let home = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = unique_root("release-home-ends");
    let (s, other, proxy, g) = home.block_on(async {
        let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
        let other = session().await;
        let g = granted_after_a_wait(&s, &other, &dir).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Held before the server: the release is not applied, so our own write does not
        // fire (use up) the own-node watch before the runtime ends.
        proxy.arm(
            Fault::new(
                FaultPoint::BeforeRequest(1),
                FaultAction::Stall(Duration::from_secs(3)),
            )
            .only(Op::Multi),
        );
        (s, other, proxy, g)
    });
    // The release's first poll, here, outside any runtime: its transaction is queued.
    let mut release = Box::pin(g.release());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(
        release.as_mut().poll(&mut cx).is_pending(),
        "the release answered before its stalled reply: the test proves nothing"
    );
    std::thread::sleep(Duration::from_millis(100));
    drop(home);
    let outcome = std::thread::spawn(move || futures::executor::block_on(release)).join();
    drop(s);
    drop(other);
    drop(proxy);
    match outcome {
        Ok(result) => eprintln!("release() answered {result:?}"),
        Err(_) => panic!("release() panicked once its session's runtime had ended under it"),
    }
}

/// Given two guards of one session, one granted at once (a monitor task watches its node) and
/// one granted after a wait (a `Bridge`), both releasing while the connection is down, when the
/// session is closed under them (`close()` waits its session timeout for them, then ends the
/// epoch as `Closed`; the client then gives up the session), then both releases answer the
/// same reason: `LockLost(Closed)`. The monitor task hears the epoch's end during the release
/// and notes its reason; the bridge hears nothing once the gate is closed, and the bridged
/// guard answered `LockLost(SessionExpired)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_eaf14f4_releases_cut_short_by_close_answer_closed_whether_or_not_they_waited() {
    let root = unique_root("release-close-reason");
    let (s, proxy) = session_via_proxy(Duration::from_secs(4), LossPolicy::OnExpiry).await;
    let other = session().await;
    let at_once = FairLock::new(&s, format!("{root}/at-once"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let waited = granted_after_a_wait(&s, &other, &format!("{root}/waited")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set_blocked(true);
    let mut events = s.latest_state();
    tokio::time::timeout(
        Duration::from_secs(10),
        events.wait_for(|e| matches!(e, zk_recipes::SessionEvent::Suspended { .. })),
    )
    .await
    .expect("the session was not cut off")
    .unwrap();
    let r_at_once = tokio::spawn(at_once.release());
    let r_waited = tokio::spawn(waited.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.close().await;
    let (a, w) = (r_at_once.await.unwrap(), r_waited.await.unwrap());
    eprintln!("granted at once: {a:?}; granted after a wait: {w:?}");
    proxy.set_blocked(false);
    other.close().await;
    assert!(
        matches!(
            a,
            Err(zk_recipes::Error::LockLost(zk_recipes::LossReason::Closed))
        ),
        "the guard granted at once answered {a:?}"
    );
    assert!(
        matches!(
            w,
            Err(zk_recipes::Error::LockLost(zk_recipes::LossReason::Closed))
        ),
        "the guard granted after a wait answered {w:?} (the one granted at once: {a:?})"
    );
}
