//! A tour of zk-recipes on a private ZooKeeper (or on `$ZK_CONNECT`): workers on separate
//! sessions contend for the simple lock and one holder's session is expired mid-hold (it is
//! told, the lock is handed on, it re-queues in a new session); the fair lock grants in arrival
//! order; the read/write lock shares readers and downgrades a writer; an election fails over
//! when the leader's session expires.
//!
//! Run it with `scripts/demo` or `cargo run --release --features testing --example tour`.

use std::time::{Duration, Instant};

use zk_recipes::testing::Playground;
use zk_recipes::{Election, ExclusiveLock, FairLock, LossPolicy, RwLock, Session};

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let zk = Playground::from_env()?;
    let start = Instant::now();
    println!("zk-recipes tour on {}\n", zk.describe());
    let connect = |name: &'static str| {
        let hosts = zk.connect_string();
        async move {
            let s = Session::builder(hosts)
                .with_session_timeout(Duration::from_secs(3))
                .with_loss_policy(LossPolicy::Grace)
                .connect()
                .await?;
            println!(
                "{:>6.2}s  {name}: session {:#x} (epoch 1)",
                start.elapsed().as_secs_f64(),
                s.session_id().unwrap_or(0)
            );
            Ok::<_, zk_recipes::Error>(s)
        }
    };
    let root = format!("/zk-recipes-tour-{}", std::process::id());

    // 1. The simple exclusive lock: four workers, one session each.
    println!("1. ExclusiveLock {root}/simple: four workers, one holder at a time");
    let mut workers = Vec::new();
    for name in ["alpha", "bravo", "charlie", "delta"] {
        let s = connect(name).await?;
        let lock = ExclusiveLock::new(&s, format!("{root}/simple"))?.with_data(name);
        workers.push((name, s, lock));
    }
    let victim = workers[1].1.clone();
    let (holds_tx, holds_rx) = tokio::sync::oneshot::channel::<()>();
    let mut holds_tx = Some(holds_tx);
    let mut tasks = Vec::new();
    for (name, s, lock) in workers {
        let mut tell_when_holding = if name == "bravo" {
            holds_tx.take()
        } else {
            None
        };
        tasks.push(tokio::spawn(async move {
            for _ in 0..2 {
                let guard = lock.lock().await?;
                let t = start.elapsed().as_secs_f64();
                println!(
                    "{t:>6.2}s  {name}: holds the lock, fencing token {}",
                    guard.fencing_token()
                );
                if let Some(tx) = tell_when_holding.take() {
                    let _ = tx.send(());
                }
                tokio::select! {
                    _ = guard.lost() => {
                        let held_in = guard.session_id();
                        println!(
                            "{:>6.2}s  {name}: TOLD it lost the lock ({}); stops writing",
                            start.elapsed().as_secs_f64(),
                            guard.loss_reason().map(|r| r.to_string()).unwrap_or_default()
                        );
                        s.wait_connected(Duration::from_secs(10)).await?;
                        let now_in = s.session_id().unwrap_or(0);
                        if now_in == held_in {
                            println!(
                                "{:>6.2}s  {name}: same session {now_in:#x}, queueing again",
                                start.elapsed().as_secs_f64(),
                            );
                        } else {
                            println!(
                                "{:>6.2}s  {name}: new session {now_in:#x} (epoch {}), queueing again",
                                start.elapsed().as_secs_f64(),
                                s.epoch_number().unwrap_or(0)
                            );
                        }
                        continue;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(400)) => {}
                }
                guard.release().await?;
                println!("{:>6.2}s  {name}: released", start.elapsed().as_secs_f64());
            }
            s.close().await;
            Ok::<_, zk_recipes::Error>(())
        }));
    }
    // Expire bravo's session while it holds the lock.
    if holds_rx.await.is_ok() {
        println!(
            "{:>6.2}s  -- expiring bravo's session while it holds the lock --",
            start.elapsed().as_secs_f64()
        );
        zk.expire(&victim).await?;
    }
    for t in tasks {
        t.await.expect("worker panicked")?;
    }

    // 2. The fair lock: arrival order, one notification per hand-off.
    println!("\n2. FairLock {root}/fair: five workers queue; grants follow arrival order");
    let mut tasks = Vec::new();
    let s = connect("queue").await?;
    let first = FairLock::new(&s, format!("{root}/fair"))?.lock().await?;
    for i in 0..5 {
        let lock = FairLock::new(&s, format!("{root}/fair"))?.with_data(format!("job-{i}"));
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await?;
            let seq = g.path().rsplit('-').next().unwrap_or_default().to_string();
            println!(
                "{:>6.2}s  job-{i}: granted (node sequence {seq}, token {})",
                start.elapsed().as_secs_f64(),
                g.fencing_token()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await
        }));
        tokio::time::sleep(Duration::from_millis(30)).await; // arrive in order
    }
    for c in FairLock::new(&s, format!("{root}/fair"))?
        .contenders()
        .await?
    {
        println!(
            "          queued: {} data={:?}",
            c.node.name,
            String::from_utf8_lossy(&c.data)
        );
    }
    first.release().await?;
    for t in tasks {
        t.await.expect("job panicked")?;
    }

    // 3. The read/write lock: readers share, a writer is alone, and downgrades to keep reading.
    println!("\n3. RwLock {root}/config: readers share, the writer is alone, then downgrades");
    let rw = RwLock::new(&s, format!("{root}/config"))?;
    let r1 = rw.read().await?;
    let r2 = rw.read().await?;
    println!(
        "{:>6.2}s  two readers hold the read lock at once",
        start.elapsed().as_secs_f64()
    );
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move {
            let w = rw.write().await?;
            println!(
                "{:>6.2}s  writer: alone now, publishing version 2",
                start.elapsed().as_secs_f64()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let r = w.downgrade().await?;
            println!(
                "{:>6.2}s  writer: downgraded to a read lock (no writer can get in between)",
                start.elapsed().as_secs_f64()
            );
            Ok::<_, zk_recipes::Error>(r)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!(
        "{:>6.2}s  the writer waits for the two readers",
        start.elapsed().as_secs_f64()
    );
    r1.release().await?;
    r2.release().await?;
    let downgraded = writer.await.expect("writer panicked")?;
    let reader = rw.read().await?;
    println!(
        "{:>6.2}s  a new reader reads beside the downgraded writer",
        start.elapsed().as_secs_f64()
    );
    reader.release().await?;
    downgraded.release().await?;

    // 4. Leader election: the leader's session is expired; the next candidate takes over.
    println!("\n4. Election {root}/leader: three candidates, the leader's session expires");
    let mut candidates = Vec::new();
    for name in ["east", "west", "north"] {
        let cs = connect(name).await?;
        let election = Election::new(&cs, format!("{root}/leader"), name)?;
        candidates.push((name, cs, election));
    }
    let leader = candidates[0].2.campaign().await?;
    println!(
        "{:>6.2}s  east leads (token {})",
        start.elapsed().as_secs_f64(),
        leader.fencing_token()
    );
    let mut followers = Vec::new();
    for (name, _, election) in &candidates[1..] {
        let election = election.clone();
        let name = *name;
        followers.push(tokio::spawn(async move {
            let l = election.campaign().await?;
            println!(
                "{:>6.2}s  {name} leads now (token {})",
                start.elapsed().as_secs_f64(),
                l.fencing_token()
            );
            l.resign().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    zk.expire(&candidates[0].1).await?;
    leader.lost().await;
    println!(
        "{:>6.2}s  east: TOLD it lost the leadership ({})",
        start.elapsed().as_secs_f64(),
        leader
            .loss_reason()
            .map(|r| r.to_string())
            .unwrap_or_default()
    );
    for f in followers {
        f.await.expect("candidate panicked")?;
    }
    for (_, cs, _) in candidates {
        cs.close().await;
    }
    s.close().await;
    println!("\ndone in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}
