//! Section 1, uncontended: one session, one task. `FairLock::lock()` then `release()`, beside the raw
//! pair `create(EPHEMERAL_SEQUENTIAL)` + `delete` with `zookeeper_client::Client`, and the
//! FairLock's own protocol by hand with that client (create and list pipelined, then one
//! multi set+delete). The three take turns, one operation each, so that background load hits
//! them alike. Then the worker loop: `lock()`, drop the guard, `lock()` again, back to back.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zk_recipes::{zk, FairLock};

use crate::common::*;
use crate::Cfg;

/// Runs `op` back to back for `secs` seconds, unrecorded.
async fn warm_up<F, Fut>(secs: f64, mut op: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Res<()>>,
{
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        op().await?;
    }
    Ok(())
}

/// The two halves of an acquire+release (or create+delete) sample, timed apart.
#[derive(Debug, Default)]
struct Halves {
    first: Samples,
    second: Samples,
}

impl Halves {
    fn record(this: &Mutex<Halves>, t0: Instant, t1: Instant) {
        let mut h = this.lock().unwrap();
        h.first.add(t1 - t0);
        h.second.add(t1.elapsed());
    }
}

async fn raw_pair(client: &zk::Client, prefix: &str, halves: &Mutex<Halves>) -> Res<()> {
    let t0 = Instant::now();
    let (_, seq) = client.create(prefix, b"", &EPHEMERAL_SEQUENTIAL).await?;
    let t1 = Instant::now();
    client.delete(&format!("{prefix}{seq}"), None).await?;
    Halves::record(halves, t0, t1);
    Ok(())
}

/// The FairLock's protocol by hand with the same client, no recipe layer.
async fn raw_protocol(
    client: &zk::Client,
    dir: &str,
    prefix: &str,
    halves: &Mutex<Halves>,
) -> Res<()> {
    let t0 = Instant::now();
    let create = client.create(prefix, b"", &EPHEMERAL_SEQUENTIAL);
    let list = client.get_children(dir);
    let (_, seq) = create.await?;
    let _ = list.await?;
    let t1 = Instant::now();
    let path = format!("{prefix}{seq}");
    let mut multi = client.new_multi_writer();
    multi.add_set_data(&path, b"released", None)?;
    multi.add_delete(&path, None)?;
    multi.commit().await?;
    Halves::record(halves, t0, t1);
    Ok(())
}

async fn fair_pair(lock: &FairLock, halves: &Mutex<Halves>) -> Res<()> {
    let t0 = Instant::now();
    let guard = lock.lock().await?;
    let t1 = Instant::now();
    guard.release().await?;
    Halves::record(halves, t0, t1);
    Ok(())
}

pub async fn run(cs: &str, root: &str, cfg: &Cfg, m: &mut Metrics) -> Res<()> {
    section("1. uncontended acquire+release, one session");
    let client = raw_client(cs).await?;
    let base = format!("{root}/raw");
    client.mkdir(&base, &PERSISTENT).await?;
    let prefix = format!("{base}/n-");
    let proto_dir = format!("{root}/protocol");
    client.mkdir(&proto_dir, &PERSISTENT).await?;
    let proto_prefix = format!("{proto_dir}/n-");
    let session = connect(cs).await?;
    let lock = FairLock::new(&session, format!("{root}/uncontended"))?;

    let (warm, raw_h, our_h, proto_h) = Default::default();
    warm_up(cfg.warm, || raw_pair(&client, &prefix, &warm)).await?;
    warm_up(cfg.warm, || {
        raw_protocol(&client, &proto_dir, &proto_prefix, &warm)
    })
    .await?;
    warm_up(cfg.warm, || fair_pair(&lock, &warm)).await?;
    let (mut raw, mut ours, mut proto): (Samples, Samples, Samples) = Default::default();
    let mut reqs = 0;
    let end = Instant::now() + Duration::from_secs_f64(3.0 * cfg.dur);
    while Instant::now() < end {
        let t = Instant::now();
        raw_pair(&client, &prefix, &raw_h).await?;
        raw.add(t.elapsed());
        let r0 = session.request_count();
        let t = Instant::now();
        fair_pair(&lock, &our_h).await?;
        ours.add(t.elapsed());
        reqs += session.request_count() - r0;
        let t = Instant::now();
        raw_protocol(&client, &proto_dir, &proto_prefix, &proto_h).await?;
        proto.add(t.elapsed());
    }
    let (rh, oh): (Halves, Halves) = (raw_h.into_inner()?, our_h.into_inner()?);
    m.put("uncontended.acquire_release.p50", ours.pct(50.0), "us");
    m.put("uncontended.acquire_release.p99", ours.pct(99.0), "us");
    m.put("uncontended.lock.p50", oh.first.pct(50.0), "us");
    m.put("uncontended.release.p50", oh.second.pct(50.0), "us");
    m.put("uncontended.raw_create_delete.p50", raw.pct(50.0), "us");
    m.put("uncontended.raw_create.p50", rh.first.pct(50.0), "us");
    m.put("uncontended.raw_delete.p50", rh.second.pct(50.0), "us");
    m.put("uncontended.raw_protocol.p50", proto.pct(50.0), "us");
    m.put(
        "uncontended.vs_raw_create_delete",
        ours.pct(50.0) / raw.pct(50.0),
        "x",
    );
    m.put(
        "uncontended.vs_raw_protocol",
        ours.pct(50.0) / proto.pct(50.0),
        "x",
    );
    m.put(
        "uncontended.requests_per_op",
        reqs as f64 / ours.len().max(1) as f64,
        "requests",
    );
    m.put("uncontended.n", ours.len() as f64, "samples");

    // The worker loop (issue 13, item 4): lock, drop the guard, lock again, on one session,
    // back to back for the uncontended window. The drop sends the release before it returns,
    // so the release and the next create reach the server together.
    let f0 = mntr_get(&mntr(cs), "zk_cnt_fsynctime");
    let (mut iters, r0, start) = (Samples::default(), session.request_count(), Instant::now());
    let end = start + Duration::from_secs_f64(cfg.dur);
    while Instant::now() < end {
        let t = Instant::now();
        drop(lock.lock().await?);
        iters.add(t.elapsed());
    }
    put_loop(
        m,
        cs,
        "worker_loop",
        &iters,
        start,
        f0,
        session.request_count() - r0,
    );

    // The same loop with `relock`: the release and the next create in one transaction, so
    // one log write (and at most one sync) per iteration.
    let f0 = mntr_get(&mntr(cs), "zk_cnt_fsynctime");
    let mut guard = lock.lock().await?;
    let (mut iters, r0, start) = (Samples::default(), session.request_count(), Instant::now());
    let end = start + Duration::from_secs_f64(cfg.dur);
    while Instant::now() < end {
        let t = Instant::now();
        guard = lock.relock(guard).await?;
        iters.add(t.elapsed());
    }
    let requests = session.request_count() - r0;
    guard.release().await?;
    put_loop(m, cs, "relock_loop", &iters, start, f0, requests);
    drop(lock);
    session.close().await;
    Ok(())
}

/// A worker loop's figures under `uncontended.<name>`: p50 and mean per iteration since
/// `start`, the server's transaction-log syncs per iteration since `f0` (mntr's
/// `zk_cnt_fsynctime`; only our session writes meanwhile: 1 per iteration when the release and
/// the next create share a sync, 2 when they do not) and our `requests` per iteration.
fn put_loop(
    m: &mut Metrics,
    cs: &str,
    name: &str,
    iters: &Samples,
    start: Instant,
    f0: f64,
    requests: u64,
) {
    let n = iters.len().max(1) as f64;
    let p = format!("uncontended.{name}");
    m.put(&format!("{p}.p50"), iters.pct(50.0), "us");
    m.put(
        &format!("{p}.mean"),
        start.elapsed().as_secs_f64() * 1e6 / n,
        "us",
    );
    m.put(
        &format!("{p}.fsyncs_per_iteration"),
        (mntr_get(&mntr(cs), "zk_cnt_fsynctime") - f0) / n,
        "fsyncs",
    );
    m.put(
        &format!("{p}.requests_per_iteration"),
        requests as f64 / n,
        "requests",
    );
}
