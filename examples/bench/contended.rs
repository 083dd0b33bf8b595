//! Section 2, contended: N sessions (8, 32), one task each, looping `lock()` → `release()` on one
//! path for `warm + cdur` seconds; hand-offs/s = acquisitions completed inside the `cdur`
//! window / `cdur` (PeerBench's `contended_nN.handoffs_per_s`).
//!
//! Section 5, read/write: 8 readers, then 8 readers + 2 writers, one session each, like PeerBench's
//! `rwLock(8, 0)` / `rwLock(8, 2)`; then the same with each worker dropping its guard instead
//! of awaiting its release (figures under `rwlock_drop`), and looping `relock_read` /
//! `relock_write` (figures under `rwlock_relock`).
//!
//! Each loop is run three ways ([`Loop`]): the peers' (acquire, release), RAII's (acquire,
//! drop the guard: its release goes out with the next acquire's create), and `relock`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use zk_recipes::{FairLock, RwLock};

use crate::common::*;
use crate::Cfg;

/// How a worker ends each holding before it acquires again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loop {
    /// `guard.release().await`, then acquire: the peers' loop.
    Release,
    /// Drop the guard, then acquire: the dropped guard's release goes out with the next
    /// create, in one transaction.
    Drop,
    /// `relock(guard)`: release and queue again in one transaction, explicitly.
    Relock,
}

impl Loop {
    fn how(self) -> &'static str {
        match self {
            Loop::Release => "acquire -> release",
            Loop::Drop => "acquire -> drop the guard",
            Loop::Relock => "relock (release + queue again in one transaction)",
        }
    }

    /// What the section's figure names carry after their family name.
    fn tag(self) -> &'static str {
        match self {
            Loop::Release => "",
            Loop::Drop => "_drop",
            Loop::Relock => "_relock",
        }
    }
}

/// Each worker loops as `how` says: figures under `contended_nN`, `contended_drop_nN` and
/// `contended_relock_nN`.
pub async fn fair_lock(
    cs: &str,
    root: &str,
    cfg: &Cfg,
    n: usize,
    how: Loop,
    m: &mut Metrics,
) -> Res<()> {
    let how_text = how.how();
    section(&format!(
        "2. contended FairLock, {n} sessions looping {how_text} on one path"
    ));
    let sessions = connect_many(cs, n).await?;
    let path = format!("{root}/mutex-n{n}-{how:?}");
    let ex = Arc::new(Exclusion::default());
    let (w, recs) = run_workers(cs, &sessions, cfg, |_, session, stop| {
        let (ex, path) = (ex.clone(), path.clone());
        async move {
            let lock = FairLock::new(&session, &path)?;
            let mut recs = Recs::new();
            let mut held = None;
            while !stop.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                let guard = match held.take() {
                    Some(g) => lock.relock(g).await?,
                    None => lock.lock().await?,
                };
                let t1 = Instant::now();
                ex.enter_exclusive(guard.fencing_token());
                recs.push((t1, t1 - t0));
                ex.leave_exclusive();
                match how {
                    Loop::Relock => held = Some(guard),
                    Loop::Drop => drop(guard),
                    Loop::Release => guard.release().await?,
                }
            }
            if let Some(g) = held {
                g.release().await?;
            }
            Ok(recs)
        }
    })
    .await?;
    let s = in_window(&recs, w.ws, w.we);
    let p = format!("contended{}_n{n}", how.tag());
    let done = s.len().max(1) as f64;
    m.put(
        &format!("{p}.handoffs_per_s"),
        s.len() as f64 / cfg.cdur,
        "ops/s",
    );
    m.put(&format!("{p}.wait.p50"), s.pct(50.0), "us");
    m.put(&format!("{p}.wait.p99"), s.pct(99.0), "us");
    m.put(&format!("{p}.violations"), ex.violations(), "count");
    m.put(
        &format!("{p}.requests_per_acquisition"),
        w.requests as f64 / done,
        "requests",
    );
    m.put(
        &format!("{p}.server_packets_per_acquisition"),
        w.packets / done,
        "packets",
    );
    m.put(
        &format!("{p}.fsyncs_per_handoff"),
        w.fsyncs / done,
        "fsyncs",
    );
    put_cpu(m, &p, &w, done);
    close_all(&sessions).await;
    Ok(())
}

/// Each worker loops as `how` says (with `Loop::Relock`, `relock_read` / `relock_write`).
pub async fn rw(
    cs: &str,
    root: &str,
    cfg: &Cfg,
    readers: usize,
    writers: usize,
    how: Loop,
    m: &mut Metrics,
) -> Res<()> {
    let how_text = how.how();
    section(&format!(
        "5. read/write lock, {readers} readers + {writers} writers, one session each, looping {how_text}"
    ));
    let sessions = connect_many(cs, readers + writers).await?;
    let path = format!("{root}/rw-r{readers}w{writers}-{how:?}");
    let ex = Arc::new(Exclusion::default());
    let (w, recs) = run_workers(cs, &sessions, cfg, |i, session, stop| {
        let (ex, path) = (ex.clone(), path.clone());
        async move {
            let lock = RwLock::new(&session, &path)?;
            let mut recs = Recs::new();
            let (mut read, mut write) = (None, None);
            while !stop.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                if i < readers {
                    let guard = match read.take() {
                        Some(g) => lock.relock_read(g).await?,
                        None => lock.read().await?,
                    };
                    let t1 = Instant::now();
                    ex.enter_shared();
                    recs.push((t1, t1 - t0));
                    ex.leave_shared();
                    match how {
                        Loop::Relock => read = Some(guard),
                        Loop::Drop => drop(guard),
                        Loop::Release => guard.release().await?,
                    }
                } else {
                    let guard = match write.take() {
                        Some(g) => lock.relock_write(g).await?,
                        None => lock.write().await?,
                    };
                    let t1 = Instant::now();
                    ex.enter_exclusive(guard.fencing_token());
                    recs.push((t1, t1 - t0));
                    ex.leave_exclusive();
                    match how {
                        Loop::Relock => write = Some(guard),
                        Loop::Drop => drop(guard),
                        Loop::Release => guard.release().await?,
                    }
                }
            }
            if let Some(g) = read {
                g.release().await?;
            }
            if let Some(g) = write {
                g.release().await?;
            }
            Ok(recs)
        }
    })
    .await?;
    let p = format!("rwlock{}.r{readers}w{writers}", how.tag());
    let r = in_window(&recs[..readers], w.ws, w.we);
    m.put(
        &format!("{p}.read_acq_per_s"),
        r.len() as f64 / cfg.cdur,
        "ops/s",
    );
    m.put(&format!("{p}.read_wait.p50"), r.pct(50.0), "us");
    let mut total = r.len();
    if writers > 0 {
        let wr = in_window(&recs[readers..], w.ws, w.we);
        total += wr.len();
        m.put(
            &format!("{p}.write_acq_per_s"),
            wr.len() as f64 / cfg.cdur,
            "ops/s",
        );
        m.put(&format!("{p}.write_wait.p50"), wr.pct(50.0), "us");
    }
    m.put(&format!("{p}.violations"), ex.violations(), "count");
    m.put(
        &format!("{p}.requests_per_acquisition"),
        w.requests as f64 / total.max(1) as f64,
        "requests",
    );
    m.put(
        &format!("{p}.fsyncs_per_acquisition"),
        w.fsyncs / total.max(1) as f64,
        "fsyncs",
    );
    put_cpu(m, &p, &w, total.max(1) as f64);
    close_all(&sessions).await;
    Ok(())
}

/// CPU per acquisition in the window: this process's, and the server's when the bench started
/// it (on 2 cores shared by both, what one side burns the other waits for).
fn put_cpu(m: &mut Metrics, p: &str, w: &Window, done: f64) {
    m.put(
        &format!("{p}.client_cpu_per_acquisition"),
        w.client_cpu / done,
        "us",
    );
    if w.server_cpu.is_finite() {
        m.put(
            &format!("{p}.server_cpu_per_acquisition"),
            w.server_cpu / done,
            "us",
        );
    }
}
