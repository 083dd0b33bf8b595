//! Fault suite (issue 7), in the manner of Jepsen: record histories, inject faults, check.
//!
//! One three-server ensemble runs every fault of [`faults::FAULTS`] in turn, each against the
//! simple lock, the fair lock, the semaphore, the read/write lock and the election at once (8 contenders per
//! recipe, each on its own session). Per fault and recipe it reports a row:
//!
//! * **violations** (must be 0): overlapping exclusive holds (a writer with anything, two
//!   leaders, more holders than permits), fencing tokens not strictly increasing in grant order,
//!   a holder that was not told it lost the lock, a write the token-checking store had to refuse
//!   inside a trusted hold, a frozen holder process that wrote after it resumed (it checks
//!   `is_lost()` before each write), an error that is not a typed answer to the fault;
//! * **hangs** (0): an acquire that neither returned nor failed within 45 s;
//! * **leaked nodes** (0): contender nodes still there after every session was closed (and any
//!   session the client could not close has expired);
//! * **longest idle while waited** (at most 2 s): liveness, the longest stretch during which
//!   the lock (or a permit) was free while some contender waited in an acquire, leaving out
//!   each fault and the three session timeouts after it;
//! * informative: acquisitions, errors (typed), holds that ended in a loss notice, and stale
//!   writes the store refused (fencing at work).
//!
//! Rows are printed with a `CHAOS-ROW|` prefix and written to `<target>/chaos/rows.psv`;
//! `scripts/chaos` runs the suite and turns them into `docs/chaos-latest.md`.
//!
//! Environment: `ZKR_CHAOS_ROUNDS` (default 2) rounds per fault; `ZKR_CHAOS_FAULTS` a
//! comma-separated subset of fault ids (default: all).
mod support;

#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/workload.rs"]
mod workload;

use std::io::Write as _;
use std::time::Instant;

use zk_recipes::testing::ZooKeeperCluster;

use faults::{run_fault, Ctx, FAULTS};
use workload::Row;

fn rows_file() -> std::path::PathBuf {
    support::interop::target_dir()
        .join("chaos")
        .join("rows.psv")
}

fn emit(row: &Row) {
    let line = row.line();
    println!("{line}");
    let path = rows_file();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    writeln!(f, "{line}").expect("write a chaos row");
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| fault | recipe | rounds | acquisitions | errors | lost holds | fenced writes | guarded writes (refused) | violations | hangs | leaked nodes | longest idle while waited |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let errors = if r.errors == 0 {
            "0".to_string()
        } else {
            format!("{} ({})", r.errors, r.error_summary())
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} ms |\n",
            r.fault,
            r.recipe,
            r.rounds,
            r.acquisitions,
            errors,
            r.losses,
            r.fenced,
            r.guarded.0,
            r.guarded.1,
            r.violations.len(),
            r.hangs.len(),
            r.leaked.len(),
            r.idle_ns / 1_000_000
        ));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_against_a_three_server_ensemble() {
    let rounds: usize = std::env::var("ZKR_CHAOS_ROUNDS")
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("ZKR_CHAOS_ROUNDS={v:?} is not a number"))
        })
        .unwrap_or(2);
    assert!(rounds > 0, "ZKR_CHAOS_ROUNDS must be at least 1");
    let only: Option<Vec<String>> = std::env::var("ZKR_CHAOS_FAULTS")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|f| f.trim().to_string()).collect());
    if let Some(only) = &only {
        for f in only {
            assert!(
                FAULTS.iter().any(|(id, _)| id == f),
                "ZKR_CHAOS_FAULTS names an unknown fault {f:?}; known: {:?}",
                FAULTS.iter().map(|(id, _)| *id).collect::<Vec<_>>()
            );
        }
    }
    std::fs::create_dir_all(rows_file().parent().unwrap()).expect("create <target>/chaos");
    std::fs::write(rows_file(), "").expect("truncate the rows file");

    let cluster = tokio::task::block_in_place(|| ZooKeeperCluster::start(3))
        .expect("a three-server ZooKeeper ensemble");
    let mut ctx = Ctx { cluster, rounds };
    let started = Instant::now();
    let mut rows = Vec::new();
    for (id, _) in FAULTS {
        if only.as_ref().is_some_and(|o| !o.iter().any(|f| f == id)) {
            continue;
        }
        let t = Instant::now();
        let got = run_fault(&mut ctx, id).await;
        eprintln!("chaos: {id} took {:?}", t.elapsed());
        for row in got {
            emit(&row);
            if !row.is_clean() {
                eprintln!("chaos FAILURE {}", row.details());
            }
            rows.push(row);
        }
    }
    eprintln!(
        "chaos: {} scenarios in {:?}\n{}",
        rows.len(),
        started.elapsed(),
        table(&rows)
    );
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.is_clean())
        .map(Row::details)
        .collect();
    assert!(
        failed.is_empty(),
        "expected no violations, hangs, leaked nodes or idle stretches over the liveness bound; {} scenarios failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A holder frozen past its session timeout (its runtime's only thread blocked, as in a
/// stop-the-world pause) must see the loss the first time it looks, before any task of the
/// session manager has had a chance to run: meanwhile the server expired its session and
/// another session took the lock. The session docs promise that under the `Grace` policy a
/// paused process "finds the deadline passed the moment it runs again".
#[test]
fn a_frozen_holder_sees_the_loss_first_thing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use zk_recipes::testing::{shared_server, unique_root};
    use zk_recipes::{FairLock, Session};

    let hosts = shared_server().connect_string();
    let dir = unique_root("frozen");
    let timeout = workload::SESSION_TIMEOUT;
    let connect = move |hosts: String| async move {
        Session::builder(hosts)
            .with_session_timeout(timeout)
            .connect()
            .await
            .expect("connect to the shared test server")
    };
    // The waiter runs on a runtime of its own, on other threads: the freeze does not stop it.
    let other = tokio::runtime::Runtime::new().unwrap();
    let frozen = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let waiter_holds = Arc::new(AtomicBool::new(false));
    let (holder, guard) = frozen.block_on(async {
        let s = connect(hosts.clone()).await;
        let g = FairLock::new(&s, &dir).unwrap().lock().await.unwrap();
        (s, g)
    });
    let waiter = {
        let (hosts, dir, flag) = (hosts.clone(), dir.clone(), waiter_holds.clone());
        other.spawn(async move {
            let s = connect(hosts).await;
            let g = tokio::time::timeout(
                Duration::from_secs(30),
                FairLock::new(&s, &dir).unwrap().lock(),
            )
            .await
            .expect("the waiter to get the lock once the frozen holder's session expired")
            .unwrap();
            flag.store(true, Ordering::SeqCst);
            (s, g)
        })
    };
    frozen.block_on(async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The freeze: nothing on this runtime runs, neither the session manager nor the client.
        std::thread::sleep(timeout + Duration::from_millis(2500));
        // First look after waking up, before yielding to any other task.
        let lost_at_first_look = guard.is_lost();
        let waiter_held = waiter_holds.load(Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("the loss to be reported once the runtime runs again");
        holder.close().await;
        assert!(
            waiter_held,
            "the frozen holder's session should have expired and the waiter taken the lock during the freeze"
        );
        assert!(
            lost_at_first_look,
            "expected is_lost() to be true at the first look after a freeze past the session timeout, while another session held the lock; it was false"
        );
    });
    let (s, g) = other.block_on(waiter).unwrap();
    other.block_on(async {
        g.release().await.unwrap();
        s.close().await;
    });
}
