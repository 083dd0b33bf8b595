//! Leader election: three candidates on separate sessions, a bystander watching who leads, and
//! two failovers: the leader's session is closed cleanly, then the next leader's session is
//! forced to expire. Each candidate campaigns again by itself after losing leadership.
//!
//! ```text
//! cargo run --features testing --example leader_election    # private ZooKeeper
//! ZK_CONNECT=127.0.0.1:2181 cargo run --features testing --example leader_election
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use zk_recipes::testing::Playground;
use zk_recipes::{Election, ElectionRunner, Result, Session};

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let zk = Playground::from_env()?;
    let start = Instant::now();
    let at = move || format!("{:>6.3}s", start.elapsed().as_secs_f64());
    println!("leader election on {}", zk.describe());
    let path = format!("/zk-recipes-example/election-{}", std::process::id());

    // A bystander prints every change of leader.
    let bystander = Session::builder(zk.connect_string()).connect().await?;
    let mut changes = Election::new(&bystander, &path, "bystander")?.observe();
    let watcher = tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            match change {
                Ok(change) => match change.leader() {
                    Some(l) => println!(
                        "{}  bystander: {} leads (token {:#x})",
                        at(),
                        l.id,
                        l.fencing_token
                    ),
                    None => println!("{}  bystander: no leader", at()),
                },
                Err(e) => println!("{}  bystander: observer failed: {e}", at()),
            }
        }
    });

    // Three candidates, each with its own session and a runner that campaigns again after
    // every term.
    let mut candidates: BTreeMap<&str, (Session, ElectionRunner)> = BTreeMap::new();
    for name in ["alpha", "bravo", "charlie"] {
        let session = Session::builder(zk.connect_string())
            .with_session_timeout(Duration::from_secs(4))
            .connect()
            .await?;
        let runner = Election::new(&session, &path, name)?.run(move |leadership| async move {
            println!(
                "{}  {name}: I lead (token {:#x}, session {:#x})",
                at(),
                leadership.fencing_token(),
                leadership.session_id()
            );
            leadership.lost().await;
            let why = leadership
                .loss_reason()
                .map(|r| r.to_string())
                .unwrap_or_default();
            println!(
                "{}  {name}: I no longer lead ({why}); campaigning again",
                at()
            );
        });
        candidates.insert(name, (session, runner));
    }
    let reader = Election::new(&bystander, &path, "bystander")?;
    let leader = wait_for_leader(&reader, None).await?;
    let ids: Vec<String> = reader
        .participants()
        .await?
        .into_iter()
        .map(|p| p.id)
        .collect();
    println!("{}  candidates in line: {}", at(), ids.join(" < "));

    // 1. The leader's session closes cleanly: its node goes at once and the next leads.
    println!("{}  -- closing {leader}'s session", at());
    let (session, runner) = candidates
        .remove(leader.as_str())
        .expect("the leader is a candidate");
    runner.stop().await?;
    session.close().await;
    let leader = wait_for_leader(&reader, Some(&leader)).await?;

    // 2. The new leader's session is forced to expire: it is told through lost(), the next
    //    candidate leads, and the expired one joins again in a new session.
    println!("{}  -- expiring {leader}'s session", at());
    zk.expire(&candidates[leader.as_str()].0).await?;
    let _ = wait_for_leader(&reader, Some(&leader)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ids: Vec<String> = reader
        .participants()
        .await?
        .into_iter()
        .map(|p| p.id)
        .collect();
    println!("{}  candidates in line: {}", at(), ids.join(" < "));

    for (_, (session, runner)) in candidates {
        runner.stop().await?;
        session.close().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    bystander.close().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), watcher).await;
    Ok(())
}

/// Waits (up to 30 s) until someone other than `not` leads; returns its id.
async fn wait_for_leader(reader: &Election, not: Option<&str>) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(l) = reader.leader().await? {
            if Some(l.id.as_str()) != not {
                return Ok(l.id);
            }
        }
        if Instant::now() > deadline {
            return Err(zk_recipes::Error::Timeout);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
