//! Fair ordered queueing of workers.
//!
//! Six workers, each with its own ZooKeeper session, take jobs from a shared list in the order
//! they queued for the fair lock. Then a semaphore lets three of them run a heavy step at once.
//! Midway, one worker's session is expired while it holds the lock: it is told at once, stops,
//! and re-queues in a new session while the others carry on.
//!
//! `cargo run --features testing --example worker_queue` (private ZooKeeper), or with `ZK_CONNECT=host:port`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zk_recipes::testing::Playground;
use zk_recipes::{FairLock, Semaphore, Session};

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let zk = Arc::new(Playground::from_env()?);
    println!("worker queue on {}", zk.describe());
    let root = format!("/zk-recipes-workers-{}", std::process::id());
    let jobs: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        (1..=12).rev().map(|i| format!("job-{i:02}")).collect(),
    ));
    let done = Arc::new(Mutex::new(Vec::<(String, String, i64)>::new()));
    let running = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let t = move || start.elapsed().as_secs_f64();

    let mut workers = Vec::new();
    for w in 0..6 {
        let name = format!("worker-{w}");
        let session = Session::builder(zk.connect_string())
            .with_session_timeout(Duration::from_secs(3))
            .connect()
            .await?;
        let lock = FairLock::new(&session, format!("{root}/queue"))?.with_data(name.clone());
        let heavy = Semaphore::new(&session, format!("{root}/heavy"), 3)?.with_data(name.clone());
        let (jobs, done, running, zk) = (jobs.clone(), done.clone(), running.clone(), zk.clone());
        workers.push(tokio::spawn(async move {
            let mut expired_once = false;
            loop {
                // Take the next job under the fair lock: workers are served in arrival order.
                let guard = lock.lock().await.inspect_err(|e| eprintln!("{name}: lock(): {e:?}"))?;
                let Some(job) = jobs.lock().unwrap().pop() else {
                    guard.release().await?;
                    break;
                };
                println!("{:6.2}s {name} takes {job} (token {})", t(), guard.fencing_token());
                let mut work = Duration::from_millis(20);
                if w == 2 && !expired_once {
                    work = Duration::from_secs(3); // a long job: the loss arrives mid-job
                    expired_once = true;
                    println!("{:6.2}s -- expiring {name}'s session mid-job --", t());
                    zk.expire(&session).await.expect("the playground expires a session");
                }
                tokio::select! {
                    _ = guard.lost() => {
                        println!("{:6.2}s {name} lost the lock ({:?}); puts {job} back and re-queues", t(), guard.loss_reason());
                        jobs.lock().unwrap().push(job);
                        continue;
                    }
                    _ = tokio::time::sleep(work) => {}
                }
                if let Err(e) = guard.release().await {
                    // Lost between the work and the release: the job is done; its result
                    // would be written with the fencing token, which a store can check.
                    println!("{:6.2}s {name}: release reports {e}", t());
                }
                // The heavy step: at most three workers at once.
                let lease = heavy.acquire().await.inspect_err(|e| eprintln!("{name}: acquire(): {e:?}"))?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= 3, "semaphore let {now} workers in");
                tokio::time::sleep(Duration::from_millis(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                lease.release().await?;
                done.lock().unwrap().push((job, name.clone(), 0));
            }
            session.close().await;
            Ok::<_, zk_recipes::Error>(())
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for w in workers {
        w.await.expect("worker panicked")?;
    }
    let done = done.lock().unwrap();
    println!("\n{} jobs done in {:.2}s:", done.len(), t());
    for (job, who, _) in done.iter() {
        println!("  {job} by {who}");
    }
    assert_eq!(done.len(), 12, "every job is done exactly once");
    Ok(())
}
