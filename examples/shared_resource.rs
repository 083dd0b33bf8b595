//! Read/write coordination of a shared resource (here a small config file) between processes:
//! many readers read it together, an occasional writer changes it alone, and a publisher writes
//! a new version and then downgrades to a read lock to keep reading what it published, with no
//! other writer slipping in between.
//!
//! Each worker has its own ZooKeeper session, as separate processes would.
//!
//! ```text
//! cargo run --features testing --example shared_resource    # starts a private ZooKeeper
//! ZK_CONNECT=127.0.0.1:2181 cargo run --features testing --example shared_resource
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zk_recipes::testing::ZooKeeperServer;
use zk_recipes::{RwLock, Session};

const LOCK_PATH: &str = "/examples/shared-resource/lock";

fn version(file: &Path) -> String {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .trim()
        .to_string()
}

async fn reader(connect: String, file: PathBuf, id: u32, start: Instant) -> zk_recipes::Result<()> {
    let session = Session::builder(connect).connect().await?;
    let lock = RwLock::new(&session, LOCK_PATH)?;
    for _ in 0..3 {
        let guard = lock.read().await?;
        println!(
            "{:>5} ms  reader {id} reads   {}",
            start.elapsed().as_millis(),
            version(&file)
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        guard.release().await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    session.close().await;
    Ok(())
}

async fn writer(connect: String, file: PathBuf, start: Instant) -> zk_recipes::Result<()> {
    let session = Session::builder(connect).connect().await?;
    let lock = RwLock::new(&session, LOCK_PATH)?;
    for n in 1..=2 {
        tokio::time::sleep(Duration::from_millis(70)).await;
        let guard = lock.write().await?;
        let text = format!("version={n} (writer, token {})", guard.fencing_token());
        std::fs::write(&file, &text).expect("write the resource");
        println!(
            "{:>5} ms  writer   wrote   {text}",
            start.elapsed().as_millis()
        );
        guard.release().await?;
    }
    session.close().await;
    Ok(())
}

async fn publisher(connect: String, file: PathBuf, start: Instant) -> zk_recipes::Result<()> {
    let session = Session::builder(connect).connect().await?;
    let lock = RwLock::new(&session, LOCK_PATH)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let guard = lock.write().await?;
    let text = format!("version=published (token {})", guard.fencing_token());
    std::fs::write(&file, &text).expect("write the resource");
    println!(
        "{:>5} ms  publisher wrote  {text}",
        start.elapsed().as_millis()
    );
    let read = guard.downgrade().await?;
    let how = if read.is_exclusive() {
        "kept its write node: a writer was queued"
    } else {
        "readers may join"
    };
    println!(
        "{:>5} ms  publisher downgraded ({how})",
        start.elapsed().as_millis()
    );
    for _ in 0..3 {
        println!(
            "{:>5} ms  publisher reads  {}",
            start.elapsed().as_millis(),
            version(&file)
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    read.release().await?;
    session.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A private ZooKeeper unless ZK_CONNECT names one; dropped (stopped) at the end.
    let (connect, _server) = match std::env::var("ZK_CONNECT") {
        Ok(connect) => (connect, None),
        Err(_) => {
            let server = tokio::task::spawn_blocking(ZooKeeperServer::start)
                .await
                .expect("start task")?;
            (server.connect_string(), Some(server))
        }
    };
    let file = std::env::temp_dir().join(format!("zk-recipes-shared-{}.conf", std::process::id()));
    std::fs::write(&file, "version=0").expect("create the resource");
    println!(
        "ZooKeeper at {connect}; lock {LOCK_PATH}; resource {}",
        file.display()
    );

    let start = Instant::now();
    let mut tasks = Vec::new();
    for id in 1..=4 {
        tasks.push(tokio::spawn(reader(
            connect.clone(),
            file.clone(),
            id,
            start,
        )));
    }
    tasks.push(tokio::spawn(writer(connect.clone(), file.clone(), start)));
    tasks.push(tokio::spawn(publisher(
        connect.clone(),
        file.clone(),
        start,
    )));
    for task in tasks {
        task.await.expect("worker panicked")?;
    }
    println!("final: {}", version(&file));
    let _ = std::fs::remove_file(&file);
    Ok(())
}
