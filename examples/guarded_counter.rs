//! A counter kept in ZooKeeper that only the current leader may update: each increment is a
//! guarded transaction (`Leadership::guarded`), which ZooKeeper applies only while the
//! leader's node still exists. The leader's session is expired mid-run; its next write is
//! refused, never applied, and the new leader carries on from the last good value.
//!
//! ```text
//! cargo run --features testing --example guarded_counter    # private ZooKeeper
//! ZK_CONNECT=127.0.0.1:2181 cargo run --features testing --example guarded_counter
//! ```

use std::time::Duration;

use zk_recipes::testing::Playground;
use zk_recipes::{Election, Error, Leadership, Op, Session};

/// Adds one to the counter at `path` as the leader; returns the new value.
async fn increment(
    session: &Session,
    leadership: &Leadership,
    path: &str,
) -> zk_recipes::Result<u64> {
    let (data, stat) = session.read(path).await?.expect("the counter exists");
    let next = String::from_utf8_lossy(&data).parse::<u64>().unwrap_or(0) + 1;
    // Applied only if we still lead and nobody else changed the counter since our read.
    leadership
        .guarded([Op::set_data(path, next.to_string(), Some(stat.version))])
        .await?;
    Ok(next)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let zk = Playground::from_env()?;
    println!("guarded counter on {}", zk.describe());
    let root = format!("/zk-recipes-example/guarded-{}", std::process::id());
    let (election_path, counter) = (format!("{root}/leader"), format!("{root}/counter"));

    let connect = || {
        Session::builder(zk.connect_string())
            .with_session_timeout(Duration::from_secs(4))
            .connect()
    };
    let (alpha, bravo) = (connect().await?, connect().await?);

    let first = Election::new(&alpha, &election_path, "alpha")?
        .campaign()
        .await?;
    // The first leader creates the counter, guarded like every other write.
    first.guarded([Op::create(&counter, "0")]).await?;
    for _ in 0..3 {
        println!(
            "alpha leads (token {:#x}): counter = {}",
            first.fencing_token(),
            increment(&alpha, &first, &counter).await?
        );
    }

    // bravo campaigns; alpha's session expires (a long pause, a partition): bravo leads.
    let bravo_election = Election::new(&bravo, &election_path, "bravo")?;
    let campaign = tokio::spawn(async move { bravo_election.campaign().await });
    println!("-- expiring alpha's session --");
    zk.expire(&alpha).await?;
    let second = campaign.await??;
    println!("bravo leads (token {:#x})", second.fencing_token());

    // alpha still has its guard and tries again: ZooKeeper refuses the write.
    match increment(&alpha, &first, &counter).await {
        Err(Error::LockLost(why)) => println!("alpha's write refused: {why}; nothing written"),
        other => panic!("a deposed leader wrote: {other:?}"),
    }
    for _ in 0..2 {
        println!(
            "bravo: counter = {}",
            increment(&bravo, &second, &counter).await?
        );
    }
    let (data, _) = bravo.read(&counter).await?.expect("the counter exists");
    let value = String::from_utf8_lossy(&data).into_owned();
    assert_eq!(value, "5", "three increments by alpha and two by bravo");
    println!("final counter = {value} (3 by alpha, 2 by bravo, none by the deposed alpha)");

    second.guarded([Op::delete(&counter, None)]).await?;
    second.release().await?;
    drop(first);
    alpha.close().await;
    bravo.close().await;
    Ok(())
}
