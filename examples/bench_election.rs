//! Failover time of leader election: ours beside Apache Curator's `LeaderLatch` and the raw
//! hand-off, on one server, in turns.
//!
//! ```text
//! cargo run --release --features testing --example bench_election                  # 3 turns of 100 failovers
//! cargo run --release --features testing --example bench_election -- --turns 5 --rounds 200 --candidates 3
//! cargo run --release --features testing --example bench_election -- --expire-rounds 20   # and forced expiries
//! cargo run --release --features testing --example bench_election -- --no-curator
//! ZK_CONNECT=127.0.0.1:2181 cargo run --release --features testing --example bench_election
//! ```
//!
//! Unless `ZK_CONNECT` is set it starts a private ZooKeeper through the test harness
//! (`tickTime=500`, ZooKeeper's default `forceSync=yes`). Each side runs `--candidates`
//! candidates (default 3), one session each (4 s timeout), connected straight to the server,
//! on its own path. Every round waits until all candidates have their nodes (and 5 ms more,
//! so that every watch is set: 5 ms idle, as long as the raw pairs idle before their delete,
//! since after a longer pause the machine answers more slowly), then the leader resigns. With
//! `--spy`, a bare `zookeeper_client` session sets an `exists` watch on the leader's node
//! first (and 5 ms pass again): when it hears of the resignation splits the failover into the
//! server's and network's share and our client's. It costs the server one more notification
//! per failover, so it is off by default.
//!
//! * **clean**: the leader resigns (`Leadership::resign`; Curator: `LeaderLatch.close`). The
//!   clock runs from just before that call until the next candidate learns it leads
//!   (`campaign()` returns; Curator: `LeaderLatchListener.isLeader`). The old leader then
//!   campaigns again, at the back (after the clock stops, on both sides). Ours is measured twice: with the default resignation (a
//!   plain delete, which Curator candidates also understand) and with
//!   `with_release_mark(true)`.
//! * **raw hand-off** (the baseline, one link of the raw chain of `examples/bench`): two raw
//!   `zookeeper_client` sessions, one watches a node with `exists`, the other deletes it;
//!   from the delete call until the watch fires. A clean failover cannot beat that. A second
//!   raw pair releases as our marked release does (set + delete in one multi), so the same
//!   server work without the recipe. Both run round by round with the marked failovers (one
//!   of each just before each failover), so that the baseline sees the same moment's disk
//!   sync time: run as a series of its own it drifted from 0.55 to 1.37 ms between turns.
//!
//! A **turn** runs ours default, ours with the mark (and the raw pairs), and Curator, so
//! that a burst of load from other processes lands on one turn rather than on one variant.
//! The report gives the median (min-max) over the turns of each variant's p50 and p99 (by
//! nearest rank), the ratios of the medians, the per-turn ratios of ours (marked) to the raw
//! pairs that ran round by round with it, and the goals of issue 13: default failover
//! <= 1.0x Curator's (ratio of the medians), release-mark failover <= 1.15x the raw hand-off
//! (the median of the per-turn ratios: the steadier of the two, since the pair saw the same
//! moments). They are reported, not asserted. The load average is printed: figures taken on a busy machine are noisy.
//!
//! * **expiry** (`--expire-rounds N`, once after the turns): the leader's session is ended on
//!   the server by resuming it on a second connection and closing it (ours:
//!   `testing::expire_session` through a proxy in front of each candidate; Curator: a second
//!   `ZooKeeper` handle). The clock runs from the start of that until the next candidate
//!   leads, so it includes the second connection's handshake.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};
use zk_recipes::testing::{expire_session, FaultProxy, ZooKeeperServer};
use zk_recipes::{zk, Election, Error, Leadership, Session};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = std::result::Result<T, BoxError>;

const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
const WAIT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_millis(5);
const JAVA_DIR: &str = "/usr/share/java";
const CLIENT_JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
    "netty-all.jar",
];

const HELP: &str = "\
usage: cargo run --release --features testing --example bench_election -- [options]

  --turns N           turns; each runs every variant once (default 3)
  --rounds N          measured clean failovers per variant and turn (default 100)
  --expire-rounds N   measured forced-expiry failovers per side, once after the turns
                      (default 0: none)
  --warmup N          unmeasured rounds before each series (default 10; 2 for expiry)
  --candidates N      candidates per election (default 3, at least 2)
  --no-curator        skip Curator's LeaderLatch
  --current-thread    run our side on a current-thread tokio runtime (default: multi-thread)
  --spy               a bare session also watches the leader's node: when it hears of each
                      resignation (one more notification per failover)
  --probe-send        a diagnostic: when our resigning session handed its release to the
                      client library (the instant the library counts the request), per round
  --stamps FILE       a diagnostic: write each measured clean failover and raw hand-off, with
                      the wall-clock instants its clock started and stopped, to FILE (for
                      scripts/handoff-capture, which lines them up with a packet capture)

env: ZK_CONNECT=host:port use that ZooKeeper instead of starting one
";

#[derive(Debug, Clone)]
struct Opts {
    turns: usize,
    rounds: usize,
    expire_rounds: usize,
    warmup: usize,
    candidates: usize,
    curator: bool,
    current_thread: bool,
    spy: bool,
    probe_send: bool,
    stamps: Option<PathBuf>,
}

fn parse_args() -> Res<Opts> {
    let mut o = Opts {
        turns: 3,
        rounds: 100,
        expire_rounds: 0,
        warmup: 10,
        candidates: 3,
        curator: true,
        current_thread: false,
        spy: false,
        probe_send: false,
        stamps: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let at = i;
        let num = |name: &str| -> Res<usize> {
            let v = args
                .get(at + 1)
                .ok_or_else(|| format!("{name} needs a value"))?;
            Ok(v.parse()
                .map_err(|_| format!("{name}: {v:?} is not a number"))?)
        };
        i += if matches!(
            a,
            "--no-curator" | "--current-thread" | "--spy" | "--probe-send" | "-h" | "--help"
        ) {
            1
        } else {
            2
        };
        match a {
            "--turns" => o.turns = num("--turns")?.max(1),
            "--rounds" => o.rounds = num("--rounds")?,
            "--expire-rounds" => o.expire_rounds = num("--expire-rounds")?,
            "--warmup" => o.warmup = num("--warmup")?,
            "--candidates" => o.candidates = num("--candidates")?,
            "--no-curator" => o.curator = false,
            "--current-thread" => o.current_thread = true,
            "--spy" => o.spy = true,
            "--probe-send" => o.probe_send = true,
            "--stamps" => {
                let v = args.get(at + 1).ok_or("--stamps needs a file")?;
                o.stamps = Some(PathBuf::from(v));
            }
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other:?}\n{HELP}").into()),
        }
    }
    if o.candidates < 2 || o.rounds == 0 {
        return Err("need --candidates >= 2 and --rounds >= 1".into());
    }
    Ok(o)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// p-th percentile by nearest rank, in milliseconds.
fn pct(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v: Vec<Duration> = samples.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1].as_secs_f64() * 1e3
}

fn row(name: &str, samples: &[Duration]) {
    println!(
        "  {name:<42} {:>9.3} ms {:>9.3} ms   (n={})",
        pct(samples, 50.0),
        pct(samples, 99.0),
        samples.len()
    );
}

fn metric(name: &str, samples: &[Duration]) {
    println!("METRIC {name}.p50 {:.4} ms", pct(samples, 50.0));
    println!("METRIC {name}.p99 {:.4} ms", pct(samples, 99.0));
}

fn goal(what: &str, ratio: f64, limit: f64) {
    if limit.is_nan() {
        println!("  {what:<52} {ratio:>6.2}");
        return;
    }
    let verdict = if ratio.is_nan() {
        "n/a"
    } else if ratio <= limit {
        "met"
    } else {
        "NOT met"
    };
    println!("  {what:<52} {ratio:>6.2}   goal <= {limit}: {verdict}");
}

/// With `--stamps`: one line per measured hand-off, `<variant> <path> <start> <stop>` (seconds
/// since the epoch, the clock a packet capture uses), written out when the run ends. Only two
/// clock reads are added to a measured round: the line is made after its clock has stopped.
static STAMPS: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(None);

/// The wall-clock instant matching `t0` (read right beside it).
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn stamp(variant: &str, path: &str, start: f64, took: Duration) {
    if let Some(lines) = STAMPS.lock().unwrap().as_mut() {
        lines.push(format!(
            "{variant} {path} {start:.6} {:.6}",
            start + took.as_secs_f64()
        ));
    }
}

fn main() -> Res<()> {
    let opts = parse_args()?;
    if opts.stamps.is_some() {
        *STAMPS.lock().unwrap() = Some(Vec::new());
    }
    if opts.probe_send {
        metrics::set_global_recorder(send_probe::Probe)
            .map_err(|_| "a metrics recorder is installed already")?;
    }
    let mut runtime = if opts.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let stamps = opts.stamps.clone();
    runtime.enable_all().build()?.block_on(run(opts))?;
    if let Some(file) = stamps {
        let lines = STAMPS.lock().unwrap().take().unwrap_or_default();
        std::fs::write(&file, lines.join("\n") + "\n")?;
        println!("{} hand-offs stamped in {}", lines.len(), file.display());
    }
    Ok(())
}

async fn run(opts: Opts) -> Res<()> {
    let (_server, direct) = match std::env::var("ZK_CONNECT")
        .ok()
        .filter(|s| !s.trim().is_empty())
    {
        Some(hosts) => (
            None,
            hosts
                .split(',')
                .next()
                .unwrap_or_default()
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        ),
        None => {
            let server = tokio::task::spawn_blocking(ZooKeeperServer::start).await??;
            let cs = server.connect_string();
            (Some(server), cs)
        }
    };
    let root = format!("/bench-election-{}", std::process::id());
    println!(
        "== leader election failover on {direct} ({} candidates, {} turns of {} failovers each; {}; load average {})",
        opts.candidates,
        opts.turns,
        opts.rounds,
        date(),
        loadavg()
    );

    // Each turn runs every variant once, in the same order, so that a burst of load from
    // other processes lands on one turn rather than on one variant.
    let mut turns: Vec<Turn> = Vec::new();
    for t in 1..=opts.turns {
        let r = format!("{root}/t{t}");
        let plain = rust_failover(
            &direct,
            &format!("{r}/plain"),
            &opts,
            false,
            opts.rounds,
            0,
            &[],
        )
        .await?;
        // The raw hand-offs run round by round with the marked failovers: a raw delete and a
        // raw marked release (set + delete in one multi) before each.
        let raw_delete = RawPair::new(&direct, &format!("{r}/raw-delete"), false, false).await?;
        let raw_multi = RawPair::new(&direct, &format!("{r}/raw-multi"), true, false).await?;
        let raw_own = RawPair::new(&direct, &format!("{r}/raw-own"), true, true).await?;
        let mut marked = rust_failover(
            &direct,
            &format!("{r}/mark"),
            &opts,
            true,
            opts.rounds,
            0,
            &[&raw_delete, &raw_multi, &raw_own],
        )
        .await?;
        raw_delete.finish().await?;
        raw_multi.finish().await?;
        raw_own.finish().await?;
        let baseline_own = marked.raw.pop().unwrap_or_default();
        let baseline_multi = marked.raw.pop().unwrap_or_default();
        let baseline = marked.raw.pop().unwrap_or_default();
        if opts.spy {
            println!(
                "  turn {t}: p50 a bare session watching the leader's node heard of the resignation after: default {:.3} ms, mark {:.3} ms",
                pct(&plain.spy, 50.0),
                pct(&marked.spy, 50.0)
            );
        }
        let curator = if opts.curator {
            match curator_failover(&direct, &format!("{r}/curator"), &opts, 0) {
                Ok(c) => Some(c.clean),
                Err(e) => {
                    println!("  Curator run failed: {e}");
                    None
                }
            }
        } else {
            None
        };
        if opts.probe_send {
            println!(
                "  turn {t}: p50 our resigning session handed its release to the client library after: default {:.3} ms, mark {:.3} ms ({} and {} rounds seen)",
                pct(&plain.send, 50.0),
                pct(&marked.send, 50.0),
                plain.send.len(),
                marked.send.len()
            );
        }
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        println!(
            "  turn {t}: requests by the next leader between the resignation and its election: default {:.2}, mark {:.2}",
            mean(&plain.wake_requests),
            mean(&marked.wake_requests)
        );
        let turn = Turn {
            baseline,
            baseline_multi,
            baseline_own,
            plain: plain.clean,
            marked: marked.clean,
            curator,
        };
        println!(
            "  turn {t}: p50 raw {:.3} ms, raw multi {:.3} ms, raw multi + own watch {:.3} ms, ours default {:.3} ms, ours mark {:.3} ms, Curator {:.3} ms   (load average {})",
            pct(&turn.baseline, 50.0),
            pct(&turn.baseline_multi, 50.0),
            pct(&turn.baseline_own, 50.0),
            pct(&turn.plain, 50.0),
            pct(&turn.marked, 50.0),
            turn.curator.as_deref().map_or(f64::NAN, |c| pct(c, 50.0)),
            loadavg()
        );
        turns.push(turn);
    }

    println!(
        "\n== clean failover, leader resigns -> next candidate leads: median (min-max) over {} turns of the per-turn p50 and p99   (load average {})",
        turns.len(),
        loadavg()
    );
    println!("  {:<44} {:>26} {:>26}", "", "p50 [ms]", "p99 [ms]");
    let series: [(&str, Series); 5] = [
        ("raw hand-off: delete + notification", |t| Some(&t.baseline)),
        ("raw hand-off: set + delete multi + notif.", |t| {
            Some(&t.baseline_multi)
        }),
        ("zk-recipes Election (default: plain delete)", |t| {
            Some(&t.plain)
        }),
        ("zk-recipes Election (release mark)", |t| Some(&t.marked)),
        ("Curator 5.4.0 LeaderLatch", |t| t.curator.as_deref()),
    ];
    let mut med = Vec::new();
    for (name, f) in series {
        let p50: Vec<f64> = turns
            .iter()
            .filter_map(|t| f(t).map(|s| pct(s, 50.0)))
            .collect();
        let p99: Vec<f64> = turns
            .iter()
            .filter_map(|t| f(t).map(|s| pct(s, 99.0)))
            .collect();
        println!("  {name:<44} {:>26} {:>26}", spread(&p50), spread(&p99));
        med.push(median(&p50));
    }
    println!("  ratios of the medians of p50:");
    goal("ours (default) / Curator LeaderLatch", med[2] / med[4], 1.0);
    // The mark's goal is judged on the paired per-turn ratio below, not on this one.
    goal(
        "ours (release mark) / raw hand-off",
        med[3] / med[0],
        f64::NAN,
    );
    goal(
        "ours (release mark) / raw multi hand-off",
        med[3] / med[1],
        f64::NAN,
    );
    goal("ours (default) / raw hand-off", med[2] / med[0], f64::NAN);
    // The raw pairs ran round by round with the marked failovers: a turn's ratio compares
    // figures taken at the same moments.
    let paired = |raw: Series| -> Vec<f64> {
        turns
            .iter()
            .filter_map(|t| Some(pct(&t.marked, 50.0) / pct(raw(t)?, 50.0)))
            .collect()
    };
    println!(
        "  per-turn ratios of p50 (raw and ours interleaved round by round), median (min-max):"
    );
    let vs_raw = paired(|t| Some(&t.baseline));
    println!(
        "  ours (release mark) / raw hand-off               {}",
        spread(&vs_raw)
    );
    goal(
        "  median of the per-turn ratios to the raw hand-off",
        median(&vs_raw),
        1.15,
    );
    println!(
        "  ours (release mark) / raw multi hand-off         {}",
        spread(&paired(|t| Some(&t.baseline_multi)))
    );
    println!(
        "  ours (release mark) / raw multi, own watch too   {}",
        spread(&paired(|t| Some(&t.baseline_own)))
    );
    goal(
        "ours (release mark) / Curator LeaderLatch",
        med[3] / med[4],
        f64::NAN,
    );

    if opts.expire_rounds > 0 {
        let expiry = rust_failover(
            &direct,
            &format!("{root}/expire"),
            &opts,
            false,
            0,
            opts.expire_rounds,
            &[],
        )
        .await?;
        println!("\n== forced expiry: the leader's session is closed on the server -> next candidate leads (one run)");
        println!("  {:<42} {:>12} {:>12}", "", "p50", "p99");
        row("zk-recipes Election", &expiry.expire);
        row(
            "  (expire_session() itself returned after)",
            &expiry.expire_call,
        );
        metric("ours.election.expiry_failover", &expiry.expire);
        if opts.curator {
            let c = curator_failover(
                &direct,
                &format!("{root}/curator-expire"),
                &opts,
                opts.expire_rounds,
            )?;
            row("Curator 5.4.0 LeaderLatch", &c.expire);
            metric("curator.leader_latch.expiry_failover", &c.expire);
        }
    }
    println!();
    for (i, t) in turns.iter().enumerate() {
        let i = i + 1;
        metric(&format!("turn{i}.ours.election.write_notify"), &t.baseline);
        metric(
            &format!("turn{i}.ours.election.multi_notify"),
            &t.baseline_multi,
        );
        metric(&format!("turn{i}.ours.election.clean_failover"), &t.plain);
        metric(
            &format!("turn{i}.ours.election.clean_failover_mark"),
            &t.marked,
        );
        if let Some(c) = &t.curator {
            metric(&format!("turn{i}.curator.leader_latch.clean_failover"), c);
        }
    }
    Ok(())
}

/// Picks one variant's failovers out of a turn.
type Series = fn(&Turn) -> Option<&[Duration]>;

/// One turn: the clean failovers of every variant.
struct Turn {
    baseline: Vec<Duration>,
    baseline_multi: Vec<Duration>,
    baseline_own: Vec<Duration>,
    plain: Vec<Duration>,
    marked: Vec<Duration>,
    curator: Option<Vec<Duration>>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "median (min-max)" of per-turn figures.
fn spread(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.3} ({min:.3}-{max:.3})", median(v))
}

fn date() -> String {
    Command::new("date")
        .arg("+%Y-%m-%d %H:%M %Z")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The raw hand-off: two raw `zookeeper_client` sessions; one watches a node with `exists`,
/// the other deletes it (or, with `mark`, sets its data and deletes it in one multi, as our
/// marked release does). One round is timed from the delete call until the watch fires.
struct RawPair {
    writer: zk::Client,
    watcher: zk::Client,
    dir: String,
    node: String,
    mark: bool,
    /// The writer watches its own node too, as our holder does (`lost()`), with a child watch
    /// as ours: the server then sends two notifications per release, the watcher's first.
    own_watch: bool,
}

impl RawPair {
    async fn new(direct: &str, dir: &str, mark: bool, own_watch: bool) -> Res<RawPair> {
        let writer = zk::Client::connect(direct).await?;
        let watcher = zk::Client::connect(direct).await?;
        writer
            .mkdir(
                dir,
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await?;
        let node = format!("{dir}/n");
        Ok(RawPair {
            writer,
            watcher,
            dir: dir.to_string(),
            node,
            mark,
            own_watch,
        })
    }

    /// One hand-off: how long it took, and the wall-clock instant its clock started.
    async fn once(&self) -> Res<(Duration, f64)> {
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        self.writer.create(&self.node, b"", &ephemeral).await?;
        let (stat, watch) = self.watcher.check_and_watch_stat(&self.node).await?;
        if stat.is_none() {
            return Err("baseline node missing".into());
        }
        let own = if self.own_watch {
            Some(self.writer.get_and_watch_children(&self.node).await?.2)
        } else {
            None
        };
        // Idle as long as the failovers are before theirs (`SETTLE`): after a longer pause the
        // machine (CPU idle states, parked server threads) answers a little more slowly.
        tokio::time::sleep(SETTLE).await;
        let start = wall();
        let t0 = Instant::now();
        let released = if self.mark {
            let mut multi = self.writer.new_multi_writer();
            multi.add_set_data(&self.node, b"released", None)?;
            multi.add_delete(&self.node, None)?;
            // Sent at call time, as `delete` is.
            let commit = multi.commit();
            futures::future::Either::Left(
                async move { commit.await.map(drop).map_err(BoxError::from) },
            )
        } else {
            let delete = self.writer.delete(&self.node, None);
            futures::future::Either::Right(async move { delete.await.map_err(BoxError::from) })
        };
        let event = tokio::time::timeout(WAIT, watch.changed()).await?;
        let t1 = Instant::now();
        released.await?;
        if let Some(own) = own {
            tokio::time::timeout(WAIT, own.changed()).await?;
        }
        let want = if self.mark {
            zk::EventType::NodeDataChanged
        } else {
            zk::EventType::NodeDeleted
        };
        if event.event_type != want {
            return Err(format!("baseline: unexpected event {event:?}").into());
        }
        Ok((t1 - t0, start))
    }

    /// The name of this pair in `--stamps`.
    fn variant(&self) -> &'static str {
        match (self.mark, self.own_watch) {
            (false, _) => "raw-delete",
            (true, false) => "raw-multi",
            (true, true) => "raw-multi-own",
        }
    }

    async fn finish(self) -> Res<()> {
        self.writer.delete(&self.dir, None).await?;
        Ok(())
    }
}

#[derive(Default)]
struct Failovers {
    clean: Vec<Duration>,
    /// Requests the next leader's session sent between the resignation and its election.
    wake_requests: Vec<u64>,
    /// One series per raw pair given: a raw hand-off run just before each clean failover.
    raw: Vec<Vec<Duration>>,
    /// When a bare `zookeeper_client` session watching the leader's node (set just before
    /// the resignation) heard of it: the server's and the network's share of `clean`.
    spy: Vec<Duration>,
    /// With `--probe-send`: when the resigning session handed its release to the client
    /// library, from the start of the clock.
    send: Vec<Duration>,
    expire: Vec<Duration>,
    expire_call: Vec<Duration>,
}

/// Our election: `clean` resignations, then `expire` forced expiries, after warm-ups.
async fn rust_failover(
    direct: &str,
    path: &str,
    opts: &Opts,
    mark: bool,
    clean: usize,
    expire: usize,
    raws: &[&RawPair],
) -> Res<Failovers> {
    let k = opts.candidates;
    let mut proxies = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..k {
        // A proxy only where an expiry needs one: it is a hop more on every request, which
        // Curator's candidates do not pay.
        let hosts = if expire > 0 {
            let addr: SocketAddr = direct
                .to_socket_addrs()?
                .next()
                .ok_or("cannot resolve the server")?;
            let proxy = FaultProxy::start(addr)?;
            let hosts = proxy.addr().to_string();
            proxies.push(proxy);
            hosts
        } else {
            direct.to_string()
        };
        sessions.push(
            Session::builder(hosts)
                .with_session_timeout(SESSION_TIMEOUT)
                .connect()
                .await?,
        );
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant, Leadership)>();
    let go: Vec<Arc<Notify>> = (0..k).map(|_| Arc::new(Notify::new())).collect();
    let mut tasks = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let election = Election::new(s, path, format!("rust-{i}"))?.with_release_mark(mark);
        let (tx, go) = (tx.clone(), go[i].clone());
        tasks.push(tokio::spawn(async move {
            loop {
                match election.campaign().await {
                    Ok(l) => {
                        let now = Instant::now();
                        if tx.send((i, now, l)).is_err() {
                            return;
                        }
                        go.notified().await;
                    }
                    Err(Error::Closed) => return,
                    Err(e) => {
                        eprintln!("rust-{i}: campaign failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
        if i == 0 {
            // The first candidate leads; the others queue behind it in order.
            while Election::new(s, path, "probe")?
                .participants()
                .await?
                .is_empty()
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    // Reads go through a session of their own, which the expiries do not touch.
    let observer_session = Session::builder(direct)
        .with_session_timeout(SESSION_TIMEOUT)
        .connect()
        .await?;
    let observer = Election::new(&observer_session, path, "observer")?;
    let spy = if opts.spy {
        Some(zk::Client::connect(direct).await?)
    } else {
        None
    };
    let (mut cur, _, mut leadership) = next(&mut rx).await?;
    let mut out = Failovers {
        raw: vec![Vec::with_capacity(clean); raws.len()],
        ..Failovers::default()
    };
    let wait_all = || async {
        let deadline = Instant::now() + WAIT;
        while observer.participants().await?.len() != k {
            if Instant::now() > deadline {
                return Err::<(), BoxError>("candidates did not all queue".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(SETTLE).await;
        Ok(())
    };
    let clean_warmup = if clean > 0 { opts.warmup } else { 0 };
    for r in 0..clean_warmup + clean {
        // Round by round, so that the baseline sees the same moment's disk and load.
        for (series, pair) in out.raw.iter_mut().zip(raws) {
            let (d, start) = pair.once().await?;
            if r >= clean_warmup {
                series.push(d);
                stamp(pair.variant(), &pair.node, start, d);
            }
        }
        wait_all().await?;
        let spied = match &spy {
            Some(spy) => {
                let leader = observer
                    .participants()
                    .await?
                    .into_iter()
                    .next()
                    .ok_or("no leader")?;
                let (_, watch) = spy
                    .check_and_watch_stat(&format!("{path}/{}", leader.node))
                    .await?;
                // Idle again, as the raw pairs do before their delete.
                tokio::time::sleep(SETTLE).await;
                Some(tokio::spawn(async move {
                    watch.changed().await;
                    Instant::now()
                }))
            }
            None => None,
        };
        let sent: Vec<u64> = sessions.iter().map(Session::request_count).collect();
        let start = wall();
        let t0 = Instant::now();
        leadership.resign().await?;
        let (n, t1, l) = next(&mut rx).await?;
        let sent_at = opts
            .probe_send
            .then(|| send_probe::first_since(t0))
            .flatten();
        // The old leader joins again once the next one leads, as LatchBench's does.
        go[cur].notify_one();
        if let Some(spied) = spied {
            let spied = spied.await?;
            if r >= clean_warmup {
                out.spy.push(spied.saturating_duration_since(t0));
            }
        }
        if r >= clean_warmup {
            if let Some(sent_at) = sent_at {
                out.send.push(sent_at - t0);
            }
            out.clean.push(t1 - t0);
            let variant = if mark { "ours-mark" } else { "ours-default" };
            stamp(variant, path, start, t1 - t0);
            out.wake_requests
                .push(sessions[n].request_count().saturating_sub(sent[n]));
        }
        (cur, leadership) = (n, l);
    }
    let expire_warmup = if expire > 0 { opts.warmup.min(2) } else { 0 };
    for r in 0..expire_warmup + expire {
        wait_all().await?;
        let info = sessions[cur]
            .zk_session_info()
            .ok_or("the leader's session is not connected")?;
        let t0 = Instant::now();
        expire_session(&[&proxies[cur]], direct, info).await?;
        let called = Instant::now();
        let (n, t1, l) = next(&mut rx).await?;
        if r >= expire_warmup {
            out.expire.push(t1 - t0);
            out.expire_call.push(called - t0);
        }
        drop(std::mem::replace(&mut leadership, l));
        go[cur].notify_one();
        cur = n;
    }
    drop(leadership);
    for t in &tasks {
        t.abort();
    }
    for s in sessions.iter().chain([&observer_session]) {
        s.close().await;
    }
    Ok(out)
}

/// The next election reported by a candidate task.
async fn next(
    rx: &mut mpsc::UnboundedReceiver<(usize, Instant, Leadership)>,
) -> Res<(usize, Instant, Leadership)> {
    Ok(tokio::time::timeout(WAIT, rx.recv())
        .await
        .map_err(|_| "no leader elected within 30 s")?
        .ok_or("candidates gone")?)
}

/// Curator's LeaderLatch through `tests/interop/LatchBench.java`.
/// LatchBench runs its `WARMUP` rounds for the expiries too, even when none is measured, so
/// it is given no warm-up and the first `--warmup` clean failovers are dropped here instead.
fn curator_failover(direct: &str, path: &str, opts: &Opts, expire: usize) -> Res<Failovers> {
    let classes = build_latch_bench()?;
    let cp = format!("{}:{}", classes.display(), jar_classpath()?);
    let mut child = Command::new("java")
        .args(["-XX:+UseSerialGC", "-cp", &cp, "LatchBench", direct, path])
        .args(
            [
                opts.candidates,
                if expire > 0 { 2 } else { 0 },
                if expire > 0 {
                    0
                } else {
                    opts.warmup + opts.rounds
                },
                expire,
            ]
            .map(|n| n.to_string()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut out = Failovers::default();
    let mut done = false;
    for line in BufReader::new(child.stdout.take().ok_or("no stdout")?).lines() {
        let line = line?;
        let mut it = line.split_whitespace();
        match (it.next(), it.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("CLEAN"), Some(ns)) => out.clean.push(Duration::from_nanos(ns)),
            (Some("EXPIRE"), Some(ns)) => out.expire.push(Duration::from_nanos(ns)),
            (Some("DONE"), _) => done = true,
            (Some("ERR"), _) => return Err(format!("LatchBench: {line}").into()),
            _ => {}
        }
    }
    let status = child.wait()?;
    out.clean.drain(..opts.warmup.min(out.clean.len()));
    if !done || !status.success() {
        return Err(format!("LatchBench ended with {status} before DONE").into());
    }
    Ok(out)
}

fn jar_classpath() -> Res<String> {
    let mut cp = Vec::new();
    for j in CLIENT_JARS {
        let p = Path::new(JAVA_DIR).join(j);
        if !p.is_file() {
            return Err(format!(
                "missing {} (apt-get install -y libcurator-recipes-java zookeeper libslf4j-java)",
                p.display()
            )
            .into());
        }
        cp.push(p.display().to_string());
    }
    Ok(cp.join(":"))
}

/// Compiles LatchBench.java into `target/latch-bench/<hash of source>` unless already there.
fn build_latch_bench() -> Res<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("tests/interop/LatchBench.java");
    let text = std::fs::read(&src)?;
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let dir = target
        .join("latch-bench")
        .join(format!("{:016x}", h.finish()));
    if dir.join("LatchBench.class").is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let out = Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&dir)
        .arg("-cp")
        .arg(jar_classpath()?)
        .arg(&src)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "javac LatchBench.java failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(dir)
}

/// `--probe-send`: a `metrics` recorder that notes the instants at which the library counts a
/// `multi` or `delete` request (`zk_recipes_requests_total{op=...}`), which it does right after
/// handing the request to `zookeeper-client` (see `Epoch::track`). The first one after a
/// resignation's clock starts is that resignation's release (a marked one is a `multi`, a
/// plain one a `delete`): the share of the failover our client spends before the request can
/// leave. Every other metric is dropped.
mod send_probe {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    static SENT: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

    /// The first release counted at or after `t0`; forgets every earlier one.
    pub fn first_since(t0: Instant) -> Option<Instant> {
        let mut sent = SENT.lock().unwrap();
        let first = sent.iter().copied().filter(|&t| t >= t0).min();
        sent.clear();
        first
    }

    struct Multi;

    impl CounterFn for Multi {
        fn increment(&self, _: u64) {
            SENT.lock().unwrap().push(Instant::now());
        }
        fn absolute(&self, _: u64) {}
    }

    pub struct Probe;

    impl Recorder for Probe {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let release = key.name() == "zk_recipes_requests_total"
                && key
                    .labels()
                    .any(|l| l.key() == "op" && matches!(l.value(), "multi" | "delete"));
            if release {
                Counter::from_arc(Arc::new(Multi))
            } else {
                Counter::noop()
            }
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}
