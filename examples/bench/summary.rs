//! The summary: every figure as median (min–max) over the rounds, the ratios of the medians,
//! and whether each goal of issue 13 is met. Printed as a Markdown table, so that the README
//! can quote it as it is.

use std::collections::BTreeMap;

use crate::common::*;

type Rounds = [BTreeMap<String, f64>];

/// Median, min and max of a figure over the rounds that have it.
#[derive(Clone, Copy)]
struct Stat {
    med: f64,
    min: f64,
    max: f64,
    n: usize,
}

fn stat(rounds: &Rounds, key: &str) -> Option<Stat> {
    let mut v: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.get(key).copied())
        .filter(|v| v.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Stat {
        med,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

fn cell(s: Option<Stat>) -> String {
    let f = |v: f64| {
        if v.abs() >= 100.0 {
            format!("{v:.0}")
        } else if v.abs() >= 10.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.2}")
        }
    };
    match s {
        None => String::new(),
        Some(s) if s.n == 1 => format!("{} (1 run)", f(s.med)),
        Some(s) => format!("{} ({}–{})", f(s.med), f(s.min), f(s.max)),
    }
}

enum Goal {
    None,
    /// ours / each named peer ≥ factor (a rate).
    AtLeastPeers(f64),
    /// ours / each named peer ≤ factor (a time).
    AtMostPeers(f64),
    /// The figure itself (a ratio already) ≤ factor, judged on its median.
    AtMost(f64),
    /// Must be zero.
    Zero,
}

struct Row {
    label: String,
    ours: String,
    /// Another of our figures the ratio is taken against (the raw baseline).
    base: Option<String>,
    curator: Option<String>,
    kazoo: Option<String>,
    goal: Goal,
}

fn rows(contended: &[usize], drain: &[usize]) -> Vec<Row> {
    let row = |label: String, ours: &str, curator: Option<&str>, kazoo: Option<&str>, goal| Row {
        label,
        ours: ours.into(),
        base: None,
        curator: curator.map(str::to_string),
        kazoo: kazoo.map(str::to_string),
        goal,
    };
    let mut v = Vec::new();
    for &n in drain {
        let label = format!("drained hand-off, {n} waiters [µs] (base: raw chain)");
        v.push(Row {
            label,
            ours: format!("drain_n{n}.per_handoff"),
            base: Some(format!("drain_n{n}.raw_chain.per_handoff")),
            curator: None,
            kazoo: None,
            goal: Goal::None,
        });
        // The goal is judged on the ratio of each round's two drains, which ran next to each
        // other (in alternating order), not on the ratio of medians taken from different
        // rounds: the server's disk and JIT drift between rounds by more than the gap measured.
        v.push(Row {
            label: format!("  ratio per round, {n} waiters (ours / the same round's raw chain)"),
            ours: format!("drain_n{n}.vs_raw_chain"),
            base: None,
            curator: None,
            kazoo: None,
            goal: if n == 1000 {
                Goal::AtMost(1.15)
            } else {
                Goal::None
            },
        });
        for (what, key) in [
            ("releasing with our multi", "raw_chain_multi"),
            (
                "with our multi and an own-node watch",
                "raw_chain_multi_own",
            ),
        ] {
            v.push(Row {
                label: format!("drained hand-off, {n} waiters [µs] (base: raw chain {what})"),
                ours: format!("drain_n{n}.per_handoff"),
                base: Some(format!("drain_n{n}.{key}.per_handoff")),
                curator: None,
                kazoo: None,
                goal: Goal::None,
            });
        }
        for (what, key) in [
            ("wake-up p50", "wake.p50"),
            ("release p50", "release.p50"),
            ("client CPU per hand-off", "client_cpu_per_handoff"),
        ] {
            let label = format!("  {what}, {n} waiters [µs] (base: raw chain)");
            v.push(Row {
                label,
                ours: format!("drain_n{n}.{key}"),
                base: Some(format!("drain_n{n}.raw_chain.{key}")),
                curator: None,
                kazoo: None,
                goal: Goal::None,
            });
        }
    }
    for &n in contended {
        let label = format!("contended hand-offs/s, {n} sessions");
        let c = format!("curator.mutex.contended_n{n}.handoffs_per_s");
        let k = format!("kazoo.lock.contended_n{n}.handoffs_per_s");
        v.push(row(
            label,
            &format!("contended_n{n}.handoffs_per_s"),
            Some(&c),
            Some(&k),
            Goal::AtLeastPeers(2.0),
        ));
        v.push(row(
            format!(
                "contended hand-offs/s, {n} sessions, lock, drop the guard (peers: lock, release)"
            ),
            &format!("contended_drop_n{n}.handoffs_per_s"),
            Some(&c),
            Some(&k),
            Goal::None,
        ));
        v.push(row(
            format!("contended hand-offs/s, {n} sessions, looping relock (peers: lock, release)"),
            &format!("contended_relock_n{n}.handoffs_per_s"),
            Some(&c),
            Some(&k),
            Goal::None,
        ));
        v.push(row(
            format!("  log syncs per hand-off, {n} sessions (ours: lock, release)"),
            &format!("contended_n{n}.fsyncs_per_handoff"),
            None,
            None,
            Goal::None,
        ));
        v.push(row(
            format!("  log syncs per hand-off, {n} sessions (ours: lock, drop the guard)"),
            &format!("contended_drop_n{n}.fsyncs_per_handoff"),
            None,
            None,
            Goal::None,
        ));
        v.push(row(
            format!("  log syncs per hand-off, {n} sessions (ours: relock)"),
            &format!("contended_relock_n{n}.fsyncs_per_handoff"),
            None,
            None,
            Goal::None,
        ));
    }
    v.push(row(
        "reads/s, 8 readers".into(),
        "rwlock.r8w0.read_acq_per_s",
        Some("curator.rwlock.r8w0.read_acq_per_s"),
        Some("kazoo.rwlock.r8w0.read_acq_per_s"),
        Goal::AtLeastPeers(1.5),
    ));
    v.push(row(
        "reads/s, 8 readers + 2 writers".into(),
        "rwlock.r8w2.read_acq_per_s",
        Some("curator.rwlock.r8w2.read_acq_per_s"),
        Some("kazoo_pypi.rwlock.r8w2.read_acq_per_s"),
        Goal::AtLeastPeers(1.5),
    ));
    v.push(row(
        "reads/s, 8 readers, read, drop the guard (peers: acquire, release)".into(),
        "rwlock_drop.r8w0.read_acq_per_s",
        Some("curator.rwlock.r8w0.read_acq_per_s"),
        Some("kazoo.rwlock.r8w0.read_acq_per_s"),
        Goal::None,
    ));
    v.push(row(
        "reads/s, 8 readers + 2 writers, dropping the guards (peers: acquire, release)".into(),
        "rwlock_drop.r8w2.read_acq_per_s",
        Some("curator.rwlock.r8w2.read_acq_per_s"),
        Some("kazoo_pypi.rwlock.r8w2.read_acq_per_s"),
        Goal::None,
    ));
    v.push(row(
        "reads/s, 8 readers, looping relock_read (peers: acquire, release)".into(),
        "rwlock_relock.r8w0.read_acq_per_s",
        Some("curator.rwlock.r8w0.read_acq_per_s"),
        Some("kazoo.rwlock.r8w0.read_acq_per_s"),
        Goal::None,
    ));
    v.push(row(
        "reads/s, 8 readers + 2 writers, looping relock (peers: acquire, release)".into(),
        "rwlock_relock.r8w2.read_acq_per_s",
        Some("curator.rwlock.r8w2.read_acq_per_s"),
        Some("kazoo_pypi.rwlock.r8w2.read_acq_per_s"),
        Goal::None,
    ));
    v.push(row(
        "uncontended acquire+release p50 [µs]".into(),
        "uncontended.acquire_release.p50",
        Some("curator.mutex.uncontended.acquire_release.p50"),
        Some("kazoo.lock.uncontended.acquire_release.p50"),
        Goal::None,
    ));
    v.push(row(
        "worker loop (lock, drop the guard) per iteration p50 [µs] (peers: acquire+release)".into(),
        "uncontended.worker_loop.p50",
        Some("curator.mutex.uncontended.acquire_release.p50"),
        None,
        Goal::AtMostPeers(0.75),
    ));
    v.push(row(
        "worker loop with relock per iteration p50 [µs] (peers: acquire+release)".into(),
        "uncontended.relock_loop.p50",
        Some("curator.mutex.uncontended.acquire_release.p50"),
        None,
        Goal::AtMostPeers(0.75),
    ));
    v.push(row(
        "  log syncs per worker-loop iteration (lock, drop the guard)".into(),
        "uncontended.worker_loop.fsyncs_per_iteration",
        None,
        None,
        Goal::None,
    ));
    v.push(row(
        "  log syncs per worker-loop iteration (relock)".into(),
        "uncontended.relock_loop.fsyncs_per_iteration",
        None,
        None,
        Goal::None,
    ));
    v.push(row(
        "worker loop per iteration, mean over the window [µs]".into(),
        "uncontended.worker_loop.mean",
        None,
        None,
        Goal::None,
    ));
    v.push(Row {
        label: "uncontended, raw create+delete p50 [µs] (Curator column: Java client)".into(),
        ours: "uncontended.raw_create_delete.p50".into(),
        base: None,
        curator: Some("raw.fsync_yes.sync_create_delete.p50".into()),
        kazoo: None,
        goal: Goal::None,
    });
    v.push(Row {
        label: "uncontended acquire+release p50 [µs] (base: raw create+delete)".into(),
        ours: "uncontended.acquire_release.p50".into(),
        base: Some("uncontended.raw_create_delete.p50".into()),
        curator: None,
        kazoo: None,
        goal: Goal::None,
    });
    for &n in contended {
        let label = format!("exclusion violations, contended {n}");
        v.push(row(
            label,
            &format!("contended_n{n}.violations"),
            Some(&format!("curator.mutex.contended_n{n}.violations")),
            None,
            Goal::Zero,
        ));
        v.push(row(
            format!("exclusion violations, contended {n}, dropping the guard"),
            &format!("contended_drop_n{n}.violations"),
            None,
            None,
            Goal::Zero,
        ));
    }
    v
}

/// Prints the table and returns (goals met, goals checked).
pub fn print(
    ours: &Rounds,
    peers: &Rounds,
    contended: &[usize],
    drain: &[usize],
) -> (usize, usize) {
    println!();
    println!(
        "| figure | ours | Curator | kazoo | ratio of medians | goal | met |\n|---|---:|---:|---:|---|---|---|"
    );
    let (mut met_n, mut goals_n) = (0, 0);
    for r in rows(contended, drain) {
        let o = stat(ours, &r.ours);
        let b = r.base.as_deref().and_then(|k| stat(ours, k));
        let c = r.curator.as_deref().and_then(|k| stat(peers, k));
        let k = r.kazoo.as_deref().and_then(|k| stat(peers, k));
        // A section that did not run (say `--sections drain`): no row.
        if o.is_none() || (r.base.is_some() && b.is_none()) {
            continue;
        }
        // A ratio of two zeros (violations) says nothing.
        let ratio = |x: Option<Stat>| Some(o?.med / x?.med).filter(|r| r.is_finite());
        let mut ratios = Vec::new();
        if let Some(x) = ratio(b) {
            ratios.push(format!("{x:.2}x base"));
        }
        if let Some(x) = ratio(c) {
            ratios.push(format!("{x:.2}x C"));
        }
        if let Some(x) = ratio(k) {
            ratios.push(format!("{x:.2}x k"));
        }
        // Met when the ratio to every peer measured passes `ok` (unknown without peers).
        let against_peers = |ok: &dyn Fn(f64) -> bool| {
            let peers: Vec<f64> = [ratio(c), ratio(k)].into_iter().flatten().collect();
            (!peers.is_empty()).then(|| peers.iter().all(|x| ok(*x)))
        };
        let (goal, met) = match r.goal {
            Goal::None => (String::new(), None),
            Goal::AtLeastPeers(f) => (format!("≥ {f}x peers"), against_peers(&|x| x >= f)),
            Goal::AtMostPeers(f) => (format!("≤ {f}x peers"), against_peers(&|x| x <= f)),
            Goal::AtMost(f) => (format!("≤ {f}x (median)"), o.map(|o| o.med <= f)),
            Goal::Zero => ("0".into(), o.map(|o| o.max == 0.0)),
        };
        if let Some(m) = met {
            goals_n += 1;
            met_n += usize::from(m);
        }
        let ours_cell = match (o, b) {
            (o, Some(b)) => format!("{} / base {}", cell(o), cell(Some(b))),
            (o, None) => cell(o),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            ours_cell,
            cell(c),
            cell(k),
            ratios.join(", "),
            goal,
            match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            }
        );
    }
    println!();
    println!(
        "goals met: {met_n} of {goals_n}   (medians of {} rounds of ours, {} of the peers; load average now {})",
        ours.len(),
        peers.len(),
        loadavg()
    );
    (met_n, goals_n)
}
