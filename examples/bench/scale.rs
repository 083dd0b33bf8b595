//! Section `scale` (not run by default; issue 13, item 5): many locks held by one session, and
//! the client's memory for them. The other half of the item, 10,000 waiters queued on one
//! lock, is the drain section with `--drain 10000`, which also reports the client's memory
//! per queued waiter.
//!
//! One session takes `--scale-locks` distinct FairLocks (64 acquires in flight at a time),
//! holds them all, then releases them all: acquires/s, releases/s and the growth of the
//! process's resident memory per held lock (guards, their own-node watches and monitor
//! tasks, the session's bookkeeping).

use std::time::Instant;

use futures::stream::{self, StreamExt, TryStreamExt};
use zk_recipes::FairLock;

use crate::common::*;
use crate::Cfg;

pub async fn run(cs: &str, root: &str, cfg: &Cfg, m: &mut Metrics) -> Res<()> {
    let n = cfg.scale_locks;
    section(&format!(
        "6. scale: {n} distinct FairLocks held by one session"
    ));
    let session = connect(cs).await?;
    // Made first (not timed): the parent of every lock directory.
    FairLock::new(&session, format!("{root}/locks/warm"))?
        .lock()
        .await?
        .release()
        .await?;
    let rss0 = rss_bytes();
    let t0 = Instant::now();
    let guards: Vec<_> = stream::iter(0..n)
        .map(|i| {
            let lock = FairLock::new(&session, format!("{root}/locks/l{i}"));
            async move { lock?.lock().await }
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    let acquire_secs = t0.elapsed().as_secs_f64();
    let rss1 = rss_bytes();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let t1 = Instant::now();
    stream::iter(guards)
        .map(|g| g.release())
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    let release_secs = t1.elapsed().as_secs_f64();
    m.put("scale.locks", n as f64, "locks");
    m.put("scale.acquires_per_s", n as f64 / acquire_secs, "ops/s");
    m.put("scale.releases_per_s", n as f64 / release_secs, "ops/s");
    m.put(
        "scale.client_rss_per_held_lock",
        (rss1 - rss0) / n as f64,
        "bytes",
    );
    m.put("scale.lost_while_held", lost as f64, "count");
    session.close().await;
    Ok(())
}
