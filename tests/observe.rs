//! The library's metrics, seen through a recorder installed by the application (here the
//! `metrics-util` debugging recorder): the names documented in `src/observe.rs` move when
//! locks are taken, handed off, released and lost.
mod support;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::zk::{raw, session};
use zk_recipes::testing::unique_root;
use zk_recipes::FairLock;

/// `name{label=value,...}` → counter value or histogram sample count.
fn read(snapshotter: &Snapshotter) -> HashMap<String, u64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let n = match value {
                DebugValue::Counter(c) => c,
                DebugValue::Gauge(g) => g.into_inner() as u64,
                DebugValue::Histogram(h) => h.len() as u64,
            };
            (name, n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_acquires_handoffs_and_losses() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let dir = unique_root("observe");
    let (s1, s2) = (session().await, session().await);
    let first = FairLock::new(&s1, &dir).unwrap().lock().await.unwrap();
    let lock2 = FairLock::new(&s2, &dir).unwrap();
    let waiter = tokio::spawn(async move { lock2.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("hand-off")
        .unwrap()
        .unwrap();
    // An administrator deletes the holder's node: a loss.
    raw().await.delete(second.path(), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), second.lost())
        .await
        .expect("told of the deletion");
    drop(second);

    let m = read(&snapshotter);
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    assert!(
        get("zk_recipes_acquires_total{kind=lock,outcome=granted}") >= 2,
        "{m:#?}"
    );
    assert!(
        get("zk_recipes_acquire_seconds{kind=lock,outcome=granted}") >= 2,
        "{m:#?}"
    );
    assert!(get("zk_recipes_handoffs_total{kind=lock}") >= 1, "{m:#?}");
    assert!(get("zk_recipes_hold_seconds{kind=lock}") >= 2, "{m:#?}");
    assert!(
        get("zk_recipes_losses_total{kind=lock,reason=node_deleted}") >= 1,
        "{m:#?}"
    );
    assert!(get("zk_recipes_requests_total{op=create}") >= 2, "{m:#?}");
    assert!(
        get("zk_recipes_session_events_total{state=connected}") >= 2,
        "{m:#?}"
    );
    assert!(get("zk_recipes_epoch{}") >= 1, "{m:#?}");
    s1.close().await;
    s2.close().await;
}
