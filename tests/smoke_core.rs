use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zk_recipes::testing::{shared_server, unique_root};
use zk_recipes::{Error, FairLock, Session};

async fn session() -> Session {
    Session::builder(shared_server().connect_string_via_proxy())
        .with_session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_smoke() {
    let root = unique_root("smoke");
    let held = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = session().await;
        let lock = FairLock::new(&s, &root).unwrap();
        let held = held.clone();
        let last = last.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let g = lock.lock().await.unwrap();
                assert!(!held.swap(true, Ordering::SeqCst), "overlap");
                let prev = last.swap(g.fencing_token(), Ordering::SeqCst);
                assert!(
                    g.fencing_token() > prev,
                    "token {} after {}",
                    g.fencing_token(),
                    prev
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
                held.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
            s.close().await;
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("hang")
            .unwrap();
    }
    let s = session().await;
    let lock = FairLock::new(&s, &root).unwrap();
    let g = lock.try_lock().await.unwrap();
    let lock2 = FairLock::new(&s, &root).unwrap();
    assert_eq!(lock2.try_lock().await.unwrap_err(), Error::WouldBlock);
    assert_eq!(
        lock2
            .lock_timeout(Duration::from_millis(300))
            .await
            .unwrap_err(),
        Error::Timeout
    );
    assert_eq!(lock.contenders().await.unwrap().len(), 1);
    drop(g);
    let g = tokio::time::timeout(Duration::from_secs(5), lock2.lock())
        .await
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    s.close().await;
}
