//! The fault scenarios. Each runs every recipe at once (one directory and [`CONTENDERS`]
//! sessions per recipe) for a few rounds; in each round one contender per recipe, the victim,
//! takes the lock first and holds it while the others queue behind it, the fault is injected,
//! the ensemble is healed, and the victims let go. Then every session is closed, leftover nodes
//! are looked for, and each recipe's journal is checked ([`evaluate`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::{block_in_place, JoinHandle};
use tokio_util::sync::CancellationToken;
use zk_recipes::testing::{monotonic_nanos, unique_root, ZooKeeperCluster};
use zk_recipes::zk;

use crate::support::history::Kind;
use crate::support::interop::Peer;
use crate::workload::{
    children, cycle, evaluate, lock_dirs, Connect, Contender, Hold, Recipe, Release, Row, Run,
    Status, Window, Write, CONTENDERS, HOLD, SESSION_TIMEOUT,
};

/// How long the other contenders get to queue behind the victims before the fault.
const SETTLE: Duration = Duration::from_millis(300);
/// Bound on waiting for something that takes a round trip or two.
const QUICK: Duration = Duration::from_secs(30);

pub struct Ctx {
    pub cluster: ZooKeeperCluster,
    pub rounds: usize,
}

/// The scenarios: `(id for ZKR_CHAOS_FAULTS, description for the table)`.
pub const FAULTS: &[(&str, &str)] = &[
    ("kill-leader", "kill -9 of the ensemble leader"),
    ("kill-holder-server", "kill -9 of the holder's server"),
    (
        "pause-holder-server",
        "SIGSTOP of the holder's server > session timeout",
    ),
    (
        "expire-sessions",
        "forced expiry of a holder and of waiters",
    ),
    (
        "pause-holder-process",
        "SIGSTOP of the holder process > session timeout",
    ),
    (
        "delete-holder-node",
        "administrator deletes the holder's node",
    ),
    (
        "delete-lock-dir",
        "administrator deletes the lock directory while waiters wait",
    ),
    ("drop-during-create", "connection loss during create"),
    (
        "revoke-holder",
        "revocation request to the holder (revocable locks)",
    ),
    (
        "restart-ensemble",
        "whole-ensemble restart > session timeout",
    ),
];

pub async fn run_fault(ctx: &mut Ctx, id: &str) -> Vec<Row> {
    match id {
        "kill-leader" => kill_leader(ctx).await,
        "kill-holder-server" => holder_server(ctx, false).await,
        "pause-holder-server" => holder_server(ctx, true).await,
        "expire-sessions" => expire_sessions(ctx).await,
        "pause-holder-process" => pause_holder_process(ctx).await,
        "delete-holder-node" => delete_holder_node(ctx).await,
        "delete-lock-dir" => delete_lock_dir(ctx).await,
        "drop-during-create" => drop_during_create(ctx).await,
        "revoke-holder" => revoke_holder(ctx).await,
        "restart-ensemble" => restart_ensemble(ctx).await,
        other => panic!("unknown fault {other:?}; known: {FAULTS:?}"),
    }
}

fn describe(id: &str) -> &'static str {
    FAULTS
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, d)| *d)
        .expect("known fault")
}

// ------------------------------------------------------------------------------ the ensemble

/// Resumes paused members, restarts dead ones and waits for a quorum.
fn heal(cluster: &mut ZooKeeperCluster) {
    block_in_place(|| {
        for i in 0..cluster.members().len() {
            let m = cluster.member_mut(i);
            if m.is_paused() {
                m.resume().expect("resume a member");
            }
            if !m.is_running() {
                m.restart().expect("restart a member");
            }
        }
        cluster
            .wait_for_quorum(Duration::from_secs(60))
            .expect("the ensemble to serve again");
    });
}

fn leader(cluster: &ZooKeeperCluster) -> usize {
    block_in_place(|| {
        let deadline = Instant::now() + QUICK;
        loop {
            if let Some(l) = cluster.leader() {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "expected a leader within {QUICK:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

fn follower(cluster: &ZooKeeperCluster) -> usize {
    let l = leader(cluster);
    (0..cluster.members().len())
        .find(|&i| i != l)
        .expect("a follower")
}

/// A plain client on the whole ensemble, for the administrator's deletes and the leak check.
async fn raw(cluster: &ZooKeeperCluster) -> zk::Client {
    let hosts = cluster.connect_string();
    let deadline = Instant::now() + QUICK;
    loop {
        let attempt = tokio::time::timeout(
            Duration::from_secs(5),
            zk::Client::connector()
                .with_session_timeout(Duration::from_secs(5))
                .connect(&hosts),
        )
        .await;
        match attempt {
            Ok(Ok(c)) => return c,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "expected a raw client to connect to {hosts} within {QUICK:?}, last: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

// ------------------------------------------------------------------------------ scenarios

/// One recipe's run and its contenders: `victim` (index 0) and the others (1..).
struct Set {
    run: Arc<Run>,
    victim: Option<Arc<Contender>>,
    others: Vec<Arc<Contender>>,
}

struct Scenario {
    id: &'static str,
    sets: Vec<Set>,
    /// Sessions made for a single round (victims on one member), closed at the end.
    extra: Vec<Arc<Contender>>,
}

impl Scenario {
    /// Connects the contenders of every recipe; `how(recipe, idx)` says how. Without a victim,
    /// index 0 is left out (the victim is made per round, or is a child process).
    async fn new(
        id: &'static str,
        with_victim: bool,
        how: impl Fn(Recipe, usize) -> Connect,
    ) -> Scenario {
        let root = unique_root(&format!("chaos-{id}"));
        let mut sets = Vec::new();
        for recipe in Recipe::ALL {
            let run = Run::new(recipe, format!("{root}/{}", recipe.short()));
            let first = if with_victim { 0 } else { 1 };
            let connecting: Vec<_> = (first..CONTENDERS)
                .map(|idx| {
                    let who = format!("{}#{idx}", recipe.short());
                    Contender::connect(&run, who, idx, how(recipe, idx))
                })
                .collect();
            let mut all = futures::future::join_all(connecting).await;
            let victim = if with_victim {
                Some(all.remove(0))
            } else {
                None
            };
            sets.push(Set {
                run,
                victim,
                others: all,
            });
        }
        Scenario {
            id,
            sets,
            extra: Vec::new(),
        }
    }

    /// Starts one cycle per victim (held until `release`) and waits until each victim holds.
    async fn start_victims(
        &self,
        victims: &[Arc<Contender>],
        release: &CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for (set, v) in self.sets.iter().zip(victims) {
            tasks.push(tokio::spawn(cycle(
                set.run.clone(),
                v.clone(),
                true,
                Release::On(release.clone()),
            )));
        }
        for (set, v) in self.sets.iter().zip(victims) {
            wait_holding(&set.run, &v.who).await;
        }
        tasks
    }

    fn victims(&self) -> Vec<Arc<Contender>> {
        self.sets
            .iter()
            .map(|s| s.victim.clone().expect("a scenario with victims"))
            .collect()
    }

    /// Starts `cycles` cycles of every other contender, one after another.
    fn start_others(
        &self,
        round: usize,
        cycles: impl Fn(&Contender) -> usize,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for set in &self.sets {
            for c in &set.others {
                let (run, c) = (set.run.clone(), c.clone());
                let n = cycles(&c);
                tasks.push(tokio::spawn(async move {
                    for k in 0..n {
                        let write = run.recipe.wants_write(c.idx, round + k);
                        cycle(run.clone(), c.clone(), write, Release::After(HOLD)).await;
                    }
                }));
            }
        }
        tasks
    }

    /// Awaits the round's cycles (each bounds its own waits).
    async fn finish(&self, tasks: Vec<JoinHandle<()>>) {
        let limit = Duration::from_secs(120);
        let joined = tokio::time::timeout(limit, futures::future::join_all(tasks)).await;
        match joined {
            Ok(results) => {
                for r in results {
                    if let Err(e) = r {
                        panic!("a contender task panicked: {e}");
                    }
                }
            }
            Err(_) => panic!("contender tasks did not finish within {limit:?} although every wait in them is bounded"),
        }
    }

    /// Every contender of `run` (victim, others and this scenario's per-round victims).
    fn whos(&self, set: &Set) -> Vec<String> {
        let mut v: Vec<String> = set.others.iter().map(|c| c.who.clone()).collect();
        if let Some(c) = &set.victim {
            v.push(c.who.clone());
        }
        let prefix = format!("{}#", set.run.recipe.short());
        v.extend(
            self.extra
                .iter()
                .filter(|c| c.who.starts_with(&prefix))
                .map(|c| c.who.clone()),
        );
        v
    }

    /// Closes every session, looks for nodes left behind, checks each run.
    async fn end(self, ctx: &Ctx) -> Vec<Row> {
        let mut closing = Vec::new();
        let everyone = self
            .sets
            .iter()
            .flat_map(|set| set.others.iter().chain(&set.victim))
            .chain(&self.extra);
        for c in everyone {
            let s = c.session.clone();
            closing.push(async move {
                let _ = tokio::time::timeout(Duration::from_secs(15), s.close()).await;
            });
        }
        futures::future::join_all(closing).await;
        let dirs: Vec<Vec<String>> = self
            .sets
            .iter()
            .map(|s| lock_dirs(s.run.recipe, &s.run.dir))
            .collect();
        let leaked = leftovers(&ctx.cluster, &dirs).await;
        let fault = describe(self.id);
        self.sets
            .iter()
            .zip(leaked)
            .map(|(set, leaked)| evaluate(&set.run, fault, ctx.rounds, leaked))
            .collect()
    }
}

async fn wait_holding(run: &Run, who: &str) {
    let deadline = Instant::now() + QUICK;
    loop {
        if let Some(Status::Holding { .. }) = run.status(who) {
            return;
        }
        if Instant::now() >= deadline {
            run.failure(format!(
                "victim {who} did not acquire within {QUICK:?} (status {:?})",
                run.status(who)
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `dirs` until they have no children, up to twice the session timeout plus a margin
/// (a session the client could not close, e.g. across an ensemble restart, ends by expiry).
/// Returns what is left in each.
async fn leftovers(cluster: &ZooKeeperCluster, dirs: &[Vec<String>]) -> Vec<Vec<String>> {
    let client = raw(cluster).await;
    let deadline = Instant::now() + SESSION_TIMEOUT * 2 + Duration::from_secs(5);
    loop {
        let _ = tokio::time::timeout(QUICK, client.sync("/")).await;
        let mut left = Vec::new();
        for set in dirs {
            let mut kids = Vec::new();
            for d in set {
                kids.extend(
                    tokio::time::timeout(QUICK, children(&client, d))
                        .await
                        .unwrap_or_else(|_| panic!("listing {d} timed out"))
                        .unwrap_or_else(|e| panic!("listing {d}: {e}")),
                );
            }
            left.push(kids);
        }
        if left.iter().all(Vec::is_empty) || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn window(who: &str, what: &'static str, start_ns: u64, end_ns: u64, cut: bool) -> Window {
    Window {
        who: who.to_string(),
        what,
        start_ns,
        end_ns,
        cut,
        expect_loss: true,
        no_writes_after_end: false,
    }
}

fn all_hosts(ctx: &Ctx) -> impl Fn(Recipe, usize) -> Connect {
    let hosts = ctx.cluster.connect_string();
    move |_, _| Connect {
        hosts: hosts.clone(),
        requeue: true,
        ..Connect::default()
    }
}

// ------------------------------------------------------------------------------ the faults

/// The leader dies with SIGKILL while victims hold and the others wait; it comes back a second
/// later. Nothing is expected of the victims (those on other members may keep their locks).
async fn kill_leader(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let sc = Scenario::new("kill-leader", true, all_hosts(ctx)).await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let mut tasks = sc.start_victims(&sc.victims(), &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        let l = leader(&ctx.cluster);
        let start = monotonic_nanos();
        block_in_place(|| ctx.cluster.member_mut(l).kill()).expect("kill the leader");
        tokio::time::sleep(Duration::from_secs(1)).await;
        heal(&mut ctx.cluster);
        for set in &sc.sets {
            set.run.fault_period(start, monotonic_nanos());
        }
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}

/// Victims connect to one follower only; it is killed (or frozen) for longer than the session
/// timeout. Under the Grace policy each victim must be told it lost the lock, and before the
/// server hands the lock on: its whole hold is checked.
async fn holder_server(ctx: &mut Ctx, pause: bool) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let id = if pause {
        "pause-holder-server"
    } else {
        "kill-holder-server"
    };
    let what = if pause {
        "SIGSTOP of its server"
    } else {
        "kill -9 of its server"
    };
    let mut sc = Scenario::new(id, false, all_hosts(ctx)).await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let m = follower(&ctx.cluster);
        let member = ctx.cluster.members()[m].connect_string();
        let mut victims = Vec::new();
        for set in &sc.sets {
            let who = format!("{}#v{round}", set.run.recipe.short());
            let how = Connect {
                hosts: member.clone(),
                requeue: true,
                ..Connect::default()
            };
            victims.push(Contender::connect(&set.run, who, 0, how).await);
        }
        let release = CancellationToken::new();
        let mut tasks = sc.start_victims(&victims, &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        let start = monotonic_nanos();
        if pause {
            ctx.cluster.members()[m].pause().expect("pause the member");
        } else {
            block_in_place(|| ctx.cluster.member_mut(m).kill()).expect("kill the member");
        }
        tokio::time::sleep(SESSION_TIMEOUT + Duration::from_millis(1500)).await;
        heal(&mut ctx.cluster);
        let end = monotonic_nanos();
        for (set, v) in sc.sets.iter().zip(&victims) {
            set.run.window(window(&v.who, what, start, end, false));
        }
        release.cancel();
        sc.finish(tasks).await;
        sc.extra.extend(victims);
    }
    sc.end(ctx).await
}

/// Expires (server-side close, as `FaultProxy::expire` does) a waiter that re-queues, a waiter
/// with `with_requeue_on_expiry(false)`, then the holder. The holder's lock is gone the moment its
/// session is closed, before it can know: its hold is trusted up to the expiry, its later
/// writes are fenced.
async fn expire_sessions(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let hosts = ctx.cluster.connect_string();
    let addrs: Vec<_> = ctx.cluster.members().iter().map(|m| m.addr()).collect();
    let sc = Scenario::new("expire-sessions", true, move |_, idx| Connect {
        hosts: hosts.clone(),
        proxy_to: (idx <= 2).then(|| addrs[idx % addrs.len()]),
        requeue: idx != 2,
        flaky: false,
        revocable: false,
    })
    .await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let victims = sc.victims();
        let mut tasks = sc.start_victims(&victims, &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        for set in &sc.sets {
            let targets = [&set.others[0], &set.others[1], set.victim.as_ref().unwrap()];
            for c in targets {
                let start = monotonic_nanos();
                let expired = expire(c).await;
                let end = monotonic_nanos();
                match expired {
                    Ok(()) => {
                        set.run
                            .window(window(&c.who, "forced session expiry", start, end, true))
                    }
                    Err(e) => set.run.failure(format!("could not expire {}: {e}", c.who)),
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}

/// Expires a contender's session through its own proxy, retrying while it is between sessions.
async fn expire(c: &Contender) -> zk_recipes::testing::Result<()> {
    let proxy = c
        .proxy
        .as_ref()
        .expect("an expiry target has its own proxy");
    let mut last = None;
    for _ in 0..20 {
        match tokio::time::timeout(QUICK, proxy.expire(&c.session)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(zk_recipes::Error::Timeout.into()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last.unwrap())
}

/// The victims are child processes (`tests/bin/chaos_child.rs`). Each is frozen with SIGSTOP
/// while it holds, for longer than the session timeout, then continued: it must report
/// `REL … lost`, and the writes it may still make with its old token must be refused by the
/// store, since a newer holder has written in the meantime.
async fn pause_holder_process(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let hosts = ctx.cluster.connect_string();
    let sc = Scenario::new("pause-holder-process", false, all_hosts(ctx)).await;
    let bin = child_bin();
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let mut peers = Vec::new();
        for set in &sc.sets {
            let timeout_ms = SESSION_TIMEOUT.as_millis().to_string();
            let args = [
                hosts.as_str(),
                set.run.recipe.child_arg(),
                set.run.dir.as_str(),
                "1",
                // Longer than the pause: the hold can only end in a loss notice.
                "8000",
                timeout_ms.as_str(),
            ];
            let child = Command::new(&bin)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn chaos_child");
            peers.push(Peer::new(
                &format!("{}-child{round}", set.run.recipe.short()),
                child,
            ));
        }
        let mut held = Vec::new();
        for (set, peer) in sc.sets.iter().zip(peers.iter_mut()) {
            let acq = block_in_place(|| {
                peer.wait_for(QUICK, |l| {
                    matches!(
                        l,
                        crate::support::history::InteropLine::Acq { .. }
                            | crate::support::history::InteropLine::Err(_)
                    )
                })
            });
            match acq {
                Some(crate::support::history::InteropLine::Acq { id, .. }) => held.push(Some(id)),
                other => {
                    set.run.failure(format!(
                        "child {} did not acquire within {QUICK:?}: {other:?}; output:\n{}",
                        peer.label,
                        peer.lines.join("\n")
                    ));
                    held.push(None);
                }
            }
        }
        let tasks = sc.start_others(round, |_| 1);
        tokio::time::sleep(SETTLE).await;
        let start = monotonic_nanos();
        for peer in &peers {
            signal(peer.pid().expect("child pid"), libc::SIGSTOP);
        }
        tokio::time::sleep(SESSION_TIMEOUT + Duration::from_millis(1500)).await;
        // Taken before the children run again: anything they print later is post-resume.
        let end = monotonic_nanos();
        for peer in &peers {
            signal(peer.pid().expect("child pid"), libc::SIGCONT);
        }
        for ((set, peer), id) in sc.sets.iter().zip(peers.iter_mut()).zip(&held) {
            let Some(id) = id else { continue };
            let mut w = window(id, "SIGSTOP of the holder process", start, end, true);
            w.no_writes_after_end = true;
            set.run.window(w);
            let told = block_in_place(|| {
                peer.wait_for(Duration::from_secs(10), |l| {
                    matches!(
                        l,
                        crate::support::history::InteropLine::Rel { lost: true, .. }
                    )
                })
            });
            if told.is_none() {
                set.run.failure(format!(
                    "child {id} was frozen past its session timeout while holding and did not report REL … lost within 10s of resuming; output:\n{}",
                    peer.lines.join("\n")
                ));
            }
        }
        sc.finish(tasks).await;
        for (set, peer) in sc.sets.iter().zip(peers) {
            let label = peer.label.clone();
            let history = block_in_place(|| peer.finish(QUICK));
            if !history.is_ok() {
                set.run.failure(format!(
                    "child {label} did not finish cleanly: status {:?}, errors {:?}; output:\n{}",
                    history.status,
                    history.collector.errors,
                    history.lines.join("\n")
                ));
            }
            record_child(&set.run, &history.lines);
        }
    }
    sc.end(ctx).await
}

/// Turns a child's protocol lines into holds and writes of the run's journal.
fn record_child(run: &Run, lines: &[String]) {
    let mut open: Option<(u64, Kind, String, i64)> = None;
    let mut j = run.journal();
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["ACQ", ns, kind, id, _node, token] => {
                if let (Ok(ns), Some(kind), Ok(token)) =
                    (ns.parse(), Kind::from_protocol(kind), token.parse())
                {
                    open = Some((ns, kind, id.to_string(), token));
                }
            }
            ["WRITE", ns, token] => {
                if let (Ok(ns), Ok(token), Some((_, _, id, _))) = (ns.parse(), token.parse(), &open)
                {
                    j.writes.push(Write {
                        ns,
                        token,
                        who: id.clone(),
                    });
                }
            }
            ["REL", ns, _kind, _id, rest @ ..] => {
                if let (Ok(ns), Some((acq, kind, id, token))) = (ns.parse(), open.take()) {
                    j.holds.push(Hold {
                        who: id,
                        kind,
                        acquired_ns: acq,
                        released_ns: ns,
                        token,
                        lost: rest.first() == Some(&"lost"),
                    });
                }
            }
            _ => {}
        }
    }
    if let Some((acq, kind, id, token)) = open {
        // Still holding when its output ended: count it as holding until now.
        j.holds.push(Hold {
            who: id,
            kind,
            acquired_ns: acq,
            released_ns: monotonic_nanos(),
            token,
            lost: false,
        });
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a child we spawned.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// The victim program (`tests/bin/chaos_child.rs`), built by cargo with this test.
fn child_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chaos_child"))
}

/// An administrator deletes each victim's node while it holds: the victim must be told
/// (NodeDeleted), its hold is trusted up to the delete, the next contender takes over.
async fn delete_holder_node(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let sc = Scenario::new("delete-holder-node", true, all_hosts(ctx)).await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let victims = sc.victims();
        let mut tasks = sc.start_victims(&victims, &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        let admin = raw(&ctx.cluster).await;
        for (set, v) in sc.sets.iter().zip(&victims) {
            let Some(Status::Holding { path }) = set.run.status(&v.who) else {
                set.run
                    .failure(format!("victim {} was not holding at the fault", v.who));
                continue;
            };
            let start = monotonic_nanos();
            let deleted = tokio::time::timeout(QUICK, admin.delete(&path, None)).await;
            let end = monotonic_nanos();
            match deleted {
                Ok(Ok(())) => set.run.window(window(
                    &v.who,
                    "administrator deleted its node",
                    start,
                    end,
                    true,
                )),
                other => set
                    .run
                    .failure(format!("administrator delete of {path}: {other:?}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}

/// Every contender's locks are revocable; while the victims hold and the others queue, a
/// revoker asks every holder to let go (`revoke_holders`). A victim must release within a
/// second (the simple lock, which cannot be revoked, is not asked and holds on); the request
/// must never hand the lock on by itself (the overlap check), and no request node may be left.
async fn revoke_holder(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let hosts = ctx.cluster.connect_string();
    let sc = Scenario::new("revoke-holder", true, move |_, _| Connect {
        hosts: hosts.clone(),
        requeue: true,
        revocable: true,
        ..Connect::default()
    })
    .await;
    let revoker = zk_recipes::Session::builder(ctx.cluster.connect_string())
        .with_session_timeout(SESSION_TIMEOUT)
        .connect()
        .await
        .expect("the revoker connects");
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let victims = sc.victims();
        let mut tasks = sc.start_victims(&victims, &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        for (set, v) in sc.sets.iter().zip(&victims) {
            let dir = lock_dirs(set.run.recipe, &set.run.dir).remove(0);
            let asked =
                match tokio::time::timeout(QUICK, zk_recipes::revoke_holders(&revoker, &dir)).await
                {
                    Ok(Ok(asked)) => asked,
                    other => {
                        set.run.failure(format!("revoke_holders({dir}): {other:?}"));
                        continue;
                    }
                };
            if set.run.recipe == Recipe::Simple {
                continue;
            }
            if asked.is_empty() {
                set.run.failure(format!(
                    "revoke_holders({dir}) found no holder while {} held",
                    v.who
                ));
                continue;
            }
            let deadline = Instant::now() + Duration::from_secs(1);
            while matches!(set.run.status(&v.who), Some(Status::Holding { .. })) {
                if Instant::now() >= deadline {
                    set.run.failure(format!(
                        "victim {} did not let go within 1 s of a revocation request",
                        v.who
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(15), revoker.close()).await;
    sc.end(ctx).await
}

/// An administrator deletes every child of the lock directory and the directory itself while
/// a victim holds and the others wait: holders are told, waiters re-queue (the directory is
/// made again), and everyone gets through.
async fn delete_lock_dir(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let sc = Scenario::new("delete-lock-dir", true, all_hosts(ctx)).await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let victims = sc.victims();
        let mut tasks = sc.start_victims(&victims, &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        let admin = raw(&ctx.cluster).await;
        for set in &sc.sets {
            let start = monotonic_nanos();
            let result = delete_tree(&admin, &set.run.dir).await;
            let end = monotonic_nanos();
            if let Err(e) = result {
                set.run.failure(format!(
                    "administrator could not delete {}: {e}",
                    set.run.dir
                ));
            }
            for who in sc.whos(set) {
                set.run.window(window(
                    &who,
                    "administrator deleted the lock directory",
                    start,
                    end,
                    true,
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}

/// Deletes `dir` and everything below it (waiters may re-create children meanwhile: try
/// again).
async fn delete_tree(client: &zk::Client, dir: &str) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..50 {
        let kids = children(client, dir).await.map_err(|e| e.to_string())?;
        // A multi-lock's directory holds lock directories: delete those as trees.
        let nested = |k: &String| zk_recipes::NodeName::parse(k).is_none() && k != "lock";
        for k in kids.iter().filter(|k| nested(k)) {
            Box::pin(delete_tree(client, &format!("{dir}/{k}"))).await?;
        }
        let deletes: Vec<_> = kids
            .iter()
            .filter(|k| !nested(k))
            .map(|k| client.delete(&format!("{dir}/{k}"), None))
            .collect();
        for d in deletes {
            match d.await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        match client.delete(dir, None).await {
            Ok(()) | Err(zk::Error::NoNode) => return Ok(()),
            Err(zk::Error::NotEmpty) => last = "NotEmpty".into(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("still not deleted after 50 attempts ({last})"))
}

/// Three contenders per recipe connect through proxies of their own and cut their connection
/// right after each create is sent (0–4 ms later), three times per round: the create may or
/// may not have been applied. No orphan node may block the queue, no two may hold.
async fn drop_during_create(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let hosts = ctx.cluster.connect_string();
    let addrs: Vec<_> = ctx.cluster.members().iter().map(|m| m.addr()).collect();
    let sc = Scenario::new("drop-during-create", true, move |_, idx| {
        let flaky = (1..=3).contains(&idx);
        Connect {
            hosts: hosts.clone(),
            proxy_to: flaky.then(|| addrs[idx % addrs.len()]),
            requeue: true,
            flaky,
            revocable: false,
        }
    })
    .await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let mut tasks = sc.start_victims(&sc.victims(), &release).await;
        tasks.extend(sc.start_others(round, |c| if c.flaky { 3 } else { 1 }));
        tokio::time::sleep(SETTLE + Duration::from_millis(200)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}

/// Every member dies (SIGKILL) for longer than the session timeout and comes back. Holders
/// must be told; waiters re-queue, or (half of them, with `with_requeue_on_expiry(false)`) fail
/// with `SessionExpired`.
async fn restart_ensemble(ctx: &mut Ctx) -> Vec<Row> {
    heal(&mut ctx.cluster);
    let hosts = ctx.cluster.connect_string();
    let sc = Scenario::new("restart-ensemble", true, move |_, idx| Connect {
        hosts: hosts.clone(),
        requeue: idx % 2 == 0,
        ..Connect::default()
    })
    .await;
    for round in 0..ctx.rounds {
        heal(&mut ctx.cluster);
        let release = CancellationToken::new();
        let mut tasks = sc.start_victims(&sc.victims(), &release).await;
        tasks.extend(sc.start_others(round, |_| 1));
        tokio::time::sleep(SETTLE).await;
        let start = monotonic_nanos();
        block_in_place(|| {
            for i in 0..ctx.cluster.members().len() {
                ctx.cluster.member_mut(i).kill().expect("kill a member");
            }
        });
        tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(1)).await;
        block_in_place(|| ctx.cluster.restart_all()).expect("restart the ensemble");
        let end = monotonic_nanos();
        for set in &sc.sets {
            for who in sc.whos(set) {
                set.run
                    .window(window(&who, "whole-ensemble restart", start, end, false));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        release.cancel();
        sc.finish(tasks).await;
    }
    sc.end(ctx).await
}
