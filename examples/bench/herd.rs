//! Section 4, herd: PeerBench's `herd` measurement for our lock. 50 waiters on 50 sessions behind a
//! holder; watches per waiter (`mntr zk_watch_count`), notifications per release and server
//! packets per hand-off, with the same sequence of `mntr` calls as PeerBench. These are
//! counts, not timings: the first round measures them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_recipes::FairLock;

use crate::common::*;
use crate::Cfg;

pub async fn run(cs: &str, root: &str, cfg: &Cfg, m: &mut Metrics) -> Res<()> {
    let n = cfg.herd;
    section(&format!(
        "4. herd: {n} waiters on {n} sessions behind one holder (PeerBench's herd)"
    ));
    let sessions = connect_many(cs, n + 1).await?;
    let observer = raw_client(cs).await?;
    let path = format!("{root}/herd");
    let base_watch = mntr_get(&mntr(cs), "zk_watch_count");
    let holder = FairLock::new(&sessions[0], &path)?.lock().await?;
    let acquired = Arc::new(AtomicUsize::new(0));
    let (go, release_all) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for s in &sessions[1..] {
        let lock = FairLock::new(s, &path)?;
        let (acquired, mut release_all) = (acquired.clone(), release_all.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            acquired.fetch_add(1, Ordering::SeqCst);
            let _ = release_all.wait_for(|go| *go).await;
            guard.release().await?;
            Ok::<_, BoxError>(())
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_children(&observer, &path).await < n + 1 {
        if Instant::now() > deadline {
            return Err("herd waiters did not queue within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let watches = mntr_get(&mntr(cs), "zk_watch_count") - base_watch;
    let m0 = mntr(cs);
    let m1 = mntr(cs);
    let overhead = mntr_get(&m1, "zk_packets_received") - mntr_get(&m0, "zk_packets_received");
    let f0 = fired_watches(cs);
    let p0 = mntr_get(&mntr(cs), "zk_packets_received");
    let r0 = requests(&sessions);
    holder.release().await?;
    wait_until(Duration::from_secs(30), "the first waiter", || {
        acquired.load(Ordering::SeqCst) >= 1
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r1 = requests(&sessions);
    let f1 = fired_watches(cs);
    let p1 = mntr_get(&mntr(cs), "zk_packets_received");
    let p = format!("herd.w{n}");
    m.put(
        &format!("{p}.watches_per_waiter"),
        watches / n as f64,
        "watches",
    );
    m.put(&format!("{p}.notifications_per_release"), f1 - f0, "events");
    m.put(
        &format!("{p}.server_packets_per_handoff"),
        p1 - p0 - 2.0 * overhead,
        "packets",
    );
    m.put(
        &format!("{p}.client_requests_per_handoff"),
        (r1 - r0) as f64,
        "requests",
    );
    go.send_replace(true);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .map_err(|_| "a herd waiter did not finish within 60 s")???;
    }
    close_all(&sessions).await;
    Ok(())
}
