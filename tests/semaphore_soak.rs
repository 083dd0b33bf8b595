//! A seeded churn of a semaphore: several actors on three sessions acquire (some cancelled
//! after a delay), hold briefly or for seconds, and release or drop their leases, while the
//! network now and then holds a session's traffic up for 5–150 ms. Checked all along:
//!
//! * **liveness**: whenever fewer than `permits` leases are held and someone waits, that does
//!   not last 2 s (a free permit never sits idle);
//! * **safety**, judged by the server: a granted lease is among the first `permits` lease
//!   nodes of the directory.
//!
//! It found (review of 2026-11-27) that a lease granted without having waited on a watch (its
//! arming found a holder gone, or its listing was answered late) skipped the version bump that
//! the waiter behind it watches for: seed 3 failed in 3 of 6 runs, with a permit idle for 2 s.
//! The plan is the seed's; the interleaving is the machine's, so a seed that failed is run
//! several times. `ZKR_SEM_SOAK_SEED=N` replays a seed, `ZKR_SEM_SOAK_SECS` sets the run time.
mod support;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::rng::Rng;
use support::zk::{raw, session_via_proxy};
use zk_recipes::testing::{unique_root, Fault, FaultAction, FaultPoint};
use zk_recipes::{LossPolicy, NodeName, Semaphore};

/// How long a free permit may stay free while someone waits.
const IDLE_BOUND: Duration = Duration::from_secs(2);

/// Runs one seed's churn for `secs` seconds; the failures seen, if any.
async fn churn(seed: u64, secs: u64) -> Vec<String> {
    let mut plan = Rng::new(seed);
    let permits = 2 + plan.below(2) as usize;
    let actors = permits + 2 + plan.below(3) as usize;
    eprintln!("seed {seed}: {permits} permits, {actors} actors, {secs} s");
    let dir = unique_root("sem-soak");
    let mut sessions = Vec::new();
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let (s, p) = session_via_proxy(Duration::from_secs(6), LossPolicy::Grace).await;
        sessions.push(s);
        proxies.push(Arc::new(p));
    }
    let holding = Arc::new(AtomicI64::new(0));
    let waiting = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    for a in 0..actors {
        let s = sessions[a % sessions.len()].clone();
        let mut rng = Rng::new(seed.wrapping_mul(7919).wrapping_add(a as u64));
        let (dir, holding, waiting, stop, failures) = (
            dir.clone(),
            holding.clone(),
            waiting.clone(),
            stop.clone(),
            failures.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let admin = raw().await;
            let sem = Semaphore::new(&s, &dir, permits)
                .unwrap()
                .with_data(format!("actor {a}"));
            while !stop.load(Ordering::Relaxed) {
                waiting.fetch_add(1, Ordering::SeqCst);
                let cancel_after = rng.one_in(6).then(|| rng.ms(1, 150));
                let got = match cancel_after {
                    Some(d) => tokio::time::timeout(d, sem.acquire()).await.ok(),
                    None => Some(sem.acquire().await),
                };
                // Counted as holding before it stops counting as waiting: no false idle gap.
                let g = match got {
                    Some(Ok(g)) => {
                        holding.fetch_add(1, Ordering::SeqCst);
                        waiting.fetch_sub(1, Ordering::SeqCst);
                        g
                    }
                    Some(Err(e)) => {
                        waiting.fetch_sub(1, Ordering::SeqCst);
                        failures.lock().unwrap().push(format!("actor {a}: {e}"));
                        continue;
                    }
                    None => {
                        waiting.fetch_sub(1, Ordering::SeqCst);
                        tokio::time::sleep(rng.ms(0, 30)).await;
                        continue;
                    }
                };
                // Safety, by the server: our node is among the first `permits` leases.
                let me = g.path().rsplit('/').next().unwrap().to_string();
                if let Ok(children) = admin.list_children(&dir).await {
                    let mut leases: Vec<NodeName> =
                        children.iter().filter_map(|c| NodeName::parse(c)).collect();
                    leases.sort_by_key(|n| n.sequence);
                    let place = leases.iter().position(|n| n.name == me);
                    if place.is_some_and(|place| place >= permits) && !g.is_lost() {
                        failures.lock().unwrap().push(format!(
                            "actor {a}: granted {me} at place {place:?} with {permits} permits: {:?}",
                            leases.iter().map(|n| &n.name).collect::<Vec<_>>()
                        ));
                    }
                }
                // Mostly brief, sometimes long: a waiter stuck behind a long holder shows.
                let hold = if rng.one_in(4) {
                    rng.ms(2500, 3500)
                } else {
                    rng.ms(0, 120)
                };
                tokio::time::sleep(hold).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                if rng.one_in(2) {
                    let _ = g.release().await;
                } else {
                    drop(g);
                }
                tokio::time::sleep(rng.ms(0, 40)).await;
            }
        }));
    }
    // Network jitter: a session's traffic held up for 5–150 ms, now and then.
    {
        let (proxies, stop) = (proxies.clone(), stop.clone());
        let mut rng = Rng::new(seed ^ 0xfeed);
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let p = &proxies[rng.below(proxies.len() as u64) as usize];
                let k = rng.range(1, 6) as u32;
                let point = if rng.one_in(2) {
                    FaultPoint::BeforeRequest(k)
                } else {
                    FaultPoint::BeforeReply(k)
                };
                p.arm(Fault::new(point, FaultAction::Stall(rng.ms(5, 150))));
                tokio::time::sleep(rng.ms(20, 200)).await;
            }
        }));
    }
    // The idle-permit watchdog.
    let started = Instant::now();
    let mut idle_since: Option<Instant> = None;
    while started.elapsed() < Duration::from_secs(secs) {
        let (h, w) = (
            holding.load(Ordering::SeqCst),
            waiting.load(Ordering::SeqCst),
        );
        if (h as usize) < permits && w > 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > IDLE_BOUND {
                let admin = raw().await;
                let mut shown = Vec::new();
                if let Ok(mut children) = admin.list_children(&dir).await {
                    children.sort_by_key(|c| NodeName::parse(c).and_then(|n| n.sequence));
                    for c in children {
                        if let Ok((data, st)) = admin.get_data(&format!("{dir}/{c}")).await {
                            shown.push(format!(
                                "{c}: version {}, {}",
                                st.version,
                                String::from_utf8_lossy(&data)
                            ));
                        }
                    }
                }
                failures.lock().unwrap().push(format!(
                    "a permit sat idle for {:?}: {h} holding, {w} waiting, {permits} permits, {:?} in; the queue: {shown:#?}",
                    since.elapsed(),
                    started.elapsed()
                ));
                break;
            }
        } else {
            idle_since = None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let failures = failures.lock().unwrap().clone();
    if failures.is_empty() {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
        }
    } else {
        for t in tasks {
            t.abort();
        }
    }
    for s in &sessions {
        s.close().await;
    }
    failures
}

fn secs(default: u64) -> u64 {
    std::env::var("ZKR_SEM_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A new seed each run (printed), or `ZKR_SEM_SOAK_SEED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_never_sits_idle_under_churn() {
    let seed = support::rng::seed_from_env("ZKR_SEM_SOAK_SEED") % 1_000_000;
    eprintln!("replay: ZKR_SEM_SOAK_SEED={seed}");
    let failures = churn(seed, secs(12)).await;
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
}

/// Seed 3 found the unbumped grant (3 failures in 6 runs of 30 s; the permit sat idle after
/// 2 to 25 s of churn): run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_seed_3() {
    for run in 0..2 {
        let failures = churn(3, secs(15)).await;
        assert!(failures.is_empty(), "seed 3, run {run}: {failures:#?}");
    }
}
