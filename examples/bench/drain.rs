//! Section 3: the drain, beside the raw chain.
//!
//! **Drain**: a gate session holds the lock; N waiters queue behind it (spread over at most
//! `--drain-sessions` sessions, so 1000 waiters are 50 sessions × 20 `FairLock::lock()`
//! tasks, each its own contender). Once every waiter has sent its requests, the gate releases
//! and the clock runs until the last waiter has taken and released the lock. Cost per
//! hand-off = drain time / N.
//!
//! **Raw chain** (the protocol's floor, same client library, same server, same spread over
//! sessions): N nodes made with bare `zookeeper_client::Client`s, each link waiting with an
//! `exists` watch for its predecessor's deletion and then deleting its own node. A hand-off
//! there is exactly one write and one notification, with no ACL, no mark, no own-node watch
//! and no recipe code. Each round runs one unmeasured pair first (each round's server is
//! fresh, and a fresh server's JIT compiler took most of a core through the first drains:
//! whichever side ran first paid), then four drains in a balanced order: ours, chain, chain,
//! ours in odd rounds, chain, ours, ours, chain in even ones. A side's figure for the round is
//! the mean of its two drains, so a drift within the round weighs on both sides alike (over
//! 16 rounds, the first of the four ran a median 4.8% above its side's mean and the last 4.8%
//! below). Each round records its own ratio; the goal is judged on the median of those.
//!
//! Both record per hand-off when the waiter learned it leads (ours: `lock()` returned; raw:
//! the watch fired) and when its release (ours: `release()`; raw: `delete`) started and
//! ended, so the extra cost splits into the *wake-up* (previous release sent → next waiter
//! runs: server commit + notification + our client's event path) and the *release* (request
//! sent → reply).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_recipes::{zk, FairLock, Session};

use crate::common::*;
use crate::Cfg;

/// One hand-off as the waiter saw it.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// The waiter learned it leads.
    woke: Instant,
    /// Its release was called, and returned.
    release: (Instant, Instant),
}

/// Medians of the split of a drain's hand-offs, in microseconds: (wake-up, release, the
/// holder's own time between them).
fn split(links: &mut [Link], t0: Instant) -> (f64, f64, f64) {
    links.sort_by_key(|l| l.woke);
    let (mut wake, mut rel, mut hold) = <(Samples, Samples, Samples)>::default();
    let mut prev_release = t0;
    for l in links.iter() {
        wake.add(l.woke.saturating_duration_since(prev_release));
        hold.add(l.release.0 - l.woke);
        rel.add(l.release.1 - l.release.0);
        prev_release = l.release.0;
    }
    if std::env::var_os("BENCH_DRAIN_TAILS").is_some() {
        let mean = |s: &Samples| s.0.iter().sum::<u64>() as f64 / s.len().max(1) as f64 / 1e3;
        println!(
            "   wake-up: mean {:.0} p90 {:.0} p99 {:.0} max {:.0} us; release: mean {:.0} p90 {:.0} p99 {:.0} max {:.0} us",
            mean(&wake), wake.pct(90.0), wake.pct(99.0), wake.pct(100.0),
            mean(&rel), rel.pct(90.0), rel.pct(99.0), rel.pct(100.0)
        );
    }
    (wake.pct(50.0), rel.pct(50.0), hold.pct(50.0))
}

/// A raw chain's drain: (seconds, split as in [`split`], client CPU in microseconds).
type ChainRun = (f64, (f64, f64, f64), f64);

/// How many waiters may be entering the queue (create, list, watches) at once.
const ENTERING: usize = 64;

struct DrainRun {
    secs: f64,
    cpu: f64,
    split: (f64, f64, f64),
    queue_requests: u64,
    handoff_requests: u64,
    packets: f64,
    fired: f64,
    /// Growth of the process's resident memory while the waiters queued, per waiter.
    rss_per_waiter: f64,
    /// Time for every waiter to queue (create, list, two watches each; at most `ENTERING` at
    /// once).
    fill_secs: f64,
}

impl DrainRun {
    /// The mean of a round's drains of ours (its counts summed over them would be per drain
    /// no longer; they are averaged as well).
    fn mean(runs: Vec<DrainRun>) -> DrainRun {
        let k = runs.len().max(1) as f64;
        let avg = |f: &dyn Fn(&DrainRun) -> f64| runs.iter().map(f).sum::<f64>() / k;
        DrainRun {
            secs: avg(&|r| r.secs),
            cpu: avg(&|r| r.cpu),
            split: (
                avg(&|r| r.split.0),
                avg(&|r| r.split.1),
                avg(&|r| r.split.2),
            ),
            queue_requests: avg(&|r| r.queue_requests as f64).round() as u64,
            handoff_requests: avg(&|r| r.handoff_requests as f64).round() as u64,
            packets: avg(&|r| r.packets),
            fired: avg(&|r| r.fired),
            rss_per_waiter: avg(&|r| r.rss_per_waiter),
            fill_secs: avg(&|r| r.fill_secs),
        }
    }
}

async fn drain_once(
    cs: &str,
    sessions: &[Session],
    gate_session: &Session,
    observer: &zk::Client,
    path: &str,
    n: usize,
    ex: &Arc<Exclusion>,
) -> Res<DrainRun> {
    let gate = FairLock::new(gate_session, path)?;
    let g0 = gate.lock().await?;
    let q0 = requests(sessions);
    let rss0 = rss_bytes();
    let mut tasks = Vec::with_capacity(n);
    let fill = Instant::now();
    let limit = Duration::from_secs(120).max(Duration::from_millis(60) * n as u32);
    for i in 0..n {
        if i >= ENTERING {
            // At most ENTERING waiters entering at once: each lists the directory, and ten
            // thousand listings of up to ten thousand names sent at once kept the server busy
            // for so long that the gate holder's session timed out.
            let queued = 4 * (i + 1 - ENTERING) as u64;
            while requests(sessions) - q0 < queued {
                if fill.elapsed() > limit {
                    return Err(format!("{i} waiters did not queue within {limit:?}").into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let lock = FairLock::new(&sessions[i % sessions.len()], path)?;
        let ex = ex.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            let woke = Instant::now();
            ex.enter_exclusive(guard.fencing_token());
            ex.leave_exclusive();
            let r0 = Instant::now();
            guard.release().await?;
            Ok::<_, BoxError>(Link {
                woke,
                release: (r0, Instant::now()),
            })
        }));
    }
    // Queued: every waiter has sent create + list + its two exists, every node is listed,
    // and the replies have had time to arrive.
    // Every waiter lists the directory when it enters, so queueing N waiters reads N²/2
    // names in all (Curator and kazoo do the same): allow for it.
    wait_until(limit, "the waiters to queue", || {
        requests(sessions) - q0 >= 4 * n as u64
    })
    .await?;
    let fill_secs = fill.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_children(observer, path).await < n + 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_per_waiter = (rss_bytes() - rss0) / n as f64;
    let q1 = requests(sessions);
    let mm0 = mntr(cs);
    perf_ctl(true, "the drain");
    let (c0, x0) = (cpu_us(), ctx_switches());
    let t0 = Instant::now();
    g0.release().await?;
    let mut links = Vec::with_capacity(n);
    for t in tasks {
        links.push(
            tokio::time::timeout(Duration::from_secs(300), t)
                .await
                .map_err(|_| "a drain waiter did not finish within 300 s")???,
        );
    }
    let cpu = cpu_us() - c0;
    let switches = ctx_switches() - x0;
    perf_ctl(false, "the drain");
    if std::env::var_os("BENCH_DRAIN_TAILS").is_some() {
        println!(
            "   ours: {:.1} context switches per hand-off",
            switches / n as f64
        );
    }
    let last = links.iter().map(|l| l.release.1).max().unwrap_or(t0);
    let mm1 = mntr(cs);
    let d = |k: &str| mntr_get(&mm1, k) - mntr_get(&mm0, k);
    Ok(DrainRun {
        secs: (last - t0).as_secs_f64(),
        cpu,
        split: split(&mut links, t0),
        queue_requests: q1 - q0,
        handoff_requests: requests(sessions) - q1,
        packets: d("zk_packets_received"),
        fired: FIRED_KEYS.iter().map(|k| d(k)).sum(),
        rss_per_waiter,
        fill_secs,
    })
}

/// The raw chain: returns (drain time in seconds, split).
/// With `mark`, each link releases as our lock does: one multi (set_data, delete), so the
/// watcher behind it sees NodeDataChanged; the same server work as our release, without the
/// recipe.
async fn chain_once(
    clients: &[zk::Client],
    gate: &zk::Client,
    dir: &str,
    n: usize,
    how: RawRelease,
) -> Res<ChainRun> {
    let mark = how != RawRelease::Delete;
    let replica = how == RawRelease::Replica;
    let own_watch = how == RawRelease::MultiOwnWatch || replica;
    gate.mkdir(dir, &PERSISTENT).await?;
    let prefix = format!("{dir}/n-");
    let (_, gate_seq) = gate.create(&prefix, b"", &EPHEMERAL_SEQUENTIAL).await?;
    let gate_path = format!("{prefix}{gate_seq}");
    let replica_acls = [
        zk::Acl::new(
            zk::Permission::READ | zk::Permission::CREATE | zk::Permission::DELETE,
            zk::AuthId::anyone(),
        ),
        zk::Acl::new(
            zk::Permission::ALL,
            zk::AuthId::new(
                "digest",
                &zk_recipes::testing::digest_acl_id(REPLICA_USER, REPLICA_PASSWORD),
            ),
        ),
    ];
    let replica_options =
        zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&replica_acls));
    // Every link's node, created in order (pipelined per client; the sequence numbers give
    // the order the server saw).
    let mut made = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let futs = chunk.iter().map(|&i| {
            let c = clients[i % clients.len()].clone();
            let prefix = if replica {
                format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4())
            } else {
                prefix.clone()
            };
            let options = if replica {
                &replica_options
            } else {
                &EPHEMERAL_SEQUENTIAL
            };
            async move {
                let (_, seq) = c.create(&prefix, b"", options).await?;
                Ok::<_, zk::Error>((seq.into_i64(), i, prefix))
            }
        });
        for r in futures::future::join_all(futs).await {
            made.push(r?);
        }
    }
    made.sort();
    let armed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(n);
    let mut pred = gate_path.clone();
    for (seq, i, prefix) in &made {
        let (seq, i) = (*seq, *i);
        let mine = format!("{prefix}{:010}", seq);
        let c = clients[i % clients.len()].clone();
        let (armed, watched) = (armed.clone(), std::mem::replace(&mut pred, mine.clone()));
        tasks.push(tokio::spawn(async move {
            // As our holder does: a watch on its own node, set with the predecessor's
            // (pipelined), fired by its own release.
            let own = own_watch.then(|| {
                if replica {
                    // Our holder's own-node watch: a child watch on its node.
                    let w = c.get_and_watch_children(&mine);
                    futures::future::Either::Left(async move { w.await.map(|(_, _, w)| w) })
                } else {
                    let w = c.check_and_watch_stat(&mine);
                    futures::future::Either::Right(async move { w.await.map(|(_, w)| w) })
                }
            });
            let (stat, watch) = c.check_and_watch_stat(&watched).await?;
            let own = match own {
                Some(own) => Some(own.await?),
                None => None,
            };
            armed.fetch_add(1, Ordering::SeqCst);
            if stat.is_some() {
                let ev = watch.changed().await;
                if !matches!(
                    ev.event_type,
                    zk::EventType::NodeDeleted | zk::EventType::NodeDataChanged
                ) {
                    return Err(format!("raw chain: unexpected {ev:?}").into());
                }
            }
            let woke = Instant::now();
            if mark {
                let mut multi = c.new_multi_writer();
                let data: &[u8] = if replica {
                    zk_recipes::testing::RELEASE_MARK
                } else {
                    b"released"
                };
                multi.add_set_data(&mine, data, None)?;
                multi.add_delete(&mine, None)?;
                multi.commit().await?;
            } else {
                c.delete(&mine, None).await?;
            }
            if let Some(own) = own {
                // Fired before the reply came: already there.
                own.changed().await;
            }
            Ok::<_, BoxError>(Link {
                woke,
                release: (woke, Instant::now()),
            })
        }));
    }
    wait_until(Duration::from_secs(120), "the raw chain to arm", || {
        armed.load(Ordering::SeqCst) >= n
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let what = match how {
        RawRelease::Delete => "the raw chain",
        RawRelease::Multi => "the raw chain (multi)",
        RawRelease::MultiOwnWatch => "the raw chain (multi, own watch)",
        RawRelease::Replica => "the raw chain (our requests)",
    };
    perf_ctl(true, what);
    let (c0, x0) = (cpu_us(), ctx_switches());
    let t0 = Instant::now();
    gate.delete(&gate_path, None).await?;
    let mut links = Vec::with_capacity(n);
    for t in tasks {
        links.push(
            tokio::time::timeout(Duration::from_secs(300), t)
                .await
                .map_err(|_| "a raw chain link did not finish within 300 s")???,
        );
    }
    let cpu = cpu_us() - c0;
    let switches = ctx_switches() - x0;
    perf_ctl(false, what);
    if std::env::var_os("BENCH_DRAIN_TAILS").is_some() {
        println!(
            "   {what}: {:.1} context switches per hand-off",
            switches / n as f64
        );
    }
    let last = links.iter().map(|l| l.release.1).max().unwrap_or(t0);
    Ok(((last - t0).as_secs_f64(), split(&mut links, t0), cpu))
}

/// Our drain of `n` waiters on `s_count` sessions (fresh ones, closed after it), and the
/// mutual exclusion checker it ran under.
async fn ours_once(
    cs: &str,
    root: &str,
    s_count: usize,
    n: usize,
    round: usize,
) -> Res<(DrainRun, Arc<Exclusion>)> {
    let sessions = connect_many(cs, s_count).await?;
    let gate_session = connect(cs).await?;
    let observer = raw_client(cs).await?;
    let ex = Arc::new(Exclusion::default());
    let path = format!("{root}/drain-{n}-{round}");
    let run = drain_once(cs, &sessions, &gate_session, &observer, &path, n, &ex).await;
    close_all(&sessions).await;
    gate_session.close().await;
    Ok((run?, ex))
}

/// How the links of a raw chain release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RawRelease {
    /// A plain delete: the baseline.
    Delete,
    /// Our release's transaction (set the mark, delete): the server's share of our release.
    Multi,
    /// That transaction, by a link that also watches its own node as our holder does (the
    /// watch fires with the release: one more notification per hand-off). What is left
    /// between this and ours is the recipe's own client code.
    MultiOwnWatch,
    /// Every request as our lock sends it, from bare clients: our node names
    /// (`_c_<uuid>-lock-`), our ACL (world: read, create, delete; the session's digest
    /// identity: all, its clients authenticated), our own-node child watch and our marked
    /// release. What is left between this and ours is our client code alone.
    Replica,
}

/// The replica's digest identity, one for all its clients (each of our sessions has its own,
/// with a longer user name: `Identity` in `src/session.rs`).
const REPLICA_USER: &str = "bench";
const REPLICA_PASSWORD: &str = "pw";

/// The raw chain of `n` links on `s_count` fresh bare clients.
async fn chain(
    cs: &str,
    root: &str,
    s_count: usize,
    n: usize,
    round: usize,
    how: RawRelease,
) -> Res<ChainRun> {
    let clients = if how == RawRelease::Replica {
        raw_clients_auth(
            cs,
            s_count,
            Some(format!("{REPLICA_USER}:{REPLICA_PASSWORD}").as_bytes()),
        )
        .await?
    } else {
        raw_clients(cs, s_count).await?
    };
    let observer = raw_client(cs).await?;
    let dir = match how {
        RawRelease::Delete => "chain",
        RawRelease::Multi => "chain-multi",
        RawRelease::MultiOwnWatch => "chain-multi-own",
        RawRelease::Replica => "chain-replica",
    };
    let dir = format!("{root}/{dir}-{n}-{round}");
    chain_once(&clients, &observer, &dir, n, how).await
}

/// One drain of `n` waiters and one raw chain of `n` links, on the same number of sessions,
/// in turns (see the body); before the first round, one of each not counted.
pub async fn run(
    cs: &str,
    root: &str,
    cfg: &Cfg,
    n: usize,
    round: usize,
    m: &mut Metrics,
) -> Res<()> {
    let s_count = n.min(cfg.drain_sessions);
    section(&format!(
        "3. drain {n} queued waiters ({s_count} sessions x {} FairLock contenders), then the raw chain on {s_count} bare clients",
        n.div_ceil(s_count),
    ));
    let (balanced, in_our_place) = (balanced_chain(), stand_in());
    if balanced != RawRelease::Delete || in_our_place.is_some() {
        println!(
            "   DIAGNOSTIC (not the goal's figure): balanced chain {balanced:?}, in our place {}",
            in_our_place.map_or("ours".to_string(), |s| format!("{s:?}")),
        );
    }
    {
        // Warm-up, not counted, every round (each round has a fresh server, as the peers'
        // script starts one each time): on a freshly started server the JVM's JIT compiler is still
        // busy (perf: its C2 thread took 50-75% of a core through every phase of a drain-only
        // run of 3 rounds), and whichever of the two ran first paid more of it.
        let (w, wc) = (
            ours_once(cs, root, s_count, n, 0).await?,
            chain(cs, root, s_count, n, 0, RawRelease::Delete).await?,
        );
        println!(
            "   warm-up (not counted): ours {:.0} us per hand-off, raw chain {:.0} us",
            w.0.secs * 1e6 / n as f64,
            wc.0 * 1e6 / n as f64
        );
    }
    // Turns, balanced within the round: ours, chain, chain, ours, chain, ours, ours, chain in
    // odd rounds (the Thue-Morse order) and the mirror in even ones. Each side's figure is the
    // mean of its four drains. Both sides then hold the same share of every position's effect,
    // a steady drift of the server (its JIT, its disk) and a U-shaped one alike. The order
    // before (ours, chain, chain, ours in odd rounds, the mirror in even ones) balanced a
    // drift only: over the 43 rounds of the invocations of 2026-11-26 and -27, a round's last
    // drain ran 8% above the round's mean and the middle two 5% below, whichever side ran
    // them, so a round with ours at both ends read a median ratio of 1.20 (26 rounds) and one
    // with the chain at both ends 1.04 (17 rounds), and with five rounds the median fell on an
    // odd one (three of the five).
    let order = if round % 2 == 1 {
        [true, false, false, true, false, true, true, false]
    } else {
        [false, true, true, false, true, false, false, true]
    };
    let mut ours_runs = Vec::with_capacity(4);
    let mut chain_runs = Vec::with_capacity(4);
    let mut in_order = Vec::with_capacity(8);
    for (pass, is_ours) in order.into_iter().enumerate() {
        let id = round * 10 + pass;
        if let (true, Some(stand_in)) = (is_ours, in_our_place) {
            // Diagnostic: a raw chain in our place, so the round's ratio is that chain's over
            // the balanced chain's (the server's share of some of our requests).
            let c = chain(cs, root, s_count, n, id + 100, stand_in).await?;
            in_order.push(format!("{stand_in:?} {:.0}", c.0 * 1e6 / n as f64));
            ours_runs.push((
                DrainRun {
                    secs: c.0,
                    cpu: c.2,
                    split: c.1,
                    queue_requests: 0,
                    handoff_requests: 0,
                    packets: 0.0,
                    fired: 0.0,
                    rss_per_waiter: 0.0,
                    fill_secs: 0.0,
                },
                Arc::new(Exclusion::default()),
            ));
        } else if is_ours {
            let (r, ex) = ours_once(cs, root, s_count, n, id).await?;
            in_order.push(format!("ours {:.0}", r.secs * 1e6 / n as f64));
            ours_runs.push((r, ex));
        } else {
            let c = chain(cs, root, s_count, n, id, balanced).await?;
            in_order.push(format!("chain {:.0}", c.0 * 1e6 / n as f64));
            chain_runs.push(c);
        }
    }
    println!(
        "   this round's drains in order [us per hand-off]: {}",
        in_order.join(", ")
    );
    let violations: f64 = ours_runs.iter().map(|(_, ex)| ex.violations()).sum();
    let run = DrainRun::mean(ours_runs.into_iter().map(|(r, _)| r).collect());
    let mean = |f: &dyn Fn(&ChainRun) -> f64| {
        chain_runs.iter().map(f).sum::<f64>() / chain_runs.len() as f64
    };
    let (chain_secs, chain_split, chain_cpu) = (
        mean(&|c| c.0),
        (mean(&|c| c.1 .0), mean(&|c| c.1 .1), mean(&|c| c.1 .2)),
        mean(&|c| c.2),
    );
    let mut multi = String::new();
    if cfg.chain_multi {
        for (how, key, what) in [
            (
                RawRelease::Multi,
                "raw_chain_multi",
                "releasing with our multi",
            ),
            (
                RawRelease::MultiOwnWatch,
                "raw_chain_multi_own",
                "with our multi and an own-node watch",
            ),
        ] {
            let (secs, split, cpu) = chain(cs, root, s_count, n, round, how).await?;
            let p = format!("drain_n{n}.{key}");
            m.put(&format!("{p}.per_handoff"), secs * 1e6 / n as f64, "us");
            m.put(&format!("{p}.wake.p50"), split.0, "us");
            m.put(&format!("{p}.release.p50"), split.1, "us");
            m.put(&format!("{p}.client_cpu_per_handoff"), cpu / n as f64, "us");
            multi += &format!(
                "; raw chain {what} {:.0} us (wake-up {:.0} + multi {:.0}, CPU {:.0})",
                secs * 1e6 / n as f64,
                split.0,
                split.1,
                cpu / n as f64
            );
        }
    }

    let per = run.secs * 1e6 / n as f64;
    let chain_per = chain_secs * 1e6 / n as f64;
    let k = n as f64;
    let p = format!("drain_n{n}");
    m.put(&format!("{p}.per_handoff"), per, "us");
    m.put(&format!("{p}.wake.p50"), run.split.0, "us");
    m.put(&format!("{p}.release.p50"), run.split.1, "us");
    m.put(&format!("{p}.holder_gap.p50"), run.split.2, "us");
    m.put(&format!("{p}.raw_chain.per_handoff"), chain_per, "us");
    m.put(&format!("{p}.raw_chain.wake.p50"), chain_split.0, "us");
    m.put(&format!("{p}.raw_chain.release.p50"), chain_split.1, "us");
    m.put(
        &format!("{p}.raw_chain.holder_gap.p50"),
        chain_split.2,
        "us",
    );
    // This round's own ratio: the summary gives the median of these beside the ratio of the
    // medians (the two sides of one round ran next to each other).
    m.put(&format!("{p}.vs_raw_chain"), per / chain_per, "x");
    // Client CPU (this process, every thread: tokio workers and zookeeper-client's I/O) per
    // hand-off while the queue drains.
    m.put(&format!("{p}.client_cpu_per_handoff"), run.cpu / k, "us");
    m.put(
        &format!("{p}.raw_chain.client_cpu_per_handoff"),
        chain_cpu / k,
        "us",
    );
    m.put(&format!("{p}.queue_fill"), run.fill_secs, "s");
    m.put(
        &format!("{p}.client_rss_per_waiter"),
        run.rss_per_waiter,
        "bytes",
    );
    m.put(
        &format!("{p}.queue_requests_per_waiter"),
        run.queue_requests as f64 / k,
        "requests",
    );
    m.put(
        &format!("{p}.requests_per_handoff"),
        run.handoff_requests as f64 / k,
        "requests",
    );
    m.put(
        &format!("{p}.server_packets_per_handoff"),
        run.packets / k,
        "packets",
    );
    m.put(
        &format!("{p}.notifications_per_handoff"),
        run.fired / k,
        "events",
    );
    m.put(&format!("{p}.violations"), violations, "count");
    println!(
        "   ours {per:.0} us per hand-off (wake-up p50 {:.0} + release p50 {:.0}, holder's own gap {:.0}); \
         raw chain {chain_per:.0} us (wake-up {:.0} + delete {:.0}); {:.2}x{multi}; \
         client CPU per hand-off: ours {:.0} us, raw chain {:.0} us",
        run.split.0,
        run.split.1,
        run.split.2,
        chain_split.0,
        chain_split.1,
        per / chain_per,
        run.cpu / k,
        chain_cpu / k,
    );
    Ok(())
}

/// The chain the drain is balanced against: the plain delete (the baseline), or with
/// `BENCH_CHAIN=replica` our own requests from bare clients (a diagnostic: the ratio then
/// measures our client code alone).
fn balanced_chain() -> RawRelease {
    match std::env::var("BENCH_CHAIN").as_deref() {
        Ok("replica") => RawRelease::Replica,
        _ => RawRelease::Delete,
    }
}

/// With `BENCH_OURS_AS=replica|multi|multi-own`, that raw chain runs in our place in the
/// drain's balanced turns (a diagnostic).
fn stand_in() -> Option<RawRelease> {
    match std::env::var("BENCH_OURS_AS").as_deref() {
        Ok("replica") => Some(RawRelease::Replica),
        Ok("multi") => Some(RawRelease::Multi),
        Ok("multi-own") => Some(RawRelease::MultiOwnWatch),
        _ => None,
    }
}
