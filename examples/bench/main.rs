//! Benchmark of the zk-recipes locks beside the raw ZooKeeper client (the protocol's floor),
//! Apache Curator and kazoo, reported as medians of repeated runs taken in turns.
//!
//! ```text
//! cargo run --release --features testing --example bench                          # 3 rounds: ours, peers, ours, peers, ours, peers
//! cargo run --release --features testing --example bench -- --rounds 5 --no-peers
//! cargo run --release --features testing --example bench -- --sections drain --drain 100,1000
//! ZK_CONNECT=127.0.0.1:2181 cargo run --release --features testing --example bench -- --no-peers
//! cargo run --release --features testing --example bench -- --help
//! ```
//!
//! Unless `ZK_CONNECT` is set, the benchmark starts its own ZooKeeper through the test harness
//! with the settings of the peers' server (`../shared/bench/peers/run.sh`): `tickTime=2000`,
//! `forceSync=yes`. Sessions ask for a 30 s timeout, as PeerBench.java does. The windows come
//! from the peers' variables (`PB_WARM`, `PB_DUR`, `PB_CDUR`; here 0.5 s, 2 s, 4 s by
//! default, so that a full invocation stays within minutes) and are passed on to the peers'
//! script, so both measure the same windows.
//!
//! # Rounds and turns
//!
//! One round runs our sections on a fresh server of our own, then the peers' script (its own
//! fresh server, Curator and kazoo): a fresh server each round on both sides, so that neither
//! runs on a JVM whose JIT compiler has finished while the other's is still busy. Before our
//! sections, about 20 s of unmeasured load (`warm`), as the peers' script runs its raw
//! operations for about 25 s before it measures Curator.
//! `--rounds` rounds (3 by default) run one after the other, so ours and the peers take turns
//! and a burst of load from the other processes on the machine lands on one turn, not on one
//! side. The summary gives each figure as median (min–max) over the rounds and the ratios of
//! the medians, with the goals of issue 13 and whether they are met.
//!
//! # Sections (one file each)
//!
//! 1. `uncontended.rs`: one session, FairLock acquire+release beside a raw create+delete.
//! 2. `contended.rs`: N sessions looping lock → release on one path (hand-offs/s), then lock →
//!    drop the guard (its release goes out with the next create), then `relock` (release and
//!    queue again in one transaction).
//! 3. `drain.rs`: 1000 queued waiters drained, beside the **raw chain** (N bare clients, each
//!    waiting for its predecessor's deletion, then deleting its own node): the per hand-off
//!    cost against one write plus one notification, split into wake-up and release.
//! 4. `herd.rs`: watches and notifications per release (counts, first round only).
//! 5. `contended.rs` (`rw`): read/write lock, 8 readers, and 8 readers + 2 writers, looping
//!    acquire → release, then acquire → drop the guard, then `relock_read` / `relock_write`.
//! 6. `peers.rs`: the peers' script.
//!
//! Every figure is also printed as `METRIC ours.<name> <value> <unit>`, the peers' format,
//! and the load average beside every section.

mod common;
mod contended;
use contended::Loop;
mod drain;
mod herd;
mod peers;
mod scale;
mod summary;
mod uncontended;

use std::collections::BTreeMap;
use std::time::Duration;

use zk_recipes::testing::{ServerOptions, ZooKeeperServer};

use crate::common::*;

const SECTIONS: &[&str] = &["uncontended", "contended", "drain", "herd", "rw", "peers"];
/// Sections run only when asked for with `--sections`.
const EXTRA_SECTIONS: &[&str] = &["scale"];

const HELP: &str = "\
usage: cargo run --release --features testing --example bench -- [options]

  --rounds N            rounds of (ours, peers), taken in turns (default 3)
  --sections LIST       comma-separated, from: uncontended,contended,drain,herd,rw,peers
                        (default: all; env BENCH_SECTIONS)
  --no-peers            do not run the peers' script (same as leaving 'peers' out)
  --fsync yes|no        forceSync of the server we start (default yes, as the peers')
  --tick-ms N           tickTime of the server we start (default 2000, as the peers')
  --warm S --dur S --cdur S
                        warm-up, uncontended and contended windows in seconds
                        (default: env PB_WARM, PB_DUR, PB_CDUR, else 0.5, 2, 4)
  --contended LIST      session counts for the contended section (default 8,32)
  --drain LIST          waiter counts for the drain section (default 1000)
  --drain-sessions N    at most N sessions carry the drain's waiters (default 50)
  --chain-multi         in the drain section, also raw chains whose links release with our
                        multi (set_data + delete): the server's share of our release; and
                        with that multi and an own-node watch, as our holder has
  --herd N              waiters in the herd section (default 50, as PeerBench)
  --scale-locks N       locks held by one session in the scale section (default 10000;
                        the section runs only when named: --sections scale)

env: ZK_CONNECT=host:port use that ZooKeeper instead of starting one (server settings unknown)
     PEER_BENCH=path/run.sh the peers' script (default: ../shared/bench/peers/run.sh)
     BENCH_CHAIN=replica    diagnostic: the drain's balanced chain sends our lock's own requests
                            (our names, ACL, own-node child watch, marked release) from bare
                            clients, so its ratio is our client code's share alone
     BENCH_OURS_AS=replica|multi|multi-own
                            diagnostic: that raw chain takes our place in the drain's balanced
                            turns, so its ratio is the server's share of those requests
";

#[derive(Debug, Clone)]
pub struct Cfg {
    rounds: usize,
    sections: Vec<String>,
    fsync: String,
    tick_ms: u64,
    pub warm: f64,
    pub dur: f64,
    pub cdur: f64,
    contended: Vec<usize>,
    drain: Vec<usize>,
    pub drain_sessions: usize,
    pub chain_multi: bool,
    pub herd: usize,
    pub scale_locks: usize,
}

impl Cfg {
    fn has(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }

    fn parse() -> Res<Cfg> {
        let env_f64 = |k: &str, d: f64| -> Res<f64> {
            match std::env::var(k) {
                Ok(v) => Ok(v
                    .parse()
                    .map_err(|_| format!("{k}={v:?} is not a number"))?),
                Err(_) => Ok(d),
            }
        };
        let list = |s: &str| -> Res<Vec<usize>> {
            s.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("{x:?} is not a positive number").into())
                })
                .collect()
        };
        let mut cfg = Cfg {
            rounds: 3,
            sections: match std::env::var("BENCH_SECTIONS") {
                Ok(s) => s.split(',').map(|s| s.trim().to_string()).collect(),
                Err(_) => SECTIONS.iter().map(|s| s.to_string()).collect(),
            },
            fsync: "yes".into(),
            tick_ms: 2000,
            warm: env_f64("PB_WARM", 0.5)?,
            dur: env_f64("PB_DUR", 2.0)?,
            cdur: env_f64("PB_CDUR", 4.0)?,
            contended: vec![8, 32],
            drain: vec![1000],
            drain_sessions: 50,
            chain_multi: false,
            herd: 50,
            scale_locks: 10_000,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .ok_or_else(|| BoxError::from(format!("{arg} needs a value")))
            };
            match arg.as_str() {
                "-h" | "--help" => {
                    print!("{HELP}");
                    std::process::exit(0);
                }
                "--rounds" => cfg.rounds = value()?.parse::<usize>()?.max(1),
                "--sections" => {
                    cfg.sections = value()?.split(',').map(|s| s.trim().to_string()).collect()
                }
                "--no-peers" => cfg.sections.retain(|s| s != "peers"),
                "--fsync" => cfg.fsync = value()?,
                "--tick-ms" => cfg.tick_ms = value()?.parse()?,
                "--warm" => cfg.warm = value()?.parse()?,
                "--dur" => cfg.dur = value()?.parse()?,
                "--cdur" => cfg.cdur = value()?.parse()?,
                "--contended" => cfg.contended = list(&value()?)?,
                "--drain" => cfg.drain = list(&value()?)?,
                "--drain-sessions" => cfg.drain_sessions = value()?.parse::<usize>()?.max(1),
                "--chain-multi" => cfg.chain_multi = true,
                "--herd" => cfg.herd = value()?.parse::<usize>()?.max(1),
                "--scale-locks" => cfg.scale_locks = value()?.parse::<usize>()?.max(1),
                other => return Err(format!("unknown argument {other:?}\n\n{HELP}").into()),
            }
        }
        if let Some(s) = cfg
            .sections
            .iter()
            .find(|s| !SECTIONS.contains(&s.as_str()) && !EXTRA_SECTIONS.contains(&s.as_str()))
        {
            return Err(format!(
                "unknown section {s:?}; sections: {}, and on request {}",
                SECTIONS.join(","),
                EXTRA_SECTIONS.join(",")
            )
            .into());
        }
        if !["yes", "no"].contains(&cfg.fsync.as_str()) {
            return Err(format!("--fsync {:?}: use yes or no", cfg.fsync).into());
        }
        if cfg.dur <= 0.0 || cfg.cdur <= 0.0 || cfg.warm < 0.0 {
            return Err("durations must be positive".into());
        }
        Ok(cfg)
    }
}

fn start_server(cfg: &Cfg) -> Res<ZooKeeperServer> {
    let fs = cfg.fsync.as_str();
    eprintln!(
        "[bench] starting ZooKeeper (tickTime={} ms, forceSync={fs})",
        cfg.tick_ms
    );
    Ok(ZooKeeperServer::start_with(
        ServerOptions::new()
            .with_tick_time(Duration::from_millis(cfg.tick_ms))
            // The harness passes -Dzookeeper.forceSync=no; a later -D wins, and the zoo.cfg
            // line is what the peers' server has too. The fsync count proves it.
            .with_system_property("zookeeper.forceSync", fs)
            .with_config_line(format!("forceSync={fs}"))
            // The peers' server is a plain `java` command line: Java's own GC and heap size.
            // Measured on this machine, the harness's `-Xmx256m -XX:+UseSerialGC` made our
            // contended figures about 10% higher than on a server started as theirs is.
            .with_java_defaults(),
    )?)
}

/// Unmeasured load on a fresh server before a round's sections: the uncontended section and
/// the contended one with 8 sessions (plain and relock), about 20 s with the default windows.
/// The peers' script loads its fresh server with raw operations for about 25 s before it
/// measures Curator, so without this our first sections ran on a colder JVM than theirs (its
/// JIT compiler still busy: perf saw its C2 thread take 50-75% of a core on a new server).
async fn warm(cs: &str, cfg: &Cfg, round: usize) -> Res<()> {
    let started = std::time::Instant::now();
    println!("== warm-up of this round's fresh server (not counted; its figures are not printed)");
    let root = format!(
        "/zkr-bench-warm-{}-{round}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut scratch = Metrics::quiet();
    uncontended::run(cs, &root, cfg, &mut scratch).await?;
    contended::fair_lock(cs, &root, cfg, 8, Loop::Release, &mut scratch).await?;
    contended::fair_lock(cs, &root, cfg, 8, Loop::Relock, &mut scratch).await?;
    println!(
        "== warm-up done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Our sections, one round.
async fn ours(cs: &str, cfg: &Cfg, round: usize) -> Res<Metrics> {
    let mut m = Metrics::default();
    let root = format!(
        "/zkr-bench-{}-{round}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    if cfg.has("uncontended") {
        uncontended::run(cs, &root, cfg, &mut m).await?;
    }
    if cfg.has("contended") {
        for &n in &cfg.contended {
            for how in [Loop::Release, Loop::Drop, Loop::Relock] {
                contended::fair_lock(cs, &root, cfg, n, how, &mut m).await?;
            }
        }
    }
    if cfg.has("drain") {
        for &n in &cfg.drain {
            drain::run(cs, &root, cfg, n, round, &mut m).await?;
        }
    }
    if cfg.has("herd") && round == 1 {
        herd::run(cs, &root, cfg, &mut m).await?;
    }
    if cfg.has("rw") {
        for how in [Loop::Release, Loop::Drop, Loop::Relock] {
            contended::rw(cs, &root, cfg, 8, 0, how, &mut m).await?;
            contended::rw(cs, &root, cfg, 8, 2, how, &mut m).await?;
        }
    }
    if cfg.has("scale") {
        scale::run(cs, &root, cfg, &mut m).await?;
    }
    Ok(m)
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Res<()> {
    let cfg = Cfg::parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d %H:%M %Z")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!(
        "zk-recipes bench, {date}: {} rounds of sections {}; warm {} s, dur {} s, cdur {} s; {} cores; load average {}",
        cfg.rounds,
        cfg.sections.join(","),
        cfg.warm,
        cfg.dur,
        cfg.cdur,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
    );
    let ours_sections = cfg.sections.iter().any(|s| s != "peers");
    let given = std::env::var("ZK_CONNECT").ok();
    if let Some(cs) = &given {
        println!("== server: ZK_CONNECT={cs} (its tickTime and forceSync are not ours to set)");
    }
    let mut our_rounds: Vec<BTreeMap<String, f64>> = Vec::new();
    let mut peer_rounds = Vec::new();
    for round in 1..=cfg.rounds {
        if ours_sections {
            println!();
            println!(
                "######## round {round}/{}: ours   (load average {})",
                cfg.rounds,
                loadavg()
            );
            // A fresh server each round, as the peers' script starts one each time it runs:
            // a server that lived through the earlier rounds has its JIT compiler done, and
            // ours would run on a warmer server than theirs.
            let (server, cs) = match &given {
                Some(cs) => (None, cs.clone()),
                None => {
                    let server = start_server(&cfg)?;
                    SERVER_PID.store(
                        server.pid().unwrap_or(0),
                        std::sync::atomic::Ordering::SeqCst,
                    );
                    let cs = server.connect_string();
                    let version = four(&cs, "srvr")
                        .and_then(|s| {
                            s.lines().find_map(|l| {
                                l.strip_prefix("Zookeeper version: ").map(str::to_string)
                            })
                        })
                        .unwrap_or_else(|| "?".into());
                    println!(
                        "== server: our own ZooKeeper {cs}, tickTime={} ms, forceSync={}: {version}",
                        cfg.tick_ms, cfg.fsync
                    );
                    (Some(server), cs)
                }
            };
            if server.is_some() {
                rt.block_on(warm(&cs, &cfg, round))?;
            }
            our_rounds.push(rt.block_on(ours(&cs, &cfg, round))?.0);
            let fsyncs = mntr_get(&mntr(&cs), "zk_cnt_fsynctime");
            println!("METRIC ours.server_fsync_count {} count", fmt_num(fsyncs));
            drop(server);
        }
        if cfg.has("peers") {
            println!();
            println!(
                "######## round {round}/{}: peers   (load average {})",
                cfg.rounds,
                loadavg()
            );
            if let Some(p) = peers::run(&cfg, round)? {
                peer_rounds.push(p);
            }
        }
    }
    println!();
    println!("== summary, {date}: median (min–max) over the rounds; ratios are of the medians");
    summary::print(&our_rounds, &peer_rounds, &cfg.contended, &cfg.drain);
    Ok(())
}
