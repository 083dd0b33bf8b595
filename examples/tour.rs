//! A tour of zk-recipes: workers on separate sessions contend for locks on a private ZooKeeper
//! (or on `$ZK_CONNECT`), one holder's session is expired mid-hold, and the lock is handed on.
//!
//! Run it with `scripts/demo` or `cargo run --release --example tour`.

use std::time::{Duration, Instant};

use zk_recipes::testing::Playground;
use zk_recipes::{ExclusiveLock, FairLock, LossPolicy, Result, Session};

#[tokio::main]
async fn main() -> Result<()> {
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
                0.0,
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
                        println!(
                            "{:>6.2}s  {name}: TOLD it lost the lock ({}); stops writing",
                            start.elapsed().as_secs_f64(),
                            guard.loss_reason().map(|r| r.to_string()).unwrap_or_default()
                        );
                        s.wait_connected(Duration::from_secs(10)).await?;
                        println!(
                            "{:>6.2}s  {name}: new session {:#x} (epoch {}), queueing again",
                            start.elapsed().as_secs_f64(),
                            s.session_id().unwrap_or(0),
                            s.epoch_number().unwrap_or(0)
                        );
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
    s.close().await;
    println!("\ndone in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}
