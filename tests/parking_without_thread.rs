//! A dropped guard's release when the process has no deadline thread (it could not be
//! started): the release must still go out. A binary of its own, as the switch is
//! process-wide and must come before any guard is dropped.
mod support;

use std::time::{Duration, Instant};

use support::zk::{children, session};
use zk_recipes::testing::unique_root;
use zk_recipes::FairLock;

/// In the body of `block_on` (this test's), no worker of the runtime runs the dropping code,
/// so the flush task spawned by the drop finds itself on another thread and hands the release
/// to the deadline thread. Without that thread the release stayed parked until the next
/// acquire of the directory on this session or the session's end: here, with neither, the
/// node stayed (the review of d795c16). Now the flush task sends it itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_parked_from_a_block_on_body_goes_out_without_the_deadline_thread() {
    assert!(
        zk_recipes::testing::without_deadline_thread(),
        "a guard was dropped in this process before the switch"
    );
    let root = unique_root("no-deadline-thread");
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    for round in 0..20 {
        let g = lock.lock().await.unwrap();
        let name = g.path().rsplit('/').next().unwrap().to_string();
        drop(g);
        let by = Instant::now() + Duration::from_secs(2);
        while children(&root).await.contains(&name) {
            assert!(
                Instant::now() < by,
                "round {round}: the dropped guard's node {name} is still there 2 s after the drop"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    s.close().await;
}
